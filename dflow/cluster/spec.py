"""``ClusterSpec``: the jobs of a cluster and the address of each task, as in TF 1.x.

A dflow cluster is a Dask cluster whose workers carry their role as their name:
the worker named ``"ps/0"`` is task 0 of job ``ps``. :meth:`ClusterSpec.from_client`
reads the roles off a live cluster; TF's dict form works too, for scripts that
pass a spec to ``replica_device_setter``:

>>> spec = ClusterSpec({"ps": ["ps0:2222"], "worker": ["w0:2222", "w1:2222"]})
>>> spec.jobs, spec.num_tasks("worker"), spec.task_address("worker", 1)
(['ps', 'worker'], 2, 'w1:2222')
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

__all__ = ["ClusterSpec", "role_name", "role_resources", "task_of", "role_of", "device_role", "worker_infos"]


def worker_infos(client) -> dict[str, dict]:
    """Address -> info (name, resources, status) of every worker the scheduler knows, asked now.

    Not ``client.scheduler_info()``: newer clients refresh that same cached dict every 2 s
    without the workers, and a refresh landing between its fetch and its return gave no
    workers at all (under load, a live role seemed to have left)."""
    return client.sync(client.scheduler.identity)["workers"]


def role_name(job: str, task: int) -> str:
    """The Dask worker name that carries a role: ``("ps", 0)`` -> ``"ps/0"``."""
    return f"{job}/{int(task)}"


def role_resources(job: str, task: int, gpus: int = 0) -> dict[str, int]:
    """The Dask resources a role's worker offers: its job (``{"ps": 1}``), the role itself
    (``{"ps/0": 1}``, which pins a step's stages to it through Dask's scheduler: see
    :mod:`dflow.distributed.dask_runner`) and its GPUs.

    >>> role_resources("worker", 1, gpus=1)
    {'worker': 1, 'worker/1': 1, 'GPU': 1}
    """
    return {job: 1, role_name(job, task): 1, **({"GPU": gpus} if gpus else {})}


def task_of(worker_name) -> tuple[str, int] | None:
    """``"ps/0"`` -> ``("ps", 0)``; None for a worker without a dflow role."""
    job, _, task = str(worker_name).partition("/")
    return (job, int(task)) if job and task.isdigit() else None


def role_of(worker_name) -> str | None:
    """``"ps/0"`` -> ``"/job:ps/task:0"``; None for a worker without a dflow role."""
    role = task_of(worker_name)
    return f"/job:{role[0]}/task:{role[1]}" if role else None


_TASK = re.compile(r"/job:(\w+)(?:/replica:\d+)?/task:(\d+)")


def device_role(task: str) -> str:
    """A task's role: ``/job:worker/task:0`` -> ``worker/0`` (other names unchanged).

    >>> device_role("/job:ps/task:1"), device_role("/job:worker/replica:0/task:2"), device_role("client")
    ('ps/1', 'worker/2', 'client')
    """
    match = _TASK.fullmatch(task)
    if match is None:
        return task
    return f"{match.group(1)}/{match.group(2)}"


class ClusterSpec:
    """Jobs -> task addresses (TF's ``tf.train.ClusterSpec``).

    ``cluster`` is ``{job: [address, ...]}`` (task i at index i) or
    ``{job: {i: address}}`` (sparse tasks), or another ClusterSpec. Specs read from
    a live cluster also know each task's GPU count.
    """

    def __init__(self, cluster: Mapping | ClusterSpec, gpus: Mapping[tuple[str, int], int] | None = None):
        if isinstance(cluster, ClusterSpec):
            cluster, gpus = cluster.as_dict(), {**cluster._gpus, **(gpus or {})}
        if not isinstance(cluster, Mapping):
            raise TypeError(f"a ClusterSpec is built from {{job: [addresses]}} or {{job: {{index: "
                            f"address}}}}, got {type(cluster).__name__}")
        self._jobs: dict[str, dict[int, str]] = {}
        for job, tasks in cluster.items():
            if isinstance(tasks, str) or not isinstance(tasks, (Sequence, Mapping)):
                raise TypeError(f"job {job!r}: tasks must be a list of addresses or {{index: address}}, "
                                f"got {tasks!r}")
            pairs = tasks.items() if isinstance(tasks, Mapping) else enumerate(tasks)
            self._jobs[str(job)] = {int(i): str(address) for i, address in pairs}
        self._gpus = dict(gpus or {})

    @classmethod
    def from_client(cls, client) -> ClusterSpec:
        """The roles of the live Dask cluster ``client`` is connected to.

        Raises ValueError when two workers claim one role or no worker has a role."""
        jobs: dict[str, dict[int, str]] = {}
        gpus: dict[tuple[str, int], int] = {}
        for address, info in worker_infos(client).items():
            role = task_of(info.get("name"))
            if role is None:
                continue
            job, index = role
            if index in jobs.setdefault(job, {}):
                raise ValueError(f"two workers claim {role_name(job, index)}: {jobs[job][index]} and "
                                 f"{address}; give every worker its own role (`dflow worker --job "
                                 f"{job} --task N` with a free N)")
            jobs[job][index] = address
            gpus[role] = int(info.get("resources", {}).get("GPU", 0))
        if not jobs:
            raise ValueError("this Dask cluster has no dflow roles: its workers must be named "
                             "'job/task' ('ps/0', 'worker/0'); start them with dflow.cluster.local() or "
                             "`dflow worker --scheduler ADDRESS --job ps --task 0`")
        return cls({job: dict(sorted(tasks.items())) for job, tasks in sorted(jobs.items())}, gpus)

    @property
    def jobs(self) -> list[str]:
        return list(self._jobs)

    def task_indices(self, job: str) -> list[int]:
        return sorted(self._tasks(job))

    def num_tasks(self, job: str) -> int:
        return len(self._tasks(job))

    def task_address(self, job: str, task_index: int) -> str:
        tasks = self._tasks(job)
        if task_index not in tasks:
            raise ValueError(f"job {job!r} has no task {task_index}; its tasks are "
                             f"{sorted(tasks)} (roles: {', '.join(self.roles())})")
        return tasks[task_index]

    def job_tasks(self, job: str) -> list[str]:
        """The addresses of ``job``'s tasks, by index (TF's name)."""
        tasks = self._tasks(job)
        return [tasks[i] for i in sorted(tasks)]

    def as_dict(self) -> dict[str, list[str] | dict[int, str]]:
        """TF's dict form: a list per job when its indices are 0..n-1, else ``{index: address}``."""
        return {job: [tasks[i] for i in range(len(tasks))] if sorted(tasks) == list(range(len(tasks)))
                else dict(tasks) for job, tasks in self._jobs.items()}

    def roles(self) -> list[str]:
        """Every task as a worker name, ``["ps/0", "worker/0", ...]``."""
        return [role_name(job, i) for job, tasks in self._jobs.items() for i in sorted(tasks)]

    def devices(self) -> dict[str, dict]:
        """Every task as a device: ``{"/job:ps/task:0": {"address": ..., "GPU": n}}``."""
        return {f"/job:{job}/task:{i}": {"address": address, "GPU": self._gpus.get((job, i), 0)}
                for job, tasks in self._jobs.items() for i, address in sorted(tasks.items())}

    def _tasks(self, job: str) -> dict[int, str]:
        if job not in self._jobs:
            raise ValueError(f"the cluster has no job {job!r}; its roles are: {', '.join(self.roles())}")
        return self._jobs[job]

    def __eq__(self, other) -> bool:
        return isinstance(other, ClusterSpec) and self._jobs == other._jobs

    def __repr__(self) -> str:
        return f"ClusterSpec({self.as_dict()!r})"
