"""``tensorflow.python.framework.constant_op``: ``constant``, as TF's own cell code spells it."""

from ...ops.array_ops import constant

__all__ = ["constant"]
