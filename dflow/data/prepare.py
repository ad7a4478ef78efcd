"""``prepare(name, source, out)``: a dataset from its original format to a store.

>>> import os, tempfile
>>> store = prepare("digits", out=os.path.join(tempfile.mkdtemp(), "digits.zarr"), echo=None)
>>> from dflow.data import open_store
>>> open_store(store)["train/images"].shape
(1437, 28, 28, 1)
"""

from __future__ import annotations

import os
from collections.abc import Callable

from . import imagenet, sources
from .store import write_store

__all__ = ["prepare", "CONVERTERS", "DEFAULT_ROOT"]

DEFAULT_ROOT = "datasets"

# name -> (converter, what it is); converters take the --source path and their own options
CONVERTERS: dict[str, tuple[Callable, str]] = {
    "cifar10": (sources.cifar10, "cifar-10-python.tar.gz: 50,000 train / 10,000 test 32x32x3 images"),
    "mnist": (sources.mnist, "the four MNIST IDX files: 60,000 train / 10,000 test 28x28x1 digits"),
    "imagenet": (imagenet.imagenet, "an ILSVRC2012 directory (train/<wnid>/, val/) or its TFRecord shards "
                                    "(train-00000-of-01024, ...), --size 224 or 299"),
    "digits": (sources.digits, "scikit-learn's 1,797 8x8 digits resized to --size (28: the MNIST "
                               "models' input; bundled: no --source)"),
    "synthetic": (sources.synthetic, "generated from --seed: any --shape, --classes, --count"),
}
_NO_SOURCE = ("digits", "synthetic")


def prepare(name: str, source: str | None = None, out: str | None = None, *,
            chunk_examples: int | None = None, overwrite: bool = False, client=None,
            echo: Callable | None = print, **options) -> str:
    """Convert dataset ``name`` from ``source`` into a store at ``out`` (default
    ``datasets/NAME.zarr``); returns the store's path. ``options`` go to the converter
    (``size`` for imagenet and digits; ``image_shape``, ``num_classes``, ``train_count``,
    ``test_count``, ``seed`` for synthetic)."""
    if name not in CONVERTERS:
        raise ValueError(f"unknown dataset {name!r}: choose one of {sorted(CONVERTERS)}")
    converter = CONVERTERS[name][0]
    dataset = converter(**options) if name in _NO_SOURCE else converter(source, **options)
    out = out or os.path.join(DEFAULT_ROOT, f"{name}.zarr")
    return write_store(dataset, out, chunk_examples=chunk_examples, overwrite=overwrite,
                       client=client, echo=echo)
