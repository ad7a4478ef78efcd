"""The distributed session on a real LocalCluster (worker processes): the shared suite
(every case gives the same values locally and on the cluster), where things run and
live, and what goes wrong."""

import contextlib
import os
import time

import numpy as np
import pytest
from conftest import local_cluster_fixture
from distributed.comm.core import CommClosedError

import dflow as tf
from dflow.errors import FailedPreconditionError, InvalidArgumentError, UnavailableError
from dflow.runtime.passes import Devices, make_plan, place, prune

PS0, PS1, W0, W1 = "/job:ps/task:0", "/job:ps/task:1", "/job:worker/task:0", "/job:worker/task:1"


cluster = local_cluster_fixture(ps=2, workers=2)


# ---- the shared suite: one builder, two sessions, the same numbers ---------------------------
def _arithmetic():
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    with tf.device(PS0):
        a = tf.reduce_sum(x, axis=0)
    with tf.device(W1):
        b = a * 2.0 + tf.constant([1.0, 2.0, 3.0])
    feeds = {x: np.arange(6, dtype=np.float32).reshape(2, 3)}
    return [{"a": a, "pair": (b, tf.reduce_max(b))}] * 2, feeds


def _variables_and_control():
    with tf.device(PS0):
        v = tf.Variable(tf.constant([1.0, 2.0]), name="v")
    with tf.device(W0):
        bump = tf.assign_add(v, [10.0, 10.0])  # runs on PS0, beside v
        with tf.control_dependencies([bump]):  # a token crosses from PS0 to W0
            after = tf.constant([1.0, 1.0]) * 3.0
    return [tf.global_variables_initializer(), after, [after, bump], v], {}


def _seeded_initializers():
    tf.set_random_seed(7)
    with tf.device(PS1):
        w = tf.Variable(tf.truncated_normal([4, 5], stddev=0.1), name="w")
        u = tf.Variable(tf.random_uniform([3], -1.0, 1.0), name="u")
    return [tf.global_variables_initializer(), (w, u)], {}


def _training(optimizer):
    def build():
        rng = np.random.default_rng(0)
        xs = rng.normal(size=(32, 4)).astype(np.float32)
        ys = (xs @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32) + 0.25).astype(np.float32)
        x = tf.placeholder(tf.float32, [None, 4])
        y = tf.placeholder(tf.float32, [None, 1])
        step = tf.train.get_or_create_global_step()
        with tf.device(PS0):
            w = tf.Variable(tf.zeros([4, 1]), name="w")
        with tf.device(PS1):
            b = tf.Variable(tf.zeros([1]), name="b")
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
        train = optimizer().minimize(loss, global_step=step)
        runs = [tf.global_variables_initializer()] + [[train, loss]] * 15 + [(w, b, step)]
        return runs, {x: xs, y: ys}

    return build


def _deep_mnist():
    from dflow.data import load_digits
    from dflow.models import MODELS

    tf.set_random_seed(3)
    spec = MODELS["deep_mnist"]
    data = load_digits(spec.input_shape)
    images = tf.placeholder(tf.float32, [None, *spec.input_shape])
    labels = tf.placeholder(tf.int64, [None])
    with tf.device(tf.train.replica_device_setter(ps_tasks=2)):
        loss = spec.loss(spec(images), labels)
        train_op = tf.train.AdamOptimizer(1e-3).minimize(loss)
    feeds = {images: data.train_images[:16], labels: data.train_labels[:16]}
    return [tf.global_variables_initializer()] + [[train_op, loss]] * 3, feeds


SHARED_CASES = {
    "arithmetic": _arithmetic,
    "variables_and_control": _variables_and_control,
    "seeded_initializers": _seeded_initializers,
    "sgd": _training(lambda: tf.train.GradientDescentOptimizer(0.05)),
    "momentum": _training(lambda: tf.train.MomentumOptimizer(0.05, 0.9, use_nesterov=True)),
    "adam": _training(lambda: tf.train.AdamOptimizer(0.05)),
    "deep_mnist": _deep_mnist,
}


