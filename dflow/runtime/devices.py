"""Array namespaces per device kind: NumPy for CPUs, CuPy for GPUs when one exists.

CuPy is optional: it is imported only here, only when a plan asks for a GPU,
and a missing CuPy or GPU means soft placement on the CPU (logged once).
"""

from __future__ import annotations

import functools

import array_api_compat
import array_api_compat.numpy as numpy_namespace
import numpy

__all__ = ["numpy_namespace", "gpu_namespace", "to_namespace", "synchronize"]


@functools.cache
def gpu_namespace():
    """``array_api_compat.cupy`` when CuPy imports and sees a GPU, else None."""
    try:
        import cupy
    except ImportError:
        return None
    try:
        if not cupy.is_available():
            return None
    except Exception:  # a driver without a device raises instead of answering False
        return None
    import array_api_compat.cupy as cupy_namespace

    return cupy_namespace


def to_namespace(value, xp):
    """``value`` as an array of ``xp`` (copies between host and GPU only when they differ)."""
    if not hasattr(value, "shape"):
        return value  # Python objects (variable references) are device-free
    if xp is not numpy_namespace:
        return xp.asarray(value)  # no copy where it is one of xp's already
    if isinstance(value, (numpy.ndarray, numpy.generic)):
        return value
    return value.get() if array_api_compat.is_cupy_array(value) else numpy.asarray(value)


def synchronize(xp) -> None:
    """Return once the work queued on ``xp``'s device is done (CuPy's kernels run
    asynchronously; other namespaces compute as they are called)."""
    if array_api_compat.is_cupy_namespace(xp):
        import cupy

        cupy.cuda.get_current_stream().synchronize()
