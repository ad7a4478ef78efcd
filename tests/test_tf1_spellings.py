"""TF 1.x code as people wrote it: dtype spellings, deprecated argument names, Dimension and
TensorShape, shapes given as tensors, and the small ops scripts reach for (issue 13, item 2)."""

import inspect

import numpy as np
import pytest
from namespaces import NAMESPACES, OTHER_NAMESPACES, assert_of_namespace, reference_session, to_host

import dflow as tf
from dflow.ops import array_ops, math_ops, nn_ops, state_ops
from dflow.ops.registry import get_opdef

FLOAT32_SPELLINGS = ["float", "float32", float, np.float32, np.dtype("float32"), tf.float32,
                     tf.float32.as_numpy_dtype]
ALL_SPELLINGS = [
    *[(s, tf.float32) for s in FLOAT32_SPELLINGS],
    ("double", tf.float64), ("float64", tf.float64), (np.float64, tf.float64), (tf.double, tf.float64),
    ("int", tf.int32), (int, tf.int32), ("int32", tf.int32), (np.int32, tf.int32),
    ("int64", tf.int64), (np.int64, tf.int64), (bool, tf.bool), ("bool", tf.bool), (np.bool_, tf.bool),
    ("half", tf.float16), ("uint8", tf.uint8), ("string", tf.string), (str, tf.string),
]


@pytest.mark.parametrize("spelling, expected", ALL_SPELLINGS, ids=repr)
def test_as_dtype_takes_every_tf_spelling(spelling, expected):
    assert tf.as_dtype(spelling) is expected
    assert tf.as_dtype(spelling) == spelling or isinstance(spelling, type)


@pytest.mark.parametrize("spelling", FLOAT32_SPELLINGS, ids=repr)
def test_a_float_dtype_spelling_works_wherever_a_dtype_is_taken(spelling):
    with tf.Graph().as_default():
        x = tf.placeholder(spelling, [None, 2])
        built = {
            "placeholder": x,
            "constant": tf.constant([1, 2], dtype=spelling),
            "Variable": tf.Variable([1.0, 2.0], dtype=spelling),
            "get_variable": tf.get_variable("v", [2], dtype=spelling),
            "cast": tf.cast(tf.constant([1, 2]), spelling),
            "zeros": tf.zeros([2], spelling),
            "ones": tf.ones([2], dtype=spelling),
            "fill": tf.fill([2], 3, dtype=spelling) if hasattr(tf, "fill") else None,
            "random_normal": tf.random_normal([2], dtype=spelling),
            "truncated_normal": tf.truncated_normal([2], dtype=spelling),
            "random_uniform": tf.random_uniform([2], dtype=spelling),
            "initializer": tf.truncated_normal_initializer(stddev=0.1, dtype=spelling)([2]),
            "zeros_like": tf.zeros_like(tf.constant([1, 2]), dtype=spelling),
        }
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            values = sess.run({k: v for k, v in built.items() if k != "placeholder"})
        assert all(t.dtype is tf.float32 for t in built.values())
        assert all(v.dtype == np.float32 for v in values.values())


def test_python_int_and_bool_dtypes():
    a = tf.placeholder(int, [3])
    b = tf.placeholder(bool, [3])
    c = tf.get_variable("count", [], dtype=int, initializer=tf.zeros_initializer())
    with tf.Session() as sess:
        sess.run(tf.initialize_all_variables())
        got = sess.run([a * 2, tf.logical_not(b), c], {a: [1, 2, 3], b: [True, False, True]})
    assert got[0].dtype == np.int32 and got[0].tolist() == [2, 4, 6]
    assert got[1].tolist() == [False, True, False] and got[2] == 0


def test_dtype_properties():
    assert tf.float32.is_compatible_with(tf.float32) and not tf.float32.is_compatible_with("int32")
    assert tf.float32.min == np.finfo(np.float32).min and tf.uint8.max == 255
    assert tf.int8.min == -128 and tf.bool.max is True
    assert tf.complex64.real_dtype is tf.float32 and tf.float64.real_dtype is tf.float64
    assert tf.float32.as_datatype_enum == 1 and tf.as_dtype(1) is tf.float32
    assert tf.float32 == "float32" and tf.float32 != tf.float64 and tf.half is tf.float16
    assert {tf.float32: "x"}[tf.as_dtype("float")] == "x"
    assert tf.string.as_numpy_dtype is np.object_ and tf.float32.as_numpy_dtype is np.float32
    with pytest.raises(TypeError, match="cannot convert 'flaot' to a dflow dtype"):
        tf.placeholder("flaot")


def test_string_constants_are_fetched_as_bytes_like_tf1():
    hello = tf.constant("Hello, TensorFlow!")
    words = tf.constant(["a", "bc"])
    assert hello.dtype is tf.string and words.shape == (2,)
    name = tf.placeholder(tf.string, [])
    with tf.Session() as sess:
        assert sess.run(hello) == b"Hello, TensorFlow!"
        assert sess.run(words).tolist() == [b"a", b"bc"]
        assert sess.run(tf.identity(name), {name: b"dflow"}) == b"dflow"
    with tf.Session() as sess:  # adding strings joins them, as TF's Add does
        assert sess.run(hello + hello) == b"Hello, TensorFlow!Hello, TensorFlow!"
    with pytest.raises(ValueError, match="dflow does not compute on tf.string"):
        hello * hello
    with pytest.raises(ValueError, match="dflow does not compute on tf.string"):
        tf.reduce_sum(words)
    with pytest.raises(TypeError, match="tf.cast between tf.string and tf.float32 is not supported"):
        tf.cast(hello, tf.float32)


