"""``tf.SparseTensor`` (what ``tf.VarLenFeature`` parses to) and ``tf.sparse_tensor_to_dense``.

A sparse tensor is three dense tensors: ``indices`` (``[N, rank]`` int64, the
positions of its values in row-major order), ``values`` (``[N]``) and
``dense_shape`` (``[rank]`` int64). ``Session.run`` of one gives a
:class:`SparseTensorValue` of the three arrays, as in TF.

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     sparse = tf.SparseTensor(indices=[[0, 1], [1, 0]], values=[5, 6], dense_shape=[2, 3])
...     with tf.Session() as sess:
...         sess.run(tf.sparse_tensor_to_dense(sparse)).tolist()
[[0, 5, 0], [6, 0, 0]]
"""

from __future__ import annotations

from typing import NamedTuple

import numpy

from .. import dtypes
from ..errors import InvalidArgumentError
from ..graph import Tensor, TensorShape, convert_to_tensor, get_default_graph
from ..runtime.devices import numpy_namespace, to_namespace
from .registry import ShapeError, Spec, defop

__all__ = ["SparseTensor", "SparseTensorValue", "sparse_tensor_to_dense", "to_dense", "sparse_placeholder",
           "sparse_retain", "sparse_tensor_dense_matmul"]


class SparseTensorValue(NamedTuple):
    """A fetched :class:`SparseTensor`: its three arrays."""

    indices: numpy.ndarray
    values: numpy.ndarray
    dense_shape: numpy.ndarray


class SparseTensor:
    """A tensor given by the positions and values of its entries; every other entry is zero
    (or the default of :func:`sparse_tensor_to_dense`)."""

    def __init__(self, indices, values, dense_shape):
        self.indices = convert_to_tensor(indices, dtype=dtypes.int64, name="indices")
        self.values = convert_to_tensor(values, name="values")
        self.dense_shape = convert_to_tensor(dense_shape, dtype=dtypes.int64, name="dense_shape")

    @property
    def dtype(self) -> dtypes.DType:
        return self.values.dtype

    @property
    def graph(self):
        return self.values.graph

    @property
    def op(self):
        return self.values.op

    def get_shape(self) -> TensorShape:
        """The dense shape, where it is known when the graph is built (its rank at least)."""
        static = self.dense_shape.op.attrs.get("value") if self.dense_shape.op.type == "Const" else None
        if static is not None:
            return TensorShape([int(n) for n in numpy.asarray(static).reshape(-1)])
        rank = self.dense_shape.shape.as_list()[0] if self.dense_shape.shape.rank == 1 else None
        return TensorShape(None if rank is None else [None] * rank)

    @property
    def shape(self) -> TensorShape:
        return self.get_shape()

    def __repr__(self) -> str:
        return (f"SparseTensor(indices={self.indices.name}, values={self.values.name}, "
                f"dense_shape={self.dense_shape.name})")

    def __mul__(self, scalar) -> SparseTensor:
        """Each value times a scalar (a sparse dropout's ``1 / keep_prob``)."""
        from .math_ops import multiply

        scalar = convert_to_tensor(scalar, dtype=self.dtype)
        if scalar.shape.ndims != 0:
            raise TypeError("dflow multiplies a SparseTensor by a scalar only: make it dense "
                            "(tf.sparse_tensor_to_dense) to multiply by a tensor")
        return SparseTensor(self.indices, multiply(self.values, scalar), self.dense_shape)

    __rmul__ = __mul__


def _to_dense_infer(inputs, validate_indices):
    indices, dense_shape, values, default = inputs
    if indices.shape is not None and len(indices.shape) != 2:
        raise ShapeError(f"sparse_tensor_to_dense: indices must be [N, rank], got shape {indices.shape}")
    if default.shape not in (None, ()):
        raise ShapeError(f"sparse_tensor_to_dense: default_value must be a scalar, got shape {default.shape}")
    known = dense_shape.value
    if known is not None:
        return [Spec(tuple(int(n) for n in numpy.asarray(known).reshape(-1)), values.dtype)]
    rank = dense_shape.shape[0] if dense_shape.shape else None
    return [Spec(None if rank is None else (None,) * rank, values.dtype)]


