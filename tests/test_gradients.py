"""Table-driven gradient checks: one row per differentiable math/array op,
symbolic gradient against float64 finite differences."""

import numpy as np
import pytest
from gradcheck import check_gradients
from namespaces import OTHER_NAMESPACES, assert_of_namespace, reference_session, to_host

import dflow as tf
from dflow.python.ops import gen_math_ops
from dflow.runtime.executor import execute
from dflow.runtime.state import SessionState

rng = np.random.default_rng(42)


def r(*shape, low=-1.0, high=1.0):
    return rng.uniform(low, high, shape)


def positive(*shape):
    return r(*shape, low=0.5, high=2.0)


GRAD_ROWS = [
    ("add", lambda a, b: a + b, [r(3, 4), r(3, 4)]),
    ("add_broadcast", lambda a, b: a + b, [r(3, 4), r(4)]),
    ("subtract_broadcast", lambda a, b: a - b, [r(2, 1, 4), r(3, 1)]),
    ("multiply_broadcast", lambda a, b: a * b, [r(3, 4), r(3, 1)]),
    ("divide", lambda a, b: a / b, [r(3, 4), positive(3, 4)]),
    ("pow", lambda a, b: tf.pow(a, b), [positive(2, 3), r(2, 3)]),
    ("maximum", tf.maximum, [r(3, 4), r(3, 4)]),
    ("minimum", tf.minimum, [r(3, 4), r(4)]),
    ("negative", tf.negative, [r(5)]),
    ("square", tf.square, [r(2, 3)]),
    ("sqrt", tf.sqrt, [positive(2, 3)]),
    ("rsqrt", tf.rsqrt, [positive(2, 3)]),
    ("exp", tf.exp, [r(2, 3)]),
    ("log", tf.log, [positive(2, 3)]),
    ("abs", tf.abs, [r(6)]),
    ("sigmoid", tf.sigmoid, [r(2, 3)]),
    ("sigmoid_grad", lambda y, dy: gen_math_ops.sigmoid_grad(y, dy), [r(2, 3, low=0.1, high=0.9), r(2, 3)]),
    ("tanh_grad", lambda y, dy: gen_math_ops.tanh_grad(y, dy), [r(2, 3), r(2, 3)]),
    ("tanh", tf.tanh, [r(2, 3)]),
    ("matmul", tf.matmul, [r(3, 4), r(4, 2)]),
    ("matmul_ta", lambda a, b: tf.matmul(a, b, transpose_a=True), [r(4, 3), r(4, 2)]),
    ("matmul_tb", lambda a, b: tf.matmul(a, b, transpose_b=True), [r(3, 4), r(2, 4)]),
    ("matmul_tab", lambda a, b: tf.matmul(a, b, True, True), [r(4, 3), r(2, 4)]),
    ("matmul_op", lambda a, b: a @ b, [r(2, 3), r(3, 3)]),
    ("reduce_sum_all", tf.reduce_sum, [r(3, 4)]),
    ("reduce_prod_axis", lambda a: tf.reduce_prod(a, axis=1), [r(3, 4)]),
    ("reduce_prod_keepdims", lambda a: tf.reduce_prod(a, axis=[0, 2], keepdims=True), [r(2, 3, 4)]),
    ("reduce_sum_axis", lambda a: tf.reduce_sum(a, axis=1), [r(3, 4)]),
    ("reduce_sum_keepdims", lambda a: tf.reduce_sum(a, axis=[0, 2], keepdims=True), [r(2, 3, 4)]),
    ("reduce_mean", lambda a: tf.reduce_mean(a, axis=0), [r(3, 4)]),
    ("reduce_max", lambda a: tf.reduce_max(a, axis=-1), [r(3, 4)]),
    ("reduce_min", lambda a: tf.reduce_min(a), [r(3, 4)]),
    ("reshape", lambda a: tf.reshape(a, [-1, 2]), [r(3, 4)]),
    ("transpose", lambda a: tf.transpose(a, [2, 0, 1]), [r(2, 3, 4)]),
    ("concat", lambda a, b: tf.concat([a, b], axis=1), [r(2, 3), r(2, 2)]),
    ("split", lambda a: tf.split(a, [1, 3], axis=1)[1] * 2.0, [r(2, 4)]),
    ("split_both", lambda a: tf.add_n([p * 1.0 for p in tf.split(a, 2, axis=0)]), [r(4, 3)]),
    ("stack", lambda a, b: tf.stack([a, b], axis=1), [r(2, 3), r(2, 3)]),
    ("unstack", lambda a: tf.unstack(a, axis=1)[2], [r(2, 3)]),
    ("squeeze", lambda a: tf.squeeze(a, [1]), [r(3, 1, 2)]),
    ("expand_dims", lambda a: tf.expand_dims(a, 0), [r(3, 2)]),
    ("tile", lambda a: tf.tile(a, [2, 3]), [r(2, 3)]),
    ("pad", lambda a: tf.pad(a, [[1, 2], [0, 1]]), [r(2, 3)]),
    ("slice", lambda a: a[1:, ::2], [r(3, 5)]),
    ("slice_index", lambda a: a[:, 1, None], [r(3, 4)]),
    ("identity", tf.identity, [r(3)]),
    # float32 in the middle: finite differences need a coarse step
    ("cast_roundtrip", lambda a: tf.cast(tf.cast(a, tf.float32), tf.float64), [r(3)],
     {"eps": 1e-2, "rtol": 1e-3}),
    ("where", lambda a, b: tf.where(a > 0.0, a, b), [r(3, 4), r(3, 4)]),
    ("broadcast_to", lambda a: tf.broadcast_to(a, [3, 4]), [r(1, 4)]),
    ("fan_out", lambda a: a * a + tf.exp(a) * a, [r(4)]),
    ("relu", tf.nn.relu, [r(3, 4)]),
    ("softmax", tf.nn.softmax, [r(3, 4)]),
    ("log_softmax", tf.nn.log_softmax, [r(3, 4)]),
    ("bias_add", tf.nn.bias_add, [r(2, 3, 4), r(4)]),
    ("l2_loss", tf.nn.l2_loss, [r(3, 4)]),
    # the small ops TF 1.x scripts use (issue 13)
    ("log1p", tf.log1p, [positive(2, 3)]),
    ("expm1", tf.expm1, [r(2, 3)]),
    ("reciprocal", tf.reciprocal, [positive(2, 3)]),
    ("sin_cos", lambda a: tf.sin(a) * tf.cos(a), [r(4)]),
    ("squared_difference", tf.squared_difference, [r(3, 4), r(4)]),
    ("floormod", lambda a, b: tf.floormod(a, b), [r(3, 4, low=0.1, high=0.9), positive(3, 4)]),
    ("clip_by_value", lambda a: tf.clip_by_value(a, -0.5, 0.5), [r(3, 4)]),
    ("clip_by_norm", lambda a: tf.clip_by_norm(a, 0.5), [r(3, 4)]),
    ("clip_by_norm_axes", lambda a: tf.clip_by_norm(a, 0.5, axes=[1]), [r(3, 4)]),
    ("clip_by_global_norm", lambda a, b: tf.concat(
        [tf.reshape(t, [-1]) for t in tf.clip_by_global_norm([a, None, b], 1.0)[0] if t is not None], 0),
     [r(3, 4), r(5)]),
    ("global_norm", lambda a, b: tf.global_norm([a, b]), [r(3, 4), r(5)]),
    ("reduce_logsumexp", lambda a: tf.reduce_logsumexp(a, axis=1), [r(3, 4)]),
    ("reduce_logsumexp_all", lambda a: tf.reduce_logsumexp(a, keep_dims=True), [r(3, 4)]),
    ("reduce_sum_reduction_indices", lambda a: tf.reduce_sum(a, reduction_indices=[1]), [r(3, 4)]),
    ("reduce_mean_keep_dims", lambda a: tf.reduce_mean(a, reduction_indices=0, keep_dims=True),
     [r(3, 4)]),
    ("norm", lambda a: tf.norm(a, axis=1), [r(3, 4)]),
    ("norm_l1", lambda a: tf.norm(a, ord=1), [r(3, 4)]),
    ("reverse", lambda a: tf.reverse(a, [1]), [r(3, 4)]),
    ("slice_op", lambda a: tf.slice(a, [1, 0], [2, -1]), [r(3, 4)]),
    ("reshape_mixed", lambda a: tf.reshape(a, [tf.shape(a)[0], -1]), [r(3, 2, 2)]),
    ("fill_tensor_value", lambda a: tf.fill([2, 3], a[0]), [r(2)]),
    ("print", lambda a: tf.Print(a, [a], "print row: ", first_n=1) * 2.0, [r(3)]),
    ("softplus", tf.nn.softplus, [r(3, 4, low=-3, high=3)]),
    ("softsign", tf.nn.softsign, [r(3, 4)]),
    ("elu", tf.nn.elu, [r(3, 4)]),
    ("selu", tf.nn.selu, [r(3, 4)]),
    ("relu6", tf.nn.relu6, [r(3, 4, low=-3, high=9)]),
    ("leaky_relu", lambda a: tf.nn.leaky_relu(a, alpha=0.1), [r(3, 4)]),
    ("xw_plus_b", tf.nn.xw_plus_b, [r(3, 4), r(4, 2), r(2)]),
    ("l2_normalize", lambda a: tf.nn.l2_normalize(a, dim=1), [r(3, 4)]),
    ("weighted_cross_entropy", lambda z, x: tf.nn.weighted_cross_entropy_with_logits(
        targets=z, logits=x, pos_weight=2.0), [r(3, 4, low=0.0, high=1.0), r(3, 4)]),
    ("softmax_dim", lambda a: tf.nn.softmax(a, dim=0), [r(3, 4)]),
    ("top_k", lambda a: tf.nn.top_k(a, 2)[0], [r(3, 5)]),
    ("relu_layer", tf.nn.relu_layer, [r(3, 4), r(4, 2), r(2)]),
    ("batch_normalization", lambda x, m, v, b, s: tf.nn.batch_normalization(x, m, v, b, s, 1e-3),
     [r(3, 4), r(4), positive(4), r(4), r(4)]),
    ("batch_normalization_no_affine", lambda x, m, v: tf.nn.batch_normalization(x, m, v, None, None, 1e-3),
     [r(3, 4), r(4), positive(4)]),
]


