"""``tf.keras.datasets.mnist.load_data()`` from Keras's ``mnist.npz``."""

from __future__ import annotations

import numpy as np

from ...data.sources import SourceError
from .cache import cached

URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz"


def load_data(path: str = "mnist.npz"):
    """``(x_train, y_train), (x_test, y_test)``: uint8 images (60,000 and 10,000 of 28 x 28) and
    their uint8 labels, from ``~/.keras/datasets/mnist.npz``."""
    where = cached(path, "mnist.npz", URL)
    try:
        with np.load(where, allow_pickle=False) as arrays:
            return (arrays["x_train"], arrays["y_train"]), (arrays["x_test"], arrays["y_test"])
    except (OSError, ValueError, KeyError) as error:
        raise SourceError(f"{where} is not Keras's mnist.npz ({type(error).__name__}: {error}): get it "
                          f"again from {URL}") from None
