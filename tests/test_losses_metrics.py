"""tf.losses (weighted, reduced, collected), tf.metrics (streaming, local variables) and
tf.train.ExponentialMovingAverage (shadow names, updates, restoring the averages with a
Saver), each against NumPy in the TF 1.x style scripts use them."""

import numpy as np
import pytest

import dflow as tf

LOGITS = np.array([[2.0, 1.0, 0.1], [0.5, 2.5, 0.3], [1.0, 1.0, 3.0], [0.2, 0.1, 0.0]], np.float32)
LABELS = np.array([0, 1, 1, 2])


def _log_softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def _run(*fetches):
    with tf.Session() as sess:
        sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
        return sess.run(list(fetches))


# ---- tf.losses --------------------------------------------------------------------------------
def test_cross_entropies_match_numpy_and_join_the_losses_collection():
    onehot = np.eye(3, dtype=np.float32)[LABELS]
    weights = np.array([1.0, 0.0, 2.0, 1.0], np.float32)
    per_example = -(onehot * _log_softmax(LOGITS)).sum(axis=1)
    sparse = tf.losses.sparse_softmax_cross_entropy(labels=LABELS, logits=LOGITS)
    dense = tf.losses.softmax_cross_entropy(onehot_labels=onehot, logits=LOGITS, weights=weights)
    smoothed = tf.losses.softmax_cross_entropy(onehot, LOGITS, label_smoothing=0.3)
    assert tf.get_collection(tf.GraphKeys.LOSSES) == [sparse, dense, smoothed] == tf.losses.get_losses()
    got_sparse, got_dense, got_smoothed = _run(sparse, dense, smoothed)
    np.testing.assert_allclose(got_sparse, per_example.mean(), rtol=1e-5)
    # SUM_BY_NONZERO_WEIGHTS: the weighted sum over the 3 examples whose weight is not 0
    np.testing.assert_allclose(got_dense, (per_example * weights).sum() / 3, rtol=1e-5)
    soft = onehot * 0.7 + 0.1
    np.testing.assert_allclose(got_smoothed, -(soft * _log_softmax(LOGITS)).sum(axis=1).mean(), rtol=1e-5)


def test_sigmoid_and_regression_losses():
    labels = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
    logits = np.array([[2.0, -1.0], [0.5, 0.3]], np.float32)
    predictions = np.array([[0.5, 2.0], [-1.0, 4.0]], np.float32)
    sigmoid = tf.losses.sigmoid_cross_entropy(labels, logits)
    mse = tf.losses.mean_squared_error(labels=labels, predictions=predictions, weights=[[1.0], [3.0]])
    absolute = tf.losses.absolute_difference(labels, predictions, reduction=tf.losses.Reduction.SUM)
    huber = tf.losses.huber_loss(labels, predictions, reduction=tf.losses.Reduction.NONE)
    got = _run(sigmoid, mse, absolute, huber)
    p = 1 / (1 + np.exp(-logits))
    np.testing.assert_allclose(got[0], np.mean(-labels * np.log(p) - (1 - labels) * np.log(1 - p)), rtol=1e-5)
    np.testing.assert_allclose(got[1], ((predictions - labels) ** 2 * [[1.0], [3.0]]).sum() / 4, rtol=1e-6)
    np.testing.assert_allclose(got[2], np.abs(predictions - labels).sum(), rtol=1e-6)
    error = np.abs(predictions - labels)
    np.testing.assert_allclose(got[3], np.where(error <= 1, 0.5 * error ** 2, error - 0.5), rtol=1e-6)


def test_loss_reductions_and_bad_keys():
    losses = tf.constant([1.0, 2.0, 3.0, 4.0])
    weights = tf.constant([0.0, 1.0, 2.0, 1.0])
    R = tf.losses.Reduction
    got = _run(*[tf.losses.compute_weighted_loss(losses, weights, reduction=r)
                 for r in (R.SUM, R.MEAN, R.SUM_OVER_BATCH_SIZE, R.SUM_BY_NONZERO_WEIGHTS)])
    np.testing.assert_allclose(got, [12.0, 3.0, 3.0, 4.0])
    zero = tf.losses.compute_weighted_loss(losses, 0.0)
    assert _run(zero) == [0.0]  # nothing present: 0, not NaN
    with pytest.raises(ValueError, match="Invalid Reduction Key"):
        tf.losses.compute_weighted_loss(losses, reduction="average")


def test_get_total_loss_needs_a_loss_and_add_loss_collects():
    with pytest.raises(ValueError, match="no losses"):
        tf.losses.get_total_loss()
    assert _run(tf.losses.get_regularization_loss()) == [0.0]
    custom = tf.reduce_sum(tf.constant([1.5, 2.0]))
    tf.losses.add_loss(custom)
    assert _run(tf.losses.get_total_loss()) == [3.5]


