"""dflow.cluster.slurm against a real Slurm (slurmctld + slurmd + munged on this machine, as
`.ci/slurm.sh start` runs them): each role is its own Slurm job, a tiny model trains with its
variables on the PS job; and the errors for bad input."""

import functools
import logging
import os
import re
import shutil
import subprocess
import time

import pytest
from conftest import train_linear_regression
from test_faults import (
    CHECKPOINT_EVERY,
    RECOVERED,
    STEPS,
    runs,  # noqa: F401 - a fixture
    train_args,
)

import dflow as tf
from dflow.cluster.spec import worker_infos

START_SLURM = "start one as root with `.ci/slurm.sh start` (Debian: `apt-get install slurm-wlm munge` first)"


@functools.cache
def _slurm_missing() -> str | None:
    """Why the Slurm tests cannot run here, or None when a Slurm node takes jobs."""
    if not all(map(shutil.which, ("sbatch", "sinfo", "scontrol"))):
        return f"needs Slurm: no sbatch/sinfo/scontrol on PATH; {START_SLURM}"
    try:  # `scontrol ping` answers at once; sinfo retries a dead controller for ~9 s
        ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=20)
        if ping.returncode != 0:
            said = (ping.stdout or ping.stderr).strip().splitlines()
            return f"needs a running Slurm: {said[0] if said else 'scontrol ping failed'}; {START_SLURM}"
        states = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired as error:
        return f"needs a running Slurm: `{' '.join(error.cmd)}` did not answer in 20 s; {START_SLURM}"
    if not {"idle", "mixed"} & set(states.stdout.split()):
        return f"needs an idle Slurm node; sinfo shows {states.stdout.split() or states.stderr.strip()}"
    try:
        import dask_jobqueue  # noqa: F401
    except ImportError:
        return "needs dask-jobqueue: `pip install dflow[slurm]`"
    return None


def _squeue(job_ids) -> dict[str, tuple[str, str]]:
    """Job id -> (name, state) of those of ``job_ids`` that Slurm still lists."""
    out = subprocess.run(["squeue", "-h", "-o", "%i %j %T", "-j", ",".join(job_ids)],
                         capture_output=True, text=True, check=False).stdout
    return {job_id: (name, state) for job_id, name, state in (line.split() for line in out.splitlines())}


def _gone_from_squeue(job_ids, timeout: float = 30.0) -> bool:
    """Whether Slurm stops listing ``job_ids`` within ``timeout`` (a cancelled job may show COMPLETING)."""
    deadline = time.monotonic() + timeout
    while _squeue(job_ids) and time.monotonic() < deadline:
        time.sleep(0.5)
    return _squeue(job_ids) == {}


def _print_logs(log_dir) -> None:
    for path in sorted(log_dir.glob("*")):  # pytest shows them when the test fails
        print(f"---- {path.name}\n{path.read_text()[-3000:]}")


def _slurm_job_of_each_role(cluster) -> dict[str, str]:
    """Role -> the Slurm job its worker process runs in; checks each role's resource and BLAS threads."""
    seen = cluster.client.run(lambda dask_worker: (
        dask_worker.name, os.environ.get("SLURM_JOB_ID"), dict(dask_worker.state.total_resources),
        os.environ.get("OMP_NUM_THREADS")))
    by_role = {name: rest for name, *rest in seen.values()}
    assert {role: tuple(rest) for role, (_, *rest) in by_role.items()} == {
        "ps/0": ({"ps": 1, "ps/0": 1}, "1"), "worker/0": ({"worker": 1, "worker/0": 1}, "1"),
        "worker/1": ({"worker": 1, "worker/1": 1}, "1")}
    return {role: job_id for role, (job_id, *_) in by_role.items()}


@pytest.fixture
def slurm_here():
    missing = _slurm_missing()
    if missing:
        pytest.skip(missing)


@pytest.mark.slurm  # ~7 s here (jobs up in ~4 s): fast enough for the default run
def test_each_role_is_a_slurm_job_and_a_model_trains_with_its_variables_on_the_ps(slurm_here, tmp_path):
    log_dir = tmp_path / "logs"
    started = time.perf_counter()
    try:
        with tf.cluster.slurm(ps=1, workers=2, cores=1, memory="1GB", interface="lo", walltime="00:10:00",
                              local_directory=str(tmp_path), log_directory=str(log_dir)) as cluster:
            up_s = time.perf_counter() - started
            assert cluster.spec.roles() == ["ps/0", "worker/0", "worker/1"]
            job_ids = _slurm_job_of_each_role(cluster)
            assert None not in job_ids.values() and len(set(job_ids.values())) == 3, job_ids
            assert _squeue(job_ids.values()) == {job_ids["ps/0"]: ("dflow-ps-0", "RUNNING"),
                                                 job_ids["worker/0"]: ("dflow-worker-0", "RUNNING"),
                                                 job_ids["worker/1"]: ("dflow-worker-1", "RUNNING")}

            losses = train_linear_regression(cluster, steps=15)
            assert losses[-1] < 0.05 * losses[0], losses
            held = cluster.client.run(
                lambda dask_worker: sorted(dask_worker.plugins["dflow"].state.variables))
            ps_address = cluster.spec.task_address("ps", 0)
            assert held == {address: ["bias", "weights"] if address == ps_address else [] for address in held}
            print(f"Slurm cluster up in {up_s:.1f} s, trained in {time.perf_counter() - started - up_s:.1f} "
                  f"s; loss {losses[0]:.3f} -> {losses[-1]:.4f}")
    except BaseException:
        _print_logs(log_dir)
        raise
    assert _gone_from_squeue(job_ids.values())  # closing the cluster cancelled its jobs


