"""tf.layers and tf.contrib.layers in the TF 1.x style: variable names and TF's unique
numbering, reuse, the layers' numbers against NumPy, batch normalization's moving
averages through UPDATE_OPS, regularization losses, and a conv net built from tf.layers
that learns the digits."""

import numpy as np
import pytest

import dflow as tf
from dflow.data import iterate_batches, load_digits


def _names(variables):
    return [v.name for v in variables]


# ---- variable names, numbering and reuse ------------------------------------------------------
def test_unnamed_layers_are_numbered_as_tf_numbers_them():
    x = tf.placeholder(tf.float32, [None, 8, 8, 3])
    y = tf.layers.conv2d(x, 4, 3)
    y = tf.layers.conv2d(y, 4, 3, name="conv_named")
    y = tf.layers.conv2d(y, 4, 3)
    flat = tf.layers.flatten(y)
    tf.layers.dense(tf.layers.dense(flat, 5), 2, use_bias=False)
    assert _names(tf.trainable_variables()) == [
        "conv2d/kernel:0", "conv2d/bias:0", "conv_named/kernel:0", "conv_named/bias:0",
        "conv2d_1/kernel:0", "conv2d_1/bias:0", "dense/kernel:0", "dense/bias:0", "dense_1/kernel:0"]
    assert tf.trainable_variables()[0].shape.as_list() == [3, 3, 3, 4]


def test_a_named_layer_twice_without_reuse_fails_and_with_reuse_shares():
    x = tf.placeholder(tf.float32, [None, 4])
    a = tf.layers.dense(x, 3, name="fc")
    with pytest.raises(ValueError, match="fc/kernel already exists"):
        tf.layers.dense(x, 3, name="fc")
    b = tf.layers.dense(x, 3, name="fc", reuse=True)
    assert _names(tf.trainable_variables()) == ["fc/kernel:0", "fc/bias:0"]
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        va, vb = sess.run([a, b], {x: np.ones((2, 4))})
    np.testing.assert_array_equal(va, vb)


def test_reentering_a_scope_with_reuse_shares_the_unnamed_layers():
    """The TF 1.x examples' pattern: one model function called for training and for testing."""
    def conv_net(x, reuse, is_training):
        with tf.variable_scope("ConvNet", reuse=reuse):
            y = tf.layers.conv2d(x, 4, 3, activation=tf.nn.relu)
            y = tf.layers.max_pooling2d(y, 2, 2)
            y = tf.layers.dropout(tf.layers.flatten(y), rate=0.5, training=is_training)
            return tf.layers.dense(y, 10)

    x = tf.placeholder(tf.float32, [None, 8, 8, 1])
    train_logits = conv_net(x, reuse=False, is_training=True)
    test_logits = conv_net(x, reuse=True, is_training=False)
    assert _names(tf.trainable_variables()) == [
        "ConvNet/conv2d/kernel:0", "ConvNet/conv2d/bias:0", "ConvNet/dense/kernel:0", "ConvNet/dense/bias:0"]
    assert train_logits.shape.as_list() == test_logits.shape.as_list() == [None, 10]


def test_variable_scope_default_names_count_within_the_enclosing_scope():
    with tf.variable_scope("a"):
        with tf.variable_scope(None, default_name="block"):
            first = tf.get_variable("w", [1])
        with tf.variable_scope(None, default_name="block"):
            second = tf.get_variable("w", [1])
    with tf.name_scope("ops_only"), tf.variable_scope(None, default_name="block"):
        top = tf.get_variable("w", [1])  # a name scope does not prefix variables
    assert [first.op.name, second.op.name, top.op.name] == ["a/block/w", "a/block_1/w", "block/w"]
    with tf.variable_scope("a", reuse=True), tf.variable_scope(None, default_name="block"):
        assert tf.get_variable("w", [1]) is first  # re-entering "a" numbers its sub-scopes from 0 again
    with pytest.raises(TypeError, match="default_name"):
        with tf.variable_scope(None):
            pass


def test_a_layer_object_reuses_its_variables_on_every_call():
    layer = tf.layers.Dense(3, activation=tf.nn.relu, name="shared")
    a = layer(tf.ones([2, 4]))
    b = layer.apply(tf.zeros([2, 4]))
    assert _names(layer.trainable_variables) == ["shared/kernel:0", "shared/bias:0"]
    assert _names(tf.trainable_variables()) == ["shared/kernel:0", "shared/bias:0"]
    assert layer.kernel.shape.as_list() == [4, 3] and a.shape.as_list() == b.shape.as_list() == [2, 3]


