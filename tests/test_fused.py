"""The fused kernels (dflow/ops/fused.py): numba's loop and the NumPy fallback both give the
plain expression's numbers, on every namespace, and never write into their inputs."""

from __future__ import annotations

import array_api_compat.numpy as xp_numpy
import numpy as np
import pytest
from namespaces import NAMESPACES, to_host

import dflow as tf
from dflow.ops import conv_lowering, fused, onednn, parallel
from dflow.ops.registry import get_opdef

RNG = np.random.default_rng(11)
HYPER = dict(lr_t=0.01, beta1=0.9, beta2=0.999, epsilon=1e-8)


def reference_adam(var, m, v, grad, lr_t, beta1, beta2, epsilon):
    """TF's ApplyAdam in float64."""
    var, m, v, grad = (np.asarray(a, np.float64) for a in (var, m, v, grad))
    m_t = beta1 * m + (1 - beta1) * grad
    v_t = beta2 * v + (1 - beta2) * grad * grad
    return var - lr_t * m_t / (np.sqrt(v_t) + epsilon), m_t, v_t


def adam_inputs(shape, dtype):
    var, m, grad = (np.asarray(RNG.standard_normal(shape), dtype) for _ in range(3))
    return var, m, np.asarray(np.abs(RNG.standard_normal(shape)), dtype), grad


@pytest.fixture(params=["numba", "numpy"])
def compiled(request, monkeypatch):
    """Each NumPy path in turn: numba's compiled loop, and the fallback where numba is absent."""
    if request.param == "numba":
        assert fused.compiled_kernels() is not None, "numba is a dependency: it must compile here"
    else:
        monkeypatch.setattr(fused, "compiled_kernels", lambda: None)
    return request.param


@pytest.mark.parametrize("dtype, rtol", [(np.float32, 2e-6), (np.float64, 1e-12)])
@pytest.mark.parametrize("shape", [(), (7,), (33, 5)])
def test_adam_on_numpy_matches_the_reference_and_keeps_its_inputs(compiled, dtype, rtol, shape):
    inputs = adam_inputs(shape, dtype)
    before = [a.copy() for a in inputs]
    got = fused.adam(xp_numpy, *inputs, **HYPER)
    for out, expected in zip(got, reference_adam(*inputs, **HYPER)):
        assert out.dtype == dtype and out.shape == shape
        np.testing.assert_allclose(out, expected, rtol=rtol, atol=rtol)
    for a, b in zip(inputs, before):
        np.testing.assert_array_equal(a, b)


def test_compiled_adam_and_rms_prop_compute_float32_in_float32():
    """Every operation rounded to float32, as TF's kernels: the loops equal a float32 NumPy
    computation of the same expression bit for bit. (Typed float64, by a Python ``1 - beta1``,
    the loops ran twice as long and their m differed from this in 2,933 of 10,000 elements.)"""
    assert fused.compiled_kernels() is not None, "numba is a dependency: it must compile here"
    f = np.float32
    var, m, v, grad = adam_inputs((10_000,), f)
    lr, beta1, beta2, epsilon = f(0.001), f(0.9), f(0.999), f(1e-8)
    m_t = beta1 * m + (f(1) - beta1) * grad
    v_t = beta2 * v + (f(1) - beta2) * (grad * grad)
    expected = [var - lr * m_t / (np.sqrt(v_t) + epsilon), m_t, v_t]
    for got, want in zip(fused.adam(xp_numpy, var, m, v, grad, lr, beta1, beta2, epsilon), expected):
        np.testing.assert_array_equal(got, want)
    rho, momentum = f(0.9), f(0.5)
    ms_t = rho * v + (f(1) - rho) * (grad * grad)
    mom_t = momentum * m + lr * grad / np.sqrt(ms_t + epsilon)
    expected = [var - mom_t, ms_t, mom_t]
    for got, want in zip(fused.rms_prop(xp_numpy, var, v, m, grad, lr, rho, momentum, epsilon), expected):
        np.testing.assert_array_equal(got, want)