@pytest.mark.parametrize("row", GRAD_ROWS, ids=[row[0] for row in GRAD_ROWS])
def test_gradient_matches_finite_differences(row):
    name, build, inputs, *options = row
    check_gradients(build, inputs, **(options[0] if options else {}))


def test_second_order_gradient_builds_graph():
    x = tf.placeholder(tf.float64, [])
    y = x * x * x
    (dy,) = tf.gradients(y, [x])
    (d2y,) = tf.gradients(dy, [x])
    with tf.Session() as sess:
        assert sess.run([dy, d2y], {x: 2.0}) == [12.0, 12.0]


@pytest.mark.parametrize("other_shape, summed", [
    ((3,), False), ((1, 3), False), ((), False), ((None, 3), True), ((None, 1), True)])
def test_a_broadcast_that_cannot_grow_an_operand_sums_nothing_back(other_shape, summed):
    """x of shape [None, 3] plus a bias: x's gradient is the sum's, with no op to sum it back; where
    the other operand's unknown batch could be bigger than x's, it is summed to x's shape."""
    x = tf.placeholder(tf.float64, [None, 3])
    other = tf.placeholder(tf.float64, other_shape)
    (dx,) = tf.gradients(tf.reduce_sum(tf.square(x + other)), [x])
    x0 = rng.standard_normal((1 if summed else 4, 3))
    other0 = rng.standard_normal(tuple(4 if d is None else d for d in other_shape))
    with tf.Session() as sess:
        got = sess.run(dx, {x: x0, other: other0})
        types = [n.type for n in sess.runner.plans.values()[-1].schedule.nodes.values()]
    assert ("SumToShape" in types) == summed
    np.testing.assert_allclose(got, np.reshape(2 * (x0 + other0), (-1, *x0.shape)).sum(axis=0))


