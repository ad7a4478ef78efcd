"""``tf.cond``: the taken branch alone runs, gradients flow through it (reading the forward
values, not computing them again), and what is wrong is refused by name. The batch-norm numbers
are TensorFlow 2.21's (``compat.v1``) for the same script."""

from __future__ import annotations

import json

import numpy as np
import pytest
from namespaces import OTHER_NAMESPACES, assert_same_on

import dflow as tf


def _batch_norm(x, phase_train):
    """The TF 1.x batch norm that scripts copied: moving averages updated in the training branch."""
    beta = tf.Variable(tf.zeros([4]), name="beta")
    gamma = tf.Variable(tf.ones([4]), name="gamma")
    batch_mean, batch_var = tf.nn.moments(x, [0, 1, 2], name="moments")
    ema = tf.train.ExponentialMovingAverage(decay=0.5)

    def mean_var_with_update():
        with tf.control_dependencies([ema.apply([batch_mean, batch_var])]):
            return tf.identity(batch_mean), tf.identity(batch_var)

    mean, var = tf.cond(phase_train, mean_var_with_update,
                        lambda: (ema.average(batch_mean), ema.average(batch_var)))
    return tf.nn.batch_normalization(x, mean, var, beta, gamma, 1e-3), ema.average(batch_mean)


def test_batch_norm_under_is_training_trains_and_evaluates_as_tensorflow_does():
    x = tf.placeholder(tf.float32, [4, 3, 3, 2])
    phase = tf.placeholder(tf.bool, [])
    w = tf.Variable(np.arange(8, dtype=np.float32).reshape(2, 2, 2, 1) / 10)
    y, moving_mean = _batch_norm(tf.nn.conv2d(x, tf.reshape(w, [1, 1, 2, 4]), [1, 1, 1, 1], "SAME"), phase)
    weight = tf.cond(phase, lambda: tf.constant(0.5), lambda: tf.constant(1.0))
    loss = tf.reduce_mean(tf.square(y - 1.0)) * weight
    train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
    data = np.random.RandomState(0).rand(4, 3, 3, 2).astype(np.float32)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        losses = [sess.run([loss, train], {x: data, phase: True})[0] for _ in range(3)]
        averages = sess.run(moving_mean)
        evaluated = sess.run(loss, {x: data, phase: False})
        assert sess.run(moving_mean).tolist() == averages.tolist()  # evaluating updates nothing
        weights = sess.run(w).ravel()
    np.testing.assert_allclose(losses, [0.977553, 0.930069, 0.884903], rtol=1e-5)
    np.testing.assert_allclose(averages, [0.16682, 0.25493, 0.34283, 0.43047], atol=1e-5)
    np.testing.assert_allclose(evaluated, 1.389903, rtol=1e-5)
    tensorflow_weights = [0.00105, 0.09909, 0.19899, 0.29921, 0.3872, 0.49345, 0.59655, 0.69805]
    np.testing.assert_allclose(weights, tensorflow_weights, atol=1e-5)


def test_the_gradient_reads_the_forward_branchs_values_a_dropout_mask_included():
    x = tf.constant(np.linspace(1.0, 2.0, 200, dtype=np.float32))
    training = tf.placeholder(tf.bool, [])
    y = tf.cond(training, lambda: tf.nn.dropout(x, keep_prob=0.5), lambda: x)
    (dx,) = tf.gradients(tf.reduce_sum(y), [x])
    with tf.Session() as sess:
        kept, grad = sess.run([y, dx], {training: True})
        _, untrained = sess.run([y, dx], {training: False})
    assert 50 < np.count_nonzero(kept) < 150
    np.testing.assert_array_equal(grad, np.where(kept != 0, 2.0, 0.0))  # the same mask as the forward pass
    assert untrained.tolist() == [1.0] * 200


def test_branches_may_differ_in_shape_return_outside_tensors_and_nest():
    x = tf.placeholder(tf.float32, [2, None])
    which = tf.placeholder(tf.bool, [])
    wide = tf.cond(which, lambda: tf.zeros([2, 3]), lambda: tf.ones([2, 5]))
    assert wide.shape.as_list() == [2, None]
    pair = tf.cond(which, lambda: (x, [x * 2.0]), lambda: (x + 1.0, [0.5 * x]))
    single = tf.cond(which, lambda: [x], lambda: [x], strict=True)
    assert isinstance(pair, tuple) and isinstance(pair[1], list) and isinstance(single, list)
    inner = tf.cond(which, lambda: tf.cond(which, lambda: x * 3.0, lambda: x), lambda: -x)
    (d_inner,) = tf.gradients(tf.reduce_sum(inner), [x])
    feed = {x: [[1.0, 2.0], [3.0, 4.0]]}
    with tf.Session() as sess:
        assert sess.run(wide, {**feed, which: False}).shape == (2, 5)
        got = sess.run([pair, d_inner], {**feed, which: True})
    assert got[0][0].tolist() == feed[x] and got[0][1][0].tolist() == [[2.0, 4.0], [6.0, 8.0]]
    assert got[1].tolist() == [[3.0, 3.0], [3.0, 3.0]]


