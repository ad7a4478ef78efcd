"""scikit-learn's handwritten digits: real data that is always present.

``sklearn.datasets.load_digits`` bundles 1,797 8x8 grey images (values 0..16)
of the digits 0-9 with the package, so training on them needs no download.
This module splits them once, deterministically, into train and test sets and
resizes them to what a model takes:

- ``(28, 28, 1)`` (the MNIST models): bilinear upsampling to 24x24, zero
  padding to 28x28 (MNIST's digits, too, sit in a 20x20 box inside 28x28);
- ``(24, 24, 3)`` (the CIFAR-10 tutorial CNN): upsampled, channels replicated;
- ``(784,)`` (the MNIST DNN): the 28x28 image, flattened.

Any ``(H, W, C)`` of at least 8x8, or a flat ``(S * S,)``, works the same way:
upsample by the largest whole factor that fits, pad to size, repeat channels.
Pixel values are float32 in [0, 1]; labels are int64 class indices.

>>> from dflow.data import load_digits
>>> train_x, train_y, test_x, test_y = load_digits((28, 28, 1))
>>> train_x.shape, test_x.shape, train_x.dtype.name, float(train_x.max())
((1437, 28, 28, 1), (360, 28, 28, 1), 'float32', 1.0)
"""

from __future__ import annotations

import importlib.util
import math
import os
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

__all__ = ["DigitsSplit", "load_digits", "resize_digits", "iterate_batches", "NUM_CLASSES"]

NUM_CLASSES = 10
_SOURCE_SIZE = 8
_MAX_VALUE = 16.0


class DigitsSplit(NamedTuple):
    """Train and test images (float32, NHWC or flat) and labels (int64)."""

    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray


def load_digits(image_shape=(28, 28, 1), test_fraction: float = 0.2, seed: int = 0) -> DigitsSplit:
    """The digits, split into train and test, resized to ``image_shape`` (one example).

    Parameters
    ----------
    image_shape : tuple of int
        ``(H, W, C)`` with H, W >= 8, or ``(S * S,)`` for flat images (``(784,)``).
    test_fraction : float
        Share of the 1,797 images held out for testing.
    seed : int
        Seeds the split; the same seed always gives the same split.
    """
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    pixels, labels = _read_digits()
    images = resize_digits(pixels / _MAX_VALUE, image_shape)
    order = np.random.default_rng(seed).permutation(len(labels))
    n_test = math.ceil(len(labels) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return DigitsSplit(images[train], labels[train], images[test], labels[test])


def _read_digits() -> tuple[np.ndarray, np.ndarray]:
    """``(N, 8, 8)`` float32 pixels and int64 labels, as ``sklearn.datasets.load_digits``.

    Reads the CSV that scikit-learn ships directly: importing ``sklearn.datasets``
    (and SciPy with it) takes ~2 s, the file ~20 ms.
    """
    spec = importlib.util.find_spec("sklearn")
    if spec is None:
        raise ModuleNotFoundError("the digits dataset ships with scikit-learn: "
                                  "pip install scikit-learn")
    path = os.path.join(spec.submodule_search_locations[0], "datasets", "data", "digits.csv.gz")
    if os.path.exists(path):
        table = np.loadtxt(path, delimiter=",", dtype=np.float32)
        pixels, labels = table[:, :-1], table[:, -1]
    else:  # a scikit-learn that keeps it elsewhere
        from sklearn.datasets import load_digits as sklearn_digits

        bunch = sklearn_digits()
        pixels, labels = bunch.data, bunch.target
    side = _SOURCE_SIZE
    return pixels.astype(np.float32).reshape(-1, side, side), labels.astype(np.int64)


def resize_digits(images: np.ndarray, image_shape) -> np.ndarray:
    """``(N, 8, 8)`` images in [0, 1] -> ``(N, *image_shape)`` float32 (see the module doc)."""
    image_shape = tuple(int(d) for d in image_shape)
    if len(image_shape) == 1:
        side = math.isqrt(image_shape[0])
        if side * side != image_shape[0]:
            raise ValueError(f"a flat image shape must be a square number of pixels, "
                             f"got {image_shape}")
        return resize_digits(images, (side, side, 1)).reshape(len(images), -1)
    if len(image_shape) != 3:
        raise ValueError(f"image_shape must be (H, W, C) or (H * W,), got {image_shape}")
    height, width, channels = image_shape
    factor = min(height, width) // _SOURCE_SIZE
    if factor < 1:
        raise ValueError(f"images must be at least {_SOURCE_SIZE}x{_SOURCE_SIZE}, "
                         f"asked for {image_shape}")
    side = _SOURCE_SIZE * factor
    rows, cols = _bilinear_matrix(_SOURCE_SIZE, side), _bilinear_matrix(_SOURCE_SIZE, side)
    big = np.einsum("ih,nhw,jw->nij", rows, images, cols)
    top, left = (height - side) // 2, (width - side) // 2
    out = np.zeros((len(images), height, width, channels), np.float32)
    out[:, top:top + side, left:left + side, :] = big[..., None]
    return out


def _bilinear_matrix(size_in: int, size_out: int) -> np.ndarray:
    """``(size_out, size_in)`` weights of half-pixel-centred bilinear resampling along one axis."""
    centers = (np.arange(size_out) + 0.5) * size_in / size_out - 0.5
    centers = np.clip(centers, 0, size_in - 1)
    low = np.floor(centers).astype(int)
    high = np.minimum(low + 1, size_in - 1)
    frac = (centers - low).astype(np.float32)
    weights = np.zeros((size_out, size_in), np.float32)
    np.add.at(weights, (np.arange(size_out), low), 1 - frac)
    np.add.at(weights, (np.arange(size_out), high), frac)
    return weights


def iterate_batches(images: np.ndarray, labels: np.ndarray, batch_size: int, seed: int = 0,
                    epochs: int | None = None, drop_remainder: bool = True
                    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(images, labels)`` batches, reshuffled each epoch from ``seed``; endless if no ``epochs``.

    With ``drop_remainder`` every batch has ``batch_size`` examples (the last,
    partial batch of an epoch is skipped), so a step always costs the same.
    """
    if not 0 < batch_size <= len(images) or (not drop_remainder and batch_size < 1):
        raise ValueError(f"batch_size must be in [1, {len(images)}] (the number of examples), "
                         f"got {batch_size}")
    rng = np.random.default_rng(seed)
    epoch = 0
    while epochs is None or epoch < epochs:
        order = rng.permutation(len(images))
        stop = len(order) - len(order) % batch_size if drop_remainder else len(order)
        for start in range(0, stop, batch_size):
            chosen = order[start:start + batch_size]
            yield images[chosen], labels[chosen]
        epoch += 1
