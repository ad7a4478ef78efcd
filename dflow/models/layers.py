"""The building blocks of the ImageNet models (ResNet-50, Inception v3), as tf_cnn_benchmarks'
``ConvNetBuilder`` has them: a convolution without bias, then batch normalization and ReLU.

Batch normalization normalizes with the batch's moments while training and with
moving averages of them at test time. Which one is a graph-wide flag,
:func:`is_training` (a ``placeholder_with_default(True)``: feed it False to evaluate);
the moving averages' updates go to ``GraphKeys.UPDATE_OPS``, which the train op
runs, as in TF 1.x.

>>> import dflow as tf
>>> from dflow.models import layers
>>> with tf.Graph().as_default():
...     x = tf.placeholder(tf.float32, [None, 8, 8, 3])
...     y = layers.conv_bn_relu(x, 16, 3, 2, "NHWC", name="conv0")
...     y.shape.as_list(), len(tf.get_collection(tf.GraphKeys.UPDATE_OPS))
([None, 4, 4, 16], 2)
"""

from __future__ import annotations

import math

import dflow as tf

from .layout import window

__all__ = ["is_training", "conv2d", "batch_norm", "conv_bn_relu", "global_pool_logits",
           "loss_with_weight_decay", "BATCH_NORM_DECAY", "BATCH_NORM_EPSILON", "IS_TRAINING"]

# tf_cnn_benchmarks' --batchnorm_decay and --batchnorm_epsilon defaults
BATCH_NORM_DECAY = 0.997
BATCH_NORM_EPSILON = 1e-5
IS_TRAINING = "is_training"  # the collection that holds the graph's flag


def is_training():
    """The graph's train/test flag for batch normalization: True unless fed False."""
    found = tf.get_collection(IS_TRAINING)
    if found:
        return found[0]
    with tf.get_default_graph().name_scope(None):
        flag = tf.placeholder_with_default(True, [], name="is_training")
    tf.add_to_collection(IS_TRAINING, flag)
    return flag


def conv2d(x, filters: int, kernel: int | tuple[int, int], stride: int, data_format: str,
           padding: str = "SAME", name: str = "conv"):
    """A convolution without bias (batch normalization follows), He-initialized."""
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    channels = x.shape.as_list()[1 if data_format == "NCHW" else 3]
    with tf.variable_scope(name):
        weights = tf.get_variable(
            "weights", [kh, kw, channels, filters],
            initializer=tf.truncated_normal_initializer(stddev=math.sqrt(2.0 / (kh * kw * channels))))
        return tf.nn.conv2d(x, weights, window(stride, data_format), padding=padding,
                            data_format=data_format)


def batch_norm(x, data_format: str, decay: float = BATCH_NORM_DECAY,
               epsilon: float = BATCH_NORM_EPSILON, scale: bool = True, name: str = "batchnorm"):
    """Normalize each channel of ``x`` (4-D, in ``data_format``), then scale (``scale=True``:
    a learned gamma) and shift it (a learned beta): ``tf.layers.batch_normalization`` driven
    by the graph's :func:`is_training` flag."""
    return tf.layers.batch_normalization(x, axis=1 if data_format == "NCHW" else 3, momentum=decay,
                                         epsilon=epsilon, scale=scale, training=is_training(), name=name)


def conv_bn_relu(x, filters: int, kernel: int | tuple[int, int], stride: int, data_format: str,
                 padding: str = "SAME", relu: bool = True, name: str = "conv", **batch_norm_options):
    """``conv2d``, ``batch_norm`` (with ``batch_norm_options``: decay, epsilon, scale) and
    (``relu=True``) ReLU under one variable scope."""
    with tf.variable_scope(name):
        y = conv2d(x, filters, kernel, stride, data_format, padding)
        y = batch_norm(y, data_format, **batch_norm_options)
        return tf.nn.relu(y) if relu else y


def global_pool_logits(x, num_classes: int, data_format: str, name: str = "logits"):
    """tf_cnn_benchmarks' head: the mean over the remaining grid (any size), then its final
    ``affine`` (weights truncated normal with stddev 1/sqrt(fan-in), zero bias)."""
    features = tf.reduce_mean(x, [2, 3] if data_format == "NCHW" else [1, 2], name="global_pool")
    fan_in = features.shape.as_list()[1]
    with tf.variable_scope(name):
        weights = tf.get_variable(
            "weights", [fan_in, num_classes],
            initializer=tf.truncated_normal_initializer(stddev=math.sqrt(1.0 / fan_in)))
        biases = tf.get_variable("biases", [num_classes], initializer=tf.zeros_initializer())
        return tf.nn.bias_add(tf.matmul(features, weights), biases)


def loss_with_weight_decay(logits, labels, weight_decay: float):
    """Mean sparse softmax cross-entropy plus ``weight_decay`` times the L2 loss of the weights.

    As tf_cnn_benchmarks (``filter_l2_loss_vars``), the decay covers every trainable
    variable of the graph but batch normalization's (``batchnorm`` in the name), so build
    one model per graph or share its variables; ``weight_decay=0`` leaves it out.
    """
    cross_entropy = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.cast(labels, tf.int64), logits=logits), name="cross_entropy")
    decayed = [v for v in tf.trainable_variables() if "batchnorm" not in v.name]
    if not weight_decay or not decayed:
        return cross_entropy
    l2 = tf.add_n([tf.nn.l2_loss(v) for v in decayed], name="weights_l2")
    return tf.add(cross_entropy, weight_decay * l2, name="total_loss")
