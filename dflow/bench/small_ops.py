"""Step time of a small-op graph and a conv net under Session thread settings, side by side.

Two training steps the corpus scripts spend their time in: an LSTM unrolled over 28 steps with
``static_rnn`` (thousands of tiny ops: per-op overhead and BLAS threading decide it) and the deep
MNIST CNN at batch 50 (big convolutions: BLAS threads help). Each ConfigProto variant runs in
interleaved rounds in this process, so a busy shared machine slows every variant alike; the table
gives the median ms per step and the ratio to the default ``ConfigProto()``.

    python -m dflow.bench.small_ops --rounds 3 --steps 5
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy

import dflow as tf

VARIANTS = {
    "default": {},
    "intra_op=1": {"intra_op_parallelism_threads": 1},
    "inter_op=2": {"inter_op_parallelism_threads": 2},
}


def lstm_step(batch: int = 128, steps: int = 28, units: int = 128):
    """recurrent_network.py's model: MNIST rows as a 28-step sequence, one BasicLSTMCell."""
    x = tf.placeholder(tf.float32, [None, steps, 28])
    y = tf.placeholder(tf.float32, [None, 10])
    cell = tf.nn.rnn_cell.BasicLSTMCell(units, forget_bias=1.0)
    outputs, _ = tf.nn.static_rnn(cell, tf.unstack(x, steps, 1), dtype=tf.float32)
    logits = tf.layers.dense(outputs[-1], 10)
    loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(logits=logits, labels=y))
    train = tf.train.GradientDescentOptimizer(0.01).minimize(loss)
    rng = numpy.random.default_rng(0)
    feed = {x: rng.random((batch, steps, 28), dtype=numpy.float32),
            y: numpy.eye(10, dtype=numpy.float32)[rng.integers(0, 10, batch)]}
    return train, feed


def deep_mnist_step(batch: int = 50):
    """mnist_deep.py's model: two 5x5 conv + pool layers, a 1024-unit dense layer, dropout."""
    x = tf.placeholder(tf.float32, [None, 28, 28, 1])
    y = tf.placeholder(tf.float32, [None, 10])
    h = tf.layers.max_pooling2d(tf.layers.conv2d(x, 32, 5, padding="same", activation=tf.nn.relu), 2, 2)
    h = tf.layers.max_pooling2d(tf.layers.conv2d(h, 64, 5, padding="same", activation=tf.nn.relu), 2, 2)
    h = tf.nn.dropout(tf.layers.dense(tf.reshape(h, [-1, 7 * 7 * 64]), 1024, tf.nn.relu), 0.5)
    logits = tf.layers.dense(h, 10)
    loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(logits=logits, labels=y))
    train = tf.train.AdamOptimizer(1e-4).minimize(loss)
    rng = numpy.random.default_rng(0)
    feed = {x: rng.random((batch, 28, 28, 1), dtype=numpy.float32),
            y: numpy.eye(10, dtype=numpy.float32)[rng.integers(0, 10, batch)]}
    return train, feed


def _time_steps(build, config: dict, steps: int) -> float:
    with tf.Graph().as_default():
        train, feed = build()
        with tf.Session(config=tf.ConfigProto(**config)) as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(train, feed)  # warm-up: plans the step
            start = time.perf_counter()
            for _ in range(steps):
                sess.run(train, feed)
            return (time.perf_counter() - start) / steps


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args(argv)
    for label, build in [("LSTM static_rnn x28, batch 128", lstm_step),
                         ("deep MNIST CNN, batch 50", deep_mnist_step)]:
        times: dict[str, list[float]] = {name: [] for name in VARIANTS}
        for _ in range(args.rounds):
            for name, config in VARIANTS.items():
                times[name].append(_time_steps(build, config, args.steps))
        base = statistics.median(times["default"])
        print(label)
        for name, values in times.items():
            med = statistics.median(values)
            print(f"  {name:<12} {med * 1e3:8.1f} ms/step  (range {min(values) * 1e3:.1f}-"
                  f"{max(values) * 1e3:.1f})  {base / med:5.2f}x default")


if __name__ == "__main__":
    main()
