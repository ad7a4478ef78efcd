"""tf.image: every deterministic kernel against a NumPy reference (on NumPy, on
array_api_strict and on CuPy where a GPU exists), the random ones by what must hold of each
draw, and the ops through a Session in the TF 1.x style."""

from __future__ import annotations

import functools

import array_api_compat.numpy as xp_numpy
import numpy as np
import pytest
from namespaces import NAMESPACES, to_host

import dflow as tf
from dflow.ops.registry import get_opdef
from dflow.runtime.state import SessionState

RNG = np.random.default_rng(7)
IMAGE = RNG.uniform(0, 255, (5, 7, 3)).astype(np.float32)
BATCH = RNG.uniform(0, 255, (4, 5, 7, 3)).astype(np.float32)


def run_kernel(xp, op_type, *arrays, state=None, **attrs):
    opdef = get_opdef(op_type)
    inputs = [xp.asarray(a) for a in arrays]
    out = opdef.kernel(state, xp, *inputs, **attrs) if opdef.stateful else opdef.kernel(xp, *inputs, **attrs)
    return to_host(out)


# ---- references (plain NumPy, loops where that is clearer) ------------------------------------------
def ref_standardize(x):
    x = x.astype(np.float64)
    axes = tuple(range(x.ndim - 3, x.ndim))
    n = np.prod(x.shape[-3:])
    floor = 1 / np.sqrt(n)
    return (x - x.mean(axis=axes, keepdims=True)) / np.maximum(x.std(axis=axes, keepdims=True), floor)


def ref_contrast(x, factor):
    mean = x.mean(axis=(-3, -2), keepdims=True)
    return (x - mean) * factor + mean


def ref_crop_or_pad(x, th, tw):
    h, w = x.shape[-3:-1]
    out = np.zeros((*x.shape[:-3], th, tw, x.shape[-1]), x.dtype)
    for i in range(th):
        for j in range(tw):
            # TF: crop offsets (h - th) // 2, pad offsets (th - h) // 2
            si = i + (h - th) // 2 if h >= th else i - (th - h) // 2
            sj = j + (w - tw) // 2 if w >= tw else j - (tw - w) // 2
            if 0 <= si < h and 0 <= sj < w:
                out[..., i, j, :] = x[..., si, sj, :]
    return out


def ref_bilinear(x, th, tw, align_corners=False):
    """TF 1.x resize_bilinear: source = out * in / out, no half pixels; with the corners aligned,
    out * (in - 1) / (out - 1)."""
    h, w = x.shape[-3:-1]
    out = np.zeros((*x.shape[:-3], th, tw, x.shape[-1]))
    for i in range(th):
        for j in range(tw):
            y, z = ((i * (h - 1) / (th - 1), j * (w - 1) / (tw - 1)) if align_corners
                    else (i * h / th, j * w / tw))
            y0, z0 = int(np.floor(y)), int(np.floor(z))
            y1, z1 = min(y0 + 1, h - 1), min(z0 + 1, w - 1)
            dy, dz = y - y0, z - z0
            top = x[..., y0, z0, :] * (1 - dz) + x[..., y0, z1, :] * dz
            bottom = x[..., y1, z0, :] * (1 - dz) + x[..., y1, z1, :] * dz
            out[..., i, j, :] = top * (1 - dy) + bottom * dy
    return out


def ref_nearest(x, th, tw, align_corners=False):
    h, w = x.shape[-3:-1]
    if align_corners:  # the nearest by rounding, on the corners' mapping
        rows = [min(int(np.round(i * (h - 1) / (th - 1))), h - 1) for i in range(th)]
        cols = [min(int(np.round(j * (w - 1) / (tw - 1))), w - 1) for j in range(tw)]
    else:
        rows = [min(int(np.floor(i * h / th)), h - 1) for i in range(th)]
        cols = [min(int(np.floor(j * w / tw)), w - 1) for j in range(tw)]
    return x[..., rows, :, :][..., cols, :]


