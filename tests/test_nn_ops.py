"""nn ops: every kernel against a float64 NumPy reference (on NumPy and on
array_api_strict, and CuPy where a GPU exists), every gradient kernel against central finite differences of
its forward kernel, and a few graph-level checks through a Session."""

from __future__ import annotations

import array_api_compat.numpy as xp_numpy
import numpy as np
import pytest
from gradcheck import check_gradients
from namespaces import NAMESPACES, reference_session, to_host

import dflow as tf
from dflow.ops import conv_lowering
from dflow.ops.registry import get_opdef
from dflow.runtime.executor import execute
from dflow.runtime.state import SessionState


def run_kernel(xp, op_type, *arrays, **attrs):
    """The op's kernel on ``xp`` with NumPy inputs; NumPy outputs back."""
    out = get_opdef(op_type).kernel(xp, *(xp.asarray(a) for a in arrays), **attrs)
    return tuple(to_host(o) for o in out) if isinstance(out, tuple) else to_host(out)


# ---- float64 references (loops on purpose: obviously right, not fast) --------------------------
def ref_window(size, k, s, d, padding):
    """(out, pad_before, pad_after) from TF's documented formulas."""
    k_eff = (k - 1) * d + 1
    if padding == "VALID":
        return (size - k_eff) // s + 1, 0, 0
    out = int(np.ceil(size / s))
    total = max((out - 1) * s + k_eff - size, 0)
    return out, total // 2, total - total // 2


def ref_pad(x, ksize, s, d, padding, value=0.0):
    (oh, pt, pb), (ow, pl, pr) = (ref_window(x.shape[i + 1], ksize[i], s, d, padding) for i in (0, 1))
    padded = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)), constant_values=value)
    return padded, oh, ow


def ref_conv2d(x, w, s, d, padding):
    kh, kw, _, o = w.shape
    xpad, oh, ow = ref_pad(x, (kh, kw), s, d, padding)
    y = np.zeros((x.shape[0], oh, ow, o))
    for i in range(oh):
        for j in range(ow):
            for a in range(kh):
                for b in range(kw):
                    y[:, i, j] += xpad[:, i * s + a * d, j * s + b * d] @ w[a, b]
    return y


def ref_pool(x, k, s, padding, kind):
    xpad, oh, ow = ref_pad(x, (k, k), s, 1, padding, -np.inf if kind == "max" else 0.0)
    valid, _, _ = ref_pad(np.ones((1, *x.shape[1:3], 1)), (k, k), s, 1, padding)
    y = np.zeros((x.shape[0], oh, ow, x.shape[3]))
    for i in range(oh):
        for j in range(ow):
            win = xpad[:, i * s:i * s + k, j * s:j * s + k]
            if kind == "max":
                y[:, i, j] = win.max(axis=(1, 2))
            else:
                y[:, i, j] = win.sum(axis=(1, 2)) / valid[0, i * s:i * s + k, j * s:j * s + k].sum()
    return y


def ref_lrn(x, depth_radius, bias, alpha, beta):
    y = np.empty_like(x)
    for d in range(x.shape[-1]):
        lo, hi = max(0, d - depth_radius), min(x.shape[-1], d + depth_radius + 1)
        sqr_sum = (x[..., lo:hi] ** 2).sum(axis=-1)
        y[..., d] = x[..., d] / (bias + alpha * sqr_sum) ** beta
    return y


def ref_log_softmax(z, axis=-1):
    return np.log(np.exp(z) / np.exp(z).sum(axis=axis, keepdims=True))


def ref_in_top_k(p, t, k):
    return np.array([(p[i] > p[i, t[i]]).sum() < k for i in range(len(t))])


# ---- the forward table: (op type, attrs, NHWC inputs, NHWC reference) ---------------------------
def rng_inputs(*shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) for s in shapes]


def window_configs():
    """Both layouts x both paddings x (stride, dilation) in (1, 1), (2, 1), (1, 2), with the
    4-lists TF takes: ``(data_format, padding, s, d, strides, dilations, ksize 3x3, tag)``."""
    for data_format in ("NHWC", "NCHW"):
        def four(v, data_format=data_format):
            return [1, v, v, 1] if data_format == "NHWC" else [1, 1, v, v]

        for padding in ("SAME", "VALID"):
            for s, d in ((1, 1), (2, 1), (1, 2)):
                yield (data_format, padding, s, d, four(s), four(d), four(3),
                       f"{data_format}-{padding}-s{s}-d{d}")