def test_unconnected_input_gives_none_and_fan_out_sums():
    a = tf.placeholder(tf.float32, [2])
    b = tf.placeholder(tf.float32, [2])
    y = a * 2.0 + a * 3.0
    da, db = tf.gradients(y, [a, b])
    assert db is None
    with tf.Session() as sess:
        np.testing.assert_allclose(sess.run(da, {a: [1.0, 1.0]}), [5.0, 5.0])


def test_grad_ys_and_stop_gradient():
    x = tf.placeholder(tf.float32, [3])
    y = x * tf.stop_gradient(x)
    (dx,) = tf.gradients(y, [x], grad_ys=[tf.constant([1.0, 2.0, 3.0])])
    with tf.Session() as sess:
        np.testing.assert_allclose(sess.run(dx, {x: [1.0, 1.0, 1.0]}), [1.0, 2.0, 3.0])


def test_a_step_that_fetches_only_the_train_op_does_not_compute_the_loss():
    """The gradients' seed is ones of the loss's shape, as in TF: a known shape reads nothing, so
    the weight decay's L2Loss, the mean and the total run only where the loss is fetched."""
    x = tf.placeholder(tf.float32, [4, 3])
    w = tf.Variable(tf.ones([3, 2]))
    logits = tf.matmul(x, w)
    decay = tf.multiply(tf.nn.l2_loss(w), 0.1, name="decay")
    loss = tf.add_n([tf.reduce_mean(tf.square(logits), name="mean"), decay], name="total")
    train = tf.train.GradientDescentOptimizer(0.01).minimize(loss)
    feed = {x: np.arange(12, dtype=np.float32).reshape(4, 3)}
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(train, feed)
        nodes = sess.runner.plans.values()[-1].schedule.nodes
        fetched_loss, _ = sess.run([loss, train], feed)
    assert not {"decay", "mean", "total", w.op.name + "_1"} & set(nodes), sorted(nodes)
    assert not any(nodes[name].type == "L2Loss" for name in nodes)
    # the same two updates as a reference that computes everything: w -= 0.01 * (d mean + 0.1 w)
    xv, wv = feed[x], np.ones((3, 2), np.float32)
    for _ in range(2):
        loss_here = np.mean((xv @ wv) ** 2) + 0.1 * 0.5 * np.sum(wv**2)
        wv = wv - 0.01 * (xv.T @ (2 * (xv @ wv) / 8) + 0.1 * wv)
    np.testing.assert_allclose(fetched_loss, loss_here, rtol=1e-5)


