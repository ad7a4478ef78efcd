"""Denormal floats flushed to zero while dflow's kernels compute, as TensorFlow's are.

A float32 under 1.2e-38 in magnitude (a denormal) costs the CPU a microcode assist in every
operation that reads or makes one. A net that has learned its training data makes them: its
loss's gradient is ``softmax - labels``, about 1e-40 where the loss is about zero, and so are
the products after it. A 784 x 100 x 300 weight gradient of such values took 52 ms where it
takes 0.32, and a TF 1.x MLP script's step 3.55 ms against TensorFlow's 1.55
(docs/kernels.md). TensorFlow computes no denormal: each thread of its pools runs with the
CPU's flush-to-zero and denormals-are-zero modes (``port::ScopedFlushDenormal``), so
``1e-20 * 1e-20`` is 0 in a TensorFlow session.

dflow does the same:

- :func:`flushed` sets the modes on the calling thread for a step (``executor.execute``) or
  a oneDNN primitive, and puts back what the thread had after it, so the caller's own NumPy
  code outside dflow keeps IEEE's gradual underflow (inside another, as a step's primitives
  are, it only counts);
- :func:`flush_on_this_thread` sets them for good on dflow's own pools' threads, which run
  nothing but its kernels;
- oneDNN's TBB worker threads take the modes of the thread whose primitive first made its
  arena, which runs inside :func:`flushed`.

The modes are bits of the thread's floating-point control register (x86-64's MXCSR: FTZ and
DAZ; AArch64's FPCR: FZ), read and written with the C library's ``fegetenv`` and
``fesetenv`` (0.75 us for a set and a restore). Elsewhere nothing is changed.

>>> import numpy
>>> with flushed():
...     tiny = numpy.float32(1e-20) * numpy.float32(1e-20)
>>> float(tiny) == 0.0 or not available()
True
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
import sys
import threading

__all__ = ["available", "flushed", "flush_on_this_thread"]

# where the control register lies in the C library's fenv_t (glibc's and musl's alike), and
# the bits of its flush modes
_LAYOUTS = {"x86_64": (28, 0x8040),  # MXCSR: flush to zero (bit 15), denormals are zero (bit 6)
            "aarch64": (0, 1 << 24)}  # FPCR: flush to zero (bit 24)
_ENV_BYTES = 64  # more than either fenv_t
# per thread (the register is the thread's own): its fenv_t buffer, how deep in flushed() it
# is, and the modes it had before the outermost one
_local = threading.local()


def _load():
    layout = _LAYOUTS.get(platform.machine()) if sys.platform.startswith("linux") else None
    if layout is None:
        return None
    try:
        libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
        get, put = libm.fegetenv, libm.fesetenv
    except (OSError, AttributeError):
        return None
    return get, put, *layout


_FENV = _load()


def available() -> bool:
    """Whether this machine's flush modes can be set (Linux on x86-64 or AArch64)."""
    return _FENV is not None


def _register():
    """This thread's fenv_t buffer and its control word, as a settable integer."""
    register = getattr(_local, "register", None)
    if register is None:
        buffer = ctypes.create_string_buffer(_ENV_BYTES)
        register = _local.register = (buffer, ctypes.c_uint32.from_buffer(buffer, _FENV[2]))
    return register


def flush_on_this_thread() -> None:
    """Flush denormals on the calling thread from now on (a pool thread's initializer)."""
    _FLUSHED.__enter__()  # and never left


class _Flushed:
    """The context of :func:`flushed`: one object for every thread and every depth. Inside
    another (a primitive in a step, anything on a pool's thread) it only counts, so a step's
    primitives pay an attribute's increment, not two library calls."""

    def __enter__(self) -> None:
        depth = getattr(_local, "depth", 0)
        _local.depth = depth + 1
        if depth == 0 and _FENV is not None:
            get, put, _, bits = _FENV
            buffer, word = _register()
            get(buffer)
            _local.had = word.value & bits
            word.value |= bits
            put(buffer)

    def __exit__(self, *_) -> None:
        _local.depth -= 1
        if _local.depth == 0 and _FENV is not None:
            get, put, _, bits = _FENV
            buffer, word = _register()
            get(buffer)  # (the status flags as they are now: NumPy reads them after each ufunc)
            word.value = word.value & ~bits | _local.had
            put(buffer)


_FLUSHED = _Flushed()


def flushed() -> _Flushed:
    """Denormals flushed to zero on the calling thread inside; its own modes back after."""
    return _FLUSHED
