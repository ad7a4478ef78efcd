"""ImageNet (ILSVRC2012) from its directory layout, decoded and resized with Pillow.

The expected layout (the two ILSVRC2012 tarballs, extracted)::

    SOURCE/train/n01440764/n01440764_10026.JPEG ...   one folder per class (WordNet id)
    SOURCE/val/n01440764/ILSVRC2012_val_00000293.JPEG  per-class folders, or flat files and
    SOURCE/LOC_val_solution.csv                        Kaggle's labels (ImageId,PredictionString)
      or SOURCE/val_labels.txt                         lines "<file name> <wnid>"
    SOURCE/LOC_synset_mapping.txt or synset_words.txt  optional: "n01440764 tench, Tinca tinca"

or TensorFlow's TFRecord shards of it, as ``build_imagenet_data.py`` (tensorflow/models'
Inception data scripts, the input of tf_cnn_benchmarks) writes them::

    SOURCE/train-00000-of-01024 ... SOURCE/validation-00127-of-00128
    SOURCE/imagenet_lsvrc_2015_synsets.txt   the 1,000 WordNet ids in label order (or
                                             LOC_synset_mapping.txt / synset_words.txt)
    SOURCE/imagenet_metadata.txt             optional: "n01440764<TAB>tench, Tinca tinca"

where each record is a ``tf.train.Example`` with ``image/encoded`` (the JPEG's
bytes) and ``image/class/synset`` (or ``image/class/label``, 1-based as that
script writes it). Every record is checked against its checksums. The shards'
order is kept (the script shuffled the training images before it sharded them).

Each image is decoded (JPEG DCT scaling first: decoding at 1/2-1/8 scale when
the image is far larger than needed), resized so its shorter side is ``size``
(aspect kept), and center-cropped to ``size`` x ``size``. The training files
are stored in a fixed shuffled order (so that a chunk mixes classes); the
validation files in name order. Converting 1.28M images is a Dask job: a task
per chunk, on this process's threads or on a cluster (``client=``), restartable
(:func:`~dflow.data.store.write_store`).
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
import re

import numpy as np

from .sources import SourceError
from .store import DatasetSource, SplitSource

__all__ = ["imagenet", "decode_and_crop", "IMAGENET_URL", "SIZES"]

IMAGENET_URL = ("https://image-net.org/challenges/LSVRC/2012/ (ILSVRC2012_img_train.tar and "
                "ILSVRC2012_img_val.tar, extracted to train/<wnid>/ and val/)")
SIZES = (224, 299)
_WNID = re.compile(r"^n\d{8}$")
_IMAGE_SUFFIXES = (".jpeg", ".jpg", ".png")


def decode_and_crop(path, size: int, name: str | None = None) -> np.ndarray:
    """``(size, size, 3)`` uint8: the image at ``path`` (or in the binary file object ``path``,
    called ``name`` in errors), shorter side resized to ``size``, center crop."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            image.draft("RGB", (size, size))  # JPEG: decode at the smallest scale still >= size
            image = image.convert("RGB")
            width, height = image.size
            scale = size / min(width, height)
            resized = (max(size, round(width * scale)), max(size, round(height * scale)))
            image = image.resize(resized, Image.BILINEAR)
            left, top = (resized[0] - size) // 2, (resized[1] - size) // 2
            return np.asarray(image.crop((left, top, left + size, top + size)))
    except (OSError, UnidentifiedImageError, SyntaxError) as error:
        raise SourceError(f"cannot decode {name or path} ({type(error).__name__}: {error}): replace or "
                          "delete the file, then rerun the same command (finished chunks are kept)") from None


def _images_in(directory: str) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.lower().endswith(_IMAGE_SUFFIXES))


def _train_files(train: str) -> tuple[list[str], list]:
    wnids = sorted(d for d in os.listdir(train) if _WNID.match(d) and os.path.isdir(os.path.join(train, d)))
    if not wnids:
        raise SourceError(f"{train} has no class folders named by WordNet id (n01440764, ...): --source "
                          f"must be the ILSVRC directory holding train/<wnid>/*.JPEG, from {IMAGENET_URL}")
    files = [(os.path.join(train, wnid, name), label) for label, wnid in enumerate(wnids)
             for name in _images_in(os.path.join(train, wnid))]
    if not files:
        raise SourceError(f"the class folders of {train} hold no .JPEG images")
    return wnids, files


