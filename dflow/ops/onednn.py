"""oneDNN's convolutions, max pooling, LRN and MatMul for float32 NumPy arrays on x86-64: its JIT kernels.

dflow's own lowering (:mod:`.conv_lowering`) turns a convolution into matmuls and runs at
OpenBLAS's rate for their shapes, 150-180 GFLOP/s on 2 AVX-512 cores, and a third of that for
a first layer's thin product (K = 25 or 75). Intel's oneDNN, the library under TensorFlow's
and PyTorch's CPU convolutions, JIT-compiles direct kernels for the machine's vector width
that reach 250-280 GFLOP/s on the same layers, 2-4x on the first ones (``docs/kernels.md``).
It is a declared dependency on x86-64 Linux (``onednn-cpu-tbb``: the library alone, built
on TBB), reached through its C API with ctypes: NHWC activations and HWIO filters
are oneDNN's ``nhwc`` and ``hwio`` layouts, read and written in place; only the filter is
reordered to the blocked layout the kernel chose (a few hundred KiB). Its LRN (TF's
``tf.nn.lrn``, across channels) is 5-8x dflow's band-matrix product, its GEMM 1.1-1.3x
OpenBLAS's on dense layers from 1 Mi multiply-adds. Its max pooling keeps, for the gradient, a
workspace of each window's maximal element (a byte per output), from which the backward pass
routes the gradient without reading the input again (TF's oneDNN MaxPool returns the same
workspace as a second output).

Where oneDNN's JIT has no kernel for a shape it picks its reference one, a plain C loop, silently;
dflow refuses those and runs its lowering (an AVX2 machine's LRN of the CIFAR-10 model was 3-17x
slower in oneDNN's reference kernels). Where the library cannot be loaded (another platform, a
missing runtime) dflow says so once and its own lowering runs; other namespaces (CuPy,
``array_api_strict``) and dtypes always take it. Each (direction, shapes, geometry) is compiled
once a process and cached; each call gets its own scratchpad, so two ops may run at once from the
executor's threads. Every plan runs on TBB's threads, at most :func:`parallel.cores` (the count the
process was given for BLAS). TBB rather than GNU OpenMP (``onednn-cpu-gomp``, the same oneDNN 3.2):
its threads wait for the next primitive a moment before they sleep, where OpenMP's slept at once
(spinning, they took the cores that dflow's own pieces needed) and each primitive paid their
wake-up, 40-100 us on a 2-core VM. Against that build: CIFAR-10 without LRN 1.05-1.33x, MNIST-DNN
1.20-1.30x (docs/kernels.md).

>>> import numpy
>>> x, w = numpy.ones((1, 3, 3, 1), numpy.float32), numpy.ones((3, 3, 1, 1), numpy.float32)
>>> y = conv2d(x, w, strides=(1, 1), dilations=(1, 1), pads=(1, 1, 1, 1), out_hw=(3, 3))
>>> y[0, :, :, 0].tolist()
[[4.0, 6.0, 4.0], [6.0, 9.0, 6.0], [4.0, 6.0, 4.0]]
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import signal
import sys
import threading

import array_api_compat
import numpy

from . import denormals, parallel

__all__ = ["available", "takes", "conv2d", "conv2d_input_grad", "conv2d_filter_grad", "max_pool",
           "max_pool_grad", "lrn", "lrn_for_grad", "lrn_grad", "matmul"]

log = logging.getLogger("dflow")

# the C API's constants (oneapi/dnnl/dnnl_types.h, oneDNN 3.x)
_F32, _TAG_ANY, _TAG_A, _TAG_AB, _TAG_BA, _TAG_NHWC, _TAG_HWIO = 3, 1, 2, 3, 14, 22, 28
_FORWARD_TRAINING, _FORWARD_INFERENCE, _DIRECT, _LRN_ACROSS_CHANNELS = 64, 96, 1, 0xaff
_POOLING_MAX = 0x1ff
# a post-op's algorithm, by the name of the TF op it stands for
_ELTWISE = {"Relu": 0x20, "Tanh": 0x21, "Sigmoid": 0x29}
_CPU, _IN_ORDER, _SCRATCHPAD_USER = 1, 1, 1
_ARG_SRC, _ARG_DST, _ARG_WEIGHTS, _ARG_BIAS, _ARG_WORKSPACE, _ARG_SCRATCHPAD = 1, 17, 33, 41, 64, 80
_ARG_DIFF_SRC, _ARG_DIFF_DST, _ARG_DIFF_WEIGHTS, _ARG_DIFF_BIAS = 129, 145, 161, 169
_QUERY_WEIGHTS_MD, _QUERY_DIFF_WEIGHTS_MD, _QUERY_WORKSPACE_MD, _QUERY_SCRATCHPAD_MD = 131, 132, 135, 136
_QUERY_IMPL_INFO_STR = 8
_UNIMPLEMENTED = 3
_STATUS = {1: "out of memory", 2: "invalid arguments", 3: "unimplemented", 4: "iterator ends",
           5: "runtime error", 6: "not required"}

_handle = ctypes.c_void_p
_Dims = ctypes.c_int64 * 12


class _ExecArg(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_int), ("memory", _handle)]


class _GlobalControl(ctypes.Structure):
    """oneTBB's ``tbb::detail::d1::global_control`` (its 2021 ABI): a limit while it exists."""

    _fields_ = [("value", ctypes.c_size_t), ("reserved", ctypes.c_ssize_t), ("parameter", ctypes.c_int)]


