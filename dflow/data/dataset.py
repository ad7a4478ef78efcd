"""Streaming a store's split to a worker: sharded, shuffled, prefetched batches.

How a :class:`Dataset` reads one epoch:

1. **Shard.** The split's chunks are dealt out *strided*: shard ``i`` of ``n``
   owns chunks ``i, i + n, i + 2n, ...``. Across the ``n`` shards every example
   is read exactly once per epoch, and no two shards share one; shard sizes
   differ by at most a chunk. A shard never reads another's chunks.
2. **Shuffle.** The shard's chunks are read in an order drawn from
   ``(seed, epoch, shard index)``, whole chunks at a time (random access would
   decode many chunks per batch); about ``shuffle_buffer`` examples are pooled
   and permuted, then cut into batches; what is left over joins the next pool.
   The same seed gives the same batches, with or without prefetching.
3. **Transform.** Each batch moves to the device (``xp.asarray``), goes through
   ``transform`` (:mod:`dflow.data.transforms`) and to ``data_format``.
4. **Prefetch.** With ``prefetch=N > 0`` a background thread keeps ``N``
   batches ready; ``wait_seconds`` is the total time the consumer waited for
   one, the step time that reading data added (the seeds' "I/O overhead").

The last, partial batch of an epoch is kept unless ``drop_remainder``; batches
never straddle epochs. ``num_epochs=None`` repeats forever.

>>> import os, tempfile
>>> from dflow.data import Dataset, prepare
>>> store = prepare("synthetic", out=os.path.join(tempfile.mkdtemp(), "s.zarr"), echo=None,
...                 image_shape=(8, 8, 3), train_count=100, test_count=10)
>>> with Dataset(store, "train", batch_size=32, num_epochs=1) as data:
...     [len(labels) for images, labels in data]
[32, 32, 32, 4]
"""

from __future__ import annotations

import hashlib
import itertools
import json
import queue
import threading
import time
from collections.abc import Callable, Iterator

import numpy as np

from .. import dtypes
from ..errors import DataLossError, InvalidArgumentError
from ..graph import get_default_graph
from .store import chunk_reader, open_store
from .tf_data import DatasetConstructors
from .transforms import get_transform, to_data_format

__all__ = ["Dataset"]

_END = object()


