"""Recurrent cells and RNNs (tf.nn.rnn_cell, tf.contrib.rnn, static/dynamic/bidirectional RNNs)
in the TF 1.x style: variable names as TF names them, one step's numbers against NumPy
references of TF's equations, gradients against finite differences, and an LSTM that
learns the digits read row by row."""

import numpy as np
import pytest

import dflow as tf

rnn = tf.nn.rnn_cell
rng = np.random.default_rng(3)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _names():
    return [v.name for v in tf.trainable_variables()]


# ---- variable names and shapes --------------------------------------------------------------------
def test_static_rnn_names_variables_as_tf():
    x = tf.placeholder(tf.float32, [None, 5, 3])
    cell = rnn.BasicLSTMCell(4, forget_bias=1.0)
    outputs, state = tf.nn.static_rnn(cell, tf.unstack(x, 5, 1), dtype=tf.float32)
    assert _names() == ["rnn/basic_lstm_cell/kernel:0", "rnn/basic_lstm_cell/bias:0"]
    assert [v.shape.as_list() for v in tf.trainable_variables()] == [[7, 16], [16]]
    assert len(outputs) == 5 and outputs[-1].shape.as_list() == [None, 4]
    assert isinstance(state, rnn.LSTMStateTuple) and state.h.shape.as_list() == [None, 4]


def test_stacked_and_bidirectional_names():
    x = tf.placeholder(tf.float32, [2, 3, 5])
    cells = rnn.MultiRNNCell([rnn.DropoutWrapper(rnn.BasicLSTMCell(4), output_keep_prob=0.5),
                              rnn.GRUCell(3)])
    tf.nn.dynamic_rnn(cells, x, dtype=tf.float32)
    tf.nn.bidirectional_dynamic_rnn(rnn.LSTMCell(2, use_peepholes=True, num_proj=3), rnn.BasicRNNCell(2),
                                    x, dtype=tf.float32)
    assert _names() == [
        "rnn/multi_rnn_cell/cell_0/basic_lstm_cell/kernel:0",
        "rnn/multi_rnn_cell/cell_0/basic_lstm_cell/bias:0",
        "rnn/multi_rnn_cell/cell_1/gru_cell/gates/kernel:0",
        "rnn/multi_rnn_cell/cell_1/gru_cell/gates/bias:0",
        "rnn/multi_rnn_cell/cell_1/gru_cell/candidate/kernel:0",
        "rnn/multi_rnn_cell/cell_1/gru_cell/candidate/bias:0",
        "bidirectional_rnn/fw/lstm_cell/kernel:0",
        "bidirectional_rnn/fw/lstm_cell/bias:0",
        "bidirectional_rnn/fw/lstm_cell/w_f_diag:0",
        "bidirectional_rnn/fw/lstm_cell/w_i_diag:0",
        "bidirectional_rnn/fw/lstm_cell/w_o_diag:0",
        "bidirectional_rnn/fw/lstm_cell/projection/kernel:0",
        "bidirectional_rnn/bw/basic_rnn_cell/kernel:0",
        "bidirectional_rnn/bw/basic_rnn_cell/bias:0",
    ]
    assert tf.trainable_variables()[6].shape.as_list() == [5 + 3, 8]  # input + projected output


def test_output_projection_wrapper_over_a_dynamic_rnn():
    """The time-series pattern: a ReLU RNN whose outputs are projected to one value per step."""
    from dflow.contrib import rnn as contrib_rnn

    X = tf.placeholder(tf.float32, [None, 20, 1])
    cell = contrib_rnn.OutputProjectionWrapper(
        contrib_rnn.BasicRNNCell(num_units=10, activation=tf.nn.relu), output_size=1)
    outputs, states = tf.nn.dynamic_rnn(cell, X, dtype=tf.float32)
    assert outputs.shape.as_list() == [None, 20, 1] and states.shape.as_list() == [None, 10]
    assert _names() == ["rnn/output_projection_wrapper/basic_rnn_cell/kernel:0",
                        "rnn/output_projection_wrapper/basic_rnn_cell/bias:0",
                        "rnn/output_projection_wrapper/kernel:0", "rnn/output_projection_wrapper/bias:0"]
    y = tf.placeholder(tf.float32, [None, 20, 1])
    loss = tf.reduce_mean(tf.square(outputs - y))
    train = tf.train.AdamOptimizer(0.01).minimize(loss)
    t = np.linspace(0, 30, 400)
    series = np.sin(t) / 3 + 2 * np.sin(5 * t)
    starts = np.random.default_rng(0).integers(0, 379, (300, 50))
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        losses = []
        for batch in starts:
            windows = np.stack([series[s:s + 21] for s in batch]).astype(np.float32)[..., None]
            losses.append(sess.run([train, loss], {X: windows[:, :-1], y: windows[:, 1:]})[1])
    assert np.mean(losses[-20:]) < 0.2 * np.mean(losses[:20])


