"""Image ops (TF 1.x's ``tf.image``), on one image ``[height, width, channels]`` or a batch
``[batch, height, width, channels]``; the random ones draw per image.

Each op is one declaration: a shape rule and a kernel over ``xp``. The random
ones (crop, flips) are stateful and draw from the session's stream for their
seed, as ``tf.random_uniform`` does; ``random_brightness`` and
``random_contrast`` are their deterministic op fed by a ``tf.random_uniform``
factor, as in TF.

>>> import numpy as np, dflow as tf
>>> with tf.Graph().as_default():
...     image = tf.constant(np.arange(12, dtype=np.float32).reshape(2, 2, 3))
...     with tf.Session() as sess:
...         sess.run(tf.image.flip_left_right(image))[0, 0].tolist()
[3.0, 4.0, 5.0]
"""

from __future__ import annotations

from .. import dtypes
from ..errors import InvalidArgumentError
from ..graph import Tensor, convert_to_tensor, get_default_graph
from .registry import ShapeError, Spec, defop
from .shape_rules import fmt
from .state_ops import op_seed, random_uniform

__all__ = ["random_crop", "flip_left_right", "flip_up_down", "random_flip_left_right", "random_flip_up_down",
           "adjust_brightness", "random_brightness", "adjust_contrast", "random_contrast",
           "per_image_standardization", "resize_image_with_crop_or_pad", "crop_to_bounding_box",
           "pad_to_bounding_box", "convert_image_dtype", "resize_images", "resize_bilinear",
           "resize_nearest_neighbor", "ResizeMethod", "rgb_to_grayscale", "central_crop", "decode_jpeg",
           "decode_png", "decode_image"]


def _op(op_type, inputs, attrs=None, name=None) -> Tensor:
    return get_default_graph().create_op(op_type, inputs, attrs, name=name).outputs[0]


def _image_spec(spec: Spec, op: str) -> Spec:
    if spec.shape is not None and len(spec.shape) not in (3, 4):
        raise ShapeError(f"{op} takes an image [height, width, channels] or a batch of them "
                         f"[batch, height, width, channels], got shape {fmt(spec.shape)}")
    return spec._replace(value=None)


def _same_image(op):
    return lambda inputs, **_: [_image_spec(inputs[0], op)]


def _with_hw(shape, height, width):
    return None if shape is None else (*shape[:-3], height, width, shape[-1])


# ---- random_crop (any rank, as TF's) ------------------------------------------------------------
def _crop_infer(inputs, size, seed):
    shape = inputs[0].shape
    if shape is not None:
        if len(shape) != len(size):
            raise ShapeError(f"random_crop size {list(size)} must have one entry per dimension of "
                             f"{fmt(shape)}")
        too_big = [(d, s) for d, s in zip(shape, size) if d is not None and s > d]
        if too_big:
            raise ShapeError(f"random_crop size {list(size)} is larger than the value's shape {fmt(shape)}")
    return [Spec(tuple(size), inputs[0].dtype)]


def _crop_kernel(state, xp, value, size, seed):
    if any(s > d for s, d in zip(size, value.shape)):
        raise InvalidArgumentError(f"random_crop: size {list(size)} is larger than the value's shape "
                                   f"{tuple(value.shape)}")
    rng = state.random_generator(seed)
    starts = [int(rng.integers(0, d - s + 1)) for d, s in zip(value.shape, size)]
    return value[tuple(slice(b, b + s) for b, s in zip(starts, size))]


defop("RandomCrop", _crop_infer, _crop_kernel, stateful=True)


def random_crop(value, size, seed=None, name=None) -> Tensor:
    """A random window of ``value`` of shape ``size`` (every dimension), new on every run.

    >>> import dflow as tf
    >>> with tf.Graph().as_default():
    ...     tf.Session().run(tf.random_crop(tf.zeros([32, 32, 3]), [24, 24, 3])).shape
    (24, 24, 3)
    """
    return _op("RandomCrop", [value], {"size": [int(s) for s in size], "seed": op_seed(seed)}, name)


