"""``tf.keras.datasets.cifar100.load_data()`` from Keras's ``cifar-100-python`` folder."""

from __future__ import annotations

import os

import numpy as np

from ...data.sources import SourceError, unpickle_arrays
from .cache import cached

URL = "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz"


def load_data(label_mode: str = "fine"):
    """``(x_train, y_train), (x_test, y_test)``: uint8 images (50,000 and 10,000 of 32 x 32 x 3,
    channels last) and uint8 labels of shape (n, 1), the 100 fine classes or the 20 coarse ones,
    from ``~/.keras/datasets/cifar-100-python`` (cifar-100-python.tar.gz, extracted)."""
    if label_mode not in ("fine", "coarse"):
        raise ValueError(f"label_mode must be 'fine' or 'coarse', got {label_mode!r}")
    folder = cached("cifar-100-python", "the folder cifar-100-python of cifar-100-python.tar.gz", URL)

    def split(name):
        path = os.path.join(folder, name)
        with open(path, "rb") as f:
            batch = unpickle_arrays(f.read(), path)
        pixels, labels = batch.get("data"), batch.get(f"{label_mode}_labels")
        if not isinstance(pixels, np.ndarray) or pixels.ndim != 2 or pixels.shape[1] != 3072 \
                or labels is None or len(labels) != len(pixels):
            raise SourceError(f"{path}: expected 'data' (n, 3072) and n '{label_mode}_labels'; get "
                              f"cifar-100-python.tar.gz again from {URL}")
        images = np.ascontiguousarray(pixels.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
        return images.astype(np.uint8), np.asarray(labels, np.uint8).reshape(-1, 1)

    return split("train"), split("test")