def test_adam_reads_a_transposed_gradient_in_its_logical_order(compiled):
    var, m, v, grad = adam_inputs((6, 4), np.float32)
    transposed = np.ascontiguousarray(grad.T).T  # same values, Fortran order
    got = fused.adam(xp_numpy, var, m, v, transposed, **HYPER)
    for out, expected in zip(got, reference_adam(var, m, v, grad, **HYPER)):
        np.testing.assert_allclose(out, expected, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("xp", NAMESPACES)
def test_adam_on_every_namespace_matches_the_reference(xp):
    inputs = adam_inputs((5, 3), np.float32)
    got = fused.adam(xp, *(xp.asarray(a) for a in inputs), **HYPER)
    for out, expected in zip(got, reference_adam(*inputs, **HYPER)):
        np.testing.assert_allclose(to_host(out), expected, rtol=2e-6, atol=2e-6)


def test_an_adam_step_in_a_session_is_the_fused_one(compiled, monkeypatch):
    calls, real = [], fused.adam
    monkeypatch.setattr(fused, "adam", lambda *args, **kw: calls.append(args[1].shape) or real(*args, **kw))
    var0 = RNG.standard_normal((4, 3)).astype(np.float32)
    with tf.Graph().as_default():
        w = tf.Variable(var0, name="w")
        train = tf.train.AdamOptimizer(0.1).minimize(tf.reduce_sum(w * w))
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(train)
            lr_t = 0.1 * np.sqrt(1 - 0.999) / (1 - 0.9)
            expected, _, _ = reference_adam(var0, 0 * var0, 0 * var0, 2 * var0, lr_t, 0.9, 0.999, 1e-8)
            np.testing.assert_allclose(sess.run(w), expected, rtol=2e-6)
    assert calls == [(4, 3)]


POOLS = [((3, 3), (2, 2), "SAME"), ((2, 2), (2, 2), "SAME"), ((3, 3), (1, 1), "VALID"),
         ((3, 2), (2, 3), "SAME")]


@pytest.mark.parametrize("ksize, strides, padding", POOLS)
def test_max_pool_and_its_gradient_compiled_match_the_numpy_code(monkeypatch, ksize, strides, padding):
    """Ties route to the first maximum in scan order; NaN wins the maximum (as np.maximum);
    a transposed (NCHW-made) input reads in its logical order."""
    x = np.asarray(RNG.integers(0, 3, (3, 7, 9, 4)), np.float32)  # many ties
    x[0, 2, 3, 1] = np.nan
    x = np.ascontiguousarray(x.transpose(0, 3, 1, 2)).transpose(0, 2, 3, 1)
    dy_shape = conv_lowering.max_pool(xp_numpy, x, ksize, strides, padding).shape
    dy = np.asarray(RNG.standard_normal(dy_shape), np.float32)
    compiled = [conv_lowering.max_pool(xp_numpy, x, ksize, strides, padding)]
    compiled.append(conv_lowering.max_pool_grad(xp_numpy, x, compiled[0], dy, ksize, strides, padding))
    monkeypatch.setattr(fused, "compiled_kernels", lambda: None)
    plain = [conv_lowering.max_pool(xp_numpy, x, ksize, strides, padding)]
    plain.append(conv_lowering.max_pool_grad(xp_numpy, x, plain[0], dy, ksize, strides, padding))
    np.testing.assert_array_equal(compiled[0], plain[0])  # NaN where NaN
    np.testing.assert_allclose(compiled[1], plain[1], rtol=1e-6, atol=1e-6)
    assert np.isnan(compiled[0]).any() and compiled[0].dtype == compiled[1].dtype == np.float32


@pytest.mark.parametrize("dtype, atol", [(np.float32, 2e-6), (np.float64, 1e-12)])
@pytest.mark.parametrize("depth_radius, beta", [(4, 0.75), (2, 0.5), (0, 1.0), (9, 0.6)])
def test_lrn_and_its_gradient_compiled_match_the_numpy_code(monkeypatch, depth_radius, beta, dtype, atol):
    """Every window of channels clipped at both ends (9: wider than the 7 channels), each power's
    form; a transposed (NCHW-made) input reads in its logical order."""
    x = np.asarray(RNG.standard_normal((3, 5, 4, 7)), dtype) * 3
    x = np.ascontiguousarray(x.transpose(0, 3, 1, 2)).transpose(0, 2, 3, 1)
    dy = np.asarray(RNG.standard_normal(x.shape), dtype)
    params = dict(depth_radius=depth_radius, bias=1.5, alpha=0.2, beta=beta)
    y = fused.lrn(x, **params)
    compiled = [y, fused.lrn_grad(dy, x, y, **params)]
    monkeypatch.setattr(fused, "compiled_kernels", lambda: None)
    monkeypatch.setattr(onednn, "takes", lambda *_: False)
    plain = [conv_lowering.lrn(xp_numpy, x, **params), conv_lowering.lrn_grad(xp_numpy, dy, x, y, **params)]
    for got, expected in zip(compiled, plain):
        assert got.dtype == dtype and got.shape == x.shape
        np.testing.assert_allclose(got, expected, rtol=0, atol=atol * np.abs(expected).max())


@pytest.mark.parametrize("positive_only", [False, True])
@pytest.mark.parametrize("ksize, strides, padding", POOLS)
def test_max_pool_gradient_written_into_its_input_s_buffer_is_the_same(ksize, strides, padding,
                                                                       positive_only):
    """The executor hands the pooled ReLU's output over as ``out`` (runtime/executor.py): each image
    is read whole before its gradient overwrites it."""
    x = np.maximum(np.asarray(RNG.integers(-1, 3, (3, 7, 9, 4)), np.float32), 0)  # ties, and zeros
    y = conv_lowering.max_pool(xp_numpy, x, ksize, strides, padding)
    dy = np.asarray(RNG.standard_normal(y.shape), np.float32)
    apart = conv_lowering.max_pool_grad(xp_numpy, x, y, dy, ksize, strides, padding, positive_only)
    buffer = x.copy()
    in_place = conv_lowering.max_pool_grad(xp_numpy, buffer, y, dy, ksize, strides, padding, positive_only,
                                           out=buffer)
    assert in_place is buffer
    np.testing.assert_array_equal(in_place, apart)


def test_relu_grad_compiled_is_tf_s_select(monkeypatch):
    """The gradient where the feature is positive, else 0: an inf gradient at a zero feature
    is 0 (the NumPy mask's product gives NaN there), a NaN gradient passes where positive."""
    kernel = get_opdef("ReluGrad").kernel
    features = np.asarray([[1.0, 0.0, -2.0, 3.0, np.nan]], np.float32)
    gradient = np.asarray([[2.0, np.inf, 5.0, np.nan, 1.0]], np.float32)
    got = kernel(xp_numpy, gradient, features)
    np.testing.assert_array_equal(got, [[2.0, 0.0, 0.0, np.nan, 0.0]])
    big = [np.asarray(RNG.standard_normal((4, 9, 9, 8)), np.float64) for _ in range(2)]
    compiled = kernel(xp_numpy, *big)
    monkeypatch.setattr(fused, "compiled_kernels", lambda: None)
    np.testing.assert_array_equal(compiled, kernel(xp_numpy, *big))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op_type", ["SigmoidGrad", "TanhGrad"])
def test_an_activation_s_gradient_compiled_is_its_ops_numbers(compiled, op_type, dtype):
    """SigmoidGrad and TanhGrad give the numbers of the multiplies they replace, bit for bit, on
    every NumPy path, a transposed gradient read in its logical order."""
    y = np.tanh(RNG.standard_normal((6, 300))).astype(dtype)
    if op_type == "SigmoidGrad":
        y = (y + 1) / 2
    dy = np.asarray(RNG.standard_normal((300, 6)), dtype).T
    expected = dy * y * (1 - y) if op_type == "SigmoidGrad" else dy * (1 - y * y)
    got = get_opdef(op_type).kernel(xp_numpy, y, dy)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, expected)