def ref_bicubic(x, th, tw, align_corners=False):
    """TF 1.x resize_bicubic (no half pixels): the 4 source pixels around out * scale, clamped to
    the edges, weighed by Keys' kernel (a = -0.75) at the fraction rounded to 1/1024."""
    def kernel(d, a=-0.75):
        return ((a + 2) * d - (a + 3)) * d * d + 1 if d <= 1 else ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    def taps(out_size, in_size):
        scale = (in_size - 1) / (out_size - 1) if align_corners and out_size > 1 else in_size / out_size
        result = []
        for o in range(out_size):
            source = o * scale
            base = int(np.floor(source))
            fraction = round((source - base) * 1024) / 1024
            result.append([(min(max(base + k, 0), in_size - 1), kernel(abs(fraction - k)))
                           for k in (-1, 0, 1, 2)])
        return result

    return _weighed(x, taps(th, x.shape[-3]), taps(tw, x.shape[-2]))


def ref_area(x, th, tw, align_corners=False):
    """TF 1.x resize_area: each output pixel the mean of the source span [o, o + 1) * scale, each
    source pixel weighed by the part of it inside (an index past the edge reads the edge)."""
    def spans(out_size, in_size):
        scale = (in_size - 1) / (out_size - 1) if align_corners and out_size > 1 else in_size / out_size
        result = []
        for o in range(out_size):
            start, end = o * scale, (o + 1) * scale
            result.append([(min(k, in_size - 1), (min(k + 1, end) - max(k, start)) / scale)
                           for k in range(int(np.floor(start)), int(np.ceil(end)))])
        return result

    return _weighed(x, spans(th, x.shape[-3]), spans(tw, x.shape[-2]))


def _weighed(x, row_taps, column_taps):
    """Output pixel (i, j): the source pixels of row_taps[i] x column_taps[j], each (index, weight)."""
    out = np.zeros((*x.shape[:-3], len(row_taps), len(column_taps), x.shape[-1]))
    for i, rows in enumerate(row_taps):
        for j, cols in enumerate(column_taps):
            out[..., i, j, :] = sum(x[..., r, c, :] * wr * wc for r, wr in rows for c, wc in cols)
    return out


DETERMINISTIC = [
    ("flip_left_right", "ImageFlip", [IMAGE], {"direction": "left_right"}, IMAGE[:, ::-1]),
    ("flip_left_right_batch", "ImageFlip", [BATCH], {"direction": "left_right"}, BATCH[:, :, ::-1]),
    ("flip_up_down", "ImageFlip", [IMAGE], {"direction": "up_down"}, IMAGE[::-1]),
    ("adjust_brightness", "AdjustBrightness", [IMAGE, np.float32(-20.5)], {}, IMAGE - 20.5),
    ("adjust_contrast", "AdjustContrastv2", [IMAGE, np.float32(1.7)], {}, ref_contrast(IMAGE, 1.7)),
    ("adjust_contrast_batch", "AdjustContrastv2", [BATCH, np.float32(0.3)], {}, ref_contrast(BATCH, 0.3)),
    ("standardization", "PerImageStandardization", [IMAGE], {}, ref_standardize(IMAGE)),
    ("standardization_batch", "PerImageStandardization", [BATCH], {}, ref_standardize(BATCH)),
    ("standardization_uint8", "PerImageStandardization", [IMAGE.astype(np.uint8)], {},
     ref_standardize(IMAGE.astype(np.uint8))),
    ("standardization_uniform", "PerImageStandardization", [np.full((4, 4, 3), 9, np.float32)], {},
     np.zeros((4, 4, 3))),
    ("crop", "ResizeImageWithCropOrPad", [IMAGE], {"target_height": 3, "target_width": 4},
     ref_crop_or_pad(IMAGE, 3, 4)),
    ("pad", "ResizeImageWithCropOrPad", [IMAGE], {"target_height": 8, "target_width": 10},
     ref_crop_or_pad(IMAGE, 8, 10)),
    ("crop_and_pad", "ResizeImageWithCropOrPad", [BATCH], {"target_height": 2, "target_width": 12},
     ref_crop_or_pad(BATCH, 2, 12)),
    ("crop_to_box", "ImageBoundingBox", [IMAGE], {"top": 1, "left": 2, "height": 3, "width": 4, "pad": False},
     IMAGE[1:4, 2:6]),
    ("pad_to_box", "ImageBoundingBox", [IMAGE], {"top": 1, "left": 2, "height": 7, "width": 10, "pad": True},
     np.pad(IMAGE, ((1, 1), (2, 1), (0, 0)))),
    ("uint8_to_float", "ConvertImageDtype", [np.array([[[0, 51, 255]]], np.uint8)],
     {"dtype": tf.float32, "saturate": False}, np.array([[[0.0, 0.2, 1.0]]])),
    ("float_to_uint8", "ConvertImageDtype", [np.array([[[0.0, 0.5, 0.999]]], np.float32)],
     {"dtype": tf.uint8, "saturate": False}, np.array([[[0, 127, 255]]])),
    ("float_to_uint8_saturate", "ConvertImageDtype", [np.array([[[-0.5, 1.5, 0.2]]], np.float32)],
     {"dtype": tf.uint8, "saturate": True}, np.array([[[0, 255, 51]]])),
    ("bilinear_up", "ResizeImages", [IMAGE], {"height": 9, "width": 11, "method": 0, "align_corners": False},
     ref_bilinear(IMAGE, 9, 11)),
    ("bilinear_down", "ResizeImages", [BATCH], {"height": 3, "width": 4, "method": 0, "align_corners": False},
     ref_bilinear(BATCH, 3, 4)),
    ("nearest", "ResizeImages", [BATCH], {"height": 8, "width": 3, "method": 1, "align_corners": False},
     ref_nearest(BATCH, 8, 3)),
    ("bicubic_up", "ResizeImages", [BATCH], {"height": 9, "width": 4, "method": 2, "align_corners": False},
     ref_bicubic(BATCH, 9, 4)),
    ("bicubic_down_corners", "ResizeImages", [IMAGE], {"height": 3, "width": 4, "method": 2,
                                                       "align_corners": True},
     ref_bicubic(IMAGE, 3, 4, True)),
    ("area_down", "ResizeImages", [BATCH], {"height": 3, "width": 4, "method": 3, "align_corners": False},
     ref_area(BATCH, 3, 4)),
    ("area_up_corners", "ResizeImages", [IMAGE], {"height": 11, "width": 3, "method": 3,
                                                  "align_corners": True}, ref_area(IMAGE, 11, 3, True)),
    ("grayscale", "RgbToGrayscale", [IMAGE], {}, (IMAGE * [0.2989, 0.5870, 0.1140]).sum(-1, keepdims=True)),
]


