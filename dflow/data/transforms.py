"""Batch preprocessing as in TensorFlow's CIFAR-10 tutorial, over an array namespace ``xp``.

A transform is ``transform(xp, images, rng) -> images``: ``images`` is a batch
``(N, H, W, C)`` (uint8 as stored, already on the device ``xp`` computes on:
NumPy, or CuPy on a GPU worker), ``rng`` a ``numpy.random.Generator`` that
draws the random parameters (one number per image, a few hundred bytes moved
to the device), so a batch is the same for a seed whatever the device.

Training (``cifar10_train``), as ``cifar10_input.distorted_inputs``: random
24x24 crop, random left-right flip, brightness jitter (+-63), contrast jitter
(x0.2..1.8), per-image standardization. Evaluation (``cifar10_eval``): the
central 24x24 crop, per-image standardization. Both give float32.

>>> import numpy as np, array_api_compat.numpy as xp
>>> batch = np.random.default_rng(0).integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
>>> out = cifar10_train(xp, batch, np.random.default_rng(0))
>>> out.shape, out.dtype.name, round(float(out[0].std()), 4)
((2, 24, 24, 3), 'float32', 1.0)
"""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["random_crop", "random_flip_left_right", "random_brightness", "random_contrast",
           "per_image_standardization", "central_crop", "cifar10_train", "cifar10_eval", "to_data_format",
           "TRANSFORMS", "get_transform", "register_transform", "check_transform_name"]

CIFAR10_CROP = 24


def random_crop(xp, images, rng, size: int):
    """A ``size`` x ``size`` window of each image, at a random place per image."""
    n, height, width = images.shape[:3]
    if size > min(height, width):
        raise ValueError(f"cannot crop {size}x{size} from {height}x{width} images")
    tops = rng.integers(0, height - size + 1, n)
    lefts = rng.integers(0, width - size + 1, n)
    return xp.stack([images[i, t:t + size, s:s + size] for i, (t, s) in enumerate(zip(tops, lefts))])


def central_crop(xp, images, size: int):
    """The central ``size`` x ``size`` window (TF's ``resize_image_with_crop_or_pad`` when smaller)."""
    height, width = images.shape[1:3]
    if size > min(height, width):
        raise ValueError(f"cannot crop {size}x{size} from {height}x{width} images")
    top, left = (height - size) // 2, (width - size) // 2
    return images[:, top:top + size, left:left + size]


def random_flip_left_right(xp, images, rng):
    """Each image mirrored left-right with probability 1/2."""
    flip = xp.asarray(rng.random(images.shape[0]) < 0.5)
    out = xp.asarray(images, copy=True)
    out[flip] = xp.flip(images[flip], axis=2)  # 3x faster than xp.where over the whole batch
    return out


def random_brightness(xp, images, rng, max_delta: float):
    """Adds one delta in ``[-max_delta, max_delta)`` per image (float images)."""
    delta = xp.asarray(rng.uniform(-max_delta, max_delta, images.shape[0]), dtype=images.dtype)
    return images + delta[:, None, None, None]


def random_contrast(xp, images, rng, lower: float, upper: float):
    """Scales each image's deviation from its per-channel mean by one factor in ``[lower, upper)``."""
    n, height, width, channels = images.shape
    factor = xp.asarray(rng.uniform(lower, upper, n), dtype=images.dtype)[:, None, None]
    # computed on (N, H, W*C) rows with the channel means tiled along them: NumPy is slow to
    # broadcast over a last axis of 3
    means = xp.tile(xp.reshape(_channel_means(xp, images), (n, 1, channels)), (1, 1, width))
    rows = xp.reshape(images, (n, height, width * channels))
    return xp.reshape(rows * factor + means * (1 - factor), images.shape)


def _channel_means(xp, images):
    """``(N, 1, 1, C)`` means over each image's pixels, as a batched matmul: a NumPy reduction
    over the middle axes of NHWC took 20x longer (~1 ms for 100 24x24x3 images)."""
    n, height, width, channels = images.shape
    weights = xp.full((1, height * width), 1 / (height * width), dtype=images.dtype)
    return xp.reshape(xp.matmul(weights, xp.reshape(images, (n, height * width, channels))),
                      (n, 1, 1, channels))