def test_a_sigmoid_s_and_a_tanh_s_gradients_are_one_op_each():
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [3])
        gradients = tf.gradients(tf.reduce_sum(tf.sigmoid(x) + tf.tanh(x)), x)
        with tf.Session() as sess:
            got = sess.run(gradients, {x: [0.0, 1.0, -2.0]})[0]
            types = [node.type for node in sess.runner.plans.values()[-1].schedule.nodes.values()]
    assert types.count("SigmoidGrad") == types.count("TanhGrad") == 1 and "Sub" not in types
    x0 = np.asarray([0.0, 1.0, -2.0])
    sigmoid = 1 / (1 + np.exp(-x0))
    np.testing.assert_allclose(got, sigmoid * (1 - sigmoid) + 1 - np.tanh(x0) ** 2, rtol=1e-6)


@pytest.mark.parametrize("dtype, rtol", [(np.float32, 1e-5), (np.float64, 1e-12)])
@pytest.mark.parametrize("labels_dtype", [np.int32, np.int64, np.uint8])
@pytest.mark.parametrize("batch", [1, 7])
def test_sparse_cross_entropy_compiled_matches_the_numpy_code(monkeypatch, dtype, rtol, labels_dtype, batch):
    """Loss and backprop in one pass a row, as the NumPy code's log-softmax gives them, with
    logits far from 0 (the row's maximum is taken out first) and every class as a label."""
    kernel = get_opdef("SparseSoftmaxCrossEntropyWithLogits").kernel
    logits = np.asarray(RNG.standard_normal((batch, 10)) * 30 + 1000, dtype)
    labels = np.asarray(np.arange(batch) % 10, labels_dtype)
    loss, backprop = kernel(xp_numpy, logits, labels)
    assert loss.dtype == backprop.dtype == dtype and loss.shape == (batch,) and backprop.shape == (batch, 10)
    monkeypatch.setattr(fused, "compiled_kernels", lambda: None)
    want_loss, want_backprop = kernel(xp_numpy, logits, labels)
    np.testing.assert_allclose(loss, want_loss, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(backprop, want_backprop, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("label", [-1, 10])
def test_sparse_cross_entropy_compiled_names_a_label_out_of_range(label):
    kernel = get_opdef("SparseSoftmaxCrossEntropyWithLogits").kernel
    labels = np.asarray([2, label, 3], np.int64)
    with pytest.raises(ValueError, match=rf"labels must be in \[0, 10\).*got {label} at row 1"):
        kernel(xp_numpy, np.zeros((3, 10), np.float32), labels)


def test_a_compiler_failure_is_said_once_and_the_numpy_kernels_run(monkeypatch, caplog):
    def fails(numba):
        raise RuntimeError("no writable cache directory")

    monkeypatch.setattr(fused, "_compile", fails)
    fused.compiled_kernels.cache_clear()
    try:
        assert fused.compiled_kernels() is None and fused.compiled_kernels() is None
        var, m, v, grad = adam_inputs((3,), np.float32)
        for out, expected in zip(fused.adam(xp_numpy, var, m, v, grad, **HYPER),
                                 reference_adam(var, m, v, grad, **HYPER)):
            np.testing.assert_allclose(out, expected, rtol=2e-6, atol=2e-6)
    finally:
        fused.compiled_kernels.cache_clear()  # the real kernels for the tests after
    said = [r.getMessage() for r in caplog.records if "compiled kernels are off" in r.getMessage()]
    assert len(said) == 1 and "no writable cache directory" in said[0]


def test_flat_kernels_cut_in_pieces_give_the_whole_s_numbers(compiled, monkeypatch):
    inputs = adam_inputs((7, 11), np.float32)
    gradient, features = inputs[3], inputs[0]
    relu_grad = get_opdef("ReluGrad").kernel
    whole = [*fused.adam(xp_numpy, *inputs, **HYPER), relu_grad(xp_numpy, gradient, features)]
    monkeypatch.setattr(fused, "FLAT_PIECES_FROM", 0)
    monkeypatch.setattr(parallel, "cores", lambda: 3)  # 77 elements: pieces of 26, 26 and 25
    cut = [*fused.adam(xp_numpy, *inputs, **HYPER), relu_grad(xp_numpy, gradient, features)]
    for a, b in zip(cut, whole):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype, rtol", [(np.float32, 2e-7), (np.float64, 1e-15)])
def test_gradient_descent_on_numpy_matches_the_reference_and_keeps_its_inputs(compiled, dtype, rtol):
    var, _, _, delta = adam_inputs((9, 4), dtype)
    before = var.copy(), delta.copy()
    got = fused.gradient_descent(xp_numpy, var, np.asarray(0.3, dtype), delta)
    assert got.dtype == dtype
    expected = var.astype(np.float64) - 0.3 * delta.astype(np.float64)
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=rtol)
    np.testing.assert_array_equal(var, before[0])
    np.testing.assert_array_equal(delta, before[1])


@pytest.mark.parametrize("dtype, rtol", [(np.float32, 1e-6), (np.float64, 1e-14)])
def test_a_decayed_update_on_numpy_matches_the_reference_and_keeps_its_inputs(compiled, dtype, rtol):
    """The decayed weights read in their logical order (here a transposed copy), the variable
    itself among them, as an L2 decay's gradient is."""
    var, _, _, delta = adam_inputs((9, 4), dtype)
    before = var.copy(), delta.copy()
    decayed = np.ascontiguousarray(var.T).T
    alpha, decay = np.asarray(0.3, dtype), np.asarray(0.25, dtype)
    got = fused.gradient_descent(xp_numpy, var, alpha, delta, decayed, decay)
    assert got.dtype == dtype
    var64 = var.astype(np.float64)
    expected = var64 - 0.3 * (delta.astype(np.float64) + 0.25 * var64)
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=rtol)
    np.testing.assert_array_equal(var, before[0])
    np.testing.assert_array_equal(delta, before[1])


