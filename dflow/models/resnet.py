"""ResNet-50 v1 as tf_cnn_benchmarks builds it (``--model=resnet50``), on 224x224x3 images.

A 7x7/2 convolution and a 3x3/2 max pool, then four stages of 3, 4, 6 and 3
bottleneck blocks (1x1 reduce, 3x3, 1x1 expand to 4x: 64/256, 128/512,
256/1024, 512/2048 channels), a global average pool and a dense layer with bias.
Every convolution is bias-free and batch-normalized (:mod:`dflow.models.layers`).

Which variant: tf_cnn_benchmarks' ``resnet_model.py`` maps ``resnet50`` to
``bottleneck_block_v1`` and keeps v1.5 (stride on the 3x3) under its own name,
``resnet50_v1.5``. So this is v1: a stage's first block strides on its first
1x1 convolution and on its projection shortcut. Both variants have the same
25,557,032 parameters (1000 classes); v1.5 runs that 1x1 at full resolution,
so it costs a little more and is a little more accurate. tf_cnn_benchmarks
gives ImageNet 1001 classes (a background class): pass ``num_classes=1001``
for its exact logits.

As there, batch normalization decays its moving averages by 0.9 (not the
ImageNet models' 0.997 default of :mod:`~dflow.models.layers`), with epsilon 1e-5,
and the 7x7/2 stem pads explicitly by 3 on each side before a VALID
convolution ("SAME_RESNET": SAME would pad 2 before and 3 after). Global
average pooling is a mean over whatever spatial size remains, so smaller
inputs (32x32, 64x64) work too.

>>> import dflow as tf
>>> from dflow.models import resnet
>>> with tf.Graph().as_default():
...     images = tf.placeholder(tf.float32, [None, *resnet.IMAGE_SHAPE])
...     resnet.resnet50(images, data_format="NCHW").shape.as_list()
[None, 1000]
"""

from __future__ import annotations

import dflow as tf

from .layers import BATCH_NORM_EPSILON, conv_bn_relu, global_pool_logits, loss_with_weight_decay
from .layout import check_data_format, from_nhwc, window

__all__ = ["resnet50", "loss", "IMAGE_SHAPE", "NUM_CLASSES", "STAGES", "BATCH_NORM_DECAY",
           "WEIGHT_DECAY"]

IMAGE_SHAPE = (224, 224, 3)
NUM_CLASSES = 1000
# (bottleneck channels, blocks) per stage; each block outputs 4x its bottleneck channels
STAGES = ((64, 3), (128, 4), (256, 6), (512, 3))
BATCH_NORM_DECAY = 0.9  # resnet_model.py's batch_norm_config
# the ResNet paper's (He et al. 2015, section 3.4); tf_cnn_benchmarks' --weight_decay defaults to 4e-5
WEIGHT_DECAY = 1e-4


def resnet50(images, data_format: str = "NHWC", num_classes: int = NUM_CLASSES):
    """Logits ``[batch, num_classes]`` of NHWC images ``[batch, height, width, 3]``.

    Batch normalization uses the batch's moments unless
    :func:`dflow.models.layers.is_training` is fed False; its moving averages'
    updates go to ``GraphKeys.UPDATE_OPS``, which the train op must run.
    """
    check_data_format(data_format)
    x = from_nhwc(tf.convert_to_tensor(images), data_format)
    x = _conv_bn(x, 64, 7, 2, data_format, name="stem")
    x = tf.nn.max_pool(x, ksize=window(3, data_format), strides=window(2, data_format),
                       padding="SAME", data_format=data_format, name="stem_pool")
    for stage, (bottleneck, blocks) in enumerate(STAGES, start=1):
        for block in range(1, blocks + 1):
            # stage 1 follows the max pool, so it keeps the resolution; later stages halve it
            stride = 2 if block == 1 and stage > 1 else 1
            x = _bottleneck_block(x, bottleneck, stride, data_format, name=f"stage{stage}/block{block}")
    return global_pool_logits(x, num_classes, data_format)


def loss(logits, labels, weight_decay: float = WEIGHT_DECAY):
    """Mean cross-entropy plus ``weight_decay`` times the L2 loss of the conv weights and the
    dense layer (:func:`~dflow.models.layers.loss_with_weight_decay`)."""
    return loss_with_weight_decay(logits, labels, weight_decay)


def _bottleneck_block(x, bottleneck: int, stride: int, data_format: str, name: str):
    """v1 bottleneck: the stride goes on the first 1x1 and on the projection shortcut."""
    channels_in = x.shape.as_list()[1 if data_format == "NCHW" else 3]
    channels_out = 4 * bottleneck
    with tf.variable_scope(name):
        if channels_in == channels_out and stride == 1:
            shortcut = x
        else:  # every stage's first block changes the channels, so ResNet-50 never pools here
            shortcut = _conv_bn(x, channels_out, 1, stride, data_format, relu=False, name="projection")
        y = _conv_bn(x, bottleneck, 1, stride, data_format, name="reduce")
        y = _conv_bn(y, bottleneck, 3, 1, data_format, name="conv3x3")
        y = _conv_bn(y, channels_out, 1, 1, data_format, relu=False, name="expand")
        return tf.nn.relu(shortcut + y)


def _conv_bn(x, filters: int, kernel: int, stride: int, data_format: str, relu: bool = True,
             name: str = "conv"):
    """``layers.conv_bn_relu`` with ResNet's batch-norm decay and "SAME_RESNET" padding.

    A strided convolution wider than 1x1 pads ``kernel - 1`` split evenly and
    runs VALID, so the padding does not depend on the input size.
    """
    padding = "SAME"
    if stride > 1 and kernel > 1:
        before = (kernel - 1) // 2
        spatial = [before, kernel - 1 - before]
        pads = [[0, 0], [0, 0], spatial, spatial] if data_format == "NCHW" else \
            [[0, 0], spatial, spatial, [0, 0]]
        x, padding = tf.pad(x, pads), "VALID"
    return conv_bn_relu(x, filters, kernel, stride, data_format, padding, relu, name,
                        decay=BATCH_NORM_DECAY, epsilon=BATCH_NORM_EPSILON)
