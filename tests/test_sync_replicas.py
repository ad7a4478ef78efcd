"""SyncReplicasOptimizer in the local session: replica towers of one graph, each run by its own
thread against one session state, the chief's loop on another, as workers and a PS would."""

import threading
import time

import numpy as np
import pytest

import dflow as tf
from dflow.runtime.state import SessionState

FEATURES, BATCH, LR = 3, 4, 0.1
# the towers' /job:ps and /job:worker devices, all run in this process (without it: an error, as in TF)
IN_ONE_PROCESS = tf.ConfigProto(allow_soft_placement=True)
W0 = np.array([[1.0], [-0.5], [0.25]], np.float32)

OPTIMIZERS = {
    "sgd": lambda: tf.train.GradientDescentOptimizer(LR),
    "momentum": lambda: tf.train.MomentumOptimizer(LR, 0.9),
    "adam": lambda: tf.train.AdamOptimizer(LR),
}


class Towers:
    """A linear model on PS tasks and one tower per replica, each placed on its worker task
    (so SyncReplicasOptimizer reads the replica's index from the device)."""

    def __init__(self, replicas, make_opt=OPTIMIZERS["sgd"], replicas_to_aggregate=None, timeout=20.0,
                 variable_averages=None):
        def setter(task):
            return tf.train.replica_device_setter(ps_tasks=2, worker_device=f"/job:worker/task:{task}")

        with tf.device(setter(0)):
            self.w = tf.Variable(W0, name="w")
            self.b = tf.Variable(np.zeros(1, np.float32), name="b")
            self.step = tf.train.get_or_create_global_step()
        self.opt = tf.train.SyncReplicasOptimizer(
            make_opt(), replicas_to_aggregate or replicas, total_num_replicas=replicas, timeout=timeout,
            variable_averages=variable_averages, variables_to_average=[self.w])
        self.towers = []
        for task in range(replicas):
            with tf.device(setter(task)):
                x = tf.placeholder(tf.float32, [None, FEATURES], name="x")
                y = tf.placeholder(tf.float32, [None, 1], name="y")
                loss = tf.reduce_mean(tf.square(tf.matmul(x, self.w) + self.b - y))
                self.towers.append((x, y, self.opt.minimize(loss, global_step=self.step)))
        self.hook = self.opt.make_session_run_hook(is_chief=True)
        self.hook.begin()
        self.sess = tf.Session(config=IN_ONE_PROCESS)
        self.sess.run(tf.global_variables_initializer())

    def start_chief(self):
        self.hook.after_create_session(self.sess, None)

    def train(self, replica, x, y):
        feed_x, feed_y, train_op = self.towers[replica]
        self.sess.run(train_op, {feed_x: x, feed_y: y})

    def close(self):
        self.hook.end(self.sess)
        self.sess.close()

    def accumulator(self, var):
        return self.sess.state.resources[f"{var.op.name}/grad_accum"]


