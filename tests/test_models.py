"""Models (dflow.models) and the digits they train on (dflow.data.digits).

Every classifier builds in both layouts, gives ``(batch, 10)`` logits and a
finite loss on real digits; NCHW and NHWC agree for the same weights; a short
training run learns the digits well above chance.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import dflow as tf
from dflow.data import iterate_batches, load_digits
from dflow.data.digits import resize_digits
from dflow.models import DATA_FORMATS, MODELS, get_model, linear_regression

# the models that train on the digits; the ImageNet ones (1000 classes) have tests of their own
ON_DIGITS = {name: spec for name, spec in MODELS.items() if spec.train_defaults["dataset"] == "digits"}
CLASSIFIERS = [name for name, spec in ON_DIGITS.items() if spec.num_classes is not None]
CONVOLUTIONAL = [name for name, spec in ON_DIGITS.items() if spec.convolutional]


@pytest.fixture(scope="module")
def digits():
    """Each model's digits, loaded once per input shape."""
    cache = {}

    def get(shape):
        if shape not in cache:
            cache[shape] = load_digits(shape)
        return cache[shape]

    return get


def build(spec, data_format="NHWC", keep_prob=None, seed=1):
    """Placeholders, logits and loss of ``spec`` in a new graph."""
    graph = tf.Graph()
    with graph.as_default():
        graph.seed = seed
        images = tf.placeholder(tf.float32, [None, *spec.input_shape], name="images")
        labels = tf.placeholder(tf.int64, [None], name="labels")
        logits = spec(images, data_format=data_format, keep_prob=keep_prob)
        loss = spec.loss(logits, labels)
    return graph, images, labels, logits, loss


# ---- models -----------------------------------------------------------------------------------
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("name", CLASSIFIERS)
def test_logits_and_loss_on_a_batch(name, data_format, digits):
    spec = MODELS[name]
    data = digits(spec.input_shape)
    graph, images, labels, logits, loss = build(spec, data_format)
    assert logits.shape.as_list() == [None, 10]
    with tf.Session(graph=graph) as sess:
        sess.run(tf.global_variables_initializer())
        out, value = sess.run([logits, loss], {images: data.train_images[:4],
                                               labels: data.train_labels[:4]})
    assert out.shape == (4, 10) and out.dtype == np.float32
    assert np.isfinite(out).all()
    assert np.isfinite(value) and value > 0


@pytest.mark.parametrize("name", CONVOLUTIONAL)
def test_nchw_gives_the_nhwc_logits_for_the_same_weights(name, digits):
    spec = MODELS[name]
    batch = digits(spec.input_shape).test_images[:3]
    results = []
    weights = None
    for data_format in ("NHWC", "NCHW"):
        graph, images, _, logits, _ = build(spec, data_format)
        with tf.Session(graph=graph) as sess:
            sess.run(tf.global_variables_initializer())
            variables = tf.global_variables()
            if weights is None:
                weights = dict(zip([v.name for v in variables], sess.run(variables)))
            else:
                for v in variables:
                    v.load(weights[v.name], sess)
            results.append(sess.run(logits, {images: batch}))
    np.testing.assert_allclose(results[1], results[0], rtol=1e-4, atol=1e-4)


def test_deep_mnist_dropout_takes_a_keep_prob_placeholder(digits):
    spec = MODELS["deep_mnist"]
    with tf.Graph().as_default():
        keep_prob = tf.placeholder(tf.float32, [])
        images = tf.placeholder(tf.float32, [None, 28, 28, 1])
        logits = spec(images, keep_prob=keep_prob)
        batch = digits(spec.input_shape).test_images[:2]
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            kept = [sess.run(logits, {images: batch, keep_prob: 1.0}) for _ in range(2)]
            dropped = sess.run(logits, {images: batch, keep_prob: 0.5})
    np.testing.assert_array_equal(kept[0], kept[1])  # no dropout at keep_prob 1
    assert not np.allclose(dropped, kept[0])


def test_deep_mnist_accepts_flat_images():
    with tf.Graph().as_default():
        flat = tf.placeholder(tf.float32, [None, 784])
        assert MODELS["deep_mnist"](flat).shape.as_list() == [None, 10]


def test_variables_are_named_like_the_tutorials():
    graph, *_ = build(MODELS["cifar10"])
    names = {v.name for v in graph.get_collection(tf.GraphKeys.GLOBAL_VARIABLES)}
    expected = {f"{layer}/{kind}" for layer in ("conv1", "conv2", "local3", "local4",
                                                "softmax_linear") for kind in ("weights", "biases")}
    assert {n.split(":")[0] for n in names} == expected
    local3 = [v for v in graph.get_collection(tf.GraphKeys.GLOBAL_VARIABLES)
              if v.name.startswith("local3/weights")][0]
    assert local3.shape.as_list() == [6 * 6 * 64, 384]  # 24 -> 12 -> 6 after two 3x3/2 pools


def test_cifar10_loss_adds_the_weight_decay(digits):
    spec = MODELS["cifar10"]
    data = digits(spec.input_shape)
    graph, images, labels, logits, total = build(spec)
    cross_entropy = graph.get_tensor_by_name("cross_entropy:0")
    # the tutorial decays only local3 and local4; the cross-entropy joins them
    assert len(graph.get_collection("losses")) == 3
    with tf.Session(graph=graph) as sess:
        sess.run(tf.global_variables_initializer())
        feed = {images: data.train_images[:2], labels: data.train_labels[:2]}
        total_value, xent_value = sess.run([total, cross_entropy], feed)
    assert total_value > xent_value > 0


