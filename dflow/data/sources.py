"""Readers of each dataset's original format, giving a :class:`~dflow.data.store.DatasetSource`.

dflow downloads nothing: ``--source`` points at the file the publisher
distributes, and without one the error says which file to get and from where.

- ``cifar10``: ``cifar-10-python.tar.gz``, read straight from the tarball. Its
  batches are pickles; they are unpickled with only NumPy's array types
  allowed, so a tampered archive cannot run code.
- ``mnist``: a directory with the four IDX files, gzipped or not.
- ``digits``: scikit-learn's bundled 8x8 digits (values 0..16 scaled to 0..255), resized
  to 28x28 as the MNIST models take them.
- ``synthetic``: any shape and class count, a function of the seed alone.
- ``imagenet``: see :mod:`dflow.data.imagenet`.

>>> source = synthetic(image_shape=(8, 8, 3), num_classes=4, train_count=10, test_count=2, seed=1)
>>> [(s.name, s.count) for s in source.splits]
[('train', 10), ('test', 2)]
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import pickle
import tarfile
import zlib

import numpy as np

from .store import DatasetSource, SplitSource

__all__ = ["SourceError", "cifar10", "cifar_batch", "mnist", "digits", "synthetic", "file_sha256",
           "in_memory", "read_idx", "unpickle_arrays"]


class SourceError(ValueError):
    """A source file is missing, truncated, or not in the format its converter reads."""


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _source_entry(path: str) -> dict:
    return {"name": os.path.basename(path), "sha256": file_sha256(path)}


def in_memory(name: str, arrays: dict, class_names, sources) -> DatasetSource:
    """A source over arrays already in memory: ``{split: (images, labels)}``."""
    splits = [SplitSource(split, len(images), tuple(images.shape[1:]),
                          lambda a, b, images=images, labels=labels: (images[a:b], labels[a:b]))
              for split, (images, labels) in arrays.items()]
    return DatasetSource(name, list(class_names), splits, sources)


def _require(path: str | None, what: str, where: str) -> str:
    if path is None:
        raise SourceError(f"--source is required: {what}, from {where}")
    if not os.path.exists(path):
        raise SourceError(f"{path} does not exist: --source must be {what}, from {where}")
    return path


# ---- CIFAR-10 ------------------------------------------------------------------------------------
CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR10_MD5 = "c58f30108f718f92721af3b95e74349a"  # as published on the CIFAR page
_CIFAR_MEMBERS = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch", "batches.meta"]
_ARRAY_GLOBALS = {("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "_reconstruct"),
                  ("numpy._core.multiarray", "_reconstruct"), ("numpy.core.multiarray", "scalar"),
                  ("numpy._core.multiarray", "scalar"), ("_codecs", "encode")}


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickles plain containers and NumPy arrays, and nothing that could run code."""

    def find_class(self, module, name):
        if (module, name) not in _ARRAY_GLOBALS:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}: a CIFAR batch holds only "
                                         "lists, bytes and NumPy arrays")
        return super().find_class(module, name)


def unpickle_arrays(data: bytes, where: str) -> dict:
    """A CIFAR pickle's dict (its keys as str), unpickled with only NumPy's array types allowed."""
    try:
        batch = _ArrayUnpickler(io.BytesIO(data), encoding="bytes").load()
    except Exception as error:
        raise SourceError(f"{where} is not a CIFAR-10 pickle ({type(error).__name__}: {error}); the "
                          f"archive is damaged or tampered with: download it again from {CIFAR10_URL}") \
            from None
    if not isinstance(batch, dict):
        raise SourceError(f"{where} holds a {type(batch).__name__}, not a CIFAR-10 batch dict")
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in batch.items()}


def _cifar_members(path: str) -> dict:
    """The seven pickles of the archive, by member base name (read in one pass)."""
    found = {}
    try:
        with tarfile.open(path, "r:gz") as archive:
            for member in archive:
                base = os.path.basename(member.name)
                if base in _CIFAR_MEMBERS and member.isfile():
                    found[base] = archive.extractfile(member).read()
    except (tarfile.TarError, EOFError, zlib.error, OSError) as error:
        raise SourceError(f"{path} is truncated or not a gzipped tar ({type(error).__name__}: {error}): "
                          f"download cifar-10-python.tar.gz again from {CIFAR10_URL} "
                          f"(published MD5 {CIFAR10_MD5})") from None
    missing = [m for m in _CIFAR_MEMBERS if m not in found]
    if missing:
        raise SourceError(f"{path} lacks {', '.join(missing)}: it is not the CIFAR-10 python archive "
                          f"(cifar-10-python.tar.gz from {CIFAR10_URL})")
    return found


