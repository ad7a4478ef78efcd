"""dflow.cluster: roles on real Dask worker processes, ClusterSpec, Server, and bad specs."""

import logging
import os
import sys
import types

import pytest

import dflow as tf
from dflow.cluster import ClusterSpec
from dflow.cluster.worker_preload import dask_setup


def test_cluster_spec_takes_tf_dict_forms():
    spec = ClusterSpec({"ps": ["ps0:2222", "ps1:2222"], "worker": {1: "w1:2222"}})
    assert spec.jobs == ["ps", "worker"]
    assert spec.num_tasks("ps") == 2 and spec.task_indices("worker") == [1]
    assert spec.task_address("ps", 1) == "ps1:2222"
    assert spec.job_tasks("ps") == ["ps0:2222", "ps1:2222"]
    assert spec.as_dict() == {"ps": ["ps0:2222", "ps1:2222"], "worker": {1: "w1:2222"}}
    assert ClusterSpec(spec) == spec and spec.roles() == ["ps/0", "ps/1", "worker/1"]


def test_bad_specs_name_the_role_and_list_the_roles():
    spec = ClusterSpec({"ps": ["a:1"], "worker": ["b:1", "c:1"]})
    with pytest.raises(ValueError, match=r"no job 'chief'; its roles are: ps/0, worker/0, worker/1"):
        spec.num_tasks("chief")
    with pytest.raises(ValueError, match=r"job 'worker' has no task 2; its tasks are \[0, 1\]"):
        spec.task_address("worker", 2)
    with pytest.raises(TypeError, match="list of addresses"):
        ClusterSpec({"ps": "a:1"})
    with pytest.raises(ValueError, match="at least one worker"):
        tf.cluster.local(ps=1, workers=0)


def test_local_cluster_gives_each_process_its_role_resources_and_blas_threads():
    with tf.cluster.local(ps=1, workers=2) as cluster:
        assert cluster.spec.roles() == ["ps/0", "worker/0", "worker/1"]
        assert cluster.target.startswith("tcp://") and cluster.dashboard_link.startswith("http")
        seen = cluster.client.run(lambda dask_worker: (
            dask_worker.name, dict(dask_worker.state.total_resources), os.environ["OMP_NUM_THREADS"]))
        by_role = {name: (resources, threads) for name, resources, threads in seen.values()}
        workers_threads = str(max(1, os.cpu_count() // 2))
        assert by_role == {"ps/0": ({"ps": 1, "ps/0": 1}, "1"),
                           "worker/0": ({"worker": 1, "worker/0": 1}, workers_threads),
                           "worker/1": ({"worker": 1, "worker/1": 1}, workers_threads)}
        assert tf.train.replica_device_setter(cluster=cluster.spec) is not None
        assert all(cluster.client.run(lambda: "dflow.cluster.worker_preload" in sys.modules).values())

        # a Server for a role that exists refers to it; for a new role it starts a worker process
        assert tf.train.Server(cluster, "ps", 0).target == cluster.target
        server = tf.train.Server(cluster, job_name="worker", task_index=2)
        try:
            assert server.process is not None and cluster.spec.num_tasks("worker") == 3
        finally:
            server.stop()
    with pytest.raises(Exception):  # noqa: B017 - closed: the client no longer answers
        cluster.client.scheduler_info()


def test_waiting_for_a_lost_role_ends_when_the_run_is_interrupted(monkeypatch):
    """`dflow train` waits up to ROLE_RETURN_S for a killed role to come back; a SIGTERM (or
    Ctrl-C) caught meanwhile ends the wait at its next look at the workers, not when it times out
    (an orphaned run was seen ignoring SIGTERM for over a minute)."""
    import threading

    from dflow import cli_cluster
    from dflow.cluster import launch

    interrupted, looked = threading.Event(), []

    def workers_then_interrupt(client):
        looked.append(True)
        if len(looked) == 2:  # the wait is under way: the signal comes
            interrupted.set()
        return worker_infos(client)

    worker_infos = launch.worker_infos
    monkeypatch.setattr(cli_cluster, "ROLE_RETURN_S", 600.0)
    with tf.cluster.local(ps=0, workers=1) as cluster:
        monkeypatch.setattr(launch, "worker_infos", workers_then_interrupt)
        assert cli_cluster._bring_back(cluster, {"worker/0": "", "worker/7": ""}, interrupted) is None
        assert len(looked) == 2  # it stopped at once, without resetting the tasks
        with pytest.raises(TimeoutError, match="no worker holds worker/7"):
            cluster.wait_for(["worker/7"], timeout=0.0)


def test_cuda_without_dask_cuda_says_what_to_install():
    try:
        import dask_cuda  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match=r"pip install dflow\[gpu\]"):
            tf.cluster.cuda()
    else:
        pytest.skip("dask-cuda is installed here: the missing-package error cannot occur")


def test_cuda_starts_as_many_gpu_workers_as_asked(monkeypatch):
    """``workers`` reaches LocalCUDACluster as n_workers (its first N GPUs); the stand-in refuses
    to start, as on a machine without a GPU, and the error says so."""
    import sys
    import types

    asked = []

    def local_cuda_cluster(**options):
        asked.append(options)
        raise RuntimeError("no CUDA devices")

    monkeypatch.setitem(sys.modules, "dask_cuda", types.SimpleNamespace(LocalCUDACluster=local_cuda_cluster))
    with pytest.raises(RuntimeError, match="dask-cuda could not start GPU workers.*no CUDA devices"):
        tf.cluster.cuda(ps=1, workers=2)
    assert asked == [{"n_workers": 2, "threads_per_worker": 1, "host": "127.0.0.1",  # loopback unless told
                      "dashboard_address": "127.0.0.1:0"}]


def test_a_heartbeat_cut_by_closing_logs_no_traceback_but_one_cut_while_running_does(caplog):
    worker = types.SimpleNamespace(status=None)  # (only what the filter reads)
    logger = logging.getLogger("distributed.worker")
    before = list(logger.filters)
    dask_setup(worker)
    try:
        from distributed.core import Status

        for status, logged in [(Status.running, True), (Status.closing, False), (Status.closed, False)]:
            worker.status = status
            caplog.clear()
            with caplog.at_level(logging.WARNING, logger="distributed.worker"):
                logger.error("Failed to communicate with scheduler during heartbeat.")
                logger.error("Compute Failed")
                logger.warning("Scheduler was unaware of this worker; shutting down.")  # its race too
            messages = [record.getMessage() for record in caplog.records]
            assert ("Failed to communicate with scheduler during heartbeat." in messages) == logged
            assert "Compute Failed" in messages and len(messages) == 1 + logged
    finally:
        logger.filters[:] = before