def _in_threads(*functions, timeout=30.0):
    """Run each function on its own thread; the errors they raised, by position."""
    errors = [None] * len(functions)

    def run(i, function):
        try:
            function()
        except Exception as error:  # noqa: BLE001 - handed to the test
            errors[i] = error

    threads = [threading.Thread(target=run, args=(i, f), daemon=True) for i, f in enumerate(functions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
        assert not thread.is_alive(), "a replica is still blocked"
    return errors


def _wait_for(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting in the test"
        time.sleep(0.005)


def _data(replicas, steps, seed=0):
    rng = np.random.default_rng(seed)
    xs = rng.normal(size=(replicas, steps, BATCH, FEATURES)).astype(np.float32)
    ys = rng.normal(size=(replicas, steps, BATCH, 1)).astype(np.float32)
    return xs, ys


def _single_process(make_opt, batches):
    """The same model trained in one process, one step per (x, y) batch."""
    with tf.Graph().as_default():
        w, b = tf.Variable(W0, name="w"), tf.Variable(np.zeros(1, np.float32), name="b")
        x = tf.placeholder(tf.float32, [None, FEATURES])
        y = tf.placeholder(tf.float32, [None, 1])
        train = make_opt().minimize(tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y)))
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            for batch_x, batch_y in batches:
                sess.run(train, {x: batch_x, y: batch_y})
            return sess.run([w, b])


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_sync_training_equals_one_process_on_the_concatenated_batch(optimizer):
    replicas, steps = 3, 4
    xs, ys = _data(replicas, steps)
    model = Towers(replicas, OPTIMIZERS[optimizer])
    model.start_chief()

    def replica(r):
        return lambda: [model.train(r, xs[r, k], ys[r, k]) for k in range(steps)]

    assert _in_threads(*[replica(r) for r in range(replicas)]) == [None] * replicas
    assert model.sess.run(model.step) == steps  # one global step per aggregated step
    w, b = model.sess.run([model.w, model.b])
    model.close()
    expected_w, expected_b = _single_process(OPTIMIZERS[optimizer], [
        (np.concatenate(xs[:, k]), np.concatenate(ys[:, k])) for k in range(steps)])
    np.testing.assert_allclose(w, expected_w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b, expected_b, rtol=1e-5, atol=1e-6)
    assert model.opt.get_chief_queue_runner().exceptions_raised == []


def test_between_graph_replicas_share_the_ps_state_by_name():
    """Each replica builds its own graph and session, as a worker process does; their
    variables, accumulators and barrier meet in one state, as on a PS task."""
    replicas, steps = 2, 3
    xs, ys = _data(replicas, steps)
    shared = SessionState()
    workers = []
    for task in range(replicas):
        with tf.Graph().as_default() as graph, tf.device(tf.train.replica_device_setter(
                ps_tasks=1, worker_device=f"/job:worker/task:{task}")):
            w = tf.Variable(W0, name="w")
            b = tf.Variable(np.zeros(1, np.float32), name="b")
            step = tf.train.get_or_create_global_step()
            x = tf.placeholder(tf.float32, [None, FEATURES])
            y = tf.placeholder(tf.float32, [None, 1])
            opt = tf.train.SyncReplicasOptimizer(tf.train.GradientDescentOptimizer(LR), replicas)
            train = opt.minimize(tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y)), global_step=step)
            hook = opt.make_session_run_hook(is_chief=task == 0)
            hook.begin()
            sess = tf.Session(graph=graph, config=IN_ONE_PROCESS)
            sess.state = shared
            if task == 0:
                sess.run(tf.global_variables_initializer())
            hook.after_create_session(sess, None)
        workers.append((sess, hook, x, y, train))

    def replica(r):
        sess, _, x, y, train = workers[r]
        return lambda: [sess.run(train, {x: xs[r, k], y: ys[r, k]}) for k in range(steps)]

    assert _in_threads(*[replica(r) for r in range(replicas)]) == [None] * replicas
    chief_session, chief_hook = workers[0][:2]
    trained = chief_session.run("w:0")
    chief_hook.end(chief_session)
    expected = _single_process(OPTIMIZERS["sgd"], [
        (np.concatenate(xs[:, k]), np.concatenate(ys[:, k])) for k in range(steps)])
    np.testing.assert_allclose(trained, expected[0], rtol=1e-5, atol=1e-6)
    assert {"w/grad_accum", "b/grad_accum", "sync_replicas/step_barrier"} == set(shared.resources)


def test_a_stale_gradient_is_dropped_and_its_replica_does_not_wait():
    xs, ys = _data(3, 1)
    model = Towers(3, replicas_to_aggregate=2)
    model.start_chief()
    assert _in_threads(lambda: model.train(0, xs[0, 0], ys[0, 0]),
                       lambda: model.train(1, xs[1, 0], ys[1, 0])) == [None, None]
    after_one_step = model.sess.run([model.w, model.b])
    started = time.monotonic()
    model.train(2, xs[2, 0], ys[2, 0])  # computed at step 0, which is over: dropped, no wait
    assert time.monotonic() - started < 1.0
    np.testing.assert_array_equal(model.sess.run([model.w, model.b])[0], after_one_step[0])
    assert model.sess.run(model.step) == 1 and model.accumulator(model.w).contributors == []
    expected = _single_process(OPTIMIZERS["sgd"], [(np.concatenate(xs[:2, 0]), np.concatenate(ys[:2, 0]))])
    np.testing.assert_allclose(after_one_step[0], expected[0], rtol=1e-5, atol=1e-6)
    model.close()


