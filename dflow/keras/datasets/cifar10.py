"""``tf.keras.datasets.cifar10.load_data()`` from Keras's ``cifar-10-batches-py`` folder."""

from __future__ import annotations

import os

import numpy as np

from ...data.sources import CIFAR10_URL, cifar_batch
from .cache import cached


def load_data():
    """``(x_train, y_train), (x_test, y_test)``: uint8 images (50,000 and 10,000 of 32 x 32 x 3,
    channels last) and uint8 labels of shape (n, 1), from the pickled batches in
    ``~/.keras/datasets/cifar-10-batches-py`` (cifar-10-python.tar.gz, extracted)."""
    folder = cached("cifar-10-batches-py", "the folder cifar-10-batches-py of cifar-10-python.tar.gz",
                    CIFAR10_URL)

    def batch(name):
        path = os.path.join(folder, name)
        with open(path, "rb") as f:
            images, labels = cifar_batch(f.read(), path)
        return np.ascontiguousarray(images), labels.astype(np.uint8).reshape(-1, 1)

    parts = [batch(f"data_batch_{i}") for i in range(1, 6)]
    train = (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
    return train, batch("test_batch")
