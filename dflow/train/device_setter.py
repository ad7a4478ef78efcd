"""``replica_device_setter``: variables on parameter-server tasks, the rest on the worker.

A device function (see :func:`dflow.device`) that TF 1.x scripts put around the
whole model. It sends the ops of ``ps_ops`` (the variables) to ``ps_device``,
choosing the task with ``ps_strategy`` (round-robin unless told otherwise), and
every other op to ``worker_device``. The ops that read, assign or update a
variable follow it there, because they are created colocated with it.

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     with tf.device(tf.train.replica_device_setter(ps_tasks=2)):
...         w = tf.Variable(1.0, name="w")
...         b = tf.Variable(0.0, name="b")
...         y = w * 2.0 + b
>>> w.device, b.device, y.op.device
('/job:ps/task:0', '/job:ps/task:1', '/job:worker')
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from ..graph import Operation
from ..placement import DeviceSpec

__all__ = ["replica_device_setter", "GreedyLoadBalancingStrategy", "byte_size_load_fn",
           "STANDARD_PS_OPS"]

log = logging.getLogger("dflow")

# TF 1.x's list: op types that hold state a parameter server should own. dflow
# registers VariableV2 only; the others keep TF graphs imported as data placing alike.
STANDARD_PS_OPS = ("Variable", "VariableV2", "AutoReloadVariable", "MutableHashTable",
                   "MutableHashTableV2", "MutableHashTableOfTensors", "MutableHashTableOfTensorsV2",
                   "MutableDenseHashTable", "MutableDenseHashTableV2", "VarHandleOp",
                   "BoostedTreesEnsembleResourceHandleOp")


class _RoundRobinStrategy:
    """Tasks 0, 1, ..., num_tasks - 1, 0, ... in the order the variables are created."""

    def __init__(self, num_tasks: int):
        self._num_tasks = num_tasks
        self._next_task = 0

    def __call__(self, unused_op: Operation) -> int:
        task = self._next_task
        self._next_task = (self._next_task + 1) % self._num_tasks
        return task


class GreedyLoadBalancingStrategy:
    """Put each variable on the PS task with the least load so far (online bin packing).

    Parameters
    ----------
    num_tasks : int
        Number of PS tasks.
    load_fn : callable
        ``load_fn(op) -> number``: the load a variable op adds to its task,
        e.g. :func:`byte_size_load_fn`.

    Example
    -------
    >>> import dflow as tf
    >>> greedy = tf.train.GreedyLoadBalancingStrategy(3, tf.train.byte_size_load_fn)
    >>> with tf.device(tf.train.replica_device_setter(ps_tasks=3, ps_strategy=greedy)):
    ...     weights_1 = tf.get_variable("weights_1", [784, 100])
    >>> weights_1.device
    '/job:ps/task:0'
    """

    def __init__(self, num_tasks: int, load_fn: Callable[[Operation], float]):
        if num_tasks < 1:
            raise ValueError(f"GreedyLoadBalancingStrategy needs num_tasks >= 1, got {num_tasks}")
        self._num_tasks = num_tasks
        self._load_fn = load_fn
        self._ps_loads = [0.0] * num_tasks

    def __call__(self, op: Operation) -> int:
        # the first task of least load, as numpy.argmin picks in TF
        task = min(range(self._num_tasks), key=self._ps_loads.__getitem__)
        self._ps_loads[task] += self._load_fn(op)
        return task


def byte_size_load_fn(op: Operation) -> int:
    """The bytes of ``op``'s single output: elements x dtype size (for variable ops).

    >>> import dflow as tf
    >>> with tf.Graph().as_default():
    ...     tf.train.byte_size_load_fn(tf.get_variable("w", [784, 100]).op)
    313600
    """
    if len(op.outputs) != 1:
        raise ValueError(f"byte_size_load_fn needs an op with a single output; {op.name} has "
                         f"{len(op.outputs)}")
    output = op.outputs[0]
    if not output.shape.is_fully_defined():
        raise ValueError(f"byte_size_load_fn needs a fully defined shape; {op.name} has shape "
                         f"{output.shape}: give the variable a known shape")
    return output.shape.num_elements() * output.dtype.size


class _ReplicaDeviceChooser:
    """TF's ``_ReplicaDeviceChooser``: the device function itself."""

    def __init__(self, ps_tasks, ps_device, worker_device, merge_devices, ps_ops, ps_strategy):
        self._ps_tasks = ps_tasks
        self._ps_device = ps_device
        self._worker_device = worker_device
        self._merge_devices = merge_devices
        self._ps_ops = ps_ops
        self._ps_strategy = ps_strategy

    def device_function(self, op: Operation) -> str:
        if not self._merge_devices and op.device:
            return op.device
        # with merge_devices, whatever the op already has (from inner scopes) wins field by field
        current = DeviceSpec.from_string(op.device)
        if self._ps_tasks and self._ps_device and op.type in self._ps_ops:
            ps = DeviceSpec.from_string(self._ps_device)
            # choose a task only when the op's own job, if any, is the PS job
            if ps.job and (not current.job or current.job == ps.job):
                ps = ps.make_merged_spec(DeviceSpec(task=int(self._ps_strategy(op))))
            return ps.make_merged_spec(current).to_string()
        worker = DeviceSpec.from_string(self._worker_device)
        return worker.make_merged_spec(current).to_string()


