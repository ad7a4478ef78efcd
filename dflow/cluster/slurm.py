"""``dflow.cluster.slurm``: one Slurm job per role, through dask-jobqueue.

The Dask scheduler runs in this process; each role (``ps/0``, ``worker/1``) is one
``sbatch`` job running one Dask worker whose name is the role (dask-jobqueue passes
``--name <worker_spec key>``) and whose resources are the job and the role (``--resources "ps=1 ps/0=1"``).
"""

from __future__ import annotations

import contextlib
import logging
import shlex
import shutil
import subprocess
import threading

from .launch import START_TIMEOUT_S, Cluster, blas_env, launch_security, role_list
from .spec import role_name, role_resources
from .worker_preload import WORKER_PRELOAD
from .worker_process import MAX_RESTARTS

__all__ = ["slurm", "SlurmCluster"]

log = logging.getLogger("dflow")
# set by this launcher from ps= and workers=: one worker process per job, one job per role
_RESERVED = ("n_workers", "processes")
RESUBMIT_POLL_S = 1.0  # how often the cluster looks for roles whose job ended


def slurm(ps: int = 1, workers: int = 2, timeout: float = START_TIMEOUT_S, secure: bool = False,
          security=None, max_resubmits: int = MAX_RESTARTS, **kwargs) -> SlurmCluster:
    """One Slurm job per role (``dask_jobqueue.SLURMCluster``).

    Keyword arguments go to ``SLURMCluster`` (``queue``, ``account``, ``cores``,
    ``memory``, ``walltime``, ``interface``, ``job_extra_directives``, ...); ``cores``
    defaults to 1 and ``memory`` to ``"2GB"`` per job. The Slurm job of a role is named
    ``<job_name>-ps-0`` (``job_name`` defaults to ``"dflow"``), so ``squeue`` shows the
    roles. A PS runs 1 BLAS thread, a worker ``cores``. ``secure=True`` makes every connection
    TLS with a certificate made for this cluster (dask-jobqueue writes it, readable by you
    alone, to ``shared_temp_directory``, a directory the nodes share); ``security=`` takes
    your own (:func:`~dflow.cluster.tls_security`). The scheduler listens where
    dask-jobqueue puts it (``interface=``, ``scheduler_options=``): the jobs run on other
    nodes. Needs ``sbatch`` on PATH (a Slurm login node) and ``pip install dflow[slurm]``.

    A role whose job ends while the cluster is open (walltime, preemption, ``scancel``, a
    node lost) is submitted again as a new job, up to ``max_resubmits`` times per role, as the
    local cluster restarts a killed worker: it comes back with none of its variables, and
    ``dflow train`` restores them from the latest checkpoint. Dask notices the lost job after
    its ``distributed.deploy.lost-worker-timeout`` (15 s by default).

    >>> cluster = tf.cluster.slurm(ps=1, workers=4, cores=8, memory="32GB",
    ...                            walltime="01:00:00")  # doctest: +SKIP
    >>> cluster.spec.roles()  # doctest: +SKIP
    ['ps/0', 'worker/0', 'worker/1', 'worker/2', 'worker/3']
    """
    roles = role_list(ps, workers)
    _check_kwargs(kwargs)
    SLURMCluster = _import_slurm_cluster()
    for key, default in (("cores", 1), ("memory", "2GB")):  # unless ~/.config/dask/jobqueue.yaml says
        if _config("slurm", key) is None:
            kwargs.setdefault(key, default)
    job_name = kwargs.pop("job_name", None) or "dflow"
    security = launch_security(secure, security)
    if security:
        kwargs["security"] = security
    dask_cluster = SLURMCluster(n_workers=0, processes=1, job_name=job_name, **kwargs)
    try:
        _submit_role_jobs(dask_cluster, roles, job_name)
        cluster = _wait_for_roles(dask_cluster, roles, timeout)
    except BaseException:
        with contextlib.suppress(Exception):  # a job sbatch refused fails close(): keep the first error
            dask_cluster.close()
        raise
    cluster.start_resubmitting(max_resubmits)
    return cluster


class SlurmCluster(Cluster):
    """A :class:`Cluster` of one Slurm job per role that submits a role's job again when it ends."""

    def __init__(self, client, dask_cluster):
        super().__init__(client, dask_cluster)
        self.resubmits: dict[str, list[str]] = {}  # role -> the ids of its jobs that ended, in order
        self._closing = threading.Event()
        self._watch: threading.Thread | None = None

    def start_resubmitting(self, max_resubmits: int) -> None:
        self._watch = threading.Thread(target=self._resubmit_ended, args=(max_resubmits,),
                                       name="dflow-slurm-resubmit", daemon=True)
        self._watch.start()

    def _resubmit_ended(self, max_resubmits: int) -> None:
        # Dask's SpecCluster closes the job of a worker that left (after lost-worker-timeout) and
        # forgets it; its role is still in worker_spec, so _correct_state submits a job for it again.
        # (Resubmitting sooner, before Dask forgets the old job, would have that timer cancel the new one.)
        dask_cluster = self.dask_cluster
        job_ids = {role: job.job_id for role, job in dask_cluster.workers.items()}
        while not self._closing.wait(RESUBMIT_POLL_S):
            ended = sorted(set(dask_cluster.worker_spec) - set(dask_cluster.workers))
            for role in ended:
                self.resubmits.setdefault(role, []).append(job_ids.get(role, "?"))
                if len(self.resubmits[role]) > max_resubmits:
                    log.error("slurm: %s's job %s ended, %d ends in all: more than max_resubmits=%d, so it "
                              "is not submitted again; see its log in log_directory=", role,
                              job_ids.get(role), len(self.resubmits[role]), max_resubmits)
                    del dask_cluster.worker_spec[role]
            if not [role for role in ended if role in dask_cluster.worker_spec]:
                continue
            try:
                dask_cluster.sync(dask_cluster._correct_state)
            except Exception as error:  # noqa: BLE001 - sbatch refused: said, and tried again next time
                log.error("slurm: submitting a job again failed: %s", _sbatch_error(error))
                continue
            for role in ended:
                if role in dask_cluster.workers:
                    job_ids[role] = dask_cluster.workers[role].job_id
                    log.warning("slurm: %s's job %s ended; submitted job %s for it (%d/%d)", role,
                                self.resubmits[role][-1], job_ids[role], len(self.resubmits[role]),
                                max_resubmits)

    def close(self) -> None:
        self._closing.set()
        if self._watch is not None:
            self._watch.join()
        super().close()