def test_exactly_replicas_to_aggregate_gradients_are_averaged_and_the_late_one_waits_for_the_step():
    xs, ys = _data(3, 1)
    model = Towers(3, replicas_to_aggregate=2)
    model.sess.run(model.opt.chief_init_op)  # the chief's loop starts only once all three arrived
    barrier = lambda: model.sess.state.resources["sync_replicas/step_barrier"]  # noqa: E731
    results = []
    for r in range(3):
        thread = threading.Thread(target=lambda r=r: results.append(_in_threads(
            lambda: model.train(r, xs[r, 0], ys[r, 0]))), daemon=True)
        thread.start()
        _wait_for(lambda r=r: r in barrier().arrived.get(0, ()))
    assert model.accumulator(model.w).contributors == [0, 1]  # replica 2 came third: dropped
    assert results == []  # the late replica waits too, for the step it was dropped from
    model.start_chief()
    _wait_for(lambda: len(results) == 3)
    assert results == [[None]] * 3 and model.sess.run(model.step) == 1
    expected = _single_process(OPTIMIZERS["sgd"], [(np.concatenate(xs[:2, 0]), np.concatenate(ys[:2, 0]))])
    np.testing.assert_allclose(model.sess.run(model.w), expected[0], rtol=1e-5, atol=1e-6)
    model.close()


def test_backup_workers_train_in_lock_step_to_the_last_step():
    # every replica sees the same batch, so whichever two are averaged the step is the same
    xs, ys = _data(1, 1)
    model = Towers(3, replicas_to_aggregate=2)
    model.start_chief()
    last_step = 6

    def replica(r):
        def loop():
            while model.sess.run(model.step) < last_step:
                model.train(r, xs[0, 0], ys[0, 0])
        return loop

    assert _in_threads(*[replica(r) for r in range(3)]) == [None] * 3
    assert model.sess.run(model.step) == last_step
    expected = _single_process(OPTIMIZERS["sgd"], [(xs[0, 0], ys[0, 0])] * last_step)
    np.testing.assert_allclose(model.sess.run(model.w), expected[0], rtol=1e-5, atol=1e-6)
    model.close()


def test_a_missing_replica_gives_a_deadline_error_naming_it():
    xs, ys = _data(2, 1)
    model = Towers(2, timeout=0.5)
    model.start_chief()
    [error] = _in_threads(lambda: model.train(0, xs[0, 0], ys[0, 0]))
    assert isinstance(error, tf.errors.DeadlineExceededError)
    assert "did not arrive: [1]" in str(error) and "replica 0 waited 0.5 s at step 0" in str(error)
    runner = model.opt.get_chief_queue_runner()
    _wait_for(lambda: runner.exceptions_raised)
    assert "did not send one: [1]" in str(runner.exceptions_raised[0])
    model.close()


def test_without_the_chief_the_error_says_to_start_it():
    xs, ys = _data(2, 1)
    model = Towers(2, timeout=0.5)
    model.sess.run(model.opt.chief_init_op)
    errors = _in_threads(*[lambda r=r: model.train(r, xs[r, 0], ys[r, 0]) for r in range(2)])
    assert all("is the chief's queue runner running" in str(e) for e in errors)
    model.sess.close()


def test_stopping_the_chief_cancels_the_waiting_replicas():
    xs, ys = _data(2, 1)
    model = Towers(2)
    model.start_chief()
    result = []
    thread = threading.Thread(target=lambda: result.append(_in_threads(
        lambda: model.train(0, xs[0, 0], ys[0, 0]))), daemon=True)
    thread.start()
    _wait_for(lambda: 0 in model.sess.state.resources["sync_replicas/step_barrier"].arrived.get(0, ()))
    model.hook.end(model.sess)
    thread.join(5)
    assert isinstance(result[0][0], tf.errors.CancelledError)
    assert model.opt.get_chief_queue_runner().exceptions_raised == []


def test_variable_averages_run_after_each_applied_step():
    class CountingAverages:
        """Shaped like tf.train.ExponentialMovingAverage: apply() returns the op to run."""

        def __init__(self):
            self.count = tf.Variable(0, name="averages_applied")
            self.averaged = None

        def apply(self, var_list):
            self.averaged = var_list
            return tf.assign_add(self.count, 1).op

    averages = CountingAverages()
    xs, ys = _data(2, 3)
    model = Towers(2, variable_averages=averages)
    model.sess.run(averages.count.initializer)
    model.start_chief()
    assert _in_threads(*[lambda r=r: [model.train(r, xs[r, k], ys[r, k]) for k in range(3)]
                         for r in range(2)]) == [None, None]
    _wait_for(lambda: model.sess.run(averages.count) == 3)
    assert averages.averaged == [model.w]
    model.close()