class Dataset(DatasetConstructors):
    """Batches ``(images, labels)`` of one split of a prepared store (see the module doc).
    As ``tf.data.Dataset`` it also has TF's static constructors (``from_tensor_slices``,
    ``from_tensors``, ``zip``, ``range``), which make :class:`~dflow.data.tf_data.DatasetV1` pipelines.

    Parameters
    ----------
    path : str
        The store: a directory, a ``.zip``, or a URL zarr accepts (``s3://``, ``gs://``, ``memory://``).
    split : str
        ``"train"``, ``"test"`` or ``"validation"`` (whatever the store has).
    batch_size : int
    shard : (int, int)
        ``(index, count)``: this worker's share, chunks dealt out strided.
    shuffle : bool
        Shuffle chunk order and examples within ``shuffle_buffer``; else the stored order.
    seed : int
        With the epoch number, decides the order and the random transforms.
    num_epochs : int or None
        Passes over the shard; ``None`` repeats forever.
    prefetch : int
        Batches a background thread keeps ready; 0 reads in the consumer's thread.
    transform : str or callable, optional
        ``transform(xp, images, rng)``, or a name from :data:`~dflow.data.transforms.TRANSFORMS`
        (:func:`~dflow.data.transforms.register_transform` adds one).
    data_format : {"NHWC", "NCHW"}
    xp : array namespace, optional
        Where batches land (default NumPy; CuPy's puts them on the GPU once).
    synthetic : bool
        Serve the first batch over and over, without reading: the same shapes, no I/O.
    """

    def __init__(self, path: str, split: str = "train", batch_size: int = 100, *, shard=(0, 1),
                 shuffle: bool = True, seed: int = 0, num_epochs: int | None = None,
                 shuffle_buffer: int = 10_000, prefetch: int = 2, transform: str | Callable | None = None,
                 data_format: str = "NHWC", drop_remainder: bool = False, xp=None, synthetic: bool = False):
        self.spec = {"path": str(path), "split": split, "batch_size": batch_size, "shard": list(shard),
                     "shuffle": shuffle, "seed": seed, "num_epochs": num_epochs,
                     "shuffle_buffer": shuffle_buffer, "prefetch": prefetch, "transform": transform,
                     "data_format": data_format, "drop_remainder": drop_remainder, "synthetic": synthetic}
        self.path, self.split, self.batch_size = str(path), split, int(batch_size)
        self.shuffle, self.seed, self.num_epochs = shuffle, int(seed), num_epochs
        self.shuffle_buffer, self.drop_remainder, self.synthetic = shuffle_buffer, drop_remainder, synthetic
        self.data_format = data_format
        self.transform = get_transform(transform) if isinstance(transform, str) else transform
        self.xp = _namespace(xp)
        self._open(split)
        self.shard_index, self.shard_count = _check_shard(shard, self.num_chunks)
        self._check_numbers(prefetch)
        self.chunk_ids = list(range(self.shard_index, self.num_chunks, self.shard_count))
        self.examples_per_epoch = sum(self._chunk_bounds(c)[1] - self._chunk_bounds(c)[0]
                                      for c in self.chunk_ids)
        self.wait_seconds = 0.0
        self.batches_served = 0
        self._batches = self._generate()
        self._prefetch = prefetch
        self._queue: queue.Queue | None = None
        self._stop = threading.Event()
        self._thread = None

    def _open(self, split: str) -> None:
        root = open_store(self.path)
        splits = list(root.attrs["splits"])
        if split not in splits:
            raise InvalidArgumentError(f"{self.path} has no split {split!r}; it has {splits}")
        self.class_names = list(root.attrs["class_names"])
        self.mean, self.std = root[split].attrs["mean"], root[split].attrs["std"]
        self.images, self.labels = root[f"{split}/images"], root[f"{split}/labels"]
        self._readers = {name: chunk_reader(self.path, root, f"{split}/{name}")
                         for name in ("images", "labels")}
        self.num_examples = self.images.shape[0]
        self.chunk_examples = self.images.chunks[0]
        self.num_chunks = -(-self.num_examples // self.chunk_examples)
        self.image_shape = tuple(self.images.shape[1:])

    def _check_numbers(self, prefetch: int) -> None:
        if self.batch_size < 1 or prefetch < 0 or self.shuffle_buffer < 1:
            raise ValueError(f"batch_size and shuffle_buffer must be at least 1 and prefetch at least 0, "
                             f"got {self.batch_size}, {self.shuffle_buffer} and {prefetch}")
        if self.num_epochs is not None and self.num_epochs < 1:
            raise ValueError(f"num_epochs must be at least 1 (or None: forever), got {self.num_epochs}")
        if self.data_format not in ("NHWC", "NCHW"):
            raise ValueError(f"data_format must be 'NHWC' or 'NCHW', got {self.data_format!r}")

    @property
    def steps_per_epoch(self) -> int:
        """Batches in one epoch of this shard."""
        full, rest = divmod(self.examples_per_epoch, self.batch_size)
        return full + (1 if rest and not self.drop_remainder else 0)

    @property
    def output_spec(self) -> tuple[tuple, np.dtype]:
        """``(shape of one image, dtype)`` of the batches, after the transform and layout."""
        probe = self.xp.asarray(np.zeros((1, *self.image_shape), np.uint8))
        if self.transform is not None:
            probe = self.transform(self.xp, probe, np.random.default_rng(0))
        probe = to_data_format(self.xp, probe, self.data_format)
        return tuple(probe.shape[1:]), np.dtype(str(probe.dtype))

    # ---- reading ---------------------------------------------------------------------------------
    def _chunk_bounds(self, chunk: int) -> tuple[int, int]:
        return chunk * self.chunk_examples, min(self.num_examples, (chunk + 1) * self.chunk_examples)

    def _read_chunk(self, chunk: int) -> tuple[np.ndarray, np.ndarray]:
        start, stop = self._chunk_bounds(chunk)
        labels = self._readers["labels"].read_chunk(chunk)
        images = self._readers["images"].read_chunk(chunk)
        bad = (labels < 0) | (labels >= len(self.class_names))
        if bad.any():
            raise DataLossError(
                f"chunk {chunk} of array {self.split}/labels in {self.path} holds {int(bad.sum())} labels "
                f"out of range [0, {len(self.class_names)}) (e.g. {int(labels[bad][0])} at example "
                f"{start + int(np.flatnonzero(bad)[0])}; -1 means the chunk is missing): prepare the store "
                "again with `dflow data prepare`")
        return images, labels.astype(np.int64)

    def _epoch(self, epoch: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Host batches of one epoch (see the module doc, steps 1-2)."""
        rng = np.random.default_rng([self.seed, epoch, self.shard_index])
        order = rng.permutation(self.chunk_ids) if self.shuffle else self.chunk_ids
        pool: list = []
        pooled = 0
        for position, chunk in enumerate(order):
            pool.append(self._read_chunk(int(chunk)))
            pooled += len(pool[-1][1])
            last = position == len(order) - 1
            if pooled < self.shuffle_buffer and not last:
                continue
            images, labels = (np.concatenate(parts) for parts in zip(*pool))
            if self.shuffle:
                permutation = rng.permutation(len(labels))
                images, labels = images[permutation], labels[permutation]
            keep = len(labels) if last else len(labels) - len(labels) % self.batch_size
            for begin in range(0, keep, self.batch_size):
                if begin + self.batch_size <= keep or not self.drop_remainder:
                    yield images[begin:begin + self.batch_size], labels[begin:begin + self.batch_size]
            pool, pooled = [(images[keep:], labels[keep:])], len(labels) - keep

    def _generate(self) -> Iterator[tuple]:
        """Device batches: every epoch, transformed (steps 3); the first one forever if synthetic."""
        epoch = 0
        while self.num_epochs is None or epoch < self.num_epochs:
            for step, (images, labels) in enumerate(self._epoch(epoch)):
                batch = self._to_device(images, labels, epoch, step)
                if self.synthetic:
                    yield from itertools.repeat(batch)
                yield batch
            epoch += 1

    def _to_device(self, images, labels, epoch: int, step: int) -> tuple:
        xp = self.xp
        images = xp.asarray(images)
        if self.transform is not None:
            rng = np.random.default_rng([self.seed, epoch, self.shard_index, step])
            images = self.transform(xp, images, rng)
        return to_data_format(xp, images, self.data_format), xp.asarray(labels)

    # ---- iterating ---------------------------------------------------------------------------------
    def __iter__(self) -> Dataset:
        return self

    def __next__(self) -> tuple:
        """The next ``(images, labels)``; ``StopIteration`` after the last epoch."""
        begin = time.perf_counter()
        if self._prefetch == 0:
            try:
                return next(self._batches)
            finally:
                self._count(begin)
        if self._thread is None:
            self._start()
        item = self._queue.get()
        self._count(begin)
        if item is _END:
            self._queue.put(_END)  # later calls end too
            raise StopIteration
        if isinstance(item, BaseException):
            self._queue.put(item)
            raise item
        return item

    def _count(self, begin: float) -> None:
        self.wait_seconds += time.perf_counter() - begin
        self.batches_served += 1

    def _start(self) -> None:
        self._queue = queue.Queue(self._prefetch)
        self._thread = threading.Thread(target=self._fill, name=f"dflow-prefetch-{self.split}", daemon=True)
        self._thread.start()

    def _fill(self) -> None:
        try:
            for batch in self._batches:
                if not self._put(batch):
                    return
            self._put(_END)
        except BaseException as error:  # handed to the consumer, which re-raises it
            self._put(error)

    def _put(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def close(self) -> None:
        """Stop the prefetch thread (if any)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> Dataset:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        if hasattr(self, "_stop"):  # not when __init__ failed
            self._stop.set()

    def get_next(self, name: str = "DatasetNext"):
        """``(images, labels)`` tensors of an op that pulls this dataset's next batch in the session
        running it (on a worker, from that worker's own reader): see :func:`dataset_next`."""
        return dataset_next(self, name=name)

    @property
    def shared_name(self) -> str:
        """The reader's key in a session's resources: one reader per distinct spec."""
        if callable(self.spec["transform"]):
            raise ValueError("an input op needs the transform by name (one of dflow.data.TRANSFORMS; "
                             "dflow.data.register_transform adds yours), so that the worker can build the "
                             f"reader; got {self.spec['transform']!r}")
        text = json.dumps(self.spec, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def __repr__(self) -> str:
        return (f"Dataset({self.path!r}, {self.split!r}, batch_size={self.batch_size}, "
                f"shard=({self.shard_index}, {self.shard_count}), {self.examples_per_epoch} examples)")


def _namespace(xp):
    import array_api_compat

    if xp is None:
        import array_api_compat.numpy as numpy_namespace

        return numpy_namespace
    return array_api_compat.array_namespace(xp.asarray(0))


def _check_shard(shard, num_chunks: int) -> tuple[int, int]:
    index, count = (int(v) for v in shard)
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"shard must be (index, count) with 0 <= index < count, got {tuple(shard)}")
    if count > num_chunks:
        raise ValueError(f"cannot deal {num_chunks} chunks out to {count} shards: prepare the store with "
                         f"a smaller --chunk_examples (at least {count} chunks)")
    return index, count


def dataset_next(dataset: Dataset, name: str = "DatasetNext"):
    """``(images, labels)`` tensors whose every run pulls ``dataset``'s next batch
    (:mod:`dflow.ops.dataset_ops`).

    ``dataset`` is a :class:`Dataset`: its settings (not the object) go into the graph, and each
    session running the op makes its own reader from them.
    """
    image_shape, image_dtype = dataset.output_spec
    attrs = {"spec": dataset.spec, "shared_name": dataset.shared_name, "image_shape": list(image_shape),
             "image_dtype": dtypes.as_dtype(image_dtype.name)}
    op = get_default_graph().create_op("DatasetNext", [], attrs, name=name)
    return op.outputs[0], op.outputs[1]