def windowed_rows():
    """Conv/pool rows over both layouts, both paddings, strides 1 and 2 (odd sizes: uneven pads)."""
    rows = []
    for data_format, padding, s, d, four, dil, ksize, tag in window_configs():
        x, w = rng_inputs((2, 7, 6, 3), (3, 2, 3, 4))
        rows.append(pytest.param(
            "Conv2D", dict(strides=four, padding=padding, data_format=data_format, dilations=dil),
            [x, w], [True, False], ref_conv2d(x, w, s, d, padding), id=f"conv2d-{tag}"))
        pointwise = rng_inputs((1, 1, 3, 4), seed=2)[0]  # 1x1: one matmul, its own lowering
        rows.append(pytest.param(
            "Conv2D", dict(strides=four, padding=padding, data_format=data_format, dilations=dil),
            [x, pointwise], [True, False], ref_conv2d(x, pointwise, s, d, padding), id=f"conv1x1-{tag}"))
        if d != 1:
            continue
        attrs = dict(ksize=ksize, strides=four, padding=padding, data_format=data_format)
        for kind, op_type in (("max", "MaxPool"), ("avg", "AvgPool")):
            rows.append(pytest.param(op_type, attrs, [x], [True],
                                     ref_pool(x, 3, s, padding, kind), id=f"{kind}pool-{tag}"))
    for data_format in ("NHWC", "NCHW"):
        bias = rng_inputs((3,), seed=1)[0]
        x = rng_inputs((2, 4, 5, 3))[0]
        rows.append(pytest.param("BiasAdd", dict(data_format=data_format), [x, bias], [True, False],
                                 x + bias, id=f"bias_add-{data_format}"))
    return rows


def plain_rows():
    x, z = rng_inputs((2, 3, 4, 9), (5, 7))
    labels = np.array([0, 6, 3, 3, 1])
    dense = np.exp(rng_inputs((5, 7), seed=2)[0])
    dense /= dense.sum(axis=1, keepdims=True)
    lrn = dict(depth_radius=2, bias=1.5, alpha=0.3, beta=0.75)
    sm = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    return [
        pytest.param("Relu", {}, [x], None, np.maximum(x, 0), id="relu"),
        pytest.param("Softmax", dict(axis=-1), [z], None, sm, id="softmax"),
        pytest.param("Softmax", dict(axis=0), [z], None,
                     np.exp(z) / np.exp(z).sum(0, keepdims=True), id="softmax-axis0"),
        pytest.param("LogSoftmax", dict(axis=-1), [z], None, ref_log_softmax(z), id="log_softmax"),
        pytest.param("LRN", lrn, [x], None, ref_lrn(x, **lrn), id="lrn"),
        pytest.param("LRN", dict(lrn, beta=0.6, depth_radius=5), [x], None,
                     ref_lrn(x, **dict(lrn, beta=0.6, depth_radius=5)), id="lrn-beta0.6-wide"),
        pytest.param("L2Loss", {}, [x], None, (x ** 2).sum() / 2, id="l2_loss"),
        pytest.param("SparseSoftmaxCrossEntropyWithLogits", {}, [z, labels], None,
                     (-ref_log_softmax(z)[np.arange(5), labels], sm - np.eye(7)[labels]),
                     id="sparse_xent"),
        pytest.param("SoftmaxCrossEntropyWithLogits", dict(axis=-1), [z, dense], None,
                     (-(dense * ref_log_softmax(z)).sum(-1), sm - dense), id="softmax_xent"),
        pytest.param("InTopK", dict(k=2), [z, labels], None, ref_in_top_k(z, labels, 2),
                     id="in_top_k"),
    ]


def to_format(a, data_format):
    return a if data_format != "NCHW" else np.transpose(a, (0, 3, 1, 2))


def from_format(a, data_format):
    return a if data_format != "NCHW" else np.transpose(a, (0, 2, 3, 1))


