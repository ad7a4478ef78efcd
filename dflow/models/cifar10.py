"""The CNN of TensorFlow's CIFAR-10 tutorial (``cifar10.inference``), on 24x24x3 crops.

conv1 5x5x3x64 + ReLU, max-pool 3x3/2, LRN, conv2 5x5x64x64 + ReLU, LRN,
max-pool 3x3/2, local3 (384, ReLU), local4 (192, ReLU), softmax_linear (10).
Initializers, biases and weight decays are the tutorial's; the weight-decay
terms go to the ``'losses'`` collection and :func:`loss` adds them up, as there.

LRN normalizes across channels and is defined on NHWC, so in NCHW the model
transposes around each LRN (tf_cnn_benchmarks does the same).

>>> import dflow as tf
>>> from dflow.models import cifar10
>>> with tf.Graph().as_default():
...     images = tf.placeholder(tf.float32, [None, 24, 24, 3])
...     cifar10.inference(images).shape.as_list()
[None, 10]
"""

from __future__ import annotations

import dflow as tf

from .layout import check_data_format, flatten_nhwc, from_nhwc, to_nhwc, window

__all__ = ["inference", "cifar10", "loss", "IMAGE_SHAPE", "NUM_CLASSES"]

IMAGE_SHAPE = (24, 24, 3)
NUM_CLASSES = 10
LOSSES = "losses"


def inference(images, data_format: str = "NHWC", num_classes: int = NUM_CLASSES):
    """Logits ``[batch, num_classes]`` of NHWC images ``[batch, 24, 24, 3]``."""
    check_data_format(data_format)
    x = from_nhwc(tf.convert_to_tensor(images), data_format)
    with tf.variable_scope("conv1") as scope:
        conv1 = _conv_relu(x, [5, 5, 3, 64], 0.0, scope.name, data_format)
    pool1 = _max_pool_3x3(conv1, data_format, "pool1")
    norm1 = _lrn(pool1, data_format, "norm1")
    with tf.variable_scope("conv2") as scope:
        conv2 = _conv_relu(norm1, [5, 5, 64, 64], 0.1, scope.name, data_format)
    norm2 = _lrn(conv2, data_format, "norm2")
    pool2 = _max_pool_3x3(norm2, data_format, "pool2")
    with tf.variable_scope("local3") as scope:
        reshape = flatten_nhwc(pool2, data_format)
        dim = reshape.shape.as_list()[1]
        weights = _variable_with_weight_decay("weights", [dim, 384], stddev=0.04, wd=0.004)
        biases = tf.get_variable("biases", [384], initializer=tf.constant_initializer(0.1))
        local3 = tf.nn.relu(tf.matmul(reshape, weights) + biases, name=scope.name)
    with tf.variable_scope("local4") as scope:
        weights = _variable_with_weight_decay("weights", [384, 192], stddev=0.04, wd=0.004)
        biases = tf.get_variable("biases", [192], initializer=tf.constant_initializer(0.1))
        local4 = tf.nn.relu(tf.matmul(local3, weights) + biases, name=scope.name)
    with tf.variable_scope("softmax_linear") as scope:
        weights = _variable_with_weight_decay("weights", [192, num_classes], stddev=1 / 192.0,
                                              wd=None)
        biases = tf.get_variable("biases", [num_classes], initializer=tf.constant_initializer(0.0))
        return tf.add(tf.matmul(local4, weights), biases, name=scope.name)


cifar10 = inference  # the registry's name for it


def loss(logits, labels):
    """Mean cross-entropy plus every weight-decay term in the ``'losses'`` collection.

    Call it once per graph: like the tutorial, it appends the cross-entropy to
    the collection and returns the collection's sum.
    """
    labels = tf.cast(labels, tf.int64)
    cross_entropy = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=logits, name="cross_entropy_per_example")
    cross_entropy_mean = tf.reduce_mean(cross_entropy, name="cross_entropy")
    tf.add_to_collection(LOSSES, cross_entropy_mean)
    return tf.add_n(tf.get_collection(LOSSES), name="total_loss")


def _variable_with_weight_decay(name, shape, stddev, wd):
    """A truncated-normal variable; with ``wd``, ``wd * l2_loss(var)`` joins the ``'losses'``."""
    var = tf.get_variable(name, shape, initializer=tf.truncated_normal_initializer(stddev=stddev))
    if wd is not None:
        weight_decay = tf.multiply(tf.nn.l2_loss(var), wd, name="weight_loss")
        tf.add_to_collection(LOSSES, weight_decay)
    return var


def _conv_relu(x, shape, bias, name, data_format):
    kernel = _variable_with_weight_decay("weights", shape, stddev=5e-2, wd=None)
    conv = tf.nn.conv2d(x, kernel, [1, 1, 1, 1], padding="SAME", data_format=data_format)
    biases = tf.get_variable("biases", shape[-1:], initializer=tf.constant_initializer(bias))
    return tf.nn.relu(tf.nn.bias_add(conv, biases, data_format=data_format), name=name)


def _max_pool_3x3(x, data_format, name):
    return tf.nn.max_pool(x, ksize=window(3, data_format), strides=window(2, data_format),
                          padding="SAME", data_format=data_format, name=name)


def _lrn(x, data_format, name):
    normalized = tf.nn.lrn(to_nhwc(x, data_format), 4, bias=1.0, alpha=0.001 / 9.0, beta=0.75,
                           name=name)
    return from_nhwc(normalized, data_format)
