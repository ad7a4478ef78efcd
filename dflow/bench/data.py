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
  (``Dataset(synthetic=True)``). The two sessions take turns in blocks of
  steps, so that a shared, noisy machine's drift falls on both alike.
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


def _training_step(store: str, synthetic: bool):
    """A session running the CIFAR-10 training step on batches from the ``DatasetNext`` op,
    and its step function; the reader is the session's."""
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
        init = tf.global_variables_initializer()
    sess = tf.Session(graph=graph)
    sess.run(init)
    return sess, lambda: sess.run(train_op)


def training_overhead(store: str, warmup: int = 5, steps: int = 200, block: int = 25) -> dict:
    """The seeds' I/O overhead of the CIFAR-10 step: (synthetic - real) / synthetic x 100.

    The two sessions take turns, ``block`` steps each, so that both see the same share of a
    shared machine's ups and downs. (While the synthetic one runs, the real reader refills
    its 4 prefetched batches: ~4 of every ``block`` batches are prepared off the clock, a
    bias of ~0.5% at 25.)
    """
    from dflow.data import Dataset

    sessions = {kind: _training_step(store, kind == "synthetic") for kind in ("synthetic", "real")}
    seconds = dict.fromkeys(sessions, 0.0)
    for _, step in sessions.values():
        for _ in range(warmup):
            step()
    reader = next(r for r in sessions["real"][0].state.resources.values() if isinstance(r, Dataset))
    waited = reader.wait_seconds
    for _ in range(max(1, steps // block)):
        for kind, (_, step) in sessions.items():
            begin = time.perf_counter()
            for _ in range(block):
                step()
            seconds[kind] += time.perf_counter() - begin
    for sess, _ in sessions.values():
        sess.close()
    timed = max(1, steps // block) * block
    synthetic, real = (timed * BATCH / seconds[kind] for kind in ("synthetic", "real"))
    return {"synthetic_images_per_sec": synthetic, "real_images_per_sec": real,
            "real_wait_ms_per_step": (reader.wait_seconds - waited) / timed * 1000,
            "io_overhead_percent": (synthetic - real) / synthetic * 100, "steps": timed}


def _store(path: str | None, directory: str, echo) -> str:
    if path is not None:
        return path
    from dflow.data import prepare

    echo("generating 50,000 synthetic 32x32x3 images ...")
    return prepare("synthetic", out=os.path.join(directory, "bench.zarr"), echo=None,
                   image_shape=(32, 32, 3), train_count=50_000, test_count=0)


def run(store: str | None = None, steps: int = 200, output: str | None = None, echo=print) -> dict:
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