@pytest.mark.parametrize("xp", NAMESPACES)
@pytest.mark.parametrize("row", DETERMINISTIC, ids=[r[0] for r in DETERMINISTIC])
def test_kernel_matches_reference(xp, row):
    _, op_type, arrays, attrs, expected = row
    out = run_kernel(xp, op_type, *arrays, **attrs)
    assert out.shape == expected.shape
    np.testing.assert_allclose(out.astype(np.float64), expected, rtol=1e-5, atol=1e-4)


def test_bilinear_matches_tf_1x_numbers():
    """tf.image.resize_bilinear([[0, 1], [2, 3]], [4, 4]) under TF 1.x (align_corners=False)."""
    image = np.array([[0, 1], [2, 3]], np.float32).reshape(1, 2, 2, 1)
    out = run_kernel(xp_numpy, "ResizeImages", image, height=4, width=4, method=0, align_corners=False)
    row = [[0, 0.5, 1, 1], [1, 1.5, 2, 2], [2, 2.5, 3, 3], [2, 2.5, 3, 3]]
    np.testing.assert_allclose(out[0, :, :, 0], row)
    corners = run_kernel(xp_numpy, "ResizeImages", image, height=3, width=3, method=0, align_corners=True)
    np.testing.assert_allclose(corners[0, :, :, 0], [[0, 0.5, 1], [1, 1.5, 2], [2, 2.5, 3]])


