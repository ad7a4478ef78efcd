"""Queues (TF 1.x's ``tf.FIFOQueue``, ``tf.RandomShuffleQueue``) and the ops that fill and drain them.

A queue is a resource of the running session
(:meth:`~dflow.runtime.state.SessionState.resource`), found by its op's shared
name, so every ``Session.run`` of one session sees the same queue. Queue
runners (:mod:`dflow.train.queue_runner`) call ``sess.run(enqueue_op)`` from
their own threads while the training step's dequeue blocks; the session's
runs share nothing but the state, so they may run concurrently.

A blocked dequeue always ends: when the elements arrive; when the queue is
closed (what cannot be served any more raises ``tf.errors.OutOfRangeError``);
when the session closes (``CancelledError``); or at the deadline,
``ConfigProto(operation_timeout_in_ms)`` (ten minutes by default:
``DeadlineExceededError``). A dequeue from a queue that nothing has ever filled
logs a warning after 10 s naming ``tf.train.start_queue_runners``, the usual
cause. An enqueue waiting for room has no deadline (a filename queue stays full
while a whole file is read): ``close(cancel_pending_enqueues=True)``, which
``Coordinator.request_stop`` runs, or the session's close ends it.

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     q = tf.FIFOQueue(capacity=4, dtypes=[tf.int32], shapes=[[]])
...     fill = q.enqueue_many([[1, 2, 3]])
...     with tf.Session() as sess:
...         _ = sess.run(fill)
...         sess.run(q.dequeue_many(2)).tolist(), int(sess.run(q.size()))
([1, 2], 1)
"""

from __future__ import annotations

import collections
import logging
import threading
import time

from .. import dtypes as dtypes_module
from ..errors import CancelledError, DeadlineExceededError, OutOfRangeError
from ..graph import Tensor, TensorShape, convert_to_tensor, get_default_graph, name_scope
from .registry import ShapeError, Spec, defop
from .shape_rules import fmt

__all__ = ["QueueBase", "FIFOQueue", "RandomShuffleQueue", "ExampleQueue"]

log = logging.getLogger("dflow")

NOTHING_ENQUEUED_WARNING_S = 10.0


