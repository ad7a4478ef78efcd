"""Image layouts inside the models: inputs arrive NHWC, convs run in ``data_format``.

As in tf_cnn_benchmarks, a model takes NHWC images whatever its ``data_format``
and transposes once at the start when it computes in NCHW. Before the first
fully connected layer it flattens in NHWC order, so the same weights give the
same logits in both layouts (train in NCHW on a GPU, serve in NHWC on a CPU).
"""

from __future__ import annotations

import dflow as tf

__all__ = ["DATA_FORMATS", "check_data_format", "from_nhwc", "to_nhwc", "flatten_nhwc", "window"]

DATA_FORMATS = ("NHWC", "NCHW")


def check_data_format(data_format: str) -> str:
    if data_format not in DATA_FORMATS:
        raise ValueError(f"data_format must be one of {', '.join(DATA_FORMATS)}, "
                         f"got {data_format!r}")
    return data_format


def from_nhwc(images, data_format: str):
    """NHWC images in ``data_format``."""
    return tf.transpose(images, [0, 3, 1, 2]) if data_format == "NCHW" else images


def to_nhwc(x, data_format: str):
    return tf.transpose(x, [0, 2, 3, 1]) if data_format == "NCHW" else x


def flatten_nhwc(x, data_format: str):
    """``[batch, H * W * C]`` in NHWC order, from a 4-D tensor in ``data_format``."""
    x = to_nhwc(x, data_format)
    dims = x.shape.as_list()[1:]
    if None in dims:
        raise ValueError(f"cannot flatten {x.name}: its image dimensions {dims} must be known")
    return tf.reshape(x, [-1, dims[0] * dims[1] * dims[2]])


def window(size: int, data_format: str) -> list[int]:
    """A 4-list for ``ksize``/``strides`` of a square spatial window in ``data_format``."""
    return [1, 1, size, size] if data_format == "NCHW" else [1, size, size, 1]
