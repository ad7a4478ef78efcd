"""The CIFAR-10 tutorial CNN's training step that ``dflow bench --local`` and the engine's
figures (:mod:`dflow.bench.engine`) time."""

from __future__ import annotations

import time

import numpy

__all__ = ["build_dflow_step", "synthetic_batch", "time_steps"]


def synthetic_batch(batch_size: int, seed: int = 0):
    """Random 24x24x3 images and labels 0..9: what the CIFAR-10 step benchmarks feed."""
    rng = numpy.random.default_rng(seed)
    images = rng.standard_normal((batch_size, 24, 24, 3)).astype(numpy.float32)
    labels = rng.integers(0, 10, batch_size).astype(numpy.int32)
    return images, labels


def build_dflow_step(batch_size: int, data_format: str):
    """The CIFAR-10 tutorial CNN's training step in a session of its own, variables initialized:
    ``(sess, train_op, images, labels)``."""
    import dflow as tf
    from dflow.models import cifar10

    graph = tf.Graph()
    with graph.as_default():
        images = tf.placeholder(tf.float32, [batch_size, 24, 24, 3], name="images")
        labels = tf.placeholder(tf.int32, [batch_size], name="labels")
        loss = cifar10.loss(cifar10.inference(images, data_format=data_format), labels)
        train_op = tf.train.GradientDescentOptimizer(0.01).minimize(loss)
        init = tf.global_variables_initializer()
    sess = tf.Session(graph=graph)
    sess.run(init)
    return sess, train_op, images, labels


def time_steps(step, warmup: int, steps: int) -> list[float]:
    """Seconds of each of ``steps`` calls of ``step()``, after ``warmup`` untimed ones."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return times
