"""Linear algebra: TensorFlow 2.21's (compat.v1) values for the same matrices, gradients of the
inverse, determinant, Cholesky factor and solve included; the kernels on array_api_strict too;
factorizations without a gradient refuse one by name."""

import json
import os

import numpy as np
import pytest
from namespaces import OTHER_NAMESPACES, assert_same_on

import dflow as tf

with open(os.path.join(os.path.dirname(__file__), "data", "tensorflow_linalg.json")) as f:
    TENSORFLOW = json.load(f)["values"]


def _fetches():
    rng = np.random.default_rng(0)
    m = rng.standard_normal((2, 3, 3))
    a = tf.constant(m @ np.transpose(m, (0, 2, 1)) + 3 * np.eye(3))  # symmetric positive definite
    b, w = tf.constant(rng.standard_normal((2, 3, 2))), tf.constant(rng.standard_normal((2, 3, 3)))
    inverse, determinant, factor = tf.matrix_inverse(a), tf.matrix_determinant(a), tf.cholesky(a)
    solved, solved_transposed = tf.matrix_solve(a, b), tf.matrix_solve(a, b, adjoint=True)
    loss = (tf.reduce_sum(inverse * w) + tf.reduce_sum(determinant) + tf.reduce_sum(factor * w)
            + tf.reduce_sum(solved * solved) + tf.reduce_sum(solved_transposed))
    eigenvalues, _ = tf.self_adjoint_eig(a)
    s, u, v = tf.svd(tf.constant(rng.standard_normal((3, 2))))
    q, r = tf.qr(tf.constant(rng.standard_normal((3, 2))))
    return [inverse, determinant, factor, solved, solved_transposed, loss, *tf.gradients(loss, [a, b]),
            eigenvalues, s, tf.abs(u), tf.abs(v), tf.abs(q), tf.abs(r)]  # (signs of vectors are free)


def test_linear_algebra_gives_tensorflows_values_and_gradients():
    with tf.Graph().as_default(), tf.Session() as sess:
        got = sess.run(_fetches())
    for value, want in zip(got, TENSORFLOW, strict=True):
        np.testing.assert_allclose(np.asarray(value).ravel()[:8], want, rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("xp", OTHER_NAMESPACES)
def test_linear_algebra_runs_on_other_namespaces(xp):
    with tf.Graph().as_default():
        assert_same_on(xp, _fetches(), rtol=1e-9)


def test_factorizations_refuse_a_gradient_and_bad_shapes_are_named():
    with tf.Graph().as_default():
        x = tf.constant(np.eye(3))
        with pytest.raises(LookupError, match="tf.svd .* dflow has no gradient"):
            tf.gradients(tf.reduce_sum(tf.svd(x)[0]), [x])
        with pytest.raises(ValueError, match=r"square matrices \[..., N, N\], got shape \(2, 3\)"):
            tf.matrix_inverse(tf.zeros([2, 3]))
