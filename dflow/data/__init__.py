"""Datasets: prepared as chunked Zarr stores, streamed to workers in sharded batches.

- :func:`prepare` converts CIFAR-10, MNIST, ImageNet (from the files their
  publishers distribute), scikit-learn's digits, or synthetic data into a store
  (``dflow data prepare``); :func:`describe` summarizes one (``dflow data info``).
- :class:`Dataset` streams a split: per-worker shard, shuffled per epoch from a
  seed, transformed (:mod:`dflow.data.transforms`), prefetched; a Python
  iterator of batches to feed placeholders, or an input op (``get_next()``).
- :func:`load_digits` and :func:`iterate_batches`: the digits in memory.
- TF 1.x's ``tf.data`` (:mod:`dflow.data.tf_data`): ``Dataset.from_tensor_slices``/``zip``...
  (static constructors on :class:`Dataset`), ``FixedLengthRecordDataset``,
  ``TextLineDataset``, ``Iterator``; ``map``/``batch``/``shuffle``/``repeat``...; iterators
  read the elements inside ``Session.run`` (:mod:`dflow.ops.iterator_ops`).

>>> import os, tempfile, dflow as tf
>>> from dflow.data import Dataset, prepare
>>> store = prepare("digits", out=os.path.join(tempfile.mkdtemp(), "digits.zarr"), echo=None)
>>> data = Dataset(store, "train", batch_size=100, seed=1, shard=(0, 2))
>>> images, labels = next(data)
>>> images.shape, labels.dtype.name, data.examples_per_epoch
((100, 28, 28, 1), 'int64', 720)
"""

from . import experimental
from .dataset import Dataset, dataset_next
from .digits import DigitsSplit, iterate_batches, load_digits
from .prepare import CONVERTERS, prepare
from .sources import SourceError
from .store import describe, open_store
from .tf_data import (
    DatasetV1,
    FixedLengthRecordDataset,
    Iterator,
    TextLineDataset,
    TFRecordDataset,
    get_output_shapes,
    get_output_types,
    make_initializable_iterator,
    make_one_shot_iterator,
)
from .transforms import TRANSFORMS, register_transform

__all__ = ["Dataset", "dataset_next", "prepare", "describe", "open_store", "CONVERTERS", "TRANSFORMS",
           "SourceError", "DigitsSplit", "load_digits", "iterate_batches", "DatasetV1",
           "FixedLengthRecordDataset", "TextLineDataset", "TFRecordDataset", "Iterator", "experimental",
           "make_one_shot_iterator", "make_initializable_iterator", "get_output_types", "get_output_shapes",
           "register_transform"]
