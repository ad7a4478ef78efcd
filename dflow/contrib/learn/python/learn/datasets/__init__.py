"""``tf.contrib.learn.python.learn.datasets``: ``mnist``, the tutorials' reader, and
:func:`load_dataset`, by which TF 1.x's ``cnn_mnist`` layers tutorial loads MNIST.

>>> from dflow.contrib.learn.python.learn import datasets
>>> iris = datasets.load_dataset("iris")
>>> iris.data.shape, iris.data.dtype, sorted(set(iris.target.tolist()))
((150, 4), dtype('float32'), [0, 1, 2])
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from . import mnist

__all__ = ["mnist", "load_dataset", "load_iris", "Dataset"]


class Dataset(NamedTuple):
    """TF's ``base.Dataset``: the features and the targets of a small dataset in memory."""

    data: np.ndarray
    target: np.ndarray


def load_iris(data_path=None) -> Dataset:
    """Fisher's iris flowers (150 x 4 float32 measurements, int classes 0-2), the CSV that TF 1.x
    bundled: the copy scikit-learn ships."""
    from sklearn.datasets import load_iris as sklearn_iris

    iris = sklearn_iris()
    return Dataset(iris.data.astype(np.float32), iris.target.astype(np.int64))


DATASETS = {"mnist": lambda: mnist.load_mnist(), "iris": load_iris}


def load_dataset(name: str, size: str = "small", test_with_fake_data: bool = False):
    """The dataset called ``name``: ``"mnist"`` (the IDX files in ``./MNIST-data``, TF's
    ``mnist.load_mnist``: ``Datasets(train, validation, test)``) or ``"iris"``. TF's ``"boston"``
    and ``"dbpedia"`` are not supported by dflow (they are downloaded or were withdrawn)."""
    if name not in DATASETS:
        raise ValueError(f"Name of dataset is not found: {name} (dflow has {', '.join(sorted(DATASETS))}; "
                         "TF's boston and dbpedia are not supported)")
    return DATASETS[name]()