# ---- flips -----------------------------------------------------------------------------------------
_AXIS = {"left_right": -2, "up_down": -3}


def _flip_kernel(xp, image, direction):
    return xp.flip(image, axis=_AXIS[direction])


def _random_flip_kernel(state, xp, image, direction, seed):
    coins = state.random_generator(seed).uniform(size=image.shape[0] if image.ndim == 4 else 1) < 0.5
    if image.ndim == 3:
        return xp.flip(image, axis=_AXIS[direction]) if coins[0] else image
    flipped = xp.flip(image, axis=_AXIS[direction])
    mask = xp.reshape(xp.asarray(coins), (-1, 1, 1, 1))
    return xp.where(mask, flipped, image)


defop("ImageFlip", _same_image("flip"), _flip_kernel,
      lambda op, g: [_op("ImageFlip", [g], {"direction": op.attrs["direction"]})])
defop("RandomImageFlip", _same_image("random flip"), _random_flip_kernel, stateful=True)


def flip_left_right(image, name=None) -> Tensor:
    """Mirror the width axis."""
    return _op("ImageFlip", [image], {"direction": "left_right"}, name)


def flip_up_down(image, name=None) -> Tensor:
    """Mirror the height axis."""
    return _op("ImageFlip", [image], {"direction": "up_down"}, name)


def random_flip_left_right(image, seed=None, name=None) -> Tensor:
    """Mirror the width axis with probability 1/2 (per image of a batch)."""
    return _op("RandomImageFlip", [image], {"direction": "left_right", "seed": op_seed(seed)}, name)


def random_flip_up_down(image, seed=None, name=None) -> Tensor:
    """Mirror the height axis with probability 1/2 (per image of a batch)."""
    return _op("RandomImageFlip", [image], {"direction": "up_down", "seed": op_seed(seed)}, name)


# ---- brightness and contrast ---------------------------------------------------------------------
def _float_image(image: Tensor, op: str) -> Tensor:
    if not image.dtype.is_floating:
        raise TypeError(f"tf.image.{op} on a {image.dtype.name} image: dflow adjusts float images; "
                        "use tf.cast(image, tf.float32) or tf.image.convert_image_dtype first")
    return image


defop("AdjustBrightness", _same_image("adjust_brightness"),
      lambda xp, image, delta: image + xp.astype(delta, image.dtype))
defop("AdjustContrastv2", _same_image("adjust_contrast"),
      lambda xp, images, factor: _contrast(xp, images, xp.astype(factor, images.dtype)))


def _contrast(xp, images, factor):
    mean = xp.mean(images, axis=(-3, -2), keepdims=True)  # per image and channel
    return (images - mean) * factor + mean


def adjust_brightness(image, delta, name=None) -> Tensor:
    """``image + delta``."""
    image = _float_image(convert_to_tensor(image), "adjust_brightness")
    return _op("AdjustBrightness", [image, convert_to_tensor(delta, dtype=image.dtype)], name=name)


def adjust_contrast(images, contrast_factor, name=None) -> Tensor:
    """``(x - mean) * contrast_factor + mean``, the mean per image and channel."""
    images = _float_image(convert_to_tensor(images), "adjust_contrast")
    return _op("AdjustContrastv2", [images, convert_to_tensor(contrast_factor, dtype=images.dtype)],
               name=name)


def random_brightness(image, max_delta, seed=None) -> Tensor:
    """``adjust_brightness`` by a delta drawn uniformly from ``[-max_delta, max_delta)`` per run."""
    if max_delta < 0:
        raise ValueError(f"max_delta must be non-negative, got {max_delta}")
    image = _float_image(convert_to_tensor(image), "random_brightness")
    return adjust_brightness(image, random_uniform([], -max_delta, max_delta, dtype=image.dtype, seed=seed))


