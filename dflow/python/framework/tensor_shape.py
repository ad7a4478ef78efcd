"""``tensorflow.python.framework.tensor_shape``: ``TensorShape``, ``Dimension`` and their helpers.

>>> from dflow.python.framework import tensor_shape
>>> tensor_shape.TensorShape([None, 3]).merge_with([2, None]).as_list()
[2, 3]
"""

from ...graph import Dimension, TensorShape, as_dimension, as_shape, unknown_shape

__all__ = ["Dimension", "TensorShape", "as_dimension", "as_shape", "unknown_shape"]
