"""Synchronous data parallelism without a parameter server: allreduce the gradients.

:class:`AllReduceOptimizer` wraps an optimizer as Horovod's ``DistributedOptimizer``
does: every replica computes its gradients, the replicas sum (or average) them
with an allreduce over the workers' own links, and each replica applies the
same update to its own copy of the variables. :class:`BroadcastGlobalVariablesHook`
makes the copies equal at the start (after the chief's restore, too).

Performance, each a constructor argument:

- fusion: gradients are packed into buckets of up to ``fusion_bytes`` (Horovod's
  fusion threshold, DDP's buckets), one collective per bucket, filled from the
  last layer backwards, since the backward pass produces those first;
- overlap: a bucket's allreduce starts as soon as its gradients exist, while the
  earlier layers' gradients still compute (``overlap=False`` waits for all);
- ``compression="fp16"`` halves the bytes on the wire.

A step applies its update only once every bucket's allreduce has ended, so a step
whose collective fails (a member died) changes no variable: the survivors hold the
last whole step, which they may save. :class:`ElasticGroup` is the set of workers an
elastic run (``dflow train --variable_update allreduce --elastic``, as Horovod
Elastic) still trains on: a lost worker leaves the ring and the others go on.
"""

from __future__ import annotations

from .. import variables as variables_lib
from ..graph import convert_to_tensor, get_default_graph
from ..ops import collective_ops, state_ops
from .optimizers import Optimizer
from .session_run_hook import SessionRunHook

__all__ = ["AllReduceOptimizer", "BroadcastGlobalVariablesHook", "ElasticGroup", "broadcast_variables",
           "fuse", "variable_bytes", "DEFAULT_FUSION_BYTES"]

# Horovod fuses up to 64 MiB, DDP's buckets hold 25 MiB; dflow's models are 1-13 MB, so 4 MiB still
# gives the first bucket early; measured against no fusion in README, "Variable updates"
DEFAULT_FUSION_BYTES = 4 * 2**20


def fuse(grads_and_vars, fusion_bytes: int) -> list[list]:
    """``(gradient, variable)`` pairs in buckets of at most ``fusion_bytes`` (a larger tensor is a
    bucket of its own; ``fusion_bytes=0`` gives one bucket per tensor), last variable first."""
    buckets, size = [], 0
    for grad, var in reversed(grads_and_vars):
        nbytes = variable_bytes(var)
        if not buckets or size + nbytes > fusion_bytes:
            buckets.append([])
            size = 0
        buckets[-1].append((grad, var))
        size += nbytes
    return buckets


def variable_bytes(var) -> int:
    count = 1
    for dim in var.shape.as_list():
        count *= dim or 1
    return count * var.dtype.size


class AllReduceOptimizer(Optimizer):
    """Average each gradient over ``group`` (one replica per task) before ``opt`` applies it.

    Parameters
    ----------
    opt : Optimizer
        Applies the averaged gradients to this replica's variables.
    group : sequence of str
        Every replica's task (``"/job:worker/task:0"``, ...); each runs the same program.
    fusion_bytes : int
        Gradients per collective, in bytes (0: one collective per gradient).
    overlap : bool
        Start each bucket's allreduce as soon as its gradients exist.
    compression : str, optional
        ``"fp16"``: half floats on the wire.
    algorithm : str
        ``"auto"`` (recursive doubling below 1 MiB, else ring), ``"ring"`` or ``"tree"``.
    average : bool
        Divide the sum by the number of replicas (as synchronous SGD on the whole batch).

    Example
    -------
    >>> group = [f"/job:worker/task:{i}" for i in range(4)]  # doctest: +SKIP
    >>> opt = tf.train.AllReduceOptimizer(tf.train.AdamOptimizer(1e-3), group)  # doctest: +SKIP
    >>> train_op = opt.minimize(loss, global_step=step)  # doctest: +SKIP
    """

    def __init__(self, opt: Optimizer, group, fusion_bytes: int = DEFAULT_FUSION_BYTES,
                 overlap: bool = True, compression: str | None = None, algorithm: str = "auto",
                 average: bool = True, name: str = "AllReduce"):
        if compression not in (None, "fp16"):
            raise ValueError(f"compression must be None or 'fp16', got {compression!r}")
        if fusion_bytes < 0:
            raise ValueError(f"fusion_bytes must be 0 or more, got {fusion_bytes}")
        super().__init__(False, name)
        self._opt = opt
        self.group = tuple(group)
        self.fusion_bytes, self.overlap = fusion_bytes, overlap
        self.compression, self.algorithm, self.average = compression, algorithm, average

    def compute_gradients(self, loss, var_list=None, **kwargs):
        """The wrapped optimizer's gradients, allreduced."""
        return self.reduce(self._opt.compute_gradients(loss, var_list=var_list, **kwargs))

    def reduce(self, grads_and_vars) -> list:
        """``grads_and_vars`` with each gradient summed (averaged) over the group."""
        present = [(convert_to_tensor(g), v) for g, v in grads_and_vars if g is not None]
        graph = get_default_graph()
        everything = [g.op for g, _ in present] if not self.overlap else []
        reduced = {}
        with graph.name_scope(self._name), graph.control_dependencies(everything):
            for index, bucket in enumerate(fuse(present, self.fusion_bytes)):
                with graph.colocate_with(bucket[0][1].op):  # beside this replica's variables
                    outputs = collective_ops.all_reduce(
                        [g for g, _ in bucket], self.group, f"{self._name}/bucket_{index}",
                        average=self.average, algorithm=self.algorithm, compression=self.compression,
                        names=[v.op.name for _, v in bucket], name=f"bucket_{index}")
                reduced.update({v: out for (_, v), out in zip(bucket, outputs)})
        return [(reduced.get(v), v) for _, v in grads_and_vars]

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """The wrapped optimizer's update, run once every gradient has been reduced: a step
        whose collective failed changes no variable (the update itself is cheap, the overlap
        that matters is of the allreduce with the backward pass)."""
        reduced = [g.op for g, _ in grads_and_vars if g is not None]
        with get_default_graph().control_dependencies(reduced):
            return self._opt.apply_gradients(grads_and_vars, global_step=global_step, name=name)

    def get_slot(self, var, name):
        return self._opt.get_slot(var, name)

    def get_slot_names(self):
        return self._opt.get_slot_names()

    def variables(self):
        return self._opt.variables()