def test_the_seed_of_a_loss_of_unknown_shape_reads_it():
    x = tf.placeholder(tf.float32, [None])
    (dx,) = tf.gradients(x * 3.0, [x])
    with tf.Session() as sess:
        np.testing.assert_allclose(sess.run(dx, {x: [1.0, 2.0]}), [3.0, 3.0])


def test_a_product_s_gradient_where_its_factors_hold_zeros():
    """TF's: one zero in a group gets the others' product and the rest nothing; two, all nothing."""
    x = tf.constant([[2.0, 0.0, 3.0], [0.0, 5.0, 0.0], [1.0, 2.0, 4.0]])
    (dx,) = tf.gradients(tf.reduce_sum(tf.reduce_prod(x, axis=1) * [1.0, 1.0, 0.5]), [x])
    with tf.Session() as sess:
        np.testing.assert_allclose(sess.run(dx), [[0, 6, 0], [0, 0, 0], [4, 2, 1]])


def test_an_op_with_no_gradient_on_the_way_to_a_variable_is_tf_s_lookup_error():
    """Not silence: the variables behind it would not train. Off the path (an input's
    preprocessing), with tf.stop_gradient, or for a stateful op, nothing is raised."""
    w = tf.Variable(tf.ones([2, 2, 3]), name="w")
    image = tf.placeholder(tf.float32, [2, 2, 3])
    on_path = tf.reduce_sum(tf.image.adjust_contrast(w, 2.0))
    with pytest.raises(LookupError, match="No gradient defined for operation .*AdjustContrastv2"):
        tf.gradients(on_path, [w])
    off_path = tf.reduce_sum(tf.image.adjust_contrast(image, 2.0) * w)
    stopped = tf.reduce_sum(tf.stop_gradient(tf.image.adjust_contrast(w, 2.0)) * w)
    (off, stop) = (tf.gradients(off_path, [w])[0], tf.gradients(stopped, [w])[0])
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        values = np.arange(12, dtype=np.float32).reshape(2, 2, 3)
        contrasted = sess.run(tf.image.adjust_contrast(values, 2.0))
        np.testing.assert_allclose(sess.run(off, {image: values}), contrasted)
        assert sess.run(stop).shape == (2, 2, 3)


