"""What a session keeps between runs: variable values, random streams, shared resources.

A plain class, so the local session holds it in-process and a parameter-server
worker can hold one remotely (STYLE: remote state is an ordinary class).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

import numpy

from ..errors import FailedPreconditionError, InvalidArgumentError

__all__ = ["SessionState"]


class SessionState:
    """Variable values by shared name, per-seed random generators, and named resources
    (the gradient accumulators and the step barrier of ``SyncReplicasOptimizer``).

    >>> state = SessionState()
    >>> state.write_variable("w", 3.0); state.read_variable("w")
    3.0
    """

    def __init__(self, seed: int | None = None):
        self.variables: dict[str, object] = {}
        # variable -> (shape, dtype name) as the graph that first used it here declared it
        self.declarations: dict[str, tuple] = {}
        self._generators: dict[object, numpy.random.Generator] = {}
        self._default_generator = numpy.random.default_rng(seed)
        self.resources: dict[str, object] = {}
        self._resources_lock = threading.Lock()  # replicas' steps may create one concurrently
        self._update_locks: dict[str, threading.Lock] = {}
        # how long a blocking op (a queue's enqueue or dequeue) may wait: the session's
        # ConfigProto.operation_timeout_in_ms, ten minutes when unset
        self.operation_timeout_s = 600.0
        # whether another process still reads a variable's array where it is (a parameter server
        # lends its variables to workers on its host: dflow.distributed.shared_memory.lent_in_place)
        self.lent_elsewhere: Callable[[object], bool] | None = None

    def read_variable(self, name: str):
        try:
            return self.variables[name]
        except KeyError:
            raise FailedPreconditionError(
                f"Attempting to use uninitialized value {name}: run "
                "tf.global_variables_initializer() (or restore a checkpoint) first"
            ) from None

    def declare_variable(self, name: str, shape, dtype: str) -> None:
        """Check that a graph declares variable ``name`` as the first graph that used it here
        did (the same shape, None dimensions aside, and dtype); remember the first declaration.
        On a parameter server every client shares variables by name: without this check, a
        client declaring ``w`` of another shape would read and update another model's ``w``."""
        declared = (None if shape is None else tuple(shape), dtype)
        known = self.declarations.get(name)
        if known == declared:
            return
        if known is None:
            with self._resources_lock:
                known = self.declarations.setdefault(name, declared)
            if name in self.variables and known is declared:  # a value written before any declaration
                value = self.variables[name]
                known = (tuple(getattr(value, "shape", ())), str(getattr(value, "dtype", dtype)))
        if not _shapes_agree(known[0], declared[0]) or known[1] != declared[1]:
            raise InvalidArgumentError(
                f"variable {name} is declared here with shape {_shape_text(declared[0])} and dtype "
                f"{declared[1]}, but the variable {name} that this task already holds has shape "
                f"{_shape_text(known[0])} and dtype {known[1]} (another graph, or another client of the "
                "cluster, created it): give one of them another name, or forget the old one with "
                "tf.Session.reset(target)", op=name)

    def write_variable(self, name: str, value) -> None:
        self.variables[name] = value

    def held_only_here(self, *names: str) -> bool:
        """Whether each variable's value is referred to by nothing but this state: no read of it
        waits for its consumers, no caller kept a fetched value, no transfer or view of it is
        under way. An update (holding :meth:`updating`) may then write the array in place, as TF
        1.x's kernels write theirs: a read that starts while it writes may see part of it. Nor
        may another process read it (:attr:`lent_elsewhere`)."""
        for name in names:  # (a loop: a generator's set-up cost more than a small update's check)
            if sys.getrefcount(self.variables.get(name)) > _REFERENCES_WHEN_STORED_ONLY:
                return False
        if self.lent_elsewhere is not None:
            for name in names:
                if self.lent_elsewhere(self.variables.get(name)):
                    return False
        return True

    def updating(self, name: str) -> threading.Lock:
        """The lock an update of variable ``name`` holds while it reads and writes it (and its
        slots). Between-graph replicas apply updates concurrently: unlocked, Adam could read
        one replica's new ``m`` beside the old ``v`` and take a step thousands of times too
        large (seen: the loss jumped from 2 to 30)."""
        lock = self._update_locks.get(name)
        if lock is None:
            with self._resources_lock:
                lock = self._update_locks.setdefault(name, threading.Lock())
        return lock

    def is_initialized(self, name: str) -> bool:
        return name in self.variables

    def random_generator(self, seed) -> numpy.random.Generator:
        """The stream for an op seed: reproducible when seeded, shared entropy when not."""
        if seed is None:
            return self._default_generator
        key = tuple(seed) if isinstance(seed, list) else seed
        with self._resources_lock:  # queue runners' threads run random ops beside the training step
            if key not in self._generators:
                self._generators[key] = numpy.random.default_rng(key)
            return self._generators[key]

    def resource(self, name: str, create: Callable[[], object]):
        """The resource ``name``, made by ``create()`` on first use: every op (of any graph)
        naming it shares one object, as TF ops share a resource by ``shared_name``."""
        with self._resources_lock:
            if name not in self.resources:
                self.resources[name] = create()
            return self.resources[name]

    def cancel_waits(self) -> None:
        """End every wait in the resources (a queue's blocked dequeue or enqueue, in a training loop
        or a queue runner's thread): they raise CancelledError instead of hanging."""
        for resource in list(self.resources.values()):
            cancel = getattr(resource, "cancel", None)
            if cancel is not None:
                cancel()


def _shapes_agree(a, b) -> bool:
    """Same rank and the same size in every dimension both know (None: unknown)."""
    if a is None or b is None:
        return True
    return len(a) == len(b) and all(x is None or y is None or int(x) == int(y) for x, y in zip(a, b))


def _shape_text(shape) -> str:
    return "unknown" if shape is None else "(" + ", ".join("?" if d is None else str(d) for d in shape) + ")"


def _references_of_a_stored_value() -> int:
    """What ``sys.getrefcount`` says in :meth:`SessionState.held_only_here` of a value that a
    dict alone holds (interpreters count differently)."""
    variables = {"w": numpy.empty(1)}
    return sys.getrefcount(variables.get("w"))


_REFERENCES_WHEN_STORED_ONLY = _references_of_a_stored_value()