@pytest.mark.parametrize("xp", NAMESPACES)
@pytest.mark.parametrize("op_type, attrs, inputs, layout, expected", windowed_rows() + plain_rows())
def test_kernel_matches_reference(xp, op_type, attrs, inputs, layout, expected):
    data_format = attrs.get("data_format")
    layout = layout or [False] * len(inputs)
    args = [to_format(a, data_format) if image else a for a, image in zip(inputs, layout)]
    out = run_kernel(xp, op_type, *args, **attrs)
    if not isinstance(out, tuple):
        out, expected = (out,), (expected,)
    for o, e in zip(out, expected):
        o = from_format(o, data_format) if o.ndim == 4 else o
        assert o.shape == np.shape(e)
        np.testing.assert_allclose(o, e, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("op_type, attrs, inputs, layout, expected", windowed_rows()[::3] + plain_rows())
def test_float32_stays_float32(op_type, attrs, inputs, layout, expected):
    data_format = attrs.get("data_format")
    layout = layout or [False] * len(inputs)
    args = [to_format(a, data_format) if image else a for a, image in zip(inputs, layout)]
    args = [a.astype(np.float32) if a.dtype.kind == "f" else a for a in args]
    out = run_kernel(xp_numpy, op_type, *args, **attrs)
    for o, e in zip(*((out, expected) if isinstance(out, tuple) else ((out,), (expected,)))):
        o = from_format(o, data_format) if o.ndim == 4 else o
        assert o.dtype == (np.bool_ if op_type == "InTopK" else np.float32)
        np.testing.assert_allclose(o, e, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("setting, value", [
    ("BATCH_PIECE", 2), ("ROWS_PIECE", 2), ("POOL_PIECE", 2), ("CHANNEL_MAJOR_BELOW", 0),
    ("CHANNEL_MAJOR_BELOW", 100)])
@pytest.mark.parametrize("channels, stride, dilation, padding", [
    (3, 1, 1, "SAME"), (9, 2, 1, "VALID"), (9, 1, 2, "SAME")])
def test_lowering_variants_give_the_same_result(monkeypatch, setting, value, channels, stride,
                                                dilation, padding):
    """Batch pieces, both patch orders ((i, j, c) and channel-major) and the row lowering agree."""
    x, w = rng_inputs((5, 7, 6, channels), (3, 2, channels, 4))
    four = [1, stride, stride, 1]
    conv = dict(strides=four, padding=padding, data_format="NHWC",
                dilations=[1, dilation, dilation, 1])
    pool = dict(ksize=[1, 3, 3, 1], strides=four, padding=padding, data_format="NHWC")
    dy = rng_inputs(run_kernel(xp_numpy, "Conv2D", x, w, **conv).shape)[0]

    def everything():
        y = run_kernel(xp_numpy, "MaxPool", x, **pool)
        return [run_kernel(xp_numpy, "Conv2D", x, w, **conv),
                run_kernel(xp_numpy, "Conv2DBackpropInput", np.array(x.shape), w, dy, **conv),
                run_kernel(xp_numpy, "Conv2DBackpropFilter", x, np.array(w.shape), dy, **conv),
                y, run_kernel(xp_numpy, "MaxPoolGrad", x, y, y * 2, **pool),
                run_kernel(xp_numpy, "AvgPoolGrad", np.array(x.shape), y, **pool),
                run_kernel(xp_numpy, "AvgPool", x, **pool)]

    default = everything()
    monkeypatch.setattr(conv_lowering, setting, value)
    for a, b in zip(default, everything()):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_sparse_xent_rejects_labels_out_of_range():
    with pytest.raises(ValueError, match=r"\[0, 7\)"):
        run_kernel(xp_numpy, "SparseSoftmaxCrossEntropyWithLogits", np.zeros((2, 7)), np.array([1, 7]))


def test_sparse_xent_is_stable_for_huge_logits():
    loss, backprop = run_kernel(xp_numpy, "SparseSoftmaxCrossEntropyWithLogits",
                                np.array([[1000.0, 0.0, -1000.0]]), np.array([1]))
    np.testing.assert_allclose(loss, [1000.0])
    np.testing.assert_allclose(backprop, [[1.0, -1.0, 0.0]])


def test_max_pool_grad_sends_ties_to_the_first_maximum():
    x = np.zeros((1, 2, 2, 1))
    attrs = dict(ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="VALID", data_format="NHWC")
    y = run_kernel(xp_numpy, "MaxPool", x, **attrs)
    dx = run_kernel(xp_numpy, "MaxPoolGrad", x, y, np.ones_like(y), **attrs)
    np.testing.assert_array_equal(dx[0, :, :, 0], [[1, 0], [0, 0]])


# ---- gradient kernels against central finite differences of the forward kernels ----------------
def numeric_vjp(f, args, index, dy, eps=1e-6):
    """d sum(f(args) * dy) / d args[index], by central differences in float64."""
    args = [a.copy() for a in args]
    x = args[index]
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        saved = x[i]
        x[i] = saved + eps
        up = np.sum(f(*args) * dy)
        x[i] = saved - eps
        down = np.sum(f(*args) * dy)
        x[i] = saved
        grad[i] = (up - down) / (2 * eps)
    return grad


def grad_rows():
    """(forward op, attrs, NHWC inputs, which input, analytic vjp(xp, inputs, y, dy))."""
    rows = []
    for data_format, padding, _, d, four, dil, ksize, tag in window_configs():
        conv = dict(strides=four, padding=padding, data_format=data_format, dilations=dil)
        x, w = rng_inputs((2, 6, 5, 2), (3, 2, 2, 3))
        x = to_format(x, data_format)
        rows.append(pytest.param("Conv2D", conv, [x, w], 0, lambda xp, a, y, dy, c=conv: run_kernel(
            xp, "Conv2DBackpropInput", np.array(a[0].shape), a[1], dy, **c), id=f"conv-dx-{tag}"))
        rows.append(pytest.param("Conv2D", conv, [x, w], 1, lambda xp, a, y, dy, c=conv: run_kernel(
            xp, "Conv2DBackpropFilter", a[0], np.array(a[1].shape), dy, **c), id=f"conv-dw-{tag}"))
        pointwise = rng_inputs((1, 1, 2, 3), seed=2)[0]
        rows.append(pytest.param("Conv2D", conv, [x, pointwise], 0, lambda xp, a, y, dy, c=conv: run_kernel(
            xp, "Conv2DBackpropInput", np.array(a[0].shape), a[1], dy, **c), id=f"conv1x1-dx-{tag}"))
        rows.append(pytest.param("Conv2D", conv, [x, pointwise], 1, lambda xp, a, y, dy, c=conv: run_kernel(
            xp, "Conv2DBackpropFilter", a[0], np.array(a[1].shape), dy, **c), id=f"conv1x1-dw-{tag}"))
        if d != 1:
            continue
        pool = dict(ksize=ksize, strides=four, padding=padding, data_format=data_format)
        rows.append(pytest.param("MaxPool", pool, [x], 0, lambda xp, a, y, dy, p=pool: run_kernel(
            xp, "MaxPoolGrad", a[0], y, dy, **p), id=f"maxpool-{tag}"))
        rows.append(pytest.param("AvgPool", pool, [x], 0, lambda xp, a, y, dy, p=pool: run_kernel(
            xp, "AvgPoolGrad", np.array(a[0].shape), dy, **p), id=f"avgpool-{tag}"))
    for data_format in ("NHWC", "NCHW"):
        x, b = rng_inputs((2, 3, 4, 3), (3,))
        fmt_ = dict(data_format=data_format)
        rows.append(pytest.param("BiasAdd", fmt_, [x, b], 1, lambda xp, a, y, dy, f=fmt_: run_kernel(
            xp, "BiasAddGrad", dy, **f), id=f"bias_add-{data_format}"))
    x = rng_inputs((2, 2, 3, 7))[0]
    for lrn in (dict(depth_radius=2, bias=1.0, alpha=0.4, beta=0.75),
                dict(depth_radius=1, bias=2.0, alpha=0.7, beta=0.3)):
        rows.append(pytest.param("LRN", lrn, [x], 0, lambda xp, a, y, dy, p=lrn: run_kernel(
            xp, "LRNGrad", dy, a[0], y, **p), id=f"lrn-beta{lrn['beta']}"))
    rows.append(pytest.param("Relu", {}, [x], 0, lambda xp, a, y, dy: run_kernel(
        xp, "ReluGrad", dy, y), id="relu"))
    return rows


@pytest.mark.parametrize("xp", NAMESPACES)
@pytest.mark.parametrize("op_type, attrs, inputs, index, vjp", grad_rows())
def test_grad_kernel_matches_finite_differences(xp, op_type, attrs, inputs, index, vjp):
    forward = lambda *a: run_kernel(xp_numpy, op_type, *a, **attrs)
    y = forward(*inputs)
    dy = np.random.default_rng(3).standard_normal(y.shape)
    expected = numeric_vjp(forward, inputs, index, dy)
    np.testing.assert_allclose(vjp(xp, inputs, y, dy), expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("op_type, attrs, labels", [
    ("SparseSoftmaxCrossEntropyWithLogits", {}, np.array([2, 0, 4])),
    ("SoftmaxCrossEntropyWithLogits", dict(axis=-1), np.full((3, 5), 0.2)),
])
def test_xent_backprop_is_the_loss_gradient(op_type, attrs, labels):
    logits = rng_inputs((3, 5))[0]
    loss = lambda z, t: run_kernel(xp_numpy, op_type, z, t, **attrs)[0]
    dy = np.array([0.5, -1.0, 2.0])
    _, backprop = run_kernel(xp_numpy, op_type, logits, labels, **attrs)
    np.testing.assert_allclose(backprop * dy[:, None], numeric_vjp(loss, [logits, labels], 0, dy),
                               rtol=1e-6, atol=1e-8)


class FakeState:
    def random_generator(self, seed):
        return np.random.default_rng(seed)


@pytest.mark.parametrize("xp", NAMESPACES)
def test_dropout_kernel(xp):
    x = np.ones((200, 50))
    out, scale = get_opdef("Dropout").kernel(FakeState(), xp, xp.asarray(x), xp.asarray(0.25),
                                             noise_shape=None, seed=[1, 2])
    out, scale = to_host(out), to_host(scale)
    assert set(np.unique(out)) == {0.0, 4.0}
    assert abs((out > 0).mean() - 0.25) < 0.02
    np.testing.assert_array_equal(out, x * scale)
    out, scale = get_opdef("Dropout").kernel(FakeState(), xp, xp.asarray(x), xp.asarray(0.5),
                                             noise_shape=[200, 1], seed=[1, 2])
    assert to_host(scale).shape == (200, 1)
    assert (to_host(out).std(axis=1) == 0).all()  # whole rows kept or dropped


# ---- graph level: static shapes, errors, and gradients through a Session ------------------------
@pytest.mark.parametrize("data_format, padding, stride, expected", [
    ("NHWC", "SAME", 2, (None, 12, 12, 8)), ("NHWC", "VALID", 1, (None, 20, 20, 8)),
    ("NCHW", "SAME", 1, (None, 8, 24, 24)), ("NCHW", "VALID", 2, (None, 8, 10, 10)),
])
def test_conv2d_static_shape(data_format, padding, stride, expected):
    with tf.Graph().as_default():
        shape = [None, 24, 24, 3] if data_format == "NHWC" else [None, 3, 24, 24]
        x = tf.placeholder(tf.float32, shape)
        strides = [1, stride, stride, 1] if data_format == "NHWC" else [1, 1, stride, stride]
        w = tf.constant(np.zeros((5, 5, 3, 8)), tf.float32)
        y = tf.nn.conv2d(x, w, strides, padding, data_format=data_format)
        assert y.shape.dims == expected


def test_conv2d_channel_mismatch_names_both_shapes():
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [None, 8, 8, 3])
        with pytest.raises(ValueError, match=r"\(\?, 8, 8, 3\).*\(3, 3, 4, 2\)"):
            tf.nn.conv2d(x, tf.constant(np.zeros((3, 3, 4, 2)), tf.float32), [1, 1, 1, 1], "SAME")


def test_max_pool_rejects_a_batch_window():
    with tf.Graph().as_default(), pytest.raises(ValueError, match="batch and channel"):
        tf.nn.max_pool(tf.constant(np.zeros((1, 4, 4, 1)), tf.float32), [2, 2, 2, 1], [1, 2, 2, 1], "VALID")


def test_cifar10_block_gradients_through_a_session():
    """conv -> bias -> relu -> pool -> lrn -> dense softmax loss: tf.gradients vs finite differences."""
    rng = np.random.default_rng(0)
    x_val = rng.standard_normal((2, 6, 6, 3))
    w_val = rng.standard_normal((3, 3, 3, 4)) * 0.5
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float64, [None, 6, 6, 3])
        w = tf.placeholder(tf.float64, [3, 3, 3, 4])
        h = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, w, [1, 1, 1, 1], "SAME"),
                                      tf.constant(np.full(4, 0.1))))
        h = tf.nn.lrn(tf.nn.max_pool(h, [1, 3, 3, 1], [1, 2, 2, 1], "SAME"), 2, 1.0, 0.1, 0.75)
        logits = tf.reshape(h, [-1, 36])
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.constant([3, 30]), logits=logits)) + tf.nn.l2_loss(w) * 0.01
        dx, dw = tf.gradients(loss, [x, w])
        with tf.Session() as sess:
            f = lambda xv, wv: sess.run(loss, {x: xv, w: wv})
            dx_val, dw_val = sess.run([dx, dw], {x: x_val, w: w_val})
            np.testing.assert_allclose(dw_val, numeric_vjp(f, [x_val, w_val], 1, 1.0), rtol=1e-5, atol=1e-8)
            np.testing.assert_allclose(dx_val, numeric_vjp(f, [x_val, w_val], 0, 1.0), rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("fn", [
    lambda z: tf.reduce_sum(tf.nn.softmax(z) * np.arange(5.0)),
    lambda z: tf.reduce_sum(tf.nn.log_softmax(z, axis=0) * np.arange(5.0)),
    lambda z: tf.reduce_sum(tf.nn.softmax_cross_entropy_with_logits(
        labels=np.full((3, 5), 0.2), logits=z)),
    lambda z: tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(
        labels=np.full((3, 5), 0.3), logits=z)),
    lambda z: tf.reduce_sum(tf.nn.moments(z, axes=[0])[1]),
], ids=["softmax", "log_softmax", "softmax_xent", "sigmoid_xent", "moments"])
def test_composite_gradients(fn):
    z_val = np.random.default_rng(1).standard_normal((3, 5))
    with tf.Graph().as_default():
        z = tf.placeholder(tf.float64, [3, 5])
        out = fn(z)
        (dz,) = tf.gradients(out, [z])
        with tf.Session() as sess:
            f = lambda v: sess.run(out, {z: v})
            np.testing.assert_allclose(sess.run(dz, {z: z_val}), numeric_vjp(f, [z_val], 0, 1.0),
                                       rtol=1e-6, atol=1e-8)