def _submit_role_jobs(dask_cluster, roles: list[tuple[str, int]], job_name: str) -> None:
    template = dask_cluster.new_spec
    for job, i in roles:
        options = _role_options(template["options"], job, i, job_name)
        dask_cluster.worker_spec[role_name(job, i)] = {"cls": template["cls"], "options": options}
    try:
        dask_cluster.sync(dask_cluster._correct_state)  # runs sbatch once per role
    except RuntimeError as error:
        raise RuntimeError(f"Slurm refused a dflow job: {_sbatch_error(error)}. Check that Slurm answers "
                           "(`sinfo`) and that queue/account/cores/memory/walltime fit its partitions "
                           "(`sinfo -o '%P %c %m %l'`)") from error


def _wait_for_roles(dask_cluster, roles: list[tuple[str, int]], timeout: float) -> SlurmCluster:
    import distributed

    cluster = SlurmCluster(distributed.Client(dask_cluster, set_as_default=False), dask_cluster)
    try:
        cluster.wait_for([role_name(job, i) for job, i in roles], timeout)
    except TimeoutError as error:  # most often: the jobs wait in the queue
        states = _job_states(dask_cluster)
        cluster.client.close()
        raise TimeoutError(f"{error}. Slurm lists the jobs as: {states}; raise timeout= or ask for less "
                           "(cores, memory, walltime), or pick another queue=") from None
    except BaseException:
        cluster.client.close()
        raise
    return cluster


def _sbatch_error(error: RuntimeError) -> str:
    """The ``sbatch: error: ...`` line of dask-jobqueue's failed-command message."""
    lines = [line.strip() for line in str(error).splitlines() if "error" in line]
    return "; ".join(lines) or str(error)


def _job_states(dask_cluster) -> str:
    """``dflow-ps-0 (job 17): PENDING (Resources), ...`` as squeue shows them now."""
    job_ids = [job.job_id for job in dask_cluster.workers.values() if getattr(job, "job_id", None)]
    try:
        out = subprocess.run(["squeue", "-h", "-o", "%j (job %i): %T (%r)", "-j", ",".join(job_ids)],
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"unknown (squeue failed: {error})"
    return ", ".join(sorted(out.splitlines())) or "none (they ended; see log_directory=)"


def _check_kwargs(kwargs: dict) -> None:
    reserved = sorted(set(kwargs) & set(_RESERVED))
    if reserved:
        raise TypeError(f"dflow.cluster.slurm sets {', '.join(reserved)} itself (one job per role, one "
                        "worker per job); give the roles as ps= and workers= instead")
    if shutil.which("sbatch") is None:
        raise RuntimeError("dflow.cluster.slurm submits jobs with `sbatch`, which is not on PATH: run it on "
                           "a Slurm login node, or install Slurm (Debian/Ubuntu: `apt-get install slurm-wlm "
                           "munge`; one machine: `.ci/slurm.sh start` in dflow's repository)")


def _import_slurm_cluster():
    try:
        from dask_jobqueue import SLURMCluster
    except ImportError as error:
        raise ImportError(f"dflow.cluster.slurm needs dask-jobqueue ({error}); install it with "
                          "`pip install dflow[slurm]`") from error
    return SLURMCluster


def _role_options(template: dict, job: str, task: int, job_name: str) -> dict:
    """The SLURMJob options that make one job hold one role."""
    # without a limit BLAS starts a thread per CPU of the node, not per CPU of the job
    threads = 1 if job == "ps" else int(template.get("cores") or _config(template["config_name"], "cores"))
    blas = [f"export {name}={value}" for name, value in blas_env(threads).items()]
    # a Dask worker paused for memory runs no task, and a replica is one long task: a worker over
    # its memory is better killed (its role is recovered) than paused (its replica waits forever)
    no_pause = ["export DASK_DISTRIBUTED__WORKER__MEMORY__PAUSE=False"]
    extra_args, prologue = (template.get(key, _config(template["config_name"], key.replace("_", "-")))
                            for key in ("worker_extra_args", "job_script_prologue"))
    # dask-jobqueue joins the worker's arguments into the job script unquoted: the resources
    # ("worker=1 worker/1=1") are one argument only when quoted here
    resources = " ".join(f"{key}={value}" for key, value in role_resources(job, task).items())
    return {**template, "job_name": f"{job_name}-{job}-{task}",
            "worker_extra_args": [*(extra_args or []), *WORKER_PRELOAD,
                                  "--resources", shlex.quote(resources)],
            "job_script_prologue": list(prologue or []) + blas + no_pause}


def _config(config_name: str, key: str):
    """A dask-jobqueue setting from the Dask config (what SLURMJob falls back to)."""
    import dask

    return dask.config.get(f"jobqueue.{config_name}.{key}", None)