def per_image_standardization(xp, images):
    """``(x - mean) / max(std, 1 / sqrt(pixels))`` per image, as TF's op."""
    pixels = math.prod(images.shape[1:])
    flat = xp.reshape(images, (images.shape[0], pixels))
    mean = xp.mean(flat, axis=1, keepdims=True)
    centered = flat - mean
    std = xp.sqrt(xp.mean(centered * centered, axis=1, keepdims=True))
    scale = xp.maximum(std, xp.asarray(1 / math.sqrt(pixels), dtype=images.dtype))
    return xp.reshape(centered / scale, images.shape)


def _as_float(xp, images):
    return xp.astype(images, xp.float32)


def cifar10_train(xp, images, rng):
    """The tutorial's training distortions: crop 24, flip, brightness, contrast, standardization."""
    images = _as_float(xp, random_crop(xp, images, rng, CIFAR10_CROP))
    images = random_flip_left_right(xp, images, rng)
    images = random_brightness(xp, images, rng, max_delta=63)
    images = random_contrast(xp, images, rng, lower=0.2, upper=1.8)
    return per_image_standardization(xp, images)


def cifar10_eval(xp, images, rng=None):
    """The tutorial's evaluation input: the central 24x24 crop, standardized."""
    return per_image_standardization(xp, _as_float(xp, central_crop(xp, images, CIFAR10_CROP)))


def to_data_format(xp, images, data_format: str):
    """NHWC batches as they are, or transposed to NCHW."""
    if data_format == "NHWC":
        return images
    if data_format == "NCHW":
        return xp.permute_dims(images, (0, 3, 1, 2))
    raise ValueError(f"data_format must be 'NHWC' or 'NCHW', got {data_format!r}")


TRANSFORMS: dict[str, Callable] = {"cifar10_train": cifar10_train, "cifar10_eval": cifar10_eval}


def register_transform(name: str, transform: Callable, cluster=None) -> None:
    """Make ``transform(xp, images, rng)`` known as ``name``, for ``Dataset(transform=name)``.

    A graph (and a graph file) names its input transform; only registered transforms run, so a
    graph file can never make a process import a module. ``cluster`` (a ``tf.cluster``
    Cluster or a ``distributed.Client``) registers it on the cluster's workers too, present
    and future (Dask carries the function over its own, TLS when the cluster is secure,
    connections).

    >>> def invert(xp, images, rng):
    ...     return 255 - images
    >>> register_transform("invert", invert)
    >>> get_transform("invert") is invert
    True
    """
    if not (isinstance(name, str) and name.isidentifier()):
        raise ValueError(f"a transform's name is an identifier like 'random_crop_32', got {name!r}")
    if not callable(transform):
        raise TypeError(f"transform {name!r} must be callable as transform(xp, images, rng), "
                        f"got {transform!r}")
    TRANSFORMS[name] = transform
    if cluster is not None:
        from distributed import WorkerPlugin

        class RegisterTransform(WorkerPlugin):
            def setup(self, worker) -> None:
                register_transform(name, transform)

        client = getattr(cluster, "client", cluster)
        client.register_plugin(RegisterTransform(), name=f"dflow-transform-{name}")


def check_transform_name(name) -> None:
    """Raise, naming the transform and how to register it, unless ``name`` is None or registered."""
    if name is not None and name not in TRANSFORMS:
        raise ValueError(
            f"unknown transform {name!r}: a dataset names one of the registered transforms "
            f"({', '.join(sorted(TRANSFORMS))}), never a module to import; register yours first with "
            f"dflow.data.register_transform({str(name).rpartition(':')[2] or 'name'!r}, function) "
            "(cluster=... registers it on the workers too)")


def get_transform(name: str) -> Callable:
    """A registered transform by name (:data:`TRANSFORMS`, :func:`register_transform`)."""
    check_transform_name(name)
    return TRANSFORMS[name]
