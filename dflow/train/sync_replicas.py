"""``SyncReplicasOptimizer``: synchronous data-parallel training, as in TF 1.x.

Every replica (a worker task, or a tower of an in-graph model) computes its
gradients and runs its train op, which

1. offers each gradient to the accumulator of its variable, on the variable's
   device. The accumulator of step ``s`` keeps the first
   ``replicas_to_aggregate`` gradients computed at step ``s`` (one per
   replica); a gradient computed at an older step is stale and dropped, as are
   the late ones of backup workers (``total_num_replicas > replicas_to_aggregate``);
2. waits at the step barrier (on the global step's device) until step ``s`` has
   been applied, and sets its local step to the new global step. A replica
   whose gradients were dropped because the step moved on does not wait.

The chief runs the sync op in a loop on a thread (:meth:`~SyncReplicasOptimizer.get_chief_queue_runner`,
or the hook of :meth:`~SyncReplicasOptimizer.make_session_run_hook`): take the
average of each accumulator (waiting until it is full), apply it with the
wrapped optimizer, increment the global step, release the barrier. So the
global step advances once per aggregated step and the replicas move in lock step.

A replica or the chief that waits longer than ``timeout`` seconds gets a
:class:`~dflow.errors.DeadlineExceededError` naming the replicas (task indices)
that did not arrive. Long before that, every ``LIVENESS_CHECK_S`` of waiting on a
cluster, the wait asks the missing replicas' tasks whether they are alive: a dead
worker fails the others' step within seconds with :class:`~dflow.errors.UnavailableError`
naming its task, instead of hanging them until the timeout.

Unlike TF, the barrier releases by global step, not with a queue of tokens: no
replica runs ahead of the step it contributed to, and ``num_tokens`` only
keeps TF's argument checks.

>>> opt = tf.train.SyncReplicasOptimizer(tf.train.GradientDescentOptimizer(0.1),  # doctest: +SKIP
...                                      replicas_to_aggregate=2, total_num_replicas=3)
>>> train_op = opt.minimize(loss, global_step=step)  # doctest: +SKIP
>>> hook = opt.make_session_run_hook(is_chief=(task_index == 0))  # doctest: +SKIP
>>> with tf.train.MonitoredTrainingSession(target, is_chief=..., hooks=[hook]) as sess:  # doctest: +SKIP
...     while not sess.should_stop():
...         sess.run(train_op)
"""

from __future__ import annotations

import logging
import threading

from ..errors import CancelledError
from ..graph import GraphKeys, Operation, Tensor, convert_to_tensor, get_default_graph
from ..ops import array_ops, state_ops
from ..ops.sync_replicas_ops import GradientAccumulator, StepBarrier, create_sync_op
from ..placement import DeviceSpec
from ..variables import Variable, global_variables, group, report_uninitialized_variables
from .optimizers import Optimizer
from .session_run_hook import SessionRunHook

__all__ = ["SyncReplicasOptimizer", "GradientAccumulator", "StepBarrier", "ChiefQueueRunner"]

log = logging.getLogger("dflow")