def _run_case(build, target, runner=""):
    with tf.Graph().as_default():
        runs, feeds = build()
        # in this process, the cases' /job:ps devices need soft placement (without it: an error, as in TF)
        config = tf.ConfigProto(allow_soft_placement=True, runner=runner)
        with tf.Session(target, config=config) as sess:
            return [sess.run(fetches, feeds) for fetches in runs]


@pytest.mark.parametrize("case", sorted(SHARED_CASES))
def test_shared_suite_local_and_cluster_agree(case, cluster):
    """Every case through the three runners: in this process, straight to the workers, as Dask tasks."""
    local = _run_case(SHARED_CASES[case], "", "local")
    for runner in ("direct", "dask"):
        remote = _run_case(SHARED_CASES[case], cluster.target, runner)
        tf.Session.reset(cluster.target)
        _assert_close(local, remote)


def _assert_close(a, b):
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _assert_close(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            _assert_close(x, y)
    elif a is None:
        assert b is None
    else:
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


# ---- where things run and live --------------------------------------------------------------
def test_parameter_server_step_has_three_stages_and_variables_live_on_the_ps(cluster, target):
    x = tf.placeholder(tf.float32, [None, 2])
    with tf.device(PS1):
        w = tf.Variable(tf.ones([2, 1]), name="weights")
    loss = tf.reduce_sum(tf.matmul(x, w))
    train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
    with tf.Session(target) as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(train, {x: np.ones((3, 2), np.float32)})
        stages = sess.runner.plan([train], {x.name}).stages
        assert [s.level for s in stages[PS1]] == [0, 2]
        assert {s.level for s in stages[W0]} >= {1}
        traffic = sess.last_run_stats.bytes_sent
        assert traffic[(PS1, W0)] == 8  # the 2x1 float32 weights, once
        assert traffic[(W0, PS1)] >= 8  # their gradient
        text = sess.describe_placement(train, {x: np.ones((3, 2), np.float32)})
        assert "weights/read" in text and f"{W0} -> {PS1}" in text

    held = cluster.client.run(lambda dask_worker: sorted(dask_worker.plugins["dflow"].state.variables))
    by_task = {cluster.spec.task_address("ps", 1): ["weights"]}
    for address, names in held.items():
        assert names == by_task.get(address, []), (address, names)


def _id_of_weights(dask_worker):
    return id(dask_worker.plugins["dflow"].state.variables["weights"])


def test_a_ps_writes_its_variable_in_place_once_the_step_s_read_of_it_has_left(cluster, target):
    # the PS's read stage sent the weights to the worker; its apply stage then finds them held by
    # nothing but the state (the read stage's values are let go) and writes the same array
    x = tf.placeholder(tf.float32, [None, 300])
    with tf.device(PS1):
        w = tf.Variable(tf.ones([300, 200]), name="weights")
    train = tf.train.AdamOptimizer(0.1).minimize(tf.reduce_sum(tf.matmul(x, w)))
    ps = cluster.spec.task_address("ps", 1)

    def array_id():
        return cluster.client.run(_id_of_weights, workers=[ps])[ps]

    with tf.Session(target) as sess:
        sess.run(tf.global_variables_initializer())
        ids, values = [], []
        for _ in range(4):
            sess.run(train, {x: np.ones((3, 300), np.float32)})
            ids.append(array_id())
            values.append(sess.run(w)[0, 0])
    assert len(set(ids[1:])) == 1, "the PS made a new array for its variable at every step"
    assert values[0] > values[1] > values[2] > values[3]  # the updates took effect


def test_dask_runner_stages_show_in_the_task_stream_each_on_its_roles_worker(cluster, target):
    x = tf.placeholder(tf.float32, [None, 2])
    with tf.device(PS1):
        w = tf.Variable(tf.ones([2, 1]), name="weights")
    with tf.device(W1):
        loss = tf.reduce_sum(tf.matmul(x, w))
        train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
    cluster.client.get_task_stream(start=0, stop=0)  # the scheduler's task stream, started
    with tf.Session(target, config=tf.ConfigProto(runner="dask")) as sess:
        sess.run(w.initializer)
        # Dask shifts each worker's times by the clock offset it estimates, so a task that ends
        # milliseconds after a window opens may fall before it (the step's first, once in CI):
        # the window opens a second early, and the step is told apart by its number below
        since = time.time() - 1.0
        assert sess.run([train, loss], {x: np.ones((3, 2), np.float32)})[1] == 6.0
        tasks = cluster.client.get_task_stream(start=since)
        assert float(sess.run(w)[0, 0]) == pytest.approx(1.0 - 0.1 * 3)
    role_at = {address: info["name"] for address, info in tf.cluster.worker_infos(cluster.client).items()}
    ran = {" ".join(str(t["key"]).split(":")[:2]): role_at[t["worker"]] for t in tasks}
    # the step's stages, named by role and kind, each on the worker its role's resource names
    assert {"ps/1 read-variables", "worker/1 forward-backward", "ps/1 apply-updates"} <= set(ran)
    assert all(label.split()[0] == role for label, role in ran.items()), ran
    # one Dask task per hop: the train op's NoOp, which only waits for the PS's updates, is none
    step = {str(t["key"]).split(":step ")[0] for t in tasks if ":step 2 " in str(t["key"])}
    assert step == {"ps/1:read-variables", "worker/1:forward-backward", "worker/1:forward-backward:fetch",
                    "ps/1:apply-updates"}


def test_variables_persist_across_sessions_and_are_shared_by_name(target):
    with tf.Graph().as_default():
        with tf.device(PS0):
            v = tf.Variable(5.0, name="shared")
        with tf.Session(target) as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(tf.assign_add(v, 1.0))
    with tf.Graph().as_default():  # a second client program, as between-graph replicas are
        with tf.device(PS0):
            v = tf.Variable(0.0, name="shared")
        with tf.Session(target) as sess:
            assert float(sess.run(v)) == 6.0


@pytest.mark.parametrize("runner", ["direct", "dask"])
def test_a_fed_array_is_the_caller_s_alone_on_the_cluster(target, runner):
    """The session does not copy a feed that its runner copies on its way to the tasks (either):
    a variable assigned from it, and the fed tensor fetched, do not alias the caller's array,
    which the run leaves unchanged."""
    fed = np.arange(6, dtype=np.float32)
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [6])
        with tf.device(PS0):
            v = tf.Variable(tf.zeros([6]), name=f"from_a_feed_{runner}")
        assigned = tf.assign(v, x)
        with tf.Session(target, config=tf.ConfigProto(runner=runner)) as sess:
            sess.run(tf.global_variables_initializer())
            value, echoed = sess.run([assigned, x], {x: fed})
            assert sess.runner.copies_feeds  # a client outside the cluster's processes
            echoed[:] = -1
            fed[:] = 7
            np.testing.assert_array_equal(sess.run(v), np.arange(6))
            np.testing.assert_array_equal(value, np.arange(6))


