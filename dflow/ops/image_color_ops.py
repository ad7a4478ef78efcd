"""The colour and box ops of Inception-style preprocessing (slim's and tf_cnn_benchmarks'
``distort_color`` and ``distorted_bounding_box_crop``): ``tf.image.rgb_to_hsv`` /
``hsv_to_rgb`` (TF's formulas, of graph ops), ``adjust_saturation``, ``adjust_hue``,
their random forms, ``rot90``, ``transpose_image``, ``sample_distorted_bounding_box``; and
detectors' ``non_max_suppression``.

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     red = tf.constant([[[1.0, 0.0, 0.0]]])
...     tf.Session().run([tf.image.rgb_to_hsv(red), tf.image.adjust_hue(red, 1 / 3)])[1].tolist()
[[[0.0, 1.0, 0.0]]]
"""

from __future__ import annotations

import math

import numpy

from .. import dtypes
from ..errors import InvalidArgumentError
from ..graph import Tensor, convert_to_tensor, get_default_graph
from ..runtime.devices import numpy_namespace, to_namespace
from . import math_ops
from .array_ops import reverse, stack, transpose, unstack
from .registry import ShapeError, Spec, defop
from .state_ops import op_seed, random_uniform

__all__ = ["rgb_to_hsv", "hsv_to_rgb", "adjust_saturation", "adjust_hue", "random_saturation", "random_hue",
           "rot90", "transpose_image", "sample_distorted_bounding_box", "non_max_suppression"]


def _float_rgb(images, what: str) -> Tensor:
    images = convert_to_tensor(images)
    if not images.dtype.is_floating:
        raise TypeError(f"tf.image.{what} takes float images in [0, 1] (tf.image.convert_image_dtype first), "
                        f"got {images.dtype.name}")
    if images.shape.ndims is not None and images.shape.as_list()[-1] not in (None, 3):
        raise ValueError(f"tf.image.{what} takes RGB images (3 channels last), got shape {images.shape}")
    return images


def rgb_to_hsv(images, name=None) -> Tensor:
    """RGB in [0, 1] to hue, saturation, value in [0, 1] (TF's formulas; the last axis)."""
    images = _float_rgb(images, "rgb_to_hsv")
    with get_default_graph().name_scope(name or "rgb_to_hsv"):
        red, green, blue = unstack(images, 3, axis=-1)
        value = math_ops.maximum(math_ops.maximum(red, green), blue)
        span = value - math_ops.minimum(math_ops.minimum(red, green), blue)
        saturation = math_ops.where(value > 0, span / math_ops.maximum(value, 1e-30), 0 * value)
        safe = math_ops.maximum(span, 1e-30)
        hue = math_ops.where(math_ops.equal(value, red), (green - blue) / safe,
                             math_ops.where(math_ops.equal(value, green), (blue - red) / safe + 2.0,
                                            (red - green) / safe + 4.0)) / 6.0
        hue = math_ops.where(span > 0, hue - math_ops.floor(hue), 0 * hue)  # in [0, 1)
        return stack([hue, saturation, value], axis=-1)


def hsv_to_rgb(images, name=None) -> Tensor:
    """Hue, saturation, value in [0, 1] back to RGB (TF's piecewise-linear formulas)."""
    images = _float_rgb(images, "hsv_to_rgb")
    with get_default_graph().name_scope(name or "hsv_to_rgb"):
        hue, saturation, value = unstack(images, 3, axis=-1)
        sixths = 6.0 * hue
        channels = [math_ops.clip_by_value(math_ops.abs(sixths - 3.0) - 1.0, 0.0, 1.0),
                    math_ops.clip_by_value(2.0 - math_ops.abs(sixths - 2.0), 0.0, 1.0),
                    math_ops.clip_by_value(2.0 - math_ops.abs(sixths - 4.0), 0.0, 1.0)]
        return stack([(1.0 - saturation + saturation * c) * value for c in channels], axis=-1)


def adjust_saturation(image, saturation_factor, name=None) -> Tensor:
    """The saturation multiplied by ``saturation_factor`` (clipped to [0, 1]) in HSV."""
    image = _float_rgb(image, "adjust_saturation")
    with get_default_graph().name_scope(name or "adjust_saturation"):
        hue, saturation, value = unstack(rgb_to_hsv(image), 3, axis=-1)
        factor = math_ops.cast(saturation_factor, image.dtype)
        return hsv_to_rgb(stack([hue, math_ops.clip_by_value(saturation * factor, 0.0, 1.0), value], axis=-1))


def adjust_hue(image, delta, name=None) -> Tensor:
    """The hue turned by ``delta`` (a fraction of the colour circle, in [-1, 1])."""
    image = _float_rgb(image, "adjust_hue")
    with get_default_graph().name_scope(name or "adjust_hue"):
        hue, saturation, value = unstack(rgb_to_hsv(image), 3, axis=-1)
        hue = hue + math_ops.cast(delta, image.dtype)
        return hsv_to_rgb(stack([hue - math_ops.floor(hue), saturation, value], axis=-1))