# ---- the optimizer ---------------------------------------------------------------------------
class SyncReplicasOptimizer(Optimizer):
    """Average the gradients of ``replicas_to_aggregate`` replicas, apply them once, go on together.

    Parameters
    ----------
    opt : Optimizer
        Applies the averaged gradients (its slots live with the variables).
    replicas_to_aggregate : int
        Fresh gradients averaged per variable and step.
    total_num_replicas : int, optional
        Replicas running (default ``replicas_to_aggregate``); the extra ones are
        backup workers whose late gradients are dropped.
    variable_averages : ExponentialMovingAverage-like, optional
        With ``variables_to_average``: ``variable_averages.apply(variables_to_average)``
        runs after each applied step, as in TF.
    timeout : float
        Seconds a replica waits at the barrier, and the chief for gradients,
        before :class:`~dflow.errors.DeadlineExceededError` (dflow's addition).

    Each replica's task index (which replica it is, ``0 .. total_num_replicas - 1``)
    comes from ``apply_gradients(..., replica_id=)``, else from the task of the
    device its ops are placed on (``replica_device_setter(worker_device='/job:worker/task:I')``).
    ``apply_gradients`` may be called once per replica tower of one graph.

    Example
    -------
    >>> opt = tf.train.SyncReplicasOptimizer(tf.train.GradientDescentOptimizer(0.1), 2)  # doctest: +SKIP
    >>> train_op = opt.minimize(loss, global_step=tf.train.get_or_create_global_step())  # doctest: +SKIP
    """

    def __init__(self, opt: Optimizer, replicas_to_aggregate: int, total_num_replicas: int | None = None,
                 variable_averages=None, variables_to_average=None, use_locking: bool = False,
                 name: str = "sync_replicas", timeout: float = 300.0):
        if total_num_replicas is None:
            total_num_replicas = replicas_to_aggregate
        if not 1 <= replicas_to_aggregate <= total_num_replicas:
            raise ValueError(f"SyncReplicasOptimizer needs 1 <= replicas_to_aggregate <= total_num_replicas, "
                             f"got {replicas_to_aggregate} and {total_num_replicas}")
        if timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout}")
        super().__init__(use_locking, name)
        log.info("SyncReplicas enabled: replicas_to_aggregate=%s; total_num_replicas=%s",
                 replicas_to_aggregate, total_num_replicas)
        self._opt = opt
        self._replicas_to_aggregate = replicas_to_aggregate
        self._total_num_replicas = total_num_replicas
        self._variable_averages = variable_averages
        self._variables_to_average = variables_to_average
        self._timeout = float(timeout)
        self._graph = None  # the graph the first apply_gradients built into
        self._replica_ids: list[int] = []
        self._replica_job: str | None = None
        self._local_step_inits: list[Operation] = []
        self._chief_queue_runner: ChiefQueueRunner | None = None

    def compute_gradients(self, *args, **kwargs):
        """The wrapped optimizer's ``compute_gradients``."""
        return self._opt.compute_gradients(*args, **kwargs)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None, replica_id: int | None = None):
        """This replica's train op: offer the gradients, wait for the step to be applied.

        The first call also builds the chief's sync op, ``chief_init_op``,
        ``local_step_init_op`` and ``ready_for_local_init_op``.
        """
        if global_step is None:
            raise ValueError("Global step is required to check staleness: pass global_step= "
                             "(tf.train.get_or_create_global_step())")
        grads_and_vars = [(None if g is None else convert_to_tensor(g), v) for g, v in grads_and_vars]
        if not grads_and_vars:
            raise ValueError("Must supply at least one variable")
        for grad, var in grads_and_vars:
            if grad is not None and not grad.shape.is_compatible_with(var.shape):
                raise ValueError(f"gradient of shape {grad.shape} does not fit variable {var.name} "
                                 f"of shape {var.shape}")
        graph = global_step.graph
        if self._graph not in (None, graph):
            raise ValueError("this SyncReplicasOptimizer built its ops in another graph: "
                             "make one optimizer per graph")
        with graph.as_default():
            local_anchor = array_ops.no_op(name="sync_rep_local_anchor")  # placed as this replica's ops
            replica_id = self._replica_id(local_anchor, replica_id)
            updated = [v for g, v in grads_and_vars if g is not None]
            if self._graph is None:
                self._graph, self._updated = graph, updated
                self._build_chief(grads_and_vars, global_step)
            elif updated != self._updated:
                raise ValueError(f"replica {replica_id} has gradients for {[v.name for v in updated]}, the "
                                 f"first replica for {[v.name for v in self._updated]}: every replica must "
                                 "update the same variables")
            return self._build_replica(grads_and_vars, global_step, name or self._name, local_anchor,
                                       replica_id)

    # ---- what apply_gradients builds ---------------------------------------------------
    def _accumulator(self, var: Variable) -> str:
        return f"{var.shared_name}/grad_accum"

    def _build_chief(self, grads_and_vars, global_step) -> None:
        """Take the averages, apply them with ``opt``, release the barrier; the init and cancel ops."""
        graph = get_default_graph()
        self._barrier = f"{self._name}/step_barrier"
        self._resources = [(self._accumulator(v), "accumulator", v)
                           for g, v in grads_and_vars if g is not None]
        self._resources.append((self._barrier, "barrier", global_step))
        with graph.name_scope(self._name):
            aggregated = [(None if grad is None else self._take(grad, var), var)
                          for grad, var in grads_and_vars]
            with graph.name_scope(None), graph.colocate_with(global_step):
                update_op = self._opt.apply_gradients(aggregated, global_step)
            with graph.colocate_with(global_step), graph.control_dependencies([update_op]):
                sync_op = create_sync_op("SyncReplicasRelease", [global_step._variable],
                                     {"barrier": self._barrier}, "release")
            if self._variable_averages is not None:
                with graph.control_dependencies([sync_op]):
                    sync_op = self._variable_averages.apply(self._variables_to_average)
            self._set_steps = [self._on_resource("SyncReplicasSetStep", r, global_step)
                               for r in self._resources]
            self._cancel_op = group(*[self._on_resource("SyncReplicasCancel", r) for r in self._resources],
                                    name="cancel")
        self._sync_op = sync_op
        self.ready_for_local_init_op = report_uninitialized_variables(global_variables())

    def _take(self, grad: Tensor, var: Variable) -> Tensor:
        attrs = {"accumulator": self._accumulator(var), "num_required": self._replicas_to_aggregate,
                 "total_num_replicas": self._total_num_replicas, "timeout": self._timeout,
                 "shape": var.shape.dims, "dtype": grad.dtype, "replica_job": self._replica_job}
        with get_default_graph().colocate_with(var):
            return create_sync_op("AccumulatorTakeGradient", [], attrs, "take_grad").outputs[0]

    def _on_resource(self, op_type, resource, global_step=None) -> Operation:
        name, kind, owner = resource
        inputs = [] if global_step is None else [global_step]
        with get_default_graph().colocate_with(owner):
            return create_sync_op(op_type, inputs, {"resource": name, "kind": kind}, op_type)

    def _build_replica(self, grads_and_vars, global_step, name, local_anchor, replica_id) -> Operation:
        graph = get_default_graph()
        # named by replica: replicas whose ops share one state (towers of one graph, between-graph
        # replicas on one task) each keep their own
        with graph.name_scope(None), graph.colocate_with(local_anchor):
            local_step = Variable(lambda: array_ops.zeros([], global_step.dtype), trainable=False,
                                  collections=[GraphKeys.LOCAL_VARIABLES], dtype=global_step.dtype,
                                  name=f"sync_rep_local_step_{replica_id}")
            self._local_step_inits.append(state_ops.assign(local_step, global_step).op)
        self.local_step_init_op = group(*self._local_step_inits, name="sync_rep_local_step_init")
        self.chief_init_op = group(self.local_step_init_op, *self._set_steps, name="sync_replicas_chief_init")
        with graph.name_scope(name):
            offers = []
            for grad, var in grads_and_vars:
                if grad is None:
                    continue
                attrs = {"accumulator": self._accumulator(var), "replica_id": replica_id,
                         "num_required": self._replicas_to_aggregate}
                with graph.colocate_with(var):
                    offers.append(create_sync_op("AccumulatorApplyGradient", [grad, local_step], attrs,
                                             "apply_grad"))
            attrs = {"barrier": self._barrier, "replica_id": replica_id,
                     "replicas_to_aggregate": self._replicas_to_aggregate,
                     "total_num_replicas": self._total_num_replicas, "timeout": self._timeout,
                     "replica_job": self._replica_job}
            with graph.colocate_with(global_step), graph.control_dependencies(offers):
                released = create_sync_op("SyncReplicasBarrier", [local_step], attrs, "barrier").outputs[0]
            with graph.colocate_with(local_step):
                return state_ops.assign(local_step, released).op

    def _replica_id(self, local_anchor: Operation, replica_id: int | None) -> int:
        device = DeviceSpec.from_string(local_anchor.device)
        # replicas are the tasks of this job when their ids are task indices: liveness asks those
        self._replica_job = device.job if replica_id is None and device.task is not None else None
        if replica_id is None:
            replica_id = device.task
        if replica_id is None:
            if self._total_num_replicas > 1:
                raise ValueError(
                    "SyncReplicasOptimizer cannot tell which replica this is: build the model under "
                    "tf.device(tf.train.replica_device_setter(worker_device='/job:worker/task:I', ...)) "
                    "or pass apply_gradients(..., replica_id=I)")
            replica_id = 0
        if not 0 <= replica_id < self._total_num_replicas:
            last = self._total_num_replicas - 1
            raise ValueError(f"replica {replica_id} is out of range: total_num_replicas is "
                             f"{self._total_num_replicas}, so task indices are 0..{last}")
        if replica_id in self._replica_ids:
            raise ValueError(f"apply_gradients was already called for replica {replica_id} in this graph")
        self._replica_ids.append(replica_id)
        return replica_id

    # ---- what the chief and the workers run ------------------------------------------------
    def _check_applied(self, what: str) -> None:
        if self._graph is None:
            raise ValueError(f"{what} should be called after apply_gradients() (or minimize())")

    def get_chief_queue_runner(self) -> ChiefQueueRunner:
        """What the chief runs on a thread: take, apply, release, in a loop."""
        self._check_applied("get_chief_queue_runner")
        if self._chief_queue_runner is None:
            self._chief_queue_runner = ChiefQueueRunner(self._sync_op, self._cancel_op)
        return self._chief_queue_runner

    def get_init_tokens_op(self, num_tokens: int = -1) -> Operation:
        """TF's token priming, with TF's checks; a no-op here (the barrier releases by step)."""
        self._check_applied("get_init_tokens_op")
        self._check_tokens(num_tokens)
        with self._graph.as_default():
            return array_ops.no_op(name="no_init_tokens")

    def _check_tokens(self, num_tokens: int) -> None:
        tokens_needed = self._total_num_replicas - self._replicas_to_aggregate
        if num_tokens != -1 and num_tokens < tokens_needed:
            raise ValueError(f"Too few tokens to finish the first step: {num_tokens} (given) vs "
                             f"{tokens_needed} (needed)")

    def make_session_run_hook(self, is_chief: bool, num_tokens: int = -1) -> SessionRunHook:
        """A hook for ``MonitoredTrainingSession``: initializes the local steps (and, on the chief,
        the accumulators and the barrier) and runs the chief's queue runner."""
        return _SyncReplicasOptimizerHook(self, is_chief, num_tokens)

    def get_slot(self, *args, **kwargs):
        return self._opt.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._opt.get_slot_names(*args, **kwargs)

    def variables(self):
        return self._opt.variables()