def test_ops_without_a_job_run_on_worker_0_and_updates_follow_their_variable():
    with tf.device(PS1):
        v = tf.Variable(1.0, name="v")
    with tf.device(W1):
        update = tf.assign(v, 2.0)
    y = v * 3.0
    tasks = {PS0: {}, PS1: {}, W0: {}, W1: {}}
    placed = place(prune(tf.get_default_graph().nx, [y.name, update.name], set()), Devices(W0, tasks))
    placement = dict(placed.nodes(data="device"))
    assert placement["v"] == placement[update.op.name] == placement["v/read"] == f"{PS1}/device:CPU:0"
    assert placement[y.op.name] == f"{W0}/device:CPU:0"


def test_stages_form_a_dag_with_sends_matching_receives():
    x = tf.placeholder(tf.float32, [2])
    with tf.device(PS0):
        a = x + 1.0
    with tf.device(W0):
        b = a * 2.0
    with tf.device(PS0):
        c = b + a
    part = make_plan(tf.get_default_graph(), [c], {x.name}, Devices(W0, {PS0: {}, W0: {}}))
    # W0's constant 2.0 needs nothing from PS0: it runs in a stage of its own at level 0
    assert [(s.task, s.level) for t in part.tasks for s in part.stages[t]] == [
        (PS0, 0), (PS0, 2), (W0, 0), (W0, 1)]
    first, second = part.stages[PS0]
    assert part.stages[W0][1].receives == {a.name: PS0} and part.stages[W0][1].sends == {PS0: (b.name,)}
    assert first.sends == {W0: (a.name,)} and first.keeps == (a.name,)
    assert second.receives == {b.name: W0} and second.fetches == (c.name,)


