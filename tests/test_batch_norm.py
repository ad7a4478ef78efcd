"""Batch normalization as one op (FusedBatchNorm): TensorFlow 2.21's values, both layouts alike,
every namespace alike, and the layers that build it."""

import json
import pathlib

import numpy as np
import pytest
from namespaces import OTHER_NAMESPACES, assert_same_on
from test_fusion import op_types

import dflow as tf
from dflow.ops import fused
from dflow.runtime.passes import Devices, make_plan

# TF 2.21 compat.v1's tf.nn.fused_batch_norm of these inputs (NHWC, epsilon 0.01)
TENSORFLOW = json.loads(
    (pathlib.Path(__file__).parent / "data" / "fused_batch_norm_tensorflow.json").read_text())


def _arrays(*names):
    return [np.asarray(TENSORFLOW[name], np.float32) for name in names]


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("mode", ["training", "inference"])
def test_fused_batch_norm_gives_tensorflows_values_and_gradients(mode, data_format):
    x, dy, scale, offset, mean, variance = _arrays("x", "dy", "scale", "offset", "mean", "variance")
    to_layout = (lambda a: a) if data_format == "NHWC" else (lambda a: np.moveaxis(a, 3, 1).copy())
    training = mode == "training"
    with tf.Graph().as_default():
        x_t, scale_t, offset_t = tf.constant(to_layout(x)), tf.constant(scale), tf.constant(offset)
        y, batch_mean, batch_variance = tf.nn.fused_batch_norm(
            x_t, scale_t, offset_t, None if training else mean, None if training else variance, epsilon=0.01,
            data_format=data_format, is_training=training)
        grads = tf.gradients(tf.reduce_sum(y * to_layout(dy)), [x_t, scale_t, offset_t])
        with tf.Session() as sess:
            got = sess.run([y, batch_mean, batch_variance, *grads])
    want = TENSORFLOW[mode]
    got[0], got[3] = np.moveaxis(got[0], 1, 3) if data_format == "NCHW" else got[0], \
        np.moveaxis(got[3], 1, 3) if data_format == "NCHW" else got[3]
    for name, value in zip(["y", "mean", "variance", "dx", "dscale", "doffset"], got):
        np.testing.assert_allclose(value, want[name], rtol=2e-5, atol=2e-5, err_msg=name)


def test_the_batch_variance_is_corrected_and_averaged_as_tensorflows():
    x, scale, offset, mean, variance = _arrays("x", "scale", "offset", "mean", "variance")
    with tf.Graph().as_default():
        _, batch_mean, batch_variance = tf.nn.fused_batch_norm(x, scale, offset, mean, variance, epsilon=0.01,
                                                               exponential_avg_factor=0.25)
        with tf.Session() as sess:
            got_mean, got_variance = sess.run([batch_mean, batch_variance])
    np.testing.assert_allclose(got_mean, TENSORFLOW["averaged"]["mean"], rtol=1e-6)
    np.testing.assert_allclose(got_variance, TENSORFLOW["averaged"]["variance"], rtol=1e-6)
    n = x.size // x.shape[-1]  # the training variance is the unbiased one: n / (n - 1) of the plain
    np.testing.assert_allclose(TENSORFLOW["training"]["variance"], x.reshape(-1, 4).var(0) * n / (n - 1),
                               rtol=1e-5)