def test_what_is_wrong_is_refused_by_name():
    x = tf.constant(1.0)
    with pytest.raises(TypeError, match="not a Python bool"):
        tf.cond(True, lambda: x, lambda: x)
    with pytest.raises(ValueError, match="boolean scalar, got float32"):
        tf.cond(x, lambda: x, lambda: x)
    which = tf.placeholder(tf.bool, [])
    with pytest.raises(ValueError, match="different structures: true_fn a tuple of 2, false_fn a tensor"):
        tf.cond(which, lambda: (x, x), lambda: x)
    with pytest.raises(TypeError, match="different dtypes at output 0: true_fn float32, false_fn int32"):
        tf.cond(which, lambda: x, lambda: tf.constant(1))
    with pytest.raises(TypeError, match="two callables"):
        tf.cond(which, x, lambda: x)


def test_a_graph_with_a_cond_survives_the_json_round_trip():
    graph = tf.Graph()
    with graph.as_default():
        x = tf.placeholder(tf.float32, [2], name="x")
        which = tf.placeholder(tf.bool, [], name="which")
        tf.identity(tf.cond(which, lambda: x * 2.0, lambda: x - 1.0), name="out")
    restored = tf.import_graph_def(json.loads(json.dumps(graph.as_graph_def())))
    with restored.as_default(), tf.Session() as sess:
        assert sess.run("out:0", {"x:0": [1.0, 2.0], "which:0": True}).tolist() == [2.0, 4.0]
        assert sess.run("out:0", {"x:0": [1.0, 2.0], "which:0": False}).tolist() == [0.0, 1.0]


def test_case_takes_the_first_true_predicate_and_checks_exclusive_ones():
    x = tf.placeholder(tf.int32, [])
    sign = tf.case([(x < 0, lambda: tf.constant(-1)), (tf.equal(x, 0), lambda: tf.constant(0))],
                   default=lambda: tf.constant(1))
    last_is_default = tf.case([(x < 0, lambda: tf.constant(-1)), (x > 5, lambda: tf.constant(5))])
    exclusive = tf.case([(x < 10, lambda: tf.constant(1)), (x < 20, lambda: tf.constant(2))],
                        default=lambda: tf.constant(3), exclusive=True)
    with tf.Session() as sess:
        assert [sess.run(sign, {x: v}) for v in (-3, 0, 7)] == [-1, 0, 1]
        assert [sess.run(last_is_default, {x: v}) for v in (-3, 0, 7)] == [-1, 5, 5]
        assert [sess.run(exclusive, {x: v}) for v in (15, 25)] == [2, 3]
        with pytest.raises(tf.errors.InvalidArgumentError, match="more than one predicate is true"):
            sess.run(exclusive, {x: 5})
    with pytest.raises(TypeError, match=r"\(pred, fn\) pairs"):
        tf.case([(x < 0, 1)])


def test_map_fn_runs_fn_per_slice_and_differentiates_slices_and_what_fn_reads():
    x = tf.placeholder(tf.float32, [None, 3])
    w = tf.Variable([1.0, 2.0, 3.0])
    y = tf.map_fn(lambda row: tf.reduce_sum(row * row * w), x)
    doubled, summed = tf.map_fn(lambda pair: (pair[0] * 2.0, pair[1] + pair[0]), (x, x * 10.0))
    dx, dw = tf.gradients(tf.reduce_sum(y), [x, w])
    rows = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        got = sess.run([y, dx, dw, doubled, summed], {x: rows})
        empty = sess.run(y, {x: np.zeros((0, 3), np.float32)})
    np.testing.assert_allclose(got[0], (rows * rows * [1, 2, 3]).sum(axis=1))
    np.testing.assert_allclose(got[1], 2 * rows * [1, 2, 3])
    np.testing.assert_allclose(got[2], (rows * rows).sum(axis=0))  # summed over the slices
    np.testing.assert_allclose(got[3], 2 * rows)
    np.testing.assert_allclose(got[4], 11 * rows)
    assert empty.shape == (0,)


