"""tf.train: optimizers against NumPy references of TF's update rules, the global
step, learning-rate decay, and Saver checkpoints."""

import json
import os

import numpy as np
import pytest

import dflow as tf

W0 = np.array([[1.0, -2.0, 3.0], [0.5, 0.0, -1.5]], np.float32)
TARGET = np.array([[0.0, 1.0, 2.0], [-1.0, 0.5, 0.0]], np.float32)
B0 = np.float32(3.0)


def _model():
    """Two variables; loss = sum((W - T)^2) + 3 (b - 1)^2, so dW = 2 (W - T), db = 6 (b - 1)."""
    w = tf.Variable(W0, name="w")
    b = tf.Variable(B0, name="b")
    loss = tf.reduce_sum(tf.square(w - TARGET)) + 3.0 * tf.square(b - 1.0)
    return w, b, loss


def _grads(w, b):
    return [2.0 * (w - TARGET), 6.0 * (b - 1.0)]


# ---- NumPy references of TF's kernels (float64; compared with a float tolerance) ----
def _gd(lr):
    def step(params, slots, t):
        return [p - lr * g for p, g in zip(params, _grads(*params))], slots
    return step


def _momentum(lr, mu, nesterov=False):
    def step(params, slots, t):
        accums = slots or [np.zeros_like(p) for p in params]
        new_params, new_accums = [], []
        for p, g, a in zip(params, _grads(*params), accums):
            a = mu * a + g
            new_params.append(p - (lr * g + lr * mu * a) if nesterov else p - lr * a)
            new_accums.append(a)
        return new_params, new_accums
    return step


def _adam(lr, b1=0.9, b2=0.999, eps=1e-8):
    def step(params, slots, t):  # t counts from 1
        ms, vs = slots or ([np.zeros_like(p) for p in params], [np.zeros_like(p) for p in params])
        lr_t = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        out, new_m, new_v = [], [], []
        for p, g, m, v in zip(params, _grads(*params), ms, vs):
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            out.append(p - lr_t * m / (np.sqrt(v) + eps))
            new_m.append(m)
            new_v.append(v)
        return out, (new_m, new_v)
    return step


