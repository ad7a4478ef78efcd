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
import time

from ..errors import CancelledError, DeadlineExceededError, UnavailableError
from ..graph import GraphKeys, Operation, Tensor, convert_to_tensor, get_default_graph
from ..ops import array_ops, state_ops
from ..ops.registry import Spec, defop
from ..placement import DeviceSpec
from ..variables import Variable, global_variables, group, report_uninitialized_variables
from .optimizers import Optimizer
from .session_run_hook import SessionRunHook

__all__ = ["SyncReplicasOptimizer", "GradientAccumulator", "StepBarrier", "ChiefQueueRunner"]

log = logging.getLogger("dflow")
LIVENESS_CHECK_S = 2.0  # a wait this long asks whether the missing replicas' tasks are alive


# ---- the shared state (held by the SessionState of the device that owns it) --------------
class _Waitable:
    """A condition to wait on with a deadline, which a cancel wakes."""

    def __init__(self):
        self.changed = threading.Condition()
        self.cancelled = False

    def wait_until(self, ready, timeout: float, describe_missing, check_alive=None) -> None:
        """Wait (holding ``changed``) until ``ready()``; raise when cancelled or past ``timeout``.
        ``check_alive()``, called every LIVENESS_CHECK_S of waiting, raises when who is awaited died."""
        deadline = time.monotonic() + timeout
        next_check = time.monotonic() + LIVENESS_CHECK_S
        while not ready():
            if self.cancelled:
                raise CancelledError("synchronous training was stopped (the chief's queue runner "
                                     "ended, or the session closed)")
            now = time.monotonic()
            if now >= deadline:
                raise DeadlineExceededError(describe_missing())
            if check_alive is not None and now >= next_check:
                check_alive()
                next_check = time.monotonic() + LIVENESS_CHECK_S
            self.changed.wait(min(deadline, next_check) - now)

    def cancel(self) -> None:
        with self.changed:
            self.cancelled = True
            self.changed.notify_all()


class GradientAccumulator(_Waitable):
    """The gradients of one variable for the current global ``step``.

    TF's ``ConditionalAccumulator``, keeping exactly ``num_required`` gradients a
    step: :meth:`apply` takes a replica's gradient when it was computed at the
    current step or later, the replica has not given one this step, and fewer
    than ``num_required`` are in; :meth:`take` waits for ``num_required``,
    returns their mean, and moves to the next step.
    """

    def __init__(self):
        super().__init__()
        self.step = 0
        self.total = None
        self.contributors: list[int] = []

    def apply(self, grad, local_step: int, replica_id: int, num_required: int) -> bool:
        with self.changed:
            fresh = (local_step >= self.step and replica_id not in self.contributors
                     and len(self.contributors) < num_required)
            if fresh:
                self.total = grad if self.total is None else self.total + grad
                self.contributors.append(replica_id)
                self.changed.notify_all()
            return fresh

    def take(self, xp, num_required: int, timeout: float, describe_missing, check_alive=None):
        with self.changed:
            self.wait_until(lambda: len(self.contributors) >= num_required, timeout,
                            lambda: describe_missing(self.step, sorted(self.contributors)),
                            check_alive and (lambda: check_alive(sorted(self.contributors))))
            mean = xp.astype(self.total / len(self.contributors), self.total.dtype, copy=False)
            self._start(self.step + 1)
            return mean

    def set_step(self, step: int) -> None:
        """Start over at ``step`` (the chief's init: after initializing or restoring)."""
        with self.changed:
            self.cancelled = False
            if step != self.step:
                self._start(step)

    def _start(self, step: int) -> None:
        self.step, self.total, self.contributors = step, None, []


class StepBarrier(_Waitable):
    """Where replicas wait for the step they took part in to be applied.

    ``released`` is the global step after the chief's last update; a replica at
    local step ``s`` passes once ``released > s``. ``arrived`` records who came
    to each step still waiting, to name the missing ones on a timeout.
    """

    def __init__(self):
        super().__init__()
        self.released: int | None = None
        self.arrived: dict[int, set[int]] = {}

    def wait(self, local_step: int, replica_id: int, timeout: float, describe_missing,
             check_alive=None) -> int:
        with self.changed:
            self.arrived.setdefault(local_step, set()).add(replica_id)
            self.wait_until(lambda: self.released is not None and self.released > local_step, timeout,
                            lambda: describe_missing(local_step, sorted(self.arrived[local_step])),
                            check_alive and (lambda: check_alive(sorted(self.arrived.get(local_step, ())))))
            return self.released

    def release(self, step: int) -> None:
        with self.changed:
            self.released = step
            self.arrived = {s: ids for s, ids in self.arrived.items() if s >= step}
            self.changed.notify_all()

    def set_step(self, step: int) -> None:
        with self.changed:
            self.cancelled = False
            self.released = step
            self.arrived.clear()


_RESOURCE_KINDS = {"accumulator": GradientAccumulator, "barrier": StepBarrier}


def _resource(state, kind: str, name: str):
    return state.resource(name, _RESOURCE_KINDS[kind])


# ---- the ops -------------------------------------------------------------------------------
def _missing(replicas: int, arrived: list[int]) -> list[int]:
    return [r for r in range(replicas) if r not in arrived]


