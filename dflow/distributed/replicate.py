"""Between-graph replication: the same training program once per worker task.

Each replica runs inside its worker's process as its own client: it builds its
own graph (``replica_device_setter`` puts the variables on the PS tasks) and
opens ``tf.Session(target)``; variables created with the same name on the same
PS task are the same variable, so the replicas train one model. Their steps
run their own ops in-process and talk to the PS tasks directly.

A replica is a Dask task pinned by the resource naming its role (``worker/1``), as a
DaskRunner's stages are, so a worker restarted under the same role takes it again.
Dask would also rerun a replica whose worker died on the role's restarted worker, on
its own, while ``dflow train`` restarts every replica from the checkpoint: so a run's
replicas are ended with :func:`cancel_replicas`, which marks the run over first, and a
replica of a run that is over returns at once instead of training beside the new ones.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

import distributed

from ..errors import OpError, UnavailableError
from .dask_runner import ROLE_SHARE, resources_by_role, role_resource
from .liveness import RoleWatch
from .runner import cluster_tasks, install

__all__ = ["replicate", "start_replicas", "cancel_replicas"]

_WATCH_EVERY_S = 0.5  # how often a replicate() waiting for its replicas checks that their roles live
# how long a failed run waits for a replica's own error after another's report of it (below)
_ROOT_CAUSE_WAIT_S = 2.0


def replicate(train_fn: Callable[..., Any], cluster, *args, job: str = "worker", **kwargs) -> list:
    """Run ``train_fn(task_index, *args, **kwargs)`` on every task of ``job``, concurrently;
    return the results by task index (the first error raised by a replica is raised here; a
    task whose worker dies meanwhile raises :class:`~dflow.distributed.liveness.RoleLostError`
    naming its role within a second, instead of waiting for a replica that will never end).

    ``cluster`` is a :func:`dflow.cluster.local` (or any dflow cluster) object, or a
    ``distributed.Client`` connected to one. Inside ``train_fn``, ``cluster.target`` is the
    session target and the ops a replica leaves unplaced run on its own task.

    >>> def train(task_index, target, spec):  # doctest: +SKIP
    ...     worker = f"/job:worker/task:{task_index}"
    ...     with tf.device(tf.train.replica_device_setter(worker_device=worker, cluster=spec)):
    ...         loss, train_op = build_model()
    ...     with tf.train.MonitoredTrainingSession(target, is_chief=task_index == 0) as sess:
    ...         for _ in range(100):
    ...             sess.run(train_op)
    >>> tf.replicate(train, cluster, cluster.target, cluster.spec)  # doctest: +SKIP
    """
    client = cluster if isinstance(cluster, distributed.Client) else cluster.client
    watch = RoleWatch(client)
    futures = start_replicas(train_fn, cluster, *args, job=job, **kwargs)
    try:
        while _pending(futures):
            try:
                with client.as_current():  # (wait finds its client as the current one)
                    distributed.wait([f for f in futures if not f.done()], timeout=_WATCH_EVERY_S,
                                     return_when="FIRST_COMPLETED")
            except (TimeoutError, asyncio.TimeoutError):  # (distinct types before Python 3.11)
                pass
            if any(f.status == "error" for f in futures):
                raise _root_cause(client, futures)
            watch.check()
        return client.gather(futures)
    finally:
        cancel_replicas(client, futures)


def _pending(futures) -> bool:
    return not all(f.done() for f in futures)


def _root_cause(client, futures) -> BaseException:
    """The error of a failed run: a replica's own error (an OpError other than
    UnavailableError: say the InvalidArgumentError of replicas that reduce different
    variables) over another replica's report that a member of its collective failed, which
    can finish first; waits at most :data:`_ROOT_CAUSE_WAIT_S` for it."""
    def own_error():
        errors = (f.exception() for f in futures if f.status == "error")
        return next((e for e in errors if isinstance(e, OpError) and not isinstance(e, UnavailableError)),
                    None)

    deadline = time.monotonic() + _ROOT_CAUSE_WAIT_S
    while own_error() is None and _pending(futures) and time.monotonic() < deadline:
        try:
            with client.as_current():
                distributed.wait([f for f in futures if not f.done()], timeout=deadline - time.monotonic(),
                                 return_when="FIRST_COMPLETED")
        except (TimeoutError, asyncio.TimeoutError):
            break
    return own_error() or next(f.exception() for f in futures if f.status == "error")


def start_replicas(train_fn: Callable[..., Any], cluster, *args, job: str = "worker",
                   task_indices=None, **kwargs) -> list[distributed.Future]:
    """:func:`replicate` without waiting: one future per task of ``job`` (or per task of
    ``task_indices``), by task index."""
    client = cluster if isinstance(cluster, distributed.Client) else cluster.client
    install(client)
    tasks = cluster_tasks(client)
    indices = sorted(int(t.rpartition(":")[2]) for t in tasks if t.startswith(f"/job:{job}/")
                     and (task_indices is None or int(t.rpartition(":")[2]) in set(task_indices)))
    if not indices:
        raise ValueError(f"the cluster has no {job!r} tasks to replicate on; its tasks are: "
                         f"{', '.join(sorted(tasks))}")
    run = uuid.uuid4().hex[:8]
    offered = resources_by_role(client)
    futures = []
    for i in indices:
        task = f"/job:{job}/task:{i}"
        role = role_resource(task)
        # a worker that dflow did not start may lack its role's resource: pinned by address then
        where = ({"resources": {role: ROLE_SHARE}} if role in offered.get(role, {})
                 else {"workers": [tasks[task]["address"]], "allow_other_workers": False})
        futures.append(client.submit(_run_replica, train_fn, i, run, args, kwargs, pure=False,
                                     key=f"dflow-replica-{job}-{i}-{run}", **where))
    return futures


def cancel_replicas(client: distributed.Client, futures: list[distributed.Future]) -> None:
    """End the replicas of :func:`start_replicas`' ``futures`` for good: their run is marked over
    (a rerun of one on a restarted worker returns at once), then their tasks are cancelled."""
    for run in {f.key.rpartition("-")[2] for f in futures}:
        distributed.Event(_over(run), client=client).set()
    client.cancel(futures)


def _over(run: str) -> str:
    return f"dflow-replicas-over-{run}"


def _run_replica(train_fn, task_index: int, run: str, args, kwargs):
    from ..graph import Graph

    if distributed.Event(_over(run)).is_set():  # Dask reran it after its run was ended
        return None
    with Graph().as_default():  # each replica builds its own graph, as its own client would
        return train_fn(task_index, *args, **kwargs)
