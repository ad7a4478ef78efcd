"""``tf.train.QueueRunner`` and ``start_queue_runners``: threads that keep a queue full.

Each thread runs ``sess.run(enqueue_op)`` in a loop, beside the training loop's
own runs of the same session (sessions' runs are independent: see
:mod:`dflow.ops.queue_ops`). A thread ends when its input is exhausted
(``OutOfRangeError``: the last one to end closes the queue, so the consumer
drains it and then gets ``OutOfRangeError``), when the coordinator asks to stop
(the queue is closed with its pending enqueues cancelled), when the session
closes, or on an error, which it reports to the coordinator and which closes
the queue too, so a consumer never waits for producers that are gone.

Threads are daemons, so a Ctrl-C in the training loop never leaves the process
waiting for them; ``coord.join(threads)`` waits with a deadline.

Copies of one enqueue op (``tf.train.shuffle_batch(num_threads=16)`` makes sixteen) run on one
thread, or on ``DFLOW_QUEUE_RUNNER_THREADS`` of them where that is set. TF runs each copy's ops
in C++; here each is Python and NumPy on small arrays, which takes the interpreter's lock at
every op, and sixteen threads taking turns at it were slower than one: the CIFAR-10 tutorial's
input filled its 20,000-image queue in 11.8 s on sixteen threads, 9.6 on two, 6.7 on one, and
its training ran at 912-976 examples/sec beside sixteen, 1,261-1,298 beside one (TensorFlow:
1,119-1,300; 2 cores). More threads pay where the copies wait on slow storage.
"""

from __future__ import annotations

import logging
import os
import threading

from ..errors import CancelledError, OutOfRangeError
from ..graph import get_default_graph
from .coordinator import Coordinator

__all__ = ["QueueRunner", "add_queue_runner", "start_queue_runners", "QUEUE_RUNNERS"]

log = logging.getLogger("dflow")

QUEUE_RUNNERS = "queue_runners"  # GraphKeys.QUEUE_RUNNERS


class QueueRunner:
    """Threads running ``enqueue_ops`` (one thread each) into ``queue``.

    >>> import dflow as tf
    >>> with tf.Graph().as_default():
    ...     queue = tf.FIFOQueue(10, [tf.float32], shapes=[[]])
    ...     enqueue_op = queue.enqueue([tf.random_uniform([])])
    ...     tf.train.add_queue_runner(tf.train.QueueRunner(queue, [enqueue_op] * 4))
    ...     len(tf.get_collection(tf.GraphKeys.QUEUE_RUNNERS))
    1
    """

    def __init__(self, queue=None, enqueue_ops=None, close_op=None, cancel_op=None,
                 queue_closed_exception_types=None, queue_runner_def=None, import_scope=None):
        if queue_runner_def is not None:
            raise ValueError("QueueRunner(queue_runner_def=...) (a serialized QueueRunnerDef) is not "
                             "supported by dflow: build the QueueRunner from its queue and enqueue ops")
        if queue is None or not enqueue_ops:
            raise ValueError("QueueRunner needs a queue and at least one enqueue op")
        self._queue, self._enqueue_ops = queue, list(enqueue_ops)
        self._close_op = close_op if close_op is not None else queue.close()
        self._cancel_op = cancel_op if cancel_op is not None else queue.close(cancel_pending_enqueues=True)
        self._closed_types = tuple(queue_closed_exception_types or (OutOfRangeError, CancelledError))
        self._lock = threading.Lock()
        self._runs_per_session: dict = {}
        self._exceptions_raised: list[BaseException] = []

    @property
    def queue(self):
        return self._queue

    @property
    def enqueue_ops(self) -> list:
        return list(self._enqueue_ops)

    @property
    def close_op(self):
        return self._close_op

    @property
    def cancel_op(self):
        return self._cancel_op

    @property
    def exceptions_raised(self) -> list[BaseException]:
        """Errors the threads met without a coordinator to report them to."""
        return list(self._exceptions_raised)

    @property
    def name(self) -> str:
        return self._queue.name

    def create_threads(self, sess, coord: Coordinator | None = None, daemon: bool = False,
                       start: bool = False) -> list[threading.Thread]:
        """One thread per enqueue op, copies of one op on :func:`threads_per_enqueue_op` threads
        (none if this session's are still running)."""
        _refuse_cluster_sessions(sess)
        enqueue_ops = _with_copies_up_to(self._enqueue_ops, threads_per_enqueue_op())
        with self._lock:
            if self._runs_per_session.get(sess, 0) > 0:
                return []
            self._runs_per_session[sess] = len(enqueue_ops)
            self._exceptions_raised = []
        threads = [threading.Thread(target=self._run, args=(sess, op, coord), daemon=daemon,
                                    name=f"QueueRunner:{self.name}:{i}")
                   for i, op in enumerate(enqueue_ops)]
        if coord is not None:
            if hasattr(coord, "_on_request_stop"):
                coord._on_request_stop(lambda: self._close(sess, self._cancel_op))
            else:  # another coordinator (a Supervisor's): a thread waits for its stop, as TF's runner does
                threads.append(threading.Thread(target=self._close_on_stop, args=(sess, coord), daemon=True,
                                                name=f"QueueRunner:{self.name}:close_on_stop"))
            for thread in threads:
                coord.register_thread(thread)
        if start:
            for thread in threads:
                thread.start()
        return threads

    def _run(self, sess, enqueue_op, coord: Coordinator | None) -> None:
        try:
            while not (coord is not None and coord.should_stop()):
                sess.run(enqueue_op)
        except self._closed_types:
            pass  # the input is exhausted, or the queue was closed under us
        except RuntimeError as error:
            if not getattr(sess, "_closed", False):  # a closed session only means: stop
                self._report(error, coord)
        except Exception as error:
            self._report(error, coord)
        finally:
            with self._lock:
                self._runs_per_session[sess] -= 1
                last = self._runs_per_session[sess] == 0
            if last:
                self._close(sess, self._close_op)

    def _close_on_stop(self, sess, coord) -> None:
        coord.wait_for_stop()
        self._close(sess, self._cancel_op)

    def _report(self, error: Exception, coord: Coordinator | None) -> None:
        with self._lock:
            self._exceptions_raised.append(error)
        if coord is not None:
            coord.request_stop(error)
        else:
            log.error("queue runner of %s stopped: %s: %s", self.name, type(error).__name__, error)

    def _close(self, sess, op) -> None:
        """Run ``op`` (close or cancel the queue), unless the session is already gone."""
        if getattr(sess, "_closed", False):
            return
        try:
            sess.run(op)
        except Exception as error:  # the queue is closing anyway; say why this one could not
            log.debug("closing queue %s: %s", self.name, error)