def random_contrast(image, lower, upper, seed=None) -> Tensor:
    """``adjust_contrast`` by a factor drawn uniformly from ``[lower, upper)`` per run."""
    if upper <= lower or lower < 0:
        raise ValueError(f"random_contrast needs 0 <= lower < upper, got lower={lower}, upper={upper}")
    image = _float_image(convert_to_tensor(image), "random_contrast")
    return adjust_contrast(image, random_uniform([], lower, upper, dtype=image.dtype, seed=seed))


# ---- per_image_standardization --------------------------------------------------------------------
def _standardize_kernel(xp, image):
    image = xp.astype(image, xp.float32)
    axes = (-3, -2, -1)
    count = image.shape[-3] * image.shape[-2] * image.shape[-1]
    mean = xp.mean(image, axis=axes, keepdims=True)
    stddev = xp.std(image, axis=axes, keepdims=True)
    # TF's floor: a uniform image (stddev 0) is divided by 1/sqrt(N), not by zero
    return (image - mean) / xp.maximum(stddev, xp.asarray(count ** -0.5, dtype=xp.float32))


defop("PerImageStandardization", lambda inputs: [_image_spec(inputs[0], "per_image_standardization")
                                                 ._replace(dtype=dtypes.float32)], _standardize_kernel)


def per_image_standardization(image, name=None) -> Tensor:
    """``(x - mean) / max(stddev, 1 / sqrt(num_elements))`` per image, as float32."""
    return _op("PerImageStandardization", [image], name=name)


# ---- crops and pads ------------------------------------------------------------------------------
def _crop_or_pad_infer(inputs, target_height, target_width):
    spec = _image_spec(inputs[0], "resize_image_with_crop_or_pad")
    return [spec._replace(shape=_with_hw(spec.shape, target_height, target_width))]


def _crop_or_pad_kernel(xp, image, target_height, target_width):
    height, width = image.shape[-3], image.shape[-2]
    top, left = max(height - target_height, 0) // 2, max(width - target_width, 0) // 2
    image = image[..., top:top + min(height, target_height), left:left + min(width, target_width), :]
    pad_top, pad_left = max(target_height - height, 0) // 2, max(target_width - width, 0) // 2
    if image.shape[-3] == target_height and image.shape[-2] == target_width:
        return image
    out = xp.zeros((*image.shape[:-3], target_height, target_width, image.shape[-1]), dtype=image.dtype)
    out[..., pad_top:pad_top + image.shape[-3], pad_left:pad_left + image.shape[-2], :] = image
    return out


defop("ResizeImageWithCropOrPad", _crop_or_pad_infer, _crop_or_pad_kernel)


def resize_image_with_crop_or_pad(image, target_height, target_width) -> Tensor:
    """Crop the center, or pad with zeros around it, to ``target_height x target_width``."""
    if int(target_height) <= 0 or int(target_width) <= 0:
        raise ValueError(f"target sizes must be positive, got {target_height}x{target_width}")
    return _op("ResizeImageWithCropOrPad", [image],
               {"target_height": int(target_height), "target_width": int(target_width)})


def _box_infer(inputs, top, left, height, width, pad):
    spec = _image_spec(inputs[0], "pad_to_bounding_box" if pad else "crop_to_bounding_box")
    if spec.shape is not None and not pad and (spec.shape[-3] or top + height) < top + height:
        raise ShapeError(f"the box (top {top}, height {height}) ends below the image {fmt(spec.shape)}")
    return [spec._replace(shape=_with_hw(spec.shape, height, width))]


def _box_kernel(xp, image, top, left, height, width, pad):
    if not pad:
        return image[..., top:top + height, left:left + width, :]
    out = xp.zeros((*image.shape[:-3], height, width, image.shape[-1]), dtype=image.dtype)
    out[..., top:top + image.shape[-3], left:left + image.shape[-2], :] = image
    return out


defop("ImageBoundingBox", _box_infer, _box_kernel)


