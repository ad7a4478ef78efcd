"""Inception v3 (dflow.models.inception): its size at 299x299, its layouts and its training.

Running it is kept to 75x75 inputs, the smallest Inception v3 takes, to stay fast.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import dflow as tf
from dflow.models import inception
from dflow.models.layers import is_training

SMALL = 75  # the smallest input: its VALID convs and pools leave a 1x1 grid for the final pool

# Keras' InceptionV3(include_top=True, weights=None), the same network without an
# auxiliary head and with TF-slim's beta-only batch norm, reports 23,851,784 parameters:
# 23,817,352 trainable and 34,432 non-trainable (a moving mean and variance for each of
# 17,216 batch-norm channels). The trainable ones check out by hand: 21,751,136 conv
# weights + 17,216 betas + 2048 * 1000 + 1000 dense = 23,817,352.
BATCH_NORM_CHANNELS = 17_216
EXPECTED_TRAINABLE = 23_817_352


def build(size, data_format="NHWC", num_classes=inception.NUM_CLASSES, seed=1):
    """Images and labels placeholders, logits and loss of Inception v3 in a new graph."""
    graph = tf.Graph()
    with graph.as_default():
        graph.seed = seed
        images = tf.placeholder(tf.float32, [None, size, size, 3], name="images")
        labels = tf.placeholder(tf.int64, [None], name="labels")
        logits = inception.inception3(images, data_format=data_format, num_classes=num_classes)
        loss = inception.loss(logits, labels)
    return graph, images, labels, logits, loss


def count(variables):
    return sum(math.prod(v.shape.as_list()) for v in variables)


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
def test_full_size_graph_has_the_published_parameter_count(data_format):
    graph, images, _, logits, _ = build(299, data_format)
    assert logits.shape.as_list() == [None, 1000]
    trainable = graph.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES)
    moving = [v for v in graph.get_collection(tf.GraphKeys.GLOBAL_VARIABLES)
              if v not in trainable]
    assert count(trainable) == EXPECTED_TRAINABLE
    assert count(moving) == 2 * BATCH_NORM_CHANNELS
    betas = [v for v in trainable if v.name.endswith("beta:0")]
    assert len(betas) == 94 and count(betas) == BATCH_NORM_CHANNELS  # 94 convs, one BN each
    assert len(graph.get_collection(tf.GraphKeys.UPDATE_OPS)) == 2 * 94


def test_the_last_module_sees_an_8x8_grid_at_full_size():
    graph, *_ = build(299)
    concat = [op for op in graph.get_operations() if op.name.startswith("mixed_10/")
              and op.type.startswith("Concat")]
    assert concat[-1].outputs[0].shape.as_list() == [None, 8, 8, 2048]


def test_nchw_gives_the_nhwc_logits_for_the_same_weights():
    batch = np.random.default_rng(0).normal(size=(2, SMALL, SMALL, 3)).astype(np.float32)
    results, weights = [], None
    for data_format in ("NHWC", "NCHW"):
        graph, images, _, logits, _ = build(SMALL, data_format, num_classes=10)
        with graph.as_default(), tf.Session(graph=graph) as sess:
            sess.run(tf.global_variables_initializer())
            variables = tf.global_variables()
            if weights is None:
                weights = dict(zip([v.name for v in variables], sess.run(variables)))
            else:
                assert set(weights) == {v.name for v in variables}
                for v in variables:
                    v.load(weights[v.name], sess)
            results.append(sess.run(logits, {images: batch}))
    assert np.abs(results[0]).max() > 1e-3  # not trivially equal
    np.testing.assert_allclose(results[1], results[0], rtol=1e-4, atol=1e-4)


def test_a_few_steps_on_a_fixed_batch_lower_the_loss():
    rng = np.random.default_rng(0)
    graph, images, labels, _, loss = build(SMALL, num_classes=10)
    feed = {images: rng.normal(size=(4, SMALL, SMALL, 3)).astype(np.float32),
            labels: np.array([0, 1, 2, 3], dtype=np.int64)}
    with graph.as_default():
        minimize = tf.train.AdamOptimizer(1e-3).minimize(loss)
        train = tf.group(minimize, *tf.get_collection(tf.GraphKeys.UPDATE_OPS))
        moving_mean = [v for v in tf.global_variables() if v.name.endswith("moving_mean:0")][-1]
        with tf.Session(graph=graph) as sess:
            sess.run(tf.global_variables_initializer())
            moving_before = sess.run(moving_mean)
            # each step's loss is the one before its update
            losses = [float(sess.run([train, loss], feed)[1]) for _ in range(4)]
            losses.append(float(sess.run(loss, feed)))
            moving_after = sess.run(moving_mean)
            evaluated = sess.run(loss, {**feed, is_training(): False})
    # measured 2.6-3.3 -> 0.53-0.61 over seeds 0-3, where about 0.5 is the weight decay
    assert losses[-1] < 0.5 * losses[0], losses
    assert not np.allclose(moving_before, moving_after)  # the update ops ran
    assert np.isfinite(evaluated)  # the moving averages serve at test time


def test_loss_adds_the_weight_decay_of_all_but_the_batch_norms():
    graph, images, labels, logits, total = build(SMALL, num_classes=10)
    with graph.as_default():
        cross_entropy = graph.get_tensor_by_name("cross_entropy:0")
        weights = [v for v in tf.trainable_variables() if "batchnorm" not in v.name]
        assert len(weights) == 94 + 2  # the convs' kernels, the dense weights and biases
        feed = {images: np.zeros((2, SMALL, SMALL, 3), np.float32), labels: np.array([1, 2])}
        with tf.Session(graph=graph) as sess:
            sess.run(tf.global_variables_initializer())
            total_value, xent_value, weight_values = sess.run([total, cross_entropy, weights], feed)
    l2 = sum(float(np.sum(w.astype(np.float64) ** 2)) / 2 for w in weight_values)
    assert total_value - xent_value == pytest.approx(inception.WEIGHT_DECAY * l2, rel=1e-4)
