"""MNIST for TF 1.x's tutorials: ``from tensorflow.examples.tutorials.mnist import input_data``.

Most TF 1.x scripts (TensorFlow's own MNIST tutorials, aymericdamien's and nlintz's
collections) start with::

    mnist = input_data.read_data_sets("/tmp/data/", one_hot=True)
    batch_xs, batch_ys = mnist.train.next_batch(100)

``read_data_sets`` reads the four gzipped IDX files of MNIST from ``train_dir``, fetching any
that is missing from ``source_url`` first, as TensorFlow's did: 55,000 training images (the
first ``validation_size`` of the 60,000 are the validation set), 10,000 test images, each
flattened to 784 floats in [0, 1] (``reshape``, ``dtype``), labels as integers or one-hot
float64 rows (``one_hot``). A damaged file is refused naming it (dflow's IDX reader).

Unlike TensorFlow's, a ``DataSet`` shuffles with a generator of its own, seeded by ``seed`` or
the graph's seed (``tf.set_random_seed``), and leaves NumPy's global random state alone.

>>> from dflow.examples.tutorials.mnist import input_data
>>> fake = input_data.read_data_sets("unused", fake_data=True, one_hot=True)
>>> images, labels = fake.train.next_batch(2, fake_data=True)
>>> len(images), len(images[0]), labels[0][:3]
(2, 784, [1, 0, 0])
"""

from __future__ import annotations

import collections
import os
import shutil
import tempfile
import urllib.error
import urllib.request

import numpy

from ....data.sources import SourceError, read_idx
from ....dtypes import as_dtype, float32, uint8
from ....graph import get_default_graph

__all__ = ["read_data_sets", "DataSet", "Datasets", "dense_to_one_hot", "maybe_download",
           "DEFAULT_SOURCE_URL", "load_mnist"]

#: where TensorFlow 1.x's reader fetched MNIST (Google's CVDF mirror of yann.lecun.com's files)
DEFAULT_SOURCE_URL = "https://storage.googleapis.com/cvdf-datasets/mnist/"
#: seconds a download may wait on the network for each read before it gives up
DOWNLOAD_TIMEOUT_S = 60.0
_FILES = {"train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
          "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")}

Datasets = collections.namedtuple("Datasets", ["train", "validation", "test"])


def dense_to_one_hot(labels_dense, num_classes: int) -> numpy.ndarray:
    """Class indices as one-hot float64 rows, as TF 1.x's reader returned them.

    >>> dense_to_one_hot(numpy.array([2, 0]), 3)
    array([[0., 0., 1.],
           [1., 0., 0.]])
    """
    labels = numpy.asarray(labels_dense).ravel()
    one_hot = numpy.zeros((len(labels), num_classes))
    one_hot[numpy.arange(len(labels)), labels] = 1
    return one_hot


class DataSet:
    """One split: ``images``, ``labels``, and batches in a fresh random order each epoch."""

    def __init__(self, images, labels, fake_data: bool = False, one_hot: bool = False, dtype=float32,
                 reshape: bool = True, seed: int | None = None):
        dtype = as_dtype(dtype).base_dtype
        if dtype not in (uint8, float32):
            raise TypeError(f"Invalid image dtype {dtype!r}, expected uint8 or float32")
        if seed is None:
            seed = get_default_graph().seed  # None too: fresh entropy
        self._random = numpy.random.default_rng(seed)
        self.one_hot = one_hot
        if fake_data:
            self._num_examples = 10000
        else:
            images, labels = numpy.asarray(images), numpy.asarray(labels)
            if images.shape[0] != labels.shape[0]:
                raise ValueError(f"{images.shape[0]} images but {labels.shape[0]} labels: images.shape: "
                                 f"{images.shape} labels.shape: {labels.shape}")
            self._num_examples = images.shape[0]
            if reshape:
                if images.ndim != 4 or images.shape[3] != 1:
                    raise ValueError(f"reshape=True flattens (N, rows, columns, 1) images; these are "
                                     f"{images.shape}")
                images = images.reshape(images.shape[0], images.shape[1] * images.shape[2])
            if dtype == float32:
                images = images.astype(numpy.float32) * numpy.float32(1.0 / 255.0)
        self._images, self._labels = images, labels
        self._epochs_completed = 0
        self._index_in_epoch = 0

    @property
    def images(self):
        return self._images

    @property
    def labels(self):
        return self._labels

    @property
    def num_examples(self) -> int:
        return self._num_examples

    @property
    def epochs_completed(self) -> int:
        return self._epochs_completed

    def next_batch(self, batch_size: int, fake_data: bool = False, shuffle: bool = True):
        """The next ``batch_size`` examples ``(images, labels)``. An epoch's last batch takes
        its missing examples from the start of the next epoch (reshuffled first)."""
        if fake_data:
            label = [1] + [0] * 9 if self.one_hot else 0
            return [[1] * 784 for _ in range(batch_size)], [label for _ in range(batch_size)]
        start = self._index_in_epoch
        if self._epochs_completed == 0 and start == 0 and shuffle:
            self._shuffle()
        if start + batch_size <= self._num_examples:
            self._index_in_epoch += batch_size
            return self._images[start:self._index_in_epoch], self._labels[start:self._index_in_epoch]
        self._epochs_completed += 1
        rest = self._images[start:], self._labels[start:]
        if shuffle:
            self._shuffle()
        self._index_in_epoch = batch_size - len(rest[0])
        end = self._index_in_epoch
        return (numpy.concatenate((rest[0], self._images[:end])),
                numpy.concatenate((rest[1], self._labels[:end])))

    def _shuffle(self) -> None:
        order = self._random.permutation(self._num_examples)
        self._images, self._labels = self._images[order], self._labels[order]