def test_layers_inside_variable_scopes_and_non_trainable_layers():
    x = tf.placeholder(tf.float32, [None, 4])
    with tf.variable_scope("tower"):
        tf.layers.dense(x, 2)
        tf.layers.dense(x, 2, trainable=False)
    assert _names(tf.trainable_variables()) == ["tower/dense/kernel:0", "tower/dense/bias:0"]
    assert _names(tf.global_variables())[2:] == ["tower/dense_1/kernel:0", "tower/dense_1/bias:0"]


# ---- numbers ----------------------------------------------------------------------------------
def test_dense_matches_numpy_on_2d_and_3d_inputs():
    rng = np.random.default_rng(0)
    x2, x3 = rng.normal(size=(5, 4)).astype(np.float32), rng.normal(size=(2, 3, 4)).astype(np.float32)
    layer = tf.layers.Dense(6, activation="relu", bias_initializer=tf.constant_initializer(0.5))
    p3 = tf.placeholder(tf.float32, [None, None, 4])
    y2, y3 = layer(tf.constant(x2)), layer(p3)
    assert y3.shape.as_list() == [None, None, 6]
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        kernel, bias, got2, got3 = sess.run([layer.kernel, layer.bias, y2, y3], {p3: x3})
    limit = np.sqrt(6.0 / (4 + 6))  # Glorot uniform, TF's default kernel initializer
    assert np.all(np.abs(kernel) <= limit) and kernel.std() > limit / 4
    np.testing.assert_array_equal(bias, np.full(6, 0.5, np.float32))
    np.testing.assert_allclose(got2, np.maximum(x2 @ kernel + bias, 0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got3, np.maximum(x3 @ kernel + bias, 0), rtol=1e-5, atol=1e-6)


def _numpy_conv_valid(x, w, stride):
    """Cross-correlation, NHWC, VALID padding."""
    kh, kw = w.shape[:2]
    oh, ow = (x.shape[1] - kh) // stride + 1, (x.shape[2] - kw) // stride + 1
    out = np.zeros((x.shape[0], oh, ow, w.shape[3]))
    for i in range(oh):
        for j in range(ow):
            patch = x[:, i * stride:i * stride + kh, j * stride:j * stride + kw, :]
            out[:, i, j, :] = np.tensordot(patch, w, axes=([1, 2, 3], [0, 1, 2]))
    return out


def test_conv2d_defaults_are_valid_padding_and_channels_last_and_match_numpy():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 7, 7, 3)).astype(np.float32)
    y = tf.layers.conv2d(x, 5, [3, 3], strides=2, activation=tf.nn.relu)
    same = tf.layers.conv2d(x, 5, 3, padding="SAME", name="same")
    first = tf.layers.conv2d(np.transpose(x, [0, 3, 1, 2]), 5, 3, strides=(2, 2),
                             data_format="channels_first", name="first")
    assert y.shape.as_list() == [2, 3, 3, 5] and same.shape.as_list() == [2, 7, 7, 5]
    assert first.shape.as_list() == [2, 5, 3, 3]
    kernel = tf.trainable_variables()[0]
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        w = sess.run(kernel)
        tf.trainable_variables()[4].load(w, sess)  # the channels-first layer gets the same kernel
        got, got_first = sess.run([y, first])
    expected = np.maximum(_numpy_conv_valid(x, w, 2), 0)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.transpose(got_first, [0, 2, 3, 1]), _numpy_conv_valid(x, w, 2),
                               rtol=1e-4, atol=1e-5)


def test_pooling_and_flatten():
    x = np.arange(2 * 4 * 4 * 3, dtype=np.float32).reshape(2, 4, 4, 3)
    mx = tf.layers.max_pooling2d(x, pool_size=[2, 2], strides=2)
    avg = tf.layers.average_pooling2d(x, 2, 2)
    odd = tf.layers.max_pooling2d(x, 3, 2)  # 'valid' by default: (4 - 3) // 2 + 1
    flat_last = tf.layers.flatten(x)
    flat_first = tf.layers.flatten(np.transpose(x, [0, 3, 1, 2]), data_format="channels_first")
    assert odd.shape.as_list() == [2, 1, 1, 3]
    with tf.Session() as sess:
        got_max, got_avg, got_last, got_first = sess.run([mx, avg, flat_last, flat_first])
    blocks = x.reshape(2, 2, 2, 2, 2, 3)
    np.testing.assert_array_equal(got_max, blocks.max(axis=(2, 4)))
    np.testing.assert_allclose(got_avg, blocks.mean(axis=(2, 4)))
    np.testing.assert_array_equal(got_last, x.reshape(2, -1))
    np.testing.assert_array_equal(got_first, got_last)  # flatten makes the order layout-independent
    unknown = tf.placeholder(tf.float32, [None, None, None, 3])
    with tf.Session() as sess:
        assert sess.run(tf.layers.flatten(unknown), {unknown: x}).shape == (2, 48)