def _logistic_loss_reference(x, z):
    """TF's composed form in float64: where(x >= 0, x, 0) - x * z + log1p(exp(where(x >= 0, -x, x)))."""
    x, z = np.asarray(x, np.float64), np.asarray(z, np.float64)
    loss = np.where(x >= 0, x, 0) - x * z + np.log1p(np.exp(np.where(x >= 0, -x, x)))
    return loss, 1 / (1 + np.exp(-x)) - z


@pytest.mark.parametrize("xp", NAMESPACES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_logistic_loss_is_one_op_with_tensorflow_s_values_and_gradient(xp, dtype):
    """sigmoid_cross_entropy_with_logits as one op each way (TF composes nine and their gradients):
    TF's values at logits up to +-100 (log1p keeps the tiny losses TF keeps), and the gradient
    sigmoid(x) - z, on every namespace."""
    x = np.concatenate([np.linspace(-100, 100, 41), np.random.default_rng(3).standard_normal(300)])
    x = x.astype(dtype)
    z = np.random.default_rng(4).uniform(0, 1, x.shape).astype(dtype)
    with tf.Graph().as_default():
        logits, labels = tf.placeholder(dtype, [None]), tf.placeholder(dtype, [None])
        loss = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
        (grad,) = tf.gradients(tf.reduce_sum(loss * 2.0), [logits])
        types = [op.type for op in tf.get_default_graph().get_operations()]
        assert types.count("SigmoidCrossEntropyWithLogits") == 1 and "Abs" not in types and "Exp" not in types
        with reference_session() as sess:
            got_loss, got_grad = sess.run([loss, grad], {logits: x, labels: z})
            plan = sess.runner.plans.values()[-1].schedule
            on_xp = execute(plan, {logits.name: xp.asarray(x), labels.name: xp.asarray(z)}, SessionState(),
                            {"CPU": xp})
    want_loss, want_slope = _logistic_loss_reference(x, z)
    tolerance = {"rtol": 2e-6, "atol": 1e-30} if dtype == np.float32 else {"rtol": 1e-12, "atol": 1e-300}
    np.testing.assert_allclose(got_loss, want_loss, **tolerance)
    np.testing.assert_allclose(got_grad, 2 * want_slope, rtol=tolerance["rtol"], atol=1e-7)
    assert got_loss.dtype == got_grad.dtype == dtype
    np.testing.assert_allclose(to_host(on_xp[loss.name]), got_loss, rtol=1e-6, atol=1e-30)
    np.testing.assert_allclose(to_host(on_xp[grad.name]), got_grad, rtol=1e-6, atol=1e-7)


def test_the_logistic_loss_refuses_labels_of_another_shape_as_tensorflow():
    with tf.Graph().as_default():
        with pytest.raises(ValueError, match=r"must have the same shape \(\(4, 1\) vs \(4,\)\)"):
            tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.zeros([4]), logits=tf.zeros([4, 1]))


