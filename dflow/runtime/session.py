"""``Session``: run the steps of a graph through a runner (:mod:`~dflow.runtime.runners`):
the passes of :mod:`~dflow.runtime.passes` plan each (fetches, feeds) signature once, and
the dependency-counting executor runs the plan in this process, or the cluster's workers
run its stages (``ConfigProto(runner=...)`` picks how).

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     x = tf.placeholder(tf.float32, [None])
...     y = tf.reduce_sum(x * 2.0)
...     with tf.Session() as sess:
...         float(sess.run(y, {x: [1.0, 2.0]}))
6.0
"""

from __future__ import annotations

import contextlib
import logging
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy

from ..context import default_sessions, get_default_session
from ..errors import InvalidArgumentError
from ..graph import Graph, Operation, Tensor, get_default_graph
from ..ops.parallel import restore_blas_threads, set_blas_threads
from ..ops.sparse_ops import SparseTensor, SparseTensorValue
from .devices import numpy_namespace, to_namespace
from .executor import RunStats
from .run_options import fill_run_metadata
from .runners import LocalRunner, Runner, make_runner
from .state import SessionState

__all__ = ["Session", "InteractiveSession", "ConfigProto", "GPUOptions", "GraphOptions", "OptimizerOptions",
           "get_default_session"]

log = logging.getLogger("dflow")


@dataclass
class GPUOptions:
    """TF 1.x's ``ConfigProto().gpu_options`` fields, accepted so that scripts which set them
    (``config.gpu_options.allow_growth = True``) run; CuPy's pool allocates on demand anyway."""

    allow_growth: bool = False
    per_process_gpu_memory_fraction: float = 0.0
    allocator_type: str = ""
    visible_device_list: str = ""
    deferred_deletion_bytes: int = 0
    polling_active_delay_usecs: int = 0
    force_gpu_compatible: bool = False
    experimental: Any = None


@dataclass
class OptimizerOptions:
    """TF 1.x's ``graph_options.optimizer_options``: accepted, no effect (dflow does not rewrite
    graphs)."""

    do_common_subexpression_elimination: bool = False
    do_constant_folding: bool = False
    do_function_inlining: bool = False
    opt_level: int = 0
    global_jit_level: int = 0


@dataclass
class GraphOptions:
    """TF 1.x's ``ConfigProto().graph_options``: accepted, no effect."""

    optimizer_options: OptimizerOptions = field(default_factory=OptimizerOptions)
    enable_bfloat16_sendrecv: bool = False
    build_cost_model: int = 0
    infer_shapes: bool = False
    place_pruned_graph: bool = False
    enable_recv_scheduling: bool = False
    rewrite_options: Any = None