def maybe_download(filename: str, work_directory: str, source_url: str) -> str:
    """``work_directory/filename``, fetched from ``source_url`` first where it is not there (into
    a temporary file, renamed when complete: an interrupted download leaves nothing behind)."""
    path = os.path.join(work_directory, filename)
    if os.path.exists(path):
        return path
    os.makedirs(work_directory, exist_ok=True)
    partial = tempfile.NamedTemporaryFile(dir=work_directory, prefix=f".{filename}.", delete=False)
    try:
        with partial, urllib.request.urlopen(source_url, timeout=DOWNLOAD_TIMEOUT_S) as response:
            shutil.copyfileobj(response, partial)
        os.replace(partial.name, path)
    except (OSError, urllib.error.URLError) as error:
        files = ", ".join(sum(_FILES.values(), ()))
        raise SourceError(f"MNIST's {filename} is not in {work_directory} and could not be downloaded "
                          f"from {source_url} ({error}): put the four files {files} (from "
                          f"http://yann.lecun.com/exdb/mnist/ or a mirror) in {work_directory}") from None
    finally:
        if os.path.exists(partial.name):
            os.unlink(partial.name)
    print("Successfully downloaded", filename, os.path.getsize(path), "bytes.")
    return path


def _read_split(train_dir: str, split: str, one_hot: bool, source_url: str):
    images_name, labels_name = _FILES[split]
    images_path = maybe_download(images_name, train_dir, source_url + images_name)
    labels_path = maybe_download(labels_name, train_dir, source_url + labels_name)
    print("Extracting", images_path)
    images = read_idx(images_path, 3)[..., None]
    print("Extracting", labels_path)
    labels = read_idx(labels_path, 1)
    if len(images) != len(labels):
        raise SourceError(f"{images_path} holds {len(images)} images but {labels_path} {len(labels)} "
                          "labels: the files are from different sets")
    if labels.size and labels.max() >= 10:
        raise SourceError(f"{labels_path}: label {int(labels.max())} is not a digit 0-9; the file is "
                          "damaged or not MNIST's")
    return images, dense_to_one_hot(labels, 10) if one_hot else labels


def read_data_sets(train_dir: str, fake_data: bool = False, one_hot: bool = False, dtype=float32,
                   reshape: bool = True, validation_size: int = 5000, seed: int | None = None,
                   source_url: str = DEFAULT_SOURCE_URL) -> Datasets:
    """MNIST's ``Datasets(train, validation, test)`` from the IDX files in ``train_dir``.

    Example (the tutorials' first lines)::

        mnist = input_data.read_data_sets("MNIST_data/", one_hot=True)
        x, y = mnist.train.next_batch(50)   # (50, 784) float32, (50, 10) float64
    """
    if fake_data:
        return Datasets(*(DataSet([], [], fake_data=True, one_hot=one_hot, dtype=dtype, seed=seed)
                          for _ in range(3)))
    source_url = source_url or DEFAULT_SOURCE_URL
    train_images, train_labels = _read_split(train_dir, "train", one_hot, source_url)
    test_images, test_labels = _read_split(train_dir, "test", one_hot, source_url)
    if not 0 <= validation_size <= len(train_images):
        raise ValueError(f"Validation size should be between 0 and {len(train_images)}. "
                         f"Received: {validation_size}.")
    options = dict(dtype=dtype, reshape=reshape, seed=seed)
    return Datasets(train=DataSet(train_images[validation_size:], train_labels[validation_size:], **options),
                    validation=DataSet(train_images[:validation_size], train_labels[:validation_size],
                                       **options),
                    test=DataSet(test_images, test_labels, **options))


def load_mnist(train_dir: str = "MNIST-data") -> Datasets:
    return read_data_sets(train_dir)