def test_gradient_through_unknown_batch_dimension():
    x = tf.placeholder(tf.float32, [None, 3])
    w = tf.Variable(tf.ones([3, 2]))
    b = tf.Variable(tf.zeros([2]))
    loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b))
    dw, db = tf.gradients(loss, [w, b])
    assert dw.shape == (3, 2) and db.shape.as_list() == [2]
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        gw, gb = sess.run([dw, db], {x: np.ones((5, 3))})
    np.testing.assert_allclose(gw, np.full((3, 2), 3.0))
    np.testing.assert_allclose(gb, [3.0, 3.0])


@pytest.mark.parametrize("xp", OTHER_NAMESPACES)
@pytest.mark.parametrize("row", GRAD_ROWS, ids=[row[0] for row in GRAD_ROWS])
def test_kernels_run_on_other_namespaces(row, xp):
    """The same plan (forward and gradient) on array_api_strict and CuPy gives NumPy's numbers:
    the kernels use nothing beyond the array API standard, as CuPy needs."""
    name, build, inputs, *_ = row
    xs = [tf.placeholder(tf.float64, a.shape) for a in inputs]
    y = build(*xs)
    (gx,) = tf.gradients(tf.reduce_sum(y), xs[:1])
    feeds = dict(zip(xs, inputs))
    with reference_session() as sess:
        expected = sess.run([y, gx], feeds)
        plan = sess.runner.plans.values()[-1].schedule
    out = execute(plan, {t.name: xp.asarray(v) for t, v in feeds.items()}, SessionState(), {"CPU": xp})
    for want, tensor in zip(expected, (y, gx)):
        assert_of_namespace(out[tensor.name], xp)
        np.testing.assert_allclose(to_host(out[tensor.name]), want, rtol=1e-12, atol=1e-15)  # 0 vs 1e-17