def test_second_order_conv_gradient():
    """Conv2DBackpropInput/Filter are differentiable: d/dw of |dL/dx|^2 by finite differences."""
    rng = np.random.default_rng(2)
    x_val, w_val = rng.standard_normal((1, 4, 4, 2)), rng.standard_normal((3, 3, 2, 2))
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float64, [1, 4, 4, 2])
        w = tf.placeholder(tf.float64, [3, 3, 2, 2])
        y = tf.nn.conv2d(x, w, [1, 2, 2, 1], "SAME")
        (dx,) = tf.gradients(tf.reduce_sum(y * y), [x])
        penalty = tf.reduce_sum(dx * dx)
        (dw,) = tf.gradients(penalty, [w])
        with tf.Session() as sess:
            f = lambda xv, wv: sess.run(penalty, {x: xv, w: wv})
            np.testing.assert_allclose(sess.run(dw, {x: x_val, w: w_val}),
                                       numeric_vjp(f, [x_val, w_val], 1, 1.0), rtol=1e-5, atol=1e-7)


def test_dropout_draws_a_new_mask_per_run_and_keep_prob_can_be_fed():
    with tf.Graph().as_default():
        x = tf.constant(np.ones((100, 10)), tf.float32)
        keep = tf.placeholder(tf.float32, [])
        y = tf.nn.dropout(x, keep)
        (dx,) = tf.gradients(tf.reduce_sum(y), [x])
        with tf.Session() as sess:
            a, da = sess.run([y, dx], {keep: 0.5})
            b = sess.run(y, {keep: 0.5})
            np.testing.assert_array_equal(da, a)  # the gradient uses the forward run's mask
            assert not np.array_equal(a, b)
            np.testing.assert_array_equal(sess.run(y, {keep: 1.0}), np.ones((100, 10)))


