"""``tf.sparse``: the TF 1.13+ names of sparse tensors' functions."""

from .ops.sparse_ops import (
    SparseTensor,
    sparse_placeholder,
    sparse_retain,
    sparse_tensor_dense_matmul,
    to_dense,
)

placeholder = sparse_placeholder  # tf.sparse.placeholder
retain = sparse_retain  # tf.sparse.retain
sparse_dense_matmul = sparse_tensor_dense_matmul  # tf.sparse.sparse_dense_matmul

__all__ = ["SparseTensor", "to_dense", "placeholder", "retain", "sparse_dense_matmul"]