def test_conv2d_transpose_upsamples_and_is_the_convolutions_transpose():
    x = tf.placeholder(tf.float32, [None, 3, 3, 2])
    same = tf.layers.conv2d_transpose(x, 4, 3, strides=2, padding="same", use_bias=False)
    valid = tf.layers.conv2d_transpose(x, 4, 3, strides=2, use_bias=False)
    assert same.shape.as_list() == [None, 6, 6, 4] and valid.shape.as_list() == [None, 7, 7, 4]
    assert tf.trainable_variables()[0].shape.as_list() == [3, 3, 4, 2]
    rng = np.random.default_rng(2)
    xv, dy = rng.normal(size=(1, 3, 3, 2)), rng.normal(size=(1, 7, 7, 4))
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        y, w = sess.run([valid, tf.trainable_variables()[1]], {x: xv})
    # <conv_transpose(x), dy> == <x, conv(dy)>: the defining identity of a transpose
    np.testing.assert_allclose(np.sum(y * dy), np.sum(xv * _numpy_conv_valid(dy, w, 2)), rtol=1e-4)


def test_dropout_follows_training_as_a_bool_or_a_tensor():
    x = np.ones((200, 50), np.float32)
    training = tf.placeholder(tf.bool, [])
    off = tf.layers.dropout(x, rate=0.4)  # TF's default: training=False
    on = tf.layers.dropout(x, rate=0.4, training=True)
    fed = tf.layers.dropout(x, rate=0.4, training=training)
    with tf.Session() as sess:
        got_off, got_on = sess.run([off, on])
        fed_off, fed_on = sess.run(fed, {training: False}), sess.run(fed, {training: True})
    rate = tf.placeholder(tf.float32, [])
    fed_rate = tf.layers.dropout(x, rate=rate, training=True)
    with tf.Session() as sess:
        assert abs((sess.run(fed_rate, {rate: 0.25}) == 0).mean() - 0.25) < 0.03
    np.testing.assert_array_equal(got_off, x)
    np.testing.assert_array_equal(fed_off, x)
    for got in (got_on, fed_on):
        assert set(np.unique(got)) == {0.0, np.float32(1 / 0.6)}
        assert abs((got == 0).mean() - 0.4) < 0.03


def test_batch_normalization_trains_on_batch_moments_and_updates_moving_averages():
    rng = np.random.default_rng(3)
    data = rng.normal(2.0, 3.0, size=(16, 2, 2, 3)).astype(np.float32)
    x = tf.placeholder(tf.float32, [None, 2, 2, 3])
    training = tf.placeholder(tf.bool, [])
    y = tf.layers.batch_normalization(x, momentum=0.9, training=training)
    assert _names(tf.global_variables()) == [
        "batch_normalization/gamma:0", "batch_normalization/beta:0",
        "batch_normalization/moving_mean:0", "batch_normalization/moving_variance:0"]
    assert _names(tf.trainable_variables()) == _names(tf.global_variables())[:2]
    updates = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
    assert len(updates) == 2
    mean, var = data.mean(axis=(0, 1, 2)), data.var(axis=(0, 1, 2))
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        normalized, _ = sess.run([y, updates], {x: data, training: True})
        np.testing.assert_allclose(normalized, (data - mean) / np.sqrt(var + 1e-3), rtol=1e-4, atol=1e-4)
        moving_mean, moving_variance = sess.run(tf.global_variables()[2:])
        np.testing.assert_allclose(moving_mean, 0.1 * mean, rtol=1e-5)
        n = data.size / 3  # 4-D over the channels: TF's fused kernel averages the unbiased variance
        np.testing.assert_allclose(moving_variance, 0.9 + 0.1 * var * n / (n - 1), rtol=1e-5)
        inference = sess.run(y, {x: data, training: False})
        np.testing.assert_allclose(inference, (data - moving_mean) / np.sqrt(moving_variance + 1e-3),
                                   rtol=1e-4, atol=1e-4)
        sess.run(updates, {x: data, training: False})  # fed False: the averages stay
        np.testing.assert_allclose(sess.run(tf.global_variables()[2]), moving_mean)