@dataclass
class ConfigProto:
    """Session options under TF 1.x's names. ``device_count={"GPU": 0}`` hides this process's
    GPU from a local session, as in TF (its ops then run on the CPU); ``gpu_options`` is
    accepted, so TF scripts run, and has no effect."""

    # 0: one thread. Measured on 2 cores (CIFAR-10 CNN, batch 100): 2 inter-op threads
    # beside 2 BLAS threads ran 15% slower than ops one at a time.
    inter_op_parallelism_threads: int = 0
    intra_op_parallelism_threads: int = 0  # BLAS threads (process-wide); 0 leaves BLAS alone
    # TF's default: an op on a device this process lacks (/gpu:0 without a GPU, /job:ps) is an
    # error; True runs it on this process's CPU (TF would still refuse another job)
    allow_soft_placement: bool = False
    log_device_placement: bool = False
    # on a cluster: how long a step waits for another task's value (0: ten minutes)
    operation_timeout_in_ms: int = 0
    gpu_options: GPUOptions = field(default_factory=GPUOptions)
    device_count: Any = None
    # accepted for TF scripts (mnist_replica.py's ["/job:ps", "/job:worker/task:1"]): a dflow
    # session already sees, and waits for, only the tasks its graph is placed on
    device_filters: list[str] = field(default_factory=list)
    graph_options: GraphOptions = field(default_factory=GraphOptions)
    rpc_options: Any = None
    isolate_session_state: bool = False
    use_per_session_threads: bool = False
    placement_period: int = 0
    experimental: Any = None
    # dflow's own: what runs a step (dflow.runtime.runners.RUNNERS): "local", "direct" (stages
    # registered on the workers, one RPC per task) or "dask" (each stage one Dask task);
    # "" is local without a target, else direct (the README's "How a step runs" says why)
    runner: str = ""
    # dflow's own, runner="dask" only: a run that fetches only ops (a train op) and waits for no
    # other step returns once its step is submitted, leaving at most this many steps unfinished;
    # this session's later steps run after its updates, and its error raises from a later run
    # or from close (1: every run returns when its step is done, as in TF)
    steps_in_flight: int = 1

    def __post_init__(self):
        if self.gpu_options is None:
            self.gpu_options = GPUOptions()
        if self.graph_options is None:
            self.graph_options = GraphOptions()
        if not isinstance(self.steps_in_flight, int) or self.steps_in_flight < 1:
            raise ValueError(f"ConfigProto(steps_in_flight=) is how many steps a run may leave unfinished "
                             f"(1 or more), got {self.steps_in_flight!r}")
        bad = [f for f in self.device_filters if not (isinstance(f, str) and f.startswith("/job:"))]
        if bad:
            raise ValueError(f"ConfigProto(device_filters=) takes device names like '/job:ps' or "
                             f"'/job:worker/task:1', got {bad}")