def test_reductions_take_reduction_indices_and_keep_dims():
    x = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    b = tf.constant([[True, False], [True, True]])
    out = {
        "sum": tf.reduce_sum(x, reduction_indices=[1]),
        "mean": tf.reduce_mean(x, reduction_indices=1, keep_dims=True),
        "max": tf.reduce_max(x, 0, keep_dims=False),
        "min": tf.reduce_min(x, axis=None, keepdims=True),
        "prod": tf.reduce_prod(x, reduction_indices=0),
        "any": tf.reduce_any(b, reduction_indices=[1]),
        "all": tf.reduce_all(b, axis=1, keep_dims=True),
        "axis_tensor": tf.reduce_sum(x, axis=tf.constant(0)),
        "argmax": tf.argmax(x, dimension=1),
        "argmin": tf.argmin(x, axis=0),
        "arg_max": tf.arg_max(x, 1),
        "arg_min": tf.arg_min(x, 0),
        "argmax_default": tf.argmax(x),
        "count_nonzero": tf.count_nonzero(tf.constant([[0, 1], [2, 0]]), reduction_indices=1),
        "logsumexp": tf.reduce_logsumexp(tf.constant([[1000.0, 1000.0], [0.0, 0.0]]), axis=1),
    }
    assert out["mean"].shape == (2, 1) and out["all"].shape == (2, 1) and out["min"].shape == (1, 1)
    with tf.Session() as sess:
        got = sess.run(out)
    np.testing.assert_allclose(got["sum"], [3, 7])
    np.testing.assert_allclose(got["mean"], [[1.5], [3.5]])
    np.testing.assert_allclose(got["max"], [3, 4])
    np.testing.assert_allclose(got["prod"], [3, 8])
    assert got["any"].tolist() == [True, True] and got["all"].tolist() == [[False], [True]]
    np.testing.assert_allclose(got["axis_tensor"], [4, 6])
    assert got["argmax"].tolist() == [1, 1] and got["arg_max"].dtype == np.int64
    assert got["argmin"].tolist() == [0, 0] and got["arg_min"].tolist() == [0, 0]
    assert got["argmax_default"].tolist() == [1, 1]
    assert got["count_nonzero"].tolist() == [1, 1] and got["count_nonzero"].dtype == np.int64
    np.testing.assert_allclose(got["logsumexp"], [1000 + np.log(2), np.log(2)], rtol=1e-6)
    with pytest.raises(ValueError, match="not both"):
        tf.reduce_sum(x, axis=0, reduction_indices=0)


def test_dim_and_old_argument_orders():
    x = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    with tf.Session() as sess:
        np.testing.assert_allclose(sess.run(tf.nn.softmax(x, dim=0)).sum(axis=0), [1, 1], rtol=1e-6)
        np.testing.assert_allclose(sess.run(tf.exp(tf.nn.log_softmax(x, dim=0))).sum(axis=0), [1, 1],
                                   rtol=1e-6)
        assert sess.run(tf.expand_dims(x, dim=1)).shape == (2, 1, 2)
        assert sess.run(tf.concat(1, [x, x])).shape == (2, 4)  # TF 0.x's argument order
        np.testing.assert_allclose(np.linalg.norm(sess.run(tf.nn.l2_normalize(x, dim=1)), axis=1), [1, 1],
                                   rtol=1e-6)
        mean, variance = sess.run(tf.nn.moments(x, axes=[0], keep_dims=True))
    np.testing.assert_allclose(mean, [[2, 3]])


PUBLIC_OP_MODULES = [array_ops, math_ops, nn_ops, state_ops]
# (TF's add_check_numerics_ops takes no name either)
NO_NAME = {"sum_to_shape", "shape_tensor", "static_shape", "glorot_limit", "op_seed",
           "add_check_numerics_ops"}


@pytest.mark.parametrize("module", PUBLIC_OP_MODULES, ids=lambda m: m.__name__)
def test_every_public_op_function_takes_name(module):
    missing = []
    for public in module.__all__:
        fn = getattr(module, public)
        if callable(fn) and public not in NO_NAME and "name" not in inspect.signature(fn).parameters:
            missing.append(public)
    assert not missing, f"{module.__name__}: no name= on {missing}"


