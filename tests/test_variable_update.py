"""The variable_update modes on a real LocalCluster (1 PS + 4 workers, two "nodes" of two):
each trains the same model code and ends with the parameters single-process SGD reaches on
the concatenated batch; the errors of a dead member and of mismatched replicas are clear."""

import numpy as np
import pytest
from conftest import local_cluster_fixture

import dflow as tf

WORKERS, STEPS, BATCH = 4, 3, 4
W1 = np.linspace(-0.5, 0.5, 5 * 6, dtype=np.float32).reshape(5, 6)
W2 = np.linspace(0.4, -0.3, 6 * 3, dtype=np.float32).reshape(6, 3)


def batch(step: int, replica: int):
    rng = np.random.default_rng(100 * step + replica)
    return rng.normal(size=(BATCH, 5)).astype(np.float32), rng.integers(0, 3, BATCH).astype(np.int64)


def model(x, y):
    w1 = tf.get_variable("w1", initializer=tf.constant(W1))
    b1 = tf.get_variable("b1", [6], initializer=tf.zeros_initializer())
    w2 = tf.get_variable("w2", initializer=tf.constant(W2))
    logits = tf.matmul(tf.nn.relu(tf.matmul(x, w1) + b1), w2)
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))


def train_replica(task_index, target, spec, mode, sync=True, options=None):
    options = {"devices_per_node": 2, **(options or {})}
    update = tf.train.VariableUpdate(mode, spec, task_index, sync=sync, **options)
    with tf.device(update.device()):
        x, y = tf.placeholder(tf.float32, [None, 5]), tf.placeholder(tf.int64, [None])
        loss = model(x, y)
        step = tf.train.get_or_create_global_step()
        train_op = update.optimizer(tf.train.GradientDescentOptimizer(0.5)).minimize(loss, global_step=step)
    names = ["w1", "b1", "w2"]
    hooks = [tf.train.StopAtStepHook(last_step=STEPS)] + update.hooks()
    traffic = []
    with tf.train.MonitoredTrainingSession(target, is_chief=update.is_chief, hooks=hooks) as sess:
        done = 0
        while not sess.should_stop():
            xs, ys = batch(done, task_index)
            sess.run(train_op, {x: xs, y: ys})
            traffic.append(dict(sess.last_run_stats.bytes_sent))
            done += 1
        graph = tf.get_default_graph()
        values = sess.run({n: graph.get_tensor_by_name(f"{n}:0") for n in names})
    return values, done, traffic


def single_process(replicas):
    """SGD on the batches of ``replicas`` concatenated, in one process."""
    with tf.Graph().as_default():
        x, y = tf.placeholder(tf.float32, [None, 5]), tf.placeholder(tf.int64, [None])
        loss = model(x, y)
        train = tf.train.GradientDescentOptimizer(0.5).minimize(loss)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            for step in range(STEPS):
                parts = [batch(step, r) for r in replicas]
                sess.run(train, {x: np.concatenate([p[0] for p in parts]),
                                 y: np.concatenate([p[1] for p in parts])})
            graph = tf.get_default_graph()
            return sess.run({n: graph.get_tensor_by_name(f"{n}:0") for n in ["w1", "b1", "w2"]})


cluster = local_cluster_fixture(ps=1, workers=WORKERS)


@pytest.mark.slow
@pytest.mark.parametrize("mode, options", [
    ("parameter_server", {}),
    ("replicated", {"devices_per_node": 4}),
    ("allreduce", {}),
    ("allreduce", {"algorithm": "ring", "fusion_bytes": 0}),
    ("allreduce", {"algorithm": "tree", "overlap": False}),
    ("distributed_replicated", {}),
    ("distributed_replicated", {"ps_strategy": "greedy", "compression": "fp16"}),
])
def test_synchronous_modes_match_one_process_on_the_whole_batch(cluster, target, mode, options):
    results = tf.replicate(train_replica, cluster, target, cluster.spec, mode, True, options)
    expected = single_process(range(WORKERS))
    tolerance = dict(rtol=1e-2, atol=1e-3) if options.get("compression") else dict(rtol=1e-5, atol=1e-6)
    for values, steps, _ in results:
        assert steps == STEPS
        for name, value in expected.items():
            np.testing.assert_allclose(values[name], value, err_msg=f"{mode} {name}", **tolerance)
    for other, _, _ in results[1:]:  # every replica's copy is bitwise the same
        assert all(np.array_equal(other[name], results[0][0][name]) for name in expected)