def test_slurm_bad_input_says_what_to_do(tmp_path, monkeypatch, capsys):
    with pytest.raises(ValueError, match="at least one worker"):
        tf.cluster.slurm(ps=1, workers=0)
    with pytest.raises(TypeError, match="give the roles as ps= and workers="):
        tf.cluster.slurm(ps=1, workers=2, n_workers=3)
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no sbatch anywhere on PATH
    with pytest.raises(RuntimeError, match=r"`sbatch`, which is not on PATH.*apt-get install slurm-wlm"):
        tf.cluster.slurm(ps=1, workers=2)
    from dflow.cli import main

    assert main(["train", "--model", "mnist_dnn", "--cluster", "slurm", "--steps", "1"]) == 1
    assert re.search(r"^dflow train: error: cannot use a Slurm cluster: .*`sbatch`, which is not on PATH",
                     capsys.readouterr().err, re.M)


@pytest.mark.slurm
def test_slurm_refusing_or_queueing_the_jobs_says_why(slurm_here, tmp_path):
    with pytest.raises(RuntimeError, match=r"Slurm refused a dflow job: sbatch: error: .*[Pp]artition"):
        tf.cluster.slurm(ps=1, workers=1, interface="lo", queue="no-such-partition",
                         local_directory=str(tmp_path))
    # held jobs stay PENDING: the timeout names each job's state and reason, then cancels them
    with pytest.raises(TimeoutError, match=r"dflow-ps-0 \(job (\d+)\): PENDING \(JobHeldUser\)") as error:
        tf.cluster.slurm(ps=1, workers=1, interface="lo", job_extra_directives=["--hold"], timeout=3,
                         local_directory=str(tmp_path))
    job_ids = re.findall(r"\(job (\d+)\)", str(error.value))
    assert len(job_ids) == 2 and _gone_from_squeue(job_ids)


@pytest.mark.slurm
def test_the_allreduce_runs_between_slurm_jobs(slurm_here, tmp_path, monkeypatch):
    from dflow.bench.harness import run_benchmark

    monkeypatch.chdir(tmp_path)  # where sbatch writes the jobs' slurm-N.out

    record = run_benchmark({"model": "mnist_dnn", "cluster": "slurm", "num_workers": 2, "num_ps": 0,
                            "variable_update": "allreduce", "batch_size": 8, "num_warmup_batches": 1,
                            "num_batches": 3, "repeats": 1}, echo=lambda line: None)
    params = record["param_bytes"]  # a ring of 2 sends each worker's whole buffer to the other
    assert record["bytes_per_step"] == {"worker/0->worker/1": params, "worker/1->worker/0": params}


@pytest.mark.slurm
def test_a_secure_slurm_cluster_speaks_tls_only(slurm_here, tmp_path):
    """secure=True: a certificate made for the cluster, which dask-jobqueue hands the jobs through
    shared_temp_directory; the scheduler and workers speak TLS only."""
    import distributed

    with tf.cluster.slurm(ps=1, workers=1, cores=1, memory="1GB", interface="lo", walltime="00:10:00",
                          secure=True, shared_temp_directory=str(tmp_path), local_directory=str(tmp_path),
                          log_directory=str(tmp_path / "logs")) as cluster:
        addresses = [cluster.target, *worker_infos(cluster.client)]
        assert all(address.startswith("tls://") for address in addresses), addresses
        losses = train_linear_regression(cluster, steps=10)
        assert losses[-1] < 0.1 * losses[0], losses
        with pytest.raises(Exception):  # noqa: B017 - refused: no certificate (Dask's error type varies)
            distributed.Client(cluster.target.replace("tls://", "tcp://"), timeout=5)