def crop_to_bounding_box(image, offset_height, offset_width, target_height, target_width) -> Tensor:
    """The window whose top-left corner is at ``(offset_height, offset_width)``."""
    return _op("ImageBoundingBox", [image], {"top": int(offset_height), "left": int(offset_width),
                                             "height": int(target_height), "width": int(target_width),
                                             "pad": False})


def pad_to_bounding_box(image, offset_height, offset_width, target_height, target_width) -> Tensor:
    """``image`` placed at ``(offset_height, offset_width)`` on zeros of the target size."""
    return _op("ImageBoundingBox", [image], {"top": int(offset_height), "left": int(offset_width),
                                             "height": int(target_height), "width": int(target_width),
                                             "pad": True})


def central_crop(image, central_fraction) -> Tensor:
    """The central ``central_fraction`` of the height and width (static shapes)."""
    height, width = image.shape[-3], image.shape[-2]
    if height is None or width is None:
        raise ValueError("central_crop in dflow needs the image's height and width known at build time")
    if not 0 < central_fraction <= 1:
        raise ValueError(f"central_fraction must be in (0, 1], got {central_fraction}")
    top, left = int((height - height * central_fraction) / 2), int((width - width * central_fraction) / 2)
    return crop_to_bounding_box(image, top, left, height - 2 * top, width - 2 * left)


# ---- dtypes --------------------------------------------------------------------------------------
def _max_of(dtype) -> float:
    return float(2 ** (8 * dtype.size - (1 if dtype.kind == "i" else 0)) - 1)


_NUMERIC = (dtypes.uint8, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.float16,
            dtypes.float32, dtypes.float64)