@pytest.mark.slow
def test_independent_replicas_each_train_on_their_own_batches(cluster, target):
    results = tf.replicate(train_replica, cluster, target, cluster.spec, "independent")
    for task, (values, _, traffic) in enumerate(results):
        for name, value in single_process([task]).items():
            np.testing.assert_allclose(values[name], value, rtol=1e-5, atol=1e-6)
        assert not any(traffic[-1]), "independent replicas exchange nothing"


def mismatched_replica(task_index, target, spec):
    update = tf.train.VariableUpdate("allreduce", spec, task_index)
    with tf.device(update.device()):
        x, y = tf.placeholder(tf.float32, [None, 5]), tf.placeholder(tf.int64, [None])
        loss = model(x, y)
        if task_index == 1:  # a replica whose model has one more variable
            loss += tf.reduce_sum(tf.get_variable("extra", [2], initializer=tf.ones_initializer()))
        train_op = update.optimizer(tf.train.GradientDescentOptimizer(0.5)).minimize(loss)
    config = tf.ConfigProto(operation_timeout_in_ms=30_000)
    with tf.train.MonitoredTrainingSession(target, hooks=update.hooks(), config=config) as sess:
        sess.run(train_op, dict(zip((x, y), batch(0, task_index))))


@pytest.mark.slow
def test_replicas_reducing_different_variables_are_named(cluster, target):
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"reduce different variables.*extra \[2\]"):
        tf.replicate(mismatched_replica, cluster, target, cluster.spec)


def replica_whose_peer_reports_first(task_index, run):
    """Replica 0 reports that its collective failed (as a peer of a failing replica does);
    replica 1 raises the failure itself, only after that report is out."""
    from distributed import Event

    reported = Event(f"reported-{run}")
    if task_index == 0:
        reported.set()
        raise tf.errors.UnavailableError("a member of the collective failed: /job:worker/task:1: ...")
    reported.wait(timeout=30)
    raise tf.errors.InvalidArgumentError("the replicas reduce different variables")


def test_a_failed_run_raises_the_replica_s_own_error_not_its_peer_s_report(cluster):
    """The peer's UnavailableError finishes first; replicate waits (2 s at most) for the own error."""
    with pytest.raises(tf.errors.InvalidArgumentError, match="the replicas reduce different variables"):
        tf.replicate(replica_whose_peer_reports_first, cluster, "first")


def dying_replica(task_index, target, spec):
    import os

    update = tf.train.VariableUpdate("allreduce", spec, task_index)
    with tf.device(update.device()):
        x, y = tf.placeholder(tf.float32, [None, 5]), tf.placeholder(tf.int64, [None])
        train_op = update.optimizer(tf.train.GradientDescentOptimizer(0.5)).minimize(model(x, y))
    # nothing starts this replica again: a recovered survivor finds its peer back without it
    with tf.train.MonitoredTrainingSession(target, hooks=update.hooks()) as sess:
        if task_index == 1:
            os._exit(1)  # its worker process dies between steps
        sess.run(train_op, dict(zip((x, y), batch(0, task_index))))


@pytest.mark.slow
def test_an_allreduce_whose_member_died_names_it_within_seconds():
    from dflow.distributed.replicate import start_replicas

    with tf.cluster.local(ps=0, workers=2) as cluster:
        futures = start_replicas(dying_replica, cluster, cluster.target, cluster.spec)
        # the survivor's session recovers once worker/1 is back (its worker restarted, with no
        # replica): the wait for it ends at the first liveness check, not the collective's deadline
        back_without_replica = r"/job:worker/task:1 at tcp://\S+ has started only 0 runs of it.*restarted"
        with pytest.raises(tf.errors.UnavailableError, match=back_without_replica):
            futures[0].result(timeout=120)


