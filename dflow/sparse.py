"""``tf.sparse``: the TF 1.13+ names of sparse tensors' functions."""

from .ops.sparse_ops import SparseTensor, to_dense

__all__ = ["SparseTensor", "to_dense"]