class LeakyCell(rnn.RNNCell):
    """A user's cell in the TF 1.x layer style: build(inputs_shape) + add_variable + call."""

    def __init__(self, num_units, reuse=None):
        super().__init__(_reuse=reuse)
        self._num_units = num_units

    @property
    def state_size(self):
        return self._num_units

    @property
    def output_size(self):
        return self._num_units

    def build(self, inputs_shape):
        self._kernel = self.add_variable("kernel", [inputs_shape[-1], self._num_units])

    def call(self, inputs, state):
        new_state = 0.5 * state + tf.matmul(inputs, self._kernel)
        return new_state, new_state


def test_user_defined_cells_new_and_old_style():
    class OldStyleCell(rnn.RNNCell):  # TF 1.0 style: __call__ overridden, variables by get_variable
        state_size = output_size = 2

        def __call__(self, inputs, state, scope=None):
            with tf.variable_scope(scope or "old_style"):
                w = tf.get_variable("w", [inputs.shape[-1], 2])
            return tf.tanh(tf.matmul(inputs, w) + state), tf.tanh(tf.matmul(inputs, w) + state)

    x = tf.placeholder(tf.float32, [None, 3, 4])
    outputs, state = tf.nn.dynamic_rnn(LeakyCell(5), x, dtype=tf.float32)
    with tf.variable_scope("second"):
        tf.nn.static_rnn(OldStyleCell(), tf.unstack(x, 3, 1), dtype=tf.float32)
    # a cell without a name of its own is scoped by its class, in snake case, as TF's layers are
    assert _names() == ["rnn/leaky_cell/kernel:0", "second/rnn/old_style/w:0"]
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        kernel = sess.run(tf.trainable_variables()[0])
        data = rng.normal(size=(2, 3, 4)).astype(np.float32)
        out = sess.run(outputs, {x: data})
    expected = np.zeros((2, 5), np.float32)
    for t in range(3):
        expected = 0.5 * expected + data[:, t] @ kernel
    np.testing.assert_allclose(out[:, -1], expected, rtol=1e-5)


def test_a_second_rnn_needs_reuse_as_in_tf():
    x = tf.placeholder(tf.float32, [None, 2, 3])
    tf.nn.dynamic_rnn(rnn.BasicLSTMCell(4), x, dtype=tf.float32)
    with pytest.raises(ValueError, match="rnn/basic_lstm_cell/kernel already exists"):
        tf.nn.dynamic_rnn(rnn.BasicLSTMCell(4), x, dtype=tf.float32)
    with tf.variable_scope(tf.get_variable_scope(), reuse=True):
        tf.nn.dynamic_rnn(rnn.BasicLSTMCell(4), x, dtype=tf.float32)
    assert len(tf.trainable_variables()) == 2


def test_contrib_rnn_is_the_same_api():
    from dflow.contrib import rnn as contrib_rnn

    assert contrib_rnn.BasicLSTMCell is rnn.BasicLSTMCell and contrib_rnn.static_rnn is tf.nn.static_rnn
    x = tf.placeholder(tf.float32, [None, 4, 2])
    contrib_rnn.static_rnn(contrib_rnn.LSTMBlockCell(3), tf.unstack(x, 4, 1), dtype=tf.float32)
    assert _names() == ["rnn/lstm_cell/kernel:0", "rnn/lstm_cell/bias:0"]


def test_unknown_time_steps_and_features_say_what_to_do():
    with pytest.raises(ValueError, match=r"dynamic_rnn takes \[batch, time, depth\] inputs"):
        tf.nn.dynamic_rnn(rnn.GRUCell(2), tf.placeholder(tf.float32, [None, 3]), dtype=tf.float32)
    with pytest.raises(ValueError, match="last dimension at graph-build time"):
        tf.nn.static_rnn(rnn.GRUCell(2), [tf.placeholder(tf.float32)], dtype=tf.float32)
    with pytest.raises(TypeError, match=r"one per time step.*tf.unstack"):
        tf.nn.static_rnn(rnn.GRUCell(2), tf.placeholder(tf.float32, [1, 4, 3]), dtype=tf.float32)
    with pytest.raises(ValueError, match="dtype must be specified"):
        tf.nn.static_rnn(rnn.GRUCell(2), [tf.placeholder(tf.float32, [1, 3])])


