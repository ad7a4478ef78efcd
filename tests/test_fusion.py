"""Lowering fuses a ReLU with the sum before it (runtime/fusion.py): same values, fewer passes."""

import array_api_compat.numpy
import numpy as np
import pytest
from namespaces import NAMESPACES, to_host

import dflow as tf
from dflow.ops import fused, parallel
from dflow.ops.registry import get_opdef
from dflow.runtime.passes import Devices, make_plan

RNG = np.random.default_rng(5)
PS0, W0 = "/job:ps/task:0", "/job:worker/task:0"
HERE = Devices.this_process(gpus=0)


def op_types(plan) -> list[str]:
    return [node.type for stages in plan.stages.values() for stage in stages
            for node in stage.schedule.nodes.values()]


def conv_layer(images, bias_add: bool):
    """A tutorial conv layer: ``relu(conv + b)``, the sum written either way."""
    kernel = tf.constant(RNG.standard_normal((3, 3, 2, 4)), tf.float32)
    biases = tf.constant(RNG.standard_normal(4), tf.float32)
    conv = tf.nn.conv2d(images, kernel, [1, 1, 1, 1], "SAME")
    summed = tf.nn.bias_add(conv, biases, name="sum") if bias_add else tf.add(biases, conv, name="sum")
    return conv, biases, summed, tf.nn.relu(summed, name="relu")