_MAX_ALLOWED_PARALLELISM = 0  # global_control's first parameter


class _TbbThreads:
    """The most threads TBB runs oneDNN's work on: a ``global_control``, made and ended through
    the entry points libtbb exports for its C++ class (there is no C API)."""

    def __init__(self, tbb: ctypes.CDLL):
        self._create = tbb._ZN3tbb6detail2r16createERNS0_2d114global_controlE
        self._destroy = tbb._ZN3tbb6detail2r17destroyERNS0_2d114global_controlE
        self._active = tbb._ZN3tbb6detail2r127global_control_active_valueEi
        self._active.restype, self._active.argtypes = ctypes.c_size_t, [ctypes.c_int]
        self._control: _GlobalControl | None = None
        self._lock = threading.Lock()

    def limit(self, threads: int) -> None:
        """At most ``threads`` from now on (the last limit ended first: TBB keeps the smallest)."""
        if self._control is not None and self._control.value == threads:
            return
        with self._lock:
            if self._control is not None:
                self._destroy(ctypes.byref(self._control))
            self._control = _GlobalControl(threads, 0, _MAX_ALLOWED_PARALLELISM)
            self._create(ctypes.byref(self._control))

    def active(self) -> int:
        """The limit TBB applies now."""
        return self._active(_MAX_ALLOWED_PARALLELISM)