def test_bicubic_and_area_match_tf_1x_numbers():
    """TF 2.21 compat.v1's tf.image.resize_images of arange(16).reshape(4, 4) to 2 x 2 and 3 x 3."""
    image = np.arange(16, dtype=np.float32).reshape(1, 4, 4, 1)
    numbers = {(2, 2): [[0, 2], [8, 10]], (3, 2): [[2.5, 4.5], [10.5, 12.5]],
               (2, 3): [[0, 1.3700992, 2.741012], [5.4803967, 6.8504953, 8.22141],
                        [10.964048, 12.334147, 13.705061]],
               (3, 3): [[1.25, 2.5, 3.75], [6.25, 7.5, 8.75], [11.25, 12.5, 13.75]]}
    for (method, size), expected in numbers.items():
        out = run_kernel(xp_numpy, "ResizeImages", image, height=size, width=size, method=method,
                         align_corners=False)
        np.testing.assert_allclose(out[0, :, :, 0], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("xp", NAMESPACES)
@pytest.mark.parametrize("method, align_corners, reference", [
    (0, False, ref_bilinear), (0, True, functools.partial(ref_bilinear, align_corners=True)),
    (1, False, ref_nearest), (1, True, functools.partial(ref_nearest, align_corners=True)),
    (2, False, ref_bicubic), (3, True, functools.partial(ref_area, align_corners=True))],
    ids=["bilinear", "bilinear-corners", "nearest", "nearest-corners", "bicubic", "area-corners"])
@pytest.mark.parametrize("size", [(7, 9), (2, 3)], ids=["up", "down"])
def test_a_resize_s_gradient_sends_each_pixel_s_back_by_its_weights(xp, method, align_corners, reference,
                                                                    size):
    """TF's ResizeBilinearGrad / ResizeNearestNeighborGrad: the resize's transpose. The reference
    resizes each one-hot image with the loop above: its dot with dy is that pixel's gradient.
    (A resize had no gradient: a GAN's layers before one were silently not trained.)"""
    image = RNG.standard_normal((2, 3, 4, 2)).astype(np.float32)
    dy = RNG.standard_normal((2, *size, 2)).astype(np.float32)
    expected = np.zeros(image.shape)
    for index in np.ndindex(image.shape):
        one_hot = np.zeros(image.shape)
        one_hot[index] = 1.0
        expected[index] = np.sum(reference(one_hot, *size) * dy)
    attrs = {"height": size[0], "width": size[1], "method": method, "align_corners": align_corners}
    got = run_kernel(xp, "ResizeImagesGrad", dy, image, **attrs)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    with tf.Graph().as_default():
        x = tf.constant(image)
        (through_graph,) = tf.gradients(tf.reduce_sum(tf.image.resize_images(
            x, size, method=method, align_corners=align_corners) * dy), [x])
        with tf.Session() as sess:
            np.testing.assert_allclose(sess.run(through_graph), expected, rtol=1e-5, atol=1e-5)


# ---- random ops: each draw is one of the allowed results, and every allowed result occurs --------
@pytest.mark.parametrize("xp", NAMESPACES)
def test_random_crop_is_a_window_and_reaches_every_offset(xp):
    state, seen = SessionState(seed=0), set()
    for _ in range(300):
        out = run_kernel(xp, "RandomCrop", IMAGE, state=state, size=[3, 6, 3], seed=None)
        offsets = [(i, j) for i in range(3) for j in range(2) if np.array_equal(IMAGE[i:i + 3, j:j + 6], out)]
        assert len(offsets) == 1
        seen.add(offsets[0])
    assert seen == {(i, j) for i in range(3) for j in range(2)}


@pytest.mark.parametrize("xp", NAMESPACES)
def test_random_flip_flips_each_image_half_the_time(xp):
    state = SessionState(seed=1)
    flips = []
    for _ in range(200):
        out = run_kernel(xp, "RandomImageFlip", BATCH, state=state, direction="left_right", seed=None)
        for image, result in zip(BATCH, out):
            assert np.array_equal(result, image) or np.array_equal(result, image[:, ::-1])
            flips.append(np.array_equal(result, image[:, ::-1]))
    assert 0.4 < np.mean(flips) < 0.6


def test_random_brightness_and_contrast_stay_in_their_ranges():
    image = tf.constant(IMAGE)
    brighter = tf.image.random_brightness(image, max_delta=63)
    contrast = tf.image.random_contrast(image, lower=0.2, upper=1.8)
    with tf.Session() as sess:
        deltas, factors = [], []
        for _ in range(100):
            b, c = sess.run([brighter, contrast])
            delta = b - IMAGE
            np.testing.assert_allclose(delta, delta.flat[0], atol=1e-3)  # one delta for all pixels
            deltas.append(delta.flat[0])
            centered = IMAGE - IMAGE.mean(axis=(0, 1))
            factor = float((c - IMAGE.mean(axis=(0, 1))).ravel() @ centered.ravel() / (centered ** 2).sum())
            np.testing.assert_allclose(c, ref_contrast(IMAGE, factor), rtol=1e-4, atol=1e-2)
            factors.append(factor)
    assert -63 <= min(deltas) < -30 and 30 < max(deltas) <= 63
    assert 0.2 <= min(factors) < 0.6 and 1.4 < max(factors) <= 1.8


def test_image_ops_in_a_graph_keep_tf_shapes_and_seeds():
    image = tf.placeholder(tf.float32, [32, 32, 3])
    distorted = tf.image.random_flip_left_right(tf.random_crop(image, [24, 24, 3], seed=3), seed=4)
    assert distorted.shape.as_list() == [24, 24, 3]
    assert tf.image.resize_image_with_crop_or_pad(image, 24, 28).shape.as_list() == [24, 28, 3]
    assert tf.image.resize_images(image, [16, 8]).shape.as_list() == [16, 8, 3]
    assert tf.image.per_image_standardization(tf.cast(image, tf.uint8)).dtype == tf.float32
    assert tf.image.convert_image_dtype(image, tf.float32) is image
    data = RNG.uniform(0, 255, (32, 32, 3)).astype(np.float32)
    runs = []
    for _ in range(2):  # the same graph seed and op seeds give the same draws in a new session
        with tf.Session() as sess:
            runs.append([sess.run(distorted, {image: data}) for _ in range(3)])
    np.testing.assert_array_equal(np.stack(runs[0]), np.stack(runs[1]))


def test_bad_arguments_say_what_is_wrong():
    image = tf.zeros([32, 32, 3])
    with pytest.raises(ValueError, match="larger than"):
        tf.random_crop(image, [40, 24, 3])
    with pytest.raises(ValueError, match="image"):
        tf.image.flip_left_right(tf.zeros([32, 32]))
    with pytest.raises(TypeError, match="tf.cast"):
        tf.image.random_brightness(tf.zeros([4, 4, 3], tf.int32), 10)
    with pytest.raises(ValueError, match=r"method=4\): the method is one of .*AREA \(3\)"):
        tf.image.resize_images(image, [8, 8], method=4)
    with pytest.raises(ValueError, match="lower < upper"):
        tf.image.random_contrast(image, 1.5, 0.5)


# ---- decoding ------------------------------------------------------------------------------------
def image_file(tmp_path, name, pixels, **options) -> str:
    from PIL import Image

    path = str(tmp_path / name)
    Image.fromarray(pixels.squeeze(-1) if pixels.shape[-1] == 1 else pixels).save(path, **options)
    return path


def test_decode_png_gives_the_pixels_and_decode_jpeg_is_close(tmp_path):
    rgb = RNG.integers(0, 256, (6, 9, 3)).astype(np.uint8)
    smooth = np.broadcast_to(np.linspace(0, 250, 16, dtype=np.uint8)[None, :, None], (12, 16, 3)).copy()
    png = tf.image.decode_png(tf.read_file(image_file(tmp_path, "a.png", rgb)))
    gray = tf.image.decode_png(tf.read_file(image_file(tmp_path, "g.png", rgb[..., :1])))
    as_rgb = tf.image.decode_image(tf.read_file(image_file(tmp_path, "g2.png", rgb[..., :1])), channels=3)
    jpeg = tf.image.decode_jpeg(tf.read_file(image_file(tmp_path, "s.jpg", smooth, quality=95)), channels=3)
    assert png.shape.as_list() == [None, None, None] and jpeg.shape.as_list() == [None, None, 3]
    with tf.Session() as sess:
        got_png, got_gray, got_rgb, got_jpeg = sess.run([png, gray, as_rgb, jpeg])
    np.testing.assert_array_equal(got_png, rgb)
    np.testing.assert_array_equal(got_gray, rgb[..., :1])
    np.testing.assert_array_equal(got_rgb, np.repeat(rgb[..., :1], 3, axis=-1))
    assert got_jpeg.shape == smooth.shape and np.abs(got_jpeg.astype(int) - smooth).mean() < 2


def test_decoding_the_wrong_format_says_so(tmp_path):
    path = image_file(tmp_path, "a.png", np.zeros((2, 2, 3), np.uint8))
    with tf.Session() as sess:
        with pytest.raises(tf.errors.InvalidArgumentError, match="PNG image, not what decode_jpeg decodes"):
            sess.run(tf.image.decode_jpeg(tf.read_file(path)))
        with pytest.raises(tf.errors.InvalidArgumentError, match="not a decodable image"):
            sess.run(tf.image.decode_png(tf.constant(np.array(b"not an image", dtype=object), tf.string)))