class ExampleQueue:
    """A queue's state in a session: elements (tuples of arrays, one per component) under a
    lock, with one condition for consumers (elements arrived) and one for producers (room
    left), so an append wakes only dequeues and a take only enqueues. ``shuffle_rng`` set: a
    dequeue takes random elements, and (while open) leaves at least ``min_after_dequeue``
    behind for mixing."""

    def __init__(self, name: str, capacity: int, min_after_dequeue: int = 0, shuffle_rng=None,
                 timeout_s: float = 600.0):
        self.name, self.capacity, self.min_after_dequeue = name, capacity, min_after_dequeue
        self.timeout_s = timeout_s
        self._rng = shuffle_rng
        self._elements: collections.deque | list = [] if shuffle_rng is not None else collections.deque()
        self._lock = threading.Lock()
        self._arrived, self._left = threading.Condition(self._lock), threading.Condition(self._lock)
        self.closed = False
        self._cancel_enqueues = False
        self._session_closed = False
        self.enqueued_total = 0

    def size(self) -> int:
        with self._lock:
            return len(self._elements)

    def enqueue_many(self, rows) -> None:
        """Append ``rows`` one by one, each waiting for room (TF's enqueue_many does the same)."""
        with self._lock:
            if self.closed:
                raise CancelledError(f"Queue '{self.name}' is closed: nothing more can be enqueued")
            for row in rows:
                self._wait_for_room()
                self._elements.append(row)
                self.enqueued_total += 1
                self._arrived.notify_all()

    def dequeue_many(self, n: int, allow_smaller: bool = False) -> list:
        """Take ``n`` elements; once closed, what is left (``allow_smaller``) or OutOfRangeError."""
        with self._lock:
            self._wait_for_elements(n)
            if len(self._elements) < n:  # closed: no more will come
                if not (allow_smaller and self._elements):
                    raise OutOfRangeError(
                        f"Queue '{self.name}' is closed and has insufficient elements "
                        f"(requested {n}, current size {len(self._elements)})")
                n = len(self._elements)
            rows = [self._take() for _ in range(n)]
            self._left.notify_all()
            return rows

    def _take(self):
        if self._rng is None:
            return self._elements.popleft()
        index = int(self._rng.integers(len(self._elements)))
        self._elements[index], self._elements[-1] = self._elements[-1], self._elements[index]
        return self._elements.pop()

    def _wait_for_room(self) -> None:
        """Wait (holding the lock) for room. No deadline: a producer ahead of its consumer
        waits as long as training takes (a filename queue stays full for a whole file); a
        close with cancel_pending_enqueues, or the session's close, ends the wait."""
        while len(self._elements) >= self.capacity:
            self._raise_if_cancelled("enqueue into")
            if self._cancel_enqueues:
                raise CancelledError(f"Enqueue operation was cancelled: queue '{self.name}' was closed")
            self._left.wait(1.0)  # in slices, so a Ctrl-C reaches a main thread waiting here
        self._raise_if_cancelled("enqueue into")

    def _wait_for_elements(self, wanted: int) -> None:
        """Wait (holding the lock) until ``wanted`` elements can leave or the queue is closed;
        past the deadline, say which queue and the usual cause."""
        start, warned = time.monotonic(), False
        while len(self._elements) < wanted + self.min_after_dequeue and not self.closed:
            self._raise_if_cancelled("dequeue from")
            waited = time.monotonic() - start
            if waited >= self.timeout_s:
                raise DeadlineExceededError(
                    f"waited {self.timeout_s:g} s to dequeue {wanted} from queue '{self.name}' (size "
                    f"{len(self._elements)}): are its queue runners running (tf.train.start_queue_runners)? "
                    "ConfigProto(operation_timeout_in_ms=...) sets this deadline")
            if not warned and self.enqueued_total == 0 and waited >= NOTHING_ENQUEUED_WARNING_S:
                warned = True
                log.warning("nothing has been enqueued into queue '%s' for %.0f s: if queue runners fill "
                            "it, start them with tf.train.start_queue_runners(sess) (or train in a "
                            "tf.train.MonitoredTrainingSession, which starts them)", self.name, waited)
            self._arrived.wait(min(1.0, self.timeout_s - waited))
        self._raise_if_cancelled("dequeue from")

    def _raise_if_cancelled(self, what: str) -> None:
        if self._session_closed:
            raise CancelledError(f"the session was closed while waiting to {what} queue '{self.name}'")

    def close(self, cancel_pending_enqueues: bool = False) -> None:
        with self._lock:
            self.closed = True
            self._cancel_enqueues = self._cancel_enqueues or cancel_pending_enqueues
            self._arrived.notify_all()
            self._left.notify_all()

    def cancel(self) -> None:
        """The session is closing: every wait ends with CancelledError."""
        with self._lock:
            self.closed = self._cancel_enqueues = self._session_closed = True
            self._arrived.notify_all()
            self._left.notify_all()


# ---- ops ------------------------------------------------------------------------------
def _queue_of(state, handle: str) -> ExampleQueue:
    return state.resources[str(handle)]


def _make_queue_kernel(state, xp, component_types, shapes, capacity, min_after_dequeue, seed,
                       shared_name, shuffle):
    key = f"Queue:{shared_name}"
    rng = state.random_generator(seed) if shuffle else None  # not inside resource(): one lock
    state.resource(key, lambda: ExampleQueue(shared_name, capacity, min_after_dequeue if shuffle else 0,
                                             rng, state.operation_timeout_s))
    return key


def _handle_infer(inputs, **_):
    return [Spec((), dtypes_module.string)]


def _enqueue_infer(inputs, many):
    return []


def _split_rows(xp, components, many: bool) -> list:
    if not many:
        return [tuple(components)]
    counts = {int(c.shape[0]) for c in components}
    if len(counts) != 1:
        raise ShapeError(f"enqueue_many's components differ in their first dimension: {sorted(counts)}")
    return list(zip(*[[c[i] for i in range(int(c.shape[0]))] for c in components]))


def _enqueue_kernel(state, xp, handle, *components, many):
    _queue_of(state, handle).enqueue_many(_split_rows(xp, components, many))
    return ()


def _dequeue_infer(inputs, component_types, shapes, n, allow_smaller):
    batch = () if n is None else ((None if allow_smaller else n),)
    return [Spec(None if shape is None else (*batch, *shape), dtype)
            for dtype, shape in zip(component_types, shapes)]