def _val_labels(source: str, val: str) -> dict[str, str]:
    """File name -> wnid, from Kaggle's LOC_val_solution.csv or a val_labels.txt."""
    for directory in (source, val):
        kaggle = os.path.join(directory, "LOC_val_solution.csv")
        if os.path.exists(kaggle):
            with open(kaggle, newline="") as f:
                return {row["ImageId"]: row["PredictionString"].split()[0] for row in csv.DictReader(f)}
        plain = os.path.join(directory, "val_labels.txt")
        if os.path.exists(plain):
            with open(plain) as f:
                pairs = [line.split() for line in f if line.strip()]
            return {os.path.splitext(name)[0]: wnid for name, wnid in pairs}
    raise SourceError(f"{val} holds images but no labels: put LOC_val_solution.csv or val_labels.txt "
                      "(lines '<file> <wnid>') beside it, or sort the images into val/<wnid>/ folders")


def _val_files(source: str, wnids: list) -> list:
    val = os.path.join(source, "val")
    if not os.path.isdir(val):
        raise SourceError(f"{source} has no val/ folder: extract ILSVRC2012_img_val.tar there "
                          f"({IMAGENET_URL})")
    label_of = {wnid: label for label, wnid in enumerate(wnids)}
    folders = [d for d in sorted(os.listdir(val)) if os.path.isdir(os.path.join(val, d))]
    if folders:
        unknown = [d for d in folders if d not in label_of]
        if unknown:
            raise SourceError(f"{val} has class folders that train/ lacks: {unknown[:5]}")
        return [(os.path.join(val, d, n), label_of[d])
                for d in folders for n in _images_in(os.path.join(val, d))]
    labels = _val_labels(source, val)
    files = []
    for name in _images_in(val):
        wnid = labels.get(os.path.splitext(name)[0])
        if wnid not in label_of:
            raise SourceError(f"{os.path.join(val, name)}: its label {wnid!r} is not a class of train/ "
                              "(or the labels file does not list it)")
        files.append((os.path.join(val, name), label_of[wnid]))
    return files


def _class_names(source: str, wnids: list) -> list:
    for name in ("LOC_synset_mapping.txt", "synset_words.txt"):
        path = os.path.join(source, name)
        if os.path.exists(path):
            with open(path) as f:
                words = dict(line.rstrip("\n").split(" ", 1) for line in f if " " in line)
            return [words.get(wnid, wnid) for wnid in wnids]
    return list(wnids)


def _listing_digest(source: str, files: list) -> str:
    """SHA-256 of the sorted (relative path, size) list: hashing 140 GB of JPEGs would take hours."""
    digest = hashlib.sha256()
    for path, _ in sorted(files):
        digest.update(f"{os.path.relpath(path, source)}\t{os.path.getsize(path)}\n".encode())
    return digest.hexdigest()


def _split(name: str, files: list, size: int) -> SplitSource:
    paths = [p for p, _ in files]
    labels = np.asarray([label for _, label in files], np.int64)

    def read(start: int, stop: int):
        return np.stack([decode_and_crop(p, size) for p in paths[start:stop]]), labels[start:stop]

    return SplitSource(name, len(files), (size, size, 3), read)


# ---- TensorFlow's TFRecord shards ------------------------------------------------------------------
_SHARD = re.compile(r"^(train|validation)-\d{5}-of-\d{5}$")


def _shards(source: str) -> dict[str, list[str]]:
    """``{"train": [paths], "validation": [paths]}`` of the shards in ``source`` (empty: none)."""
    found: dict[str, list[str]] = {"train": [], "validation": []}
    for name in sorted(os.listdir(source)):
        match = _SHARD.match(name)
        if match:
            found[match.group(1)].append(os.path.join(source, name))
    return found if any(found.values()) else {}


def _synsets(source: str) -> tuple[list[str], list[str]]:
    """(WordNet ids in label order, class names) from the synset files beside the shards."""
    names: dict[str, str] = {}
    metadata = os.path.join(source, "imagenet_metadata.txt")
    if os.path.exists(metadata):
        with open(metadata) as f:
            names = dict(line.rstrip("\n").split("\t", 1) for line in f if "\t" in line)
    for listing in ("imagenet_lsvrc_2015_synsets.txt", "LOC_synset_mapping.txt", "synset_words.txt"):
        path = os.path.join(source, listing)
        if os.path.exists(path):
            with open(path) as f:
                rows = [line.rstrip("\n").split(" ", 1) for line in f if line.strip()]
            wnids = [row[0] for row in rows]
            return wnids, [row[1] if len(row) > 1 else names.get(row[0], row[0]) for row in rows]
    raise SourceError(f"{source} holds TFRecord shards but no list of the classes: put "
                      "imagenet_lsvrc_2015_synsets.txt (the labels file build_imagenet_data.py read: one "
                      "WordNet id per line, in label order) or LOC_synset_mapping.txt beside them")


