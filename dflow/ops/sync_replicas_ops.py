"""``SyncReplicasOptimizer``'s ops and the state they share on the device that owns it: a
:class:`GradientAccumulator` per variable and a :class:`StepBarrier` per global step (TF's
``ConditionalAccumulator`` and token queue), held in that device's session state.
:mod:`dflow.train.sync_replicas` builds the graph from them.
"""

from __future__ import annotations

import logging
import threading
import time

from ..errors import CancelledError, DeadlineExceededError, UnavailableError
from ..graph import Operation, get_default_graph
from .registry import Spec, defop

__all__ = ["GradientAccumulator", "StepBarrier", "create_sync_op", "LIVENESS_CHECK_S"]

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
defop("AccumulatorApplyGradient", _no_outputs, _apply_kernel, stateful=True, num_outputs=0, gpu=False)
defop("AccumulatorTakeGradient", lambda inputs, shape, dtype, **_: [Spec(shape, dtype)], _take_kernel,
      stateful=True, blocking=True, gpu=False)
defop("SyncReplicasBarrier", lambda inputs, **_: [inputs[0]._replace(value=None)], _barrier_kernel,
      stateful=True, blocking=True, gpu=False)
defop("SyncReplicasRelease", _no_outputs, _release_kernel, stateful=True, num_outputs=0, gpu=False,
      takes_refs=True)
defop("SyncReplicasSetStep", _no_outputs, _set_step_kernel, stateful=True, num_outputs=0, gpu=False)
defop("SyncReplicasCancel", _no_outputs, _cancel_kernel, stateful=True, num_outputs=0, gpu=False)


def create_sync_op(op_type: str, inputs: list, attrs: dict, name: str) -> Operation:
    """An op of this module (the optimizer builds its graph with these)."""
    return get_default_graph().create_op(op_type, inputs, attrs, name=name)
