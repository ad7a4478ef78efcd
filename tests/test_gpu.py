"""CuPy paths: ops placed on /gpu:0 compute on the GPU and agree with the CPU.
Marked `gpu`; skipped with a reason where no GPU or CuPy exists."""

import numpy as np
import pytest

import dflow as tf

pytestmark = pytest.mark.gpu


def _model(device):
    rng = np.random.default_rng(0)
    images = tf.constant(rng.standard_normal((4, 8, 8, 3)).astype(np.float32))
    kernel = tf.Variable(rng.standard_normal((3, 3, 3, 5)).astype(np.float32))
    with tf.device(device):
        conv = tf.nn.relu(tf.nn.conv2d(images, kernel, [1, 1, 1, 1], "SAME"))
        pooled = tf.nn.max_pool(conv, [1, 3, 3, 1], [1, 2, 2, 1], "SAME")
        loss = tf.reduce_mean(tf.square(pooled))
        (grad,) = tf.gradients(loss, [kernel])
    return loss, grad


def test_gpu_ops_match_cpu():
    results = []
    for device in ("/cpu:0", "/gpu:0"):
        with tf.Graph().as_default():
            loss, grad = _model(device)
            with tf.Session() as sess:
                sess.run(tf.global_variables_initializer())
                results.append(sess.run([loss, grad]))
                assert any(n.device_type == "GPU" for n in _nodes(sess)) == (device == "/gpu:0")
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-4)
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-3, atol=1e-5)


def _nodes(sess):
    return [n for plan in sess._plans.values() for n in plan.nodes.values()]
