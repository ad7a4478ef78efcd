"""A worker that dies while others wait for it: they fail within seconds, naming its role."""

import os
import signal
import threading
import time

import pytest

import dflow as tf
from dflow.cluster.spec import worker_infos
from dflow.distributed.liveness import RoleLostError


def _wait_for_release(task_index, release_path):
    """A replica that runs until the test releases it (or for at most a minute)."""
    open(f"{release_path}.started-{task_index}", "w").close()
    deadline = time.monotonic() + 60
    while not os.path.exists(release_path) and time.monotonic() < deadline:
        time.sleep(0.05)
    return task_index


def test_replicate_raises_naming_the_role_whose_worker_died(tmp_path):
    release = str(tmp_path / "release")
    with tf.cluster.local(ps=1, workers=2) as cluster:
        pids = cluster.client.run(os.getpid)
        worker_1 = pids[cluster.spec.task_address("worker", 1)]
        killed = {}

        def kill_once_started():
            while not os.path.exists(f"{release}.started-1"):
                time.sleep(0.05)
            killed["at"] = time.monotonic()
            os.kill(worker_1, signal.SIGKILL)

        killer = threading.Thread(target=kill_once_started, daemon=True)
        killer.start()
        try:
            with pytest.raises(RoleLostError, match=r"worker/1 \(at tcp://\S+\) died or left the cluster"):
                tf.replicate(_wait_for_release, cluster, release)
            assert time.monotonic() - killed["at"] < 15
        finally:
            open(release, "w").close()  # the survivor ends
            killer.join(60)


def test_a_sync_replica_waiting_for_a_dead_one_fails_within_seconds_naming_it(monkeypatch):
    from dflow.cluster import worker_process

    monkeypatch.setattr(worker_process, "MAX_RESTARTS", 0)  # worker/1 stays dead: only liveness can tell
    with tf.cluster.local(ps=1, workers=2) as cluster:
        setter = tf.train.replica_device_setter(worker_device="/job:worker/task:0", cluster=cluster.spec)
        with tf.device(setter):
            w = tf.Variable(1.0, name="w")
            step = tf.train.get_or_create_global_step()
            opt = tf.train.SyncReplicasOptimizer(tf.train.GradientDescentOptimizer(0.1), 2, timeout=120.0)
            train_op = opt.minimize(tf.square(w), global_step=step)
        with tf.Session(cluster.target) as sess:
            sess.run(tf.global_variables_initializer())  # its plan tells ps/0 where worker/1 is
            sess.run([opt.local_step_init_op, opt.chief_init_op])
            worker_1 = cluster.spec.task_address("worker", 1)
            os.kill(cluster.client.run(os.getpid)[worker_1], signal.SIGKILL)
            start = time.monotonic()
            with pytest.raises(tf.errors.UnavailableError, match=r"/job:worker/task:1 died"):
                sess.run(train_op)  # replica 0 at the barrier, replica 1 never comes
            assert time.monotonic() - start < 30  # not the 120 s timeout


def _pause_above(fraction, dask_worker=None):
    """Have the worker's memory monitor pause it above ``fraction`` of its memory limit (as it does at
    80% by default); a tiny fraction pauses it for real, the default lets it run again."""
    dask_worker.memory_manager.memory_pause_fraction = fraction


def test_a_role_whose_worker_stays_paused_ends_the_wait_saying_why(monkeypatch):
    from dflow.distributed import liveness

    monkeypatch.setattr(liveness, "PAUSED_LIMIT_S", 1.0)
    with tf.cluster.local(ps=1, workers=1) as cluster:
        watch = liveness.RoleWatch(cluster.client)
        worker_0 = cluster.spec.task_address("worker", 0)
        cluster.client.run(_pause_above, 1e-6, workers=[worker_0])
        deadline = time.monotonic() + 30
        with pytest.raises(tf.errors.ResourceExhaustedError,
                           match=r"worker/0's Dask worker has been paused for \d+ s: its memory is above"):
            while time.monotonic() < deadline:
                watch.check()
                time.sleep(0.1)
        cluster.client.run(_pause_above, 0.8, workers=[worker_0])
        while any(info["status"] == "paused" for info in worker_infos(cluster.client).values()):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        watch.check()  # running again: nothing to say