OPTIMIZERS = [  # (id, build the optimizer, NumPy step)
    ("sgd", lambda: tf.train.GradientDescentOptimizer(0.1), _gd(0.1)),
    ("momentum", lambda: tf.train.MomentumOptimizer(0.05, 0.9), _momentum(0.05, 0.9)),
    ("nesterov", lambda: tf.train.MomentumOptimizer(0.05, 0.9, use_nesterov=True),
     _momentum(0.05, 0.9, nesterov=True)),
    ("adam", lambda: tf.train.AdamOptimizer(0.1), _adam(0.1)),
    ("adam-hyper", lambda: tf.train.AdamOptimizer(0.02, beta1=0.5, beta2=0.9, epsilon=1e-3),
     _adam(0.02, 0.5, 0.9, 1e-3)),
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("make, reference", [row[1:] for row in OPTIMIZERS],
                         ids=[row[0] for row in OPTIMIZERS])
def test_optimizer_matches_numpy_reference(make, reference, threads):
    with tf.Graph().as_default():
        w, b, loss = _model()
        train = make().minimize(loss)
        config = tf.ConfigProto(inter_op_parallelism_threads=threads)
        with tf.Session(config=config) as sess:
            sess.run(tf.global_variables_initializer())
            params, slots = [W0.astype(np.float64), np.float64(B0)], None
            for t in range(1, 4):
                sess.run(train)
                params, slots = reference(params, slots, t)
                got_w, got_b = sess.run([w, b])
                np.testing.assert_allclose(got_w, params[0], rtol=1e-5, atol=1e-6)
                np.testing.assert_allclose(got_b, params[1], rtol=1e-5, atol=1e-6)
                assert got_w.dtype == np.float32 and got_b.dtype == np.float32


def test_adam_slots_and_beta_powers():
    with tf.Graph().as_default():
        w, b, loss = _model()
        opt = tf.train.AdamOptimizer(0.1, beta1=0.8, beta2=0.95)
        train = opt.minimize(loss)
        names = {v.op.name for v in tf.global_variables()}
        assert {"w/Adam", "w/Adam_1", "b/Adam", "b/Adam_1", "beta1_power", "beta2_power"} <= names
        assert {v.op.name for v in tf.trainable_variables()} == {"w", "b"}
        assert opt.get_slot_names() == ["m", "v"]
        m, v = opt.get_slot(w, "m"), opt.get_slot(w, "v")
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            for _ in range(2):
                sess.run(train)
            beta1_power, beta2_power = opt._beta_powers()
            np.testing.assert_allclose(sess.run(beta1_power), 0.8 ** 3, rtol=1e-6)
            np.testing.assert_allclose(sess.run(beta2_power), 0.95 ** 3, rtol=1e-6)
            _, (ms, vs) = _adam(0.1, 0.8, 0.95)(*_adam(0.1, 0.8, 0.95)(
                [W0.astype(np.float64), np.float64(B0)], None, 1), 2)
            np.testing.assert_allclose(sess.run(m), ms[0], rtol=1e-5)
            np.testing.assert_allclose(sess.run(v), vs[0], rtol=1e-5)


def test_momentum_slot_named_like_tf_and_second_optimizer_gets_suffix():
    with tf.Graph().as_default():
        w, _, loss = _model()
        first, second = tf.train.MomentumOptimizer(0.1, 0.9), tf.train.MomentumOptimizer(0.1, 0.9)
        first.minimize(loss)
        second.minimize(loss)
        assert first.get_slot(w, "momentum").op.name == "w/Momentum"
        assert second.get_slot(w, "momentum").op.name == "w/Momentum_1"
        assert not first.get_slot(w, "momentum").trainable


def test_update_does_not_mutate_fetched_arrays():
    with tf.Graph().as_default():
        w, _, loss = _model()
        train = tf.train.AdamOptimizer(0.1).minimize(loss)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            before = sess.run(w)
            sess.run(train)
            np.testing.assert_array_equal(before, W0)


def test_minimize_increments_global_step_after_updates():
    with tf.Graph().as_default():
        step = tf.train.get_or_create_global_step()
        assert tf.train.get_or_create_global_step() is step
        assert step.op.name == "global_step" and step.dtype == tf.int64 and not step.trainable
        assert step in tf.global_variables() and tf.train.get_global_step() is step
        w, b, loss = _model()
        train = tf.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
        assert train.name == "GradientDescent" and train in tf.get_default_graph().get_collection(
            tf.GraphKeys.TRAIN_OP)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            assert sess.run(step) == 0
            for _ in range(3):
                sess.run(train)
            assert sess.run(step) == 3


def test_create_global_step_twice_fails():
    with tf.Graph().as_default():
        assert tf.train.get_global_step() is None
        with tf.name_scope("somewhere"):
            step = tf.train.create_global_step()
        assert step.op.name == "global_step"
        with pytest.raises(ValueError, match="already exists"):
            tf.train.create_global_step()


def test_decayed_learning_rate_is_read_before_the_step_increments():
    with tf.Graph().as_default():
        step = tf.train.get_or_create_global_step()
        lr = tf.train.exponential_decay(0.1, step, decay_steps=1, decay_rate=0.5)
        w, b, loss = _model()
        train = tf.train.GradientDescentOptimizer(lr).minimize(loss, global_step=step)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            params = [W0.astype(np.float64), np.float64(B0)]
            for k in range(3):
                sess.run(train)
                params, _ = _gd(0.1 * 0.5 ** k)(params, None, k + 1)
            np.testing.assert_allclose(sess.run(w), params[0], rtol=1e-5)
            np.testing.assert_allclose(sess.run(b), params[1], rtol=1e-5)


@pytest.mark.parametrize("staircase", [False, True])
def test_exponential_decay_values(staircase):
    with tf.Graph().as_default():
        step = tf.placeholder(tf.int64, [])
        lr = tf.train.exponential_decay(0.1, step, 10, 0.96, staircase=staircase)
        assert lr.op.name == "ExponentialDecay" and lr.dtype == tf.float32
        with tf.Session() as sess:
            for s in [0, 5, 10, 15, 25, 100]:
                exponent = s // 10 if staircase else s / 10
                np.testing.assert_allclose(sess.run(lr, {step: s}), 0.1 * 0.96 ** exponent,
                                           rtol=1e-6)


def test_no_gradient_error():
    with tf.Graph().as_default():
        w = tf.Variable([1.0, 2.0], name="w")
        loss = tf.reduce_sum(tf.stop_gradient(w) * 2.0)
        opt = tf.train.GradientDescentOptimizer(0.1)
        with pytest.raises(ValueError, match=r"No gradients provided for any variable, check your "
                                             r"graph .* between variables \[.*'w:0'.*\] and loss"):
            opt.minimize(loss)
        assert opt.compute_gradients(loss) == [(None, w)]
        with pytest.raises(ValueError, match="No gradients provided for any variable"):
            opt.apply_gradients([(None, w)])


def test_variables_without_gradient_are_left_alone():
    with tf.Graph().as_default():
        w, b, loss = _model()
        unused = tf.Variable(7.0, name="unused")
        train = tf.train.MomentumOptimizer(0.1, 0.9).minimize(loss)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(train)
            assert sess.run(unused) == 7.0
            assert not np.allclose(sess.run(w), W0)


def test_update_ops_are_colocated_with_their_variable():
    with tf.Graph().as_default():
        with tf.device("/job:ps/task:0"):
            w, b, loss = _model()
        with tf.device("/job:worker/task:1"):
            tf.train.MomentumOptimizer(0.1, 0.9).minimize(loss)
        graph = tf.get_default_graph()
        assert graph.get_operation_by_name("w/Momentum").device == w.device
        update = [op for op in graph.get_operations() if op.type == "ApplyMomentum"]
        assert len(update) == 2 and all(op.device == w.device for op in update)


# ---- Saver ----------------------------------------------------------------------------------
def _saver_graph():
    w, b, loss = _model()
    step = tf.train.get_or_create_global_step()
    train = tf.train.AdamOptimizer(0.1).minimize(loss, global_step=step)
    return w, b, step, train


def test_saver_round_trip_restores_all_variables(tmp_path):
    with tf.Graph().as_default() as graph:
        w, b, step, train = _saver_graph()
        saver = tf.train.Saver()
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(train)
            saved = {v.op.name: sess.run(v) for v in tf.global_variables()}
            path = saver.save(sess, str(tmp_path / "model.ckpt"), global_step=step)
            assert path == str(tmp_path / "model.ckpt-1")
            version = graph.version
            for _ in range(3):
                sess.run(train)
            saver.restore(sess, path)
            for v in tf.global_variables():  # includes slots like w/Adam and beta1_power
                np.testing.assert_array_equal(sess.run(v), saved[v.op.name])
            for _ in range(3):  # save/restore in a loop adds no ops
                saver.restore(sess, saver.save(sess, str(tmp_path / "again")))
            assert graph.version == version
        with tf.Session() as fresh:  # a new session restores without initializing
            saver.restore(fresh, tf.train.latest_checkpoint(str(tmp_path)))
            np.testing.assert_array_equal(fresh.run(w), saved["w"])


@pytest.mark.parametrize("keep", [2, 3, 5])
def test_max_to_keep_and_checkpoint_file(tmp_path, keep):
    with tf.Graph().as_default():
        w, b, step, train = _saver_graph()
        saver = tf.train.Saver(max_to_keep=keep)
        prefix = str(tmp_path / "model")
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            paths = []
            for _ in range(6):
                sess.run(train)
                paths.append(saver.save(sess, prefix, global_step=step))
                assert saver.last_checkpoints == paths[-keep:]  # (3 kept the last one only)
        assert paths == [f"{prefix}-{i}" for i in range(1, 7)]
        assert [os.path.exists(p) for p in paths] == [False] * (6 - keep) + [True] * keep
        with open(tmp_path / "checkpoint") as f:
            state = json.load(f)
        assert state == {"model_checkpoint_path": "model-6",
                         "all_model_checkpoint_paths": [f"model-{i}" for i in range(7 - keep, 7)]}
        assert tf.train.latest_checkpoint(str(tmp_path)) == paths[-1]
        assert tf.train.get_checkpoint_state(str(tmp_path)).all_model_checkpoint_paths == paths[-keep:]
        assert not [n for n in os.listdir(tmp_path) if ".tmp-" in n]


def test_a_meta_graph_beside_each_checkpoint_runs_the_model_again_in_a_new_graph(tmp_path):
    """TF 1.x's save-then-load scripts: Saver.save writes <checkpoint>.meta, and in a new graph
    import_meta_graph + restore gets the model back, by its tensors' and ops' names, with its
    optimizer: training goes on exactly as in the graph that saved it. An expired checkpoint's
    meta graph goes with it."""
    with tf.Graph().as_default():
        w, b, step, train = _saver_graph()
        saver = tf.train.Saver(max_to_keep=2)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            for _ in range(3):
                sess.run(train)
                path = saver.save(sess, str(tmp_path / "model"), global_step=step)
            sess.run(train)
            expected = sess.run([w, b, step])
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "model-2", "model-2.meta", "model-3",
                                            "model-3.meta"]
    with tf.Graph().as_default(), tf.Session() as sess:  # a directory not made yet: made, as TF's
        tf.Variable(1.0)
        sess.run(tf.global_variables_initializer())
        nested = tf.train.Saver().save(sess, str(tmp_path / "new" / "dir" / "model.ckpt"))
        assert tf.train.latest_checkpoint(str(tmp_path / "new" / "dir")) == nested
    with tf.Graph().as_default() as graph, tf.Session() as sess:
        restored = tf.train.import_meta_graph(path + ".meta")
        restored.restore(sess, path)
        sess.run(graph.get_operation_by_name(train.name))
        got = sess.run([graph.get_tensor_by_name(w.name), graph.get_tensor_by_name(b.name),
                        tf.train.get_global_step()])
        assert len(tf.trainable_variables()) == 2
        assert [op.name for op in graph.get_collection(tf.GraphKeys.TRAIN_OP)] == [train.name]
        again = restored.save(sess, str(tmp_path / "again"))
        assert os.path.exists(again + ".meta")
    for value, want in zip(got, expected):
        np.testing.assert_array_equal(value, want)