def test_in_top_k_in_a_graph():
    with tf.Graph().as_default(), tf.Session() as sess:
        hit = tf.nn.in_top_k(tf.constant([[0.1, 0.9, 0.0], [0.5, 0.2, 0.3]]), tf.constant([1, 1]), 1)
        assert sess.run(hit).tolist() == [True, False]


def test_conv2d_transpose_and_conv1d_match_tensorflow():
    """TensorFlow 2.21's sums (``compat.v1``) of the same ops on the same seeded inputs: a
    stride-2 transposed convolution and its gradients, 1-D convolutions VALID at stride 2 and SAME."""
    rng = np.random.RandomState(0)
    x = tf.constant(rng.rand(2, 4, 4, 3).astype(np.float32))
    w = tf.constant(rng.rand(3, 3, 5, 3).astype(np.float32))
    y = tf.nn.conv2d_transpose(x, w, [2, 8, 8, 5], [1, 2, 2, 1], "SAME")
    text = tf.constant(rng.rand(2, 10, 4).astype(np.float32))
    kernel = tf.constant(rng.rand(3, 4, 6).astype(np.float32))
    strided, same = tf.nn.conv1d(text, kernel, 2, "VALID"), tf.nn.conv1d(text, kernel, 1, "SAME")
    dx, dw = tf.gradients(tf.reduce_sum(y * y), [x, w])
    with tf.Session() as sess:
        got = sess.run([y, strided, same, dx, dw])
    assert [g.shape for g in got] == [(2, 8, 8, 5), (2, 4, 6), (2, 10, 6), (2, 4, 4, 3), (3, 3, 5, 3)]
    tensorflow_sums = [915.335, 139.507, 326.027, 6775.204, 6480.208]
    np.testing.assert_allclose([g.sum() for g in got], tensorflow_sums, rtol=1e-5)
    with pytest.raises(ValueError, match="value has 3 channels but filter"):
        tf.nn.conv2d_transpose(x, tf.zeros([3, 3, 5, 4]), [2, 8, 8, 5], [1, 2, 2, 1])