def test_batch_normalization_with_a_python_bool_and_on_dense_outputs():
    x = tf.placeholder(tf.float32, [None, 4])
    test_mode = tf.layers.batch_normalization(x, center=False, scale=False)
    assert not tf.get_collection(tf.GraphKeys.UPDATE_OPS) and not tf.trainable_variables()
    tf.layers.batch_normalization(x, training=True, name="bn_train")
    assert len(tf.get_collection(tf.GraphKeys.UPDATE_OPS)) == 2
    data = np.arange(8, dtype=np.float32).reshape(2, 4)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        np.testing.assert_allclose(sess.run(test_mode, {x: data}), data / np.sqrt(1 + 1e-3), rtol=1e-6)
        sess.run(tf.get_collection(tf.GraphKeys.UPDATE_OPS), {x: data})
        moving_variance = sess.run(tf.global_variables()[-1])
    np.testing.assert_allclose(moving_variance, 0.99 + 0.01 * data.var(axis=0), rtol=1e-6)  # 2-D: biased


def test_bad_layer_arguments_say_what_was_wrong():
    x = tf.placeholder(tf.float32, [None, 8, 8, 1])
    with pytest.raises(ValueError, match="padding must be 'valid' or 'same'"):
        tf.layers.conv2d(x, 4, 3, padding="full")
    with pytest.raises(ValueError, match="data_format must be 'channels_last' or 'channels_first'"):
        tf.layers.max_pooling2d(x, 2, 2, data_format="NWHC")
    with pytest.raises(ValueError, match="last dimension of the inputs to `Dense`"):
        tf.layers.dense(tf.placeholder(tf.float32, [None, None]), 3)
    with pytest.raises(ValueError, match="activation 'swish' is not supported by dflow by name"):
        tf.layers.dense(tf.placeholder(tf.float32, [None, 2]), 3, activation="swish")
    with pytest.raises(ValueError, match="kernel_constraint is not supported"):
        tf.layers.dense(tf.placeholder(tf.float32, [None, 2]), 3, kernel_constraint=lambda w: w)


# ---- regularization ---------------------------------------------------------------------------
def test_regularizers_fill_the_regularization_losses():
    x = tf.placeholder(tf.float32, [None, 4])
    h = tf.layers.dense(x, 3, kernel_regularizer=tf.contrib.layers.l2_regularizer(0.1))
    tf.layers.dense(h, 2, kernel_regularizer=tf.contrib.layers.l1_regularizer(0.5),
                    bias_regularizer=tf.contrib.layers.l2_regularizer(0.0))  # a scale of 0 adds nothing
    w = tf.get_variable("w", [2, 2], regularizer=tf.contrib.layers.l2_regularizer(1.0))
    losses = tf.get_collection(tf.GraphKeys.REGULARIZATION_LOSSES)
    assert len(losses) == 3 and all(loss.shape.ndims == 0 for loss in losses)
    total = tf.losses.get_regularization_loss()
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        k1, k2, wv, got = sess.run([tf.global_variables()[0], tf.global_variables()[2], w, total])
    expected = 0.1 * np.sum(k1 ** 2) / 2 + 0.5 * np.sum(np.abs(k2)) + np.sum(wv ** 2) / 2
    np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_total_loss_adds_regularization_and_regularizer_errors():
    logits = tf.layers.dense(tf.ones([4, 3]), 2, kernel_regularizer=tf.contrib.layers.l2_regularizer(0.5))
    xent = tf.losses.sparse_softmax_cross_entropy(labels=tf.constant([0, 1, 1, 0]), logits=logits)
    total = tf.losses.get_total_loss()
    without = tf.losses.get_total_loss(add_regularization_losses=False)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        got_total, got_xent, got_without, reg = sess.run(
            [total, xent, without, tf.losses.get_regularization_loss()])
    assert got_without == got_xent and reg > 0
    np.testing.assert_allclose(got_total, got_xent + reg, rtol=1e-6)
    with pytest.raises(ValueError, match="scale cannot be an integer"):
        tf.contrib.layers.l2_regularizer(1)
    with pytest.raises(ValueError, match="less than 0"):
        tf.contrib.layers.l1_regularizer(-0.1)