def _dequeue_kernel(state, xp, handle, component_types, shapes, n, allow_smaller):
    rows = _queue_of(state, handle).dequeue_many(1 if n is None else n, allow_smaller)
    if n is None:
        return tuple(rows[0])
    return tuple(_stack(xp, [row[i] for row in rows], dtype)
                 for i, dtype in enumerate(component_types))


def _stack(xp, parts, dtype):
    if dtype == dtypes_module.string:  # bytes in NumPy object arrays: the array API has no strings
        import numpy

        return numpy.stack([numpy.asarray(part, dtype=object) for part in parts])
    return xp.stack(parts)


# queues hold Python lists of host arrays: no GPU kernels
defop("FIFOQueueV2", _handle_infer,
      lambda state, xp, **attrs: _make_queue_kernel(state, xp, shuffle=False, **attrs), stateful=True,
      gpu=False)
defop("RandomShuffleQueueV2", _handle_infer,
      lambda state, xp, **attrs: _make_queue_kernel(state, xp, shuffle=True, **attrs), stateful=True,
      gpu=False)
defop("QueueEnqueueV2", _enqueue_infer, _enqueue_kernel, stateful=True, num_outputs=0, blocking=True,
      gpu=False)
defop("QueueDequeueV2", _dequeue_infer, _dequeue_kernel, stateful=True, num_outputs=None, blocking=True,
      gpu=False)
defop("QueueCloseV2", lambda inputs, cancel_pending_enqueues: [],
      lambda state, xp, handle, cancel_pending_enqueues:
      _queue_of(state, handle).close(cancel_pending_enqueues) or (), stateful=True, num_outputs=0, gpu=False)
defop("QueueSizeV2", lambda inputs: [Spec((), dtypes_module.int32)],
      lambda state, xp, handle: xp.asarray(_queue_of(state, handle).size(), dtype=xp.int32), stateful=True,
      gpu=False)


# ---- the Python classes ----------------------------------------------------------------------
class QueueBase:
    """What both queues share: enqueue, enqueue_many, dequeue, dequeue_many, dequeue_up_to,
    close and size, each building an op on the queue's handle."""

    _op_type = ""

    def __init__(self, dtypes, shapes=None, names=None, shared_name=None, name="queue", **attrs):
        self._dtypes = [dtypes_module.as_dtype(d) for d in (dtypes if isinstance(dtypes, list | tuple)
                                                             else [dtypes])]
        if shapes is None:
            self._shapes = [None] * len(self._dtypes)
        else:
            shapes = list(shapes) if len(self._dtypes) > 1 or _is_shape_list(shapes) else [shapes]
            if len(shapes) != len(self._dtypes):
                raise ValueError(f"a queue of {len(self._dtypes)} components needs as many shapes, "
                                 f"got {len(shapes)}")
            self._shapes = [_static_shape(s) for s in shapes]
        self._names = list(names) if names is not None else None
        graph = get_default_graph()
        op_name = graph.unique_name(name, mark_as_used=False)
        attrs = {"component_types": self._dtypes, "shapes": self._shapes,
                 "shared_name": shared_name or op_name, **attrs}
        self.queue_ref = graph.create_op(self._op_type, [], attrs, name=name).outputs[0]
        self._name = self.queue_ref.op.name

    @property
    def name(self) -> str:
        return self._name

    @property
    def dtypes(self) -> list:
        return list(self._dtypes)

    @property
    def shapes(self) -> list:
        return [TensorShape(s) for s in self._shapes]

    @property
    def names(self):
        return self._names

    def _components(self, vals, many: bool) -> list[Tensor]:
        if isinstance(vals, dict):
            if self._names is None:
                raise ValueError(f"queue {self._name} has no component names: enqueue a list, not a dict")
            vals = [vals[n] for n in self._names]
        if not isinstance(vals, list | tuple):
            vals = [vals]
        if len(vals) != len(self._dtypes):
            raise ValueError(f"queue {self._name} has {len(self._dtypes)} components, got {len(vals)} values")
        tensors = [convert_to_tensor(v, dtype=d) for v, d in zip(vals, self._dtypes)]
        for t, shape in zip(tensors, self._shapes):
            element = t.shape[1:] if many and t.shape.rank is not None else t.shape
            if shape is not None and not element.is_compatible_with(shape):
                raise ValueError(f"cannot enqueue {t.name} of shape {t.shape} into queue {self._name} "
                                 f"whose elements have shape {fmt(shape)}")
        return tensors

    def enqueue(self, vals, name=None):
        """One element (a tensor per component)."""
        with name_scope(name or f"{self._name}_enqueue"):
            return get_default_graph().create_op(
                "QueueEnqueueV2", [self.queue_ref, *self._components(vals, False)], {"many": False})

    def enqueue_many(self, vals, name=None):
        """Elements sliced along each component's first dimension."""
        with name_scope(name or f"{self._name}_enqueue_many"):
            return get_default_graph().create_op(
                "QueueEnqueueV2", [self.queue_ref, *self._components(vals, True)], {"many": True})

    def _dequeue(self, n, allow_smaller, name):
        attrs = {"component_types": self._dtypes, "shapes": self._shapes, "n": n,
                 "allow_smaller": allow_smaller}
        op = get_default_graph().create_op("QueueDequeueV2", [self.queue_ref], attrs, name=name)
        outputs = list(op.outputs)
        if self._names is not None:
            return dict(zip(self._names, outputs))
        return outputs[0] if len(outputs) == 1 else outputs

    def dequeue(self, name=None):
        """One element: a tensor (one component) or a list of them."""
        return self._dequeue(None, False, name or f"{self._name}_Dequeue")

    def dequeue_many(self, n, name=None):
        """``n`` elements stacked along a new first dimension."""
        return self._dequeue(int(n), False, name or f"{self._name}_DequeueMany")

    def dequeue_up_to(self, n, name=None):
        """Like ``dequeue_many``, but once the queue is closed, what is left (at least one)."""
        return self._dequeue(int(n), True, name or f"{self._name}_DequeueUpTo")

    def close(self, cancel_pending_enqueues=False, name=None):
        """No more enqueues; dequeues drain what is left, then raise OutOfRangeError."""
        return get_default_graph().create_op(
            "QueueCloseV2", [self.queue_ref], {"cancel_pending_enqueues": bool(cancel_pending_enqueues)},
            name=name or f"{self._name}_Close")

    def size(self, name=None) -> Tensor:
        """The number of elements in the queue now."""
        return get_default_graph().create_op("QueueSizeV2", [self.queue_ref],
                                             name=name or f"{self._name}_Size").outputs[0]


