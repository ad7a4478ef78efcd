"""``tf.sparse``: the TF 1.13+ names of sparse tensors' functions."""

from .ops.sparse_ops import SparseTensor, sparse_placeholder, to_dense

placeholder = sparse_placeholder  # tf.sparse.placeholder

__all__ = ["SparseTensor", "to_dense", "placeholder"]