def test_apply_regularization_sums_over_a_weights_list():
    a, b = tf.Variable([1.0, -2.0]), tf.Variable([[3.0]])
    with pytest.raises(ValueError, match="No weights to regularize"):
        tf.contrib.layers.apply_regularization(tf.contrib.layers.l2_regularizer(0.1))
    penalty = tf.contrib.layers.apply_regularization(tf.contrib.layers.l1_regularizer(0.1), [a, b])
    assert tf.get_collection(tf.GraphKeys.REGULARIZATION_LOSSES) == [penalty]
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        np.testing.assert_allclose(sess.run(penalty), 0.6, rtol=1e-6)


# ---- tf.contrib.layers ------------------------------------------------------------------------
def test_contrib_layers_names_defaults_and_normalizer():
    x = tf.placeholder(tf.float32, [None, 8, 8, 1])
    y = tf.contrib.layers.conv2d(x, 4, [3, 3])  # SAME padding and ReLU by default
    y = tf.contrib.layers.max_pool2d(y, [2, 2])
    y = tf.contrib.layers.flatten(y)
    y = tf.contrib.layers.fully_connected(y, 8, normalizer_fn=tf.contrib.layers.batch_norm,
                                          normalizer_params={"is_training": True})
    logits = tf.contrib.layers.fully_connected(y, 10, activation_fn=None, scope="logits")
    assert logits.shape.as_list() == [None, 10]
    assert _names(tf.global_variables()) == [
        "Conv/weights:0", "Conv/biases:0", "fully_connected/weights:0", "fully_connected/BatchNorm/beta:0",
        "fully_connected/BatchNorm/moving_mean:0", "fully_connected/BatchNorm/moving_variance:0",
        "logits/weights:0", "logits/biases:0"]
    assert len(tf.get_collection(tf.GraphKeys.UPDATE_OPS)) == 2
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        relu_out = sess.run(tf.get_default_graph().get_tensor_by_name("Conv/Relu:0"),
                            {x: np.random.default_rng(0).normal(size=(2, 8, 8, 1))})
    assert relu_out.shape == (2, 8, 8, 4) and relu_out.min() == 0.0


def test_contrib_batch_norm_with_inline_updates():
    x = tf.placeholder(tf.float32, [None, 3])
    y = tf.contrib.layers.batch_norm(x, decay=0.5, updates_collections=None, is_training=True)
    assert not tf.get_collection(tf.GraphKeys.UPDATE_OPS)
    data = np.array([[1.0, 2.0, 3.0], [3.0, 6.0, 9.0]], np.float32)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(y, {x: data})
        np.testing.assert_allclose(sess.run(tf.global_variables()[1]), 0.5 * data.mean(axis=0))


@pytest.mark.parametrize("make, shape, std", [
    (lambda: tf.contrib.layers.xavier_initializer(), [200, 300], np.sqrt(2.0 / 500)),
    (lambda: tf.contrib.layers.xavier_initializer(uniform=False), [200, 300], np.sqrt(2.0 / 500)),
    (lambda: tf.contrib.layers.xavier_initializer_conv2d(), [5, 5, 16, 32], np.sqrt(2.0 / (25 * 48))),
    (lambda: tf.contrib.layers.variance_scaling_initializer(), [400, 100], np.sqrt(2.0 / 400)),
    (lambda: tf.contrib.layers.variance_scaling_initializer(1.0, "FAN_OUT", True), [100, 400],
     np.sqrt(1.0 / 400)),
])
def test_contrib_initializers_have_the_documented_variance(make, shape, std):
    w = tf.get_variable("w", shape, initializer=make())
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        values = sess.run(w)
    # the truncated normal's stddev sqrt(1.3 factor / n) comes back to sqrt(factor / n) after truncation
    np.testing.assert_allclose(values.std(), std, rtol=0.05)
    assert abs(values.mean()) < std / 10


