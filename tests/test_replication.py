"""The seeds' two replication strategies on a real LocalCluster (1 PS + 2 workers):
in-graph (one client, a tower per worker) and between-graph (``tf.replicate``: one
client per worker), with asynchronous and synchronous updates, against single-process
training of the same model."""

import numpy as np
import pytest
from conftest import local_cluster_fixture

import dflow as tf

TRUE_W = np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32)
WORKERS = 2


def batch(step: int, size: int = 16):
    """The batch of global step ``step``: the same everywhere, for any worker count."""
    rng = np.random.default_rng(step)
    xs = rng.normal(size=(size, 4)).astype(np.float32)
    return xs, (xs @ TRUE_W + 0.25).astype(np.float32)


def linear_model(x, y):
    w = tf.get_variable("w", [4, 1], initializer=tf.zeros_initializer())
    b = tf.get_variable("b", [1], initializer=tf.zeros_initializer())
    return tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y)), (w, b)


cluster = local_cluster_fixture(ps=1, workers=WORKERS)


def single_process(steps: int, learning_rate: float):
    """Plain SGD in one session on the whole batch of each step."""
    with tf.Graph().as_default():
        x, y = tf.placeholder(tf.float32, [None, 4]), tf.placeholder(tf.float32, [None, 1])
        loss, (w, b) = linear_model(x, y)
        train = tf.train.GradientDescentOptimizer(learning_rate).minimize(loss)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            for step in range(steps):
                xs, ys = batch(step)
                sess.run(train, {x: xs, y: ys})
            return sess.run((w, b))


# ---- in-graph: one client, one tower per worker, gradients averaged on the PS ----------------
@pytest.mark.parametrize("runner", ["direct", "dask"])
def test_in_graph_towers_train_on_both_workers_like_one_process(target, runner):
    x, y = tf.placeholder(tf.float32, [16, 4]), tf.placeholder(tf.float32, [16, 1])  # split needs 16
    optimizer = tf.train.GradientDescentOptimizer(0.1)
    tower_grads = []
    for i, (xi, yi) in enumerate(zip(tf.split(x, WORKERS), tf.split(y, WORKERS))):
        with tf.device(tf.train.replica_device_setter(ps_tasks=1, worker_device=f"/job:worker/task:{i}")), \
                tf.variable_scope("model", reuse=i > 0):
            loss, variables = linear_model(xi, yi)
            tower_grads.append(optimizer.compute_gradients(loss))
    with tf.device("/job:ps/task:0"):
        averaged = [(tf.add_n([g[k][0] for g in tower_grads]) / float(WORKERS), var)
                    for k, (_, var) in enumerate(tower_grads[0])]
        train = optimizer.apply_gradients(averaged)
    with tf.Session(target, config=tf.ConfigProto(runner=runner)) as sess:
        sess.run(tf.global_variables_initializer())
        for step in range(20):
            xs, ys = batch(step)
            sess.run(train, {x: xs, y: ys})
        stats = sess.last_run_stats
        w, b = sess.run(variables)
    expected_w, expected_b = single_process(20, 0.1)
    np.testing.assert_allclose(w, expected_w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b, expected_b, rtol=1e-5, atol=1e-6)
    # both towers computed on their own workers, and only gradients went to the PS
    assert {"/job:worker/task:0", "/job:worker/task:1"} <= set(stats.compute_s)
    gradients = 4 * (4 + 1)  # w and b, float32, from each tower
    to_ps = [("/job:worker/task:0", "/job:ps/task:0"), ("/job:worker/task:1", "/job:ps/task:0")]
    assert [stats.bytes_sent[link] for link in to_ps] == [gradients, gradients]
    assert stats.bytes_sent[("client", "/job:worker/task:0")] == 16 * 5 * 4  # the fed x and y
    assert {task for task, what, start, end in stats.timeline if what == "compute" and end >= start} \
        >= {"/job:worker/task:0", "/job:worker/task:1", "/job:ps/task:0"}


def test_a_traced_step_on_the_cluster_times_each_tasks_ops_within_its_compute(target):
    x, y = tf.placeholder(tf.float32, [16, 4]), tf.placeholder(tf.float32, [16, 1])
    with tf.device(tf.train.replica_device_setter(ps_tasks=1, worker_device="/job:worker/task:0")):
        loss, _ = linear_model(x, y)
        train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
    feed = dict(zip((x, y), batch(0)))
    with tf.Session(target) as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(train, feed)
        untraced = sess.last_run_stats.timeline
        metadata = tf.RunMetadata()
        sess.run(train, feed, options=tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE),
                 run_metadata=metadata)
        traced = sess.last_run_stats.timeline
    assert untraced and not any(" = " in what for _, what, _, _ in untraced)  # spans only: no clock per op
    by_task = {d.device: d.node_stats for d in metadata.step_stats.dev_stats}
    for task, op_type in (("/job:worker/task:0", "MatMul"), ("/job:ps/task:0", "ApplyGradientDescent")):
        ops = [n for n in by_task[task] if n.timeline_label.endswith(f"= {op_type}()")]
        assert ops and ops[0].timeline_label == f"{ops[0].node_name} = {op_type}()"
        computes = [(start, end) for t, what, start, end in traced if t == task and what == "compute"]
        start = ops[0].all_start_micros / 1e6
        assert any(begin - 1e-6 <= start <= end for begin, end in computes)  # inside a stage's compute