def test_depthwise_and_separable_convolutions_match_tensorflow():
    """TensorFlow 2.21's sums (``compat.v1``) for SAME at strides 1 and 2, VALID at rate 2, a
    separable convolution at stride 2, and the gradients of all four."""
    rng = np.random.RandomState(0)
    x = tf.constant(rng.rand(2, 7, 6, 3).astype(np.float32))
    w = tf.constant(rng.rand(3, 3, 3, 2).astype(np.float32))
    pointwise = tf.constant(rng.rand(1, 1, 6, 4).astype(np.float32))
    outs = [tf.nn.depthwise_conv2d(x, w, [1, 1, 1, 1], "SAME"),
            tf.nn.depthwise_conv2d(x, w, [1, 2, 2, 1], "SAME"),
            tf.nn.depthwise_conv2d(x, w, [1, 1, 1, 1], "VALID", rate=[2, 2]),
            tf.nn.separable_conv2d(x, w, pointwise, [1, 2, 2, 1], "VALID")]
    grads = tf.gradients(sum(tf.reduce_sum(o * o) for o in outs), [x, w, pointwise])
    with tf.Session() as sess:
        got = sess.run(outs + grads)
    assert [g.shape[1:] for g in got[:4]] == [(7, 6, 6), (4, 3, 6), (3, 2, 6), (3, 2, 4)]
    tensorflow_sums = [989.55, 267.11, 171.18, 244.62, 18250.52, 15968.96, 7064.88]
    np.testing.assert_allclose([g.sum() for g in got], tensorflow_sums, rtol=2e-5)


