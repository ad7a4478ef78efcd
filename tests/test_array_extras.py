"""Array functions built of other ops (band and diagonal matrices, roll, meshgrid, segment means,
bincount, confusion_matrix, swish, crelu, atrous_conv2d): TensorFlow 2.21's (compat.v1) values for
the same inputs, gradients included."""

import json
import os

import numpy as np

import dflow as tf

# TensorFlow 2.21's results for _fetches() below, in order, rounded to 5 digits
with open(os.path.join(os.path.dirname(__file__), "data", "tensorflow_array_extras.json")) as f:
    TENSORFLOW = json.load(f)["values"]


def _fetches():
    x = tf.constant(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    square = tf.constant(np.arange(9, dtype=np.float32).reshape(3, 3))
    values = [tf.matrix_band_part(x, 1, 0), tf.matrix_band_part(x, -1, 1),
              tf.matrix_diag(tf.constant([[1.0, 2.0], [3.0, 4.0]])), tf.matrix_diag_part(square),
              tf.diag([1.0, 2.0, 3.0]), tf.diag_part(square), tf.trace(square),
              tf.roll(tf.constant([0, 1, 2, 3, 4]), 2, 0), tf.roll(x, [1, -1], [1, 2]),
              tf.meshgrid(tf.constant([1, 2, 3]), tf.constant([4, 5])),
              tf.meshgrid(tf.constant([1, 2, 3]), tf.constant([4, 5]), indexing="ij"),
              tf.segment_sum(tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]), tf.constant([0, 0, 2])),
              tf.segment_mean(tf.constant([1.0, 2.0, 6.0]), tf.constant([0, 0, 1])),
              tf.unsorted_segment_mean(tf.constant([1.0, 2.0, 6.0]), tf.constant([1, 1, 0]), 3),
              tf.bincount(tf.constant([1, 1, 3, 0])), tf.bincount(tf.constant([1, 1, 3]), minlength=6),
              tf.bincount(tf.constant([1, 1, 3]), maxlength=2),
              tf.confusion_matrix([0, 1, 2, 1], [0, 2, 2, 1]),
              tf.confusion_matrix([0, 1], [1, 1], num_classes=3, weights=[2, 5]),
              tf.nn.swish(tf.constant([-1.0, 0.5])), tf.nn.crelu(tf.constant([[-1.0, 2.0]])),
              tf.nn.atrous_conv2d(tf.ones([1, 5, 5, 1]), tf.ones([3, 3, 1, 1]), 2, "SAME")]
    objective = (tf.reduce_sum(tf.matrix_band_part(x, 1, 0) * 2.0) + tf.reduce_sum(tf.roll(x, 1, 2) * x)
                 + tf.trace(square * square))
    return values + tf.gradients(objective, [x, square])


def test_array_functions_give_tensorflows_values_and_gradients():
    with tf.Graph().as_default(), tf.Session() as sess:
        got = sess.run(_fetches())
    for value, want in zip(got, TENSORFLOW, strict=True):
        value = [np.asarray(v) for v in value] if isinstance(value, list) else np.round(np.asarray(value), 5)
        np.testing.assert_allclose(np.asarray(value, dtype=float), np.asarray(want, dtype=float), rtol=1e-5)


def test_scatter_nd_is_tensorflows_with_its_gradient():
    """TensorFlow 2.21's results: repeated index tuples add up, slices of trailing dims, a shape
    known only when the step runs, and the gradient of the updates (the values gathered back)."""
    with tf.Graph().as_default():
        updates = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
        rows = tf.scatter_nd([[0, 1], [2, 0], [0, 1]], updates, [3, 2, 2])
        vector = tf.scatter_nd([[4], [1]], tf.constant([9, 10]), [6])
        x = tf.placeholder(tf.float32, [None, 4])
        run_time = tf.scatter_nd([[1, 3], [0, 0]], tf.constant([7.0, 8.0]), tf.shape(x))
        weights = tf.constant(np.arange(12, dtype=np.float32).reshape(3, 2, 2))
        (grad,) = tf.gradients(tf.reduce_sum(rows * weights), [updates])
        with tf.Session() as sess:
            got = sess.run([rows, vector, run_time, grad], {x: np.zeros((2, 4))})
    assert got[0].tolist() == [[[0.0, 0.0], [6.0, 8.0]], [[0.0, 0.0], [0.0, 0.0]], [[3.0, 4.0], [0.0, 0.0]]]
    assert got[1].tolist() == [0, 10, 0, 0, 9, 0]
    assert got[2].tolist() == [[8.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 7.0]]
    assert got[3].tolist() == [[2.0, 3.0], [8.0, 9.0], [2.0, 3.0]]