def replica_device_setter(ps_tasks: int = 0, ps_device: str | None = "/job:ps",
                          worker_device: str | None = "/job:worker", merge_devices: bool = True,
                          cluster=None, ps_ops=None, ps_strategy=None) -> Callable | None:
    """A device function placing variables on PS tasks and other ops on the worker.

    Parameters
    ----------
    ps_tasks : int
        Number of PS tasks; ignored when ``cluster`` is given.
    ps_device, worker_device : str
        Where PS ops and the other ops go; the PS task index is filled in.
    merge_devices : bool
        Fill only the device fields an op left open (TF's default and advice);
        False keeps any op that has a device as it is.
    cluster : dict or ClusterSpec, optional
        ``{"ps": [...], "worker": [...]}`` or an object with ``as_dict()``:
        the number of tasks of ``ps_device``'s job gives ``ps_tasks``.
    ps_ops : list of str, optional
        Op types that go to the PS (default :data:`STANDARD_PS_OPS`).
    ps_strategy : callable, optional
        ``ps_strategy(op) -> task index``; round-robin by default, or a
        :class:`GreedyLoadBalancingStrategy`.

    Returns
    -------
    callable or None
        The device function to pass to ``tf.device``; None when there is no
        PS task (no ``ps_tasks`` and no PS job in ``cluster``), as in TF.

    Example
    -------
    >>> import dflow as tf
    >>> with tf.Graph().as_default(), tf.device(tf.train.replica_device_setter(ps_tasks=3)):
    ...     weights_1 = tf.get_variable("weights_1", [784, 100])
    ...     biases_1 = tf.get_variable("biases_1", [100])
    >>> weights_1.device, biases_1.device
    ('/job:ps/task:0', '/job:ps/task:1')
    """
    if cluster is not None:
        spec = _cluster_dict(cluster)
        ps_job = DeviceSpec.from_string(ps_device).job
        if spec.get(ps_job) is None:
            return None
        ps_tasks = len(spec[ps_job])
    if ps_tasks == 0:
        return None
    if ps_ops is None:
        ps_ops = list(STANDARD_PS_OPS)
    if not merge_devices:
        log.warning("DEPRECATION: It is recommended to set merge_devices=true in replica_device_setter")
    if ps_strategy is None:
        ps_strategy = _RoundRobinStrategy(ps_tasks)
    if not callable(ps_strategy):
        raise TypeError(f"ps_strategy must be callable (op -> task index), got {ps_strategy!r}")
    chooser = _ReplicaDeviceChooser(ps_tasks, ps_device, worker_device, merge_devices, ps_ops,
                                    ps_strategy)
    return chooser.device_function


def _cluster_dict(cluster) -> Mapping:
    if hasattr(cluster, "as_dict"):
        return cluster.as_dict()
    if isinstance(cluster, Mapping):
        return cluster
    raise TypeError(f"cluster must be a dict of job name -> tasks or a ClusterSpec, got {cluster!r}")
