"""TF 1.x array functions built of other ops, so their gradients come with them: band and
diagonal matrices (``tf.matrix_band_part`` masks a transformer's future positions), ``tf.roll``,
``tf.meshgrid``, segment sums and means, ``tf.bincount``, ``tf.confusion_matrix``, and a few
``tf.nn`` activations and convolutions of that kind.

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     causal = tf.matrix_band_part(tf.ones([3, 3]), -1, 0)  # the lower triangle
...     tf.Session().run(causal).tolist()
[[1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]
"""

from __future__ import annotations

from .. import dtypes
from ..graph import Tensor, convert_to_tensor, get_default_graph
from . import math_ops
from .array_ops import concat, constant, expand_dims, ones_like, range_, reshape, shape, stack, zeros
from .embedding_ops import gather, static_dim, unsorted_segment_sum

__all__ = ["matrix_band_part", "matrix_diag", "matrix_diag_part", "diag", "diag_part", "trace", "roll",
           "meshgrid", "segment_sum", "segment_mean", "unsorted_segment_mean", "bincount", "confusion_matrix",
           "scatter_nd", "swish", "crelu", "atrous_conv2d"]


def _dim(x: Tensor, axis: int):
    """A dim of ``x``: its int where the graph knows it, else a scalar tensor."""
    known = static_dim(x, axis)
    return known if known is not None else shape(x)[axis]


def _positions(count) -> Tensor:
    return range_(count, dtype=dtypes.int64)


def matrix_band_part(input, num_lower, num_upper, name=None) -> Tensor:  # noqa: A002 - TF's name
    """The innermost matrices with everything outside the band zeroed: ``num_lower`` diagonals
    below the main one and ``num_upper`` above it kept (negative: all of them)."""
    x = convert_to_tensor(input)
    with get_default_graph().name_scope(name or "MatrixBandPart"):
        rows = expand_dims(_positions(_dim(x, -2)), 1)
        columns = expand_dims(_positions(_dim(x, -1)), 0)
        below, above = rows - columns, columns - rows
        lower, upper = (math_ops.cast(n, dtypes.int64) for n in (num_lower, num_upper))
        keep = math_ops.logical_and(math_ops.logical_or(lower < 0, below <= lower),
                                    math_ops.logical_or(upper < 0, above <= upper))
        return x * math_ops.cast(keep, x.dtype)


def _identity_like(x: Tensor, size) -> Tensor:
    return math_ops.cast(math_ops.equal(expand_dims(_positions(size), 1), expand_dims(_positions(size), 0)),
                         x.dtype)


def matrix_diag(diagonal, name=None) -> Tensor:
    """``[..., N] -> [..., N, N]``: each vector on the diagonal of a matrix of zeros."""
    v = convert_to_tensor(diagonal)
    with get_default_graph().name_scope(name or "MatrixDiag"):
        return expand_dims(v, -1) * _identity_like(v, _dim(v, -1))


def matrix_diag_part(input, name=None) -> Tensor:  # noqa: A002
    """``[..., N, N] -> [..., N]``: each square matrix's diagonal."""
    x = convert_to_tensor(input)
    with get_default_graph().name_scope(name or "MatrixDiagPart"):
        return math_ops.reduce_sum(x * _identity_like(x, _dim(x, -1)), axis=-1)


def diag(diagonal, name=None) -> Tensor:
    """A vector's diagonal matrix (``tf.diag`` of rank 1: higher ranks are not supported)."""
    v = convert_to_tensor(diagonal)
    if v.shape.ndims != 1:
        raise ValueError(f"dflow's tf.diag takes a vector, got shape {v.shape}: use tf.matrix_diag for "
                         "batches")
    return matrix_diag(v, name=name or "Diag")


def diag_part(input, name=None) -> Tensor:  # noqa: A002
    """A square matrix's diagonal (``tf.diag_part`` of rank 2)."""
    x = convert_to_tensor(input)
    if x.shape.ndims != 2:
        raise ValueError(f"dflow's tf.diag_part takes a matrix, got shape {x.shape}: use tf.matrix_diag_part")
    return matrix_diag_part(x, name=name or "DiagPart")