def _liveness(state, replica_job: str | None, num_required: int, total_num_replicas: int, waiter: str):
    """A ``check_alive(arrived)`` for a wait on a cluster task: it raises UnavailableError when
    replicas that did not arrive are dead and too few are left to make the step; None where no
    peers can be asked (a local session, towers of one graph without tasks)."""
    communicator = getattr(state, "communicator", None)
    if communicator is None or not replica_job:
        return None

    def check_alive(arrived: list[int]) -> None:
        missing = [f"/job:{replica_job}/task:{r}" for r in _missing(total_num_replicas, arrived)]
        dead = [task for task in missing if task in communicator.addresses
                and not communicator.peer_alive(task)]
        if dead and len(arrived) + len(missing) - len(dead) < num_required:
            raise UnavailableError(
                f"{waiter}: {', '.join(dead)} died (no answer at "
                f"{', '.join(communicator.addresses[t] for t in dead)}), so the synchronous step cannot "
                f"get its {num_required} replicas; arrived: replicas {arrived}")

    return check_alive


def _apply_kernel(state, xp, grad, local_step, *, accumulator, replica_id, num_required):
    if not _resource(state, "accumulator", accumulator).apply(grad, int(local_step), replica_id,
                                                              num_required):
        log.debug("%s: dropped the gradient of replica %d computed at step %d (stale, or the step "
                  "had its %d already)", accumulator, replica_id, int(local_step), num_required)
    return ()


def _take_kernel(state, xp, *, accumulator, num_required, total_num_replicas, timeout, shape, dtype,
                 replica_job=None):
    def describe(step, arrived):
        return (f"the chief waited {timeout:g} s for {num_required} fresh gradients of {accumulator} "
                f"at step {step}; it got {len(arrived)}, from replicas {arrived}; replicas (task "
                f"indices) that did not send one: {_missing(total_num_replicas, arrived)}. "
                "A worker may have died or stalled (SyncReplicasOptimizer(timeout=...) sets the wait)")

    check_alive = _liveness(state, replica_job, num_required, total_num_replicas,
                            f"the chief, waiting for gradients of {accumulator}")
    return _resource(state, "accumulator", accumulator).take(xp, num_required, timeout, describe, check_alive)


def _barrier_kernel(state, xp, local_step, *, barrier, replica_id, replicas_to_aggregate,
                    total_num_replicas, timeout, replica_job=None):
    def describe(step, arrived):
        missing = _missing(total_num_replicas, arrived)
        if len(arrived) >= replicas_to_aggregate:
            why = ("enough replicas arrived, but the step was not applied: is the chief's queue runner "
                   "running (make_session_run_hook(is_chief=True) or get_chief_queue_runner())?")
        else:
            why = "a worker may have died or stalled (SyncReplicasOptimizer(timeout=...) sets the wait)"
        return (f"replica {replica_id} waited {timeout:g} s at step {step} for {replicas_to_aggregate} "
                f"replicas of {total_num_replicas}; replicas (task indices) that did not arrive: "
                f"{missing}, arrived: {arrived}; {why}")

    check_alive = _liveness(state, replica_job, replicas_to_aggregate, total_num_replicas,
                            f"replica {replica_id}, waiting at step {int(local_step)}")
    released = _resource(state, "barrier", barrier).wait(int(local_step), replica_id, timeout, describe,
                                                          check_alive)
    return xp.asarray(released, dtype=local_step.dtype)


def _release_kernel(state, xp, global_step_ref, *, barrier):
    _resource(state, "barrier", barrier).release(int(state.read_variable(global_step_ref)))
    return ()


def _set_step_kernel(state, xp, global_step, *, resource, kind):
    _resource(state, kind, resource).set_step(int(global_step))
    return ()


def _cancel_kernel(state, xp, *, resource, kind):
    _resource(state, kind, resource).cancel()
    return ()


_no_outputs = lambda inputs, **_: []  # noqa: E731
defop("AccumulatorApplyGradient", _no_outputs, _apply_kernel, stateful=True, num_outputs=0)
defop("AccumulatorTakeGradient", lambda inputs, shape, dtype, **_: [Spec(shape, dtype)], _take_kernel,
      stateful=True)
defop("SyncReplicasBarrier", lambda inputs, **_: [inputs[0]._replace(value=None)], _barrier_kernel,
      stateful=True)
defop("SyncReplicasRelease", _no_outputs, _release_kernel, stateful=True, num_outputs=0)
defop("SyncReplicasSetStep", _no_outputs, _set_step_kernel, stateful=True, num_outputs=0)
defop("SyncReplicasCancel", _no_outputs, _cancel_kernel, stateful=True, num_outputs=0)


def _create_op(op_type, inputs, attrs, name) -> Operation:
    return get_default_graph().create_op(op_type, inputs, attrs, name=name)


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
                sync_op = _create_op("SyncReplicasRelease", [global_step._variable],
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
            return _create_op("AccumulatorTakeGradient", [], attrs, "take_grad").outputs[0]

    def _on_resource(self, op_type, resource, global_step=None) -> Operation:
        name, kind, owner = resource
        inputs = [] if global_step is None else [global_step]
        with get_default_graph().colocate_with(owner):
            return _create_op(op_type, inputs, {"resource": name, "kind": kind}, op_type)

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
                    offers.append(_create_op("AccumulatorApplyGradient", [grad, local_step], attrs,
                                             "apply_grad"))
            attrs = {"barrier": self._barrier, "replica_id": replica_id,
                     "replicas_to_aggregate": self._replicas_to_aggregate,
                     "total_num_replicas": self._total_num_replicas, "timeout": self._timeout,
                     "replica_job": self._replica_job}
            with graph.colocate_with(global_step), graph.control_dependencies(offers):
                released = _create_op("SyncReplicasBarrier", [local_step], attrs, "barrier").outputs[0]
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
