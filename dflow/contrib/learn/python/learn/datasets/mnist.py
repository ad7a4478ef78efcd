"""``tensorflow.contrib.learn.python.learn.datasets.mnist``: the module TF 1.x's
``tutorials.mnist.input_data`` re-exported, and so it is here
(:mod:`dflow.examples.tutorials.mnist.input_data`)."""

from ......examples.tutorials.mnist.input_data import (
    DEFAULT_SOURCE_URL,
    DataSet,
    Datasets,
    dense_to_one_hot,
    load_mnist,
    maybe_download,
    read_data_sets,
)

__all__ = ["read_data_sets", "DataSet", "Datasets", "dense_to_one_hot", "maybe_download", "load_mnist",
           "DEFAULT_SOURCE_URL"]