# ---- between-graph: tf.replicate runs one client per worker ---------------------------------
def _replica(task_index, target, spec, sync: bool, steps: int, learning_rate: float, runner: str = "direct"):
    """The program every worker runs (the seed's Listing 2): its half of each step's batch."""
    x, y = tf.placeholder(tf.float32, [None, 4]), tf.placeholder(tf.float32, [None, 1])
    with tf.device(tf.train.replica_device_setter(worker_device=f"/job:worker/task:{task_index}",
                                                  cluster=spec)):
        loss, variables = linear_model(x, y)
        step = tf.train.get_or_create_global_step()
        optimizer = tf.train.GradientDescentOptimizer(learning_rate)
        hooks = [tf.train.StopAtStepHook(last_step=steps)]
        if sync:
            optimizer = tf.train.SyncReplicasOptimizer(optimizer, replicas_to_aggregate=WORKERS,
                                                       total_num_replicas=WORKERS)
            hooks.append(optimizer.make_session_run_hook(is_chief=task_index == 0))
        train = optimizer.minimize(loss, global_step=step)
    staleness, local_steps = [], 0
    config = tf.ConfigProto(runner=runner, operation_timeout_in_ms=60_000)
    with tf.train.MonitoredTrainingSession(target, is_chief=task_index == 0, hooks=hooks,
                                           config=config) as sess:
        while not sess.should_stop():
            xs, ys = batch(local_steps if sync else int(sess.run(step)))
            half = slice(task_index * 8, (task_index + 1) * 8)
            sess.run(train, {x: xs[half], y: ys[half]})
            staleness.append(sess.last_run_stats.staleness)
            local_steps += 1
        return local_steps, staleness, sess.run(variables)


@pytest.mark.parametrize("runner", ["direct", "dask"])
def test_between_graph_sync_replicas_equal_one_process_on_the_whole_batch(cluster, target, runner):
    """Under runner="dask" too: a stage that waits (the token queue, the accumulators) secedes from
    its worker's threads and takes a share of its role's resource, so the PS runs the others meanwhile."""
    steps = 8
    results = tf.replicate(_replica, cluster, target, cluster.spec, True, steps, 0.1, runner)
    expected_w, expected_b = single_process(steps, 0.1)
    for local_steps, _, (w, b) in results:
        assert local_steps == steps  # every replica took part in every step
        np.testing.assert_allclose(w, expected_w, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(b, expected_b, rtol=1e-5, atol=1e-6)


def test_between_graph_async_converges_and_reports_staleness(cluster, target):
    results = tf.replicate(_replica, cluster, target, cluster.spec, False, 300, 0.05)
    assert sum(n for n, _, _ in results) >= 300
    assert all(n > 0 for n, _, _ in results)  # both workers trained
    for _, staleness, (w, b) in results:
        assert all(isinstance(s, int) and s >= 0 for s in staleness)
        np.testing.assert_allclose(w, TRUE_W, atol=0.05)
        np.testing.assert_allclose(b, [0.25], atol=0.05)


def test_replicate_on_a_job_the_cluster_lacks_names_the_tasks(cluster):
    with pytest.raises(ValueError, match="no 'trainer' tasks.*/job:ps/task:0"):
        tf.replicate(_replica, cluster, job="trainer")


def test_a_replica_error_reaches_the_caller(cluster):
    def broken(task_index):
        raise RuntimeError(f"replica {task_index} failed on purpose")

    with pytest.raises(RuntimeError, match="failed on purpose"):
        tf.replicate(broken, cluster)


def _role_of_this_worker(task_index):
    import distributed

    return task_index, distributed.get_worker().name


def test_replicas_are_dask_tasks_pinned_by_their_roles_resource(cluster):
    from dflow.distributed.replicate import cancel_replicas, start_replicas

    futures = start_replicas(_role_of_this_worker, cluster)
    try:
        assert cluster.client.gather(futures) == [(i, f"worker/{i}") for i in range(WORKERS)]
        restrictions = cluster.client.run_on_scheduler(
            lambda dask_scheduler, keys: [(dask_scheduler.tasks[k].resource_restrictions,
                                           dask_scheduler.tasks[k].worker_restrictions) for k in keys],
            keys=[f.key for f in futures])
        # pinned by role, not by address: a worker restarted under the role takes them again
        assert [r for r, _ in restrictions] == [{f"worker/{i}": 1 / 64} for i in range(WORKERS)]
        assert all(not workers for _, workers in restrictions)
    finally:
        cancel_replicas(cluster.client, futures)


def test_a_replica_of_a_run_that_was_ended_does_not_run_again(cluster):
    """Dask reruns a replica whose worker died once a worker offers its role again; dflow train
    has ended that run and restarts every replica itself, so the rerun must not train."""
    from dflow.distributed.replicate import _run_replica, cancel_replicas, start_replicas

    futures = start_replicas(_role_of_this_worker, cluster)
    cluster.client.gather(futures)
    run = futures[0].key.rpartition("-")[2]
    cancel_replicas(cluster.client, futures)
    rerun = cluster.client.submit(_run_replica, _role_of_this_worker, 0, run, (), {}, pure=False,
                                  resources={"worker/0": 1 / 64})
    assert rerun.result(timeout=60) is None
    fresh = start_replicas(_role_of_this_worker, cluster, task_indices=[0])
    assert cluster.client.gather(fresh) == [(0, "worker/0")]
    cancel_replicas(cluster.client, fresh)