# ---- one step's numbers against NumPy references of TF's equations ---------------------------------
def _one_step(cell, x, state):
    inputs = tf.constant(x)
    with tf.variable_scope("rnn"):
        output, new_state = cell(inputs, state)
    with tf.Session() as sess:
        sess.run(tf.variables_initializer(tf.global_variables()))
        for v in tf.trainable_variables():  # random biases too, so every term shows
            v.load(rng.normal(size=v.shape.as_list()).astype(np.float32) * 0.5, sess)
        weights = {v.op.name.split("/", 2)[-1]: sess.run(v) for v in tf.trainable_variables()}
        return sess.run([output, new_state]), weights


def test_basic_lstm_step_matches_tf_equations():
    x = rng.normal(size=(3, 5)).astype(np.float32)
    c, h = (rng.normal(size=(3, 4)).astype(np.float32) for _ in range(2))
    cell = rnn.BasicLSTMCell(4, forget_bias=1.0)
    (output, state), w = _one_step(cell, x, rnn.LSTMStateTuple(tf.constant(c), tf.constant(h)))
    i, j, f, o = np.split(np.concatenate([x, h], 1) @ w["kernel"] + w["bias"], 4, axis=1)
    new_c = c * sigmoid(f + 1.0) + sigmoid(i) * np.tanh(j)
    new_h = np.tanh(new_c) * sigmoid(o)
    np.testing.assert_allclose(state.c, new_c, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(output, new_h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(state.h, new_h, rtol=1e-5, atol=1e-6)


def test_lstm_cell_with_peepholes_clip_and_projection_matches_tf_equations():
    x = rng.normal(size=(2, 3)).astype(np.float32)
    c = rng.normal(size=(2, 4)).astype(np.float32) * 2
    m = rng.normal(size=(2, 2)).astype(np.float32)
    cell = rnn.LSTMCell(4, use_peepholes=True, cell_clip=0.7, num_proj=2, proj_clip=0.3,
                        forget_bias=0.5)
    (output, state), w = _one_step(cell, x, rnn.LSTMStateTuple(tf.constant(c), tf.constant(m)))
    i, j, f, o = np.split(np.concatenate([x, m], 1) @ w["kernel"] + w["bias"], 4, axis=1)
    new_c = sigmoid(f + 0.5 + w["w_f_diag"] * c) * c + sigmoid(i + w["w_i_diag"] * c) * np.tanh(j)
    new_c = np.clip(new_c, -0.7, 0.7)
    new_m = np.clip((sigmoid(o + w["w_o_diag"] * new_c) * np.tanh(new_c)) @ w["projection/kernel"], -0.3, 0.3)
    np.testing.assert_allclose(state.c, new_c, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(output, new_m, rtol=1e-5, atol=1e-6)


def test_gru_and_basic_rnn_steps_match_tf_equations():
    x = rng.normal(size=(2, 3)).astype(np.float32)
    h = rng.normal(size=(2, 4)).astype(np.float32)
    (output, state), w = _one_step(rnn.GRUCell(4), x, tf.constant(h))
    r, u = np.split(sigmoid(np.concatenate([x, h], 1) @ w["gates/kernel"] + w["gates/bias"]), 2, axis=1)
    candidate = np.tanh(np.concatenate([x, r * h], 1) @ w["candidate/kernel"] + w["candidate/bias"])
    np.testing.assert_allclose(output, u * h + (1 - u) * candidate, rtol=1e-5, atol=1e-6)
    tf.reset_default_graph()
    (output, state), w = _one_step(rnn.BasicRNNCell(4), x, tf.constant(h))
    np.testing.assert_allclose(output, np.tanh(np.concatenate([x, h], 1) @ w["kernel"] + w["bias"]),
                               rtol=1e-5, atol=1e-6)


def test_legacy_rnn_decoder_shares_one_cell_and_feeds_back_through_the_loop_function():
    """char-rnn's decoder: legacy_seq2seq.rnn_decoder over a list of inputs, its variables made
    once (TF's names); sampling feeds each output back through loop_function."""
    inputs = [rng.normal(size=(2, 3)).astype(np.float32) for _ in range(4)]
    h0 = rng.normal(size=(2, 4)).astype(np.float32)
    projection = rng.normal(size=(4, 3)).astype(np.float32)
    cell, decoder = rnn.BasicRNNCell(4), tf.contrib.legacy_seq2seq.rnn_decoder
    outputs, state = decoder([tf.constant(x) for x in inputs], tf.constant(h0), cell)

    def loop_function(previous, step):
        return tf.matmul(previous, projection) * float(step)

    sampled, _ = decoder([tf.constant(x) for x in inputs], tf.constant(h0), cell, loop_function=loop_function)
    assert _names() == ["rnn_decoder/basic_rnn_cell/kernel:0", "rnn_decoder/basic_rnn_cell/bias:0"]
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        kernel, bias = sess.run(tf.trainable_variables())
        got, last, got_sampled = sess.run([outputs, state, sampled])
    h, h_sampled, previous = h0, h0, None
    for step, x in enumerate(inputs):
        h = np.tanh(np.concatenate([x, h], 1) @ kernel + bias)
        np.testing.assert_allclose(got[step], h, rtol=1e-5, atol=1e-6)
        fed = x if previous is None else previous @ projection * step
        h_sampled = previous = np.tanh(np.concatenate([fed, h_sampled], 1) @ kernel + bias)
        np.testing.assert_allclose(got_sampled[step], h_sampled, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(last, h, rtol=1e-5, atol=1e-6)


def test_state_is_tuple_false_concatenates_c_and_h():
    cell = rnn.BasicLSTMCell(3, state_is_tuple=False)
    assert cell.state_size == 6
    x = tf.placeholder(tf.float32, [2, 4])
    output, state = cell(x, cell.zero_state(2, tf.float32))
    assert state.shape.as_list() == [2, 6]
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        out, st = sess.run([output, state], {x: np.ones((2, 4))})
    np.testing.assert_allclose(st[:, 3:], out)


# ---- sequence lengths, bidirectional, dropout ---------------------------------------------------
def _run(fetches, feeds=None):
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        return sess.run(fetches, feeds)


def test_dynamic_rnn_sequence_length_zeroes_outputs_and_carries_the_state():
    tf.set_random_seed(0)
    data = rng.normal(size=(2, 4, 3)).astype(np.float32)
    x = tf.placeholder(tf.float32, [2, 4, 3])
    lengths = tf.placeholder(tf.int32, [2])
    cell = rnn.BasicLSTMCell(5)
    outputs, state = tf.nn.dynamic_rnn(cell, x, sequence_length=lengths, dtype=tf.float32)
    with tf.variable_scope(tf.get_variable_scope(), reuse=True):  # the same cell over 2 steps only
        short_outputs, short_state = tf.nn.dynamic_rnn(cell, x[:, :2], dtype=tf.float32)
    out, st, short_out, short_st = _run([outputs, state, short_outputs, short_state],
                                        {x: data, lengths: [2, 4]})
    np.testing.assert_array_equal(out[0, 2:], 0.0)
    assert not np.signbit(out[0, 2:]).any()  # TF's zeros print 0., not -0.
    np.testing.assert_allclose(out[0, :2], short_out[0], rtol=1e-6)
    np.testing.assert_allclose(st.h[0], short_st.h[0], rtol=1e-6)
    np.testing.assert_allclose(st.h[1], out[1, 3], rtol=1e-6)


def test_time_major_dynamic_rnn_matches_batch_major():
    data = rng.normal(size=(3, 5, 2)).astype(np.float32)
    x = tf.placeholder(tf.float32, [3, 5, 2])
    cell = rnn.GRUCell(4)
    batch_major, state = tf.nn.dynamic_rnn(cell, x, sequence_length=[5, 2, 4], dtype=tf.float32)
    with tf.variable_scope(tf.get_variable_scope(), reuse=True):
        time_major, state_tm = tf.nn.dynamic_rnn(cell, tf.transpose(x, [1, 0, 2]), sequence_length=[5, 2, 4],
                                                 dtype=tf.float32, time_major=True)
    a, b, sa, sb = _run([batch_major, time_major, state, state_tm], {x: data})
    np.testing.assert_allclose(np.transpose(b, [1, 0, 2]), a, rtol=1e-6)
    np.testing.assert_allclose(sb, sa, rtol=1e-6)


def test_bidirectional_backward_pass_reads_each_sequence_reversed():
    tf.set_random_seed(0)
    data = rng.normal(size=(2, 4, 3)).astype(np.float32)
    x = tf.placeholder(tf.float32, [2, 4, 3])
    lengths = [3, 4]
    cell_bw = rnn.GRUCell(2)
    (out_fw, out_bw), (_, state_bw) = tf.nn.bidirectional_dynamic_rnn(
        rnn.GRUCell(2), cell_bw, x, sequence_length=lengths, dtype=tf.float32)
    with tf.variable_scope("bidirectional_rnn/bw", reuse=True):
        manual, _ = tf.nn.dynamic_rnn(cell_bw, tf.reverse_sequence(x, lengths, seq_axis=1),
                                      sequence_length=lengths, dtype=tf.float32)
    fw, bw, last_bw, by_hand = _run([out_fw, out_bw, state_bw, manual], {x: data})
    np.testing.assert_allclose(bw[0, :3], by_hand[0, :3][::-1], rtol=1e-6)
    np.testing.assert_allclose(bw[1], by_hand[1][::-1], rtol=1e-6)
    np.testing.assert_array_equal(bw[0, 3], 0.0)
    np.testing.assert_allclose(last_bw[0], bw[0, 0], rtol=1e-6)  # the backward RNN ends at step 0
    outputs, _, _ = tf.nn.static_bidirectional_rnn(rnn.GRUCell(2), rnn.GRUCell(2), tf.unstack(x, 4, 1),
                                                   dtype=tf.float32, scope="static")
    assert len(outputs) == 4 and outputs[0].shape.as_list() == [2, 4]


def test_dropout_wrapper_with_a_keep_prob_placeholder():
    keep_prob = tf.placeholder(tf.float32, [])
    cell = rnn.DropoutWrapper(rnn.BasicRNNCell(50), input_keep_prob=keep_prob, output_keep_prob=keep_prob)
    x = tf.placeholder(tf.float32, [4, 6])
    output, _ = cell(x, cell.zero_state(tf.shape(x)[0], tf.float32))
    plain = tf.tanh(tf.matmul(tf.concat([x, tf.zeros([4, 50])], 1), cell.variables[0]) + cell.variables[1])
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        feeds = {x: np.ones((4, 6))}
        kept, expected = sess.run([output, plain], {**feeds, keep_prob: 1.0})
        dropped = sess.run(output, {**feeds, keep_prob: 0.5})
    np.testing.assert_allclose(kept, expected, rtol=1e-6)
    assert 0.2 < np.mean(dropped == 0) < 0.8


# ---- gradients -----------------------------------------------------------------------------------
@pytest.mark.parametrize("make_cell", [
    lambda: rnn.BasicLSTMCell(3, dtype=tf.float64),
    lambda: rnn.LSTMCell(3, use_peepholes=True, num_proj=2, dtype=tf.float64),
    lambda: rnn.GRUCell(3, dtype=tf.float64),
    lambda: rnn.MultiRNNCell([rnn.BasicRNNCell(2, dtype=tf.float64), rnn.BasicLSTMCell(2, dtype=tf.float64)]),
], ids=["basic_lstm", "lstm_peephole_proj", "gru", "multi"])
def test_rnn_gradients_match_finite_differences(make_cell):
    """d(loss)/d(inputs and every variable) of a 3-step dynamic_rnn with sequence lengths."""
    data = rng.normal(size=(2, 3, 2))
    x = tf.placeholder(tf.float64, [2, 3, 2])
    outputs, _ = tf.nn.dynamic_rnn(make_cell(), x, sequence_length=[3, 2], dtype=tf.float64)
    loss = tf.reduce_sum(outputs * tf.constant(rng.normal(size=outputs.shape.as_list())))
    variables = tf.trainable_variables()
    grads = tf.gradients(loss, [x, *variables])
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for v in variables:
            v.load(rng.normal(size=v.shape.as_list()) * 0.5, sess)
        symbolic = sess.run(grads, {x: data})
        values = [data] + [sess.run(v) for v in variables]

        def objective(index, probe):
            if index == 0:
                return sess.run(loss, {x: probe})
            variables[index - 1].load(probe, sess)
            return sess.run(loss, {x: data})

        for index, value in enumerate(values):
            numeric = np.zeros(value.size)
            for k in range(value.size):
                up, down = value.copy().reshape(-1), value.copy().reshape(-1)
                up[k] += 1e-6
                down[k] -= 1e-6
                numeric[k] = (objective(index, up.reshape(value.shape))
                              - objective(index, down.reshape(value.shape))) / 2e-6
            if index:
                variables[index - 1].load(value, sess)
            np.testing.assert_allclose(symbolic[index].reshape(-1), numeric, rtol=1e-4, atol=1e-7,
                                       err_msg=f"gradient of input {index}")


# ---- an LSTM reads the digits row by row ---------------------------------------------------------
def test_lstm_learns_the_digits_row_by_row():
    """The recurrent_network.py pattern: 8 timesteps of 8 pixels, the last output classified."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)
    labels = digits.target.astype(np.int64)
    train_x, test_x, train_y, test_y = images[:1400], images[1400:], labels[:1400], labels[1400:]
    timesteps, num_input, num_hidden, num_classes = 8, 8, 64, 10

    tf.set_random_seed(1)
    X = tf.placeholder(tf.float32, [None, timesteps, num_input])
    Y = tf.placeholder(tf.int64, [None])
    weights = tf.Variable(tf.random_normal([num_hidden, num_classes]))
    biases = tf.Variable(tf.random_normal([num_classes]))
    x = tf.unstack(X, timesteps, 1)
    lstm_cell = rnn.BasicLSTMCell(num_hidden, forget_bias=1.0)
    outputs, states = tf.nn.static_rnn(lstm_cell, x, dtype=tf.float32)
    logits = tf.matmul(outputs[-1], weights) + biases
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=Y, logits=logits))
    train_op = tf.train.AdamOptimizer(learning_rate=0.01).minimize(loss)
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), Y), tf.float32))

    batches = np.random.default_rng(0)
    # one BLAS thread per matmul: the executor runs the unrolled steps' small matmuls side by side,
    # and each with all of BLAS's threads oversubscribed a loaded 2-core box (108 s here, 3 s so)
    config = tf.ConfigProto(intra_op_parallelism_threads=1)
    with tf.Session(config=config) as sess:
        sess.run(tf.global_variables_initializer())
        for _ in range(600):
            pick = batches.integers(0, len(train_x), 64)
            sess.run(train_op, {X: train_x[pick], Y: train_y[pick]})
        test_accuracy = sess.run(accuracy, {X: test_x, Y: test_y})
    assert test_accuracy > 0.9, test_accuracy  # 0.922 here


# ---- sequence losses (tf.contrib.seq2seq, tf.contrib.legacy_seq2seq) ---------------------------
def _xent(logits, targets):
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    return -np.take_along_axis(log_probs, targets[..., None], -1)[..., 0]


def test_sequence_losses_match_tf_reductions():
    from dflow.contrib import legacy_seq2seq, seq2seq

    logits = rng.normal(size=(3, 4, 5)).astype(np.float32)
    targets = rng.integers(0, 5, (3, 4)).astype(np.int32)
    weights = np.array([[1, 1, 1, 1], [1, 1, 0, 0], [0.5, 1, 1, 0]], np.float32)
    terms = _xent(logits, targets) * weights
    args = tf.constant(logits), tf.constant(targets), tf.constant(weights)
    fetches = {
        "mean": seq2seq.sequence_loss(*args),
        "per_step": seq2seq.sequence_loss(*args, average_across_timesteps=False),
        "per_example": seq2seq.sequence_loss(*args, average_across_batch=False),
        "sum_batch": seq2seq.sequence_loss(*args, average_across_timesteps=False, average_across_batch=False,
                                           sum_over_batch=True),
        "none": seq2seq.sequence_loss(*args, average_across_timesteps=False, average_across_batch=False),
        "legacy": legacy_seq2seq.sequence_loss_by_example(
            [tf.constant(logits[:, t]) for t in range(4)], [tf.constant(targets[:, t]) for t in range(4)],
            [tf.constant(weights[:, t]) for t in range(4)]),
        "legacy_mean": legacy_seq2seq.sequence_loss(
            [tf.constant(logits[:, t]) for t in range(4)], [tf.constant(targets[:, t]) for t in range(4)],
            [tf.constant(weights[:, t]) for t in range(4)]),
    }
    got = _run(fetches)
    np.testing.assert_allclose(got["mean"], terms.sum() / weights.sum(), rtol=1e-5)
    np.testing.assert_allclose(got["per_step"], terms.sum(0) / weights.sum(0), rtol=1e-5)
    np.testing.assert_allclose(got["per_example"], terms.sum(1) / weights.sum(1), rtol=1e-5)
    np.testing.assert_allclose(got["sum_batch"], terms.sum(0) / (weights != 0).sum(0), rtol=1e-5)
    np.testing.assert_allclose(got["none"], terms, rtol=1e-5)
    np.testing.assert_allclose(got["legacy"], terms.sum(1) / weights.sum(1), rtol=1e-5)
    np.testing.assert_allclose(got["legacy_mean"], np.mean(terms.sum(1) / weights.sum(1)), rtol=1e-5)


def test_ptb_style_language_model_learns_feeding_its_state():
    """The PTB tutorial's shape: an embedding, a 2-layer LSTM with output dropout, static_rnn from
    a fed initial state, seq2seq.sequence_loss; each batch starts from the last one's state."""
    from dflow.contrib import rnn as contrib_rnn
    from dflow.contrib import seq2seq

    vocab, size, steps, batch = 20, 32, 5, 8
    tf.set_random_seed(2)
    with tf.variable_scope("Model", initializer=tf.random_uniform_initializer(-0.1, 0.1)):
        inputs = tf.placeholder(tf.int32, [batch, steps])
        targets = tf.placeholder(tf.int32, [batch, steps])
        layers = [contrib_rnn.DropoutWrapper(contrib_rnn.LSTMBlockCell(size, forget_bias=0.0),
                                             output_keep_prob=0.9) for _ in range(2)]
        cell = contrib_rnn.MultiRNNCell(layers)
        initial_state = cell.zero_state(batch, tf.float32)
        embedding = tf.get_variable("embedding", [vocab, size], dtype=tf.float32)
        embedded = tf.nn.embedding_lookup(embedding, inputs)
        outputs, final_state = tf.nn.static_rnn(cell, tf.unstack(embedded, num=steps, axis=1),
                                                initial_state=initial_state)
        output = tf.reshape(tf.concat(outputs, 1), [-1, size])
        logits = tf.reshape(tf.matmul(output, tf.get_variable("softmax_w", [size, vocab]))
                            + tf.get_variable("softmax_b", [vocab]), [batch, steps, vocab])
        loss = seq2seq.sequence_loss(logits, targets, tf.ones([batch, steps]))
        train = tf.train.AdamOptimizer(0.01).minimize(loss)
    assert "Model/rnn/multi_rnn_cell/cell_1/lstm_cell/kernel:0" in _names()
    stream = np.arange(10000) % vocab  # the next word is always the word + 1
    losses = []
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        state = sess.run(initial_state)
        for i in range(150):
            start = i * steps + np.arange(batch)[:, None] * 1000
            feed = {inputs: stream[start + np.arange(steps)], targets: stream[start + np.arange(steps) + 1]}
            for (c, h), value in zip(initial_state, state):
                feed[c], feed[h] = value.c, value.h
            cost, state, _ = sess.run([loss, final_state, train], feed)
            losses.append(cost)
    assert losses[0] > 2.5 and np.mean(losses[-10:]) < 0.5, (losses[0], losses[-10:])


def test_a_cell_written_as_tf_s_own_cells_are_builds_trains_and_checks_its_input():
    """A cell in the style of TF 1.x's BasicLSTMCell source, as custom cells copy it: it subclasses
    rnn_cell_impl.LayerRNNCell, declares an InputSpec, builds with add_variable and TensorShape's
    Dimension.value, and splits along a constant tensor."""
    from dflow.python.framework import constant_op, dtypes, tensor_shape, tensor_util
    from dflow.python.layers import base as base_layer
    from dflow.python.ops import array_ops, init_ops, math_ops, nn_ops, rnn_cell_impl

    class GatedCell(rnn_cell_impl.LayerRNNCell):
        def __init__(self, num_units, reuse=None, name=None):
            super().__init__(_reuse=reuse, name=name)
            self.input_spec = base_layer.InputSpec(ndim=2)
            self._num_units = num_units

        @property
        def state_size(self):
            return self._num_units

        @property
        def output_size(self):
            return self._num_units

        def build(self, inputs_shape):
            depth = tensor_shape.TensorShape(inputs_shape)[1].value
            self._kernel = self.add_variable("kernel", shape=[depth + self._num_units, 2 * self._num_units])
            self._bias = self.add_variable("bias", shape=[2 * self._num_units],
                                           initializer=init_ops.zeros_initializer(dtype=dtypes.float32))
            self.built = True

        def call(self, inputs, state):
            one = constant_op.constant(1, dtype=dtypes.int32)
            gates = nn_ops.bias_add(math_ops.matmul(array_ops.concat([inputs, state], 1), self._kernel),
                                    self._bias)
            update, candidate = array_ops.split(value=gates, num_or_size_splits=2, axis=one)
            keep = math_ops.sigmoid(update)
            new = keep * state + (1.0 - keep) * math_ops.tanh(candidate)
            return new, new

    data = np.random.default_rng(0).standard_normal((4, 5, 3)).astype(np.float32)
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [4, 5, 3])
        cell = GatedCell(6)
        outputs, _ = tf.nn.dynamic_rnn(cell, x, dtype=tf.float32)
        loss = tf.reduce_mean(tf.square(outputs - 0.5))
        train = tf.train.AdamOptimizer(0.05).minimize(loss)
        assert [v.op.name for v in tf.trainable_variables()] == ["rnn/gated_cell/kernel",
                                                                 "rnn/gated_cell/bias"]
        assert tensor_util.constant_value(tf.shape(x)).tolist() == [4, 5, 3]
        assert tensor_util.constant_value(x) is None
        with pytest.raises(ValueError, match="expected ndim=2, found ndim=3. Full shape received"):
            GatedCell(6, name="checked")(x, tf.zeros([4, 6]))
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            first = sess.run(loss, {x: data})
            for _ in range(40):
                last, _ = sess.run([loss, train], {x: data})
    assert last < 0.5 * first


def test_zero_state_tensors_as_attention_wrappers_call_them():
    """``rnn_cell_impl._zero_state_tensors(state_size, batch_size, dtype)``: nested sizes (ints and
    shapes), a batch known only at run time."""
    from dflow.python.ops import rnn_cell_impl

    with tf.Graph().as_default():
        batch = tf.placeholder(tf.int32, [])
        sizes = (3, (tf.TensorShape([2, 4]), 5))
        zeros = rnn_cell_impl._zero_state_tensors(sizes, batch, tf.float64)
        assert zeros[0].shape.as_list() == [None, 3] and zeros[1][0].shape.as_list() == [None, 2, 4]
        values = tf.Session().run(zeros, {batch: 6})
    assert [v.shape for v in (values[0], *values[1])] == [(6, 3), (6, 2, 4), (6, 5)]
    assert values[1][1].dtype == np.float64 and not values[1][1].any()


def test_dynamic_rnn_over_an_unknown_number_of_steps_is_the_unrolled_one():
    """A time dimension known only when the step runs (a padded_batch of sentences): dynamic_rnn is
    a while_loop over TensorArrays, with the unrolled RNN's outputs, states and gradients (stacked
    LSTM and GRU cells, sequence lengths, both directions, the same weights)."""
    rng = np.random.default_rng(0)
    inputs, lengths = rng.standard_normal((3, 5, 4)).astype(np.float32), np.array([5, 2, 4], np.int32)
    results, weights = [], None
    for known in (True, False):
        with tf.Graph().as_default():
            x = tf.placeholder(tf.float32, [3, 5, 4] if known else [None, None, 4])
            n = tf.placeholder(tf.int32, [None])
            cell = tf.nn.rnn_cell.MultiRNNCell([tf.nn.rnn_cell.BasicLSTMCell(6), tf.nn.rnn_cell.GRUCell(5)])
            out, state = tf.nn.dynamic_rnn(cell, x, sequence_length=n, dtype=tf.float32)
            gru = tf.nn.rnn_cell.GRUCell
            (fw, bw), _ = tf.nn.bidirectional_dynamic_rnn(gru(3), gru(3), x, sequence_length=n,
                                                          dtype=tf.float32)
            (fw2, bw2), _ = tf.nn.bidirectional_dynamic_rnn(gru(2), gru(2), x, dtype=tf.float32,
                                                            scope="no_lengths")
            loss = (tf.reduce_sum(out * out) + tf.reduce_sum(state[1]) + tf.reduce_sum(fw * bw)
                    + tf.reduce_sum(fw2 * bw2 * bw2))
            variables = tf.trainable_variables()
            grads = tf.gradients(loss, [*variables, x])
            assert out.shape.as_list() == ([3, 5, 5] if known else [None, None, 5])
            with tf.Session() as sess:
                sess.run(tf.global_variables_initializer())
                if weights is None:
                    weights = {v.name: sess.run(v) for v in variables}
                for v in variables:
                    v.load(weights[v.name], sess)
                results.append(sess.run([out, state[0].h, loss, *grads], {x: inputs, n: lengths}))
    assert len(results[1]) == 3 + 22 + 1  # the gradients of 22 variables and of the inputs
    for unrolled, looped in zip(*results):
        np.testing.assert_allclose(looped, unrolled, rtol=1e-5, atol=1e-6)