def _is_shape_list(shapes) -> bool:
    first = next(iter(shapes), None)
    return isinstance(first, list | tuple | TensorShape) or first is None


def _static_shape(shape) -> tuple:
    dims = TensorShape(shape)
    if dims.rank is None or not dims.is_fully_defined():
        raise ValueError(f"queue element shapes must be fully defined, got {dims}")
    return tuple(int(d) for d in dims.as_list())


class FIFOQueue(QueueBase):
    """Elements leave in the order they came.

    >>> import dflow as tf
    >>> with tf.Graph().as_default():
    ...     q = tf.FIFOQueue(10, [tf.float32, tf.int32], shapes=[[2], []])
    ...     put, (pair, number) = q.enqueue(([1.0, 2.0], 7)), q.dequeue()
    ...     with tf.Session() as sess:
    ...         sess.run(put)
    ...         values, count = sess.run([pair, number])
    >>> values.tolist(), int(count)
    ([1.0, 2.0], 7)
    """

    _op_type = "FIFOQueueV2"

    def __init__(self, capacity, dtypes, shapes=None, names=None, shared_name=None, name="fifo_queue"):
        super().__init__(dtypes, shapes, names, shared_name, name, capacity=int(capacity),
                         min_after_dequeue=0, seed=None)


class RandomShuffleQueue(QueueBase):
    """Elements leave in random order; while open, at least ``min_after_dequeue`` stay behind
    (so what leaves is mixed), and a dequeue waits until there are that many more."""

    _op_type = "RandomShuffleQueueV2"

    def __init__(self, capacity, min_after_dequeue, dtypes, shapes=None, names=None, seed=None,
                 shared_name=None, name="random_shuffle_queue"):
        from .state_ops import op_seed

        if min_after_dequeue >= capacity:
            raise ValueError(f"min_after_dequeue ({min_after_dequeue}) must be below capacity ({capacity})")
        super().__init__(dtypes, shapes, names, shared_name, name, capacity=int(capacity),
                         min_after_dequeue=int(min_after_dequeue), seed=op_seed(seed))
