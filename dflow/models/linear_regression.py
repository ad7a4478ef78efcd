"""Linear regression ``y = x * w + b``: Listing 1 of the seed report.

>>> import dflow as tf
>>> from dflow.models import linear_regression
>>> with tf.Graph().as_default():
...     x = tf.placeholder(tf.float32, name="x")
...     y_predicted = linear_regression.linear_regression(x)
...     with tf.Session() as sess:
...         _ = sess.run(tf.global_variables_initializer())
...         float(sess.run(y_predicted, {x: 2.0}))
0.0
"""

from __future__ import annotations

import numpy as np

import dflow as tf

__all__ = ["linear_regression", "loss", "make_line_data", "TRUE_WEIGHT", "TRUE_BIAS"]

TRUE_WEIGHT, TRUE_BIAS = 3.0, 0.0


def linear_regression(x):
    """``x * w + b`` with scalar variables ``weight`` and ``bias``, both starting at 0."""
    w = tf.Variable(0.0, name="weight")
    b = tf.Variable(0.0, name="bias")
    return x * w + b


def loss(y_predicted, y):
    """Mean squared error."""
    return tf.reduce_mean(tf.square(y - y_predicted), name="loss")


def make_line_data(n_samples: int, seed: int = 0, x_max: float = 10.0):
    """``(x, y)`` float32 with ``y = 3 x + N(0, 1)`` noise, ``x`` uniform in ``[0, x_max)``."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.0, x_max, n_samples).astype(np.float32)
    y = (TRUE_WEIGHT * x + TRUE_BIAS + rng.standard_normal(n_samples)).astype(np.float32)
    return x, y