def reference_rms_prop(var, ms, mom, grad, lr, rho, momentum, epsilon):
    """TF's ApplyRMSProp in float64."""
    var, ms, mom, grad = (np.asarray(a, np.float64) for a in (var, ms, mom, grad))
    new_ms = rho * ms + (1 - rho) * grad * grad
    new_mom = momentum * mom + lr * grad / np.sqrt(new_ms + epsilon)
    return var - new_mom, new_ms, new_mom


def reference_momentum(var, accum, grad, lr, momentum, nesterov):
    """TF's ApplyMomentum in float64."""
    var, accum, grad = (np.asarray(a, np.float64) for a in (var, accum, grad))
    new_accum = accum * momentum + grad
    if nesterov:
        return var - (lr * grad + lr * momentum * new_accum), new_accum
    return var - lr * new_accum, new_accum


RMS = dict(lr=0.01, rho=0.9, momentum=0.5, epsilon=1e-10)


@pytest.mark.parametrize("dtype, rtol", [(np.float32, 2e-6), (np.float64, 1e-12)])
@pytest.mark.parametrize("shape", [(), (7,), (33, 5)])
def test_rms_prop_on_numpy_matches_the_reference_and_keeps_its_inputs(compiled, dtype, rtol, shape):
    var, mom, ms, grad = adam_inputs(shape, dtype)  # ms: positive, as an RMS is
    before = [a.copy() for a in (var, ms, mom, grad)]
    got = fused.rms_prop(xp_numpy, var, ms, mom, grad, **RMS)
    for out, expected in zip(got, reference_rms_prop(var, ms, mom, grad, **RMS), strict=True):
        assert out.dtype == dtype and out.shape == shape
        np.testing.assert_allclose(out, expected, rtol=rtol, atol=rtol)
    for a, b in zip((var, ms, mom, grad), before):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("nesterov", [False, True])
