"""CTC as TF 1.x speech scripts use it: ctc_loss and its gradient, the greedy decoder and
edit_distance give TensorFlow 2.21's (compat.v1) numbers for the same inputs; labels fed through a
sparse placeholder; a tiny model trained with the loss decodes its labels."""

import numpy as np
import pytest

import dflow as tf

LABELS = ([[0, 0], [0, 1], [1, 0], [1, 1], [1, 2], [2, 0]], [1, 1, 2, 3, 2, 0], [3, 3])


@pytest.fixture(autouse=True)
def _graph():
    with tf.Graph().as_default():
        yield


def test_loss_gradient_decoder_and_edit_distance_are_tensorflows():
    logits = tf.constant(np.random.default_rng(0).standard_normal((6, 3, 5)).astype(np.float32))
    labels = tf.sparse_placeholder(tf.int32)
    lengths = tf.constant([6, 5, 3])
    loss = tf.nn.ctc_loss(labels, logits, lengths)
    (grad,) = tf.gradients(tf.reduce_sum(loss * tf.constant([1.0, 2.0, 0.5])), [logits])
    (decoded,), log_probability = tf.nn.ctc_greedy_decoder(logits, lengths)
    hypothesis = tf.SparseTensor([[0, 0], [0, 1], [1, 0]], [1, 2, 3], [2, 2])
    truth = tf.SparseTensor([[0, 0], [1, 0], [1, 1]], [1, 3, 4], [3, 2])
    with tf.Session() as sess:
        got = sess.run([loss, grad, decoded, log_probability, tf.edit_distance(hypothesis, truth),
                        tf.edit_distance(hypothesis, truth, normalize=False)],
                       {labels: tf.SparseTensorValue(*(np.array(part) for part in LABELS))})
    losses, grads, decoded, log_probability, normalized, distances = got
    np.testing.assert_allclose(losses, [6.641427, 4.136423, 3.985141], rtol=1e-6)
    np.testing.assert_allclose(grads.ravel()[:8], [0.202373, -0.7264, 0.338596, 0.198202, -0.012771, 0.338803,
                                                   0.869418, -1.349739], atol=2e-6)
    assert float(np.abs(grads).sum()) == pytest.approx(18.913105, rel=1e-6)
    assert not grads[3:, 2].any()  # past a sequence's length its logits get no gradient
    assert decoded.indices.tolist() == [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2], [2, 0], [2, 1]]
    assert (decoded.values.tolist(), decoded.dense_shape.tolist()) == ([2, 3, 2, 1, 3, 1, 1, 1], [3, 3])
    np.testing.assert_allclose(log_probability.ravel(), [-7.9258, -6.403842, -1.775445], rtol=1e-6)
    assert normalized.tolist() == [1.0, 0.5, 0.0] and distances.tolist() == [1.0, 1.0, 0.0]


def test_a_model_trained_on_the_ctc_loss_decodes_its_labels():
    """Per-step logits of two sequences as variables, trained on the loss: the greedy decoder then
    reads back the labels (a repeated one included, which needs a blank between)."""
    truth = tf.SparseTensor([[0, 0], [0, 1], [0, 2], [1, 0]], [2, 2, 0, 1], [2, 3])
    logits = tf.Variable(tf.zeros([7, 2, 4]))
    lengths = tf.constant([7, 4])
    loss = tf.reduce_mean(tf.nn.ctc_loss(truth, logits, lengths))
    train = tf.train.AdamOptimizer(0.1).minimize(loss)
    (decoded,), _ = tf.nn.ctc_greedy_decoder(logits, lengths)
    errors = tf.edit_distance(decoded, tf.SparseTensor(
        truth.indices, tf.cast(truth.values, tf.int64), truth.dense_shape))
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        first = sess.run(loss)
        for _ in range(150):
            sess.run(train)
        last, decoded_values, label_errors = sess.run([loss, decoded.values, errors])
    assert first > 3.0 and last < 0.1
    assert decoded_values.tolist() == [2, 2, 0, 1] and label_errors.tolist() == [0.0, 0.0]


def test_ctc_errors_say_what_to_change():
    logits = tf.zeros([2, 1, 3])
    with tf.Session() as sess, pytest.raises(tf.errors.InvalidArgumentError, match="no path fits 3 labels"):
        sess.run(tf.nn.ctc_loss(tf.SparseTensor([[0, 0], [0, 1], [0, 2]], [0, 1, 0], [1, 3]), logits, [2]))
    ignored = tf.nn.ctc_loss(tf.SparseTensor([[0, 0], [0, 1], [0, 2]], [0, 1, 0], [1, 3]), logits, [2],
                             ignore_longer_outputs_than_inputs=True)
    with tf.Session() as sess:
        assert sess.run(ignored).tolist() == [0.0]
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"must be in 0..1 \(class 2 is the blank\)"):
            sess.run(tf.nn.ctc_loss(tf.SparseTensor([[0, 0]], [2], [1, 1]), logits, [2]))
        labels = tf.sparse_placeholder(tf.int32)
        with pytest.raises(TypeError, match="fed a tf.SparseTensorValue or a tuple"):
            sess.run(labels.values, {labels: np.zeros(3)})
    with pytest.raises(TypeError, match="labels must be a tf.SparseTensor"):
        tf.nn.ctc_loss(tf.constant([[0]]), logits, [2])


def test_beam_search_decodes_as_tensorflow_does():
    """TensorFlow 2.21's beams for the same logits: paths, their order and log probabilities, with
    narrow and wide beams, several paths, and merge_repeated both ways."""
    logits = tf.constant(np.random.default_rng(5).standard_normal((7, 3, 4)).astype(np.float32) * 2)
    lengths = tf.constant([7, 5, 2])
    wide, wide_logp = tf.nn.ctc_beam_search_decoder(logits, lengths, beam_width=100, top_paths=3)
    narrow, narrow_logp = tf.nn.ctc_beam_search_decoder(logits, lengths, beam_width=2, top_paths=1,
                                                        merge_repeated=False)
    with tf.Session() as sess:
        wide, wide_logp, narrow, narrow_logp = sess.run([wide, wide_logp, narrow, narrow_logp])
    assert wide[2].values.tolist() == [1, 0, 2, 0, 2, 0, 2, 0, 0, 1]
    assert wide[2].dense_shape.tolist() == [3, 5]
    assert wide[1].values.tolist() == [1, 2, 1, 2, 0, 1, 2]  # merged: [0, 0] became [0]
    np.testing.assert_allclose(wide_logp, [[-1.831, -1.8434, -2.6221], [-1.1357, -1.4459, -2.552],
                                           [-0.5014, -1.8341, -2.3732]], atol=1e-4)
    assert narrow[0].values.tolist() == [1, 2, 0, 2, 0, 0, 1]
    np.testing.assert_allclose(narrow_logp, [[-2.0635], [-1.6558], [-0.5043]], atol=1e-4)
