"""``tensorflow.python.framework.tensor_util``: a tensor's value where the graph knows it without
running (``constant_value``), and ``is_tensor``.

>>> import dflow as tf
>>> from dflow.python.framework import tensor_util
>>> with tf.Graph().as_default():
...     tensor_util.constant_value(tf.shape(tf.zeros([2, 3]))).tolist()
[2, 3]
"""

from __future__ import annotations

import numpy

from ...graph import Tensor

__all__ = ["constant_value", "is_tensor"]


def constant_value(tensor) -> numpy.ndarray | None:
    """The value of ``tensor`` as a NumPy array where the graph knows it before any run (a
    constant, a shape fully known, what dflow's shape rules fold from those), else None."""
    value = tensor.spec.value if isinstance(tensor, Tensor) else None
    return None if value is None else numpy.asarray(value)


def is_tensor(x) -> bool:
    return isinstance(x, Tensor)