def random_saturation(image, lower, upper, seed=None) -> Tensor:
    """``adjust_saturation`` by a factor drawn uniformly from ``[lower, upper)`` per run."""
    if upper <= lower or lower < 0:
        raise ValueError(f"random_saturation needs 0 <= lower < upper, got lower={lower}, upper={upper}")
    return adjust_saturation(image, random_uniform([], lower, upper, seed=seed))


def random_hue(image, max_delta, seed=None) -> Tensor:
    """``adjust_hue`` by a delta drawn uniformly from ``[-max_delta, max_delta)`` per run."""
    if not 0 <= max_delta <= 0.5:
        raise ValueError(f"random_hue's max_delta must be in [0, 0.5], got {max_delta}")
    return adjust_hue(image, random_uniform([], -max_delta, max_delta, seed=seed))


# ---- rotations ------------------------------------------------------------------------------------
def transpose_image(image, name=None) -> Tensor:
    """Height and width swapped (of an image, or of each of a batch)."""
    image = convert_to_tensor(image)
    rank = image.shape.ndims
    if rank not in (3, 4):
        raise ValueError(f"transpose_image takes an image [h, w, c] or a batch [n, h, w, c], got "
                         f"{image.shape}")
    order = [1, 0, 2] if rank == 3 else [0, 2, 1, 3]
    return transpose(image, order, name=name or "transpose_image")


def rot90(image, k=1, name=None) -> Tensor:
    """Rotated counter-clockwise by ``k`` (an int) quarter turns."""
    image = convert_to_tensor(image)
    rank = image.shape.ndims
    if rank not in (3, 4):
        raise ValueError(f"rot90 takes an image [h, w, c] or a batch [n, h, w, c], got {image.shape}")
    height, width = (0, 1) if rank == 3 else (1, 2)
    with get_default_graph().name_scope(name or "rot90"):
        for _ in range(int(k) % 4):
            image = reverse(transpose_image(image), [height])
        return image


# ---- sample_distorted_bounding_box ------------------------------------------------------------------
def _random_crop_box(rng, height: int, width: int, aspect: float, areas) -> tuple | None:
    """TF's GenerateRandomCrop: a box of ``aspect`` ratio and an area in ``areas`` (fractions of
    the image), at a random place; None when none fits."""
    low, high = areas[0] * height * width, areas[1] * height * width
    rows = round(math.sqrt(low / aspect))
    most = min(round(math.sqrt(high / aspect)), height, int((width + 0.5 - 1e-7) / aspect))
    rows = min(rows, most)
    if rows < most:
        rows += int(rng.integers(0, most - rows + 1))
    columns = round(rows * aspect)
    if not (low <= rows * columns <= high) or not (0 < columns <= width and 0 < rows <= height):
        return None
    return int(rng.integers(0, height - rows + 1)), int(rng.integers(0, width - columns + 1)), rows, columns


def _covers(box, boxes, height: int, width: int, minimum: float) -> bool:
    """Whether the crop ``box`` holds ``minimum`` of some bounding box's area."""
    top, left, rows, columns = box
    for ymin, xmin, ymax, xmax in boxes:
        area = (ymax - ymin) * height * (xmax - xmin) * width
        overlap_h = min(top + rows, ymax * height) - max(top, ymin * height)
        overlap_w = min(left + columns, xmax * width) - max(left, xmin * width)
        if area <= 0 or (overlap_h > 0 and overlap_w > 0 and overlap_h * overlap_w / area >= minimum):
            return True
    return False


def _distorted_box_kernel(state, xp, image_size, bounding_boxes, seed, min_object_covered, aspect_ratio_range,
                          area_range, max_attempts, use_image_if_no_bounding_boxes):
    height, width = (int(n) for n in numpy.asarray(to_namespace(image_size, numpy_namespace))[:2])
    boxes = numpy.asarray(to_namespace(bounding_boxes, numpy_namespace), dtype=numpy.float64).reshape(-1, 4)
    if not len(boxes):
        if not use_image_if_no_bounding_boxes:
            raise InvalidArgumentError("sample_distorted_bounding_box got no bounding box: pass one, or "
                                       "use_image_if_no_bounding_boxes=True")
        boxes = numpy.array([[0.0, 0.0, 1.0, 1.0]])
    rng = state.random_generator(seed)
    found = None
    for _ in range(max_attempts):
        box = _random_crop_box(rng, height, width, rng.uniform(*aspect_ratio_range), area_range)
        if box is not None and _covers(box, boxes, height, width, min_object_covered):
            found = box
            break
    top, left, rows, columns = found or (0, 0, height, width)  # no attempt fit: the whole image
    box = [top / height, left / width, (top + rows) / height, (left + columns) / width]
    return (xp.asarray(numpy.array([top, left, 0], numpy.int32)),
            xp.asarray(numpy.array([rows, columns, -1], numpy.int32)),
            xp.asarray(numpy.array([[box]], numpy.float32)))


def _distorted_box_infer(inputs, **_):
    if inputs[0].shape not in (None, (3,)):
        raise ShapeError("sample_distorted_bounding_box's image_size is [height, width, channels], got "
                         f"shape {inputs[0].shape}")
    return [Spec((3,), dtypes.int32), Spec((3,), dtypes.int32), Spec((1, 1, 4), dtypes.float32)]