def test_import_meta_graph_under_scopes_makes_copies_and_refuses_what_it_cannot_read(tmp_path):
    with tf.Graph().as_default():
        v = tf.Variable([1.0, 2.0], name="v")
        tf.multiply(v, 3.0, name="tripled")
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            path = tf.train.Saver().save(sess, str(tmp_path / "m"), write_meta_graph=False)
            meta = tf.train.Saver().export_meta_graph(str(tmp_path / "m.meta"))
    with tf.Graph().as_default() as graph, tf.Session() as sess:
        first = tf.train.import_meta_graph(str(tmp_path / "m.meta"), import_scope="a")
        second = tf.train.import_meta_graph(meta, import_scope="b", clear_devices=True)
        first.restore(sess, path)
        second.restore(sess, path)
        sess.run(tf.assign(graph.get_tensor_by_name("b/v:0"), [0.0, 0.0]))
        assert sess.run(graph.get_tensor_by_name("a/tripled:0")).tolist() == [3.0, 6.0]
        assert sess.run(graph.get_tensor_by_name("b/tripled:0")).tolist() == [0.0, 0.0]
        with pytest.raises(ValueError, match="already has ops named a/v.*import_scope"):
            tf.train.import_meta_graph(meta, import_scope="a/")
    (tmp_path / "tf.meta").write_bytes(b"\n\x8f\x01\n\x0cVariableV2\x12\x03\xff\xfe")  # a protobuf
    with pytest.raises(ValueError, match="written by TensorFlow is a MetaGraphDef protobuf"):
        tf.train.import_meta_graph(str(tmp_path / "tf.meta"))
    with pytest.raises(FileNotFoundError, match="no meta graph file .*latest_checkpoint"):
        tf.train.import_meta_graph(str(tmp_path / "nowhere.meta"))


