"""tf.replicate on a cluster whose worker dies: it raises naming the role, within seconds."""

import os
import signal
import threading
import time

import pytest

import dflow as tf
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
