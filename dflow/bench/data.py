"""``dflow data bench``: how fast a store streams, and what reading costs a training step.

On a CIFAR-shaped store (by default 50,000 synthetic 32x32x3 images written to
a temporary directory), reported side by side:

- reader throughput, images/sec over one shuffled epoch of batches of 100:
  the same images held in a NumPy array (permuted, sliced: the ceiling), the
  reader in the consumer's thread (``prefetch=0``), and with a prefetch thread;
- the I/O overhead of the CIFAR-10 tutorial CNN's training step (batch 100,
  local ``Session``, the tutorial's training distortions), as the seeds define
  it: ``(synthetic - real) / synthetic x 100`` in images/sec, where *real*
  pulls each batch from the store through the ``DatasetNext`` input op with
  prefetch on, and *synthetic* is the same op serving one batch over and over
  (``Dataset(synthetic=True)``). The two alternate, twice, and each keeps its
  faster run (the machines are shared and noisy).
"""

from __future__ import annotations

import json
import os
import tempfile
import time

import numpy as np

__all__ = ["run", "reader_throughput", "training_overhead"]

BATCH = 100


def _numpy_epoch(images: np.ndarray, labels: np.ndarray, seed: int = 0) -> float:
    """images/sec of a shuffled epoch of batches sliced from arrays in memory."""
    begin = time.perf_counter()
    order = np.random.default_rng(seed).permutation(len(labels))
    shuffled, shuffled_labels = images[order], labels[order]
    for start in range(0, len(labels), BATCH):
        shuffled[start:start + BATCH], shuffled_labels[start:start + BATCH]
    return len(labels) / (time.perf_counter() - begin)


def _reader_epoch(store: str, prefetch: int) -> float:
    from dflow.data import Dataset

    with Dataset(store, "train", BATCH, num_epochs=1, prefetch=prefetch) as data:
        begin = time.perf_counter()
        count = sum(len(labels) for _, labels in data)
        return count / (time.perf_counter() - begin)


def reader_throughput(store: str) -> dict:
    """images/sec: in-memory NumPy, the reader alone, the reader with 4 batches prefetched."""
    from dflow.data import open_store

    root = open_store(store)
    images, labels = root["train/images"][...], root["train/labels"][...]
    return {"numpy_in_memory": _numpy_epoch(images, labels),
            "reader_single_thread": _reader_epoch(store, prefetch=0),
            "reader_prefetch": _reader_epoch(store, prefetch=4)}


def _training_rate(store: str, synthetic: bool, warmup: int, steps: int) -> tuple[float, float]:
    """images/sec of the CIFAR-10 training step fed by the input op, and the seconds spent
    waiting for data per step."""
    import dflow as tf
    from dflow.data import Dataset
    from dflow.models import cifar10

    graph = tf.Graph()
    with graph.as_default():
        tf.set_random_seed(0)
        data = Dataset(store, "train", BATCH, transform="cifar10_train", drop_remainder=True, prefetch=4,
                       synthetic=synthetic)
        images, labels = data.get_next()
        loss = cifar10.loss(cifar10.inference(images), labels)
        train_op = tf.train.GradientDescentOptimizer(0.01).minimize(loss)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            for _ in range(warmup):
                sess.run(train_op)
            reader = next(r for r in sess.state.resources.values() if isinstance(r, Dataset))
            waited = reader.wait_seconds
            begin = time.perf_counter()
            for _ in range(steps):
                sess.run(train_op)
            elapsed = time.perf_counter() - begin
            return steps * BATCH / elapsed, (reader.wait_seconds - waited) / steps


def training_overhead(store: str, warmup: int = 5, steps: int = 50, repeats: int = 2) -> dict:
    """The seeds' I/O overhead of the CIFAR-10 step: (synthetic - real) / synthetic x 100."""
    runs = {"synthetic": [], "real": []}
    for _ in range(repeats):
        for kind in runs:
            runs[kind].append(_training_rate(store, kind == "synthetic", warmup, steps))
    synthetic, real = (max(runs[k]) for k in ("synthetic", "real"))
    return {"synthetic_images_per_sec": synthetic[0], "real_images_per_sec": real[0],
            "real_wait_ms_per_step": real[1] * 1000,
            "io_overhead_percent": (synthetic[0] - real[0]) / synthetic[0] * 100,
            "runs": {k: [r[0] for r in v] for k, v in runs.items()}}


def _store(path: str | None, directory: str, echo) -> str:
    if path is not None:
        return path
    from dflow.data import prepare

    echo("generating 50,000 synthetic 32x32x3 images ...")
    return prepare("synthetic", out=os.path.join(directory, "bench.zarr"), echo=None,
                   image_shape=(32, 32, 3), train_count=50_000, test_count=0)


def run(store: str | None = None, steps: int = 50, output: str | None = None, echo=print) -> dict:
    """Measure and print both tables; the results as a dict (and JSON at ``output``)."""
    with tempfile.TemporaryDirectory() as directory:
        path = _store(store, directory, echo)
        reading = reader_throughput(path)
        echo(f"reader, images/sec (batch {BATCH}, shuffled): numpy in memory "
             f"{reading['numpy_in_memory']:,.0f} | store, one thread {reading['reader_single_thread']:,.0f}"
             f" | store, prefetch {reading['reader_prefetch']:,.0f}")
        training = training_overhead(path, steps=steps)
    echo(f"CIFAR-10 training step, batch {BATCH}: synthetic {training['synthetic_images_per_sec']:.1f} "
         f"images/sec, real (store, prefetch) {training['real_images_per_sec']:.1f}; I/O overhead "
         f"{training['io_overhead_percent']:.2f}% (waited {training['real_wait_ms_per_step']:.2f} ms/step)")
    results = {"reader_images_per_sec": reading, "training": training}
    if output:
        with open(output, "w") as f:
            json.dump(results, f, indent=2)
    return results
