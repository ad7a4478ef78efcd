"""What ``dflow train`` reads: examples held in memory, or a prepared Zarr store streamed.

Both give training batches for one shard (a worker reads only its own) and the test
split in batches, so the training loops do not care where examples come from.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator

import numpy as np

__all__ = ["ArrayData", "StoreData", "store_path", "scale_to_unit", "scale_and_flatten"]

EVAL_BATCH = 500


class ArrayData:
    """Train and test examples in NumPy arrays (the digits, the line of linear regression)."""

    def __init__(self, train_x, train_y, test_x, test_y):
        self.train_x, self.train_y, self.test_x, self.test_y = train_x, train_y, test_x, test_y
        self.num_train, self.num_test = len(train_x), len(test_x)

    def train_batches(self, batch_size: int, seed: int, shard: tuple[int, int] = (0, 1)) -> Iterator:
        from .data import iterate_batches

        index, count = shard
        return iterate_batches(self.train_x[index::count], self.train_y[index::count], batch_size, seed=seed)

    def test_batches(self) -> Iterator:
        for begin in range(0, self.num_test, EVAL_BATCH):
            yield self.test_x[begin:begin + EVAL_BATCH], self.test_y[begin:begin + EVAL_BATCH]


def scale_to_unit(xp, images, rng=None):
    """uint8 pixels as float32 in [0, 1], as the digits are."""
    return xp.astype(images, xp.float32) / 255.0


def scale_and_flatten(xp, images, rng=None):
    """28x28x1 images for a model of flat 784 inputs (mnist_dnn), in [0, 1]."""
    return xp.reshape(scale_to_unit(xp, images), (images.shape[0], -1))


class StoreData:
    """A store prepared by ``dflow data prepare``, streamed by :class:`dflow.data.Dataset`.

    Images whose shape is the model's input are scaled to [0, 1]; 32x32x3 images for a
    24x24x3 model (CIFAR-10) get the tutorial's training distortions and evaluation crop.
    """

    def __init__(self, path: str, input_shape: tuple, model: str):
        from .data import Dataset

        self.path = path
        with Dataset(path, "train", batch_size=1, prefetch=0) as probe:
            image_shape, self.num_train = tuple(probe.image_shape), probe.examples_per_epoch
        self.train_transform, self.eval_transform = _transforms(image_shape, tuple(input_shape), model, path)
        self.test_split = _test_split(path)
        with Dataset(path, self.test_split, batch_size=1, prefetch=0) as probe:
            self.num_test = probe.examples_per_epoch

    def train_batches(self, batch_size: int, seed: int, shard: tuple[int, int] = (0, 1)) -> Iterator:
        from .data import Dataset

        data = Dataset(self.path, "train", batch_size, shard=shard, seed=seed, drop_remainder=True,
                       transform=self.train_transform)
        return ((images, np.asarray(labels, np.int64)) for images, labels in data)

    def test_batches(self) -> Iterator:
        from .data import Dataset

        with Dataset(self.path, self.test_split, EVAL_BATCH, shuffle=False, num_epochs=1,
                     transform=self.eval_transform) as data:
            for images, labels in data:
                yield images, np.asarray(labels, np.int64)


def store_path(dataset: str) -> str | None:
    """The store ``--dataset`` names: a path or URL, or ``datasets/NAME.zarr`` when it exists."""
    if "://" in dataset or os.path.exists(dataset):
        return dataset
    candidate = os.path.join("datasets", f"{dataset}.zarr")
    return candidate if os.path.exists(candidate) else None


def _transforms(image_shape: tuple, input_shape: tuple, model: str, path: str) -> tuple[Callable, Callable]:
    if image_shape == input_shape:
        return scale_to_unit, scale_to_unit
    if len(input_shape) == 1 and math.prod(image_shape) == input_shape[0]:
        return scale_and_flatten, scale_and_flatten
    if image_shape == (32, 32, 3) and input_shape == (24, 24, 3):
        return "cifar10_train", "cifar10_eval"
    shape = "x".join(map(str, input_shape))
    raise ValueError(f"model {model} takes {shape} images but {path} holds "
                     f"{'x'.join(map(str, image_shape))}: use a model made for this store "
                     "(cifar10 for 32x32x3, deep_mnist or mnist_dnn for 28x28x1, resnet50 for 224x224x3, "
                     "inception3 for 299x299x3)")


def _test_split(path: str) -> str:
    from .data.store import open_store

    splits = set(open_store(path).group_keys())
    for name in ("test", "validation"):
        if name in splits:
            return name
    raise ValueError(f"{path} has no test or validation split (it has {sorted(splits)}); "
                     "prepare it again with `dflow data prepare`")
