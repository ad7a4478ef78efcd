"""``tf.sort``, ``tf.argsort`` (TF 1.13's, built on ``top_k`` as TF builds them, so ``sort`` has
``top_k``'s gradient) and ``tf.unique``.

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     x = tf.constant([3, 1, 2, 1])
...     values, order = tf.sort(x), tf.argsort(x, direction="DESCENDING")
...     (unique, index) = tf.unique(x)
...     [v.tolist() for v in tf.Session().run([values, order, unique, index])]
[[1, 1, 2, 3], [0, 2, 1, 3], [3, 1, 2], [0, 1, 2, 1]]
"""

from __future__ import annotations

import numpy

from .. import dtypes
from ..graph import Tensor, convert_to_tensor, get_default_graph
from ..runtime.devices import numpy_namespace, to_namespace
from .array_ops import transpose
from .nn_ops import top_k
from .registry import ShapeError, Spec, defop

__all__ = ["sort", "argsort", "unique", "setdiff1d"]


def sort(values, axis=-1, direction="ASCENDING", name=None) -> Tensor:
    """``values`` sorted along ``axis`` (the last by default), ``"ASCENDING"`` or ``"DESCENDING"``."""
    with get_default_graph().name_scope(name or "sort"):
        return _sorted(values, axis, direction)[0]


def argsort(values, axis=-1, direction="ASCENDING", stable=False, name=None) -> Tensor:
    """The int32 indices that sort ``values`` along ``axis``; equal values keep their order."""
    with get_default_graph().name_scope(name or "argsort"):
        return _sorted(values, axis, direction)[1]


def _sorted(values, axis: int, direction: str) -> tuple[Tensor, Tensor]:
    values = convert_to_tensor(values)
    if direction not in ("ASCENDING", "DESCENDING"):
        raise ValueError(f"direction must be 'ASCENDING' or 'DESCENDING', got {direction!r}")
    rank = values.shape.ndims
    if rank is None or rank == 0:
        raise ValueError(f"sort needs a tensor of known rank 1 or more, got shape {values.shape}")
    axis = int(axis) % rank
    perm = list(range(rank))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    moved = transpose(values, perm) if axis != rank - 1 else values
    count = moved.shape.as_list()[-1]
    if count is None:
        raise ValueError(f"sort needs the length of the sorted axis when the graph is built, got shape "
                         f"{values.shape}")
    ascending = direction == "ASCENDING"
    found, order = top_k(-moved if ascending else moved, count)
    found = -found if ascending else found
    if axis != rank - 1:
        found, order = transpose(found, perm), transpose(order, perm)
    return found, order


def _unique_infer(inputs, out_idx):
    if inputs[0].shape is not None and len(inputs[0].shape) != 1:
        raise ShapeError(f"unique takes a vector, got shape {inputs[0].shape}")
    return [Spec((None,), inputs[0].dtype), Spec(inputs[0].shape, out_idx)]


def _unique_kernel(xp, x, out_idx):
    host = numpy.asarray(to_namespace(x, numpy_namespace))
    _, first, inverse = numpy.unique(host, return_index=True, return_inverse=True)
    order = numpy.argsort(first)  # the values in order of first appearance, as TF gives them
    rank = numpy.empty_like(order)
    rank[order] = numpy.arange(len(order))
    unique = host[first[order]]
    index = rank[inverse.reshape(-1)].astype(out_idx.as_numpy_dtype)
    return (unique if host.dtype == object else xp.asarray(unique)), xp.asarray(index)


defop("Unique", _unique_infer, _unique_kernel, lambda op, *grads: [None], num_outputs=2, gpu=False)


def unique(x, out_idx=dtypes.int32, name=None) -> tuple[Tensor, Tensor]:
    """``(y, idx)``: the distinct values of the vector ``x`` in order of first appearance, and for
    each element of ``x`` its value's index in ``y`` (``x == tf.gather(y, idx)``)."""
    op = get_default_graph().create_op("Unique", [convert_to_tensor(x)],
                                       {"out_idx": dtypes.as_dtype(out_idx)}, name=name or "Unique")
    return op.outputs[0], op.outputs[1]


def _setdiff_kernel(xp, x, y, index_dtype):
    values, removed = (numpy.asarray(to_namespace(v, numpy_namespace)) for v in (x, y))
    keep = numpy.flatnonzero(~numpy.isin(values, removed))  # x's order, repeats kept, as TF's
    chosen = values[keep]
    return (chosen if values.dtype == object else xp.asarray(chosen),
            xp.asarray(keep.astype(index_dtype.as_numpy_dtype)))


defop("ListDiff", lambda inputs, index_dtype: [Spec((None,), inputs[0].dtype), Spec((None,), index_dtype)],
      _setdiff_kernel, lambda op, *grads: [None, None], num_outputs=2, gpu=False)


def setdiff1d(x, y, index_dtype=dtypes.int32, name=None) -> tuple[Tensor, Tensor]:
    """``(out, idx)``: the elements of the vector ``x`` not in ``y``, in ``x``'s order, and
    their positions in ``x``."""
    op = get_default_graph().create_op("ListDiff", [convert_to_tensor(x), convert_to_tensor(y)],
                                       {"index_dtype": dtypes.as_dtype(index_dtype)}, name=name or "ListDiff")
    return op.outputs[0], op.outputs[1]