def test_import_meta_graph_into_the_graph_that_saved_it_renames_the_copies_as_tf(tmp_path):
    """TF 1.x scripts that save, then import_meta_graph + restore in the same graph (no
    reset_default_graph): the imported ops that clash are renamed name_1 (TF's outputs, TF 2.21
    compat.v1), the names the script had still name its own ops, and the copies are variables
    of their own."""
    v = tf.Variable(tf.constant([1.0, 2.0]), name="v")
    tf.multiply(v, 3.0, name="tripled")
    sess = tf.Session()
    sess.run(tf.global_variables_initializer())
    path = tf.train.Saver().save(sess, str(tmp_path / "m"))
    sess.run(tf.assign(v, [5.0, 6.0]))
    saver = tf.train.import_meta_graph(path + ".meta")
    saver.restore(sess, path)
    graph = tf.get_default_graph()
    names = sorted(op.name for op in graph.get_operations() if op.name.startswith("v"))
    assert names[:4] == ["v", "v/Assign", "v/Assign_1", "v/read"] and "v_1" in names
    assert sess.run("v:0").tolist() == [1.0, 2.0]  # the saver of the meta graph restores these, as TF's
    sess.run(graph.get_operation_by_name("v/Assign_1"))  # the copy's own initializer
    sess.run(tf.assign(graph.get_tensor_by_name("v_1:0"), [0.0, 0.0]))
    assert sess.run("tripled_1:0").tolist() == [0.0, 0.0] and sess.run("tripled:0").tolist() == [3.0, 6.0]
    assert len(tf.global_variables()) == 2
    sess.close()