defop("SampleDistortedBoundingBoxV2", _distorted_box_infer, _distorted_box_kernel, stateful=True,
      num_outputs=3, gpu=False)


def sample_distorted_bounding_box(image_size, bounding_boxes, seed=None, seed2=None, min_object_covered=0.1,
                                  aspect_ratio_range=None, area_range=None, max_attempts=None,
                                  use_image_if_no_bounding_boxes=None, name=None):
    """A random crop for Inception-style training: ``(begin, size, box)`` for ``tf.slice`` and
    ``draw_bounding_boxes``. Up to ``max_attempts`` (100) times, a box of aspect ratio from
    ``aspect_ratio_range`` (3/4..4/3) and area fraction from ``area_range`` (0.05..1) is placed at
    random; the first one covering ``min_object_covered`` of a ``bounding_boxes`` box (``[1, N, 4]``
    of ymin, xmin, ymax, xmax in [0, 1]) is it, else the whole image. TF's algorithm, dflow's
    random stream (the crops differ from TF's for the same seed)."""
    attrs = {"seed": op_seed(seed), "min_object_covered": float(min_object_covered),
             "aspect_ratio_range": [float(v) for v in (aspect_ratio_range or (0.75, 1.33))],
             "area_range": [float(v) for v in (area_range or (0.05, 1.0))],
             "max_attempts": int(max_attempts or 100),
             "use_image_if_no_bounding_boxes": bool(use_image_if_no_bounding_boxes)}
    begin, size, box = get_default_graph().create_op(
        "SampleDistortedBoundingBoxV2", [convert_to_tensor(image_size, dtype=dtypes.int32),
                                         convert_to_tensor(bounding_boxes, dtype=dtypes.float32)], attrs,
        name=name or "sample_distorted_bounding_box").outputs
    return begin, size, box


# ---- non-maximum suppression ------------------------------------------------------------------------
def _iou(box, others):
    """Intersection over union of ``box`` with each row of ``others`` (corners in any order)."""
    lo = numpy.minimum(box[:2], box[2:]), numpy.minimum(others[:, :2], others[:, 2:])
    hi = numpy.maximum(box[:2], box[2:]), numpy.maximum(others[:, :2], others[:, 2:])
    inner = numpy.clip(numpy.minimum(hi[0], hi[1]) - numpy.maximum(lo[0], lo[1]), 0, None).prod(axis=1)
    areas = (hi[0] - lo[0]).prod(), (hi[1] - lo[1]).prod(axis=1)
    union = areas[0] + areas[1] - inner
    return numpy.where((areas[0] > 0) & (areas[1] > 0), inner / numpy.where(union > 0, union, 1), 0.0)


def _nms_kernel(xp, boxes, scores, max_output_size, iou_threshold, score_threshold):
    boxes = numpy.asarray(to_namespace(boxes, numpy_namespace), dtype=numpy.float64)
    scores = numpy.asarray(to_namespace(scores, numpy_namespace), dtype=numpy.float64)
    limit = int(numpy.asarray(to_namespace(max_output_size, numpy_namespace)))
    threshold = float(numpy.asarray(to_namespace(iou_threshold, numpy_namespace)))
    floor = float(numpy.asarray(to_namespace(score_threshold, numpy_namespace)))
    selected = []
    for index in numpy.argsort(-scores, kind="stable"):  # highest first; ties: the lower index first
        if len(selected) >= limit or scores[index] <= floor:
            break
        if not selected or (_iou(boxes[index], boxes[selected]) <= threshold).all():
            selected.append(int(index))
    return xp.asarray(numpy.asarray(selected, dtype=numpy.int32))


def _nms_infer(inputs):
    boxes, scores = inputs[:2]
    if boxes.shape is not None and (len(boxes.shape) != 2 or boxes.shape[1] not in (None, 4)):
        raise ShapeError(f"non_max_suppression's boxes are [N, 4] (y1, x1, y2, x2), got shape {boxes.shape}")
    return [Spec((None,), dtypes.int32)]


defop("NonMaxSuppressionV3", _nms_infer, _nms_kernel, gpu=False)


def non_max_suppression(boxes, scores, max_output_size, iou_threshold=0.5, score_threshold=float("-inf"),
                        name=None) -> Tensor:
    """The indices of at most ``max_output_size`` boxes, highest score first, each overlapping
    every one chosen before it by an IoU of at most ``iou_threshold``; boxes scoring no more than
    ``score_threshold`` are left out (TF's greedy selection, ties to the lower index)."""
    return get_default_graph().create_op(
        "NonMaxSuppressionV3", [convert_to_tensor(boxes, dtype=dtypes.float32),
                                convert_to_tensor(scores, dtype=dtypes.float32),
                                convert_to_tensor(max_output_size, dtype=dtypes.int32),
                                convert_to_tensor(iou_threshold, dtype=dtypes.float32),
                                convert_to_tensor(score_threshold, dtype=dtypes.float32)],
        name=name or "non_max_suppression").outputs[0]
