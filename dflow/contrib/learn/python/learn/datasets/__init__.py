"""``tf.contrib.learn.python.learn.datasets``: ``mnist``, the tutorials' reader."""

from . import mnist

__all__ = ["mnist"]
