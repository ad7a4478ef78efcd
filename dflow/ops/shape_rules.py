"""Shape rules shared by many ops. Shapes are tuples with ``None`` for unknown
dims; a whole shape of ``None`` means unknown rank."""

from __future__ import annotations

from .registry import ShapeError, Spec


def fmt(shape) -> str:
    if shape is None:
        return "<unknown>"
    dims = ", ".join("?" if d is None else str(d) for d in shape)
    return f"({dims},)" if len(shape) == 1 else f"({dims})"


def broadcast(a, b):
    """NumPy broadcasting of two static shapes; raises ShapeError naming both."""
    if a is None or b is None:
        return None
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        da = a[-i] if i <= len(a) else 1
        db = b[-i] if i <= len(b) else 1
        if da == 1 or da is None and db != 1:
            out.append(db)
        elif db == 1 or db is None:
            out.append(da)
        elif da == db:
            out.append(da)
        else:
            raise ShapeError(f"shapes {fmt(a)} and {fmt(b)} cannot be broadcast together")
    return tuple(reversed(out))


def normalize_axis(axis, rank, what="axis"):
    """Axis or axes as a tuple of non-negative ints (``None`` = all axes)."""
    if rank is None:
        return None if axis is None else axis
    if axis is None:
        return tuple(range(rank))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    out = []
    for ax in axes:
        if not -rank <= ax < rank:
            raise ShapeError(f"{what} {ax} is out of range for a tensor of rank {rank}")
        out.append(ax % rank)
    return tuple(out)


def reduced(shape, axis, keepdims):
    if shape is None:
        return None
    axes = normalize_axis(axis, len(shape))
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def same_as_input(inputs, **_):
    return [Spec(inputs[0].shape, inputs[0].dtype)]


def num_elements(shape):
    if shape is None or None in shape:
        return None
    n = 1
    for d in shape:
        n *= d
    return n