@pytest.mark.parametrize("bias_add", [True, False], ids=["BiasAdd", "Add"])
def test_a_layer_and_its_gradients_are_the_same_with_the_relu_fused(bias_add):
    images = RNG.standard_normal((3, 5, 5, 2)).astype(np.float32)
    with tf.Graph().as_default() as graph:
        x = tf.placeholder(tf.float32, [None, 5, 5, 2])
        conv, biases, summed, relu = conv_layer(x, bias_add)
        grads = tf.gradients(tf.reduce_sum(relu * relu), [conv, biases])
        types = op_types(make_plan(graph, [relu, *grads], {x.name}, HERE))
        # Add(biases, conv): the convolution is not its first operand, so not fused with it
        assert ("_FusedConv2DBiasRelu" if bias_add else "_FusedAddRelu") in types
        assert "Relu" not in types
        with tf.Session() as sess:
            got = sess.run([relu, *grads, conv, biases], {x: images})
    value, d_conv, d_biases, conv_value, bias_value = got
    expected = np.maximum(conv_value.astype(np.float64) + bias_value, 0)
    np.testing.assert_allclose(value, expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(d_conv, 2 * expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(d_biases, 2 * expected.sum(axis=(0, 1, 2)), rtol=1e-5)


@pytest.mark.parametrize("onednn", [True, False], ids=["oneDNN", "lowering"])
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("bias_shape", [(4,), (1, 1, 1, 4)], ids=["vector", "broadcast"])
def test_a_conv_layer_fused_whole_gives_the_three_ops_numbers(monkeypatch, onednn, data_format, bias_shape):
    """Relu(BiasAdd(Conv2D)) or Relu(Add(Conv2D, b)) is one op (oneDNN's convolution with the bias
    and ReLU in the same pass, or the lowering and one fused pass), with every layout and bias."""
    from dflow.ops import onednn as onednn_module

    if not onednn:
        monkeypatch.setattr(onednn_module, "takes", lambda xp, *arrays: False)
    if data_format == "NCHW" and bias_shape != (4,):
        bias_shape = (1, 4, 1, 1)
    images = RNG.standard_normal((3, 6, 6, 2)).astype(np.float32)
    if data_format == "NCHW":
        images = np.ascontiguousarray(images.transpose(0, 3, 1, 2))
    kernel = RNG.standard_normal((3, 3, 2, 4)).astype(np.float32)
    bias = RNG.standard_normal(bias_shape).astype(np.float32)
    with tf.Graph().as_default() as graph:
        x = tf.placeholder(tf.float32, images.shape)
        conv = tf.nn.conv2d(x, kernel, [1, 1, 1, 1], "SAME", data_format=data_format)
        summed = tf.nn.bias_add(conv, bias, data_format=data_format) if len(bias_shape) == 1 else conv + bias
        relu = tf.nn.relu(summed)
        types = op_types(make_plan(graph, [relu], {x.name}, HERE))
        # an Add has no data format: its bias is along the last axis, which NCHW's is not
        whole = data_format == "NHWC" or len(bias_shape) == 1
        assert [t for t in types if t != "Const"] == (["_FusedConv2DBiasRelu"] if whole
                                                      else ["Conv2D", "_FusedAddRelu"]), types
        with tf.Session() as sess:
            got = sess.run(relu, {x: images})
            unfused = sess.run([relu, conv], {x: images})[0]  # conv fetched: nothing fused with it
    nhwc = images if data_format == "NHWC" else images.transpose(0, 2, 3, 1)
    expected = np.zeros((3, 6, 6, 4))
    padded = np.pad(nhwc.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    for i in range(3):
        for j in range(3):
            expected += padded[:, i:i + 6, j:j + 6] @ kernel[i, j]
    expected = np.maximum(expected + bias.reshape(4), 0)
    if data_format == "NCHW":
        expected = expected.transpose(0, 3, 1, 2)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, unfused, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("onednn", [True, False], ids=["oneDNN", "lowering"])
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
def test_a_filter_s_and_its_bias_s_gradients_come_from_one_op(monkeypatch, onednn, data_format):
    """Conv2DBackpropFilter and BiasAddGrad of the same gradient: one op, whose second output the
    BiasAddGrad's name gives (fetched, or applied by an optimizer), with the pair's numbers."""
    from dflow.ops import onednn as onednn_module

    if not onednn:
        monkeypatch.setattr(onednn_module, "takes", lambda xp, *arrays: False)
    shape = (3, 6, 6, 2) if data_format == "NHWC" else (3, 2, 6, 6)
    images = RNG.standard_normal(shape).astype(np.float32)
    with tf.Graph().as_default() as graph:
        x = tf.placeholder(tf.float32, shape)
        kernel = tf.Variable(RNG.standard_normal((3, 3, 2, 4)).astype(np.float32))
        bias = tf.Variable(RNG.standard_normal(4).astype(np.float32))
        conv = tf.nn.conv2d(x, kernel, [1, 1, 1, 1], "SAME", data_format=data_format)
        layer = tf.nn.relu(tf.nn.bias_add(conv, bias, data_format=data_format))
        loss = tf.reduce_sum(layer * layer)
        d_kernel, d_bias = tf.gradients(loss, [kernel, bias])
        types = op_types(make_plan(graph, [d_kernel, d_bias], {x.name}, HERE))
        assert "_Conv2DBackpropFilterWithBias" in types and "BiasAddGrad" not in types
        assert "Conv2DBackpropFilter" not in types
        train = tf.train.GradientDescentOptimizer(0.5).minimize(loss)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            before, layer_value, got_kernel, got_bias = sess.run([bias, layer, d_kernel, d_bias], {x: images})
            sess.run(train, {x: images})
            after = sess.run(bias)
    import array_api_compat.numpy as xp

    g = 2 * layer_value.astype(np.float64)  # d loss / d (conv + b), where the ReLU passes it
    attrs = dict(strides=[1, 1, 1, 1], padding="SAME", data_format=data_format, dilations=[1, 1, 1, 1])
    expected_kernel = get_opdef("Conv2DBackpropFilter").kernel(xp, images.astype(np.float64),
                                                               np.array([3, 3, 2, 4]), g, **attrs)
    expected_bias = g.sum(axis=(0, 1, 2) if data_format == "NHWC" else (0, 2, 3))
    np.testing.assert_allclose(got_kernel, expected_kernel, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(got_bias, expected_bias, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(after, before - 0.5 * got_bias, rtol=1e-5, atol=1e-4)


def conv_reference(images, kernel):
    """A stride-1 SAME convolution of NHWC float64 images with a 3x3 HWIO kernel."""
    n, h, w, _ = images.shape
    out = np.zeros((n, h, w, kernel.shape[3]))
    padded = np.pad(images.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    for i in range(3):
        for j in range(3):
            out += padded[:, i:i + h, j:j + w] @ kernel[i, j]
    return out


@pytest.mark.parametrize("onednn", [True, False], ids=["oneDNN", "lowering"])
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
def test_a_relu_of_a_convolution_without_bias_is_one_op(monkeypatch, onednn, data_format):
    """Relu(Conv2D) (nlintz's tutorials write their layers so) is one op with the pair's numbers."""
    from dflow.ops import onednn as onednn_module

    if not onednn:
        monkeypatch.setattr(onednn_module, "takes", lambda xp, *arrays: False)
    images = RNG.standard_normal((3, 6, 6, 2)).astype(np.float32)
    kernel = RNG.standard_normal((3, 3, 2, 4)).astype(np.float32)
    fed = images if data_format == "NHWC" else np.ascontiguousarray(images.transpose(0, 3, 1, 2))
    with tf.Graph().as_default() as graph:
        x = tf.placeholder(tf.float32, fed.shape)
        conv = tf.nn.conv2d(x, kernel, [1, 1, 1, 1], "SAME", data_format=data_format)
        relu = tf.nn.relu(conv)
        assert [t for t in op_types(make_plan(graph, [relu], {x.name}, HERE)) if t != "Const"] == [
            "_FusedConv2DBiasRelu"]
        with tf.Session() as sess:
            got = sess.run(relu, {x: fed})
            unfused = sess.run([relu, conv], {x: fed})[0]
    expected = np.maximum(conv_reference(images, kernel), 0)
    if data_format == "NCHW":
        expected = expected.transpose(0, 3, 1, 2)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, unfused, rtol=1e-5, atol=1e-5)


def test_the_shape_a_gradient_reads_does_not_keep_a_convolution_from_fusing():
    """relu(conv + b), b of a shape unknown until run: the Add's gradient reads the convolution's
    shape, which is taken from the convolution's inputs, and training steps the same as unfused."""
    images = RNG.standard_normal((3, 6, 6, 2)).astype(np.float32)
    kernel0 = RNG.standard_normal((3, 3, 2, 4)).astype(np.float32)
    bias0 = RNG.standard_normal(4).astype(np.float32)
    with tf.Graph().as_default() as graph:
        x = tf.placeholder(tf.float32, [None, 6, 6, 2])
        kernel, bias = tf.Variable(kernel0), tf.Variable(bias0, validate_shape=False)
        conv = tf.nn.conv2d(x, kernel, [1, 1, 1, 1], "SAME")
        loss = tf.reduce_sum(tf.nn.relu(conv + bias) ** 2)
        train = tf.train.GradientDescentOptimizer(0.01).minimize(loss)
        types = op_types(make_plan(graph, [train], {x.name}, HERE))
        assert "_FusedConv2DBiasRelu" in types and "_Conv2DShape" in types and "Conv2D" not in types
        results = []
        for fetch_conv_too in (False, True):  # fetched, the convolution stays an op of its own
            with tf.Session() as sess:
                sess.run(tf.global_variables_initializer())
                for _ in range(2):
                    sess.run([train, conv] if fetch_conv_too else train, {x: images})
                results.append(sess.run([kernel, bias]))
    for fused_value, unfused_value in zip(*results, strict=True):
        np.testing.assert_allclose(fused_value, unfused_value, rtol=1e-5, atol=1e-5)
    layer = conv_reference(images, kernel0) + bias0
    expected_bias = bias0 - 0.01 * (2 * np.maximum(layer, 0)).sum(axis=(0, 1, 2))  # the first step
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [None, 6, 6, 2])
        bias = tf.Variable(bias0)
        loss = tf.reduce_sum(tf.nn.relu(tf.nn.conv2d(x, kernel0, [1, 1, 1, 1], "SAME") + bias) ** 2)
        train = tf.train.GradientDescentOptimizer(0.01).minimize(loss)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(train, {x: images})
            np.testing.assert_allclose(sess.run(bias), expected_bias, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("xp", NAMESPACES)
@pytest.mark.parametrize("data_format, strides, padding, dilations", [
    ("NHWC", [1, 1, 1, 1], "SAME", [1, 1, 1, 1]), ("NHWC", [1, 2, 3, 1], "VALID", [1, 1, 1, 1]),
    ("NCHW", [1, 1, 2, 2], "SAME", [1, 1, 1, 1]), ("NHWC", [1, 1, 1, 1], "VALID", [1, 2, 2, 1])])
def test_a_convolution_s_shape_from_its_inputs_is_its_output_s(xp, data_format, strides, padding, dilations):
    x = RNG.standard_normal((2, 3, 9, 7) if data_format == "NCHW" else (2, 9, 7, 3)).astype(np.float32)
    w = RNG.standard_normal((3, 2, 3, 5)).astype(np.float32)
    attrs = dict(strides=strides, padding=padding, data_format=data_format, dilations=dilations)
    output = get_opdef("Conv2D").kernel(array_api_compat.numpy, x, w, **attrs)
    for out_type in (tf.int32, tf.int64):
        shape = get_opdef("_Conv2DShape").kernel(xp, xp.asarray(x), xp.asarray(w), out_type=out_type, **attrs)
        assert to_host(shape).dtype == out_type.as_numpy_dtype
        np.testing.assert_array_equal(to_host(shape), output.shape)


@pytest.mark.parametrize("xp", NAMESPACES)
@pytest.mark.parametrize("leading", [(3, 4, 5), (8, 16, 16)], ids=["few rows", "a BLAS product's rows"])
def test_a_bias_s_gradient_summed_to_its_shape_is_the_plain_sum(xp, leading):
    g = RNG.standard_normal((*leading, 6)).astype(np.float32)
    sum_to_shape = get_opdef("SumToShape").kernel
    g64 = g.astype(np.float64)
    for target, expected in (([6], g64.sum(axis=(0, 1, 2))),
                             ([1, 1, 1, 6], g64.sum(axis=(0, 1, 2), keepdims=True)),
                             ([leading[2], 6], g64.sum(axis=(0, 1))), ([1], g64.sum().reshape(1))):
        got = to_host(sum_to_shape(xp, xp.asarray(g), np.array(target)))
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=5e-4)  # float32 sums of 2,048
    integers = (g * 10).astype(np.int32)  # not a BLAS product: the sum itself
    np.testing.assert_array_equal(to_host(sum_to_shape(xp, xp.asarray(integers), np.array([6]))),
                                  integers.sum(axis=(0, 1, 2)))


def test_a_sum_used_elsewhere_fetched_or_controlling_is_not_fused():
    with tf.Graph().as_default() as graph:
        x = tf.placeholder(tf.float32, [None, 5, 5, 2])
        _, _, summed, relu = conv_layer(x, bias_add=True)
        assert "BiasAdd" in op_types(make_plan(graph, [relu, summed], {x.name}, HERE))
        twice = relu + summed
        assert "BiasAdd" in op_types(make_plan(graph, [twice], {x.name}, HERE))
        with tf.control_dependencies([summed.op]):
            after = tf.identity(relu)
        assert "BiasAdd" in op_types(make_plan(graph, [after], {x.name}, HERE))
        with tf.Session() as sess:
            relu_value, sum_value, twice_value = sess.run([relu, summed, twice],
                                                          {x: RNG.standard_normal((2, 5, 5, 2))})
    np.testing.assert_array_equal(relu_value, np.maximum(sum_value, 0))
    np.testing.assert_allclose(twice_value, relu_value + sum_value, rtol=1e-6)


def test_a_sum_and_its_relu_on_two_tasks_stay_apart():
    with tf.Graph().as_default() as graph:
        x = tf.placeholder(tf.float32, [None, 3])
        with tf.device(PS0):
            summed = tf.nn.bias_add(x, tf.constant([1.0, -1.0, 0.5]))
        relu = tf.nn.relu(summed)
        plan = make_plan(graph, [relu], {x.name}, Devices(W0, {PS0: {}, W0: {}}))
    assert "BiasAdd" in op_types(plan) and "Relu" in op_types(plan)


@pytest.mark.parametrize("xp", NAMESPACES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_fused_kernel_is_relu_of_the_sum_on_every_namespace(xp, dtype):
    """NaN stays NaN and -inf gives 0 (as np.maximum); the bias may be either operand of an Add;
    NCHW and same-shaped operands take the plain path."""
    kernel = get_opdef("_FusedAddRelu").kernel
    value = RNG.standard_normal((2, 3, 4, 5)).astype(dtype)
    value[0, 0, 0, :3] = [np.nan, -np.inf, np.inf]
    bias = RNG.standard_normal(5).astype(dtype)
    expected = np.maximum(value + bias, 0)
    for x, y in ((value, bias), (bias, value)):
        got = to_host(kernel(xp, xp.asarray(x), xp.asarray(y), "NHWC"))
        np.testing.assert_array_equal(got, expected)
        assert got.dtype == dtype
    other = RNG.standard_normal(value.shape).astype(dtype)
    np.testing.assert_array_equal(to_host(kernel(xp, xp.asarray(value), xp.asarray(other))),
                                  np.maximum(value + other, 0))
    nchw_bias = RNG.standard_normal(3).astype(dtype)
    np.testing.assert_array_equal(to_host(kernel(xp, xp.asarray(value), xp.asarray(nchw_bias), "NCHW")),
                                  np.maximum(value + nchw_bias[:, None, None], 0))


@pytest.mark.parametrize("xp", NAMESPACES)
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
def test_the_fused_convolution_kernels_are_the_ops_they_replace_on_every_namespace(xp, data_format):
    """_FusedConv2DBiasRelu is Relu(BiasAdd(Conv2D)); _Conv2DBackpropFilterWithBias is the pair
    (Conv2DBackpropFilter, BiasAddGrad) of one gradient: oneDNN's on NumPy's float32 NHWC
    arrays, the ops' own kernels everywhere else."""
    x = RNG.standard_normal((2, 5, 6, 3)).astype(np.float32)
    w = RNG.standard_normal((3, 2, 3, 4)).astype(np.float32)
    bias = RNG.standard_normal(4).astype(np.float32)
    g = RNG.standard_normal((2, 5, 6, 4)).astype(np.float32)
    if data_format == "NCHW":
        x, g = (np.ascontiguousarray(a.transpose(0, 3, 1, 2)) for a in (x, g))
    attrs = dict(strides=[1, 1, 1, 1], padding="SAME", data_format=data_format, dilations=[1, 1, 1, 1])
    kernel = lambda name: get_opdef(name).kernel  # noqa: E731
    host = array_api_compat.numpy
    conv = kernel("Conv2D")(host, x.astype(np.float64), w.astype(np.float64), **attrs)
    expected = kernel("Relu")(host, kernel("BiasAdd")(host, conv, bias.astype(np.float64), data_format))
    got = kernel("_FusedConv2DBiasRelu")(xp, xp.asarray(x), xp.asarray(w), xp.asarray(bias), **attrs)
    np.testing.assert_allclose(to_host(got), expected, rtol=1e-4, atol=1e-4)
    sizes = np.array(w.shape, np.int32)
    x64, g64 = x.astype(np.float64), g.astype(np.float64)
    expected = (kernel("Conv2DBackpropFilter")(host, x64, sizes, g64, **attrs),
                kernel("BiasAddGrad")(host, g64, data_format))
    got = kernel("_Conv2DBackpropFilterWithBias")(xp, *(xp.asarray(a) for a in (x, sizes, g)), **attrs)
    for got_one, expected_one in zip(got, expected, strict=True):
        np.testing.assert_allclose(to_host(got_one), expected_one, rtol=1e-4, atol=1e-4)


def test_the_fused_kernel_cut_in_pieces_gives_the_whole_s_numbers(monkeypatch):
    kernel = get_opdef("_FusedAddRelu").kernel
    import array_api_compat.numpy as xp

    value = RNG.standard_normal((7, 3, 4)).astype(np.float32)
    bias = RNG.standard_normal(4).astype(np.float32)
    whole = kernel(xp, value, bias)
    monkeypatch.setattr(fused, "FLAT_PIECES_FROM", 0)
    monkeypatch.setattr(parallel, "cores", lambda: 3)  # 21 rows: 7 each
    np.testing.assert_array_equal(kernel(xp, value, bias), whole)
    monkeypatch.setattr(fused, "compiled_kernels", lambda: None)  # numba absent: NumPy's passes
    np.testing.assert_array_equal(kernel(xp, value, bias), whole)


@pytest.mark.parametrize("onednn", [True, False], ids=["oneDNN", "compared"])
@pytest.mark.parametrize("relu", [True, False], ids=["relu", "plain"])
def test_a_pooled_layer_s_gradient_is_the_same_routed_by_the_forward_s_workspace(monkeypatch, onednn, relu):
    """MaxPool and its gradient (with the ReLU's, where the pooled layer is a ReLU's) pass the
    forward's workspace; without oneDNN the workspace is empty and the gradient compares."""
    from dflow.ops import onednn as onednn_module

    if not onednn:
        monkeypatch.setattr(onednn_module, "takes", lambda xp, *arrays: False)
    images = RNG.standard_normal((2, 6, 6, 2)).astype(np.float32)
    with tf.Graph().as_default() as graph:
        x = tf.placeholder(tf.float32, [None, 6, 6, 2])
        conv, _, summed, relu_value = conv_layer(x, bias_add=True)
        pooled = relu_value if relu else summed
        pool = tf.nn.max_pool(pooled, [1, 3, 3, 1], [1, 2, 2, 1], "SAME")
        upstream = tf.constant(RNG.standard_normal((2, 3, 3, 4)), tf.float32)
        (d_conv,) = tf.gradients(tf.reduce_sum(pool * upstream), [conv])
        plan = make_plan(graph, [d_conv], {x.name}, HERE)
        nodes = {n.type: n for stages in plan.stages.values() for stage in stages
                 for n in stage.schedule.nodes.values()}
        assert "_MaxPoolWithWorkspace" in nodes and "MaxPool" not in nodes
        assert nodes["_MaxPoolGradWithWorkspace"].attrs["relu_grad"] is relu
        assert not {"ReluGrad", "MaxPoolGrad", "_FusedMaxPoolGradReluGrad"} & set(nodes)
        with tf.Session() as sess:
            got, pooled_value, pool_value, dy = sess.run([d_conv, pooled, pool, upstream], {x: images})
    import array_api_compat.numpy as xp

    attrs = dict(ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1], padding="SAME", data_format="NHWC")
    expected = get_opdef("MaxPoolGrad").kernel(xp, pooled_value, pool_value, dy.astype(np.float64), **attrs)
    if relu:
        expected = get_opdef("ReluGrad").kernel(xp, expected, pooled_value)
        assert (pooled_value == 0).any()
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    assert (got != 0).any()


def test_pooling_in_nchw_on_a_gpu_or_whose_gradient_is_elsewhere_passes_no_workspace():
    from dflow.runtime.executor import OpNode
    from dflow.runtime.fusion import fuse

    attrs = dict(ksize=[1, 1, 2, 2], strides=[1, 1, 2, 2], padding="SAME", data_format="NCHW")
    stage = [OpNode("pool", "MaxPool", attrs, ("x:0",), (), 1),
             OpNode("grad", "MaxPoolGrad", attrs, ("x:0", "pool:0", "dy:0"), (), 1)]
    assert [n.type for n in fuse(stage, needed={"grad:0"})] == ["MaxPool", "MaxPoolGrad"]
    nhwc = {**attrs, "ksize": [1, 2, 2, 1], "strides": [1, 2, 2, 1], "data_format": "NHWC"}
    on_gpu = [OpNode(n.name, n.type, nhwc, n.inputs, (), 1, "GPU") for n in stage]
    assert [n.type for n in fuse(on_gpu, needed={"grad:0"})] == ["MaxPool", "MaxPoolGrad"]
    on_cpu = [OpNode(n.name, n.type, nhwc, n.inputs, (), 1) for n in stage]
    assert [n.type for n in fuse(on_cpu, needed={"grad:0"})] == ["_MaxPoolWithWorkspace",
                                                                  "_MaxPoolGradWithWorkspace"]
    assert [n.type for n in fuse(on_cpu[:1], needed={"pool:0"})] == ["MaxPool"]


@pytest.mark.parametrize("xp", NAMESPACES)
@pytest.mark.parametrize("relu_grad", [True, False], ids=["relu", "plain"])
def test_the_pooling_with_a_workspace_is_the_plain_pair_on_every_namespace(xp, relu_grad):
    """Ties at 0 and positive ties, as below; the workspace is oneDNN's on NumPy, empty elsewhere."""
    x = xp.asarray(np.maximum(np.asarray(RNG.integers(-2, 3, (2, 7, 7, 4)), np.float32), 0))
    attrs = dict(ksize=[1, 2, 3, 1], strides=[1, 2, 2, 1], padding="SAME", data_format="NHWC")
    y = get_opdef("MaxPool").kernel(xp, x, **attrs)
    got_y, workspace = get_opdef("_MaxPoolWithWorkspace").kernel(xp, x, **attrs)
    np.testing.assert_array_equal(to_host(got_y), to_host(y))
    dy = xp.asarray(RNG.standard_normal(to_host(y).shape).astype(np.float32))
    pair = get_opdef("MaxPoolGrad").kernel(xp, x, y, dy, **attrs)
    if relu_grad:
        pair = get_opdef("ReluGrad").kernel(xp, pair, x)
    got = get_opdef("_MaxPoolGradWithWorkspace").kernel(xp, x, got_y, dy, workspace, **attrs,
                                                        relu_grad=relu_grad)
    np.testing.assert_allclose(to_host(got), to_host(pair), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("xp", NAMESPACES)
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
def test_the_fused_pooling_and_relu_gradient_is_the_pair_s_on_every_namespace(xp, data_format):
    """A ReLU's output has ties at 0 (a window of zeros routes to its first zero, which ReluGrad
    then zeroes) and positive ties (the first in scan order takes the gradient)."""
    x = np.maximum(np.asarray(RNG.integers(-2, 3, (2, 4, 7, 7)), np.float32), 0)
    if data_format == "NHWC":
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    nhwc = (lambda v: v) if data_format == "NHWC" else (lambda v: [v[0], v[3], v[1], v[2]])
    attrs = dict(ksize=nhwc([1, 2, 3, 1]), strides=nhwc([1, 2, 2, 1]), padding="SAME",
                 data_format=data_format)
    x = xp.asarray(x)
    y = get_opdef("MaxPool").kernel(xp, x, **attrs)
    dy = xp.asarray(RNG.standard_normal(to_host(y).shape).astype(np.float32))
    pair = get_opdef("ReluGrad").kernel(xp, get_opdef("MaxPoolGrad").kernel(xp, x, y, dy, **attrs), x)
    got = get_opdef("_FusedMaxPoolGradReluGrad").kernel(xp, x, y, dy, **attrs)
    np.testing.assert_array_equal(to_host(got), to_host(pair))
    assert (to_host(pair) != 0).any()


def decayed_dense_layer(x, weights_value, wd: float, decay_first: bool):
    """A tutorial dense layer with L2 weight decay (cifar10's ``variable_with_weight_decay``):
    its loss and weights."""
    weights = tf.Variable(weights_value)
    data_loss = tf.reduce_sum(tf.square(tf.matmul(x, weights)))
    decay = tf.multiply(tf.nn.l2_loss(weights), wd)
    return tf.add_n([decay, data_loss] if decay_first else [data_loss, decay]), weights


@pytest.mark.parametrize("decay_first", [False, True], ids=["decay-second", "decay-first"])
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("optimizer, fused_ops", [
    (lambda: tf.train.GradientDescentOptimizer(0.125), {"_ApplyDecayedGradientDescent": 1, "_AddScaled": 1}),
    (lambda: tf.train.MomentumOptimizer(0.125, 0.9), {"_ApplyDecayedGradientDescent": 0, "_AddScaled": 2}),
], ids=["sgd", "momentum"])
def test_a_step_with_weight_decay_sums_it_in_one_pass_with_the_three_ops_numbers(
        decay_first, batch, optimizer, fused_ops):
    """SGD's ApplyGradientDescent of AddN(the data's gradient, Mul(weights, decay)) is one op;
    Momentum takes no decay in its pass, so the sum is one _AddScaled, into the data gradient's
    buffer; the loss's own sum (data + Mul(l2, wd)), fetched too, is one _AddScaled. A first step makes
    ``w - lr * (x^T dy + wd * w)`` (Momentum's accumulator starts at 0), computed here in float64.
    At batch 1 the data's gradient is an outer product (its own compiled kernel)."""
    x_value = RNG.standard_normal((batch, 5)).astype(np.float32)
    w_value = RNG.standard_normal((5, 4)).astype(np.float32)
    with tf.Graph().as_default() as graph:
        x = tf.placeholder(tf.float32, [batch, 5])
        loss, weights = decayed_dense_layer(x, w_value, 0.25, decay_first)
        train = optimizer().minimize(loss)
        types = op_types(make_plan(graph, [train, loss], {x.name}, HERE))
        assert {op: types.count(op) for op in fused_ops} == fused_ops and "AddN" not in types
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(train, {x: x_value})
            after = sess.run(weights)
    x64, w64 = x_value.astype(np.float64), w_value.astype(np.float64)
    expected = w64 - 0.125 * (x64.T @ (2 * x64 @ w64) + 0.25 * w64)
    np.testing.assert_allclose(after, expected, rtol=1e-5, atol=1e-5)


def test_a_decay_sum_used_elsewhere_or_of_three_terms_is_not_fused():
    w_value = RNG.standard_normal((5, 4)).astype(np.float32)
    with tf.Graph().as_default() as graph:
        x = tf.placeholder(tf.float32, [2, 5])
        loss, weights = decayed_dense_layer(x, w_value, 0.25, decay_first=False)
        gradient = tf.gradients(loss, [weights])[0]
        update = tf.train.GradientDescentOptimizer(0.5).apply_gradients([(gradient, weights)])
        fetched = op_types(make_plan(graph, [update, gradient], {x.name}, HERE))  # the sum fetched too
        # the update reads the sum, fetched too, which is one op of its own
        assert "ApplyGradientDescent" in fetched and "_AddScaled" in fetched
        three = tf.add_n([loss, tf.multiply(tf.nn.l2_loss(weights), 0.5)])
        summed = op_types(make_plan(graph, [tf.train.GradientDescentOptimizer(0.5).minimize(three)],
                                    {x.name}, HERE))
        assert "ApplyGradientDescent" in summed and "_ApplyDecayedGradientDescent" not in summed


def test_a_worker_sums_the_decay_gradient_in_one_op_where_its_update_is_on_the_ps():
    """On 1 PS + 1 worker the update is the PS's and the gradients' sum the worker's: the sum is
    one _AddScaled there (the decay's Mul and the AddN made two passes and a temporary); a step
    that does not fetch the loss does not compute it, its sum included."""
    w_value = RNG.standard_normal((5, 4)).astype(np.float32)
    with tf.Graph().as_default() as graph:
        x = tf.placeholder(tf.float32, [2, 5])
        with tf.device(tf.train.replica_device_setter(worker_device=W0, ps_tasks=1)):
            loss, _ = decayed_dense_layer(x, w_value, 0.25, decay_first=False)
            train = tf.train.GradientDescentOptimizer(0.5).minimize(loss)
        plan = make_plan(graph, [train], {x.name}, Devices(W0, {PS0: {}, W0: {}}))
    types = {task: [node.type for stage in stages for node in stage.schedule.nodes.values()]
             for task, stages in plan.stages.items()}
    assert "ApplyGradientDescent" in types[PS0]
    assert types[W0].count("_AddScaled") == 1 and "AddN" not in types[W0]  # the gradients'
    assert "L2Loss" not in types[W0]


@pytest.mark.parametrize("xp", NAMESPACES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_scaled_sum_kernel_is_the_two_ops_on_every_namespace(xp, dtype):
    """AddN(g, Mul(x, s)) bit for bit, the scalar first or second in the Mul; a product of two
    arrays, or of shapes that broadcast, takes the plain path."""
    kernel = get_opdef("_AddScaled").kernel
    addend, x, other = (RNG.standard_normal((6, 7)).astype(dtype) for _ in range(3))
    scale = np.asarray(0.3, dtype)
    for a, b in ((x, scale), (scale, x), (x, other), (x, other[0]), (scale, scale)):
        expected = addend + a * b
        got = to_host(kernel(xp, xp.asarray(addend), xp.asarray(a), xp.asarray(b)))
        np.testing.assert_array_equal(got, expected)
        assert got.dtype == dtype


def test_the_scaled_sum_is_written_into_the_addend_only_where_it_may_be():
    kernel = get_opdef("_AddScaled").kernel
    addend, x = (RNG.standard_normal(2 * fused.FLAT_PIECES_FROM + 3).astype(np.float32) for _ in range(2))
    expected = addend + x * np.float32(0.5)
    got = kernel(array_api_compat.numpy, addend, x, np.asarray(0.5, np.float32), out=addend)
    assert got is addend  # in place, over the cores' pieces
    np.testing.assert_array_equal(got, expected)
    shared = expected.copy()
    shared.flags.writeable = False  # a value another task lent (a shared-memory delivery)
    got = kernel(array_api_compat.numpy, shared, x, np.asarray(0.5, np.float32), out=shared)
    assert got is not shared
    np.testing.assert_array_equal(got, expected + x * np.float32(0.5))


@pytest.mark.parametrize("xp", NAMESPACES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_decayed_update_kernel_is_the_three_ops_on_every_namespace(xp, dtype):
    """The decay's scalar may come first or second in its Mul; a product of two arrays, or of
    shapes that broadcast, takes the plain path."""
    var, delta, decayed = (RNG.standard_normal((6, 7)).astype(dtype) for _ in range(3))
    scale = np.asarray(0.3, dtype)
    for x, s in ((decayed, scale), (scale, decayed)):
        got = to_host(fused.gradient_descent(xp, xp.asarray(var), 0.5, xp.asarray(delta),
                                             xp.asarray(x), xp.asarray(s)))
        np.testing.assert_allclose(got, var - 0.5 * (delta + decayed * scale), rtol=1e-6, atol=1e-6)
        assert got.dtype == dtype
    row = RNG.standard_normal(7).astype(dtype)
    for x, s in ((decayed, delta), (row, scale), (decayed, row)):
        got = to_host(fused.gradient_descent(xp, xp.asarray(var), 0.5, xp.asarray(delta),
                                             xp.asarray(x), xp.asarray(s)))
        np.testing.assert_allclose(got, var - 0.5 * (delta + x * s), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("xp", NAMESPACES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_an_outer_product_is_the_matmul_on_every_namespace(xp, dtype):
    """MatMul with an inner dimension of 1 (a weight's gradient at batch 1), transposed or not."""
    kernel = get_opdef("MatMul").kernel
    column, row = RNG.standard_normal((1, 9)).astype(dtype), RNG.standard_normal((1, 4)).astype(dtype)
    expected = column.T.astype(np.float64) @ row
    got = to_host(kernel(xp, xp.asarray(column), xp.asarray(row), transpose_a=True, transpose_b=False))
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert got.dtype == dtype
    got = to_host(kernel(xp, xp.asarray(column.T.copy()), xp.asarray(row), transpose_a=False,
                         transpose_b=False))
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_an_lrn_layer_s_gradient_is_the_same_from_the_forward_s_window_sums():
    images = np.abs(RNG.standard_normal((2, 5, 5, 8))).astype(np.float32)
    attrs = dict(depth_radius=2, bias=1.0, alpha=0.1, beta=0.75)
    with tf.Graph().as_default() as graph:
        x = tf.placeholder(tf.float32, images.shape)
        normed = tf.nn.lrn(x, **attrs)
        upstream = tf.constant(RNG.standard_normal(images.shape), tf.float32)
        (dx,) = tf.gradients(tf.reduce_sum(normed * upstream), [x])
        types = op_types(make_plan(graph, [normed, dx], {x.name}, HERE))
        assert "_LRNWithWorkspace" in types and "_LRNGradWithWorkspace" in types
        assert "LRN" not in types and "LRNGrad" not in types
        with tf.Session() as sess:
            got_y, got_dx, dy = sess.run([normed, dx, upstream], {x: images})
    import array_api_compat.numpy as xp

    from dflow.ops import conv_lowering

    expected_y = conv_lowering.lrn(xp, images.astype(np.float64), **attrs)
    expected_dx = conv_lowering.lrn_grad(xp, dy.astype(np.float64), images.astype(np.float64), expected_y,
                                         **attrs)
    np.testing.assert_allclose(got_y, expected_y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_dx, expected_dx, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("xp", NAMESPACES)
def test_the_lrn_with_a_workspace_is_the_plain_pair_on_every_namespace(xp):
    x = xp.asarray(RNG.standard_normal((2, 3, 4, 6)).astype(np.float32))
    dy = xp.asarray(RNG.standard_normal((2, 3, 4, 6)).astype(np.float32))
    attrs = dict(depth_radius=1, bias=2.0, alpha=0.5, beta=0.5)
    y = get_opdef("LRN").kernel(xp, x, **attrs)
    got_y, workspace = get_opdef("_LRNWithWorkspace").kernel(xp, x, **attrs)
    np.testing.assert_allclose(to_host(got_y), to_host(y), rtol=1e-6, atol=1e-6)
    expected = get_opdef("LRNGrad").kernel(xp, dy, x, y, **attrs)
    got = get_opdef("_LRNGradWithWorkspace").kernel(xp, dy, x, got_y, workspace, **attrs)
    np.testing.assert_allclose(to_host(got), to_host(expected), rtol=1e-5, atol=1e-6)


ACTIVATIONS = {"Relu": (tf.nn.relu, lambda y: np.maximum(y, 0)),
               "Sigmoid": (tf.sigmoid, lambda y: 1 / (1 + np.exp(-y))),
               "Tanh": (tf.tanh, np.tanh), "": (tf.identity, lambda y: y)}


def dense_layer(x, w, b, bias_form: str, activation: str):
    """``activation(x @ w + b)`` as tutorials write it: the bias by ``bias_add``, by ``+`` or none."""
    product = tf.matmul(x, w)
    summed = {"BiasAdd": lambda: tf.nn.bias_add(product, b), "Add": lambda: product + b, "": lambda: product}
    return summed[bias_form](), ACTIVATIONS[activation][0](summed[bias_form]())


@pytest.mark.parametrize("onednn", [True, False], ids=["oneDNN", "composed"])
@pytest.mark.parametrize("bias_form, activation", [
    ("BiasAdd", "Relu"), ("Add", "Relu"), ("BiasAdd", "Sigmoid"), ("Add", "Sigmoid"), ("Add", "Tanh"),
    ("Add", ""), ("BiasAdd", ""), ("", "Relu"), ("", "Sigmoid"), ("", "Tanh")])
@pytest.mark.parametrize("rank_known", [True, False], ids=["[None, 5]", "unknown shape"])
def test_a_dense_layer_trains_as_one_op_with_the_ops_numbers(monkeypatch, onednn, bias_form, activation,
                                                             rank_known):
    """x @ w + b and its activation are one op (TF's _FusedMatMul) whose forward is the ops' and
    whose training steps are the unfused graph's; where the product's rank is unknown, the Add's
    gradient reads its shape, taken from x and w, which does not keep the product from fusing."""
    from dflow.ops import onednn as onednn_module

    if onednn:
        monkeypatch.setattr(onednn_module, "MATMUL_FROM", 0)  # this small product too
    else:
        monkeypatch.setattr(onednn_module, "takes", lambda xp, *arrays: False)
    images = RNG.standard_normal((8, 5)).astype(np.float32)
    w0, b0 = RNG.standard_normal((5, 3)).astype(np.float32), RNG.standard_normal(3).astype(np.float32)
    with tf.Graph().as_default() as graph:
        x = tf.placeholder(tf.float32, [None, 5] if rank_known else None)
        w, b = tf.Variable(w0), tf.Variable(b0)
        summed, y = dense_layer(x, w, b, bias_form, activation)
        train = tf.train.GradientDescentOptimizer(0.05).minimize(tf.reduce_sum(y * y))
        types = op_types(make_plan(graph, [y, train], {x.name}, HERE))
        assert types.count("_FusedMatMul") == 1
        assert not {"BiasAdd", "Add", "Relu", "Sigmoid", "Tanh"} & set(types)
        assert ("_MatMulShape" in types) == (bias_form == "Add" and not rank_known)
        results = []
        for fetch_sum_too in (False, True):  # fetched, the sum stays an op of its own
            with tf.Session() as sess:
                sess.run(tf.global_variables_initializer())
                first = sess.run([y, summed] if fetch_sum_too else y, {x: images})
                for _ in range(2):
                    sess.run([train, summed] if fetch_sum_too else train, {x: images})
                results.append([first[0] if fetch_sum_too else first, *sess.run([w, b])])
    reference = images.astype(np.float64) @ w0 + (b0 if bias_form else 0)
    np.testing.assert_allclose(results[0][0], ACTIVATIONS[activation][1](reference), rtol=1e-5, atol=1e-5)
    for fused_value, unfused_value in zip(*results, strict=True):
        np.testing.assert_allclose(fused_value, unfused_value, rtol=1e-5, atol=1e-5)


def test_a_product_read_elsewhere_or_summed_with_a_matrix_stays_apart_or_composes():
    """A product that another op also reads is not fused; a bias that is a whole matrix (a
    residual sum) fuses, and the kernel adds it as the Add does."""
    x0, w0 = RNG.standard_normal((4, 6)).astype(np.float32), RNG.standard_normal((6, 6)).astype(np.float32)
    with tf.Graph().as_default() as graph:
        x = tf.placeholder(tf.float32, [4, 6])
        product = tf.matmul(x, w0)
        shared = tf.nn.relu(product) + product
        residual = tf.sigmoid(tf.matmul(x, w0) + x)
        assert "_FusedMatMul" not in op_types(make_plan(graph, [shared], {x.name}, HERE))
        assert "_FusedMatMul" in op_types(make_plan(graph, [residual], {x.name}, HERE))
        with tf.Session() as sess:
            got = sess.run(residual, {x: x0})
    reference = x0.astype(np.float64) @ w0 + x0
    np.testing.assert_allclose(got, 1 / (1 + np.exp(-reference)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("xp", NAMESPACES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_fused_matmul_kernel_is_the_ops_it_replaces_on_every_namespace(xp, dtype):
    kernel = get_opdef("_FusedMatMul").kernel
    a, b = RNG.standard_normal((4, 6)).astype(dtype), RNG.standard_normal((6, 5)).astype(dtype)
    biases = [None, RNG.standard_normal(5).astype(dtype), RNG.standard_normal((4, 5)).astype(dtype)]
    for transpose_a, transpose_b in [(False, False), (True, False), (False, True), (True, True)]:
        a_in, b_in = (a.T.copy() if transpose_a else a), (b.T.copy() if transpose_b else b)
        for bias in biases:
            for activation, (_, reference) in ACTIVATIONS.items():
                inputs = [xp.asarray(a_in), xp.asarray(b_in)] + ([] if bias is None else [xp.asarray(bias)])
                got = to_host(kernel(xp, *inputs, transpose_a=transpose_a, transpose_b=transpose_b,
                                     activation=activation))
                assert got.dtype == dtype
                expected = reference(a.astype(np.float64) @ b + (0 if bias is None else bias))
                np.testing.assert_allclose(got, expected, rtol=1e-5 if dtype == np.float32 else 1e-12,
                                           atol=1e-6 if dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("xp", NAMESPACES)
@pytest.mark.parametrize("a_shape, b_shape, transpose_a, transpose_b", [
    ((4, 6), (6, 5), False, False), ((6, 4), (5, 6), True, True), ((3, 1, 4, 6), (2, 6, 5), False, False),
    ((2, 6, 4), (2, 6, 5), True, False)])
def test_a_product_s_shape_from_its_inputs_is_its_output_s(xp, a_shape, b_shape, transpose_a, transpose_b):
    a, b = RNG.standard_normal(a_shape).astype(np.float32), RNG.standard_normal(b_shape).astype(np.float32)
    output = get_opdef("MatMul").kernel(array_api_compat.numpy, a, b, transpose_a, transpose_b)
    for out_type in (tf.int32, tf.int64):
        shape = get_opdef("_MatMulShape").kernel(xp, xp.asarray(a), xp.asarray(b), out_type, transpose_a,
                                                 transpose_b)
        assert to_host(shape).dtype == out_type.as_numpy_dtype
        np.testing.assert_array_equal(to_host(shape), output.shape)


def test_transposes_into_and_out_of_a_product_fold_into_its_flags():
    """A word2vec's ``transpose(matmul(transpose(w), transpose(e))) + b``: one product with its bias
    (e @ w + b), written C-ordered, as Grappler folds the transposes; a transpose another op also
    reads stays, and the gradients keep the numbers."""
    rng = np.random.default_rng(0)
    w_value, e_value, b_value = (rng.standard_normal(size).astype(np.float32) for size in ((3, 7), (4, 3), 7))
    with tf.Graph().as_default():
        w, e, b = (tf.placeholder(tf.float32, v.shape) for v in (w_value, e_value, b_value))
        h = tf.transpose(tf.matmul(tf.transpose(w), tf.transpose(e))) + b
        e_t = tf.transpose(e)
        kept = tf.matmul(e_t, e) + tf.reduce_sum(e_t)  # the transpose has two readers
        grads = tf.gradients(tf.reduce_sum(h * h), [w, e])
        feeds = {w: w_value, e: e_value, b: b_value}
        with tf.Session() as sess:
            got = sess.run(h, feeds)
            assert op_types(sess.runner.plans.values()[-1]) == ["_FusedMatMul"]
            got_kept = sess.run(kept, feeds)
            assert "Transpose" in op_types(sess.runner.plans.values()[-1])
            got_w, got_e = sess.run(grads, feeds)
    want = e_value @ w_value + b_value
    np.testing.assert_allclose(got, want, rtol=1e-5)
    np.testing.assert_allclose(got_kept, e_value.T @ e_value + e_value.sum(), rtol=1e-5)
    assert got.flags.c_contiguous
    np.testing.assert_allclose(got_w, e_value.T @ (2 * want), rtol=1e-5)
    np.testing.assert_allclose(got_e, 2 * want @ w_value.T, rtol=1e-5)
