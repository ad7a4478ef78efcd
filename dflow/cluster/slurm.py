"""``dflow.cluster.slurm``: one Slurm job per role, through dask-jobqueue."""

from __future__ import annotations

from . import START_TIMEOUT_S, Cluster, _roles, _start, role_name

__all__ = ["slurm"]


def slurm(ps: int = 1, workers: int = 2, timeout: float = START_TIMEOUT_S, **kwargs) -> Cluster:
    """One Slurm job per role (``dask_jobqueue.SLURMCluster``); keyword arguments go to
    ``SLURMCluster`` (``queue``, ``cores``, ``memory``, ``walltime``, ``interface``, ...).

    >>> cluster = tf.cluster.slurm(ps=1, workers=4, cores=8, memory="32GB",
    ...                            walltime="01:00:00")  # doctest: +SKIP
    """
    try:
        from dask_jobqueue import SLURMCluster
    except ImportError as error:
        raise ImportError(f"dflow.cluster.slurm needs dask-jobqueue ({error}); install it with "
                          "`pip install dflow[slurm]`") from error
    roles = _roles(ps, workers)
    kwargs.setdefault("cores", 1)
    kwargs.setdefault("memory", "2GB")
    kwargs["processes"] = 1  # one worker per job: the job's name is the worker's name
    dask_cluster = SLURMCluster(n_workers=0, **kwargs)
    extra = list(kwargs.get("worker_extra_args") or [])
    template = dask_cluster.new_spec
    for job, i in roles:
        options = {**template["options"], "worker_extra_args": extra + ["--resources", f"{job}=1"]}
        dask_cluster.worker_spec[role_name(job, i)] = {"cls": template["cls"], "options": options}
    try:
        return _start(dask_cluster, roles, timeout)
    except BaseException:
        dask_cluster.close()
        raise