def test_saver_takes_tensorflow_s_arguments(tmp_path):
    with tf.Graph().as_default():
        tf.Variable(np.arange(6, dtype=np.float32), name="w")
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            padded = tf.train.Saver(pad_step_number=True, sharded=True, write_version=2).save(
                sess, str(tmp_path / "p"), global_step=7)
    assert os.path.basename(padded) == "p-00000007"
    with tf.Graph().as_default():
        square = tf.Variable(tf.zeros([2, 3]), name="w")
        with tf.Session() as sess:
            with pytest.raises(tf.errors.InvalidArgumentError, match="shape"):
                tf.train.Saver().restore(sess, padded)
            tf.train.Saver(reshape=True).restore(sess, padded)
            assert sess.run(square).tolist() == [[0, 1, 2], [3, 4, 5]]
    with tf.Graph().as_default(), tf.Session() as sess:
        empty = tf.train.Saver(allow_empty=True)
        assert empty.save(sess, str(tmp_path / "e")) is None and not os.path.exists(tmp_path / "e")
        empty.restore(sess, padded)
        with pytest.raises(ValueError, match="No variables to save"):
            tf.train.Saver()
    with tf.Graph().as_default():  # one checkpoint of each span kept for good: every one, spans of 0 h
        w, b, step, train = _saver_graph()
        saver = tf.train.Saver(max_to_keep=1, keep_checkpoint_every_n_hours=0)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            paths = [saver.save(sess, str(tmp_path / "k"), global_step=i) for i in range(3)]
        assert all(os.path.exists(p) for p in paths) and saver.last_checkpoints == paths[-1:]


def test_leftover_temp_directory_is_never_the_latest(tmp_path):
    import zarr

    with tf.Graph().as_default():
        w, b, step, train = _saver_graph()
        saver = tf.train.Saver()
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            assert tf.train.latest_checkpoint(str(tmp_path)) is None
            good = saver.save(sess, str(tmp_path / "model"), global_step=7)
            # what a crash midway through saving step 8 leaves behind
            crashed = tmp_path / "model-8.tmp-deadbeef"
            zarr.open_group(str(crashed), mode="w").create_array("w", shape=(2, 3), dtype="float32")
            assert tf.train.latest_checkpoint(str(tmp_path)) == good
            assert not tf.train.checkpoint_exists(str(crashed))
            with pytest.raises(tf.errors.NotFoundError, match="not a complete"):
                saver.restore(sess, str(crashed))
            os.remove(tmp_path / "checkpoint")
            assert tf.train.latest_checkpoint(str(tmp_path)) is None


