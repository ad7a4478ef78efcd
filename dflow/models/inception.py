"""Inception v3 as tf_cnn_benchmarks builds it (``inception_model.Inceptionv3Model``), on 299x299x3.

The stem (five convs, two 3x3/2 max-pools), then eleven Inception modules:
three of type A (35x35), B (down to 17x17), four of type C (factorized 7x7),
D (down to 8x8) and two of type E (expanded 3x3 banks), a global average pool
over the last 8x8 grid and a dense layer to the logits. Every conv is
:func:`~dflow.models.layers.conv2d` + :func:`~dflow.models.layers.batch_norm` +
ReLU, with tf_cnn_benchmarks' Inception batch-norm settings (decay 0.999,
epsilon 0.001).

As tf_cnn_benchmarks' default (``auxiliary=False``), there is no auxiliary
logits head, and no dropout (its Inception v4 has one, v3 not); the batch
norms learn a shift but no scale (``scale=False``), as there. One known
difference: the convs start from ``layers.conv2d``'s He initialization, not
``variance_scaling_initializer()``.

The final pool averages over whatever grid is left, so the model also runs on
inputs down to 75x75, the smallest its VALID convs and pools allow (1x1 at the end).

>>> import dflow as tf
>>> from dflow.models import inception
>>> with tf.Graph().as_default():
...     images = tf.placeholder(tf.float32, [None, 75, 75, 3])
...     inception.inception3(images, num_classes=10).shape.as_list()
[None, 10]
"""

from __future__ import annotations

import dflow as tf

from .layers import conv_bn_relu, global_pool_logits, loss_with_weight_decay
from .layout import check_data_format, from_nhwc, window

__all__ = ["inception3", "loss", "IMAGE_SHAPE", "NUM_CLASSES", "WEIGHT_DECAY"]

IMAGE_SHAPE = (299, 299, 3)
NUM_CLASSES = 1000
WEIGHT_DECAY = 4e-5  # tf_cnn_benchmarks' --weight_decay default
BATCH_NORM_DECAY = 0.999  # ConvNetBuilder.batch_norm's defaults, which its Inception v3 uses
BATCH_NORM_EPSILON = 0.001

# The modules as tf_cnn_benchmarks writes them: one list of layers per column
# (branch), whose last outputs are concatenated along the channels. A layer is
# ("conv", filters, kernel_height, kernel_width[, stride, padding]),
# ("avg_pool" | "max_pool", size, stride, padding), or ("share",): the output of
# the previous column's layer at the same depth, so two columns fork from it.


def _module_a(pool_filters: int) -> list:
    return [[("conv", 64, 1, 1)],
            [("conv", 48, 1, 1), ("conv", 64, 5, 5)],
            [("conv", 64, 1, 1), ("conv", 96, 3, 3), ("conv", 96, 3, 3)],
            [("avg_pool", 3, 1, "SAME"), ("conv", pool_filters, 1, 1)]]


MODULE_B = [[("conv", 384, 3, 3, 2, "VALID")],
            [("conv", 64, 1, 1), ("conv", 96, 3, 3), ("conv", 96, 3, 3, 2, "VALID")],
            [("max_pool", 3, 2, "VALID")]]


def _module_c(n: int) -> list:
    return [[("conv", 192, 1, 1)],
            [("conv", n, 1, 1), ("conv", n, 1, 7), ("conv", 192, 7, 1)],
            [("conv", n, 1, 1), ("conv", n, 7, 1), ("conv", n, 1, 7), ("conv", n, 7, 1),
             ("conv", 192, 1, 7)],
            [("avg_pool", 3, 1, "SAME"), ("conv", 192, 1, 1)]]


MODULE_D = [[("conv", 192, 1, 1), ("conv", 320, 3, 3, 2, "VALID")],
            [("conv", 192, 1, 1), ("conv", 192, 1, 7), ("conv", 192, 7, 1),
             ("conv", 192, 3, 3, 2, "VALID")],
            [("max_pool", 3, 2, "VALID")]]


def _module_e(pool: str) -> list:
    return [[("conv", 320, 1, 1)],
            [("conv", 384, 1, 1), ("conv", 384, 1, 3)],
            [("share",), ("conv", 384, 3, 1)],
            [("conv", 448, 1, 1), ("conv", 384, 3, 3), ("conv", 384, 1, 3)],
            [("share",), ("share",), ("conv", 384, 3, 1)],
            [(pool, 3, 1, "SAME"), ("conv", 192, 1, 1)]]