@pytest.mark.parametrize("dtype, rtol", [(np.float32, 2e-6), (np.float64, 1e-12)])
def test_momentum_on_numpy_matches_the_reference_and_keeps_its_inputs(compiled, nesterov, dtype, rtol):
    var, accum, _, grad = adam_inputs((9, 4), dtype)
    before = [a.copy() for a in (var, accum, grad)]
    got = fused.momentum(xp_numpy, var, accum, grad, 0.1, 0.9, nesterov)
    for out, expected in zip(got, reference_momentum(var, accum, grad, 0.1, 0.9, nesterov), strict=True):
        assert out.dtype == dtype
        np.testing.assert_allclose(out, expected, rtol=rtol, atol=rtol)
    for a, b in zip((var, accum, grad), before):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("xp", NAMESPACES)
def test_rms_prop_and_momentum_on_every_namespace_match_the_reference(xp):
    var, mom, ms, grad = adam_inputs((5, 3), np.float32)
    got = fused.rms_prop(xp, *(xp.asarray(a) for a in (var, ms, mom, grad)), **RMS)
    for out, expected in zip(got, reference_rms_prop(var, ms, mom, grad, **RMS), strict=True):
        np.testing.assert_allclose(to_host(out), expected, rtol=2e-6, atol=2e-6)
    for nesterov in (False, True):
        got = fused.momentum(xp, *(xp.asarray(a) for a in (var, mom, grad)), 0.1, 0.9, nesterov)
        for out, expected in zip(got, reference_momentum(var, mom, grad, 0.1, 0.9, nesterov), strict=True):
            np.testing.assert_allclose(to_host(out), expected, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("optimizer, fused_kernel", [
    (lambda: tf.train.RMSPropOptimizer(0.01, momentum=0.5), "rms_prop"),
    (lambda: tf.train.MomentumOptimizer(0.1, 0.9, use_nesterov=True), "momentum")])
def test_rms_prop_and_momentum_steps_in_a_session_are_the_fused_ones(compiled, monkeypatch, optimizer,
                                                                     fused_kernel):
    calls, real = [], getattr(fused, fused_kernel)
    monkeypatch.setattr(fused, fused_kernel,
                        lambda *args, **kw: calls.append(args[1].shape) or real(*args, **kw))
    var0 = RNG.standard_normal((4, 3)).astype(np.float32)
    with tf.Graph().as_default():
        w = tf.Variable(var0, name="w")
        train = optimizer().minimize(tf.reduce_sum(w * w))
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(train)
            if fused_kernel == "rms_prop":  # TF's slots: ms starts at ones, mom at zeros
                expected, _, _ = reference_rms_prop(var0, np.ones_like(var0), 0 * var0, 2 * var0, **RMS)
            else:
                expected, _ = reference_momentum(var0, 0 * var0, 2 * var0, 0.1, 0.9, True)
            np.testing.assert_allclose(sess.run(w), expected, rtol=2e-6)
    assert calls == [(4, 3)]


UPDATES = {  # an update's fused function and how many of its arrays it writes (the variable, its slots)
    "adam": (lambda xp, a, in_place: fused.adam(xp, *a, **HYPER, in_place=in_place), 3),
    "rms_prop": (lambda xp, a, in_place: fused.rms_prop(xp, *a, **RMS, in_place=in_place), 3),
    "momentum": (lambda xp, a, in_place: fused.momentum(xp, *a[:2], a[3], 0.1, 0.9, False, in_place), 2),
    "nesterov": (lambda xp, a, in_place: fused.momentum(xp, *a[:2], a[3], 0.1, 0.9, True, in_place), 2),
    "gradient_descent": (
        lambda xp, a, in_place: (fused.gradient_descent(xp, a[0], 0.1, a[3], in_place=in_place),), 1)}


@pytest.mark.parametrize("update", UPDATES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("size", [165, fused.FLAT_PIECES_FROM + 7])  # one piece, one per core
def test_an_update_in_place_writes_the_fresh_update_s_numbers_into_its_arrays(update, dtype, size):
    run, written = UPDATES[update]
    arrays = adam_inputs((size,), dtype)
    fresh = run(xp_numpy, arrays, False)
    got = run(xp_numpy, arrays, True)
    assert all(out is array for out, array in zip(got, arrays[:written], strict=True))
    for out, expected in zip(got, fresh, strict=True):
        np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("update", UPDATES)
def test_an_update_in_place_of_arrays_it_cannot_write_makes_new_ones(update):
    run, written = UPDATES[update]
    for unwritable in ("read-only", "a view", "fortran order"):
        arrays = list(adam_inputs((12, 8), np.float32))
        if unwritable == "read-only":
            arrays[0].flags.writeable = False
        elif unwritable == "a view":
            arrays[0] = np.concatenate([arrays[0], arrays[0]])[:12]
        else:
            arrays[0] = np.asfortranarray(arrays[0])
        before = [a.copy() for a in arrays]
        got = run(xp_numpy, arrays, True)
        for out, expected in zip(got, run(xp_numpy, before, False), strict=True):
            np.testing.assert_array_equal(out, expected)
        for a, b in zip(arrays, before):
            np.testing.assert_array_equal(a, b)


def test_a_session_s_update_writes_its_variables_in_place_but_never_a_value_another_holds(monkeypatch):
    """Two layers: the update of the second layer's weights is ready before the first layer's
    gradient reads them; run last, it finds them free and writes in place. A variable assigned
    from another (a target network's copy) shares its array, and keeps its value."""
    from dflow.runtime.state import SessionState

    held = []
    real = SessionState.held_only_here
    monkeypatch.setattr(SessionState, "held_only_here", lambda self, *names: held.append(real(self, *names))
                        or held[-1])
    x = RNG.standard_normal((8, 5)).astype(np.float32)
    with tf.Graph().as_default():
        w1 = tf.Variable(RNG.standard_normal((5, 6)).astype(np.float32), name="w1")
        w2 = tf.Variable(RNG.standard_normal((6, 3)).astype(np.float32), name="w2")
        target = tf.Variable(tf.zeros((6, 3)), name="target")
        copy = target.assign(w2)
        loss = tf.reduce_sum(tf.square(tf.matmul(tf.nn.relu(tf.matmul(x, w1)), w2)))
        train = tf.train.AdamOptimizer(0.01).minimize(loss)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            for _ in range(2):
                sess.run(train)
            held.clear()
            sess.run(train)
            assert held == [True, True], "an update found its variable still held by the step"
            snapshot = sess.run(copy)
            held.clear()
            sess.run(train)
            assert held.count(False) == 1  # w2's update: the target holds its array
            np.testing.assert_array_equal(sess.run(target), snapshot)
            assert not np.array_equal(sess.run(w2), snapshot)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("keep_prob", [0.25, 0.8, 1.0])
def test_dropout_compiled_keeps_a_keep_prob_share_scaled_and_repeats_with_its_seed(dtype, keep_prob):
    x = np.asarray(RNG.standard_normal((301, 333)), dtype)[:, ::3]  # not contiguous: 301 x 111
    out, scale = fused.dropout(x, np.asarray(keep_prob, dtype), np.random.default_rng(7))
    assert out.dtype == scale.dtype == dtype and out.shape == scale.shape == x.shape
    inverse = dtype(1) / dtype(keep_prob)
    assert set(np.unique(scale)) <= {dtype(0), inverse}
    np.testing.assert_array_equal(out, x * scale)
    kept = (scale != 0).mean()  # 33,411 draws: the share's standard deviation is under 0.0024
    assert abs(kept - keep_prob) < 0.012
    again, _ = fused.dropout(x, np.asarray(keep_prob, dtype), np.random.default_rng(7))
    np.testing.assert_array_equal(again, out)
    if keep_prob < 1:
        other, _ = fused.dropout(x, np.asarray(keep_prob, dtype), np.random.default_rng(8))
        assert not np.array_equal(other, out)
    # neighbouring elements (two draws of one 64-bit word) are as independent as any two
    both = ((scale[:, :-1] != 0) & (scale[:, 1:] != 0)).mean()
    assert abs(both - keep_prob ** 2) < 0.015