@pytest.mark.parametrize("shape", [[4, 3], [3, 4], [3, 3, 2, 5]])
def test_orthogonal_initializer_makes_orthonormal_rows_or_columns_times_the_gain(shape):
    w = tf.get_variable("w", shape, initializer=tf.orthogonal_initializer(gain=2.0, seed=3))
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        matrix = sess.run(w).reshape(-1, shape[-1]) / 2.0
    small = min(matrix.shape)
    product = matrix.T @ matrix if matrix.shape[0] >= matrix.shape[1] else matrix @ matrix.T
    np.testing.assert_allclose(product, np.eye(small), atol=1e-5)
    with pytest.raises(ValueError, match="at least two-dimensional"):
        tf.get_variable("bias", [3], initializer=tf.orthogonal_initializer())


def test_unsupported_contrib_names_say_so_and_what_to_use():
    with pytest.raises(AttributeError, match=r"tf.contrib.slim.learning.train is not supported by dflow; use "
                                             r"create_train_op with a tf.train.MonitoredTrainingSession"):
        _ = tf.contrib.slim.learning.train
    with pytest.raises(AttributeError, match=r"tf.contrib.framework.get_variables_to_restore is not "
                                             r"supported by dflow \(it has arg_scope, .*\); use "
                                             r"tf.global_variables"):
        _ = tf.contrib.framework.get_variables_to_restore
    with pytest.raises(AttributeError, match=r"tf.contrib.learn.Estimator is not supported by dflow; use "
                                             r"tf.estimator"):
        _ = tf.contrib.learn.Estimator
    with pytest.raises(AttributeError, match=r"tf.contrib.layers.embed_sequence is not supported by dflow"):
        _ = tf.contrib.layers.embed_sequence
    with pytest.raises(AttributeError, match=r"tf.contrib.bayesflow is not supported by dflow"):
        _ = tf.contrib.bayesflow


def test_arg_scope_sets_defaults_that_a_call_and_an_inner_scope_override():
    """The Hands-On ML book's stacked autoencoder, and slim's networks: the scope's arguments are
    the listed layers' defaults, an argument the call gives wins, an inner scope adds to the outer
    one, a saved scope is entered again, and the scope ends with its block."""
    fully_connected, conv2d = tf.contrib.layers.fully_connected, tf.contrib.slim.conv2d
    scope_of = tf.contrib.framework.arg_scope
    regularizer = tf.contrib.layers.l2_regularizer(0.01)
    x = tf.zeros([2, 4])
    with scope_of([fully_connected, conv2d], activation_fn=tf.nn.elu, weights_regularizer=regularizer):
        hidden = fully_connected(x, 3)
        plain = fully_connected(x, 3, activation_fn=None)
        with scope_of([fully_connected], activation_fn=tf.nn.tanh, num_outputs=5) as inner:
            wide = fully_connected(x)
            image = conv2d(tf.zeros([1, 4, 4, 1]), 2, 3)
        with scope_of(inner):
            again = fully_connected(hidden)
    after = fully_connected(x, 3)
    assert [t.op.type for t in (hidden, plain, wide, image, again, after)] == [
        "Elu", "BiasAdd", "Tanh", "Elu", "Tanh", "Relu"]
    assert wide.shape.as_list() == [2, 5] and again.shape.as_list() == [2, 5]
    assert len(tf.losses.get_regularization_losses()) == 5  # every layer in the scope, not the last
    assert tf.contrib.slim.arg_scope is scope_of and tf.contrib.framework.current_arg_scope() == {}


def test_arg_scope_says_what_it_cannot_take():
    with pytest.raises(ValueError, match="relu is not decorated with @add_arg_scope"):
        with tf.contrib.framework.arg_scope([tf.nn.relu], name="x"):
            pass
    with pytest.raises(TypeError, match="fully_connected has no argument activation"):
        with tf.contrib.framework.arg_scope([tf.contrib.layers.fully_connected], activation=tf.nn.elu):
            pass
    with pytest.raises(TypeError, match="a list or tuple of ops"):
        with tf.contrib.framework.arg_scope(tf.contrib.layers.fully_connected, activation_fn=None):
            pass
    assert tf.contrib.framework.current_arg_scope() == {}


