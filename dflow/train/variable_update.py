"""Where a between-graph replica's variables live and how they are updated: tf_cnn_benchmarks'
``--variable_update`` modes, for the same model code.

Every worker task runs one replica of the training program. The mode decides:

==========================  ==================================================================
``parameter_server``        variables on the PS tasks; each replica reads them and sends its
                            gradients back (``SyncReplicasOptimizer`` when synchronous)
``replicated``              a copy of every variable on each worker of one node; gradients
                            summed by an allreduce among them, every copy applies the same update
``distributed_replicated``  a copy on each worker plus a master copy on the PS; a node's workers
                            sum their gradients locally (allreduce), one aggregate per node goes
                            to the PS, and the node's copies are refreshed from the master
``allreduce``               copies on every worker of every node, gradients allreduced across
                            all of them (ring or recursive doubling over the workers' links)
``independent``             copies on every worker, no communication: compute alone
==========================  ==================================================================

A node is a group of ``devices_per_node`` consecutive worker tasks (default: the
workers sharing a host). The program changes in three places, all given here::

    update = tf.train.VariableUpdate("allreduce", cluster.spec, task_index)
    with tf.device(update.device()):
        loss = build_model(...)
        train_op = update.optimizer(tf.train.AdamOptimizer(1e-3)).minimize(loss, global_step=step)
    with tf.train.MonitoredTrainingSession(target, is_chief=update.is_chief,
                                           hooks=update.hooks() + [...]) as sess:
        ...
"""

from __future__ import annotations

from urllib.parse import urlsplit

from .. import variables as variables_lib
from ..graph import GraphKeys, get_default_graph
from ..ops import array_ops, collective_ops, state_ops
from ..placement import DeviceSpec
from .allreduce import DEFAULT_FUSION_BYTES, AllReduceOptimizer, BroadcastGlobalVariablesHook, variable_bytes
from .device_setter import GreedyLoadBalancingStrategy, byte_size_load_fn, replica_device_setter
from .optimizers import Optimizer
from .sync_replicas import SyncReplicasOptimizer

__all__ = ["VARIABLE_UPDATES", "VariableUpdate", "DistributedReplicatedOptimizer", "nodes_of"]

VARIABLE_UPDATES = ("parameter_server", "replicated", "distributed_replicated", "allreduce", "independent")
PS_STRATEGIES = ("round_robin", "greedy")


def nodes_of(spec, devices_per_node: int | None = None) -> list[tuple[str, ...]]:
    """The worker tasks grouped by node: ``devices_per_node`` consecutive tasks each, or else
    the tasks whose addresses share a host."""
    workers = [f"/job:worker/task:{i}" for i in sorted(spec.task_indices("worker"))]
    if devices_per_node:
        return [tuple(workers[i:i + devices_per_node]) for i in range(0, len(workers), devices_per_node)]
    hosts: dict[str, list[str]] = {}
    for task in workers:
        address = spec.task_address("worker", int(task.rpartition(":")[2]))
        host = urlsplit(address if "://" in address else f"tcp://{address}").hostname
        hosts.setdefault(host, []).append(task)
    return [tuple(tasks) for tasks in hosts.values()]