def test_map_fn_standardizes_each_image_of_a_batch_of_unknown_size():
    images = tf.placeholder(tf.float32, [None, 4, 4, 3])
    standardized = tf.map_fn(tf.image.per_image_standardization, images)
    assert standardized.shape.as_list() == [None, 4, 4, 3]
    batch = np.random.RandomState(1).rand(5, 4, 4, 3).astype(np.float32)
    with tf.Session() as sess:
        got = sess.run(standardized, {images: batch})
    for image, result in zip(batch, got):
        expected = (image - image.mean()) / max(image.std(), 1 / np.sqrt(image.size))
        np.testing.assert_allclose(result, expected, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="slices its elems along dimension 0, but .* is a scalar"):
        tf.map_fn(lambda v: v, tf.constant(1.0))


def test_while_loop_runs_until_cond_fails_when_the_step_runs():
    n = tf.placeholder(tf.int32, [])
    count = tf.while_loop(lambda i: tf.less(i, n), lambda i: tf.add(i, 1), [tf.constant(0)])
    row = tf.constant([[1.0, 1.0]])
    steps, rows = tf.while_loop(
        lambda j, acc: j < n, lambda j, acc: (j + 1, tf.concat([acc, row * tf.cast(j, tf.float32)], 0)),
        [tf.constant(0), tf.zeros([1, 2])], shape_invariants=[tf.TensorShape([]), tf.TensorShape([None, 2])])
    w = tf.Variable(2.0)
    capped = tf.while_loop(lambda k, v: k < 3, lambda k, v: [k + 1, v * w], [0, 1.0], maximum_iterations=2)
    assert rows.shape.as_list() == [None, 2]
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        assert sess.run(count, {n: 7}) == 7 and sess.run(count, {n: -1}) == 0
        assert sess.run(rows, {n: 3}).tolist() == [[0, 0], [0, 0], [1, 1], [2, 2]]
        assert [float(v) for v in sess.run(capped)] == [2.0, 4.0]  # two iterations of three
    (d_w,) = tf.gradients(capped[1], [w])  # v * w twice: d(w^2)/dw
    (d_row,) = tf.gradients(tf.reduce_sum(rows), [row])  # row * j for j = 0..n-1
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        assert float(sess.run(d_w)) == 4.0
        assert sess.run(d_row, {n: 3}).tolist() == [[3.0, 3.0]]
        assert sess.run(d_row, {n: 0}).tolist() == [[0.0, 0.0]]
    stopped = tf.while_loop(lambda k, v: k < 3, lambda k, v: [k + 1, v * w], [0, 1.0], back_prop=False)
    assert tf.gradients(stopped[1], [w]) == [None]
    with pytest.raises(ValueError, match=r"loop variable 0's shape: \(\) -> \(2,\); give shape_invariants"):
        tf.while_loop(lambda i: i < 3, lambda i: tf.concat([[i], [i]], 0), [tf.constant(0)])
    with pytest.raises(ValueError, match="body returns a list of 1, but loop_vars are a list of 2"):
        tf.while_loop(lambda i, j: i < 3, lambda i, j: i + 1, [0, 1])


def test_while_loop_gradients_are_tensorflows():
    """A tanh recurrence over a placeholder's count of steps, with a running sum of squares: the
    loss's gradients with respect to the start value, the weights and the bias, as TensorFlow 2.21's
    compat.v1 while_loop gives them (same graph, same values)."""
    x = tf.constant([0.5, -1.0, 2.0])
    w = tf.constant([[0.3, -0.2, 0.1], [0.05, 0.4, -0.3], [0.2, 0.1, 0.25]])
    b = tf.constant([0.1, 0.0, -0.1])
    n = tf.placeholder(tf.int32, [])

    def body(i, h, total):
        h = tf.tanh(tf.reshape(tf.matmul(w, tf.reshape(h, [3, 1])), [3]) + b * tf.cast(i, tf.float32))
        return i + 1, h, total + tf.reduce_sum(h * h)

    _, h, total = tf.while_loop(lambda i, h, t: i < n, body, [tf.constant(0), x, tf.constant(0.0)])
    loss = tf.reduce_sum(h) + 0.5 * total
    grads = tf.gradients(loss, [x, w, b])
    with tf.Session() as sess:
        got = sess.run([loss, *grads], {n: 5})
        no_steps = sess.run(grads, {n: 0})
    tensorflow = [1.262866, [0.224252, -0.218744, 0.314826],
                  [[1.407893, -1.076203, 0.725797], [-0.025287, 0.880642, -1.468296],
                   [0.324234, -0.474518, 1.007582]], [8.285228, 4.204632, 0.894436]]
    for value, want in zip(got, tensorflow):
        np.testing.assert_allclose(value, want, rtol=2e-5, atol=2e-6)
    assert [g.tolist() for g in no_steps] == [[1.0, 1.0, 1.0], [[0.0] * 3] * 3, [0.0] * 3]