class Session:
    """Runs ops and evaluates tensors of one graph, holding the variables' values.

    Parameters
    ----------
    target : str, optional
        Empty for this process (the default), or a Dask scheduler address
        (``cluster.target``) to run on that cluster's tasks: variables live on
        the task they are placed on, ops without a job run on
        ``/job:worker/task:0`` (or, inside a between-graph replica, on its own task).
    graph : Graph, optional
        Defaults to the default graph.
    config : ConfigProto, optional
        ``inter_op_parallelism_threads=1`` runs ops one by one in a fixed order.
    """

    def __init__(self, target: str = "", graph: Graph | None = None, config: ConfigProto | None = None):
        self.graph = graph or get_default_graph()
        self.config = config or ConfigProto()
        self.target = target
        self.runner: Runner = make_runner(target, self.graph, self.config)
        self._stats = threading.local()  # per thread: a chief's queue runner runs steps beside the loop's
        self._closed = False
        self._contexts: list = []
        self._blas_before = None
        if self.config.intra_op_parallelism_threads > 0:
            self._blas_before = set_blas_threads(self.config.intra_op_parallelism_threads)

    # ---- context management -----------------------------------------------
    def __enter__(self) -> Session:
        stack = contextlib.ExitStack()
        stack.enter_context(self.graph.as_default())
        stack.enter_context(default_sessions.pushed(self))
        self._contexts.append(stack)
        return self

    def __exit__(self, *exc) -> None:
        self._contexts.pop().close()
        self.close()

    @property
    def graph_def(self):
        """The session graph's GraphDef, as ``graph.as_graph_def()`` returns it (old scripts pass
        ``sess.graph_def`` to a FileWriter)."""
        return self.graph.as_graph_def()

    def as_default(self):
        return default_sessions.pushed(self)

    def close(self) -> None:
        if self._blas_before is not None and not self._closed:
            restore_blas_threads(self._blas_before)
        self._closed = True
        self.runner.close()

    @property
    def state(self) -> SessionState | None:
        """The variables and resources of a session that runs in this process (None on a cluster,
        whose tasks hold them)."""
        return getattr(self.runner, "state", None)

    @state.setter
    def state(self, state: SessionState) -> None:
        """Share another local session's variables (tests run between-graph replicas in one process)."""
        if not isinstance(self.runner, LocalRunner):
            raise ValueError("only a session that runs in this process holds its state; a cluster's tasks "
                             "hold theirs")
        self.runner.state = state

    @staticmethod
    def reset(target: str, containers=None, config: ConfigProto | None = None) -> None:
        """Forget every variable held by the tasks of the cluster at ``target`` (TF 1.x's
        ``tf.Session.reset``), and every collective's run count; sessions that are open
        there must re-initialize them.

        >>> tf.Session.reset(cluster.target)  # doctest: +SKIP
        """
        from ..distributed.runner import DirectRunner

        runner = DirectRunner(target, get_default_graph(), config or ConfigProto())
        try:
            runner.reset()
        finally:
            runner.close()

    # ---- running ---------------------------------------------------------------
    @property
    def last_run_stats(self) -> RunStats:
        """What this thread's last ``run`` measured (:class:`~dflow.runtime.executor.RunStats`)."""
        return getattr(self._stats, "last", None) or RunStats()

    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        """Evaluate ``fetches`` (a tensor, op, name or nested list/tuple/dict of them).

        Only the ops the fetches need run; fed tensors cut the graph there. Ops
        fetch as ``None``; tensors fetch as NumPy arrays (0-d as NumPy scalars).
        """
        if self._closed:
            raise RuntimeError("Attempted to use a closed Session")
        flat, rebuild = _flatten_fetches(fetches, self.graph)
        copied = not self.runner.copies_feeds  # else the runner's sending copies them
        feeds = self._convert_feeds(feed_dict or {}, copy=copied)
        plan = self.runner.plan(flat, feeds)
        traced = options is not None and getattr(options, "trace_level", 0) > 0
        stats = RunStats(op_spans=[] if traced else None)
        values = self.runner.run(plan, feeds, stats)
        values.update({f.name: feeds[f.name] if copied else numpy.array(feeds[f.name])
                       for f in flat if f.name in feeds})
        self._stats.last = stats
        if run_metadata is not None:
            fill_run_metadata(run_metadata, stats)
        results = [_to_host(values[f.name]) if isinstance(f, Tensor) else None for f in flat]
        return rebuild(results)

    def make_callable(self, fetches, feed_list=None):
        """A function running ``fetches`` with positional feeds (TF 1.x ``make_callable``)."""
        feed_list = list(feed_list or [])
        return lambda *values: self.run(fetches, dict(zip(feed_list, values)))

    # ---- planning ------------------------------------------------------------------
    def describe_placement(self, fetches, feed_dict=None) -> str:
        """Where each op of the step ``fetches`` runs, stage by stage, and (after one run of
        it) how many bytes crossed each link between tasks.

        >>> print(sess.describe_placement(train_op))  # doctest: +SKIP
        /job:ps/task:0 stage 0: 9 ops (w, w/read, ...)
        /job:worker/task:0 stage 1: 40 ops (...)
        /job:ps/task:0 stage 2: 8 ops (GradientDescent/update_w/ApplyGradientDescent, ...)
        bytes per step: /job:ps/task:0 -> /job:worker/task:0: 4,300,840 ...
        """
        flat, _ = _flatten_fetches(fetches, self.graph)
        lines = [self.runner.plan(flat, self._convert_feeds(feed_dict or {})).describe()]
        traffic = self.last_run_stats.bytes_sent
        if traffic:
            lines.append("bytes per step (last run):")
            lines += [f"  {src} -> {dst}: {count:,}" for (src, dst), count in sorted(traffic.items())]
        return "\n".join(lines)

    def _convert_feeds(self, feed_dict: dict, copy: bool = True) -> dict:
        """The fed values as arrays of their tensors' dtypes; each a copy where ``copy`` (the
        default), so that a variable assigned from a feed does not alias the caller's array."""
        feeds = {}
        for key, value in _sparse_feeds_spread(feed_dict):
            tensor = self.graph.as_graph_element(key)
            if isinstance(tensor, Operation):
                raise TypeError(f"cannot feed operation {tensor.name}; feed one of its output tensors")
            if tensor.dtype.name == "string":
                value = _as_bytes_feed(value)
            try:
                array = (numpy.array if copy else numpy.asarray)(value, dtype=tensor.dtype.as_numpy_dtype)
            except (TypeError, ValueError) as e:
                raise InvalidArgumentError(
                    f"cannot feed {type(value).__name__} to {tensor.name} ({tensor.dtype.name}): {e}"
                ) from None
            if not tensor.shape.is_compatible_with(array.shape):
                raise InvalidArgumentError(
                    f"Cannot feed value of shape {array.shape} for tensor '{tensor.name}', "
                    f"which has shape {tensor.shape}", op=tensor.op.name)
            feeds[tensor.name] = array
        return feeds