# ---- tf.metrics -------------------------------------------------------------------------------
def test_accuracy_streams_over_batches_in_local_variables():
    labels = tf.placeholder(tf.int64, [None])
    logits = tf.placeholder(tf.float32, [None, 3])
    accuracy, update = tf.metrics.accuracy(labels=labels, predictions=tf.argmax(logits, 1))
    assert [v.name for v in tf.local_variables()] == ["accuracy/total:0", "accuracy/count:0"]
    assert tf.get_collection(tf.GraphKeys.METRIC_VARIABLES) == tf.local_variables()
    assert not tf.global_variables() and not tf.trainable_variables()
    with tf.Session() as sess:
        sess.run(tf.local_variables_initializer())
        assert sess.run(accuracy) == 0.0  # nothing seen yet: 0, not NaN
        first = sess.run(update, {labels: LABELS, logits: LOGITS})  # argmax: 0, 1, 2, 0
        second = sess.run(update, {labels: [2, 2], logits: LOGITS[2:]})
        assert first == 0.5 and second == pytest.approx(3 / 6) and sess.run(accuracy) == pytest.approx(0.5)
        sess.run(tf.local_variables_initializer())
        assert sess.run(accuracy) == 0.0


def test_accuracy_squeezes_a_trailing_label_dimension():
    predictions = tf.constant([1, 0, 3], tf.int64)
    _, update = tf.metrics.accuracy(labels=[[1], [2], [3]], predictions=predictions)
    assert _run(update)[0] == pytest.approx(2 / 3)


def test_mean_precision_recall_and_collections():
    values = tf.placeholder(tf.float32, [None])
    mean, update_mean = tf.metrics.mean(values, weights=[1.0, 3.0], metrics_collections=["m"],
                                        updates_collections=["u"])
    precision, update_precision = tf.metrics.precision(labels=[1, 0, 1, 1], predictions=[1, 1, 0, 1])
    recall, update_recall = tf.metrics.recall(labels=[1, 0, 1, 1], predictions=[1, 1, 0, 1])
    assert tf.get_collection("m") == [mean] and tf.get_collection("u") == [update_mean]
    with tf.Session() as sess:
        sess.run(tf.local_variables_initializer())
        sess.run([update_mean, update_precision, update_recall], {values: [2.0, 6.0]})
        got_mean, got_precision, got_recall = sess.run([mean, precision, recall])
    assert got_mean == pytest.approx(5.0)
    assert got_precision == pytest.approx(2 / 3) and got_recall == pytest.approx(2 / 3)


def test_auc_of_roc_and_pr_curves():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 400)
    scores = np.clip(labels * 0.3 + rng.uniform(0, 0.7, 400), 0, 1).astype(np.float32)
    half = tf.placeholder(tf.float32, [None])
    half_labels = tf.placeholder(tf.int64, [None])
    roc, update_roc = tf.metrics.auc(half_labels, half)
    pr, update_pr = tf.metrics.auc(half_labels, half, curve="PR", num_thresholds=50)
    assert [v.name for v in tf.local_variables()][:4] == [
        "auc/true_positives:0", "auc/false_negatives:0", "auc/true_negatives:0", "auc/false_positives:0"]
    with tf.Session() as sess:
        sess.run(tf.local_variables_initializer())
        for part in (slice(0, 200), slice(200, 400)):  # streamed in two batches
            sess.run([update_roc, update_pr], {half: scores[part], half_labels: labels[part]})
        got_roc, got_pr = sess.run([roc, pr])
    positive, negative = scores[labels == 1], scores[labels == 0]
    exact = (positive[:, None] > negative[None, :]).mean()  # P(score of a positive > of a negative)
    assert got_roc == pytest.approx(exact, abs=2e-3)
    thresholds = np.array([-1e-7, *[(i + 1) / 49 for i in range(48)], 1 + 1e-7])
    predicted = scores[:, None] > thresholds[None, :]
    tp = (predicted & (labels[:, None] == 1)).sum(0)
    fp = (predicted & (labels[:, None] == 0)).sum(0)
    fn = (~predicted & (labels[:, None] == 1)).sum(0)
    precision, recall = tp / (tp + fp + 1e-7), tp / (tp + fn + 1e-7)
    expected = np.sum((recall[:-1] - recall[1:]) * (precision[:-1] + precision[1:]) / 2)
    assert got_pr == pytest.approx(expected, rel=1e-5)