# ---- gradients registered by name: tf.RegisterGradient, gradient_override_map, NotDifferentiable ----
def test_a_registered_gradient_reverses_an_identity_as_domain_adaptation_scripts_do():
    from dflow.python.framework import ops  # where scripts import RegisterGradient from

    def flip(x, scale, name):
        @ops.RegisterGradient(name)
        def _flipped(op, grad):
            return [tf.negative(grad) * scale]

        with tf.get_default_graph().gradient_override_map({"Identity": name}):
            return tf.identity(x)

    with tf.Graph().as_default():
        x = tf.constant([1.0, 2.0, 3.0])
        y = flip(x, 0.5, "test_flip_half")
        z = flip(y * y, 2.0, "test_flip_double")
        plain = tf.identity(x)  # made outside the map: its own gradient
        (dx,) = tf.gradients(tf.reduce_sum(z), [x])
        (dplain,) = tf.gradients(tf.reduce_sum(plain * 3.0), [x])
        with tf.Session() as sess:
            got, got_plain = sess.run([dx, dplain])
    # d(sum z)/d(y*y) = -2, d(y*y)/dy = 2y, dy/dx = -0.5
    np.testing.assert_allclose(got, 2.0 * np.array([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(got_plain, [3.0, 3.0, 3.0])


def test_a_registered_gradient_sees_the_op_and_inner_maps_win_until_they_close():
    @tf.RegisterGradient("test_guided_relu")
    def _guided(op, grad):  # guided backpropagation: only positive gradients, where the ReLU passed
        return tf.where(grad > 0.0, grad * tf.cast(op.outputs[0] > 0.0, grad.dtype), tf.zeros_like(grad))

    tf.NotDifferentiable("test_blocked")
    with tf.Graph().as_default() as graph:
        x = tf.constant([-1.0, 2.0, 3.0])
        with graph.gradient_override_map({"Relu": "test_guided_relu", "Square": "test_blocked"}):
            guided = tf.nn.relu(x)
            with graph.gradient_override_map({"Relu": "test_blocked"}):
                blocked = tf.nn.relu(x)
            guided_again = tf.nn.relu(x)
            squared = tf.square(x)
        plain = tf.nn.relu(x)
        upstream = tf.constant([1.0, -1.0, 1.0])
        grads = [tf.gradients(y * upstream, [x])[0] for y in (guided, blocked, guided_again, plain)]
        assert tf.gradients(squared, [x]) == [None]
        with tf.Session() as sess:
            got = sess.run([g for g in grads if g is not None])
    assert grads[1] is None
    np.testing.assert_allclose(got[0], [0.0, 0.0, 1.0])  # x < 0 there, then a negative gradient
    np.testing.assert_allclose(got[1], got[0])
    np.testing.assert_allclose(got[2], [0.0, -1.0, 1.0])  # the ReLU's own gradient


def test_registered_gradients_refuse_what_is_wrong_by_name():
    with pytest.raises(KeyError, match="'Relu': it has one already"):
        tf.RegisterGradient("Relu")(lambda op, grad: [grad])
    tf.RegisterGradient("test_twice")(lambda op, grad: [grad])
    with pytest.raises(KeyError, match="'test_twice'"):
        tf.RegisterGradient("test_twice")(lambda op, grad: [grad])
    tf.RegisterGradient("test_too_many")(lambda op, grad: [grad, grad])
    with tf.Graph().as_default() as graph:
        x = tf.constant([1.0, 2.0])
        with pytest.raises(TypeError, match="from op types to registered gradient names"):
            with graph.gradient_override_map({"Identity": 3}):
                pass
        with graph.gradient_override_map({"Identity": "test_never_registered", "Neg": "test_too_many"}):
            unknown, many = tf.identity(x, name="unknown"), tf.negative(x)
        with pytest.raises(LookupError, match="Identity op 'unknown' to 'test_never_registered'"):
            tf.gradients(unknown, [x])
        with pytest.raises(ValueError, match="returned 2 gradients for Neg op 'Neg', which has 1 inputs"):
            tf.gradients(many, [x])


def test_custom_gradient_replaces_the_gradient_of_what_the_function_made():
    """TF's own example: log(1 + e^x) whose made-up gradient stays finite where the graph's
    (e^x / (1 + e^x), from an overflowed e^x) is NaN; two outputs, two inputs."""

    @tf.custom_gradient
    def log1pexp(x):
        e = tf.exp(x)
        return tf.log(1 + e), lambda dy: dy * (1 - 1 / (1 + e))

    @tf.custom_gradient
    def product_and_sum(a, b):
        return (a * b, a + b), lambda d_product, d_sum: (10.0 * d_product, 100.0 * d_sum)

    with tf.Graph().as_default():
        x = tf.constant(100.0)
        a, b = tf.constant(1.0), tf.constant(2.0)
        product, total = product_and_sum(a, b)
        with np.errstate(over="ignore"):
            dx, (da, db), (only_product,) = tf.Session().run(
                [tf.gradients(log1pexp(x), [x]), tf.gradients(product + total, [a, b]),
                 tf.gradients(product, [b])])
    assert dx == [1.0] and (da, db) == (10.0, 100.0)
    assert only_product == 0.0  # the unused output's gradient is zeros


def test_custom_gradient_hands_the_variables_it_read_to_grad_fn():
    with tf.Graph().as_default():
        w = tf.get_variable("w", [], initializer=tf.constant_initializer(3.0))

        @tf.custom_gradient
        def scaled(x):
            return x * w, lambda dy, variables=None: (2.0 * dy, [7.0 * dy for _ in variables])

        @tf.custom_gradient
        def forgets_the_variables(x):
            return x * w, lambda dy: dy

        x = tf.constant(4.0)
        step = tf.train.GradientDescentOptimizer(0.1).minimize(scaled(x))
        (dx,) = tf.gradients(scaled(x), [x])
        with pytest.raises(TypeError, match=r"'forgets_the_variables' reads variables \(w\), so its grad_fn"):
            forgets_the_variables(x)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(step)
            assert sess.run([w, dx]) == pytest.approx([3.0 - 0.1 * 7.0, 2.0])