def cifar_batch(data: bytes, where: str) -> tuple[np.ndarray, np.ndarray]:
    """A CIFAR-10 batch's images (n, 32, 32, 3) and labels, checked."""
    batch = unpickle_arrays(data, where)
    pixels, labels = batch.get("data"), batch.get("labels")
    if not isinstance(pixels, np.ndarray) or pixels.dtype != np.uint8 or pixels.ndim != 2 \
            or pixels.shape[1] != 3072 or labels is None or len(labels) != len(pixels):
        shape = getattr(pixels, "shape", None)
        raise SourceError(f"{where}: expected 'data' uint8 (n, 3072) and n 'labels', got data "
                          f"{getattr(pixels, 'dtype', type(pixels).__name__)} {shape} and "
                          f"{None if labels is None else len(labels)} labels; the archive is damaged or "
                          f"tampered with: download it again from {CIFAR10_URL}")
    # each row is the red plane, then green, then blue, 32x32 each
    return pixels.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1), np.asarray(labels, np.int64)


def cifar10(source: str | None) -> DatasetSource:
    """CIFAR-10 from ``cifar-10-python.tar.gz``: ``train`` (50,000) and ``test`` (10,000), 32x32x3."""
    path = _require(source, "the path of cifar-10-python.tar.gz", CIFAR10_URL)
    members = _cifar_members(path)
    meta = unpickle_arrays(members["batches.meta"], f"{path}:batches.meta")
    names = [n.decode() if isinstance(n, bytes) else str(n) for n in meta.get("label_names", [])]
    if not names:
        raise SourceError(f"{path}:batches.meta has no 'label_names'; download the archive again "
                          f"from {CIFAR10_URL}")
    parts = [cifar_batch(members[f"data_batch_{i}"], f"{path}:data_batch_{i}") for i in range(1, 6)]
    train = (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
    test = cifar_batch(members["test_batch"], f"{path}:test_batch")
    _check_labels({"train": train[1], "test": test[1]}, len(names), path)
    return in_memory("cifar10", {"train": train, "test": test}, names, [_source_entry(path)])


def _check_labels(labels_by_split: dict, num_classes: int, path: str) -> None:
    for split, labels in labels_by_split.items():
        bad = np.flatnonzero((labels < 0) | (labels >= num_classes))
        if len(bad):
            raise SourceError(f"{path}: {split} label {int(labels[bad[0]])} of example {int(bad[0])} is "
                              f"out of range [0, {num_classes}) ({len(bad)} such labels); the source is "
                              "damaged or tampered with")


# ---- MNIST ---------------------------------------------------------------------------------------
MNIST_URL = "https://ossci-datasets.s3.amazonaws.com/mnist/ (a mirror of http://yann.lecun.com/exdb/mnist/)"
_MNIST_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
                "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}


def _idx_path(directory: str, name: str) -> str:
    for candidate in (name + ".gz", name):
        if os.path.exists(os.path.join(directory, candidate)):
            return os.path.join(directory, candidate)
    raise SourceError(f"{directory} has no {name}.gz (or {name}): --source must be the directory "
                      f"holding the four MNIST IDX files, from {MNIST_URL}")


def read_idx(path: str, ndim: int) -> np.ndarray:
    """An IDX file of unsigned bytes with ``ndim`` dimensions (gzipped when named ``.gz``)."""
    try:
        with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError, zlib.error) as error:
        raise SourceError(f"{path} is truncated or not gzip ({type(error).__name__}: {error}): download "
                          f"it again from {MNIST_URL}") from None
    header = 4 + 4 * ndim
    if len(data) < header or data[:3] != b"\x00\x00\x08" or data[3] != ndim:
        raise SourceError(f"{path} is not an IDX file of unsigned bytes with {ndim} dimensions (its first "
                          f"bytes are {data[:4].hex()}, expected 000008{ndim:02x}); download it again "
                          f"from {MNIST_URL}")
    shape = tuple(int(d) for d in np.frombuffer(data, ">u4", ndim, 4))
    body = np.frombuffer(data, np.uint8, offset=header)
    if body.size != int(np.prod(shape)):
        raise SourceError(f"{path} is truncated: its header says {shape} = {int(np.prod(shape))} bytes "
                          f"of data, the file holds {body.size}; download it again from {MNIST_URL}")
    return body.reshape(shape)