def test_linear_regression_is_listing_one():
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, name="x")
        y = tf.placeholder(tf.float32, name="y")
        y_predicted = linear_regression.linear_regression(x)
        loss = linear_regression.loss(y_predicted, y)
        names = sorted(v.name.split(":")[0] for v in tf.trainable_variables())
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            assert float(sess.run(y_predicted, {x: 5.0})) == 0.0
            assert float(sess.run(loss, {x: [1.0, 2.0], y: [3.0, 4.0]})) == pytest.approx(12.5)
    assert names == ["bias", "weight"]


def test_unknown_model_lists_the_choices():
    with pytest.raises(KeyError, match="deep_mnist.*cifar10|cifar10.*deep_mnist"):
        get_model("resnet9000")


def test_unknown_data_format_is_refused():
    with tf.Graph().as_default():
        images = tf.placeholder(tf.float32, [None, 28, 28, 1])
        with pytest.raises(ValueError, match="NHWC, NCHW"):
            MODELS["deep_mnist"](images, data_format="NWHC")


# ---- training on the digits ---------------------------------------------------------------------
def train_and_test(name, steps, batch_size=64, seed=0, **options):
    """Test accuracy of ``name`` after ``steps`` Adam steps (lr 1e-3) on the digits."""
    spec = MODELS[name]
    data = load_digits(spec.input_shape)
    keep = options.get("keep_prob")
    graph = tf.Graph()
    with graph.as_default():
        graph.seed = seed
        images = tf.placeholder(tf.float32, [None, *spec.input_shape])
        labels = tf.placeholder(tf.int64, [None])
        keep_prob = tf.placeholder(tf.float32, []) if keep else None
        logits = spec(images, keep_prob=keep_prob)
        train = tf.train.AdamOptimizer(1e-3).minimize(spec.loss(logits, labels))
        accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), labels), tf.float32))
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            batches = iterate_batches(data.train_images, data.train_labels, batch_size, seed=seed)
            for _ in range(steps):
                x, y = next(batches)
                sess.run(train, {images: x, labels: y, **({keep_prob: keep} if keep else {})})
            test = {images: data.test_images, labels: data.test_labels}
            return float(sess.run(accuracy, {**test, **({keep_prob: 1.0} if keep else {})}))


def test_mnist_dnn_learns_the_digits():
    # measured 0.96-0.98 over seeds 0-4; chance is 0.1
    assert train_and_test("mnist_dnn", steps=200) >= 0.9


@pytest.mark.slow
def test_deep_mnist_learns_the_digits():
    # measured 0.978-0.983 over seeds 0-2
    assert train_and_test("deep_mnist", steps=150, batch_size=50, keep_prob=0.5) >= 0.9


# ---- the digits ---------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(28, 28, 1), (24, 24, 3), (784,), (8, 8, 1)])
def test_digits_have_the_asked_shape_and_range(shape):
    split = load_digits(shape)
    assert split.train_images.shape == (1437, *shape)
    assert split.test_images.shape == (360, *shape)
    for images in (split.train_images, split.test_images):
        assert images.dtype == np.float32
        assert images.min() == 0.0 and images.max() == 1.0
    assert split.train_labels.dtype == np.int64
    assert set(np.unique(split.test_labels)) == set(range(10))


def test_the_split_is_deterministic_and_disjoint():
    a, b = load_digits((64,)), load_digits((64,))
    np.testing.assert_array_equal(a.test_images, b.test_images)
    train = {row.tobytes() for row in a.train_images}
    # a few digits occur twice in the data set; nearly all test images are new
    assert sum(row.tobytes() in train for row in a.test_images) < 10
    other = load_digits((64,), seed=1)
    assert not np.array_equal(other.test_labels, a.test_labels)


def test_resizing_keeps_the_digit_and_centres_it():
    image = np.zeros((1, 8, 8), np.float32)
    image[0, 2:6, 3:5] = 1.0
    big = resize_digits(image, (28, 28, 3))
    assert big.shape == (1, 28, 28, 3)
    np.testing.assert_array_equal(big[..., 0], big[..., 2])
    assert big[0, :2].max() == 0 and big[0, -2:].max() == 0  # the 2-pixel frame
    ys, xs = np.nonzero(big[0, :, :, 0] > 0.5)
    assert math.isclose(ys.mean(), 13.5, abs_tol=0.6) and math.isclose(xs.mean(), 13.5, abs_tol=0.6)
    with pytest.raises(ValueError, match="square"):
        resize_digits(image, (780,))


def test_batches_cover_each_epoch_in_a_new_order():
    labels = np.arange(10)
    images = labels[:, None].astype(np.float32)
    epochs = list(iterate_batches(images, labels, batch_size=3, seed=0, epochs=2))
    assert len(epochs) == 6 and all(len(y) == 3 for _, y in epochs)
    first = np.concatenate([y for _, y in epochs[:3]])
    second = np.concatenate([y for _, y in epochs[3:]])
    assert len(set(first)) == 9 and len(set(second)) == 9
    assert not np.array_equal(first, second)
    again = np.concatenate([y for _, y in iterate_batches(images, labels, 3, seed=0, epochs=1)])
    np.testing.assert_array_equal(again, first)
    everything = [y for _, y in iterate_batches(images, labels, 3, epochs=1, drop_remainder=False)]
    assert sorted(np.concatenate(everything)) == list(range(10))
    with pytest.raises(ValueError, match="batch_size"):
        next(iterate_batches(images, labels, 11))