class _Library:
    """libdnnl and the TBB it runs its threads on, with one CPU engine."""

    def __init__(self, dnnl: ctypes.CDLL, threads: _TbbThreads):
        self.dnnl, self.threads = dnnl, threads
        self.pid = os.getpid()
        dnnl.dnnl_primitive_desc_query_md.restype = _handle
        dnnl.dnnl_primitive_desc_query_md.argtypes = [_handle, ctypes.c_int, ctypes.c_int]
        dnnl.dnnl_memory_desc_get_size.restype = ctypes.c_size_t
        dnnl.dnnl_primitive_desc_query.argtypes = [_handle, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
        dnnl.dnnl_memory_desc_get_size.argtypes = [_handle]
        real, size = ctypes.c_float, ctypes.c_int64  # LRN's parameters are C floats, not doubles
        dnnl.dnnl_lrn_forward_primitive_desc_create.argtypes = [
            _handle, _handle, ctypes.c_int, ctypes.c_int, _handle, _handle, size, real, real, real, _handle]
        dnnl.dnnl_lrn_backward_primitive_desc_create.argtypes = [
            _handle, _handle, ctypes.c_int, _handle, _handle, _handle, size, real, real, real, _handle,
            _handle]
        self.engine = _handle()
        self.check(dnnl.dnnl_engine_create(ctypes.byref(self.engine), _CPU, 0), "creating a CPU engine")
        self.attr = self._attributes()  # every primitive takes its scratchpad from the call: thread-safe
        # and an activation on the way out, by its op's name (TF's _FusedConv2D and _FusedMatMul)
        self.attr_then = {activation: self._attributes(activation) for activation in _ELTWISE}
        self._local = threading.local()

    def _attributes(self, activation: str | None = None) -> _handle:
        dnnl, attr = self.dnnl, _handle()
        self.check(dnnl.dnnl_primitive_attr_create(ctypes.byref(attr)), "creating attributes")
        self.check(dnnl.dnnl_primitive_attr_set_scratchpad_mode(attr, _SCRATCHPAD_USER),
                   "setting the scratchpad mode")
        if activation is not None:
            post_ops = _handle()
            self.check(dnnl.dnnl_post_ops_create(ctypes.byref(post_ops)), "creating post-ops")
            self.check(dnnl.dnnl_post_ops_append_eltwise(post_ops, _ELTWISE[activation], ctypes.c_float(0.0),
                                                         ctypes.c_float(0.0)), f"adding a {activation}")
            self.check(dnnl.dnnl_primitive_attr_set_post_ops(attr, post_ops), "setting post-ops")
            dnnl.dnnl_post_ops_destroy(post_ops)  # the attributes keep a copy
        return attr

    @staticmethod
    def check(status: int, what: str) -> None:
        if status != 0:
            raise RuntimeError(f"oneDNN failed {what}: {_STATUS.get(status, f'status {status}')}")

    def stream(self) -> _handle:
        """This thread's stream: the executor's threads may run two convolutions at once."""
        stream = getattr(self._local, "stream", None)
        if stream is None:
            stream = _handle()
            self.check(self.dnnl.dnnl_stream_create(ctypes.byref(stream), self.engine, _IN_ORDER),
                       "creating a stream")
            self._local.stream = stream
        return stream

    def md(self, dims, tag) -> _handle:
        md = _handle()
        self.check(self.dnnl.dnnl_memory_desc_create_with_tag(
            ctypes.byref(md), len(dims), _Dims(*dims), _F32, tag), "describing an array")
        return md

    def describe(self, create, *args, reference_ok: bool = False) -> _handle | None:
        """The primitive descriptor ``create(&desc, *args)`` makes; None where oneDNN has no
        kernel for it, or only its reference one (the caller's lowering runs instead).

        oneDNN's reference kernels are plain C loops, there for correctness: where its JIT has
        no kernel for a shape it picks one silently. An AVX2 machine has no JIT LRN for a window
        of 9 channels (the CIFAR-10 model's), nor any for LRN's backward over NHWC: 23 and 141 ms
        at batch 100 against 7 and 8 ms for dflow's lowering (``docs/kernels.md``)."""
        pd = _handle()
        status = create(ctypes.byref(pd), *args)
        if status == _UNIMPLEMENTED:
            return None
        self.check(status, "describing a primitive")
        if not reference_ok and self.implementation(pd).startswith("ref"):
            self.dnnl.dnnl_primitive_desc_destroy(pd)
            return None
        return pd

    def implementation(self, pd) -> str:
        """The name of the kernel oneDNN chose for ``pd``: ``jit:avx2``, ``brg:avx512_core``,
        ``ref:any``, ..."""
        name = ctypes.c_char_p()
        self.check(self.dnnl.dnnl_primitive_desc_query(pd, _QUERY_IMPL_INFO_STR, 0, ctypes.byref(name)),
                   "asking for a primitive's kernel")
        return (name.value or b"").decode()

    def reorder(self, src_md, dst_md) -> _Primitive:
        """A filter's reorder (kilobytes)."""
        return _Primitive(self, self.describe(self.dnnl.dnnl_reorder_primitive_desc_create,
                                              src_md, self.engine, dst_md, self.engine, self.attr,
                                              reference_ok=True))

    def query_md(self, pd, what: int) -> _handle:
        return _handle(self.dnnl.dnnl_primitive_desc_query_md(pd, what, 0))

    def size(self, md) -> int:
        return self.dnnl.dnnl_memory_desc_get_size(md)


# what libdnnl of onednn-cpu-tbb loads beside itself, loaded first from the same folder (the wheels
# put their libraries in the environment's lib/, which is not on the loader's path): Intel's
# compiler runtime (intel-cmplr-lib-rt, which that wheel does not declare), then TBB
_RUNTIME = ("libintlc.so.5", "libimf.so", "libtbb.so.12")


def _library_folders() -> list[str | None]:
    """Where to look for libdnnl and its runtime: the environment's lib/, then (None) the loader's
    own path."""
    return [os.path.join(sys.prefix, "lib"), None]


@functools.cache
def _library() -> _Library | None:
    if sys.platform != "linux" or os.environ.get("DFLOW_ONEDNN") == "0":  # 0: the lowering, to compare
        return None
    errors = []
    for folder in _library_folders():
        def path(name: str, folder=folder) -> str:
            return name if folder is None else os.path.join(folder, name)

        try:
            runtime = [ctypes.CDLL(path(name), mode=ctypes.RTLD_GLOBAL) for name in _RUNTIME]
            return _Library(ctypes.CDLL(path("libdnnl.so.3")), _TbbThreads(runtime[-1]))
        except (OSError, AttributeError, RuntimeError) as error:  # (AttributeError: another TBB's exports)
            errors.append(str(error))
    log.warning("oneDNN cannot be loaded (%s): dflow's own convolutions run instead, 1.5-4x slower; "
                "`pip install onednn-cpu-tbb intel-cmplr-lib-rt` (x86-64 Linux) brings it", "; ".join(errors))
    return None


def available() -> bool:
    """Whether oneDNN's kernels run in this process: not in a child forked after the library
    started its threads (a forked child has none of them; with GNU OpenMP it waited forever),
    where the lowering runs."""
    lib = _library()
    return lib is not None and lib.pid == os.getpid()


def takes(xp, *arrays) -> bool:
    """Whether oneDNN takes these arrays: float32 NumPy arrays, the library loaded."""
    if not array_api_compat.is_numpy_namespace(xp):
        return False
    if not all(isinstance(a, numpy.ndarray) and a.dtype == numpy.float32 for a in arrays):
        return False
    return available()


class _Primitive:
    """A compiled primitive, run over ``{argument: (memory desc, array)}`` with its own scratchpad."""

    def __init__(self, lib: _Library, pd: _handle):
        self.lib, self.pd = lib, pd  # the desc is kept: the memory descs queried from it live in it
        self.handle = _handle()
        lib.check(lib.dnnl.dnnl_primitive_create(ctypes.byref(self.handle), pd), "compiling a primitive")
        self.scratchpad_md = lib.query_md(pd, _QUERY_SCRATCHPAD_MD)
        self.scratchpad_bytes = lib.size(self.scratchpad_md)
        # each thread's memory objects for the arguments, made at its first run and pointed at
        # each run's arrays (making and destroying them every run cost more than some small
        # primitives' work); all threads' are destroyed with the primitive
        self._local = threading.local()
        self._memories: list[_handle] = []
        self._memories_lock = threading.Lock()

    def __del__(self):  # a plan evicted from the cache frees its compiled code
        for memory in self._memories:
            self.lib.dnnl.dnnl_memory_destroy(memory)
        self.lib.dnnl.dnnl_primitive_destroy(self.handle)
        self.lib.dnnl.dnnl_primitive_desc_destroy(self.pd)

    def _arguments(self, args: dict) -> tuple[list[_handle], ctypes.Array]:
        """This thread's memory objects for ``args`` (arguments and their descs) and the execute
        call's argument array over them."""
        key = tuple((arg, md.value) for arg, (md, _) in args.items())
        made = getattr(self._local, "made", None)
        if made is None or made[0] != key:
            memories = []
            for md, _ in args.values():
                memory = _handle()
                self.lib.check(self.lib.dnnl.dnnl_memory_create(ctypes.byref(memory), md, self.lib.engine,
                                                                None), "describing an argument")
                memories.append(memory)
            with self._memories_lock:
                self._memories.extend(memories)
            exec_args = (_ExecArg * len(args))(*(_ExecArg(a, m) for a, m in zip(args, memories)))
            made = self._local.made = (key, memories, exec_args)
        return made[1], made[2]

    def run(self, args: dict[int, tuple[_handle, numpy.ndarray]]) -> None:
        lib, dnnl = self.lib, self.lib.dnnl
        if self.scratchpad_bytes:
            scratchpad = numpy.empty(self.scratchpad_bytes, numpy.uint8)
            args = {**args, _ARG_SCRATCHPAD: (self.scratchpad_md, scratchpad)}
        memories, exec_args = self._arguments(args)
        for memory, (_, array) in zip(memories, args.values()):
            lib.check(dnnl.dnnl_memory_set_data_handle(memory, _handle(array.ctypes.data)),
                      "wrapping an array")
        lib.threads.limit(parallel.cores())  # the count the process was given (a number compared)
        stream = lib.stream()
        # (TBB's threads flush too: they take the modes of the thread that made their arena, here)
        # Ctrl-C and SIGTERM wait for the primitive: TBB's threads, made inside, inherit the mask
        # and never take them (a SIGINT during a GEMM damaged the heap, once in a few runs)
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        try:
            with denormals.flushed():
                lib.check(dnnl.dnnl_primitive_execute(self.handle, stream, len(args), exec_args),
                          "running a primitive")
                lib.check(dnnl.dnnl_stream_wait(stream), "waiting for a primitive")
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


class _ConvPlan:
    """One convolution compiled for one direction and geometry, and its filter's reorder; with
    ``bias`` the forward adds one per channel (and ``relu``: then its ReLU) and the filter's
    gradient comes with the bias's, each in the same pass over the output."""

    def __init__(self, lib: _Library, direction: str, x_shape, w_shape, y_shape, strides, dilations, pads,
                 bias=False, relu=False):
        n, h, w, c = x_shape
        kh, kw, _, o = w_shape
        self.lib, self.primitive = lib, None
        self.x_md = lib.md((n, c, h, w), _TAG_NHWC)  # oneDNN's dims are (N, C, H, W) in any layout
        self.y_md = lib.md((n, o, *y_shape[1:3]), _TAG_NHWC)
        self.w_md = lib.md((o, c, kh, kw), _TAG_HWIO)
        self.any_md = lib.md((o, c, kh, kw), _TAG_ANY)  # the kernel picks its blocked filter layout
        self.bias_md = lib.md((o,), _TAG_A) if bias else None
        top, bottom, left, right = pads
        geometry = (_Dims(*strides), _Dims(*(d - 1 for d in dilations)),  # oneDNN: 0 is no dilation
                    _Dims(top, left), _Dims(bottom, right))
        dnnl = lib.dnnl
        forward = lib.describe(dnnl.dnnl_convolution_forward_primitive_desc_create, lib.engine,
                               _FORWARD_TRAINING, _DIRECT, self.x_md, self.any_md, self.bias_md, self.y_md,
                               *geometry, lib.attr_then["Relu"] if relu else lib.attr)
        if forward is None:
            return
        if direction == "forward":
            pd = forward
        else:  # a backward pass is described with its forward's as a hint
            if direction == "input_grad":
                pd = lib.describe(dnnl.dnnl_convolution_backward_data_primitive_desc_create, lib.engine,
                                  _DIRECT, self.x_md, self.any_md, self.y_md, *geometry, forward, lib.attr)
            else:
                pd = lib.describe(dnnl.dnnl_convolution_backward_weights_primitive_desc_create,
                                  lib.engine, _DIRECT, self.x_md, self.any_md, self.bias_md, self.y_md,
                                  *geometry, forward, lib.attr)
            dnnl.dnnl_primitive_desc_destroy(forward)
            if pd is None:
                return
        self.primitive = _Primitive(lib, pd)
        if direction == "filter_grad":
            self.blocked_md = lib.query_md(pd, _QUERY_DIFF_WEIGHTS_MD)
            self.filter_reorder = lib.reorder(self.blocked_md, self.w_md)
        else:
            self.blocked_md = lib.query_md(pd, _QUERY_WEIGHTS_MD)
            self.filter_reorder = lib.reorder(self.w_md, self.blocked_md)
        self.blocked_bytes = lib.size(self.blocked_md)

    def __del__(self):
        for name in ("x_md", "y_md", "w_md", "any_md", "bias_md"):
            if getattr(self, name, None) is not None:  # not where __init__ failed before making it
                self.lib.dnnl.dnnl_memory_desc_destroy(getattr(self, name))

    def blocked_filter(self, w: numpy.ndarray) -> numpy.ndarray:
        blocked = numpy.empty(self.blocked_bytes, numpy.uint8)
        self.filter_reorder.run({_ARG_SRC: (self.w_md, w), _ARG_DST: (self.blocked_md, blocked)})
        return blocked


def _training_pair(plan, lib: _Library, forward: _handle, backward: _handle | None) -> None:
    """``plan.forward`` and ``plan.primitive`` (the backward) compiled, and the workspace that
    the forward writes for the backward described; where oneDNN has no backward, neither."""
    if backward is None:
        lib.dnnl.dnnl_primitive_desc_destroy(forward)
        return
    plan.forward, plan.primitive = _Primitive(lib, forward), _Primitive(lib, backward)
    plan.workspace_md = lib.query_md(forward, _QUERY_WORKSPACE_MD)
    plan.workspace_bytes = lib.size(plan.workspace_md)


class _LrnPlan:
    """TF's LRN over the channels of an NHWC array, or its gradient with the forward for training,
    which writes the workspace (the window sums) that oneDNN's backward reads."""

    def __init__(self, lib: _Library, direction: str, shape, depth_radius, bias, alpha, beta):
        n, h, w, c = shape
        self.lib, self.primitive = lib, None
        self.md = lib.md((n, c, h, w), _TAG_NHWC)
        size = 2 * depth_radius + 1
        # oneDNN scales the window's sum by alpha / size, TF's by alpha
        parameters = (size, alpha * size, beta, bias)
        dnnl = lib.dnnl
        forward = lib.describe(dnnl.dnnl_lrn_forward_primitive_desc_create, lib.engine,
                               _FORWARD_TRAINING if direction == "lrn_grad" else _FORWARD_INFERENCE,
                               _LRN_ACROSS_CHANNELS, self.md, self.md, *parameters, lib.attr)
        if forward is None:
            return
        if direction == "lrn":
            self.primitive = _Primitive(lib, forward)
            return
        backward = lib.describe(dnnl.dnnl_lrn_backward_primitive_desc_create, lib.engine,
                                _LRN_ACROSS_CHANNELS, self.md, self.md, self.md, *parameters, forward,
                                lib.attr)
        _training_pair(self, lib, forward, backward)

    def __del__(self):
        if hasattr(self, "md"):
            self.lib.dnnl.dnnl_memory_desc_destroy(self.md)


class _MaxPoolPlan:
    """Max pooling of an NHWC array for training: the forward, which writes the workspace, and
    the backward, which reads it instead of the input."""

    def __init__(self, lib: _Library, direction: str, x_shape, ksize, strides, pads, out_hw):
        n, h, w, c = x_shape
        self.lib, self.primitive = lib, None
        self.x_md = lib.md((n, c, h, w), _TAG_NHWC)
        self.y_md = lib.md((n, c, *out_hw), _TAG_NHWC)
        top, bottom, left, right = pads
        geometry = (_Dims(*strides), _Dims(*ksize), _Dims(0, 0), _Dims(top, left), _Dims(bottom, right))
        dnnl = lib.dnnl
        forward = lib.describe(dnnl.dnnl_pooling_forward_primitive_desc_create, lib.engine,
                               _FORWARD_TRAINING, _POOLING_MAX, self.x_md, self.y_md, *geometry, lib.attr)
        if forward is None:
            return
        backward = lib.describe(dnnl.dnnl_pooling_backward_primitive_desc_create, lib.engine, _POOLING_MAX,
                                self.x_md, self.y_md, *geometry, forward, lib.attr)
        _training_pair(self, lib, forward, backward)

    def __del__(self):
        for name in ("x_md", "y_md"):
            if hasattr(self, name):
                self.lib.dnnl.dnnl_memory_desc_destroy(getattr(self, name))


class _MatmulPlan:
    """``a @ b`` of 2-D arrays, each C-ordered or the transpose of a C-ordered one (``ba``); with
    ``bias`` plus a row of ``n``, then ``activation`` (a key of :data:`_ELTWISE`) where given."""

    def __init__(self, lib: _Library, direction: str, m, k, n, a_transposed, b_transposed, bias=False,
                 activation=None):
        self.lib, self.primitive = lib, None
        self.a_md = lib.md((m, k), _TAG_BA if a_transposed else _TAG_AB)
        self.b_md = lib.md((k, n), _TAG_BA if b_transposed else _TAG_AB)
        self.c_md = lib.md((m, n), _TAG_AB)
        self.bias_md = lib.md((1, n), _TAG_AB) if bias else None
        attr = lib.attr if activation is None else lib.attr_then[activation]
        pd = lib.describe(lib.dnnl.dnnl_matmul_primitive_desc_create, lib.engine, self.a_md, self.b_md,
                          self.bias_md, self.c_md, attr)
        if pd is not None:
            self.primitive = _Primitive(lib, pd)

    def __del__(self):
        for name in ("a_md", "b_md", "c_md", "bias_md"):
            if getattr(self, name, None) is not None:
                self.lib.dnnl.dnnl_memory_desc_destroy(getattr(self, name))


PLANS_KEPT = 256  # compiled primitives kept: a model's few shapes, and eval's other batch sizes
_PLANS = {"forward": _ConvPlan, "input_grad": _ConvPlan, "filter_grad": _ConvPlan,
          "max_pool": _MaxPoolPlan, "lrn": _LrnPlan, "lrn_grad": _LrnPlan, "matmul": _MatmulPlan}


@functools.lru_cache(maxsize=PLANS_KEPT)
def _compiled(cores: int, direction, *key):  # cores: a plan is compiled for a thread count
    return _PLANS[direction](_library(), direction, *key)


_compile_lock = threading.Lock()


def _plan_of(direction, *key):
    """The compiled plan, None where oneDNN has no kernel for it."""
    with _compile_lock:  # compiling takes milliseconds, once a shape: one thread does it
        plan = _compiled(parallel.cores(), direction, *key)
    return None if plan.primitive is None else plan


def _conv_plan(direction, x_shape, w_shape, y_shape, strides, dilations, pads, bias=False,
               relu=False) -> _ConvPlan | None:
    key = (direction, tuple(x_shape), tuple(w_shape), tuple(y_shape), tuple(strides),
           tuple(dilations), tuple(pads), bias, relu)
    if 0 in key[1] + key[2] + key[3]:  # an empty batch or image: nothing for a kernel to do
        return None
    return _plan_of(*key)


def conv2d(x, w, strides, dilations, pads, out_hw, bias=None, relu=False) -> numpy.ndarray | None:
    """``y`` of an NHWC ``x`` and HWIO ``w`` with TF's ``pads`` ``(top, bottom, left, right)``,
    plus ``bias`` per channel where given, then ``max(y, 0)`` with ``relu`` (TF's
    ``_FusedConv2D``: one pass over ``y``); None where oneDNN has no kernel for the geometry."""
    x, w = numpy.ascontiguousarray(x), numpy.ascontiguousarray(w)
    y = numpy.empty((x.shape[0], *out_hw, w.shape[3]), numpy.float32)
    plan = _conv_plan("forward", x.shape, w.shape, y.shape, strides, dilations, pads, bias is not None, relu)
    if plan is None:
        return None
    args = {_ARG_SRC: (plan.x_md, x), _ARG_DST: (plan.y_md, y),
            _ARG_WEIGHTS: (plan.blocked_md, plan.blocked_filter(w))}
    if bias is not None:
        args[_ARG_BIAS] = (plan.bias_md, numpy.ascontiguousarray(bias))
    plan.primitive.run(args)
    return y


def conv2d_input_grad(dy, w, input_shape, strides, dilations, pads) -> numpy.ndarray | None:
    """dL/dx of :func:`conv2d` from ``dy``; None where oneDNN has no kernel for it."""
    dy, w = numpy.ascontiguousarray(dy), numpy.ascontiguousarray(w)
    dx = numpy.empty(tuple(input_shape), numpy.float32)
    plan = _conv_plan("input_grad", dx.shape, w.shape, dy.shape, strides, dilations, pads)
    if plan is None:
        return None
    plan.primitive.run({_ARG_DIFF_DST: (plan.y_md, dy), _ARG_DIFF_SRC: (plan.x_md, dx),
                        _ARG_WEIGHTS: (plan.blocked_md, plan.blocked_filter(w))})
    return dx


def conv2d_filter_grad(x, dy, filter_shape, strides, dilations, pads, bias_grad=False):
    """dL/dw of :func:`conv2d` from ``x`` and ``dy``, and with ``bias_grad`` the pair (dL/dw,
    dL/db: ``dy`` summed per channel, TF's BiasAddGrad) from one pass; None where oneDNN has
    no kernel for it."""
    x, dy = numpy.ascontiguousarray(x), numpy.ascontiguousarray(dy)
    plan = _conv_plan("filter_grad", x.shape, tuple(filter_shape), dy.shape, strides, dilations, pads,
                      bias_grad)
    if plan is None:
        return None
    blocked = numpy.empty(plan.blocked_bytes, numpy.uint8)
    args = {_ARG_SRC: (plan.x_md, x), _ARG_DIFF_DST: (plan.y_md, dy),
            _ARG_DIFF_WEIGHTS: (plan.blocked_md, blocked)}
    if bias_grad:
        db = numpy.empty(filter_shape[3], numpy.float32)
        args[_ARG_DIFF_BIAS] = (plan.bias_md, db)
    plan.primitive.run(args)
    dw = numpy.empty(tuple(filter_shape), numpy.float32)
    plan.filter_reorder.run({_ARG_SRC: (plan.blocked_md, blocked), _ARG_DST: (plan.w_md, dw)})
    return (dw, db) if bias_grad else dw


def _max_pool_plan(x_shape, ksize, strides, pads, out_hw) -> _MaxPoolPlan | None:
    key = (tuple(x_shape), tuple(ksize), tuple(strides), tuple(pads), tuple(out_hw))
    return _plan_of("max_pool", *key) if 0 not in key[0] + key[4] else None


def max_pool(x, ksize, strides, pads, out_hw) -> tuple[numpy.ndarray, numpy.ndarray] | None:
    """``(y, workspace)``: the maximum over each ``ksize`` window of an NHWC ``x`` (TF's
    ``pads`` ``(top, bottom, left, right)``, which no window's maximum comes from), and where
    each maximum was, for :func:`max_pool_grad`; None where oneDNN has no kernel for it."""
    x = numpy.ascontiguousarray(x)
    plan = _max_pool_plan(x.shape, ksize, strides, pads, out_hw)
    if plan is None:
        return None
    y = numpy.empty((x.shape[0], *out_hw, x.shape[3]), numpy.float32)
    workspace = numpy.empty(plan.workspace_bytes, numpy.uint8)
    plan.forward.run({_ARG_SRC: (plan.x_md, x), _ARG_DST: (plan.y_md, y),
                      _ARG_WORKSPACE: (plan.workspace_md, workspace)})
    return y, workspace


def max_pool_grad(dy, workspace, x_shape, ksize, strides, pads, out=None) -> numpy.ndarray | None:
    """dL/dx of :func:`max_pool` from ``dy`` and the forward's ``workspace``: each window's
    gradient at its first maximal element (as TF's); into ``out`` where given (a C-ordered
    float32 array of ``x_shape``: the backward reads only ``dy`` and the workspace); None where
    oneDNN has no kernel for it."""
    dy = numpy.ascontiguousarray(dy)
    plan = _max_pool_plan(x_shape, ksize, strides, pads, dy.shape[1:3])
    if plan is None or workspace.size != plan.workspace_bytes:
        return None
    dx = numpy.empty(tuple(x_shape), numpy.float32) if out is None else out
    plan.primitive.run({_ARG_DIFF_DST: (plan.y_md, dy), _ARG_WORKSPACE: (plan.workspace_md, workspace),
                        _ARG_DIFF_SRC: (plan.x_md, dx)})
    return dx


def lrn(x, depth_radius, bias, alpha, beta) -> numpy.ndarray | None:
    """TF's LRN of an NHWC ``x``: ``x / (bias + alpha * sqr_sum) ** beta`` over the channel
    window ``d-r..d+r``; None where oneDNN has no kernel for it."""
    x = numpy.ascontiguousarray(x)
    key = (x.shape, int(depth_radius), float(bias), float(alpha), float(beta))
    plan = _plan_of("lrn", *key) if x.size else None
    if plan is None:
        return None
    y = numpy.empty_like(x)
    plan.primitive.run({_ARG_SRC: (plan.md, x), _ARG_DST: (plan.md, y)})
    return y


def lrn_for_grad(x, depth_radius, bias, alpha, beta) -> tuple[numpy.ndarray, numpy.ndarray] | None:
    """``(y, workspace)``: :func:`lrn` and the window sums it divided by, which :func:`lrn_grad`
    reads instead of making them again; None where oneDNN has no kernel for it."""
    x = numpy.ascontiguousarray(x)
    key = (x.shape, int(depth_radius), float(bias), float(alpha), float(beta))
    plan = _plan_of("lrn_grad", *key) if x.size else None
    if plan is None:
        return None
    y, workspace = numpy.empty_like(x), numpy.empty(plan.workspace_bytes, numpy.uint8)
    plan.forward.run({_ARG_SRC: (plan.md, x), _ARG_DST: (plan.md, y),
                      _ARG_WORKSPACE: (plan.workspace_md, workspace)})
    return y, workspace


def lrn_grad(dy, x, depth_radius, bias, alpha, beta, workspace=None) -> numpy.ndarray | None:
    """dL/dx of :func:`lrn` from ``dy`` and ``x``, and the ``workspace`` of :func:`lrn_for_grad`
    where given (else the forward runs again to make it); None where oneDNN has no kernel for it."""
    dy, x = numpy.ascontiguousarray(dy), numpy.ascontiguousarray(x)
    key = (x.shape, int(depth_radius), float(bias), float(alpha), float(beta))
    plan = _plan_of("lrn_grad", *key) if x.size else None
    if plan is None or (workspace is not None and workspace.size != plan.workspace_bytes):
        return None
    if workspace is None:
        _, workspace = lrn_for_grad(x, depth_radius, bias, alpha, beta)
    dx = numpy.empty_like(x)
    plan.primitive.run({_ARG_SRC: (plan.md, x), _ARG_DIFF_DST: (plan.md, dy),
                        _ARG_WORKSPACE: (plan.workspace_md, workspace), _ARG_DIFF_SRC: (plan.md, dx)})
    return dx


# multiply-adds: below, BLAS on one thread is faster (batch 1 and 10 products). With TBB's threads
# awake between primitives, oneDNN's two threads pay from 2 Mi on a 2-core Intel VM: 100 x 200 x 100
# 28 against 30 us, 100 x 784 x 100 73 against 115, 100 x 100 x 100 21 against 13 (docs/kernels.md)
MATMUL_FROM = 1 << 21


def _stored_transposed(a: numpy.ndarray) -> bool | None:
    """False for a C-ordered 2-D array, True for the transpose of one, None otherwise."""
    if a.flags.c_contiguous:
        return False
    return True if a.T.flags.c_contiguous else None


def matmul(a, b, bias=None, activation: str | None = None) -> numpy.ndarray | None:
    """``a @ b`` of two float32 matrices: oneDNN's AVX-512 GEMM (1.15-1.3x OpenBLAS's pieces
    on the dense layers here); with ``bias`` (float32, one per column) added and ``activation``
    (``"Relu"``, ``"Sigmoid"``, ``"Tanh"``) applied as each block of the product is made (TF's
    ``_FusedMatMul``); None for small products and where oneDNN has no kernel."""
    (m, k), n = a.shape, b.shape[1]
    if m * k * n < MATMUL_FROM or k == 1:
        return None
    a_transposed, b_transposed = _stored_transposed(a), _stored_transposed(b)
    if a_transposed is None:
        a, a_transposed = numpy.ascontiguousarray(a), False
    if b_transposed is None:
        b, b_transposed = numpy.ascontiguousarray(b), False
    plan = _plan_of("matmul", m, k, n, a_transposed, b_transposed, bias is not None, activation)
    if plan is None:
        return None
    c = numpy.empty((m, n), numpy.float32)
    args = {_ARG_SRC: (plan.a_md, a), _ARG_WEIGHTS: (plan.b_md, b), _ARG_DST: (plan.c_md, c)}
    if bias is not None:
        args[_ARG_BIAS] = (plan.bias_md, numpy.ascontiguousarray(bias))
    plan.primitive.run(args)
    return c
