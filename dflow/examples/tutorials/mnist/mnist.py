"""The MNIST model of TF 1.x's ``fully_connected_feed.py`` tutorial: ``from
tensorflow.examples.tutorials.mnist import mnist``.

Two ReLU layers and a linear one, built in the tutorial's four steps, with its variable names
(``hidden1/weights``, ``hidden1/biases``, ..., ``softmax_linear/biases``) so that its
checkpoints and summaries read the same:

>>> import dflow as tf
>>> from dflow.examples.tutorials.mnist import mnist
>>> with tf.Graph().as_default():
...     images = tf.placeholder(tf.float32, [None, mnist.IMAGE_PIXELS])
...     labels = tf.placeholder(tf.int32, [None])
...     logits = mnist.inference(images, 128, 32)
...     train_op = mnist.training(mnist.loss(logits, labels), 0.01)
...     correct = mnist.evaluation(logits, labels)
...     [v.op.name for v in tf.trainable_variables()][:2]
['hidden1/weights', 'hidden1/biases']
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

# the TF 1.x API of the package above: dflow's (and TensorFlow's compat.v1 where `dflow bench
# script` serves this module to TensorFlow as tensorflow.examples.tutorials.mnist.mnist)
from .... import (
    Variable,
    cast,
    int32,
    losses,
    matmul,
    name_scope,
    nn,
    reduce_sum,
    summary,
    to_int64,
    train,
    truncated_normal,
    zeros,
)

if TYPE_CHECKING:
    from ....graph import Tensor

__all__ = ["NUM_CLASSES", "IMAGE_SIZE", "IMAGE_PIXELS", "inference", "loss", "training", "evaluation"]

NUM_CLASSES = 10
IMAGE_SIZE = 28
IMAGE_PIXELS = IMAGE_SIZE * IMAGE_SIZE


def _layer(inputs: Tensor, fan_in: int, units: int, scope: str, relu: bool = True) -> Tensor:
    with name_scope(scope):
        weights = Variable(truncated_normal([fan_in, units], stddev=1.0 / math.sqrt(fan_in)), name="weights")
        biases = Variable(zeros([units]), name="biases")
        outputs = matmul(inputs, weights) + biases
        return nn.relu(outputs) if relu else outputs


def inference(images: Tensor, hidden1_units: int, hidden2_units: int) -> Tensor:
    """The logits ``[batch, NUM_CLASSES]`` of flattened ``images``: ReLU layers of
    ``hidden1_units`` and ``hidden2_units``, weights from a truncated normal of stddev
    1/sqrt(fan-in), zero biases."""
    hidden1 = _layer(images, IMAGE_PIXELS, hidden1_units, "hidden1")
    hidden2 = _layer(hidden1, hidden1_units, hidden2_units, "hidden2")
    return _layer(hidden2, hidden2_units, NUM_CLASSES, "softmax_linear", relu=False)


def loss(logits: Tensor, labels: Tensor) -> Tensor:
    """The mean sparse softmax cross-entropy of ``logits`` against integer ``labels``."""
    return losses.sparse_softmax_cross_entropy(labels=to_int64(labels), logits=logits)


def training(loss: Tensor, learning_rate: float):
    """The train op: gradient descent on ``loss``, counting steps in a ``global_step``
    variable, with a scalar summary of the loss."""
    summary.scalar("loss", loss)
    global_step = Variable(0, name="global_step", trainable=False)
    return train.GradientDescentOptimizer(learning_rate).minimize(loss, global_step=global_step)


def evaluation(logits: Tensor, labels: Tensor) -> Tensor:
    """How many of the batch's ``labels`` are the top logit (an int32 scalar)."""
    return reduce_sum(cast(nn.in_top_k(logits, labels, 1), int32))
