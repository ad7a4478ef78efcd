"""``tf.contrib.learn``: only its datasets (``datasets.load_dataset``; MNIST's reader
``datasets.mnist``, also at ``contrib.learn.python.learn.datasets.mnist``, which TF 1.x's
tutorials import); any other name
says it is not supported and what to use instead (the Estimator API is ``tf.estimator``).

>>> import dflow as tf
>>> from dflow.examples.tutorials.mnist import input_data
>>> tf.contrib.learn.datasets.mnist.read_data_sets is input_data.read_data_sets
True
>>> tf.contrib.learn.DNNClassifier
Traceback (most recent call last):
...
AttributeError: tf.contrib.learn.DNNClassifier is not supported by dflow; use tf.estimator, ...
"""

from .python.learn import datasets

__all__ = ["datasets"]


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(f"tf.contrib.learn.{name} is not supported by dflow; use tf.estimator, or a "
                         "tf.Session training loop with tf.layers instead")