class VariableUpdate:
    """One replica's variable placement, optimizer wrapper, session role and hooks for ``mode``.

    Parameters
    ----------
    mode : str
        One of :data:`VARIABLE_UPDATES`.
    cluster : ClusterSpec or dict
        The cluster (``cluster.spec``); its ``worker`` job holds the replicas.
    task_index : int
        This replica's worker task.
    sync : bool
        Synchronous updates. ``replicated`` and ``allreduce`` are synchronous by nature;
        ``distributed_replicated`` may update the master asynchronously between nodes.
    devices_per_node : int, optional
        Worker tasks per node (default: per host).
    ps_strategy : str
        ``round_robin`` or ``greedy`` (by variable bytes) placement over the PS tasks.
    fusion_bytes, overlap, compression, algorithm
        The allreduce's (see :class:`~dflow.train.AllReduceOptimizer`).
    sync_timeout : float
        Seconds a synchronous replica waits for the others before it fails (a dead one is
        noticed sooner, through liveness): ``SyncReplicasOptimizer(timeout=)``.
    """

    def __init__(self, mode: str, cluster, task_index: int, *, sync: bool = True,
                 devices_per_node: int | None = None, ps_strategy: str = "round_robin",
                 fusion_bytes: int = DEFAULT_FUSION_BYTES, overlap: bool = True,
                 compression: str | None = None, algorithm: str = "auto", sync_timeout: float = 300.0):
        from ..cluster import ClusterSpec

        if mode not in VARIABLE_UPDATES:
            raise ValueError(f"unknown variable_update {mode!r}; choose one of {', '.join(VARIABLE_UPDATES)}")
        if ps_strategy not in PS_STRATEGIES:
            raise ValueError(f"unknown ps_strategy {ps_strategy!r}; choose one of {', '.join(PS_STRATEGIES)}")
        if devices_per_node is not None and devices_per_node < 1:
            raise ValueError(f"devices_per_node must be at least 1, got {devices_per_node}")
        self.mode, self.spec, self.task_index, self.sync = mode, ClusterSpec(cluster), task_index, sync
        self.ps_strategy, self.sync_timeout = ps_strategy, sync_timeout
        self.collective = dict(fusion_bytes=fusion_bytes, overlap=overlap, compression=compression,
                               algorithm=algorithm)
        self.num_ps = self.spec.num_tasks("ps") if "ps" in self.spec.jobs else 0
        self.workers = tuple(f"/job:worker/task:{i}" for i in sorted(self.spec.task_indices("worker")))
        self.worker_device = f"/job:worker/task:{task_index}"
        if self.worker_device not in self.workers:
            raise ValueError(f"task {task_index} is not a worker task of the cluster; its workers are "
                             f"{', '.join(self.workers)}")
        self.nodes = nodes_of(self.spec, devices_per_node)
        self.node = next(node for node in self.nodes if self.worker_device in node)
        self._check()
        self._optimizer: Optimizer | None = None

    def _check(self) -> None:
        if self.mode in ("parameter_server", "distributed_replicated") and self.num_ps == 0:
            raise ValueError(f"variable_update {self.mode} keeps variables on PS tasks, but the cluster "
                             "has none: start it with --num_ps 1 or more")
        if self.mode in ("replicated", "allreduce") and not self.sync:
            raise ValueError(f"variable_update {self.mode} is synchronous (every replica applies the "
                             "same summed gradients): drop --async, or use parameter_server")
        if self.mode == "replicated" and len(self.nodes) > 1:
            raise ValueError(
                f"variable_update replicated shares gradients among the workers of one node, but the "
                f"workers are on {len(self.nodes)} nodes ({'; '.join(', '.join(n) for n in self.nodes)}): "
                "use allreduce or distributed_replicated across nodes")

    # ---- the three places the training program asks ----------------------------------
    def device(self):
        """The device function (or string) to build this replica's model under."""
        if self.mode == "parameter_server":
            strategy = None
            if self.ps_strategy == "greedy":
                strategy = GreedyLoadBalancingStrategy(self.num_ps, byte_size_load_fn)
            return replica_device_setter(worker_device=self.worker_device, cluster=self.spec,
                                         ps_strategy=strategy)
        return self.worker_device  # every other mode keeps its copies of the variables here

    def optimizer(self, optimizer: Optimizer) -> Optimizer:
        """``optimizer`` wrapped as the mode needs; call ``minimize`` on the result."""
        n = len(self.workers)
        if self.mode == "parameter_server":
            wrapped = (SyncReplicasOptimizer(optimizer, n, n, timeout=self.sync_timeout) if self.sync
                       else optimizer)
        elif self.mode in ("replicated", "allreduce"):
            group = self.node if self.mode == "replicated" else self.workers
            wrapped = AllReduceOptimizer(optimizer, group, **self.collective)
        elif self.mode == "distributed_replicated":
            wrapped = DistributedReplicatedOptimizer(optimizer, self, **self.collective)
        else:
            wrapped = optimizer
        self._optimizer = wrapped
        return wrapped

    @property
    def is_chief(self) -> bool:
        """Whether this replica initializes (or restores) variables in MonitoredTrainingSession:
        task 0 where the variables are shared, every replica where each holds its own copies."""
        return self.task_index == 0 or self.mode in ("replicated", "allreduce", "independent")

    @property
    def saves_checkpoints(self) -> bool:
        """The first worker task saves checkpoints (task 0, unless an elastic run lost it)."""
        return self.worker_device == self.workers[0]

    @property
    def shard(self) -> tuple[int, int]:
        """Which part of the training data this replica reads: (its place among the workers, how many)."""
        return self.workers.index(self.worker_device), len(self.workers)

    def hooks(self) -> list:
        """The session hooks the mode needs (after :meth:`optimizer`)."""
        if self._optimizer is None:
            raise ValueError("call VariableUpdate.optimizer(...) and minimize before asking for hooks")
        if isinstance(self._optimizer, SyncReplicasOptimizer):
            return [self._optimizer.make_session_run_hook(is_chief=self.task_index == 0)]
        if isinstance(self._optimizer, DistributedReplicatedOptimizer):
            return self._optimizer.hooks()
        if self.mode in ("replicated", "allreduce"):
            return [BroadcastGlobalVariablesHook(self._optimizer.group)]
        return []

    def images_per_step(self, batch_size: int) -> int:
        """Images one step of this replica stands for: the whole synchronous step's, or its own."""
        if self.mode == "independent" or (self.mode == "parameter_server" and not self.sync):
            return batch_size
        if self.mode == "distributed_replicated" and not self.sync:
            return batch_size * len(self.node)
        return batch_size * len(self.workers)

    def describe(self) -> str:
        nodes = f"{len(self.nodes)} node(s) of {', '.join(str(len(n)) for n in self.nodes)} workers"
        where = {"parameter_server": f"variables on {self.num_ps} PS ({self.ps_strategy})",
                 "distributed_replicated": f"copies per worker, master on {self.num_ps} PS, {nodes}",
                 "replicated": f"copies per worker, allreduce within the node, {nodes}",
                 "allreduce": f"copies per worker, allreduce across {len(self.workers)} workers",
                 "independent": "copies per worker, no communication"}[self.mode]
        return f"{self.mode} ({'sync' if self.sync else 'async'}): {where}"