def test_a_mode_that_cannot_run_on_the_cluster_says_why():
    spec = tf.train.ClusterSpec({"worker": ["a:1", "b:1"]})
    with pytest.raises(ValueError, match="keeps variables on PS tasks, but the cluster has none"):
        tf.train.VariableUpdate("parameter_server", spec, 0)
    with pytest.raises(ValueError, match="allreduce is synchronous"):
        tf.train.VariableUpdate("allreduce", spec, 0, sync=False)
    with pytest.raises(ValueError, match="replicated shares gradients among the workers of one node"):
        tf.train.VariableUpdate("replicated", spec, 0)  # two hosts: two nodes
    with pytest.raises(ValueError, match="unknown variable_update 'ring'"):
        tf.train.VariableUpdate("ring", spec, 0)


def test_gradients_are_fused_into_buckets_from_the_last_layer():
    from dflow.train.allreduce import fuse

    with tf.Graph().as_default():
        sizes = [100, 10, 10, 300]
        variables = [tf.Variable(np.zeros(n, np.float32), name=f"v{i}") for i, n in enumerate(sizes)]
        pairs = [(v.value(), v) for v in variables]
        assert [[v.op.name for _, v in b] for b in fuse(pairs, 1000)] == [["v3"], ["v2", "v1", "v0"]]
        assert len(fuse(pairs, 0)) == 4


def copies_at_start(task_index, target, spec, mode):
    update = tf.train.VariableUpdate(mode, spec, task_index, devices_per_node=2)
    with tf.device(update.device()):
        x, y = tf.placeholder(tf.float32, [None, 5]), tf.placeholder(tf.int64, [None])
        weights = tf.get_variable("w", [5, 3])  # a random initializer: each replica draws its own
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=x @ weights))
        update.optimizer(tf.train.GradientDescentOptimizer(0.1)).minimize(
            loss, global_step=tf.train.get_or_create_global_step())
    with tf.train.MonitoredTrainingSession(target, is_chief=update.is_chief, hooks=update.hooks()) as sess:
        return sess.run(weights)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["distributed_replicated", "allreduce"])
def test_every_copy_starts_from_the_same_values(cluster, target, mode):
    values = tf.replicate(copies_at_start, cluster, target, cluster.spec, mode)
    assert all(np.array_equal(v, values[0]) for v in values[1:])
def batch_norm_replica(task_index, target, spec, mode):
    from dflow.models.layers import batch_norm

    update = tf.train.VariableUpdate(mode, spec, task_index, devices_per_node=2)
    with tf.device(update.device()):
        x, y = tf.placeholder(tf.float32, [None, 5]), tf.placeholder(tf.int64, [None])
        normalized = tf.reshape(batch_norm(tf.reshape(x, [-1, 1, 1, 5]), "NHWC"), [-1, 5])
        loss = model(normalized, y)
        step = tf.train.get_or_create_global_step()
        minimize = update.optimizer(tf.train.GradientDescentOptimizer(0.5)).minimize(loss, global_step=step)
        train_op = tf.group(minimize, *tf.get_collection(tf.GraphKeys.UPDATE_OPS))
    moving_mean = next(v for v in tf.global_variables() + tf.local_variables() if "moving_mean" in v.op.name)
    hooks = [tf.train.StopAtStepHook(last_step=STEPS)] + update.hooks()
    config = tf.ConfigProto(operation_timeout_in_ms=60_000)
    with tf.train.MonitoredTrainingSession(target, is_chief=update.is_chief, hooks=hooks, config=config,
                                           max_wait_secs=60) as sess:
        while not sess.should_stop():
            sess.run(train_op, dict(zip((x, y), batch(0, task_index))))
        return sess.run(moving_mean)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["parameter_server", "distributed_replicated", "allreduce"])
def test_batch_norm_moving_averages_update_in_every_mode(cluster, target, mode):
    """Non-trainable variables beside the trained ones (batch norm's moving averages): on the PS
    or on each replica, initialized and updated, never a replica waiting for them."""
    means = tf.replicate(batch_norm_replica, cluster, target, cluster.spec, mode)
    assert all(np.all(mean != 0) for mean in means)


