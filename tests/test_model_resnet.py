"""ResNet-50 (dflow.models.resnet): its size at 224x224, its layouts, training and evaluation.

Only the parameter count builds at 224x224 (building runs nothing); the runs
use 32x32 images (224 -> 7x7 before the pool becomes 32 -> 1x1) and 10
classes, so each test takes seconds on two cores.
"""

from __future__ import annotations

import numpy as np
import pytest

import dflow as tf
from dflow.models import layers, resnet

SMALL = (32, 32, 3)
CLASSES = 10


def small_batch(size, seed=0):
    rng = np.random.RandomState(seed)
    return rng.rand(size, *SMALL).astype(np.float32), rng.randint(0, CLASSES, size).astype(np.int64)


def build_small(data_format="NHWC", seed=1):
    """A 32x32, 10-class ResNet-50 in a new graph: graph, images, labels, logits, loss."""
    graph = tf.Graph()
    with graph.as_default():
        graph.seed = seed
        images = tf.placeholder(tf.float32, [None, *SMALL], name="images")
        labels = tf.placeholder(tf.int64, [None], name="labels")
        logits = resnet.resnet50(images, data_format=data_format, num_classes=CLASSES)
        loss = resnet.loss(logits, labels)
    return graph, images, labels, logits, loss


def moving_means(graph):
    return [v for v in graph.get_collection(tf.GraphKeys.GLOBAL_VARIABLES) if "moving_mean" in v.name]


# The published ResNet-50 size for 1000 classes with bias-free convs and BN gamma + beta
# (torchvision's resnet50, TF-slim's resnet_v1_50 with its 1000-class head), and v1 or v1.5
# alike since the stride moves no weights. By hand, conv weights + BN (2 per channel):
#   stem 7*7*3*64 + 2*64                                             =      9,536
#   a block of bottleneck b on c inputs: c*b + 9*b*b + b*4b + 2*(b + b + 4b),
#   plus the first block's projection c*4b + 2*4b:
#   stage 1 (b=64):  c=64 block 75,008 + 2 blocks on 256 * 70,400      =    215,808
#   stage 2 (b=128): c=256 block 379,392 + 3 on 512 * 280,064          =  1,219,584
#   stage 3 (b=256): c=512 block 1,512,448 + 5 on 1024 * 1,117,184     =  7,098,368
#   stage 4 (b=512): c=1024 block 6,039,552 + 2 on 2048 * 4,462,592    = 14,964,736
#   dense 2048*1000 + 1000                                           =  2,049,000
#   total                                                            = 25,557,032
RESNET50_PARAMETERS = 25_557_032


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
def test_imagenet_size_builds_with_the_published_parameter_count(data_format):
    with tf.Graph().as_default():
        images = tf.placeholder(tf.float32, [None, *resnet.IMAGE_SHAPE])
        logits = resnet.resnet50(images, data_format=data_format)
        trainable = tf.trainable_variables()
        moving = [v for v in tf.global_variables() if "moving_" in v.name]
        updates = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
    assert logits.shape.as_list() == [None, resnet.NUM_CLASSES]
    assert sum(int(np.prod(v.shape.as_list())) for v in trainable) == RESNET50_PARAMETERS
    # 1 stem + 16 blocks * 3 + 4 projections = 53 batch norms, each with a mean and a variance
    assert len(moving) == len(updates) == 2 * 53
    names = {v.name.split(":")[0] for v in trainable}
    assert {"stem/conv/weights", "stage4/block3/expand/batchnorm/gamma", "logits/weights",
            "logits/biases"} <= names
    # v1: a stage's first block strides on its first 1x1, its 3x3 keeps the resolution
    shapes = {v.name.split(":")[0]: v.shape.as_list() for v in trainable}
    assert shapes["stage2/block1/reduce/conv/weights"] == [1, 1, 256, 128]
    assert shapes["stage2/block1/projection/conv/weights"] == [1, 1, 256, 512]