def _to_dense_kernel(xp, indices, dense_shape, values, default, validate_indices):
    def host(value):
        return numpy.asarray(to_namespace(value, numpy_namespace))

    shape = tuple(int(n) for n in host(dense_shape).reshape(-1))
    positions = host(indices).astype(numpy.int64).reshape(-1, len(shape))
    if positions.size and ((positions < 0).any() or (positions >= numpy.asarray(shape)).any()):
        bad = positions[((positions < 0) | (positions >= numpy.asarray(shape))).any(axis=1)][0]
        raise InvalidArgumentError(f"sparse_tensor_to_dense: index {bad.tolist()} is outside the dense "
                                   f"shape {list(shape)}")
    if validate_indices and len(positions) > 1:
        flat = numpy.ravel_multi_index(positions.T, shape) if shape else numpy.zeros(len(positions), int)
        if (numpy.diff(flat) <= 0).any():
            raise InvalidArgumentError("sparse_tensor_to_dense: the indices are not in row-major order or "
                                       "repeat one: sort them (tf.sparse_reorder) or pass "
                                       "validate_indices=False")
    if isinstance(values, numpy.ndarray) and values.dtype == object:  # strings stay NumPy object arrays
        dense = numpy.full(shape, default, dtype=object)
        dense[tuple(positions.T)] = values
        return dense
    dense = numpy.full(shape, host(default), dtype=host(values).dtype)
    dense[tuple(positions.T)] = host(values)
    return xp.asarray(dense)


defop("SparseToDense", _to_dense_infer, _to_dense_kernel, gpu=False)  # scatters on the host, as it parses


def sparse_tensor_to_dense(sp_input: SparseTensor, default_value=None, validate_indices=True,
                           name=None) -> Tensor:
    """The dense tensor of ``sp_input``: its values at its indices, ``default_value`` (0, or
    ``b""`` for strings) elsewhere."""
    if not isinstance(sp_input, SparseTensor):
        raise TypeError(f"sparse_tensor_to_dense takes a tf.SparseTensor, got {sp_input!r}")
    if default_value is None:
        default_value = b"" if sp_input.dtype == dtypes.string else 0
    default = convert_to_tensor(default_value, dtype=sp_input.dtype, name="default_value")
    return get_default_graph().create_op(
        "SparseToDense", [sp_input.indices, sp_input.dense_shape, sp_input.values, default],
        {"validate_indices": bool(validate_indices)}, name=name or "SparseToDense").outputs[0]


to_dense = sparse_tensor_to_dense  # tf.sparse.to_dense


def sparse_placeholder(dtype, shape=None, name=None) -> SparseTensor:
    """A SparseTensor to feed: ``feed_dict={sparse: (indices, values, dense_shape)}`` (or a
    ``tf.SparseTensorValue``), as CTC scripts feed their labels; a given ``shape`` (a list or a
    tensor) is its dense shape, which the feed may repeat."""
    from .array_ops import placeholder, placeholder_with_default

    with get_default_graph().name_scope(name or "SparsePlaceholder"):
        if shape is None:
            dense_shape = placeholder(dtypes.int64, [None], name="shape")
        else:
            known = convert_to_tensor(shape, dtype=dtypes.int64)
            dense_shape = placeholder_with_default(known, known.shape, name="shape")
        rank = dense_shape.shape.as_list()[0]
        return SparseTensor(placeholder(dtypes.int64, [None, rank], name="indices"),
                            placeholder(dtype, [None], name="values"), dense_shape)


def sparse_retain(sp_input: SparseTensor, to_retain) -> SparseTensor:
    """The entries of ``sp_input`` where the boolean vector ``to_retain`` is true."""
    from .embedding_ops import boolean_mask

    keep = convert_to_tensor(to_retain, dtype=dtypes.bool)
    return SparseTensor(boolean_mask(sp_input.indices, keep), boolean_mask(sp_input.values, keep),
                        sp_input.dense_shape)


def sparse_tensor_dense_matmul(sp_a: SparseTensor, b, adjoint_a=False, adjoint_b=False, name=None) -> Tensor:
    """The 2-d SparseTensor ``sp_a`` times the dense matrix ``b``: each entry's row of ``b``
    scaled by its value, summed into its row of the result (gathers and a segment sum, whose
    gradients are those of the values and of ``b``)."""
    from .array_ops import expand_dims, transpose, unstack
    from .embedding_ops import gather, unsorted_segment_sum

    if not isinstance(sp_a, SparseTensor):
        raise TypeError(f"sparse_tensor_dense_matmul takes a tf.SparseTensor first, got {sp_a!r}")
    b = convert_to_tensor(b, dtype=sp_a.dtype)
    b = transpose(b) if adjoint_b else b
    with get_default_graph().name_scope(name or "SparseTensorDenseMatMul"):
        rows, columns = unstack(sp_a.indices, 2, axis=1)
        if adjoint_a:
            rows, columns = columns, rows
        count = sp_a.dense_shape[1 if adjoint_a else 0]
        return unsorted_segment_sum(expand_dims(sp_a.values, 1) * gather(b, columns), rows, count)