class DistributedReplicatedOptimizer(Optimizer):
    """``distributed_replicated``: sum a node's gradients locally, apply one aggregate per node to
    master copies on the PS, then refresh the node's copies from them.

    The node's first worker (its leader) talks to the PS; the others exchange only with
    the workers of their node. The copies are local variables; the masters are global
    (what checkpoints hold) and initialized from the chief's initial values.
    """

    def __init__(self, opt: Optimizer, update: VariableUpdate, name: str = "DistributedReplicated",
                 **collective):
        super().__init__(False, name)
        self._update = update
        self._node_sum = AllReduceOptimizer(opt, update.node, average=False, name=f"{name}/node",
                                            **collective)
        self._leader = update.worker_device == update.node[0]
        self._master_opt = (SyncReplicasOptimizer(opt, len(update.nodes), len(update.nodes),
                                                  timeout=update.sync_timeout)
                            if update.sync and self._leader else opt)

    def compute_gradients(self, loss, var_list=None, **kwargs):
        """The node's summed gradients."""
        return self._node_sum.compute_gradients(loss, var_list=var_list, **kwargs)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        graph = get_default_graph()
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        copies = [v for _, v in pairs] + ([global_step] if global_step is not None else [])
        with graph.name_scope(name or self._name):
            masters = self._masters(copies)
            if self._leader:
                size = float(len(self._update.node))
                node_mean = [(g / size, masters[i]) for i, (g, _) in enumerate(pairs)]
                master_step = masters[-1] if global_step is not None else None
                node_index = self._update.nodes.index(self._update.node)
                sync = isinstance(self._master_opt, SyncReplicasOptimizer)
                extra = {"replica_id": node_index} if sync else {}
                applied = self._master_opt.apply_gradients(node_mean, global_step=master_step, **extra)
                with graph.control_dependencies([applied]), graph.colocate_with(copies[0].op):
                    refreshed = [array_ops.identity(m.read_value()) for m in masters]  # one read per node
            else:  # the copies give only the shapes (the leader's values arrive), after this
                with graph.control_dependencies([g.op for g, _ in pairs]):  # member's node sum
                    refreshed = [c.read_value() for c in copies]
            with graph.colocate_with(copies[0].op):
                values = collective_ops.broadcast(refreshed, self._update.node, f"{self._name}/refresh",
                                                  names=[c.op.name for c in copies])
            train_op = variables_lib.group(*(state_ops.assign(c, v) for c, v in zip(copies, values)))
        self._localize(copies, masters)
        return train_op

    def _masters(self, copies) -> list:
        """The PS copy of each local copy, named ``master/<name>``, round-robin or greedy over the PS."""
        graph, loads, masters = get_default_graph(), [0] * self._update.num_ps, []
        greedy = self._update.ps_strategy == "greedy"
        for copy in copies:
            task = loads.index(min(loads)) if greedy else len(masters) % len(loads)
            loads[task] += variable_bytes(copy)
            with graph.name_scope(None), graph.device(None), graph.device(f"/job:ps/task:{task}"):
                masters.append(variables_lib.Variable(copy.initial_value, trainable=False,
                                                      name=f"master/{copy.op.name}"))
        return masters

    def _localize(self, copies, masters) -> None:
        """Make the copies local variables, initialized on every replica from the masters.

        The other variables on this replica's worker (batch norm's moving averages) become
        local too: only this replica can initialize them, where the chief initializes the
        global ones and the others wait for it.
        """
        graph = get_default_graph()
        global_ref = graph.get_collection_ref(GraphKeys.GLOBAL_VARIABLES)
        here = DeviceSpec.from_string(self._update.worker_device)
        for variable in list(global_ref):
            device = DeviceSpec.from_string(variable.device)
            if variable in copies or (device.job, device.task) == (here.job, here.task):
                global_ref.remove(variable)
                graph.add_to_collection(GraphKeys.LOCAL_VARIABLES, variable)
        with graph.name_scope("refresh_from_master"):
            graph.add_to_collection(GraphKeys.LOCAL_INIT_OP, variables_lib.group(
                *(state_ops.assign(c, m.value()) for c, m in zip(copies, masters))))

    def hooks(self) -> list:
        if isinstance(self._master_opt, SyncReplicasOptimizer):
            return [self._master_opt.make_session_run_hook(is_chief=self._update.task_index == 0)]
        return []
