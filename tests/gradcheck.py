"""Finite-difference checks of symbolic gradients (float64, central differences)."""

import numpy as np

import dflow as tf


def check_gradients(build, inputs, *, eps=1e-6, rtol=1e-4, atol=1e-6, seed=0):
    """Compare ``tf.gradients`` of ``sum(build(*xs) * w)`` with finite differences.

    ``inputs`` are float64 arrays; ``w`` is a fixed random weighting so every
    output element's gradient matters.
    """
    rng = np.random.default_rng(seed)
    graph = tf.Graph()
    with graph.as_default():
        xs = [tf.placeholder(tf.float64, a.shape) for a in inputs]
        y = build(*xs)
        weights = rng.standard_normal(y.shape.as_list() if y.shape.is_fully_defined() else ())
        objective = tf.reduce_sum(y * tf.constant(weights, tf.float64))
        grads = tf.gradients(objective, xs)
        with tf.Session() as sess:
            feeds = dict(zip(xs, inputs))
            symbolic = sess.run(grads, feeds)
            for index, (x, value) in enumerate(zip(xs, inputs)):
                numeric = np.zeros_like(value)
                flat = numeric.reshape(-1)
                for i in range(value.size):
                    probe = value.copy().reshape(-1)
                    probe[i] += eps
                    up = sess.run(objective, {**feeds, x: probe.reshape(value.shape)})
                    probe[i] -= 2 * eps
                    down = sess.run(objective, {**feeds, x: probe.reshape(value.shape)})
                    flat[i] = (up - down) / (2 * eps)
                np.testing.assert_allclose(symbolic[index], numeric, rtol=rtol, atol=atol,
                                           err_msg=f"gradient of input {index}")