def test_dimension_and_tensorshape_as_tf1():
    x = tf.placeholder(tf.float32, [None, 28, 28, 1])
    shape = x.get_shape()
    assert shape[1].value == 28 and int(shape[1]) == 28 and shape[0].value is None
    assert shape.as_list() == [None, 28, 28, 1] and shape.ndims == 4 and shape.num_elements() is None
    assert shape[1:].as_list() == [28, 28, 1] and shape[1:].num_elements() == 784
    dim = shape[1]
    assert (dim * 2).value == 56 and (dim // 2).value == 14 and (dim + dim).value == 56
    assert (2 * dim).value == 56 and (dim - 1).value == 27 and (shape[0] * 2).value is None
    assert dim == 28 and dim != 27 and shape[0] == None  # noqa: E711 - what `None in shape` asks
    assert None in shape and list(range(shape[3])) == [0]
    assert np.zeros([dim, shape[3]]).shape == (28, 1)
    assert tf.Dimension(None).value is None and tf.Dimension(3).value == 3
    assert repr(tf.Dimension(3)) == "Dimension(3)" and str(tf.Dimension(None)) == "?"
    assert tf.Dimension(None).merge_with(5).value == 5
    with pytest.raises(ValueError, match="not compatible"):
        tf.Dimension(3).merge_with(4)
    with pytest.raises(TypeError, match="unknown Dimension"):
        int(shape[0])
    partial = tf.TensorShape([None, 3])
    assert partial.merge_with([2, None]).as_list() == [2, 3]
    assert partial.is_compatible_with([5, 3]) and not partial.is_compatible_with([5, 4])
    assert tf.TensorShape(None).ndims is None and tf.TensorShape(5).as_list() == [5]
    assert tf.TensorShape([tf.Dimension(2), tf.Dimension(None)]) == tf.TensorShape([2, None])
    assert (partial + [7]).as_list() == [None, 3, 7] and partial.concatenate(partial).ndims == 4
    with pytest.raises(ValueError, match="incompatible"):
        partial.merge_with([2, 4])


def test_tensorshape_and_dimensions_are_taken_as_shapes():
    images = tf.placeholder(tf.float32, [4, 7, 7, 8])
    flat_dim = images.get_shape()[1:].num_elements()
    flat = tf.reshape(images, [images.get_shape()[0].value, -1])
    assert flat.get_shape()[1].value == flat_dim == 392
    w = tf.get_variable("w", [flat.get_shape()[1], 10], dtype=float)
    assert w.get_shape().as_list() == [392, 10]
    assert tf.zeros(images.get_shape()).shape == (4, 7, 7, 8)
    assert tf.reshape(images, tf.TensorShape([4, 392])).shape == (4, 392)
    assert tf.placeholder(tf.float32, images.get_shape()[1:]).shape == (7, 7, 8)
    assert tf.placeholder(tf.float32, [None, flat.get_shape()[1]]).shape == (None, 392)
    assert tf.random_normal(images.get_shape()[1:3]).shape == (7, 7)
    assert tf.placeholder(tf.int32, shape=(16)).shape == (16,)  # a plain int: a vector


def test_shapes_given_as_tensors():
    x = tf.placeholder(tf.float32, [None, 3])
    batch = tf.shape(x)[0]
    eps = tf.random_normal(shape=tf.shape(x))
    stddev = tf.placeholder(tf.float32, [])
    noise = tf.random_normal([tf.shape(x)[0], 1000], mean=tf.constant(1.0), stddev=stddev)
    uniform = tf.random_uniform(tf.shape(x), minval=tf.constant(2.0), maxval=3.0)
    truncated = tf.truncated_normal(tf.stack([batch, 500]), stddev=stddev)
    built = {
        "eps": eps, "noise": noise, "uniform": uniform, "truncated": truncated,
        "zeros": tf.zeros(tf.shape(x)), "ones": tf.ones_like(x), "fill": tf.fill(tf.shape(x), 7.0),
        "fill_tensor": tf.fill([batch, 2], tf.reduce_sum(x)),
        "stacked": tf.reshape(x, tf.stack([batch, 3, 1])),
        "mixed": tf.reshape(x, [tf.shape(x)[0], -1]),
        "broadcast": tf.broadcast_to(tf.constant(1.0), [batch, 2]),
    }
    assert built["mixed"].shape == (None, 3) and built["stacked"].shape == (None, 3, 1)
    assert built["fill"].shape == (None, 3) and eps.shape == (None, 3) and noise.shape == (None, 1000)
    with tf.Session() as sess:
        got = sess.run(built, {x: np.ones((4, 3)), stddev: 0.5})
    assert got["eps"].shape == (4, 3) and got["zeros"].shape == (4, 3)
    assert abs(got["noise"].mean() - 1.0) < 0.05 and abs(got["noise"].std() - 0.5) < 0.05
    assert got["truncated"].shape == (4, 500) and np.abs(got["truncated"]).max() <= 1.0
    assert 2.0 <= got["uniform"].min() and got["uniform"].max() < 3.0
    assert got["fill"].tolist() == [[7.0] * 3] * 4 and got["fill_tensor"].tolist() == [[12.0] * 2] * 4
    assert got["stacked"].shape == (4, 3, 1) and got["mixed"].shape == (4, 3)
    assert got["broadcast"].shape == (4, 2)


def test_range_takes_scalar_tensors():
    """ad_dynamic_rnn's last-output index: ``tf.range(0, batch_size) * max_len + (seqlen - 1)``."""
    outputs = tf.placeholder(tf.float32, [None, 5, 2])
    seqlen = tf.placeholder(tf.int32, [None])
    batch_size = tf.shape(outputs)[0]
    index = tf.range(0, batch_size) * 5 + (seqlen - 1)
    assert index.shape == (None,) and tf.range(tf.constant(4)).shape == (4,)
    floats = tf.range(tf.constant(1.0), 2.0, 0.25)
    python_floats = tf.range(0, 3.0)  # (a TypeError once: only int bounds had a length)
    assert python_floats.shape == (3,)
    with tf.Session() as sess:
        got = sess.run([index, floats, python_floats], {outputs: np.zeros((3, 5, 2)), seqlen: [5, 1, 2]})
    assert got[0].tolist() == [4, 5, 11] and got[0].dtype == np.int32
    assert got[1].tolist() == [1.0, 1.25, 1.5, 1.75] and got[1].dtype == np.float32
    assert got[2].tolist() == [0.0, 1.0, 2.0] and got[2].dtype == np.float32


def test_tensor_stddev_reaches_the_gradient():
    sigma = tf.Variable(2.0)
    sample = tf.random_normal([1000], stddev=sigma, seed=1)
    (grad,) = tf.gradients(tf.reduce_sum(sample), [sigma])
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        assert grad is not None and np.isfinite(sess.run(grad))


def test_small_ops_against_numpy():
    a = np.array([[-1.5, 0.0, 2.5], [3.7, -0.2, np.nan]], np.float32)
    x = tf.constant(a)
    ints = tf.constant([7, -7, 5])
    fetches = {
        "is_nan": tf.is_nan(x), "is_finite": tf.is_finite(x), "round": tf.round(x), "ceil": tf.ceil(x),
        "mod": tf.mod(ints, 3), "floordiv": tf.floordiv(ints, 2), "to_float": tf.to_float(ints),
        "to_int64": tf.to_int64(ints), "to_double": tf.to_double(ints), "to_int32": tf.to_int32(x[0]),
        "zero_fraction": tf.nn.zero_fraction(tf.constant([0.0, 1.0, 0.0, 2.0])),
        "squared_difference": tf.squared_difference(tf.constant([1.0, 2.0]), 3.0),
        "clip": tf.clip_by_value(tf.constant([-2.0, 0.5, 9.0]), 0.0, 1.0),
        "norm": tf.norm(tf.constant([3.0, 4.0])),
        "linspace": tf.linspace(10.0, 12.0, 3), "reverse": tf.reverse(ints, [0]),
        "slice": tf.slice(tf.reshape(tf.range(12), [3, 4]), [1, 1], [2, -1]),
        "relu6": tf.nn.relu6(tf.constant([-1.0, 3.0, 8.0])),
        "leaky": tf.nn.leaky_relu(tf.constant([-1.0, 2.0]), alpha=0.1),
        "elu": tf.nn.elu(tf.constant([-1.0, 2.0])), "softplus": tf.nn.softplus(tf.constant([0.0, 100.0])),
        "xent_v2": tf.nn.softmax_cross_entropy_with_logits_v2(labels=[[0.0, 1.0]], logits=[[0.0, 0.0]]),
        "scalar_mul": tf.scalar_mul(0.5, tf.constant([2.0, -4.0])),
    }
    with pytest.raises(ValueError, match="scalar_mul takes a scalar as its first argument, got shape"):
        tf.scalar_mul([1.0, 2.0], x)
    with tf.Session() as sess:
        got = sess.run(fetches)
    np.testing.assert_array_equal(got["is_nan"], np.isnan(a))
    np.testing.assert_array_equal(got["is_finite"], np.isfinite(a))
    np.testing.assert_array_equal(got["round"][0], [-2.0, 0.0, 2.0])  # half to even, as TF
    np.testing.assert_array_equal(got["ceil"][0], [-1.0, 0.0, 3.0])
    assert got["mod"].tolist() == [1, 2, 2] and got["floordiv"].tolist() == [3, -4, 2]
    assert got["to_float"].dtype == np.float32 and got["to_int64"].dtype == np.int64
    assert got["to_double"].dtype == np.float64 and got["to_int32"].tolist() == [-1, 0, 2]
    assert got["zero_fraction"] == 0.5 and got["squared_difference"].tolist() == [4.0, 1.0]
    assert got["clip"].tolist() == [0.0, 0.5, 1.0] and got["norm"] == 5.0
    np.testing.assert_allclose(got["linspace"], [10.0, 11.0, 12.0])
    assert got["reverse"].tolist() == [5, -7, 7] and got["slice"].tolist() == [[5, 6, 7], [9, 10, 11]]
    assert got["relu6"].tolist() == [0.0, 3.0, 6.0]
    np.testing.assert_allclose(got["leaky"], [-0.1, 2.0], rtol=1e-6)
    np.testing.assert_allclose(got["elu"], [np.expm1(-1.0), 2.0], rtol=1e-6)
    np.testing.assert_allclose(got["softplus"], [np.log(2.0), 100.0], rtol=1e-6)
    np.testing.assert_allclose(got["xent_v2"], [np.log(2.0)], rtol=1e-6)
    assert got["scalar_mul"].tolist() == [1.0, -2.0]


def test_clip_by_global_norm_matches_the_formula():
    grads = [tf.constant([3.0, 0.0]), None, tf.constant([[4.0]])]
    clipped, norm = tf.clip_by_global_norm(grads, 1.0)
    unclipped, _ = tf.clip_by_global_norm(grads, 10.0)
    with tf.Session() as sess:
        assert sess.run(norm) == 5.0
        a, c = sess.run([clipped[0], clipped[2]])
        assert clipped[1] is None
        np.testing.assert_allclose(a, [0.6, 0.0], rtol=1e-6)
        np.testing.assert_allclose(c, [[0.8]], rtol=1e-6)
        np.testing.assert_allclose(sess.run(unclipped[0]), [3.0, 0.0], rtol=1e-6)
        np.testing.assert_allclose(sess.run(tf.clip_by_norm(tf.constant([3.0, 4.0]), 1.0)), [0.6, 0.8],
                                   rtol=1e-6)


def test_print_passes_its_input_through_and_prints(capsys):
    x = tf.constant([1.0, 2.0, 3.0, 4.0])
    y = tf.Print(x, [x, tf.reduce_sum(x)], message="x and its sum: ", summarize=2, first_n=2)
    with tf.Session() as sess:
        for _ in range(3):
            np.testing.assert_array_equal(sess.run(y * 2.0), [2.0, 4.0, 6.0, 8.0])
    printed = capsys.readouterr().err.splitlines()
    assert printed == ["x and its sum: [1.0 2.0...][10.0]"] * 2


def test_random_shuffle_and_multinomial():
    tf.set_random_seed(3)
    shuffled = tf.random_shuffle(tf.reshape(tf.range(20), [10, 2]))
    draws = tf.multinomial(tf.constant([[np.log(0.2), np.log(0.8)], [0.0, -np.inf]]), 4000)
    assert draws.shape == (2, 4000) and draws.dtype is tf.int64
    with tf.Session() as sess:
        first, second = sess.run(shuffled), sess.run(shuffled)
        samples = sess.run(draws)
    assert sorted(first[:, 0].tolist()) == list(range(0, 20, 2)) and (first[:, 1] == first[:, 0] + 1).all()
    assert not np.array_equal(first, second)
    assert abs(samples[0].mean() - 0.8) < 0.03 and (samples[1] == 0).all()


def test_variables_as_tf1_scripts_build_them():
    w = tf.Variable(tf.random_normal([784, 10], stddev=0.01), name="W")
    b = tf.Variable(tf.zeros([10]), dtype="float")
    v = tf.Variable(np.zeros(3), dtype=tf.float32)
    step = tf.Variable(0, trainable=False, dtype=int)
    g = tf.get_variable("g", shape=tf.TensorShape([2, 2]), dtype=np.float32,
                        initializer=tf.random_normal_initializer(stddev=tf.constant(0.5)))
    c = tf.get_variable("c", initializer=tf.constant([1.0, 2.0]))  # dtype and shape from the tensor
    with tf.Session() as sess:
        sess.run(tf.variables_initializer([w, b, v, step, g, c]))
        values = sess.run([w, b, v, step, g, c])
    assert [x.dtype for x in values] == [np.float32] * 3 + [np.int32] + [np.float32] * 2
    assert values[0].shape == (784, 10) and 0.005 < values[0].std() < 0.015
    assert values[4].shape == (2, 2) and values[5].tolist() == [1.0, 2.0]


def test_softmax_regression_in_the_tf1_tutorial_style():
    """The r1.x ``mnist_softmax`` shape of script: "float" placeholders, reduction_indices,
    xw_plus_b, argmax with dimension=, clipped gradients, on separable blobs."""
    rng = np.random.default_rng(0)
    centers = rng.normal(0, 3, (3, 5))
    labels = rng.integers(0, 3, 600)
    data = (centers[labels] + rng.normal(0, 0.5, (600, 5))).astype(np.float32)
    onehot = np.eye(3, dtype=np.float32)[labels]

    x = tf.placeholder("float", [None, 5])
    y_ = tf.placeholder("float", [None, 3])
    W = tf.Variable(tf.zeros([5, 3]))
    b = tf.Variable(tf.zeros([3]))
    y = tf.nn.softmax(tf.nn.xw_plus_b(x, W, b))
    cross_entropy = tf.reduce_mean(-tf.reduce_sum(y_ * tf.log(tf.clip_by_value(y, 1e-10, 1.0)),
                                                  reduction_indices=[1]))
    optimizer = tf.train.GradientDescentOptimizer(0.5)
    grads, variables = zip(*optimizer.compute_gradients(cross_entropy))
    clipped, _ = tf.clip_by_global_norm(grads, 5.0)
    train_step = optimizer.apply_gradients(zip(clipped, variables))
    correct = tf.equal(tf.argmax(y, dimension=1), tf.arg_max(y_, 1))
    accuracy = tf.reduce_mean(tf.cast(correct, "float"))
    with tf.Session() as sess:
        sess.run(tf.initialize_all_variables())
        for i in range(0, 600, 50):
            sess.run(train_step, feed_dict={x: data[i:i + 50], y_: onehot[i:i + 50]})
        assert sess.run(accuracy, feed_dict={x: data, y_: onehot}) > 0.95


def test_assertions_fail_the_step_with_the_data():
    x = tf.placeholder(tf.float32, [3])
    with tf.control_dependencies([tf.assert_positive(x, message="x must be positive"),
                                  tf.assert_less(x, 10.0)]):
        y = tf.identity(x)
    check = tf.Assert(tf.reduce_all(x > 0.0), [x], name="all_positive")
    assert isinstance(check, tf.Operation) and check.name == "all_positive"
    with tf.Session() as sess:
        sess.run(tf.initialize_variables([]))
        assert sess.run(y, {x: [1.0, 2.0, 3.0]}).tolist() == [1.0, 2.0, 3.0]
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=r"x must be positive Condition x > 0 did not hold \[1.0 -2.0 3.0\]"):
            sess.run(y, {x: [1.0, -2.0, 3.0]})
        with pytest.raises(tf.errors.InvalidArgumentError, match="x < y"):
            sess.run(y, {x: [1.0, 20.0, 3.0]})
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"assertion failed: \[0.0 1.0 2.0\]"):
            sess.run(check, {x: [0.0, 1.0, 2.0]})
        sess.run(tf.assert_equal(x, [1.0, 2.0, 3.0]), {x: [1.0, 2.0, 3.0]})