def _sparse_feeds_spread(feed_dict: dict):
    """The feeds, a SparseTensor's ``(indices, values, dense_shape)`` fed to its three tensors."""
    for key, value in feed_dict.items():
        if not isinstance(key, SparseTensor):
            yield key, value
            continue
        if not isinstance(value, (tuple, list)) or len(value) != 3:
            raise TypeError(f"a SparseTensor ({key.values.name}) is fed a tf.SparseTensorValue or a tuple "
                            f"(indices, values, dense_shape), got {type(value).__name__}")
        yield from zip((key.indices, key.values, key.dense_shape), value)


def _as_bytes_feed(value):
    """TF hands back a fed ``str`` as ``bytes`` (UTF-8), in arrays and lists too."""
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (list, tuple)) or (isinstance(value, numpy.ndarray) and value.dtype.kind in "UO"):
        return numpy.vectorize(lambda v: v.encode() if isinstance(v, str) else v, otypes=[object])(
            numpy.asarray(value, dtype=object))
    return value


class InteractiveSession(Session):
    """A session that makes itself the default on creation (for shells and notebooks)."""

    def __init__(self, target: str = "", graph: Graph | None = None, config: ConfigProto | None = None):
        super().__init__(target, graph, config)
        default_sessions.stack.append(self)

    def close(self) -> None:
        if self in default_sessions.stack:
            default_sessions.stack.remove(self)
        super().close()


def _to_host(value):
    # a copy: the caller may change what it fetched, and a variable's value must not follow
    array = numpy.array(to_namespace(value, numpy_namespace), copy=True)
    return array[()] if array.ndim == 0 else array


def _flatten_fetches(fetches, graph: Graph):
    """Flat list of graph elements, and a function rebuilding the user's structure."""
    if isinstance(fetches, (list, tuple)) and not hasattr(fetches, "_fields"):
        parts = [_flatten_fetches(f, graph) for f in fetches]
        return _join(parts, lambda values: type(fetches)(values))
    if isinstance(fetches, SparseTensor):  # as TF: its three arrays, as a SparseTensorValue
        parts = [_flatten_fetches(t, graph) for t in (fetches.indices, fetches.values, fetches.dense_shape)]
        return _join(parts, lambda values: SparseTensorValue(*values))
    if hasattr(fetches, "_fields"):  # namedtuple
        parts = [_flatten_fetches(f, graph) for f in fetches]
        return _join(parts, lambda values: type(fetches)(*values))
    if isinstance(fetches, dict):
        keys = list(fetches)
        parts = [_flatten_fetches(fetches[k], graph) for k in keys]
        return _join(parts, lambda values: type(fetches)(zip(keys, values)))
    if fetches is None:
        raise TypeError("Fetch argument None has invalid type; fetch a tensor, op or name")
    element = graph.as_graph_element(fetches)
    if isinstance(element, Tensor) and element.op.type == "VariableV2":  # 'w:0' fetches the value, as in TF
        element = graph.variable_value(element)
    return [element], lambda values: values[0]


def _join(parts, build):
    flat = [e for elements, _ in parts for e in elements]
    sizes = [len(elements) for elements, _ in parts]

    def rebuild(values):
        out, start = [], 0
        for (_, sub), n in zip(parts, sizes):
            out.append(sub(values[start:start + n]))
            start += n
        return build(out)

    return flat, rebuild