def test_a_transposed_nhwc_array_normalizes_exactly_as_in_nhwc():
    """Convolutions hand NCHW layers transposed NHWC arrays: both layouts must agree bit for bit
    (Inception's NCHW logits equal its NHWC ones only so: 2 examples at 1 x 1 amplify any rounding)."""
    x = np.random.default_rng(0).normal(3.0, 0.5, (4, 5, 5, 8)).astype(np.float32)
    with tf.Graph().as_default():
        nhwc = tf.constant(x)
        nchw = tf.transpose(nhwc, [0, 3, 1, 2])
        ones, zeros = tf.ones([8]), tf.zeros([8])
        y_nhwc = tf.nn.fused_batch_norm(nhwc, ones, zeros)[0]
        y_nchw = tf.transpose(tf.nn.fused_batch_norm(nchw, ones, zeros, data_format="NCHW")[0], [0, 2, 3, 1])
        grads = [tf.gradients(tf.reduce_sum(tf.square(y)), [nhwc])[0] for y in (y_nhwc, y_nchw)]
        with tf.Session() as sess:
            a, b, grad_a, grad_b = sess.run([y_nhwc, y_nchw, *grads])
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(grad_a, grad_b)


def test_the_cores_pieces_sum_as_one_pass_does():
    """Above fused.FLAT_PIECES_FROM elements each core sums its own rows: the same moments and
    gradients as the array expressions (float64 totals, so no piece loses precision)."""
    rng = np.random.default_rng(1)
    x = rng.normal(5.0, 2.0, (64, 32, 32, 33)).astype(np.float32)
    assert x.size >= fused.FLAT_PIECES_FROM
    dy = rng.standard_normal(x.shape).astype(np.float32)
    scale, offset = np.linspace(0.5, 2, 33, dtype=np.float32), np.linspace(-1, 1, 33, dtype=np.float32)
    y, mean, variance, inverse_std = fused.batch_norm_training(x, scale, offset, 1e-3)
    rows = x.reshape(-1, 33).astype(np.float64)
    np.testing.assert_allclose(mean, rows.mean(0), rtol=1e-6)
    np.testing.assert_allclose(variance, rows.var(0), rtol=1e-5)
    want_y = (rows - rows.mean(0)) / np.sqrt(rows.var(0) + 1e-3) * scale + offset
    np.testing.assert_allclose(y.reshape(-1, 33), want_y, rtol=1e-4, atol=1e-5)
    dx, dscale, doffset = fused.batch_norm_training_grad(dy, x, scale, mean, inverse_std)
    g = dy.reshape(-1, 33).astype(np.float64)
    normalized = (rows - rows.mean(0)) / np.sqrt(rows.var(0) + 1e-3)
    want_dx = scale / np.sqrt(rows.var(0) + 1e-3) * (g - g.mean(0) - normalized * (g * normalized).mean(0))
    np.testing.assert_allclose(doffset, g.sum(0), rtol=1e-4)
    np.testing.assert_allclose(dscale, (g * normalized).sum(0), rtol=1e-3, atol=1e-2)
    np.testing.assert_allclose(dx.reshape(-1, 33), want_dx, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("xp", OTHER_NAMESPACES)
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
def test_the_kernels_run_on_other_namespaces(xp, data_format):
    x, dy, scale, offset = _arrays("x", "dy", "scale", "offset")
    to_layout = (lambda a: a) if data_format == "NHWC" else (lambda a: np.moveaxis(a, 3, 1).copy())
    with tf.Graph().as_default():
        x_t = tf.constant(to_layout(x))
        outputs = tf.nn.fused_batch_norm(x_t, scale, offset, data_format=data_format)
        loss = tf.reduce_sum(outputs[0] * to_layout(dy))
        assert_same_on(xp, [*outputs, *tf.gradients(loss, [x_t])], rtol=1e-5)


def _relu_after_batch_norm(data_format):
    x, dy, scale, offset = _arrays("x", "dy", "scale", "offset")
    to_layout = (lambda a: a) if data_format == "NHWC" else (lambda a: np.moveaxis(a, 3, 1).copy())
    x_t = tf.constant(to_layout(x))
    normalized = tf.nn.fused_batch_norm(x_t, scale, offset, data_format=data_format)[0]
    relu = tf.nn.relu(normalized)
    return x_t, normalized, relu, tf.gradients(tf.reduce_sum(relu * to_layout(dy)), [x_t])[0]


def test_layers_batch_normalization_runs_one_op_in_a_cond_and_updates_the_moving_averages():
    x = np.random.default_rng(2).normal(1.0, 3.0, (6, 3, 3, 2)).astype(np.float32)
    with tf.Graph().as_default():
        inputs = tf.constant(x)
        training = tf.placeholder_with_default(True, [])
        y = tf.layers.batch_normalization(inputs, momentum=0.5, training=training)
        updates = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
        graph = tf.get_default_graph()
        assert [op.type for op in graph.get_operations() if op.type == "Cond"] == ["Cond"]
        (grad,) = tf.gradients(tf.reduce_sum(y * y * inputs), [inputs])
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            trained, _ = sess.run([y, updates])
            moving_mean, moving_variance = sess.run(tf.global_variables()[2:])
            inferred = sess.run(y, {training: False})
            assert np.isfinite(sess.run(grad)).all()
    rows = x.reshape(-1, 2).astype(np.float64)
    np.testing.assert_allclose(trained.reshape(-1, 2), (rows - rows.mean(0)) / np.sqrt(rows.var(0) + 1e-3),
                               rtol=1e-4, atol=1e-5)
    n = rows.shape[0]
    np.testing.assert_allclose(moving_mean, 0.5 * rows.mean(0), rtol=1e-5)  # from 0, momentum 0.5
    np.testing.assert_allclose(moving_variance, 0.5 + 0.5 * rows.var(0) * n / (n - 1), rtol=1e-5)
    np.testing.assert_allclose(inferred, (x - moving_mean) / np.sqrt(moving_variance + 1e-3), rtol=1e-4,
                               atol=1e-5)


def test_unfused_layers_keep_the_plain_variance_as_tensorflows_do():
    x = np.random.default_rng(3).normal(size=(4, 2, 2, 3)).astype(np.float32)
    with tf.Graph().as_default():
        tf.layers.batch_normalization(tf.constant(x), momentum=0.0, training=True, fused=False)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(tf.get_collection(tf.GraphKeys.UPDATE_OPS))
            moving_variance = sess.run(tf.global_variables()[3])
        assert not [op for op in tf.get_default_graph().get_operations() if op.type == "FusedBatchNorm"]
    np.testing.assert_allclose(moving_variance, x.reshape(-1, 3).var(0), rtol=1e-5)


def test_bad_calls_say_what_to_pass():
    with tf.Graph().as_default():
        x, vector = tf.zeros([2, 3, 3, 4]), tf.ones([4])
        with pytest.raises(ValueError, match="is_training=False normalizes with the given mean and variance"):
            tf.nn.fused_batch_norm(x, vector, vector, is_training=False)
        with pytest.raises(ValueError, match="data_format must be 'NHWC' or 'NCHW'"):
            tf.nn.fused_batch_norm(x, vector, vector, data_format="NDHWC")
        with pytest.raises(ValueError, match="takes a 4-D input, got shape"):
            tf.nn.fused_batch_norm(tf.zeros([2, 4]), vector, vector)
        with pytest.raises(ValueError, match="scale must be a vector of the input's 4 channels"):
            tf.nn.fused_batch_norm(x, tf.ones([3]), vector)


def test_contrib_batch_norm_without_gamma_normalizes_in_one_op_and_updates_inline():
    x = np.random.default_rng(4).normal(2.0, 3.0, (4, 3, 3, 5)).astype(np.float32)
    with tf.Graph().as_default() as graph:
        y = tf.contrib.layers.batch_norm(tf.constant(x), decay=0.5, updates_collections=None,
                                         is_training=True)
        assert [op.type for op in graph.get_operations() if op.type.startswith("FusedBatchNorm")] == \
            ["FusedBatchNorm"]
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            got = sess.run(y)
            moving_mean = sess.run(graph.get_tensor_by_name("BatchNorm/moving_mean:0"))
    rows = x.reshape(-1, 5).astype(np.float64)
    np.testing.assert_allclose(got.reshape(-1, 5), (rows - rows.mean(0)) / np.sqrt(rows.var(0) + 1e-3),
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(moving_mean, 0.5 * rows.mean(0), rtol=1e-5)


# TF 2.21 compat.v1's tf.nn.moments + tf.nn.batch_normalization, values and gradients
# (data/moments_tensorflow.py: a dense layer, a conv layer with keep_dims and no offset, one with no scale)
MOMENTS = json.loads((pathlib.Path(__file__).parent / "data" / "moments_tensorflow.json").read_text())


def _moments_graph(case, given: bool):
    """The case's graph: batch normalization with the batch's moments, or with given statistics."""
    x, dy = tf.constant(np.float32(case["x"])), np.float32(case["dy"])
    offset = tf.constant(np.float32(case["offset"])) if case["with_offset"] else None
    scale = tf.constant(np.float32(case["scale"])) if case["with_scale"] else None
    if given:
        mean, variance = (tf.constant(np.float32(case[key])) for key in ("given_mean", "given_variance"))
        y = tf.nn.batch_normalization(x, mean, variance, offset, scale, case["epsilon"])
        return [y, *tf.gradients(tf.reduce_sum(y * dy), [x, mean, variance])]
    mean, variance = tf.nn.moments(x, case["axes"], keep_dims=case["keep_dims"])
    y = tf.nn.batch_normalization(x, mean, variance, offset, scale, case["epsilon"])
    loss = tf.reduce_sum(y * dy) + tf.reduce_sum(mean * np.float32(case["dmean"])) \
        + tf.reduce_sum(variance * np.float32(case["dvariance"]))
    return [y, mean, variance, *tf.gradients(loss, [x] + [t for t in (offset, scale) if t is not None])]


@pytest.mark.parametrize("case", sorted(MOMENTS))
def test_moments_and_batch_normalization_are_one_op_each_with_tensorflows_values_and_gradients(case):
    case = MOMENTS[case]
    names = ["y", "mean", "variance", "dx"] + ["doffset"] * case["with_offset"] \
        + ["dscale"] * case["with_scale"] + ["y_given", "dx_given", "dmean_given", "dvariance_given"]
    with tf.Graph().as_default() as graph:
        fetches = _moments_graph(case, given=False)
        given_fetches = _moments_graph(case, given=True)
        types = [op.type for op in graph.get_operations()]
        assert types.count("Moments") == 1 and types.count("BatchNormalization") == 2
        assert not {"Mean", "Rsqrt", "Square", "SquaredDifference"} & set(types)
        lowered = op_types(make_plan(graph, fetches, set(), Devices.this_process(gpus=0)))
        assert "_MomentsGradAdd" in lowered and "MomentsGrad" not in lowered  # dx's two terms in one pass
        with tf.Session() as sess:
            got, got_given = sess.run([fetches, given_fetches])
    want = case["tensorflow"]
    for name, value in zip(names, got + got_given):
        assert value.shape == np.shape(want[name]), name
        np.testing.assert_allclose(value, want[name], rtol=2e-5, atol=2e-5, err_msg=name)


@pytest.mark.parametrize("xp", OTHER_NAMESPACES)
def test_the_moments_kernels_run_on_other_namespaces(xp):
    with tf.Graph().as_default():
        assert_same_on(xp, _moments_graph(MOMENTS["conv_keep_dims"], given=False), rtol=1e-5)


def test_moments_over_other_axes_and_other_types_stay_composed():
    """Layer norm's moments (over the last axis), half precision, or statistics of another shape
    than one per channel: the composed ops, which broadcast as TF's."""
    with tf.Graph().as_default() as graph:
        x = tf.constant(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
        mean, variance = tf.nn.moments(x, [2], keep_dims=True)
        y = tf.nn.batch_normalization(x, mean, variance, None, None, 1e-3)
        half_mean, _ = tf.nn.moments(tf.cast(x, tf.float16), [0, 1])
        assert not {"Moments", "BatchNormalization"} & {op.type for op in graph.get_operations()}
        with tf.Session() as sess:
            got, got_half = sess.run([y, half_mean])
    rows = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    want = (rows - rows.mean(2, keepdims=True)) / np.sqrt(rows.var(2, keepdims=True) + 1e-3)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    np.testing.assert_array_equal(got_half, rows.mean((0, 1)))


def test_a_dense_layers_batch_normalization_under_a_fed_bool_is_one_op_and_keeps_its_shape():
    """``training`` a ``tf.placeholder(tf.bool)`` of no known shape (udacity's batch-norm lesson):
    the output keeps the layer's shape (a dense layer after it needs it) and normalizes in one op."""
    x = np.random.default_rng(5).normal(2.0, 3.0, (8, 6)).astype(np.float32)
    with tf.Graph().as_default() as graph:
        inputs, training = tf.placeholder(tf.float32, [None, 6]), tf.placeholder(tf.bool)
        y = tf.layers.batch_normalization(inputs, training=training)
        assert y.shape.as_list() == [None, 6]
        assert [op.type for op in graph.get_operations()].count("BatchNormalization") == 1
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            trained = sess.run(y, {inputs: x, training: True})
            inferred = sess.run(y, {inputs: x, training: False})  # moving averages still 0 and 1
    np.testing.assert_allclose(trained, (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-3), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(inferred, x / np.sqrt(1 + 1e-3), rtol=1e-6)


def _relu_after_moments():
    case = MOMENTS["conv_keep_dims"]
    x = tf.constant(np.float32(case["x"]))
    mean, variance = tf.nn.moments(x, case["axes"], keep_dims=True)
    normalized = tf.nn.batch_normalization(x, mean, variance, tf.constant(np.float32(case["offset"])),
                                           tf.constant(np.float32(case["scale"])), case["epsilon"])
    relu = tf.nn.relu(normalized)
    return x, normalized, relu, tf.gradients(tf.reduce_sum(relu * np.float32(case["dy"])), [x])[0]


#: a ReLU after each batch norm: the graph's builder and the batch norm's op type
RELU_AFTER = {"NHWC": (lambda: _relu_after_batch_norm("NHWC"), "FusedBatchNorm"),
              "NCHW": (lambda: _relu_after_batch_norm("NCHW"), "FusedBatchNorm"),
              "by hand": (_relu_after_moments, "BatchNormalization")}


@pytest.mark.parametrize("case", sorted(RELU_AFTER))
def test_a_relu_after_a_batch_norm_runs_in_its_passes_with_the_same_numbers(case):
    build, batch_norm = RELU_AFTER[case]
    with tf.Graph().as_default() as graph:
        x, normalized, relu, grad = build()
        types = op_types(make_plan(graph, [relu, grad], set(), Devices.this_process(gpus=0)))
        assert {f"_{batch_norm}Relu", f"_{batch_norm}GradRelu"} <= set(types)
        assert not {"Relu", "ReluGrad", batch_norm, f"{batch_norm}Grad"} & set(types)
        with tf.Session() as sess:
            fused_values = sess.run([relu, grad])
            unfused_values = sess.run([relu, grad, normalized])  # y fetched: nothing fuses
    assert (unfused_values[0] == 0).any() and (unfused_values[0] > 0).any()
    np.testing.assert_array_equal(fused_values[0], unfused_values[0])
    np.testing.assert_allclose(fused_values[1], unfused_values[1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", ["NHWC", "by hand"])
@pytest.mark.parametrize("xp", OTHER_NAMESPACES)
def test_the_fused_relu_kernels_run_on_other_namespaces(xp, case):
    with tf.Graph().as_default():
        _, _, relu, grad = RELU_AFTER[case][0]()
        assert_same_on(xp, [relu, grad], rtol=1e-5)
