"""``tf.io``: ``tf.io.gfile`` (:mod:`dflow.gfile`, whose snake_case names TF 1.13+ reads there).

>>> import dflow as tf
>>> tf.io.gfile.exists("memory://nowhere/at/all")
False
"""

from . import gfile

__all__ = ["gfile"]
