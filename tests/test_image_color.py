"""Inception-style colour and box ops: TensorFlow 2.21's (compat.v1) values for HSV conversions,
saturation and hue, rotations; sample_distorted_bounding_box's crops obey their constraints."""

import json
import os

import numpy as np
import pytest

import dflow as tf

with open(os.path.join(os.path.dirname(__file__), "data", "tensorflow_image_color.json")) as f:
    TENSORFLOW = json.load(f)["values"]


def _fetches():
    images = np.random.default_rng(0).random((2, 4, 5, 3)).astype(np.float32)
    images[0, 0, :4] = [[0.5, 0.5, 0.5], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.2, 0.9, 0.2]]  # grey, black...
    x = tf.constant(images)
    return [tf.image.rgb_to_hsv(x), tf.image.hsv_to_rgb(tf.image.rgb_to_hsv(x)),
            tf.image.adjust_saturation(x, 0.4), tf.image.adjust_saturation(x, 2.5),
            tf.image.adjust_hue(x, 0.2), tf.image.adjust_hue(x, -0.45),
            tf.image.rot90(x[0], 1), tf.image.rot90(x, 3), tf.image.transpose_image(x)]


def test_colour_and_rotation_ops_give_tensorflows_values():
    with tf.Graph().as_default(), tf.Session() as sess:
        got = sess.run(_fetches())
    for value, want in zip(got, TENSORFLOW, strict=True):
        np.testing.assert_allclose(value, want, atol=2e-6)


def test_random_colour_ops_stay_in_range_and_differ_per_run():
    with tf.Graph().as_default():
        image = tf.constant(np.random.default_rng(1).random((8, 8, 3)).astype(np.float32))
        distorted = tf.image.random_hue(tf.image.random_saturation(image, 0.5, 1.5, seed=1), 0.2, seed=2)
        with tf.Session() as sess:
            first, second = sess.run(distorted), sess.run(distorted)
    assert first.min() >= 0.0 and first.max() <= 1.0 + 1e-6 and not np.allclose(first, second)
    with pytest.raises(ValueError, match="max_delta must be in"):
        tf.image.random_hue(image, 0.7)


def test_sample_distorted_bounding_box_crops_cover_the_object():
    """An Inception-style crop: each sampled box lies in the image, has the asked area and aspect
    ranges (or is the whole image), and holds at least min_object_covered of the object's box."""
    height, width = 60, 80
    obj = [0.25, 0.25, 0.75, 0.5]  # ymin, xmin, ymax, xmax
    with tf.Graph().as_default():
        begin, size, box = tf.image.sample_distorted_bounding_box(
            [height, width, 3], [[obj]], seed=7, min_object_covered=0.5, aspect_ratio_range=(0.75, 1.33),
            area_range=(0.1, 1.0))
        crop = tf.slice(tf.zeros([height, width, 3]), begin, size)
        with tf.Session() as sess:
            samples = [sess.run([begin, size, box, tf.shape(crop)]) for _ in range(40)]
    whole = 0
    for (top, left, _), (rows, columns, channels), ((normalized,),), shape in samples:
        assert channels == -1 and shape.tolist() == [rows, columns, 3]
        assert 0 <= top and top + rows <= height and 0 <= left and left + columns <= width
        np.testing.assert_allclose(normalized, [top / height, left / width, (top + rows) / height,
                                                (left + columns) / width], rtol=1e-6)
        if (rows, columns) == (height, width):
            whole += 1
            continue
        assert 0.1 * height * width <= rows * columns and 0.7 <= columns / rows <= 1.4
        overlap = (max(0, min(top + rows, obj[2] * height) - max(top, obj[0] * height))
                   * max(0, min(left + columns, obj[3] * width) - max(left, obj[1] * width)))
        assert overlap >= 0.5 * (obj[2] - obj[0]) * height * (obj[3] - obj[1]) * width
    assert whole < 20 and len({tuple(s[0]) for s in samples}) > 10  # crops vary from run to run


def test_slice_at_run_time_offsets_and_its_gradient():
    """tf.slice with begin and size computed when the step runs (the crop of a sampled box)."""
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    with tf.Graph().as_default():
        begin, size = tf.placeholder(tf.int32, [3]), tf.placeholder(tf.int32, [3])
        value = tf.constant(x)
        window = tf.slice(value, begin, size)
        (grad,) = tf.gradients(tf.reduce_sum(window * window), [value])
        assert window.shape.as_list() == [None, None, None]
        with tf.Session() as sess:
            got, got_grad = sess.run([window, grad], {begin: [1, 0, 1], size: [1, -1, 2]})
            with pytest.raises(tf.errors.InvalidArgumentError, match="reach outside the input's shape"):
                sess.run(window, {begin: [1, 2, 3], size: [1, 2, 2]})
    np.testing.assert_array_equal(got, x[1:2, :, 1:3])
    expected = np.zeros_like(x)
    expected[1:2, :, 1:3] = 2 * x[1:2, :, 1:3]
    np.testing.assert_array_equal(got_grad, expected)


def test_non_max_suppression_selects_as_tensorflow_does():
    """TensorFlow 2.21's selections for the same 40 boxes (one with its corners swapped, two with
    equal scores) at several output sizes, IoU and score thresholds."""
    rng = np.random.default_rng(3)
    centers, sizes = rng.random((40, 2)), rng.random((40, 2)) * 0.3
    boxes = np.concatenate([centers - sizes, centers + sizes], axis=1).astype(np.float32)
    boxes[5] = boxes[5][[2, 3, 0, 1]]
    scores = rng.random(40).astype(np.float32)
    scores[7] = scores[3]
    with tf.Graph().as_default(), tf.Session() as sess:
        picked = [sess.run(tf.image.non_max_suppression(boxes, scores, *args)).tolist()
                  for args in [(10, 0.5), (5, 0.7, 0.5), (40, 0.0), (40, 1.0)]]
    assert picked[0] == [25, 4, 32, 23, 9, 19, 28, 7, 17, 14]
    assert picked[1] == [25, 4, 32, 23, 9]
    assert picked[2] == [25, 32, 28, 7, 17, 31, 34, 13, 10, 0]
    assert picked[3][:10] == [25, 4, 32, 23, 9, 19, 28, 3, 7, 17] and len(picked[3]) == 40