def test_check_numerics_passes_finite_values_and_fails_the_step_with_tf_s_words():
    x = tf.placeholder(tf.float32, [3])
    checked = tf.check_numerics(x * 2.0, "x doubled")
    also = tf.verify_tensor_all_finite(x, "x itself")
    assert tf.debugging.check_numerics is tf.check_numerics and checked.op.type == "CheckNumerics"
    with tf.Session() as sess:
        assert sess.run([checked, also], {x: [1.0, 2.0, 3.0]})[0].tolist() == [2.0, 4.0, 6.0]
        for value, found in (([1.0, np.inf, 3.0], "Inf"), ([np.nan, 2.0, 3.0], "NaN"),
                             ([np.nan, -np.inf, 3.0], "Inf and NaN")):
            with pytest.raises(tf.errors.InvalidArgumentError, match=f"^x doubled : Tensor had {found} val"):
                sess.run(checked, {x: value})
        with pytest.raises(tf.errors.InvalidArgumentError, match="x itself : Tensor had NaN values"):
            sess.run(also, {x: [np.nan, 2.0, 3.0]})
    with pytest.raises(TypeError, match="int32"):
        tf.check_numerics(tf.constant([1, 2]), "integers")


def test_check_numerics_checks_the_gradient_and_add_check_numerics_ops_names_the_tensor():
    """sqrt(0) is finite but its gradient is not: the check's gradient fails, as TF's does."""
    x = tf.placeholder(tf.float32, [2])
    root = tf.sqrt(tf.check_numerics(x, "x"))
    gradient = tf.gradients(tf.reduce_sum(root), x)[0]
    check_all = tf.add_check_numerics_ops()
    with tf.Session() as sess:
        np.testing.assert_allclose(sess.run(gradient, {x: [1.0, 4.0]}), [0.5, 0.25])
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=r"^Not a number \(NaN\) or infinity \(Inf\) values detected in gradient. "
                                 "x : Tensor had Inf values"):
            sess.run(gradient, {x: [0.0, 4.0]})
        sess.run(check_all, {x: [1.0, 4.0]})
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"^Sqrt:0 : Tensor had NaN values"):
            sess.run(check_all, {x: [-1.0, 4.0]})