MODULES = [("mixed_0", _module_a(32)),      # 35 x 35 x 256
           ("mixed_1", _module_a(64)),      # 35 x 35 x 288
           ("mixed_2", _module_a(64)),      # 35 x 35 x 288
           ("mixed_3", MODULE_B),           # 17 x 17 x 768
           ("mixed_4", _module_c(128)),     # 17 x 17 x 768
           ("mixed_5", _module_c(160)),     # 17 x 17 x 768
           ("mixed_6", _module_c(160)),     # 17 x 17 x 768
           ("mixed_7", _module_c(192)),     # 17 x 17 x 768
           ("mixed_8", MODULE_D),           # 8 x 8 x 1280
           ("mixed_9", _module_e("avg_pool")),   # 8 x 8 x 2048
           ("mixed_10", _module_e("max_pool"))]  # 8 x 8 x 2048

STEM = [("conv", 32, 3, 3, 2, "VALID"),   # 149 x 149 x 32
        ("conv", 32, 3, 3, 1, "VALID"),   # 147 x 147 x 32
        ("conv", 64, 3, 3, 1, "SAME"),    # 147 x 147 x 64
        ("max_pool", 3, 2, "VALID"),      # 73 x 73 x 64
        ("conv", 80, 1, 1, 1, "VALID"),   # 73 x 73 x 80
        ("conv", 192, 3, 3, 1, "VALID"),  # 71 x 71 x 192
        ("max_pool", 3, 2, "VALID")]      # 35 x 35 x 192


def inception3(images, data_format: str = "NHWC", num_classes: int = NUM_CLASSES):
    """Logits ``[batch, num_classes]`` of NHWC images ``[batch, 299, 299, 3]`` (75x75 or more).

    Batch normalization follows :func:`dflow.models.layers.is_training`; group
    the train op with ``GraphKeys.UPDATE_OPS`` to keep its moving averages.
    """
    check_data_format(data_format)
    x = from_nhwc(tf.convert_to_tensor(images), data_format)
    with tf.variable_scope("stem"):
        for index, layer in enumerate(STEM):
            x = _layer(x, layer, data_format, f"{layer[0]}_{index}")
    for name, columns in MODULES:
        x = _inception_module(x, columns, data_format, name)
    # over the 8x8 grid at 299x299, as tf_cnn_benchmarks' 8x8 VALID average pool
    return global_pool_logits(x, num_classes, data_format)


def loss(logits, labels, weight_decay: float = WEIGHT_DECAY):
    """Mean cross-entropy plus ``weight_decay`` times the L2 loss of the weights
    (:func:`~dflow.models.layers.loss_with_weight_decay`)."""
    return loss_with_weight_decay(logits, labels, weight_decay)


def _inception_module(x, columns: list, data_format: str, name: str):
    """Run each column on ``x`` and concatenate their outputs along the channels."""
    with tf.variable_scope(name):
        outputs = []
        for c, column in enumerate(columns):
            outputs.append([])
            y = x
            with tf.variable_scope(f"column_{c}"):
                for depth, layer in enumerate(column):
                    if layer[0] == "share":
                        y = outputs[c - 1][depth]
                    else:
                        y = _layer(y, layer, data_format, f"{layer[0]}_{depth}")
                    outputs[c].append(y)
        return tf.concat([column[-1] for column in outputs], 1 if data_format == "NCHW" else 3)


def _layer(x, layer: tuple, data_format: str, name: str):
    kind, *args = layer
    if kind == "conv":
        return _conv_bn_relu(x, *args, data_format=data_format, name=name)
    size, stride, padding = args
    pool = tf.nn.avg_pool if kind == "avg_pool" else tf.nn.max_pool
    return pool(x, window(size, data_format), window(stride, data_format), padding,
                data_format=data_format, name=name)


def _conv_bn_relu(x, filters: int, kernel_height: int, kernel_width: int, stride: int = 1,
                  padding: str = "SAME", *, data_format: str, name: str):
    return conv_bn_relu(x, filters, (kernel_height, kernel_width), stride, data_format, padding,
                        name=name, decay=BATCH_NORM_DECAY, epsilon=BATCH_NORM_EPSILON, scale=False)