def test_described_placement_lists_whole_op_names_and_counts_the_rest():
    x = tf.placeholder(tf.float32, [2])
    with tf.device(W0):
        total = x
        for i in range(60):
            total = tf.add(total, 1.0, name=f"step_{i:02d}")
    plan = make_plan(tf.get_default_graph(), [total], {x.name}, Devices(W0, {W0: {}}))
    text = plan.describe()
    listed = text[text.index("(") + 1:text.rindex(")")]
    shown, rest = listed.split(", ... and ")
    assert text.startswith(f"{W0} stage 0: 120 ops (") and len(shown) <= 200
    assert rest == f"{120 - len(shown.split(', '))} more"
    assert all(name in plan.graph for name in shown.split(", "))  # none cut in the middle


# ---- what goes wrong ------------------------------------------------------------------------
def test_an_op_on_a_task_the_cluster_lacks_names_op_device_and_tasks(target, monkeypatch):
    from dflow.distributed import runner

    monkeypatch.setattr(runner, "TASK_WAIT_S", 2.0)  # a session waits this long for a task to join
    with tf.device("/job:ps/task:7"):
        v = tf.constant(1.0, name="lost") * 2.0
    with tf.Session(target) as sess:
        with pytest.raises(InvalidArgumentError, match=r"'lost'.*/job:ps/task:7.*/job:ps/task:0.*waited 2 s"):
            sess.run(v)


def test_gpu_op_without_soft_placement_is_an_error(target):
    with tf.device("/job:worker/task:1/gpu:0"):
        y = tf.constant(1.0) + 1.0
    with tf.Session(target, config=tf.ConfigProto(allow_soft_placement=False)) as sess:
        with pytest.raises(InvalidArgumentError, match="has 0 GPU"):
            sess.run(y)
    with tf.Session(target, config=tf.ConfigProto(allow_soft_placement=True)) as sess:
        assert float(sess.run(y)) == 2.0
    with tf.Session(target) as sess:  # TF's default: no soft placement
        with pytest.raises(InvalidArgumentError, match="has 0 GPU"):
            sess.run(y)


def test_errors_on_a_worker_reach_the_client_with_their_type(target):
    with tf.device(PS0):
        v = tf.Variable(1.0, name="never_initialized")
    x = tf.placeholder(tf.float32, [None])
    with tf.Session(target) as sess:
        with pytest.raises(FailedPreconditionError, match="never_initialized"):
            sess.run(v * 2.0)
        with pytest.raises(InvalidArgumentError, match="must feed a value for placeholder"):
            sess.run(x * 2.0)


@pytest.mark.slow
def test_every_step_after_a_task_died_for_good_names_it(monkeypatch):
    """A step after one that found ps/0 gone (and the session's view of the cluster without it)
    is an UnavailableError too, not a KeyError from that view (as a chief's hooks run more steps)."""
    from dflow.cluster import worker_process

    monkeypatch.setattr(worker_process, "MAX_RESTARTS", 0)  # ps/0 stays dead
    with tf.cluster.local(ps=1, workers=1) as c:
        with tf.device(PS0):
            v = tf.Variable(1.0, name="v")
        y = v * 2.0
        with tf.Session(c.target, config=tf.ConfigProto(operation_timeout_in_ms=20_000)) as sess:
            sess.run(tf.global_variables_initializer())
            with contextlib.suppress(CommClosedError):  # it dies before it can answer
                c.client.run(os._exit, 1, workers=[c.spec.task_address("ps", 0)])
            for _ in range(3):
                with pytest.raises(UnavailableError, match="/job:ps/task:0"):
                    sess.run(y)