# ---- tf.train.ExponentialMovingAverage ----------------------------------------------------------
def test_shadow_variables_are_named_initialized_and_updated_as_in_tf():
    w = tf.Variable([1.0, 2.0], name="w")
    with tf.variable_scope("layer"):
        b = tf.get_variable("b", [2], initializer=tf.constant_initializer(3.0))
    step = tf.Variable(0, trainable=False, name="step")
    ema = tf.train.ExponentialMovingAverage(0.9, num_updates=step)
    update = ema.apply([w, b])
    assert ema.average(w).op.name == "w/ExponentialMovingAverage" == ema.average_name(w)
    assert ema.average(b).op.name == "layer/b/ExponentialMovingAverage"
    assert ema.average(step) is None
    assert [v.op.name for v in tf.trainable_variables()] == ["w", "layer/b"]
    assert tf.moving_average_variables() == [w, b]
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        np.testing.assert_array_equal(sess.run(ema.average(b)), [3.0, 3.0])  # starts at the initial value
        shadow = np.array([1.0, 2.0])
        for n, value in [(0, [5.0, 5.0]), (10, [-1.0, 0.0]), (1000, [2.0, 2.0])]:
            sess.run([w.assign(value), step.assign(n)])
            sess.run(update)
            decay = min(0.9, (1 + n) / (10 + n))
            shadow = shadow - (shadow - np.array(value)) * (1 - decay)
            np.testing.assert_allclose(sess.run(ema.average(w)), shadow, rtol=1e-6)
    with pytest.raises(ValueError, match="Moving average already computed for: w:0"):
        ema.apply([w])


def test_averages_of_tensors_start_at_zero():
    """The CIFAR-10 tutorial's loss averages: ``ExponentialMovingAverage(0.9, name='avg')``."""
    loss = tf.placeholder(tf.float32, [], name="cross_entropy")
    averages = tf.train.ExponentialMovingAverage(0.9, name="avg")
    update = averages.apply([loss])
    assert averages.average(loss).op.name == "cross_entropy/avg"
    assert not averages.average(loss).trainable
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(update, {loss: 2.0})
        sess.run(update, {loss: 2.0})
        assert sess.run(averages.average(loss)) == pytest.approx(2.0 * (1 - 0.9 ** 2), rel=1e-6)  # 0.2, 0.38


def test_variables_to_restore_loads_the_averages_into_the_model(tmp_path):
    """Train with averages (the update after the train op, as the tutorial), save; evaluate by
    restoring each shadow into its variable."""
    graph = tf.Graph()
    with graph.as_default():
        w = tf.Variable([0.0, 0.0], name="w")
        step = tf.train.get_or_create_global_step()
        train_op = tf.train.GradientDescentOptimizer(0.5).minimize(tf.reduce_sum(tf.square(w - 4.0)),
                                                                    global_step=step)
        ema = tf.train.ExponentialMovingAverage(0.5)
        with tf.control_dependencies([train_op]):
            train_op = ema.apply(tf.trainable_variables())
        saver = tf.train.Saver()
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            for _ in range(3):
                sess.run(train_op)
            trained, averaged = sess.run([w, ema.average(w)])
            path = saver.save(sess, str(tmp_path / "model.ckpt"))
    assert not np.allclose(trained, averaged)
    with tf.Graph().as_default():
        w = tf.Variable([0.0, 0.0], name="w")
        step = tf.train.get_or_create_global_step()
        names = tf.train.ExponentialMovingAverage(0.5).variables_to_restore()
        assert names == {"w/ExponentialMovingAverage": w, "global_step": step}
        with tf.Session() as sess:
            tf.train.Saver(names).restore(sess, path)
            np.testing.assert_allclose(sess.run(w), averaged)
            assert sess.run(step) == 3


def test_apply_refuses_what_it_cannot_average():
    ema = tf.train.ExponentialMovingAverage(0.99)
    with pytest.raises(TypeError, match="half, float, or double"):
        ema.apply([tf.Variable(1, name="counter")])
    with pytest.raises(ValueError, match=r"zero_debias=True\) is not supported by dflow"):
        tf.train.ExponentialMovingAverage(0.99, zero_debias=True)


def test_pairwise_losses_are_float32_whatever_their_inputs_as_tf_1_x_casts_them():
    """TF 1.x's mean_squared_error, absolute_difference, log_loss, hinge and Huber losses take
    labels and predictions through ``to_float``: float64 inputs give a float32 loss."""
    labels, predictions = tf.constant(np.array([0.0, 1.0])), tf.constant(np.array([0.5, 0.25]))
    losses = [loss(labels, predictions) for loss in (
        tf.losses.mean_squared_error, tf.losses.absolute_difference, tf.losses.log_loss, tf.losses.hinge_loss,
        tf.losses.huber_loss)]
    assert {loss.dtype for loss in losses} == {tf.float32}
    with tf.Session() as sess:
        np.testing.assert_allclose(sess.run(losses[0]), (0.25 + 0.5625) / 2, rtol=1e-6)