def _shard_split(name: str, shards: list[str], size: int, wnids: list[str]) -> SplitSource:
    from ..core.example.example_pb2 import Example
    from ..tf_record import read_record_at, record_offsets

    records = []
    for shard in shards:
        with open(shard, "rb") as f:
            records += [(shard, offset) for offset in record_offsets(f, shard)]
    label_of = {wnid: label for label, wnid in enumerate(wnids)}

    def label(feature, where: str) -> int:
        if "image/class/synset" in feature:
            wnid = feature["image/class/synset"].bytes_list.value[0].decode()
            if wnid not in label_of:
                raise SourceError(f"{where}: its class {wnid} is not in the synsets file")
            return label_of[wnid]
        number = feature["image/class/label"].int64_list.value[0] - 1  # build_imagenet_data: 1-based
        if not 0 <= number < len(wnids):
            raise SourceError(f"{where}: its image/class/label {number + 1} is not 1..{len(wnids)}")
        return number

    def read(start: int, stop: int):
        images, labels, files = [], [], {}
        try:
            for shard, offset in records[start:stop]:
                file = files.get(shard) or files.setdefault(shard, open(shard, "rb"))
                where = f"{shard} (record at offset {offset})"
                feature = Example.FromString(read_record_at(file, shard, offset)).features.feature
                if "image/encoded" not in feature:
                    raise SourceError(f"{where} has no image/encoded feature: is it an ImageNet shard?")
                encoded = feature["image/encoded"].bytes_list.value[0]
                images.append(decode_and_crop(io.BytesIO(encoded), size, name=where))
                labels.append(label(feature, where))
        finally:
            for file in files.values():
                file.close()
        return np.stack(images), np.asarray(labels, np.int64)

    return SplitSource(name, len(records), (size, size, 3), read)


def _from_shards(source: str, shards: dict[str, list[str]], size: int) -> DatasetSource:
    missing = [split for split, paths in shards.items() if not paths]
    if missing:
        raise SourceError(f"{source} has TFRecord shards but none named {missing[0]}-NNNNN-of-NNNNN: "
                          "both train and validation shards are needed")
    wnids, names = _synsets(source)
    paths = shards["train"] + shards["validation"]
    entry = {"name": os.path.basename(os.path.abspath(source)),
             "sha256": _listing_digest(source, [(p, None) for p in paths]), "sha256_of": "file listing"}
    return DatasetSource("imagenet", names, [_shard_split("train", shards["train"], size, wnids),
                                             _shard_split("validation", shards["validation"], size, wnids)],
                         [entry])


def imagenet(source: str | None, size: int = 224) -> DatasetSource:
    """ILSVRC2012 from ``source`` (see the module doc): ``train`` and ``validation``, ``size``^2 x 3."""
    if size not in SIZES:
        raise ValueError(f"--size must be one of {SIZES} (the models' input sizes), got {size}")
    shards = _shards(source) if source is not None and os.path.isdir(source) else {}
    if shards and not os.path.isdir(os.path.join(source, "train")):
        return _from_shards(source, shards, size)
    if source is None or not os.path.isdir(os.path.join(source, "train")):
        where = "--source is required" if source is None else f"{source} has no train/ folder"
        raise SourceError(f"{where}: it must be the ILSVRC directory holding train/<wnid>/*.JPEG and "
                          f"val/, from {IMAGENET_URL}, or TensorFlow's TFRecord shards of it "
                          "(train-00000-of-01024, ...)")
    wnids, train = _train_files(os.path.join(source, "train"))
    train = [train[i] for i in np.random.default_rng(0).permutation(len(train))]
    validation = _val_files(source, wnids)
    entry = {"name": os.path.basename(os.path.abspath(source)),
             "sha256": _listing_digest(source, train + validation), "sha256_of": "file listing"}
    return DatasetSource("imagenet", _class_names(source, wnids),
                         [_split("train", train, size), _split("validation", validation, size)], [entry])