@pytest.mark.slow
@pytest.mark.parametrize("runner", ["direct", "dask"])
def test_a_killed_worker_gives_a_clear_error_and_no_hang(runner):
    with tf.cluster.local(ps=1, workers=1) as c:
        with tf.device(PS0):
            v = tf.Variable(1.0, name="v")
        y = v * 2.0
        config = tf.ConfigProto(operation_timeout_in_ms=20_000, runner=runner)
        with tf.Session(c.target, config=config) as sess:
            sess.run(tf.global_variables_initializer())
            assert float(sess.run(y)) == 2.0
            with contextlib.suppress(CommClosedError):  # it dies before it can answer
                c.client.run(os._exit, 1, workers=[c.spec.task_address("ps", 0)])
            start = time.monotonic()
            with pytest.raises((UnavailableError, FailedPreconditionError), match="ps"):
                sess.run(y)
            assert time.monotonic() - start < 15


# ---- ConfigProto(steps_in_flight=N): runs that fetch only ops leave their step running ------------
def _adder():
    """A PS variable that each step adds the sum of a fed pair to (a fed value of another size
    fails on the worker: its reshape)."""
    x = tf.placeholder(tf.float32, [None])
    with tf.device(PS1):
        total = tf.Variable(0.0, name="total")
    with tf.device(W1):
        pair_sum = tf.reduce_sum(tf.reshape(x, [2]))
    return x, total, tf.assign_add(total, pair_sum).op


def test_steps_left_running_apply_in_order(target):
    x, total, add = _adder()
    config = tf.ConfigProto(runner="dask", steps_in_flight=3)
    with tf.Session(target, config=config) as sess:
        sess.run(total.initializer)
        for i in range(20):
            assert sess.run(add, {x: np.array([i, 1.0], np.float32)}) is None
        # a run that fetches a value waits for the steps before it: it reads all twenty updates
        assert sess.run(total) == sum(range(20)) + 20
        left = sess.runner._thread_state().in_flight
        sess.run(add, {x: np.ones(2, np.float32)})
        assert len(left) == 1  # this run returned with its step still in flight
        assert sess.run(total) == sum(range(20)) + 22


def test_an_error_of_a_step_left_running_raises_from_the_next_run_naming_it(target):
    x, total, add = _adder()
    with tf.Session(target, config=tf.ConfigProto(runner="dask", steps_in_flight=2)) as sess:
        sess.run(total.initializer)
        sess.run(add, {x: np.ones(2, np.float32)})
        sess.run(add, {x: np.ones(3, np.float32)})  # fails on the worker, after this run returned
        with pytest.raises(tf.errors.AbortedError, match=r"step \d+, left running .* failed and 1 later "
                                                         r"step\(s\) with it: InvalidArgumentError.*Reshape"):
            sess.run(add, {x: np.ones(2, np.float32)})
        assert sess.run(total) == 2.0  # the failed step and the one after it did not apply
        sess.run(add, {x: np.ones(3, np.float32)})
        with pytest.raises(tf.errors.AbortedError, match="failed: InvalidArgumentError"):
            sess.close()  # the last chance to hear of it


def test_steps_in_flight_needs_the_dask_runner(target):
    with pytest.raises(ValueError, match="needs runner='dask', not 'direct'"):
        tf.Session(target, config=tf.ConfigProto(steps_in_flight=2))
    with pytest.raises(ValueError, match="1 or more"):
        tf.ConfigProto(steps_in_flight=0)