class ChiefQueueRunner:
    """Runs the chief's sync op in a loop on a thread until :meth:`stop`.

    An error (a replica that never sent its gradients) ends the loop; it is
    logged and kept in ``exceptions_raised``.
    """

    def __init__(self, sync_op: Operation | Tensor, cancel_op: Operation):
        self._sync_op, self._cancel_op = sync_op, cancel_op
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.exceptions_raised: list[BaseException] = []

    def create_threads(self, sess, daemon: bool = False, start: bool = False) -> list[threading.Thread]:
        self._stop.clear()
        thread = threading.Thread(target=self._run, args=(sess,), daemon=daemon,
                                  name="dflow-sync-replicas-chief")
        self._threads.append(thread)
        if start:
            thread.start()
        return [thread]

    def _run(self, sess) -> None:
        try:
            while not self._stop.is_set():
                sess.run(self._sync_op)
        except CancelledError:
            pass  # stop() woke the wait for gradients
        except Exception as error:  # noqa: BLE001 - a thread's error is kept and logged, not lost
            if not self._stop.is_set():
                log.error("the chief's sync replicas loop stopped: %s", error)
                self.exceptions_raised.append(error)

    def stop(self, sess, timeout: float | None = None) -> None:
        """End the loop: cancel the waits (replicas still waiting get ``CancelledError``), join."""
        self._stop.set()
        sess.run(self._cancel_op)
        for thread in self._threads:
            thread.join(timeout)
        self._threads = [t for t in self._threads if t.is_alive()]


class _SyncReplicasOptimizerHook(SessionRunHook):
    """TF's ``_SyncReplicasOptimizerHook``: init ops after the session, the chief's loop until the end."""

    def __init__(self, opt: SyncReplicasOptimizer, is_chief: bool, num_tokens: int):
        self._opt, self._is_chief, self._num_tokens = opt, is_chief, num_tokens

    def begin(self) -> None:
        opt = self._opt
        opt._check_applied("make_session_run_hook")
        if self._is_chief:
            self._init_op = opt.chief_init_op
            self._runner = opt.get_chief_queue_runner()
            opt._check_tokens(self._num_tokens)
        else:
            self._init_op = opt.local_step_init_op

    def after_create_session(self, session, coord) -> None:
        session.run(self._init_op)
        if self._is_chief:
            self._runner.create_threads(session, daemon=True, start=True)

    def end(self, session) -> None:
        if self._is_chief:
            self._runner.stop(session)
