"""Array namespaces per device kind: NumPy for CPUs, CuPy for GPUs when one exists.

CuPy is optional: it is imported only here, only when a plan asks for a GPU,
and a missing CuPy or GPU means soft placement on the CPU (logged once).
"""

from __future__ import annotations

import functools

import array_api_compat
import array_api_compat.numpy as numpy_namespace

__all__ = ["numpy_namespace", "gpu_namespace", "to_namespace"]


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
    if array_api_compat.is_cupy_array(value):
        return value if xp is not numpy_namespace else value.get()
    return value if xp is numpy_namespace else xp.asarray(value)