def test_a_cancelled_collective_ends_at_once_and_later_ones_run():
    """The client cancels the collectives in flight when a member died (as `dflow train` does once it
    knows): the waiting member ends with CancelledError now, not at its liveness check or timeout."""
    import asyncio
    import threading
    import time

    from dflow.distributed.collective import Communicator

    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    delivered = []

    async def send(address, **message):
        delivered.append((address, message["kind"]))
        return "OK"

    async def runs_started(address, instance):
        return 2  # the peer started both runs, and never sends: only a cancel ends the wait

    group = ("/job:worker/task:0", "/job:worker/task:1")
    comm = Communicator(group[0], {t: f"tcp://{t[-1]}" for t in group}, loop, send, runs_started,
                        timeout_s=60)
    try:
        waiting = comm.start("all_reduce", np.ones(4, np.float32), group=group, instance_key="g",
                             signature=("v",), algorithm="tree")
        began = time.monotonic()
        comm.cancel("worker/1 died")
        with pytest.raises(tf.errors.CancelledError, match="collective g on /job:worker/task:0 cancelled: "
                                                           "worker/1 died"):
            waiting.result(timeout=30)
        assert time.monotonic() - began < 5
        later = comm.start("all_reduce", np.ones(4, np.float32), group=group, instance_key="g",
                           signature=("v",), algorithm="tree")
        comm.deliver(("g", 1), ("double", 1), group[1], np.full(4, 2, np.float32), ("v",))
        np.testing.assert_array_equal(later.result(timeout=30), np.full(4, 3, np.float32))
    finally:
        comm.close()
        loop.call_soon_threadsafe(loop.stop)


def test_a_peer_that_has_not_started_the_previous_run_fails_the_wait_at_its_liveness_check(monkeypatch):
    """A member that restarted (its worker's state gone) counts a collective's runs from 0 again: it
    will never send the run a survivor waits in, so the survivor says so at its first liveness check
    instead of waiting out the collective's deadline."""
    import asyncio
    import threading

    from dflow.distributed import collective

    monkeypatch.setattr(collective, "LIVENESS_CHECK_S", 0.05)
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    async def send(address, **message):
        return "OK"

    peer_runs = {"g": 1}  # the peer has started run 0 only

    async def runs_started(address, instance):
        return peer_runs[instance]

    group = ("/job:worker/task:0", "/job:worker/task:1")
    comm = collective.Communicator(group[0], {t: f"tcp://{t[-1]}" for t in group}, loop, send,
                                   runs_started, timeout_s=600)
    try:
        first = comm.start("all_reduce", np.ones(4, np.float32), group=group, instance_key="g",
                           signature=("v",), algorithm="tree")
        comm.deliver(("g", 0), ("double", 1), group[1], np.full(4, 2, np.float32), ("v",))
        np.testing.assert_array_equal(first.result(timeout=30), np.full(4, 3, np.float32))
        peer_runs["g"] = 2  # a live peer at this run (or past it): the wait goes on
        waiting = comm.start("all_reduce", np.ones(4, np.float32), group=group, instance_key="g",
                             signature=("v",), algorithm="tree")
        with pytest.raises(TimeoutError):
            waiting.result(timeout=0.5)
        comm.cancel("the test is done with it")
        peer_runs["g"] = 0  # the peer restarted: it counts from 0
        behind = comm.start("all_reduce", np.ones(4, np.float32), group=group, instance_key="g",
                            signature=("v",), algorithm="tree")
        with pytest.raises(tf.errors.UnavailableError,
                           match=r"collective g \(run 2\): /job:worker/task:1 at tcp://1 has started only 0 "
                                 r"runs of it, so it will never send this one: it restarted"):
            behind.result(timeout=30)
    finally:
        comm.close()
        loop.call_soon_threadsafe(loop.stop)


def test_an_elastic_group_cannot_lose_its_last_worker():
    group = tf.train.ElasticGroup(tf.train.ClusterSpec({"worker": ["a:1", "b:1"]}))
    assert group.stand_in(["worker/1"]) is None  # the chief lives: it saves
    assert group.leave(["worker/0"]) == ["worker/0"] and group.roles == ["worker/1"]
    with pytest.raises(ValueError, match="no worker is left to go on with: worker/1 died"):
        group.leave(["worker/1"])
