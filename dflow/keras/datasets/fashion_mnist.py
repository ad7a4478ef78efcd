"""``tf.keras.datasets.fashion_mnist.load_data()`` from Keras's ``fashion-mnist`` folder of IDX files."""

from __future__ import annotations

import os

from ...data.sources import read_idx
from .cache import cached

URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/ (train-images-idx3-ubyte.gz ...)"


def load_data():
    """``(x_train, y_train), (x_test, y_test)``: uint8 images (60,000 and 10,000 of 28 x 28) and
    their uint8 labels, from the four gzipped IDX files in ``~/.keras/datasets/fashion-mnist``."""
    folder = cached("fashion-mnist", "a folder fashion-mnist holding its four gzipped IDX files", URL)
    arrays = [read_idx(os.path.join(folder, f"{split}-{kind}-idx{ndim}-ubyte.gz"), ndim)
              for split in ("train", "t10k") for kind, ndim in (("images", 3), ("labels", 1))]
    return (arrays[0], arrays[1]), (arrays[2], arrays[3])
