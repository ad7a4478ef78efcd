"""Deep MNIST: the CNN of TensorFlow's "Deep MNIST for Experts" tutorial.

conv 5x5x32 + ReLU + 2x2 max-pool, conv 5x5x64 + ReLU + 2x2 max-pool, a
1024-unit ReLU layer with dropout, and a 10-way linear layer. Weights start
from a truncated normal with stddev 0.1 and biases at 0.1, as in the tutorial.
Convs run in ``data_format`` (the seed's ``deepMNIST_gpu.py`` adds NCHW); the
input is NHWC (or flat 784) either way, see :mod:`dflow.models.layout`.

>>> import dflow as tf
>>> from dflow.models import deep_mnist
>>> with tf.Graph().as_default():
...     images = tf.placeholder(tf.float32, [None, 28, 28, 1])
...     keep_prob = tf.placeholder(tf.float32, [])
...     deep_mnist.deep_mnist(images, keep_prob, data_format="NCHW").shape.as_list()
[None, 10]
"""

from __future__ import annotations

import dflow as tf

from .layout import check_data_format, flatten_nhwc, from_nhwc, window
from .mnist_dnn import loss

__all__ = ["deep_mnist", "loss", "IMAGE_SHAPE", "NUM_CLASSES"]

IMAGE_SHAPE = (28, 28, 1)
NUM_CLASSES = 10


def deep_mnist(images, keep_prob=None, data_format: str = "NHWC", num_classes: int = NUM_CLASSES):
    """Logits ``[batch, num_classes]`` of NHWC images ``[batch, 28, 28, 1]`` (or ``[batch, 784]``).

    ``keep_prob`` (a float or a scalar placeholder, fed 0.5 to train and 1.0 to
    test) turns on dropout after the 1024-unit layer; None leaves it out.
    """
    check_data_format(data_format)
    images = tf.convert_to_tensor(images)
    if images.shape.ndims == 2:
        images = tf.reshape(images, [-1, *IMAGE_SHAPE])
    x = from_nhwc(images, data_format)
    for i, (channels_in, channels_out) in enumerate([(1, 32), (32, 64)], start=1):
        with tf.variable_scope(f"conv{i}"):
            w = _weight([5, 5, channels_in, channels_out])
            conv = tf.nn.conv2d(x, w, strides=[1, 1, 1, 1], padding="SAME", data_format=data_format)
            x = tf.nn.relu(tf.nn.bias_add(conv, _bias([channels_out]), data_format=data_format))
        x = tf.nn.max_pool(x, ksize=window(2, data_format), strides=window(2, data_format),
                           padding="SAME", data_format=data_format, name=f"pool{i}")
    with tf.variable_scope("fc1"):
        x = tf.nn.relu(tf.matmul(flatten_nhwc(x, data_format), _weight([7 * 7 * 64, 1024]))
                       + _bias([1024]))
    if keep_prob is not None:
        x = tf.nn.dropout(x, keep_prob)
    with tf.variable_scope("fc2"):
        return tf.matmul(x, _weight([1024, num_classes])) + _bias([num_classes])


def _weight(shape):
    init = tf.truncated_normal_initializer(stddev=0.1)
    return tf.get_variable("weights", shape, initializer=init)


def _bias(shape):
    return tf.get_variable("biases", shape, initializer=tf.constant_initializer(0.1))