def mnist(source: str | None) -> DatasetSource:
    """MNIST from the directory of its four IDX files: ``train`` (60,000), ``test`` (10,000), 28x28x1."""
    directory = _require(source, "the directory holding train-images-idx3-ubyte.gz and the other three "
                                 "IDX files", MNIST_URL)
    splits, entries = {}, []
    for split, (images_name, labels_name) in _MNIST_FILES.items():
        images_path, labels_path = _idx_path(directory, images_name), _idx_path(directory, labels_name)
        images, labels = read_idx(images_path, 3), read_idx(labels_path, 1)
        if len(images) != len(labels):
            raise SourceError(f"{images_path} holds {len(images)} images but {labels_path} "
                              f"{len(labels)} labels: the files are from different sets")
        splits[split] = (images[..., None], labels.astype(np.int64))
        entries += [_source_entry(images_path), _source_entry(labels_path)]
    _check_labels({s: v[1] for s, v in splits.items()}, 10, directory)
    return in_memory("mnist", splits, [str(d) for d in range(10)], entries)


# ---- digits, synthetic ---------------------------------------------------------------------------
def digits(source: str | None = None, seed: int = 0, size: int = 28) -> DatasetSource:
    """scikit-learn's 8x8 digits as uint8 (0..16 scaled to 0..255), split as :func:`load_digits`
    and resized to ``size`` x ``size`` as ``--dataset digits`` is (28: what the MNIST models take;
    8: the original pixels)."""
    import sklearn

    from .digits import load_digits

    split = load_digits((size, size, 1), seed=seed)
    as_bytes = lambda x: np.round(x * 255).astype(np.uint8)  # noqa: E731
    arrays = {"train": (as_bytes(split.train_images), split.train_labels),
              "test": (as_bytes(split.test_images), split.test_labels)}
    entry = {"name": f"sklearn.datasets.load_digits (scikit-learn {sklearn.__version__})",
             "sha256": hashlib.sha256(b"".join(a.tobytes() for pair in arrays.values() for a in pair))
             .hexdigest()}
    return in_memory("digits", arrays, [str(d) for d in range(10)], [entry])


_SYNTHETIC_BLOCK = 1024  # examples generated together: the values never depend on the chunking


def synthetic(image_shape=(32, 32, 3), num_classes: int = 10, train_count: int = 50_000,
              test_count: int = 10_000, seed: int = 0) -> DatasetSource:
    """Images of a per-class smooth pattern plus noise, and uniform labels; the same for a seed."""
    image_shape = tuple(int(d) for d in image_shape)
    if len(image_shape) != 3 or min(image_shape) < 1 or num_classes < 1:
        raise ValueError(f"synthetic data needs an (H, W, C) shape and at least one class, got "
                         f"{image_shape} and {num_classes} classes")
    rng = np.random.default_rng([seed, 0])
    height, width, channels = image_shape
    rows, cols = np.mgrid[0:height, 0:width]
    freq = rng.uniform(0.05, 0.4, (num_classes, 2, channels))
    patterns = 128 + 80 * np.sin(rows[None, :, :, None] * freq[:, None, None, 0]
                                 + cols[None, :, :, None] * freq[:, None, None, 1])
    splits = [SplitSource(name, count, image_shape, _synthetic_reader(patterns, count, seed, index))
              for index, (name, count) in enumerate([("train", train_count), ("test", test_count)]) if count]
    source = {"name": f"synthetic(shape={list(image_shape)}, classes={num_classes}, seed={seed})"}
    return DatasetSource("synthetic", [f"class_{k}" for k in range(num_classes)], splits, [source])


def _synthetic_reader(patterns: np.ndarray, count: int, seed: int, split_index: int):
    labels = np.random.default_rng([seed, 1, split_index]).integers(0, len(patterns), count)

    def block(b: int) -> np.ndarray:
        rng = np.random.default_rng([seed, 2, split_index, b])
        chosen = labels[b * _SYNTHETIC_BLOCK:(b + 1) * _SYNTHETIC_BLOCK]
        noise = rng.normal(0, 24, (len(chosen), *patterns.shape[1:]))
        return np.clip(patterns[chosen] + noise, 0, 255).astype(np.uint8)

    def read(start: int, stop: int):
        first, last = start // _SYNTHETIC_BLOCK, (stop - 1) // _SYNTHETIC_BLOCK
        images = np.concatenate([block(b) for b in range(first, last + 1)])
        offset = first * _SYNTHETIC_BLOCK
        return images[start - offset:stop - offset], labels[start:stop]

    return read