def test_restore_names_missing_variable_and_lists_checkpoint(tmp_path):
    with tf.Graph().as_default():
        w = tf.Variable(W0, name="w")
        extra = tf.Variable(1.0, name="layer/extra")
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            path = tf.train.Saver([w]).save(sess, str(tmp_path / "only_w"))
            with pytest.raises(tf.errors.NotFoundError, match=r"Key layer/extra not found in "
                                                              r"checkpoint .*only_w; it holds: w"):
                tf.train.Saver([w, extra]).restore(sess, path)
            with pytest.raises(tf.errors.NotFoundError, match="nowhere"):
                tf.train.Saver([w]).restore(sess, str(tmp_path / "nowhere"))


def test_restore_rejects_shape_or_dtype_mismatch(tmp_path):
    with tf.Graph().as_default():
        tf.Variable(W0, name="w")
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            path = tf.train.Saver().save(sess, str(tmp_path / "ckpt"))
    with tf.Graph().as_default():
        tf.Variable(np.zeros(3, np.float32), name="w")
        with tf.Session() as sess, pytest.raises(tf.errors.InvalidArgumentError, match="shape"):
            tf.train.Saver().restore(sess, path)


def test_saver_with_dict_names_and_slashes(tmp_path):
    import zarr

    with tf.Graph().as_default():
        w = tf.Variable(W0, name="scope/w")
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            path = tf.train.Saver({"renamed/weights": w}).save(sess, str(tmp_path / "c"))
            stored = zarr.open_group(path, mode="r")
            assert dict(stored.attrs["variables"]) == {"renamed/weights": "renamed%2Fweights"}
            np.testing.assert_array_equal(stored["renamed%2Fweights"][...], W0)
            sess.run(w.assign(np.zeros_like(W0)))
            tf.train.Saver({"renamed/weights": w}).restore(sess, path)
            np.testing.assert_array_equal(sess.run(w), W0)


def test_scaffold_and_the_monitored_sessions_of_tf_train(tmp_path):
    """Scaffold's init_fn runs once the chief initialized; SingularMonitoredSession restores the
    latest checkpoint; MonitoredSession (a ChiefSessionCreator's) saves nothing of its own; both
    saving knobs None: MonitoredTrainingSession saves no checkpoint, as TF's."""
    with tf.Graph().as_default():
        step = tf.train.get_or_create_global_step()
        w = tf.Variable(1.0)
        increment = tf.group(tf.assign_add(step, 1), tf.assign_add(w, 1.0))
        seen = []
        scaffold = tf.train.Scaffold(init_fn=lambda scaffold, sess: seen.append(float(sess.run(w))))
        with tf.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path), scaffold=scaffold,
                                               save_checkpoint_steps=2) as sess:
            for _ in range(3):
                sess.run(increment)
        assert seen == [1.0] and tf.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-3")
        with tf.train.SingularMonitoredSession(checkpoint_dir=str(tmp_path)) as sess:
            assert (int(sess.run(step)), float(sess.run(w))) == (3, 4.0)
            assert isinstance(sess.raw_session(), tf.Session)
        creator = tf.train.ChiefSessionCreator(checkpoint_dir=str(tmp_path))
        with tf.train.MonitoredSession(session_creator=creator) as sess:
            sess.run(increment)
        assert tf.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-3")
        unsaved = tmp_path / "unsaved"
        with tf.train.MonitoredTrainingSession(checkpoint_dir=str(unsaved), save_checkpoint_secs=None,
                                               save_checkpoint_steps=None) as sess:
            sess.run(increment)
        assert tf.train.latest_checkpoint(str(unsaved)) is None