def trace(x, name=None) -> Tensor:
    """The sum of each innermost square matrix's diagonal."""
    with get_default_graph().name_scope(name or "Trace"):
        return math_ops.reduce_sum(matrix_diag_part(x), axis=-1)


def roll(input, shift, axis, name=None) -> Tensor:  # noqa: A002
    """Elements shifted by ``shift`` along ``axis`` (each may be a list), those past the end
    coming back at the start: ``tf.roll([0, 1, 2, 3], 1, 0)`` is ``[3, 0, 1, 2]``."""
    x = convert_to_tensor(input)
    shifts = shift if isinstance(shift, (list, tuple)) else [shift]
    axes = axis if isinstance(axis, (list, tuple)) else [axis]
    if len(shifts) != len(axes):
        raise ValueError(f"roll takes one shift per axis, got shifts {shifts} and axes {axes}")
    with get_default_graph().name_scope(name or "Roll"):
        for s, a in zip(shifts, axes):
            count = _dim(x, a)
            sources = math_ops.floormod(_positions(count) - math_ops.cast(s, dtypes.int64), count)
            x = gather(x, sources, axis=a)
        return x


def meshgrid(*args, **kwargs) -> list[Tensor]:
    """Coordinate arrays of the grid the vectors ``args`` span; ``indexing="xy"`` (the default:
    the first two dims swapped, as NumPy's) or ``"ij"``."""
    indexing = kwargs.pop("indexing", "xy")
    kwargs.pop("name", None)
    if kwargs or indexing not in ("xy", "ij"):
        raise TypeError(f"meshgrid takes indexing='xy' or 'ij', got {indexing!r} and {sorted(kwargs)}")
    vectors = [reshape(convert_to_tensor(a), [-1]) for a in args]
    sizes = [_dim(v, 0) for v in vectors]
    if indexing == "xy" and len(vectors) > 1:
        sizes[0], sizes[1] = sizes[1], sizes[0]
    grids = []
    for k, v in enumerate(vectors):
        position = (1 - k if k < 2 else k) if indexing == "xy" and len(vectors) > 1 else k
        view = [1] * len(vectors)
        view[position] = -1
        grids.append(reshape(v, view) + zeros(sizes, dtype=v.dtype))  # broadcast to the grid
    return grids


def segment_sum(data, segment_ids, name=None) -> Tensor:
    """``out[k]`` the sum of the rows whose (sorted) id is ``k``; ids skipped give zeros."""
    ids = convert_to_tensor(segment_ids)
    with get_default_graph().name_scope(name or "SegmentSum"):
        return unsorted_segment_sum(data, ids, math_ops.reduce_max(ids) + 1)


def unsorted_segment_mean(data, segment_ids, num_segments, name=None) -> Tensor:
    """``out[k]`` the mean of the rows whose id is ``k`` (zeros where there are none)."""
    data = convert_to_tensor(data)
    with get_default_graph().name_scope(name or "UnsortedSegmentMean"):
        total = unsorted_segment_sum(data, segment_ids, num_segments)
        count = unsorted_segment_sum(ones_like(data), segment_ids, num_segments)
        return total / math_ops.maximum(count, 1)


def segment_mean(data, segment_ids, name=None) -> Tensor:
    """``out[k]`` the mean of the rows whose (sorted) id is ``k``."""
    ids = convert_to_tensor(segment_ids)
    with get_default_graph().name_scope(name or "SegmentMean"):
        return unsorted_segment_mean(data, ids, math_ops.reduce_max(ids) + 1)