# ---- a TF 1.x style conv net that learns the digits --------------------------------------------
def test_a_tf_layers_conv_net_learns_the_digits():
    digits = load_digits((8, 8, 1))
    tf.set_random_seed(0)
    images = tf.placeholder(tf.float32, [None, 8, 8, 1], name="images")
    labels = tf.placeholder(tf.int64, [None], name="labels")
    is_training = tf.placeholder(tf.bool, [], name="is_training")
    net = tf.layers.conv2d(images, 16, 3, padding="same", activation=tf.nn.relu)
    net = tf.layers.batch_normalization(net, momentum=0.9, training=is_training)  # averages fit 100 steps
    net = tf.layers.max_pooling2d(net, 2, 2)
    net = tf.layers.conv2d(net, 32, 3, padding="same", activation=tf.nn.relu)
    net = tf.layers.average_pooling2d(net, 2, 2)
    net = tf.layers.dense(tf.layers.flatten(net), 64, activation=tf.nn.relu,
                          kernel_regularizer=tf.contrib.layers.l2_regularizer(1e-4))
    net = tf.layers.dropout(net, rate=0.3, training=is_training)
    logits = tf.layers.dense(net, 10)
    tf.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
    loss = tf.losses.get_total_loss()
    with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
        train_op = tf.train.AdamOptimizer(0.01).minimize(loss)
    accuracy, update_accuracy = tf.metrics.accuracy(labels=labels, predictions=tf.argmax(logits, 1))
    with tf.Session() as sess:
        sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
        batches = iterate_batches(digits.train_images, digits.train_labels, 32, seed=0)
        for _ in range(100):
            x, y = next(batches)
            sess.run(train_op, {images: x, labels: y, is_training: True})
        test_feed = {images: digits.test_images, labels: digits.test_labels, is_training: False}
        sess.run(update_accuracy, test_feed)
        test_accuracy = sess.run(accuracy)
    assert test_accuracy > 0.9, test_accuracy
def test_conv1d_and_1d_pooling_match_numpy():
    x = np.random.default_rng(4).normal(size=(2, 9, 3)).astype(np.float32)
    y = tf.layers.conv1d(x, 4, 3, strides=2)
    first = tf.layers.conv1d(np.transpose(x, [0, 2, 1]), 4, [3], strides=2, data_format="channels_first")
    pooled = tf.layers.max_pooling1d(x, 2, 2)
    averaged = tf.layers.average_pooling1d(x, 3, 1, padding="same")
    assert _names(tf.trainable_variables()) == ["conv1d/kernel:0", "conv1d/bias:0", "conv1d_1/kernel:0",
                                                "conv1d_1/bias:0"]
    assert tf.trainable_variables()[0].shape.as_list() == [3, 3, 4]
    assert y.shape.as_list() == [2, 4, 4] and averaged.shape.as_list() == [2, 9, 3]
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        kernel = sess.run(tf.trainable_variables()[0])
        tf.trainable_variables()[2].load(kernel, sess)
        got, got_first, got_pooled = sess.run([y, first, pooled])
    windows = [x[:, 2 * i:2 * i + 3] for i in range(4)]
    expected = np.stack([np.tensordot(w, kernel, axes=([1, 2], [0, 1])) for w in windows], 1)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.transpose(got_first, [0, 2, 1]), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got_pooled, x[:, :8].reshape(2, 4, 2, 3).max(axis=2))


def _run_all(*fetches):
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        return sess.run(list(fetches))


def test_contrib_layer_norm_matches_numpy():
    x = np.random.default_rng(5).normal(2.0, 3.0, size=(4, 3, 5)).astype(np.float32)
    y = tf.contrib.layers.layer_norm(x)
    assert _names(tf.trainable_variables()) == ["LayerNorm/beta:0", "LayerNorm/gamma:0"]
    assert tf.trainable_variables()[0].shape.as_list() == [5]
    (got,) = _run_all(y)
    mean, var = x.mean(axis=(1, 2), keepdims=True), x.var(axis=(1, 2), keepdims=True)
    np.testing.assert_allclose(got, (x - mean) / np.sqrt(var + 1e-12), rtol=1e-4, atol=1e-5)


def test_optimize_loss_runs_update_ops_clips_and_steps():
    """contrib's one-call training step: an optimizer by name, a learning-rate variable, the
    UPDATE_OPS first, gradients clipped by their global norm."""
    w = tf.Variable([3.0, 4.0], name="w")
    counter = tf.Variable(0.0, trainable=False, name="counter")
    tf.add_to_collection(tf.GraphKeys.UPDATE_OPS, tf.assign_add(counter, 1.0))
    step = tf.train.get_or_create_global_step()
    loss = 0.5 * tf.reduce_sum(tf.square(w))  # gradient w, norm 5
    train = tf.contrib.layers.optimize_loss(loss, step, 0.1, "SGD", clip_gradients=1.0)
    assert "OptimizeLoss/learning_rate" in {v.op.name for v in tf.global_variables()}
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        returned = sess.run(train)
        got_w, got_counter, got_step = sess.run([w, counter, step])
    assert returned == pytest.approx(12.5)  # the loss before the step
    np.testing.assert_allclose(got_w, [3.0 - 0.1 * 0.6, 4.0 - 0.1 * 0.8], rtol=1e-6)  # clipped to norm 1
    assert got_counter == 1.0 and got_step == 1
    with pytest.raises(ValueError, match="Optimizer name should be one of"):
        tf.contrib.layers.optimize_loss(loss, step, 0.1, "Nadam")