def test_space_to_depth_and_back_in_tensorflows_order():
    """TensorFlow 2.21 (compat.v1) gives these values for the same input: each 2x2 block's pixels
    (row by row, channels inside) become one pixel's 12 channels."""
    x = np.arange(2 * 4 * 6 * 3, dtype=np.float32).reshape(2, 4, 6, 3)
    with tf.Graph().as_default():
        blocks = tf.space_to_depth(x, 2)
        back = tf.nn.depth_to_space(blocks, 2)
        unknown = tf.depth_to_space(tf.placeholder(tf.float32, [None, 4, 4, 8]), 2)
        with tf.Session() as sess:
            got, restored = sess.run([blocks, back])
    assert blocks.shape.as_list() == [2, 2, 3, 12] and unknown.shape.as_list() == [None, 8, 8, 2]
    assert got[0, 0, 0].tolist() == [0, 1, 2, 3, 4, 5, 18, 19, 20, 21, 22, 23]
    np.testing.assert_array_equal(restored, x)
    with pytest.raises(ValueError, match=r"height and width \(4, 6\) must be multiples of block_size 4"):
        tf.space_to_depth(x, 4)
    with pytest.raises(ValueError, match=r"channels \(3\) must be a multiple of block_size\^2"):
        tf.depth_to_space(x, 2)
    pixels = np.random.default_rng(0).standard_normal((1, 2, 4, 2))
    check_gradients(lambda t: tf.space_to_depth(t, 2), [pixels])


def test_softmax_cross_entropy_takes_labels_of_the_same_rows_in_another_rank_as_tf():
    """TF flattens logits and labels each to [rows, classes] before its kernel: a word2vec's one-hot
    labels of [batch, 1, vocabulary] for logits of [batch, vocabulary] are the same rows."""
    logits = np.random.default_rng(5).standard_normal((4, 6)).astype(np.float32)
    ids = np.array([[1], [5], [0], [2]])
    with tf.Graph().as_default():
        z = tf.constant(logits)
        cost = tf.nn.softmax_cross_entropy_with_logits(logits=z, labels=tf.one_hot(ids, 6))
        (grad,) = tf.gradients(tf.reduce_sum(cost), [z])
        assert cost.shape.as_list() == [4]
        with tf.Session() as sess:
            got, got_grad = sess.run([cost, grad])
    log_p = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    np.testing.assert_allclose(got, -log_p[np.arange(4), ids[:, 0]], rtol=1e-6)
    np.testing.assert_allclose(got_grad, np.exp(log_p) - np.eye(6)[ids[:, 0]], rtol=1e-5, atol=1e-7)