def _new_job_of(cluster, role: str, old_job: str, timeout: float = 120.0) -> str:
    """The Slurm job ``role``'s worker runs in once it is held again in a job other than ``old_job``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            jobs = dict(cluster.client.run(
                lambda dask_worker: (dask_worker.name, os.environ.get("SLURM_JOB_ID"))).values())
        except OSError:  # (CommClosedError) the cancelled job's worker closed as it was asked
            jobs = {}
        if jobs.get(role) not in (None, old_job):
            return jobs[role]
        time.sleep(0.5)
    raise AssertionError(f"{role} is not back in a new Slurm job after {timeout:.0f} s: "
                         f"{worker_infos(cluster.client)}")


@pytest.mark.slurm
def test_a_role_whose_job_ends_is_submitted_again_up_to_max_resubmits(slurm_here, tmp_path, caplog):
    import dask

    log_dir = tmp_path / "logs"
    # Dask forgets a lost job after lost-worker-timeout (15 s by default): 1 s keeps the test short
    with dask.config.set({"distributed.deploy.lost-worker-timeout": "1s"}), \
            tf.cluster.slurm(ps=1, workers=2, cores=1, memory="1GB", interface="lo", walltime="00:10:00",
                             max_resubmits=1, local_directory=str(tmp_path),
                             log_directory=str(log_dir)) as cluster:
        try:
            # dask-jobqueue's cluster (silence_logs="error") set pytest's capture handlers to ERROR
            caplog.set_level(logging.INFO, logger="dflow")
            first = _slurm_job_of_each_role(cluster)
            subprocess.run(["scancel", first["worker/1"]], check=True)  # as walltime or preemption ends it
            second = _new_job_of(cluster, "worker/1", first["worker/1"])
            assert _slurm_job_of_each_role(cluster) == {**first, "worker/1": second}
            assert _squeue([second]) == {second: ("dflow-worker-1", "RUNNING")}
            assert cluster.resubmits == {"worker/1": [first["worker/1"]]}
            said = f"worker/1's job {first['worker/1']} ended; submitted job {second} for it (1/1)"
            assert said in caplog.text
            losses = train_linear_regression(cluster, steps=10)  # the cluster works as before
            assert losses[-1] < 0.1 * losses[0], losses

            subprocess.run(["scancel", second], check=True)  # the second end is one too many
            deadline = time.monotonic() + 60
            while "worker/1" in cluster.dask_cluster.worker_spec:  # given up on: not submitted again
                assert time.monotonic() < deadline, cluster.resubmits
                time.sleep(0.2)
            assert cluster.resubmits == {"worker/1": [first["worker/1"], second]}
            assert f"worker/1's job {second} ended, 2 ends in all: more than max_resubmits=1" in caplog.text
            assert "worker/1" not in cluster.spec.roles() and "worker/1" not in cluster.dask_cluster.workers
        except BaseException:
            _print_logs(log_dir)
            raise


@pytest.mark.slow
@pytest.mark.slurm
def test_dflow_train_on_slurm_recovers_a_role_whose_job_was_cancelled(slurm_here, tmp_path, runs):  # noqa: F811
    """`dflow train --cluster slurm`, set up through Dask's jobqueue config as a user would, goes on
    to its last step after worker/1's Slurm job is cancelled mid-run (its job submitted again)."""
    config = {"INTERFACE": "lo", "CORES": "1", "MEMORY": "2GB", "WALLTIME": "00:20:00",
              "LOCAL_DIRECTORY": str(tmp_path), "LOG_DIRECTORY": str(tmp_path / "logs")}
    env = {f"DASK_JOBQUEUE__SLURM__{key}": value for key, value in config.items()}
    env["DASK_DISTRIBUTED__DEPLOY__LOST_WORKER_TIMEOUT"] = "1s"  # (15 s by default)
    run = runs(*train_args(tmp_path / "checkpoints", "--cluster", "slurm", "--ps", "1"), env=env)
    run.wait_for(r"^cluster: 1 PS \+ 2 workers, .*roles \['ps/0', 'worker/0', 'worker/1'\]")
    run.wait_for_step(CHECKPOINT_EVERY + 20)
    job = _squeue_named("dflow-worker-1")
    subprocess.run(["scancel", job], check=True)
    cancelled = time.monotonic()
    _, resubmitted = run.wait_for(rf"slurm: worker/1's job {job} ended; submitted job (\d+) for it",
                                  after=cancelled)
    recovered, line = run.wait_for(RECOVERED.pattern, after=cancelled)
    assert line[1] == "worker/1" and int(line[5]) <= CHECKPOINT_EVERY + 20, run.output
    assert run.finish() == 0, run.output
    assert re.search(rf"^step {STEPS}/{STEPS} ", run.output, re.M) and "test accuracy" in run.output
    assert "Traceback" not in run.output, run.output
    assert _squeue([job, resubmitted[1]]) == {} or _gone_from_squeue([job, resubmitted[1]])
    print(f"\nSLURM cancel worker/1: recovered in {recovered - cancelled:.1f} s, {line[5]} steps lost")


def _squeue_named(name: str) -> str:
    """The id of the one Slurm job called ``name``."""
    out = subprocess.run(["squeue", "-h", "-o", "%i", "-n", name], capture_output=True, text=True,
                         check=True).stdout.split()
    assert len(out) == 1, f"squeue lists {out} as {name}"
    return out[0]
