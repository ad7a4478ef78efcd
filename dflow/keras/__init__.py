"""``tf.keras``: only what TF 1.x graph scripts take from it beside their own graph, its datasets
(``tf.keras.datasets.mnist.load_data()``, read from the files Keras keeps, never downloaded) and
``tf.keras.utils.to_categorical``. dflow builds models with ``tf.layers`` and ``tf.Session``;
any other ``tf.keras.X`` says so.

>>> import dflow as tf
>>> tf.keras.utils.to_categorical([2, 0], 3).tolist()
[[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]
>>> tf.keras.layers  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
AttributeError: tf.keras.layers is not supported by dflow: build the model with tf.layers (or tf.nn) ...
"""

from __future__ import annotations

from . import datasets, utils

__all__ = ["datasets", "utils"]


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(f"tf.keras.{name} is not supported by dflow: build the model with tf.layers (or "
                         "tf.nn) and train it in a tf.Session")