@pytest.mark.parametrize("xp", NAMESPACES)
def test_the_check_numerics_kernel_on_every_namespace(xp):
    kernel = get_opdef("CheckNumerics").kernel
    value = xp.asarray(np.array([1.0, -2.0], np.float32))
    assert kernel(xp, value, message="m") is value
    with pytest.raises(tf.errors.InvalidArgumentError, match="m : Tensor had NaN values"):
        kernel(xp, xp.asarray(np.array([1.0, np.nan], np.float32)), message="m")


def test_python_operators_and_iteration_as_tf1():
    a = tf.constant([7, -7, 5])
    p = tf.constant([True, False, True])
    q = tf.constant([True, True, False])
    first, second = tf.constant([[1.0, 2.0], [3.0, 4.0]])  # a first dim known at build time
    with tf.Session() as sess:
        got = sess.run([a // 2, a % 3, 20 // a, p & q, p | q, p ^ q, ~p, first, second])
    assert got[0].tolist() == [3, -4, 2] and got[1].tolist() == [1, 2, 2] and got[2].tolist() == [2, -3, 4]
    assert got[3].tolist() == [True, False, False] and got[4].tolist() == [True, True, True]
    assert got[5].tolist() == [False, True, True] and got[6].tolist() == [False, True, False]
    assert got[7].tolist() == [1.0, 2.0] and got[8].tolist() == [3.0, 4.0]
    with pytest.raises(TypeError, match="unknown first dimension"):
        list(tf.placeholder(tf.float32, [None, 2]))
    with pytest.raises(TypeError, match="scalar"):
        iter(tf.constant(1.0))
    with pytest.raises(TypeError, match="please use // instead"):
        tf.Dimension(4) / 2


def test_tf_random_and_tf_math_namespaces_and_old_names():
    import math

    from dflow.ops import state_ops as ops_module

    assert ops_module.math is math  # dflow/math.py does not shadow the standard library inside dflow
    weights = tf.Variable(tf.random.truncated_normal([784, 10], stddev=1.0 / math.sqrt(784.0)))
    x = tf.constant([[1.0, -2.0]])
    fetches = [tf.math.log1p(tf.math.abs(x)), tf.math.reduce_logsumexp(x), tf.math.mod(7, 3),
               tf.random.normal([3]), tf.random.uniform([2], maxval=2.0), tf.random.shuffle([1, 2, 3]),
               tf.random.categorical(x, 5), tf.neg(x), tf.select(x > 0.0, x, -x), tf.pack([x, x]),
               tf.unpack(x)[0]]
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        got = sess.run([weights] + fetches)
    assert got[0].shape == (784, 10) and np.abs(got[0]).max() <= 2.0 / 28
    np.testing.assert_allclose(got[1], np.log1p([[1.0, 2.0]]), rtol=1e-6)
    assert got[3] == 1 and got[7].shape == (1, 5) and got[8].tolist() == [[-1.0, 2.0]]
    assert got[9].tolist() == [[1.0, 2.0]] and got[10].shape == (2, 1, 2) and got[11].tolist() == [1.0, -2.0]


def test_top_k_and_batch_normalization():
    scores = tf.constant([[1.0, 3.0, 2.0, 3.0], [4.0, 0.0, -1.0, 2.0]])
    values, indices = tf.nn.top_k(scores, k=2)
    x = tf.constant([[1.0, 2.0], [3.0, 6.0]])
    mean, variance = tf.nn.moments(x, axes=[0])
    normalized = tf.nn.batch_normalization(x, mean, variance, offset=None, scale=None, variance_epsilon=0.0)
    with tf.Session() as sess:
        got = sess.run([values, indices, normalized, tf.math.top_k(scores)[1]])
    assert got[0].tolist() == [[3.0, 3.0], [4.0, 2.0]] and got[1].tolist() == [[1, 3], [0, 3]]
    np.testing.assert_allclose(got[2], [[-1.0, -1.0], [1.0, 1.0]], rtol=1e-6)
    assert got[3].tolist() == [[1], [0]]


@pytest.mark.parametrize("mode, distribution, fan", [
    ("fan_in", "truncated_normal", 300), ("fan_out", "untruncated_normal", 200),
    ("fan_avg", "uniform", 250), ("fan_in", "normal", 300)])
def test_variance_scaling_initializer_has_the_variance_it_names(mode, distribution, fan):
    init = tf.variance_scaling_initializer(scale=2.0, mode=mode, distribution=distribution, seed=4)
    w = tf.get_variable("w", [300, 200], initializer=init)
    w2 = tf.Variable(w.initialized_value() * 2.0)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        values, doubled = sess.run([w, w2])
    np.testing.assert_allclose(values.var(), 2.0 / fan, rtol=0.05)
    np.testing.assert_allclose(doubled, 2.0 * values)
    if distribution in ("truncated_normal", "normal"):
        assert np.abs(values).max() <= 2.0 * np.sqrt(2.0 / fan) / 0.87962566103423978 + 1e-6


@pytest.mark.parametrize("xp", OTHER_NAMESPACES)
def test_the_new_kernels_without_gradients_run_on_other_namespaces(xp):
    """As the gradient table does for the differentiable ones: the same plan on
    array_api_strict and CuPy gives NumPy's numbers (seeded random ops draw the same values)."""
    from dflow.runtime.executor import execute
    from dflow.runtime.state import SessionState

    x = tf.placeholder(tf.float32, [2, 3])
    b = tf.placeholder(tf.bool, [2, 3])
    ints = tf.placeholder(tf.int32, [3])
    fetches = [tf.is_nan(x), tf.is_finite(x), tf.is_inf(x), tf.round(x), tf.ceil(x), ints // 2, ints % 3,
               tf.logical_xor(b, ~b), tf.reduce_any(b, 1), tf.reduce_all(b), tf.linspace(0.0, 1.0, 4),
               tf.nn.top_k(x, 2)[1], tf.count_nonzero(x, 1), tf.nn.zero_fraction(x),
               tf.random_normal(tf.shape(x), seed=1), tf.random_uniform([tf.shape(x)[0], 2], seed=2),
               tf.truncated_normal(tf.shape(x), seed=3), tf.random_shuffle(ints, seed=4),
               tf.multinomial(tf.log([[0.2, 0.8], [0.5, 0.5]]), 5, seed=5), tf.Print(x, [x], "strict: "),
               tf.range(0, tf.shape(x)[0]) * 3 + 1, tf.range(0.0, tf.reduce_sum(tf.ones([2])), 0.5),
               tf.cumsum(ints, exclusive=True, reverse=True), tf.sequence_mask(ints % 3),
               tf.boolean_mask(x, b), tf.gradients(tf.reduce_sum(tf.boolean_mask(x, b)), [x])[0]]
    assert_op = tf.assert_less(tf.abs(ints), 8)
    feeds = {x: np.array([[0.5, -1.5, np.inf], [np.nan, 2.5, 0.0]], np.float32),
             b: np.array([[True, False, True], [True, True, True]]), ints: np.array([7, -7, 5], np.int32)}
    with reference_session() as sess:
        expected = sess.run(fetches + [assert_op], feeds)[:-1]
        plan = sess.runner.plans.values()[-1].schedule
    out = execute(plan, {t.name: xp.asarray(v) for t, v in feeds.items()}, SessionState(), {"CPU": xp})
    for tensor, want in zip(fetches, expected):
        assert_of_namespace(out[tensor.name], xp, tensor.name)
        np.testing.assert_array_equal(to_host(out[tensor.name]), want, err_msg=tensor.name)


def test_graphs_with_the_new_spellings_survive_the_json_round_trip():
    import json

    graph = tf.Graph()
    with graph.as_default():
        x = tf.placeholder("float", [None, 2, 2], name="x")
        tf.constant("Hello", name="hello")
        scalar = tf.constant(2.0, name="two")
        flat = tf.reshape(x, [tf.shape(x)[0], -1], name="flat")
        tf.random_normal(tf.shape(flat), stddev=scalar, seed=1, name="noise")
        tf.reduce_sum(flat, reduction_indices=[1], keep_dims=True, name="total")
    restored = tf.import_graph_def(json.loads(json.dumps(graph.as_graph_def())))
    assert restored.get_tensor_by_name("two:0").shape == ()  # a 0-d constant stays 0-d
    assert restored.get_tensor_by_name("flat:0").shape == (None, 4)
    feed = np.arange(12, dtype=np.float32).reshape(3, 2, 2)
    with restored.as_default(), tf.Session() as sess:
        got = sess.run(["hello:0", "flat:0", "noise:0", "total:0"], {"x:0": feed})
    assert got[0] == b"Hello" and got[1].shape == (3, 4) and got[2].shape == (3, 4)
    assert got[3].ravel().tolist() == [6.0, 22.0, 38.0]


def test_split_of_an_unknown_dim_is_built_and_checked_when_run():
    """The TF 1.x LSTM tutorials split a (time * batch, n) reshape whose first dim is unknown."""
    x = tf.placeholder("float", [None, 28, 28])
    rows = tf.reshape(tf.transpose(x, [1, 0, 2]), [-1, 28])
    steps = tf.split(rows, 28, 0)
    assert len(steps) == 28 and steps[0].shape.as_list() == [None, 28]
    grad = tf.gradients(tf.reduce_sum(steps[5] * 3.0), x)[0]
    images = np.random.RandomState(0).rand(4, 28, 28).astype(np.float32)
    with tf.Session() as sess:
        pieces, g = sess.run([steps, grad], feed_dict={x: images})
        np.testing.assert_array_equal(pieces[5], images[:, 5])
        assert (g[:, 5] == 3.0).all() and g.sum() == 3.0 * 4 * 28
        odd = r"Split op 'split_1'.*dim 0 of size 3 cannot be split into 2 equal pieces"
        with pytest.raises(tf.errors.InvalidArgumentError, match=odd):
            sess.run(tf.split(tf.placeholder_with_default(np.zeros((3, 2), np.float32), [None, 2]), 2))
    with pytest.raises(ValueError, match=r"cannot split dim 1 of \(\?, 28\) into 5 equal pieces"):
        tf.split(rows, 5, axis=-1)


def test_concat_along_an_unknown_dim_has_a_gradient():
    """Outputs of unknown batch size joined along it (``tf.concat(outputs, 0)``), trained through."""
    a, b = tf.placeholder(tf.float32, [None, 3]), tf.placeholder(tf.float32, [2, 3])
    weights = tf.constant([1.0, 2.0, 3.0])
    grad_a, grad_b = tf.gradients(tf.reduce_sum(tf.square(tf.concat([a, b], 0)) * weights), [a, b])
    assert grad_a.shape.as_list() == [None, 3] and grad_b.shape.as_list() == [2, 3]
    (second,) = tf.gradients(tf.reduce_sum(tf.square(grad_a)), [a])
    a_value, b_value = np.arange(12, dtype=np.float32).reshape(4, 3), np.ones((2, 3), np.float32)
    with tf.Session() as sess:
        got = sess.run([grad_a, grad_b, second], {a: a_value, b: b_value})
    np.testing.assert_allclose(got[0], 2 * a_value * [1, 2, 3])
    np.testing.assert_allclose(got[1], 2 * b_value * [1, 2, 3])
    np.testing.assert_allclose(got[2], 8 * a_value * [1, 4, 9])


def test_lists_of_tensors_are_packed_as_tf_does():
    """``tf.reduce_mean([loss_a, loss_b])`` and nested lists mixing tensors and numbers."""
    x = tf.placeholder(tf.float32, [None, 2])
    mean_of_list = tf.reduce_mean([tf.reduce_sum(x), 2.0])
    nested = tf.convert_to_tensor([[x[0, 0], 2], [3.5, x[1, 1]]])
    assert nested.shape.as_list() == [2, 2] and nested.dtype == tf.float32
    with tf.Session() as sess:
        got = sess.run([mean_of_list, nested, tf.reduce_mean((x[:, 0],))], {x: [[1.0, 2.0], [3.0, 4.0]]})
    assert got[0] == 6.0 and got[1].tolist() == [[1.0, 2.0], [3.5, 4.0]] and got[2] == 2.0


def test_nest_flattens_and_rebuilds_states_as_tf_s_rnn_code_does():
    from dflow.python.util import nest
    from dflow.rnn_cell import LSTMStateTuple

    state = (LSTMStateTuple("c0", "h0"), {"b": ["x", "y"], "a": "z"})
    assert nest.flatten(state) == ["c0", "h0", "z", "x", "y"]  # dicts in sorted key order
    rebuilt = nest.pack_sequence_as(state, [1, 2, 3, 4, 5])
    assert rebuilt == (LSTMStateTuple(1, 2), {"a": 3, "b": [4, 5]}) and type(rebuilt[0]) is LSTMStateTuple
    assert nest.map_structure(lambda a, b: a + b, (1, [2]), (10, [20])) == (11, [22])
    assert nest.is_sequence([]) and not nest.is_sequence("ab") and nest.flatten(7) == [7]
    with pytest.raises(TypeError, match="nest tuple against list"):
        nest.map_structure(lambda a, b: a, (1, 2), [1, 2])
    assert nest.map_structure(lambda a, b: a, (1, 2), [1, 2], check_types=False) == (1, 2)
    with pytest.raises(ValueError, match="3 leaves but flat_sequence has 2 items"):
        nest.pack_sequence_as((1, (2, 3)), [1, 2])
    with pytest.raises(ValueError, match="different keys"):
        nest.assert_same_structure({"a": 1}, {"b": 1})


def test_cumsum_sequence_mask_and_eye_as_tensorflow_gives_them():
    """The values TensorFlow 2.21 (``compat.v1``) gives for the same calls."""
    x = tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    sums = [tf.cumsum(x, 1), tf.cumsum(x, 1, exclusive=True), tf.cumsum(x, 1, reverse=True),
            tf.cumsum(x, 0, exclusive=True, reverse=True)]
    (d_sum,) = tf.gradients(tf.reduce_sum(tf.cumsum(x, 1) * tf.constant([[1.0, 10.0, 100.0]] * 2)), [x])
    lengths = tf.placeholder(tf.int32, [None])
    masks = [tf.sequence_mask([1, 3], 4), tf.sequence_mask(lengths),
             tf.sequence_mask(tf.constant([[1], [2]]), 3, dtype=tf.float32)]
    with tf.Session() as sess:
        got_sums, grad, got_masks = sess.run([sums, d_sum, masks], {lengths: [0, 2, 1]})
        identity = sess.run([tf.eye(2, 3), tf.eye(2, batch_shape=[2])])
    assert [s.tolist() for s in got_sums] == [[[1, 3, 6], [4, 9, 15]], [[0, 1, 3], [0, 4, 9]],
                                              [[6, 5, 3], [15, 11, 6]], [[4, 5, 6], [0, 0, 0]]]
    assert grad.tolist() == [[111, 110, 100], [111, 110, 100]]
    assert got_masks[0].tolist() == [[True, False, False, False], [True, True, True, False]]
    assert got_masks[1].tolist() == [[False, False], [True, True], [True, False]]  # as long as the longest
    assert got_masks[2].tolist() == [[[1, 0, 0]], [[1, 1, 0]]]
    assert identity[0].tolist() == [[1, 0, 0], [0, 1, 0]] and identity[1].shape == (2, 2, 2)
    with pytest.raises(TypeError, match="sequence_mask's lengths must be integers"):
        tf.sequence_mask([1.5])


def test_py_func_runs_python_over_the_arrays_and_says_what_went_wrong():
    values = tf.placeholder(tf.float32, [None])
    top, count = tf.py_func(lambda v: (np.sort(v)[::-1], np.int64(v.size)), [values], [tf.float32, tf.int64])
    wrong = tf.py_func(lambda v: (v, v), [values], tf.float32)
    with tf.Session() as sess:
        got = sess.run([top, count], {values: [2.0, 9.0, 4.0]})
        assert got[0].tolist() == [9.0, 4.0, 2.0] and got[1] == 3
        with pytest.raises(tf.errors.InvalidArgumentError, match="returned 2 values, but Tout names 1"):
            sess.run(wrong, {values: [1.0]})
    assert top.shape.ndims is None and tf.gradients(top, [values]) == [None]  # no gradient, as TF's


def test_boolean_mask_picks_and_differentiates_as_tensorflow_does():
    """TensorFlow 2.21's (``compat.v1``) shapes and sums for the same calls."""
    x = tf.constant(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    over_two_dims = tf.boolean_mask(x, tf.constant([[True, False, True], [False, True, True]]))
    along_axis_2 = tf.boolean_mask(x, tf.constant([False, True, True, False]), axis=2)
    rows = tf.boolean_mask(x, tf.constant([True, False]))
    (grad,) = tf.gradients(tf.reduce_sum(over_two_dims * over_two_dims) + tf.reduce_sum(along_axis_2), [x])
    masked_mean = tf.reduce_mean(tf.boolean_mask(tf.reduce_sum(x, 2), tf.sequence_mask([2, 3], 3)))
    assert over_two_dims.shape.as_list() == [None, 4]
    with tf.Session() as sess:
        got = sess.run([over_two_dims, along_axis_2, rows, grad, masked_mean])
    assert [g.shape for g in got[:3]] == [(4, 4), (2, 3, 2), (1, 3, 4)]
    assert [float(g.sum()) for g in got[:4]] == [200.0, 138.0, 66.0, 412.0]
    np.testing.assert_allclose(got[4], 47.6, rtol=1e-6)
    with pytest.raises(ValueError, match="must match the first dims of the tensor's shape"):
        tf.boolean_mask(x, tf.constant([True, False, True]))


@pytest.mark.parametrize("xp", [pytest.param(None, id="numpy"), *OTHER_NAMESPACES])
def test_erf_and_erfc_to_float32_precision_with_gradients(xp):
    """BERT's GELU is 0.5 x (1 + erf(x / sqrt(2))): math.erf's values within 2e-7 (relative) over
    [-6, 6] and near 0, where 1 - erfc would lose them."""
    import math

    from dflow.runtime.executor import execute
    from dflow.runtime.state import SessionState

    points = np.concatenate([np.linspace(-6.0, 6.0, 1201), [1e-8, -1e-8, 0.4999, 0.5]])
    x = tf.placeholder(tf.float64, [None])
    fetches = [tf.erf(x), tf.math.erfc(x), *tf.gradients(tf.reduce_sum(tf.erf(x) - tf.erfc(x)), [x])]
    with reference_session() as sess:
        values = sess.run(fetches, {x: points})
        plan = sess.runner.plans.values()[-1].schedule
    if xp is not None:
        out = execute(plan, {x.name: xp.asarray(points)}, SessionState(), {"CPU": xp})
        values = [to_host(out[t.name]) for t in fetches]
    erf, erfc, grad = values
    np.testing.assert_allclose(erf, [math.erf(p) for p in points], rtol=2e-7, atol=0)
    np.testing.assert_allclose(erfc, [math.erfc(p) for p in points], rtol=2e-7, atol=0)
    np.testing.assert_allclose(grad, 4 / np.sqrt(np.pi) * np.exp(-points * points), rtol=1e-12)


def test_sort_argsort_unique_as_tensorflow_gives_them():
    """TensorFlow 2.21's (compat.v1) values for the same graph, ties and the sort's gradient included."""
    x = tf.constant([[3.0, 1.0, 2.0, 1.0], [0.5, -2.0, 7.0, 0.5]])
    w = tf.constant([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]])
    down_columns = tf.sort(x, axis=0)
    (grad,) = tf.gradients(tf.reduce_sum(tf.sort(x) * w) + tf.reduce_sum(down_columns * w), [x])
    values, index = tf.unique(tf.constant([5, 3, 5, 7, 3, 1]))
    with tf.Session() as sess:
        got = sess.run([down_columns, tf.sort(x, direction="DESCENDING"), tf.argsort(x),
                        tf.argsort(x, axis=0, direction="DESCENDING"), grad, values, index])
    assert [v.tolist() for v in got] == [
        [[0.5, -2.0, 2.0, 0.5], [3.0, 1.0, 7.0, 1.0]], [[3.0, 2.0, 1.0, 1.0], [7.0, 0.5, 0.5, -2.0]],
        [[1, 3, 2, 0], [1, 0, 3, 2]], [[0, 0, 1, 0], [1, 1, 0, 1]],
        [[9.0, 7.0, 6.0, 10.0], [7.0, 7.0, 15.0, 11.0]], [5, 3, 7, 1], [0, 1, 0, 2, 1, 3]]
    with pytest.raises(ValueError, match="direction must be 'ASCENDING' or 'DESCENDING'"):
        tf.sort(x, direction="UP")
    with pytest.raises(ValueError, match="needs the length of the sorted axis"):
        tf.sort(tf.placeholder(tf.float32, [None]))


def test_names_held_out_scripts_reached_for():
    """What a second batch of held-out public scripts needed (docs/tf1_corpus.md): a finalized
    graph, strings added in a scan, a cast SparseTensor, constant paddings, setdiff1d, hooks under
    tf.estimator and FeedFnHook, a lookup table's hasher_spec."""
    with tf.Graph().as_default() as graph:
        spelled = tf.scan(lambda a, x: a + x, np.array(["T", "e", "n"]))
        values, positions = tf.setdiff1d([1, 2, 3, 4, 2, 5], [2, 4])
        padded = tf.pad(tf.ones([1, 2]), tf.constant([[1, 0], [0, 1]]))
        as_float = tf.cast(tf.SparseTensor([[0, 1]], [3], [1, 2]), tf.float32)
        table = tf.contrib.lookup.index_table_from_tensor(tf.constant(["a", "b"]),
                                                          hasher_spec=tf.contrib.lookup.FastHashSpec)
        ids = table.lookup(tf.constant(["b"]))
        counted = tf.placeholder(tf.float32, [])
        step = tf.train.get_or_create_global_step()
        increment = tf.assign_add(step, 1)
        graph.finalize()
        with pytest.raises(RuntimeError, match="Graph is finalized and cannot be modified"):
            tf.constant(1)
        with tf.Session() as sess:
            got = sess.run([spelled, values, positions, padded, as_float.values])
        seen = []

        class Seen(tf.estimator.SessionRunHook):
            def before_run(self, run_context):
                return tf.estimator.SessionRunArgs(counted)

            def after_run(self, run_context, run_values):
                seen.append(float(run_values.results))

        graph._unsafe_unfinalize()  # MonitoredSession adds its initializers
        feed = tf.train.FeedFnHook(lambda: {counted: 7.0})
        with tf.train.MonitoredSession(hooks=[feed, Seen()]) as sess:  # its local init: the tables too
            _, looked_up = sess.run([increment, ids])
    assert got[0].tolist() == [b"T", b"Te", b"Ten"]
    assert (got[1].tolist(), got[2].tolist()) == ([1, 3, 5], [0, 2, 5])
    assert got[3].tolist() == [[0.0, 0.0, 0.0], [1.0, 1.0, 0.0]] and got[4].dtype == np.float32
    assert seen == [7.0] and looked_up.tolist() == [1]


def test_names_the_ninth_held_out_batch_reached_for():
    """``ops.op_scope`` (TF 0.x's name_scope, still in TF 1.x) and ``control_flow_ops.with_dependencies``
    (docs/tf1_corpus.md, the ninth batch)."""
    from dflow.python.framework import ops
    from dflow.python.ops import control_flow_ops

    count = tf.Variable(0.0)
    with ops.op_scope([count], None, "Mysquare") as scope:
        squared = tf.square(count)
    five = control_flow_ops.with_dependencies([tf.assign_add(count, 1.0)], tf.constant(5.0))
    assert scope == "Mysquare/" and squared.name == "Mysquare/Square:0"
    assert five.name == "control_dependency:0"
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        assert sess.run(five) == 5.0 and sess.run(count) == 1.0


def test_slim_s_create_train_op_runs_the_updates_then_a_step_and_gives_the_loss():
    """slim.learning.create_train_op as a held-out batch-norm script uses it: the moving averages
    (UPDATE_OPS) with each step, the global step counted, gradients scaled and clipped."""
    slim = tf.contrib.slim
    x = tf.constant(np.arange(8, dtype=np.float32).reshape(4, 2))
    normed = slim.batch_norm(x, is_training=True, decay=0.5, scope="bn")
    w = tf.Variable([[1.0], [2.0]], name="w")
    loss = tf.reduce_sum(tf.matmul(normed, w) ** 2) + tf.reduce_sum(w)
    optimizer = tf.train.GradientDescentOptimizer(1.0)
    train_op = slim.learning.create_train_op(loss, optimizer, clip_gradient_norm=0.5,
                                             gradient_multipliers={"w": 0.0})
    moving_mean = [v for v in tf.global_variables() if "moving_mean" in v.name][0]
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        before = sess.run(loss)
        assert sess.run(train_op) == pytest.approx(before)
        assert sess.run(tf.train.get_global_step()) == 1
        assert sess.run(moving_mean).tolist() == [1.5, 2.0]  # halfway to the batch's mean (3, 4)
        assert sess.run(w).tolist() == [[1.0], [2.0]]  # its gradient times 0
    with pytest.raises(AttributeError, match="slim.learning.train is not supported by dflow; use "
                                             "create_train_op"):
        _ = slim.learning.train