def _refuse_cluster_sessions(sess) -> None:
    from ..runtime.runners import LocalRunner

    inner = getattr(sess, "_session", sess)  # a MonitoredTrainingSession's session
    runner = getattr(inner, "runner", None)
    if runner is not None and not isinstance(runner, LocalRunner):
        raise NotImplementedError(
            "queue runners (tf.train.start_queue_runners, string_input_producer, shuffle_batch) run in "
            "local sessions only in dflow: on a cluster, read a prepared store with "
            "dflow.data.Dataset(...).get_next(), which each worker streams itself")


def threads_per_enqueue_op() -> int:
    """The threads a QueueRunner runs copies of one enqueue op on: ``DFLOW_QUEUE_RUNNER_THREADS``,
    1 where it is not set (see the module's docstring)."""
    setting = os.environ.get("DFLOW_QUEUE_RUNNER_THREADS", "1")
    try:
        threads = int(setting)
    except ValueError:
        threads = 0
    if threads < 1:
        raise ValueError(f"DFLOW_QUEUE_RUNNER_THREADS={setting!r} is not a number of threads: set a whole "
                         "number from 1 (the threads a QueueRunner runs copies of one enqueue op on), or "
                         "unset it for 1")
    return threads


def _with_copies_up_to(enqueue_ops: list, copies: int) -> list:
    """``enqueue_ops`` in order, each op at most ``copies`` times."""
    seen: dict[int, int] = {}
    kept = []
    for op in enqueue_ops:
        seen[id(op)] = seen.get(id(op), 0) + 1
        if seen[id(op)] <= copies:
            kept.append(op)
    return kept


def add_queue_runner(qr: QueueRunner, collection: str = QUEUE_RUNNERS) -> None:
    """Add ``qr`` to the graph's queue runners, which ``start_queue_runners`` starts."""
    get_default_graph().add_to_collection(collection, qr)


def start_queue_runners(sess=None, coord: Coordinator | None = None, daemon: bool = True, start: bool = True,
                        collection: str = QUEUE_RUNNERS) -> list[threading.Thread]:
    """Start the threads of every queue runner in the graph's ``collection``; returns them.

    ::

        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess=sess, coord=coord)
        ...  # the training loop
        coord.request_stop()
        coord.join(threads)
    """
    if sess is None:
        from ..context import session_or_default

        sess = session_or_default(None, "start queue runners")
    sess = getattr(sess, "_session", sess)  # TF accepts a MonitoredSession here too
    threads = []
    for qr in sess.graph.get_collection(collection):
        threads.extend(qr.create_threads(sess, coord=coord, daemon=daemon, start=start))
    return threads