def test_a_loop_counter_indexes_a_tensor_as_tf_s_strided_slice_takes_it():
    """The metric-averaging loop of a public training script: ``values[i]`` in the body."""
    values = tf.constant([1.0, 2.0, 3.0, 4.0])

    def body(i, sums):
        return i + 1, [sums[0] + values[i], sums[1] + values[i] * values[i]]

    start = [tf.constant(0), [tf.constant(0.0), tf.constant(0.0)]]
    count, (total, squares) = tf.while_loop(lambda i, sums: i < 4, body, start, back_prop=False)
    grid = tf.constant(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    i, j = tf.constant(1), tf.constant(2)
    picked = [grid[i], grid[:, j], grid[i, 1:, j], grid[None, i, :, 0]]
    (d_grid,) = tf.gradients(tf.reduce_sum(grid[i, :, j]), [grid])
    with tf.Session() as sess:
        assert [float(v) for v in sess.run([total, squares])] == [10.0, 30.0] and sess.run(count) == 4
        got, grad = sess.run([picked, d_grid])
    expected = np.arange(24).reshape(2, 3, 4)
    for value, want in zip(got, [expected[1], expected[:, 2], expected[1, 1:, 2], expected[None, 1, :, 0]]):
        assert value.tolist() == want.tolist()
    assert np.argwhere(grad).tolist() == [[1, 0, 2], [1, 1, 2], [1, 2, 2]]
    with pytest.raises(TypeError, match="a tensor index must be a scalar integer"):
        grid[tf.constant(1.0)]


def _tanh_rnn():
    """A TF 1.x-style recurrence over a TensorArray of inputs, its outputs written to another."""
    rng = np.random.default_rng(0)
    steps, batch, width, hidden = 4, 2, 3, 5
    values = [rng.standard_normal((steps, batch, width)), rng.standard_normal((width, hidden)) * 0.5,
              rng.standard_normal((hidden, hidden)) * 0.5, rng.standard_normal(hidden) * 0.1,
              rng.standard_normal((batch, hidden)), rng.standard_normal((steps, batch, hidden))]
    inputs, wx, wh, b, h0, mix = [tf.constant(v.astype(np.float32)) for v in values]
    input_ta = tf.TensorArray(tf.float32, size=steps).unstack(inputs)

    def body(t, h, out_ta):
        h = tf.tanh(tf.matmul(input_ta.read(t), wx) + tf.matmul(h, wh) + b)
        return t + 1, h, out_ta.write(t, h)

    _, h, out_ta = tf.while_loop(lambda t, h, o: t < steps, body,
                                 [tf.constant(0), h0, tf.TensorArray(tf.float32, size=steps)])
    outputs = out_ta.stack()
    loss = tf.reduce_sum(outputs * mix) + tf.reduce_sum(h * h)
    return outputs, loss, tf.gradients(loss, [inputs, wx, wh, b, h0])


def test_a_tensor_array_recurrence_and_its_gradients_are_tensorflows():
    outputs, loss, grads = _tanh_rnn()
    assert outputs.shape.as_list() == [4, 2, 5]
    with tf.Session() as sess:
        first = sess.run([loss, *grads])
        again = sess.run([loss, *grads])  # each step makes its arrays afresh
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    # TensorArray.unstack/read/write/stack in a compat.v1 while_loop on TensorFlow 2.21, same values
    assert float(first[0]) == pytest.approx(3.0999, abs=1e-4)
    tensorflow_sums = [9.951847, 25.672180, 36.671448, 13.679436, 5.781421]
    assert [float(np.abs(g).sum()) for g in first[1:]] == pytest.approx(tensorflow_sums, rel=1e-5)
    np.testing.assert_allclose(first[1].ravel()[:4], [0.39369, -0.03612, -0.05029, -0.77803], atol=1e-5)
    np.testing.assert_allclose(first[4], [3.85995, -2.46554, 1.19311, 0.52392, -5.63692], atol=1e-5)


def test_tensor_array_writes_reads_and_their_errors():
    grows = tf.TensorArray(tf.float32, size=1, dynamic_size=True)
    for i in range(3):
        grows = grows.write(i, tf.fill([2], float(i)))
    picked = grows.gather([2, 0])
    scattered = tf.TensorArray(tf.int32, size=3).scatter([2, 0, 1], tf.constant([[7], [8], [9]]))
    fixed = tf.TensorArray(tf.float32, size=2)
    with tf.Session() as sess:
        assert sess.run(grows.stack()).tolist() == [[0, 0], [1, 1], [2, 2]]
        assert sess.run([picked, grows.size()])[0].tolist() == [[2, 2], [0, 0]]
        assert sess.run(grows.size()) == 3
        assert sess.run(scattered.stack()).tolist() == [[8], [9], [7]]
        assert sess.run(scattered.read(0)).tolist() == [8]
        with pytest.raises(tf.errors.InvalidArgumentError, match="index 1 has not been written"):
            sess.run(fixed.write(0, [1.0]).read(1))
        with pytest.raises(tf.errors.InvalidArgumentError, match="index 2 is outside its size 2 .*dynamic"):
            sess.run(fixed.write(2, [1.0]).flow)
    with pytest.raises(ValueError, match=r"holds elements of shape \(2,\); a value of shape \(3,\)"):
        grows.write(3, tf.zeros([3]))
    with pytest.raises(NotImplementedError, match="stack\\(\\) the elements"):
        grows.concat()


@pytest.mark.parametrize("xp", OTHER_NAMESPACES)
def test_tensor_array_kernels_run_on_other_namespaces(xp):
    outputs, loss, grads = _tanh_rnn()
    assert_same_on(xp, [outputs, loss, *grads], rtol=1e-5)


def test_scan_foldl_foldr_and_their_gradients_are_tensorflows():
    x = tf.constant([[1.0, 2.0], [3.0, -1.0], [0.5, 4.0], [2.0, 2.0]])
    w = tf.constant([0.5, -0.3])
    decayed = tf.scan(lambda a, e: a * w + e, x)
    sums, products = tf.scan(lambda a, e: (a[0] + e, a[1] * e), x, initializer=(tf.zeros([2]), tf.ones([2])),
                             reverse=True)
    product = tf.foldl(lambda a, e: a * e, x)
    doubled = tf.foldr(lambda a, e: a * 2.0 + e, x, initializer=tf.constant([1.0, 1.0]))
    loss = (tf.reduce_sum(decayed * decayed) + tf.reduce_sum(sums * products) + tf.reduce_sum(product)
            + tf.reduce_sum(doubled * doubled))
    d_x, d_w = tf.gradients(loss, [x, w])
    fed = tf.placeholder(tf.float32, [None])
    running = tf.scan(lambda a, e: a + e, fed)
    assert decayed.shape.as_list() == [4, 2]
    with tf.Session() as sess:
        got = sess.run([decayed, sums, products, product, doubled, loss, d_x, d_w])
        assert sess.run(running, {fed: [1, 2, 3, 4, 5]}).tolist() == [1, 3, 6, 10, 15]
    # TensorFlow 2.21's compat.v1 scan/foldl/foldr on the same graph
    tensorflow = [[[1.0, 2.0], [3.5, -1.6], [2.25, 4.48], [3.125, 0.656]],
                  [[6.5, 7.0], [5.5, 5.0], [2.5, 6.0], [2.0, 2.0]],
                  [[3.0, -16.0], [3.0, -8.0], [1.0, 8.0], [2.0, 2.0]],
                  [3.0, -16.0], [41.0, 48.0], 3969.6389,
                  [[114.9062, 21.731], [193.8125, 330.2301], [425.625, 346.5664], [694.0, 697.312]],
                  [51.5625, -19.3683]]
    for value, want in zip(got, tensorflow):
        np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-4)
    with pytest.raises(ValueError, match="returns a tuple of 2, but the accumulated value is a tensor"):
        tf.scan(lambda a, e: (a, e), x)


def test_while_loop_gradient_reuses_the_forward_runs_iterations():
    """A step's gradient takes the iterations' values the forward loop kept instead of running the
    loop again, and lets them go."""
    calls = []

    def counted(x):
        calls.append(1)
        return x

    w = tf.Variable(1.5)

    def body(i, v):
        seen = tf.py_func(counted, [v], tf.float32)  # counts the body's runs; no gradient flows in it
        seen.set_shape(v.shape)
        return i + 1, v * w + 0.0 * tf.stop_gradient(seen)

    _, v = tf.while_loop(lambda i, v: i < 4, body, [0, tf.constant(1.0)])
    (d_w,) = tf.gradients(v, [w])
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        value, grad = sess.run([v, d_w])
        assert [k for k in sess.runner.state.resources if k.startswith("WhileHistory")] == []
    assert (float(value), float(grad)) == pytest.approx((1.5 ** 4, 4 * 1.5 ** 3))
    assert len(calls) == 4  # the forward loop's (8 if the gradient ran the loop again)