def bincount(arr, weights=None, minlength=None, maxlength=None, dtype=dtypes.int32) -> Tensor:
    """How often each value ``0..max(arr)`` occurs in the int32 ``arr`` (or the sum of its
    ``weights``), at least ``minlength`` and at most ``maxlength`` bins."""
    values = reshape(convert_to_tensor(arr), [-1])
    with get_default_graph().name_scope("bincount"):
        bins = math_ops.maximum(math_ops.reduce_max(values) + 1, 0)
        if minlength is not None:
            bins = math_ops.maximum(bins, minlength)
        if maxlength is not None:
            bins = math_ops.minimum(bins, maxlength)
            values = math_ops.where(values < maxlength, values, -ones_like(values))  # a negative id: dropped
        counted = (ones_like(values, dtype=dtype) if weights is None
                   else reshape(convert_to_tensor(weights, dtype=dtype), [-1]))
        return unsorted_segment_sum(counted, values, bins)


def confusion_matrix(labels, predictions, num_classes=None, weights=None, dtype=dtypes.int32,
                     name=None) -> Tensor:
    """``[num_classes, num_classes]``: entry ``[i, j]`` counts (or sums ``weights`` of) the
    examples of label ``i`` predicted ``j``; ``num_classes`` defaults to the largest label or
    prediction plus one."""
    labels = math_ops.cast(reshape(convert_to_tensor(labels), [-1]), dtypes.int64)
    predictions = math_ops.cast(reshape(convert_to_tensor(predictions), [-1]), dtypes.int64)
    with get_default_graph().name_scope(name or "confusion_matrix"):
        if num_classes is None:
            num_classes = math_ops.maximum(math_ops.reduce_max(labels), math_ops.reduce_max(predictions)) + 1
        count = math_ops.cast(num_classes, dtypes.int64)
        cells = labels * count + predictions
        counted = (ones_like(cells, dtype=dtype) if weights is None
                   else reshape(convert_to_tensor(weights, dtype=dtype), [-1]))
        return reshape(unsorted_segment_sum(counted, cells, count * count), stack([count, count]))


def scatter_nd(indices, updates, shape, name=None) -> Tensor:
    """A tensor of ``shape``, zeros but for ``updates`` at the index tuples ``indices[..., k]``
    (repeated tuples add up): the inverse of ``tf.gather_nd`` (SegNet's unpooling). Built of a
    segment sum over the tuples' positions in the flattened tensor, so ``updates`` has a gradient."""
    indices, updates = convert_to_tensor(indices), convert_to_tensor(updates)
    depth = static_dim(indices, -1)
    if depth is None:
        raise ValueError(f"scatter_nd needs the length of each index tuple when the graph is built, got "
                         f"indices of shape {indices.shape}")
    with get_default_graph().name_scope(name or "ScatterNd"):
        shape = math_ops.cast(convert_to_tensor(shape), dtypes.int64)
        positions = math_ops.cast(indices, dtypes.int64)
        linear = 0
        for k in range(depth):  # row-major position of each tuple among the first `depth` dims
            linear = linear * shape[k] + positions[..., k]
        row_shape = concat([constant([-1], dtypes.int64), shape[depth:]], 0)
        rows = unsorted_segment_sum(reshape(updates, row_shape), reshape(linear, [-1]),
                                    math_ops.reduce_prod(shape[:depth]))
        return reshape(rows, shape)


def swish(features, name=None) -> Tensor:
    """``x * sigmoid(x)``."""
    x = convert_to_tensor(features)
    return math_ops.multiply(x, math_ops.sigmoid(x), name=name)


def crelu(features, name=None, axis=-1) -> Tensor:
    """``concat([relu(x), relu(-x)], axis)``: the positive and negative parts as channels."""
    from .nn_ops import relu

    x = convert_to_tensor(features)
    return concat([relu(x), relu(-x)], axis, name=name or "CRelu")


def atrous_conv2d(value, filters, rate: int, padding: str, name=None) -> Tensor:
    """A 2-D convolution whose filter taps are ``rate`` pixels apart (``conv2d`` with dilations)."""
    from .nn_ops import conv2d

    if int(rate) < 1:
        raise ValueError(f"atrous_conv2d's rate must be at least 1, got {rate}")
    return conv2d(value, filters, [1, 1, 1, 1], padding, dilations=[1, int(rate), int(rate), 1], name=name)