def _convert_kernel(xp, image, dtype, saturate):
    source = next(d for d in _NUMERIC if getattr(xp, d.name, None) == image.dtype)
    if source.is_floating and dtype.is_floating:
        return xp.astype(image, dtype.of(xp))
    if source.is_floating:  # [0, 1] -> [0, MAX]
        scaled = image * (_max_of(dtype) + 0.5)
        if saturate:
            scaled = xp.clip(scaled, 0.0, _max_of(dtype))
        return xp.astype(scaled, dtype.of(xp))
    if dtype.is_floating:  # [0, MAX] -> [0, 1]
        return xp.astype(image, dtype.of(xp)) * (1.0 / _max_of(source))
    wide = xp.astype(image, xp.int64)
    return xp.astype(wide * int(_max_of(dtype)) // int(_max_of(source)), dtype.of(xp))


defop("ConvertImageDtype", lambda inputs, dtype, saturate: [Spec(inputs[0].shape, dtype)], _convert_kernel)


def convert_image_dtype(image, dtype, saturate=False, name=None) -> Tensor:
    """Between integer images in ``[0, MAX]`` and float images in ``[0, 1)``, rescaling as TF does."""
    image, dtype = convert_to_tensor(image), dtypes.as_dtype(dtype)
    if image.dtype == dtype:
        return image
    return _op("ConvertImageDtype", [image], {"dtype": dtype, "saturate": bool(saturate)}, name)


def rgb_to_grayscale(images, name=None) -> Tensor:
    """The luma ``0.2989 R + 0.5870 G + 0.1140 B``, keeping a last axis of 1."""
    return _op("RgbToGrayscale", [images], name=name)


def _gray_kernel(xp, images):
    weights = xp.asarray([0.2989, 0.5870, 0.1140], dtype=xp.float32)
    gray = xp.sum(xp.astype(images, xp.float32) * weights, axis=-1, keepdims=True)
    return xp.astype(gray, images.dtype) if xp.isdtype(images.dtype, "real floating") else \
        xp.astype(xp.round(gray), images.dtype)


defop("RgbToGrayscale", lambda inputs: [inputs[0]._replace(
    value=None, shape=None if inputs[0].shape is None else (*inputs[0].shape[:-1], 1))], _gray_kernel)


# ---- resizing ------------------------------------------------------------------------------------
class ResizeMethod:
    BILINEAR = 0
    NEAREST_NEIGHBOR = 1
    BICUBIC = 2
    AREA = 3


def _resize_infer(inputs, height, width, method, align_corners):
    spec = _image_spec(inputs[0], "resize_images")
    dtype = spec.dtype if method == ResizeMethod.NEAREST_NEIGHBOR else dtypes.float32
    return [Spec(_with_hw(spec.shape, height, width), dtype)]


def _source_coordinates(xp, out_size: int, in_size: int, align_corners: bool):
    # TF 1.x's legacy mapping (no half-pixel centers): out * in / out, or corners aligned
    if align_corners and out_size > 1:
        scale = (in_size - 1) / (out_size - 1)
    else:
        scale = in_size / out_size
    return xp.arange(out_size, dtype=xp.float32) * scale


def _nearest_sources(xp, out_size: int, in_size: int, align_corners: bool):
    """The source pixel each output pixel takes along one axis (the nearest neighbor's)."""
    pick = xp.round if align_corners else xp.floor
    coords = _source_coordinates(xp, out_size, in_size, align_corners)
    return xp.clip(xp.astype(pick(coords), xp.int64), 0, in_size - 1)


def _interpolation(xp, out_size: int, in_size: int, align_corners: bool, method: int):
    """``[out_size, in_size]`` float32: row ``o`` weighs the source pixels output pixel ``o``
    reads along one axis (the nearest one, two, four, or the span it covers)."""
    sources = xp.reshape(xp.arange(in_size), (1, in_size))

    def picks(indices):  # [out_size, in_size]: 1 where a row reads that source pixel
        return xp.astype(sources == xp.reshape(xp.clip(indices, 0, in_size - 1), (-1, 1)), xp.float32)

    if method == ResizeMethod.NEAREST_NEIGHBOR:
        return picks(_nearest_sources(xp, out_size, in_size, align_corners))
    if method == ResizeMethod.AREA:
        return _area_weights(xp, out_size, in_size, align_corners)
    coords = _source_coordinates(xp, out_size, in_size, align_corners)
    first = xp.astype(xp.floor(coords), xp.int64)
    fraction = xp.reshape(coords - xp.astype(first, xp.float32), (-1, 1))
    if method == ResizeMethod.BILINEAR:
        return picks(first) * (1 - fraction) + picks(first + 1) * fraction
    # bicubic: Keys' kernel (a = -0.75) on the 4 pixels around, at TF 1.x's 1/1024 steps of the
    # fraction (its table), the taps past an edge read the edge pixel
    x = xp.round(fraction * _CUBIC_STEPS) / _CUBIC_STEPS
    weights = [_cubic(xp, 1 + x), _cubic(xp, x), _cubic(xp, 1 - x), _cubic(xp, 2 - x)]
    return sum(picks(first + tap) * weight for tap, weight in zip((-1, 0, 1, 2), weights))


_CUBIC_STEPS = 1024
_CUBIC_A = -0.75


def _cubic(xp, distance):
    """Keys' cubic convolution kernel at ``distance`` in [0, 2] (TF's coefficients)."""
    a = _CUBIC_A
    near = ((a + 2) * distance - (a + 3)) * distance * distance + 1
    far = ((a * distance - 5 * a) * distance + 8 * a) * distance - 4 * a
    return xp.where(distance <= 1, near, far)


def _area_weights(xp, out_size: int, in_size: int, align_corners: bool):
    """TF's resize_area along one axis: output pixel ``o`` averages the source span
    ``[o, o + 1) * scale``, each pixel weighed by how much of it the span covers."""
    scale = (in_size - 1) / (out_size - 1) if align_corners and out_size > 1 else in_size / out_size
    starts = xp.reshape(xp.arange(out_size, dtype=xp.float64) * scale, (-1, 1))
    pixels = xp.reshape(xp.arange(in_size + int(scale) + 2, dtype=xp.float64), (1, -1))
    covered = xp.clip(xp.minimum(pixels + 1, starts + scale) - xp.maximum(pixels, starts), 0.0, None)
    # a span past the last pixel (align_corners) reads the last pixel again, as TF bounds it
    weights = xp.concat([covered[:, :in_size - 1], xp.sum(covered[:, in_size - 1:], axis=1, keepdims=True)],
                        axis=1)
    return xp.astype(weights / scale, xp.float32)


def _mixed(xp, images, rows, columns):
    """Each channel of ``images`` (``[..., h, w, c]``) as ``rows @ channel @ columns^T``: two BLAS
    products (5.5x the four gathers and two passes of a bilinear resize of 50 x 28 x 28 x 50)."""
    along_h = xp.moveaxis(xp.moveaxis(images, -3, -1) @ xp.matrix_transpose(rows), -1, -3)
    return xp.moveaxis(xp.moveaxis(along_h, -2, -1) @ xp.matrix_transpose(columns), -1, -2)


def _resize_kernel(xp, images, height, width, method, align_corners):
    in_h, in_w = images.shape[-3], images.shape[-2]
    if method == ResizeMethod.NEAREST_NEIGHBOR:  # gathers: any dtype, as it came
        rows, cols = _nearest_sources(xp, height, in_h, align_corners), _nearest_sources(xp, width, in_w,
                                                                                         align_corners)
        return xp.take(xp.take(images, rows, axis=-3), cols, axis=-2)
    return _mixed(xp, xp.astype(images, xp.float32), _interpolation(xp, height, in_h, align_corners, method),
                  _interpolation(xp, width, in_w, align_corners, method))


def _resize_grad_kernel(xp, grads, images, height, width, method, align_corners):
    """TF's ResizeBilinearGrad and ResizeNearestNeighborGrad: each output pixel's gradient back to
    the source pixels it read, by the same weights (the resize's transpose)."""
    in_h, in_w = images.shape[-3], images.shape[-2]
    rows = xp.matrix_transpose(_interpolation(xp, height, in_h, align_corners, method))
    columns = xp.matrix_transpose(_interpolation(xp, width, in_w, align_corners, method))
    return xp.astype(_mixed(xp, xp.astype(grads, xp.float32), rows, columns), images.dtype)


def _resize_grad(op, grad):
    return [_op("ResizeImagesGrad", [grad, op.inputs[0]], dict(op.attrs))]


defop("ResizeImages", _resize_infer, _resize_kernel, _resize_grad)
defop("ResizeImagesGrad", lambda inputs, **_: [inputs[1]._replace(value=None)], _resize_grad_kernel,
      lambda op, gg: [_op("ResizeImages", [gg], dict(op.attrs)), None])


def resize_images(images, size, method=ResizeMethod.BILINEAR, align_corners=False,
                  preserve_aspect_ratio=False):
    """Resize to ``size = [new_height, new_width]``: bilinear, bicubic or area (as float32), or
    nearest neighbor (in the images' dtype), each as TF 1.x maps the pixels (no half-pixel
    centers)."""
    if method not in (ResizeMethod.BILINEAR, ResizeMethod.NEAREST_NEIGHBOR, ResizeMethod.BICUBIC,
                      ResizeMethod.AREA):
        raise ValueError(f"tf.image.resize_images(method={method!r}): the method is one of "
                         "tf.image.ResizeMethod's BILINEAR (0), NEAREST_NEIGHBOR (1), BICUBIC (2), AREA (3)")
    if preserve_aspect_ratio:
        raise ValueError("resize_images(preserve_aspect_ratio=True) is not supported by dflow: compute the "
                         "size that keeps the ratio and pass it")
    height, width = (int(s) for s in size)
    return _op("ResizeImages", [images], {"height": height, "width": width, "method": method,
                                          "align_corners": bool(align_corners)})


def resize_bilinear(images, size, align_corners=False, name=None) -> Tensor:
    """``resize_images`` with the bilinear method, on a batch."""
    return _op("ResizeImages", [images], {"height": int(size[0]), "width": int(size[1]),
                                          "method": ResizeMethod.BILINEAR,
                                          "align_corners": bool(align_corners)},
               name)


def resize_nearest_neighbor(images, size, align_corners=False, name=None) -> Tensor:
    """``resize_images`` with the nearest-neighbor method, on a batch."""
    return _op("ResizeImages", [images], {"height": int(size[0]), "width": int(size[1]),
                                          "method": ResizeMethod.NEAREST_NEIGHBOR,
                                          "align_corners": bool(align_corners)}, name)


# ---- decoding JPEG and PNG (Pillow, already a dependency for ImageNet) -----------------------------
_MODES = {1: "L", 3: "RGB", 4: "RGBA"}


def _decode_kernel(xp, contents, channels, kind):
    import io

    import numpy
    from PIL import Image

    data = contents.item() if hasattr(contents, "item") else contents
    try:
        image = Image.open(io.BytesIO(data))
        image.load()
    except Exception as error:  # Pillow's errors vary by format: say what TF says, with its reason
        raise InvalidArgumentError(f"{kind}: the contents are not a decodable image ({error})") from None
    if kind == "decode_jpeg" and image.format != "JPEG" or kind == "decode_png" and image.format != "PNG":
        raise InvalidArgumentError(f"{kind}: the contents are a {image.format} image, not what {kind} "
                                   "decodes; tf.image.decode_image takes either")
    if channels:
        image = image.convert(_MODES[channels])
    elif image.mode not in ("L", "RGB", "RGBA"):
        image = image.convert("RGBA" if "A" in image.mode else "RGB")
    pixels = numpy.asarray(image, dtype=numpy.uint8)
    return xp.asarray(pixels[:, :, None] if pixels.ndim == 2 else pixels)


def _decode_infer(inputs, channels, kind):
    if inputs[0].dtype != dtypes.string:
        raise ShapeError(f"{kind} decodes a string (the file's bytes, e.g. tf.read_file), got "
                         f"{inputs[0].dtype.name}")
    return [Spec((None, None, channels or None), dtypes.uint8)]


defop("DecodeImage", _decode_infer, _decode_kernel, gpu=False)


def _decode(contents, channels, kind, dtype, name):
    channels = int(channels or 0)
    if channels not in (0, 1, 3, 4):
        raise ValueError(f"{kind}: channels must be 0 (as stored), 1, 3 or 4, got {channels}")
    if dtypes.as_dtype(dtype) != dtypes.uint8:
        raise ValueError(f"tf.image.{kind}(dtype={dtypes.as_dtype(dtype).name}) is not supported by dflow: "
                         "decode as uint8, then tf.image.convert_image_dtype")
    from .io_ops import string_tensor

    return _op("DecodeImage", [string_tensor(contents)], {"channels": channels, "kind": kind}, name)


def decode_jpeg(contents, channels=0, ratio=1, fancy_upscaling=True, try_recover_truncated=False,
                acceptable_fraction=1, dct_method="", name=None) -> Tensor:
    """A JPEG's pixels, uint8 ``[height, width, channels]`` (Pillow's decoder: pixels may differ
    from libjpeg-turbo's by a unit or two)."""
    if ratio != 1:
        raise ValueError("tf.image.decode_jpeg(ratio=...) is not supported by dflow: decode, then "
                         "tf.image.resize_images")
    return _decode(contents, channels, "decode_jpeg", dtypes.uint8, name)


def decode_png(contents, channels=0, dtype=dtypes.uint8, name=None) -> Tensor:
    """A PNG's pixels, uint8 ``[height, width, channels]``."""
    return _decode(contents, channels, "decode_png", dtype, name)


def decode_image(contents, channels=None, dtype=dtypes.uint8, name=None, expand_animations=True) -> Tensor:
    """A JPEG, PNG, GIF (first frame) or BMP image's pixels, uint8 ``[height, width, channels]``."""
    return _decode(contents, channels, "decode_image", dtype, name)