def test_optimize_loss_without_a_global_step_counts_nothing_and_a_decay_needs_one():
    """As TF 1.x's: no global step (none given, none in the graph) is no step counted."""
    w = tf.Variable([3.0, 4.0], name="w")
    loss = 0.5 * tf.reduce_sum(tf.square(w))
    train = tf.contrib.layers.optimize_loss(loss, tf.train.get_global_step(), 0.1, "SGD")
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(train)
        assert sess.run(w).tolist() == pytest.approx([3.0 * 0.9, 4.0 * 0.9], rel=1e-6)
    with pytest.raises(ValueError, match="decays by the global step.*get_or_create_global_step"):
        tf.contrib.layers.optimize_loss(loss, None, 0.1, "SGD", learning_rate_decay_fn=lambda lr, step: lr)


def test_contrib_conv2d_transpose_and_one_hot_encoding():
    x = tf.placeholder(tf.float32, [None, 4, 4, 3])
    y = tf.contrib.layers.conv2d_transpose(x, 2, 3, stride=2)
    onehot = tf.contrib.layers.one_hot_encoding([0, 2], 3)
    assert y.shape.as_list() == [None, 8, 8, 2]
    assert _names(tf.trainable_variables()) == ["Conv2d_transpose/weights:0", "Conv2d_transpose/biases:0"]
    assert tf.trainable_variables()[0].shape.as_list() == [3, 3, 2, 3]
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        got, got_onehot = sess.run([y, onehot], {x: np.random.default_rng(6).normal(size=(2, 4, 4, 3))})
    assert got.min() == 0.0 and got.max() > 0.0  # ReLU by default
    np.testing.assert_array_equal(got_onehot, [[1, 0, 0], [0, 0, 1]])


@pytest.mark.parametrize("make, shape, std", [
    (lambda: tf.variance_scaling_initializer(), [400, 100], np.sqrt(1.0 / 400)),
    (lambda: tf.variance_scaling_initializer(2.0, "fan_out", "uniform"), [100, 400], np.sqrt(2.0 / 400)),
    (lambda: tf.variance_scaling_initializer(2.0, distribution="untruncated_normal"), [3, 3, 20, 8],
     np.sqrt(2.0 / 180)),
    (lambda: tf.glorot_normal_initializer(), [200, 300], np.sqrt(2.0 / 500)),
])
def test_core_variance_scaling_initializers(make, shape, std):
    """As tensorflow/models' ResNet passes them: ``kernel_initializer=tf.variance_scaling_initializer()``."""
    (values,) = _run_all(tf.get_variable("kernel", shape, initializer=make()))
    np.testing.assert_allclose(values.std(), std, rtol=0.06)
    assert abs(values.mean()) < std / 10


def test_a_layer_s_input_spec_refuses_inputs_that_break_it_by_name():
    class Scale(tf.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.input_spec = tf.layers.InputSpec(min_ndim=2, axes={-1: 3}, dtype=tf.float32)

        def call(self, inputs):
            return inputs * 2.0

    with tf.Graph().as_default():
        layer = Scale(name="scale")
        assert layer(tf.zeros([4, 3])).shape.as_list() == [4, 3]
        assert layer(tf.zeros([2, 5, 3])).shape.as_list() == [2, 5, 3]
        for bad, message in [(tf.zeros([3]), "expected min_ndim=2, found ndim=1"),
                             (tf.zeros([4, 2]), "expected axis -1 of size 3, found size 2"),
                             (tf.zeros([4, 3], tf.float64), "expected dtype=float32, found dtype=float64")]:
            with pytest.raises(ValueError, match=f"Input 0 of layer scale is incompatible.*{message}"):
                layer(bad)
        assert layer(tf.placeholder(tf.float32)).shape.ndims is None  # an unknown rank is not refused