def broadcast_variables(variables, group, root: int = 0, name: str = "broadcast_variables"):
    """An op giving every member's ``variables`` the values of ``group[root]``'s (one message)."""
    graph = get_default_graph()
    variables = list(variables)
    with graph.name_scope(name), graph.colocate_with(variables[0].op):
        values = collective_ops.broadcast([v.value() for v in variables], group, name, root=root,
                                          names=[v.op.name for v in variables])
    return variables_lib.group(*(state_ops.assign(v, value) for v, value in zip(variables, values)),
                           name=name)


class BroadcastGlobalVariablesHook(SessionRunHook):
    """After the session starts, every replica takes ``group[root]``'s global variables
    (its initial values, or what it restored), so the copies start equal."""

    def __init__(self, group, root: int = 0):
        self.group, self.root = tuple(group), root
        self._op = None

    def begin(self) -> None:
        variables = variables_lib.global_variables()
        if variables and len(self.group) > 1:
            self._op = broadcast_variables(variables, self.group, self.root)

    def after_create_session(self, session, coord) -> None:
        if self._op is not None:
            session.run(self._op)


class ElasticGroup:
    """The worker tasks an elastic allreduce trains on: every worker of ``spec`` at first,
    then those left after each loss (the ring is rebuilt without the dead; the global batch
    shrinks with it).

    >>> from dflow.train import ClusterSpec
    >>> group = ElasticGroup(ClusterSpec({"worker": ["a:1", "b:1", "c:1"]}))
    >>> group.stand_in(["worker/0"])  # the chief died: worker/1 saves as it stops
    1
    >>> group.leave(["worker/0", "ps/0"])
    ['worker/0']
    >>> group.roles, group.spec(ClusterSpec({"worker": ["a:2", "b:1", "c:1"]})).as_dict()
    (['worker/1', 'worker/2'], {'worker': {1: 'b:1', 2: 'c:1'}})
    >>> group.describe(batch_size=50)
    'elastic: going on with 2 of 3 workers (worker/1, worker/2); global batch now 100 images (was 150)'
    """

    def __init__(self, spec):
        self.tasks = sorted(spec.task_indices("worker"))
        self.started_with = len(self.tasks)

    @property
    def roles(self) -> list[str]:
        return [f"worker/{task}" for task in self.tasks]

    def leave(self, roles) -> list[str]:
        """Take the lost ``roles`` out of the group; which of them were members. Raises
        ValueError when no member would be left."""
        left = [role for role in self.roles if role in set(roles)]
        remaining = [task for task in self.tasks if f"worker/{task}" not in left]
        if not remaining:
            raise ValueError(f"no worker is left to go on with: {', '.join(left)} died")
        self.tasks = remaining
        return left

    def stand_in(self, lost) -> int | None:
        """The member that saves a checkpoint as it stops when ``lost`` took the chief (the
        group's first member, which saves them) with it: the first survivor."""
        chief, survivors = self.roles[0], [r for r in self.roles if r not in set(lost)]
        return int(survivors[0].partition("/")[2]) if chief in set(lost) and survivors else None

    def spec(self, cluster_spec):
        """``cluster_spec`` (the live cluster's) with only the group's worker tasks."""
        from ..cluster import ClusterSpec

        jobs = {job: {i: cluster_spec.task_address(job, i) for i in cluster_spec.task_indices(job)
                      if job != "worker" or i in self.tasks} for job in cluster_spec.jobs}
        return ClusterSpec(jobs)

    def describe(self, batch_size: int) -> str:
        """How the training goes on: with whom, and the global batch then."""
        return (f"elastic: going on with {len(self.tasks)} of {self.started_with} workers "
                f"({', '.join(self.roles)}); global batch now {batch_size * len(self.tasks)} images "
                f"(was {batch_size * self.started_with})")