def test_stride_sits_on_the_first_1x1_and_the_stem_pads_by_three():
    with tf.Graph().as_default():
        images = tf.placeholder(tf.float32, [None, *resnet.IMAGE_SHAPE])
        resnet.resnet50(images)
        graph = tf.get_default_graph()
        convs = [op for op in graph.get_operations() if op.type == "Conv2D"]
    by_scope = {op.name.rsplit("/", 1)[0]: op for op in convs}
    assert by_scope["stage2/block1/reduce/conv"].get_attr("strides") == [1, 2, 2, 1]
    assert by_scope["stage2/block1/conv3x3/conv"].get_attr("strides") == [1, 1, 1, 1]
    stem = by_scope["stem/conv"]
    assert stem.get_attr("padding") == "VALID"
    assert stem.inputs[0].shape.as_list() == [None, 230, 230, 3]  # 224 + 3 + 3
    assert stem.outputs[0].shape.as_list() == [None, 112, 112, 64]


def test_nchw_gives_the_nhwc_logits_for_the_same_weights():
    x, _ = small_batch(2)
    with tf.Graph().as_default():
        tf.get_default_graph().seed = 1
        images = tf.placeholder(tf.float32, [None, *SMALL])
        with tf.variable_scope("net"):
            nhwc = resnet.resnet50(images, "NHWC", num_classes=CLASSES)
        with tf.variable_scope("net", reuse=True):
            nchw = resnet.resnet50(images, "NCHW", num_classes=CLASSES)
        assert len(tf.trainable_variables()) == 161  # shared, not built twice
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            for training in (True, False):
                feed = {images: x, layers.is_training(): training}
                a, b = sess.run([nhwc, nchw], feed)
                assert np.isfinite(a).all() and np.abs(a).max() > 0
                np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-4 * np.abs(a).max())


def test_a_few_adam_steps_lower_the_loss_and_move_the_moving_means():
    graph, images, labels, logits, loss = build_small()
    x, y = small_batch(4)
    with graph.as_default():
        cross_entropy = graph.get_tensor_by_name("cross_entropy:0")
        train = tf.group(tf.train.AdamOptimizer(1e-3).minimize(loss),
                         *tf.get_collection(tf.GraphKeys.UPDATE_OPS))
        means = moving_means(graph)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            before = sess.run(means)
            feed = {images: x, labels: y}
            history = [sess.run([train, loss, cross_entropy], feed)[1:] for _ in range(4)]
            final_loss, final_xent = sess.run([loss, cross_entropy], feed)
            after = sess.run(means)
    first_loss, first_xent = history[0]
    assert first_loss > first_xent > 0  # the weight decay adds to the cross-entropy
    assert final_loss < 0.8 * first_loss
    assert final_xent < 0.5 * first_xent
    assert len(means) == 53
    assert all(np.abs(b - a).max() > 1e-6 for a, b in zip(before, after))


def test_evaluation_uses_the_moving_averages_not_the_batch():
    graph, images, _, logits, _ = build_small()
    x, _ = small_batch(3)
    with graph.as_default():
        training = layers.is_training()
        updates = tf.group(*tf.get_collection(tf.GraphKeys.UPDATE_OPS))
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())

            def logits_of_first(batch, is_training):
                return sess.run(logits, {images: batch, training: is_training})[0]

            with_second, with_third = x[[0, 1]], x[[0, 2]]
            trained = [logits_of_first(b, True) for b in (with_second, with_third)]
            evaluated = [logits_of_first(b, False) for b in (with_second, with_third)]
            sess.run(updates, {images: x})  # moves the moving averages, nothing else
            evaluated_after_update = logits_of_first(with_second, False)
    # training normalizes with the batch's moments: the first image's logits depend on its neighbour
    assert not np.allclose(trained[0], trained[1], rtol=1e-3, atol=1e-5)
    # evaluation normalizes with the moving averages: they do not, but they follow the averages
    np.testing.assert_allclose(evaluated[1], evaluated[0], rtol=1e-5, atol=1e-6)
    assert not np.allclose(evaluated[0], trained[0], rtol=1e-3, atol=1e-5)
    assert not np.allclose(evaluated_after_update, evaluated[0], rtol=1e-3, atol=1e-5)


def test_loss_without_weight_decay_is_the_cross_entropy():
    graph, images, labels, logits, loss = build_small()
    x, y = small_batch(2)
    with graph.as_default():
        plain = resnet.loss(logits, labels, weight_decay=0.0)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            total, cross_entropy, decayed = sess.run(
                [loss, plain, graph.get_tensor_by_name("weights_l2:0")], {images: x, labels: y})
    np.testing.assert_allclose(total, cross_entropy + resnet.WEIGHT_DECAY * decayed, rtol=1e-5)
    assert decayed > 0