def test_one_replica_in_a_monitored_training_session():
    xs, ys = _data(1, 5)
    step = tf.train.get_or_create_global_step()
    w = tf.Variable(W0, name="w")
    b = tf.Variable(np.zeros(1, np.float32), name="b")
    x = tf.placeholder(tf.float32, [None, FEATURES])
    y = tf.placeholder(tf.float32, [None, 1])
    opt = tf.train.SyncReplicasOptimizer(tf.train.GradientDescentOptimizer(LR), replicas_to_aggregate=1)
    train = opt.minimize(tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y)), global_step=step)
    hooks = [opt.make_session_run_hook(is_chief=True), tf.train.StopAtStepHook(last_step=5)]
    with tf.train.MonitoredTrainingSession(hooks=hooks) as sess:
        k = 0
        while not sess.should_stop():
            sess.run(train, {x: xs[0, k], y: ys[0, k]})
            k += 1
        trained = sess.run(w)
    assert k == 5
    expected = _single_process(OPTIMIZERS["sgd"], list(zip(xs[0], ys[0])))
    np.testing.assert_allclose(trained, expected[0], rtol=1e-5, atol=1e-6)


# ---- placement and bad input -----------------------------------------------------------------
def test_accumulators_live_with_their_variables_and_the_barrier_with_the_global_step():
    model = Towers(2)
    graph = tf.get_default_graph()
    devices = {v.op.name: v.device for v in (model.w, model.b)}
    assert devices == {"w": "/job:ps/task:0", "b": "/job:ps/task:1"}
    for op in graph.get_operations():
        if op.type in ("AccumulatorApplyGradient", "AccumulatorTakeGradient"):
            assert op.device == devices[op.attrs["accumulator"].split("/")[0]], op.name
        elif op.type in ("SyncReplicasBarrier", "SyncReplicasRelease", "ApplyGradientDescent"):
            assert op.device.startswith("/job:ps/"), op.name
    barriers = [op for op in graph.get_operations() if op.type == "SyncReplicasBarrier"]
    assert [op.attrs["replica_id"] for op in barriers] == [0, 1]
    assert {op.device for op in barriers} == {model.step.device}
    local_steps = tf.local_variables()
    assert [v.device for v in local_steps] == ["/job:worker/task:0", "/job:worker/task:1"]
    assert [op.device for _, _, op in model.towers] == ["/job:worker/task:0", "/job:worker/task:1"]
    model.sess.close()


def test_bad_input_is_refused_with_what_to_do():
    w = tf.Variable(1.0, name="w")
    step = tf.train.get_or_create_global_step()
    sgd = tf.train.GradientDescentOptimizer(LR)
    with pytest.raises(ValueError, match="replicas_to_aggregate <= total_num_replicas"):
        tf.train.SyncReplicasOptimizer(sgd, 3, total_num_replicas=2)
    opt = tf.train.SyncReplicasOptimizer(sgd, 2)
    with pytest.raises(ValueError, match="Global step is required"):
        opt.minimize(w * w)
    with pytest.raises(ValueError, match="should be called after apply_gradients"):
        opt.get_chief_queue_runner()
    with pytest.raises(ValueError, match="cannot tell which replica this is"):
        opt.minimize(w * w, global_step=step)
    with pytest.raises(ValueError, match="out of range"):
        opt.apply_gradients(opt.compute_gradients(w * w), global_step=step, replica_id=2)
    opt.apply_gradients(opt.compute_gradients(w * w), global_step=step, replica_id=1)
    with pytest.raises(ValueError, match="already called for replica 1"):
        opt.apply_gradients(opt.compute_gradients(w * w), global_step=step, replica_id=1)
    other = tf.Variable(2.0, name="other")
    with pytest.raises(ValueError, match="every replica must update the same variables"):
        opt.apply_gradients([(tf.constant(1.0), other)], global_step=step, replica_id=0)
    backup = tf.train.SyncReplicasOptimizer(sgd, 2, total_num_replicas=4, name="backup")
    backup.apply_gradients([(tf.constant(1.0), w)], global_step=step, replica_id=0)
    with pytest.raises(ValueError, match=r"Too few tokens to finish the first step: 1 \(given\) vs 2"):
        backup.get_init_tokens_op(num_tokens=1)
    assert backup.get_init_tokens_op().type == "NoOp"
