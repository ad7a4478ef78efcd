"""``tf.image``: the image ops of TF 1.x that input pipelines use (see :mod:`dflow.ops.image_ops`).

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     image = tf.zeros([32, 32, 3])
...     tf.image.resize_image_with_crop_or_pad(image, 24, 24).shape.as_list()
[24, 24, 3]
"""

from .ops.image_color_ops import (
    adjust_hue,
    adjust_saturation,
    hsv_to_rgb,
    non_max_suppression,
    random_hue,
    random_saturation,
    rgb_to_hsv,
    rot90,
    sample_distorted_bounding_box,
    transpose_image,
)
from .ops.image_ops import (
    ResizeMethod,
    adjust_brightness,
    adjust_contrast,
    central_crop,
    convert_image_dtype,
    crop_to_bounding_box,
    decode_image,
    decode_jpeg,
    decode_png,
    flip_left_right,
    flip_up_down,
    pad_to_bounding_box,
    per_image_standardization,
    random_brightness,
    random_contrast,
    random_crop,
    random_flip_left_right,
    random_flip_up_down,
    resize_bilinear,
    resize_image_with_crop_or_pad,
    resize_images,
    resize_nearest_neighbor,
    rgb_to_grayscale,
)

__all__ = ["ResizeMethod", "adjust_brightness", "adjust_contrast", "central_crop", "convert_image_dtype",
           "crop_to_bounding_box", "decode_image", "decode_jpeg", "decode_png",
           "flip_left_right", "flip_up_down", "pad_to_bounding_box",
           "per_image_standardization", "random_brightness", "random_contrast", "random_crop",
           "random_flip_left_right", "random_flip_up_down", "resize_bilinear",
           "resize_image_with_crop_or_pad",
           "resize_images", "resize_nearest_neighbor", "rgb_to_grayscale", "rgb_to_hsv", "hsv_to_rgb",
           "adjust_saturation", "adjust_hue", "random_saturation", "random_hue", "rot90", "transpose_image",
           "sample_distorted_bounding_box", "non_max_suppression"]
