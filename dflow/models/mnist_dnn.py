"""MNIST-DNN: the fully connected MNIST network of the MPI-TensorFlow paper.

The seed (a summary of "TensorFlow on MPI") names the model but not its layer
sizes, so this is the common choice: 784-512-512-10 with ReLU, weights from a
truncated normal with stddev ``1/sqrt(fan_in)`` and zero biases, as TF's
``mnist.py`` tutorial initializes its hidden layers.

>>> import dflow as tf
>>> from dflow.models import mnist_dnn
>>> with tf.Graph().as_default():
...     images = tf.placeholder(tf.float32, [None, 784])
...     mnist_dnn.mnist_dnn(images).shape.as_list()
[None, 10]
"""

from __future__ import annotations

import math

import dflow as tf

__all__ = ["mnist_dnn", "loss", "HIDDEN_UNITS", "IMAGE_PIXELS", "NUM_CLASSES"]

IMAGE_PIXELS = 784
HIDDEN_UNITS = (512, 512)
NUM_CLASSES = 10


def mnist_dnn(images, hidden_units=HIDDEN_UNITS, num_classes: int = NUM_CLASSES):
    """Logits ``[batch, num_classes]`` of flat images ``[batch, 784]`` (or 28x28x1 images)."""
    x = tf.convert_to_tensor(images)
    if x.shape.ndims != 2:
        x = tf.reshape(x, [-1, IMAGE_PIXELS])
    for i, units in enumerate(hidden_units, start=1):
        with tf.variable_scope(f"hidden{i}"):
            x = tf.nn.relu(_dense(x, units))
    with tf.variable_scope("softmax_linear"):
        return _dense(x, num_classes)


def _dense(x, units: int):
    fan_in = x.shape.as_list()[-1]
    init = tf.truncated_normal_initializer(stddev=1.0 / math.sqrt(fan_in))
    weights = tf.get_variable("weights", [fan_in, units], initializer=init)
    biases = tf.get_variable("biases", [units], initializer=tf.zeros_initializer())
    return tf.matmul(x, weights) + biases


def loss(logits, labels):
    """Mean sparse softmax cross-entropy; ``labels`` are class indices."""
    labels = tf.cast(labels, tf.int64)
    cross_entropy = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    return tf.reduce_mean(cross_entropy, name="xentropy_mean")
