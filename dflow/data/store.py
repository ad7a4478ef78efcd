"""Prepared datasets as chunked Zarr (v3) stores: the layout, writing it, opening it.

A store is one Zarr group with a group per split::

    cifar10.zarr/                attrs: dflow_dataset_format 1, dflow_version, dataset,
                                        class_names, sources [{name, sha256}], splits
      train/                     attrs: count, mean [C], std [C] (pixel units, 0..255)
        images  (N, H, W, C) uint8, chunks of whole examples (~1 MiB), Zstd level 3, CRC-32C
        labels  (N,) int16 (int32 past 32,767 classes), same chunking, fill value -1
      test/  ...

Every chunk is stored and checked when read (:mod:`dflow.checked_arrays`): a
flipped byte, a truncated, missing or swapped chunk file is a ``DataLossError``
naming the store, the array and the chunk. Each array's attributes hold its
chunks' digests (``dflow_chunk_crc32c``); a store written before dflow checked
chunks has none and is read unchecked, with a warning.

Zstd level 3 was measured against Blosc (zstd, lz4; shuffle, bitshuffle,
noshuffle) on 28x28 digits and 32x32 photo-like images: it compresses as well
as any (3.3-4.2x on digits) and decodes fastest of the compressing codecs
(~150k 32x32x3 images/s on one core, Blosc-zstd ~120k).

Writing is chunk by chunk, as Dask tasks, into a work directory beside the
target (``NAME.zarr.partial/``); each finished chunk leaves a marker there with
its pixel sums, so a rerun of an interrupted preparation writes only the
missing chunks. When every chunk is written, the root attributes go in last
and the store is renamed into place: a store without them, or at a path
ending in ``.partial``, is never opened as a finished one.

>>> import numpy as np, tempfile, os
>>> from dflow.data.store import DatasetSource, SplitSource, write_store, open_store
>>> images = np.zeros((10, 4, 4, 1), np.uint8); labels = np.arange(10) % 2
>>> split = SplitSource("train", 10, (4, 4, 1), lambda a, b: (images[a:b], labels[a:b]))
>>> out = os.path.join(tempfile.mkdtemp(), "tiny.zarr")
>>> _ = write_store(DatasetSource("tiny", ["even", "odd"], [split], []), out, echo=None)
>>> open_store(out)["train/labels"][:4].tolist()
[0, 1, 0, 1]
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import zarr

from ..checked_arrays import (
    DIGESTS_ATTR,
    ChunkReader,
    checked_array_options,
    content_digest,
    writing_every_chunk,
)
from ..errors import DataLossError, FailedPreconditionError, NotFoundError
from ..version import DFLOW_VERSION

__all__ = ["SplitSource", "DatasetSource", "write_store", "open_store", "describe", "chunk_examples_for",
           "corrupt_chunk_error", "chunk_reader", "verify_store", "FORMAT", "CHUNK_BYTES", "REPREPARE"]

log = logging.getLogger("dflow")

FORMAT = 1  # bumped when the layout changes; readers refuse other formats
CHUNK_BYTES = 1 << 20
_MIN_CHUNKS = 16
_WORK_SUFFIX = ".partial"
_LABEL_FILL = -1  # a label chunk that was never written reads as -1: caught as out of range
REPREPARE = "prepare the store again with `dflow data prepare`, or copy it again if it was copied"
_warned_unchecked: set = set()


class SplitSource(NamedTuple):
    """One split of a dataset to write: ``read(start, stop)`` gives examples ``[start, stop)``
    as ``(uint8 images (n, H, W, C), integer labels (n,))``."""

    name: str
    count: int
    image_shape: tuple
    read: Callable[[int, int], tuple]


class DatasetSource(NamedTuple):
    """A dataset in its original format, ready to be written as a store."""

    name: str
    class_names: list
    splits: list
    sources: list  # [{"name": file name, "sha256": hex digest}, ...]


def chunk_examples_for(image_shape, count: int, chunk_bytes: int = CHUNK_BYTES) -> int:
    """Examples per chunk: about ``chunk_bytes`` of images, and at least ``_MIN_CHUNKS`` chunks in
    ``count`` examples, so that even a small dataset shards over that many workers."""
    by_size = max(1, round(chunk_bytes / int(np.prod(image_shape))))
    return max(1, min(by_size, -(-count // _MIN_CHUNKS)))


def write_store(source: DatasetSource, out: str, *, chunk_examples: int | None = None,
                overwrite: bool = False, client=None, echo: Callable | None = print) -> str:
    """Write ``source`` as a store at ``out`` (a local path); returns ``out``.

    Parameters
    ----------
    chunk_examples : int, optional
        Examples per chunk (default: about 1 MiB of images, and at least 16 chunks).
    overwrite : bool
        Replace an existing store at ``out`` (else that is an error).
    client : distributed.Client, optional
        Run the chunk tasks on this cluster; default: Dask's threads in this process.
    echo : callable, optional
        Receives progress lines; ``None`` for silence.
    """
    out = os.path.abspath(out)
    if os.path.exists(out) and not overwrite:
        raise FileExistsError(f"{out} exists: pass --overwrite (overwrite=True) to replace it, "
                              "or choose another --out")
    work = out + _WORK_SUFFIX
    request = _request(source, chunk_examples)
    root = _open_work(work, request, echo)
    tasks = _chunk_tasks(root, source, request["chunk_examples"], work)
    if tasks:
        _run_tasks(tasks, client, echo, len(_all_chunks(source, request["chunk_examples"])))
    _finish(root, source, request["chunk_examples"], work)
    _publish(os.path.join(work, "store.zarr"), out)
    shutil.rmtree(work, ignore_errors=True)
    return out


def _request(source: DatasetSource, chunk_examples: int | None) -> dict:
    """What a rerun must match to continue an interrupted preparation. A directory's listing
    digest is left out: replacing a file that failed to decode must not discard finished chunks."""
    sources = [s if s.get("sha256_of") != "file listing" else {"name": s["name"]} for s in source.sources]
    shapes = {s.name: [s.count, *s.image_shape] for s in source.splits}
    if chunk_examples is None:
        largest = max(source.splits, key=lambda s: s.count)
        chunk_examples = chunk_examples_for(largest.image_shape, largest.count)
    if chunk_examples < 1:
        raise ValueError(f"chunk_examples must be at least 1, got {chunk_examples}")
    return {"dataset": source.name, "sources": sources, "shapes": shapes,
            "chunk_examples": int(chunk_examples), "format": FORMAT, "chunk_digests": DIGESTS_ATTR}


def _open_work(work: str, request: dict, echo) -> zarr.Group:
    """The half-written store in ``work``: resumed when the same request left it, else new."""
    request_file = os.path.join(work, "request.json")
    if os.path.exists(request_file):
        with open(request_file) as f:
            if json.load(f) == request:
                if echo:
                    echo(f"resuming the interrupted preparation in {work}")
                return zarr.open_group(os.path.join(work, "store.zarr"), mode="r+")
        if echo:
            echo(f"{work} holds an interrupted preparation with other settings: starting over")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(work, "done"))
    root = zarr.open_group(os.path.join(work, "store.zarr"), mode="w")
    with open(request_file, "w") as f:
        json.dump(request, f)
    return root


def _arrays(root: zarr.Group, split: SplitSource, chunk: int, num_classes: int):
    """The split's ``images`` and ``labels`` arrays, created on first use."""
    if split.name in root:  # resumed: every chunk stored, as when created (travels to the tasks)
        with writing_every_chunk():
            return root[f"{split.name}/images"], root[f"{split.name}/labels"]
    group = root.create_group(split.name)
    label_dtype = np.int16 if num_classes <= np.iinfo(np.int16).max else np.int32
    images = group.create_array("images", shape=(split.count, *split.image_shape), dtype=np.uint8,
                                chunks=(chunk, *split.image_shape), **checked_array_options())
    labels = group.create_array("labels", shape=(split.count,), dtype=label_dtype, chunks=(chunk,),
                                fill_value=_LABEL_FILL, **checked_array_options())
    return images, labels


def _all_chunks(source: DatasetSource, chunk: int) -> list:
    return [(split, index) for split in source.splits for index in range(-(-split.count // chunk))]


def _marker(work: str, split: str, index: int) -> str:
    return os.path.join(work, "done", f"{split}-{index}.json")


def _chunk_tasks(root: zarr.Group, source: DatasetSource, chunk: int, work: str) -> list:
    import dask

    arrays = {s.name: _arrays(root, s, chunk, len(source.class_names)) for s in source.splits}
    tasks = []
    for split, index in _all_chunks(source, chunk):
        marker = _marker(work, split.name, index)
        if not os.path.exists(marker):
            start, stop = index * chunk, min(split.count, (index + 1) * chunk)
            tasks.append(dask.delayed(_write_chunk, pure=False)(
                *arrays[split.name], split, start, stop, len(source.class_names), marker))
    return tasks


def _write_chunk(*args) -> Exception | None:
    """Writes one chunk; its error is returned, so that the other chunks still get written."""
    try:
        _write_chunk_or_raise(*args)
    except Exception as error:
        return error
    return None


def _write_chunk_or_raise(images_array, labels_array, split: SplitSource, start: int, stop: int,
                          num_classes: int, marker: str) -> None:
    images, labels = split.read(start, stop)
    images, labels = np.asarray(images), np.asarray(labels)
    where = f"{split.name} examples {start}..{stop - 1}"
    if images.shape != (stop - start, *split.image_shape) or images.dtype != np.uint8:
        raise ValueError(f"{where}: the converter gave {images.dtype} images of shape {images.shape}, "
                         f"expected uint8 {(stop - start, *split.image_shape)}")
    bad = (labels < 0) | (labels >= num_classes)
    if labels.shape != (stop - start,) or bad.any():
        raise ValueError(f"{where}: labels must be {stop - start} class indices in [0, {num_classes}), "
                         f"got shape {labels.shape} with {int(bad.sum())} out of range")
    labels = labels.astype(labels_array.dtype)
    images_array[start:stop] = images
    labels_array[start:stop] = labels
    pixels = images.reshape(-1, images.shape[-1]).astype(np.float64)
    stats = {"count": len(pixels), "sum": pixels.sum(0).tolist(),
             "sum_squares": (pixels ** 2).sum(0).tolist(),
             "digests": {"images": content_digest(images), "labels": content_digest(labels)}}
    with open(marker + ".tmp", "w") as f:
        json.dump(stats, f)
    os.replace(marker + ".tmp", marker)


class _Progress:
    """Prints ``chunks done/total``, rate and time left (tqdm's meter) every 5 seconds and at the end."""

    def __init__(self, todo: int, total: int, echo):
        self.todo, self.done, self.total, self.echo = todo, 0, total, echo
        self.begin = self.last_print = time.perf_counter()

    def step(self) -> None:
        from tqdm import tqdm

        self.done += 1
        now = time.perf_counter()
        if self.echo is None or (self.done < self.todo and now - self.last_print < 5):
            return
        self.last_print = now
        already = self.total - self.todo  # chunks an interrupted run wrote: not in the rate
        self.echo(tqdm.format_meter(already + self.done, self.total, now - self.begin, initial=already,
                                    unit=" chunks", bar_format=_PROGRESS_LINE))


_PROGRESS_LINE = "chunks {n_fmt}/{total_fmt}  {rate_fmt}  eta {remaining}"


def _run_tasks(tasks: list, client, echo, total: int) -> None:
    import dask
    from dask.callbacks import Callback

    progress = _Progress(len(tasks), total, echo)
    if client is None:
        class _Steps(Callback):
            def _posttask(self, key, result, dsk, state, worker_id):
                if key in keys:
                    progress.step()

        keys = {t.key for t in tasks}
        with _Steps():
            errors = dask.compute(*tasks, scheduler="threads")
    else:
        from distributed import as_completed

        errors = []
        for future in as_completed(client.compute(tasks)):
            errors.append(future.result())
            progress.step()
    failed = [e for e in errors if e is not None]
    if failed:
        if echo:
            echo(f"{len(failed)} of {len(tasks)} chunks failed; the others are kept for a rerun")
        raise failed[0]


def _finish(root: zarr.Group, source: DatasetSource, chunk: int, work: str) -> None:
    """Split statistics and chunk digests from the chunk markers; the root attributes last (they
    mark completion)."""
    for split in source.splits:
        count, sums, squares = 0, 0.0, 0.0
        digests: dict = {"images": [], "labels": []}
        for index in range(-(-split.count // chunk)):
            with open(_marker(work, split.name, index)) as f:
                stats = json.load(f)
            count += stats["count"]
            sums = sums + np.asarray(stats["sum"])
            squares = squares + np.asarray(stats["sum_squares"])
            for name in digests:
                digests[name].append(stats["digests"][name])
        for name, values in digests.items():
            root[f"{split.name}/{name}"].attrs[DIGESTS_ATTR] = values
        mean = sums / max(count, 1)
        std = np.sqrt(np.maximum(squares / max(count, 1) - mean ** 2, 0))
        root[split.name].attrs.update({"count": split.count, "mean": np.round(mean, 4).tolist(),
                                       "std": np.round(std, 4).tolist()})
    root.attrs.update({"dataset": source.name, "class_names": list(source.class_names),
                       "sources": source.sources, "splits": [s.name for s in source.splits],
                       "dflow_version": DFLOW_VERSION, "dflow_dataset_format": FORMAT})


def _publish(store: str, out: str) -> None:
    """Rename the finished store into place, replacing (with --overwrite) an older one."""
    if os.path.exists(out):
        aside = out + ".old" + _WORK_SUFFIX
        shutil.rmtree(aside, ignore_errors=True)
        os.replace(out, aside)
        os.replace(store, out)
        shutil.rmtree(aside, ignore_errors=True)
    else:
        os.replace(store, out)


# ---- opening ---------------------------------------------------------------------------------------
def _open_group(path: str) -> zarr.Group:
    """A local directory, a ``.zip`` file, or any URL zarr accepts (``s3://``, ``gs://``, ``memory://``)."""
    if path.endswith(".zip"):
        if not os.path.exists(path):
            raise NotFoundError(f"no dataset store at {path}: no such zip file")
        store = zarr.storage.ZipStore(path, mode="r")
        return zarr.open_group(store, mode="r")
    if "://" not in path and not os.path.isdir(path):
        hint = (" (an interrupted `dflow data prepare` left it: rerun that command to finish it)"
                if os.path.isdir(path + _WORK_SUFFIX) else "; prepare one with `dflow data prepare`")
        raise NotFoundError(f"no dataset store at {path}{hint}")
    try:
        return zarr.open_group(_fsspec_store(path) if "://" in path else path, mode="r")
    except (FileNotFoundError, KeyError, ValueError) as error:
        raise NotFoundError(f"{path} is not a Zarr group ({type(error).__name__}: {error}); "
                            "prepare a store with `dflow data prepare`") from None


def _fsspec_store(url: str):
    import fsspec

    filesystem, path = fsspec.core.url_to_fs(url)
    if filesystem.async_impl:
        filesystem, path = fsspec.core.url_to_fs(url, asynchronous=True)
    else:  # zarr 3.0 takes only async filesystems (s3, gcs: yes; memory: no)
        from fsspec.implementations.asyn_wrapper import AsyncFileSystemWrapper

        filesystem = AsyncFileSystemWrapper(filesystem, asynchronous=True)
    return zarr.storage.FsspecStore(filesystem, path=path, read_only=True)


def open_store(path: str) -> zarr.Group:
    """The store at ``path`` (see :func:`_open_group`), checked to be finished and readable here.

    Raises ``FailedPreconditionError`` for an unfinished store or one of another format, and
    ``NotFoundError`` when it or one of its arrays is missing.
    """
    path = str(path)
    if path.rstrip("/").endswith(_WORK_SUFFIX):
        raise FailedPreconditionError(f"{path} is an unfinished preparation: rerun "
                                      "`dflow data prepare` to finish it, then open the store it names")
    root = _open_group(path)
    attrs = dict(root.attrs)
    if "dflow_dataset_format" not in attrs:
        raise FailedPreconditionError(f"{path} is not a finished dflow dataset store (no "
                                      "'dflow_dataset_format' attribute): prepare it again with "
                                      "`dflow data prepare`")
    if attrs["dflow_dataset_format"] != FORMAT:
        raise FailedPreconditionError(
            f"{path} was written by dflow {attrs.get('dflow_version', '?')} in store format "
            f"{attrs['dflow_dataset_format']}; this dflow ({DFLOW_VERSION}) reads format {FORMAT}: "
            "prepare it again with this version's `dflow data prepare`")
    for split in attrs.get("splits", []):
        for name in ("images", "labels"):
            try:
                root[f"{split}/{name}"]
            except KeyError:
                raise NotFoundError(f"{path} has no array {split}/{name}: the store is damaged; "
                                    "prepare it again with `dflow data prepare`") from None
        _check_split_layout(path, root, split)
    return root


def _check_split_layout(path: str, root: zarr.Group, split: str) -> None:
    """Images and labels agree with each other and the split's count; warn once about an old store
    whose chunks cannot be checked."""
    images, labels = root[f"{split}/images"], root[f"{split}/labels"]
    count = dict(root[split].attrs).get("count", images.shape[0])
    if not images.shape[0] == labels.shape[0] == count or images.chunks[0] != labels.chunks[0]:
        raise DataLossError(f"{path} is damaged: split {split} has {images.shape[0]} images in chunks "
                            f"of {images.chunks[0]} but {labels.shape[0]} labels in chunks of "
                            f"{labels.chunks[0]} (its count is {count}); {REPREPARE}")
    if DIGESTS_ATTR not in images.attrs and path not in _warned_unchecked:
        _warned_unchecked.add(path)
        log.warning("%s has no chunk checksums (written before dflow checked chunks): its chunks are "
                    "read unchecked; prepare it again with `dflow data prepare` to have them checked", path)


def chunk_reader(path: str, root: zarr.Group, name: str) -> ChunkReader:
    """A :class:`~dflow.checked_arrays.ChunkReader` of array ``name`` (``train/images``) of the store
    ``root`` opened from ``path``."""
    return ChunkReader(root[name], path, name, REPREPARE)


def describe(path: str) -> str:
    """A few lines on a store: dataset, classes, splits (shape, chunking, size, mean/std), sources."""
    root = open_store(path)
    attrs = dict(root.attrs)
    classes = attrs["class_names"]
    shown = ", ".join(classes[:10]) + (f", ... ({len(classes)} classes)" if len(classes) > 10 else "")
    lines = [f"{path}: {attrs['dataset']} (written by dflow {attrs['dflow_version']}, "
             f"format {attrs['dflow_dataset_format']})", f"  classes: {shown}"]
    for split in attrs["splits"]:
        images = root[f"{split}/images"]
        split_attrs = dict(root[split].attrs)
        stored = images.nbytes_stored() if hasattr(images, "nbytes_stored") else None
        size = f", {stored / 2 ** 20:.1f} MiB stored" if stored else ""
        lines.append(f"  {split}: images {images.shape} {images.dtype} in chunks of {images.chunks[0]} "
                     f"({images.nbytes / 2 ** 20:.1f} MiB raw{size}); labels {root[f'{split}/labels'].dtype}")
        lines.append(f"    mean {split_attrs['mean']}  std {split_attrs['std']}")
        checked = DIGESTS_ATTR in images.attrs
        lines.append("    chunks checked: CRC-32C codec and per-chunk digests" if checked else
                     "    chunks unchecked (written before dflow checked chunks): prepare it again")
    for source in attrs["sources"]:
        lines.append(f"  source: {source['name']}  sha256 {source.get('sha256', '-')}")
    return "\n".join(lines)


def verify_store(path: str) -> tuple[int, list[str]]:
    """Read every chunk of every split's arrays, checked: ``(chunks read, damage found)``, one
    message per damaged chunk (``dflow data verify``)."""
    root = open_store(path)
    count, damage = 0, []
    for split in root.attrs["splits"]:
        for name in ("images", "labels"):
            reader = chunk_reader(path, root, f"{split}/{name}")
            for index in range(reader.num_chunks):
                count += 1
                try:
                    reader.read_chunk(index)
                except DataLossError as error:
                    damage.append(str(error))
    return count, damage


def corrupt_chunk_error(path: str, array: str, chunk: int, error: Exception) -> DataLossError:
    """The error for an unreadable chunk: names the store, the array, the chunk and its key."""
    return DataLossError(f"chunk {chunk} of array {array} in {path} (key {array}/c/{chunk}/...) is "
                         f"corrupt or unreadable ({type(error).__name__}: {error}); {REPREPARE}")
