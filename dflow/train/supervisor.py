"""``tf.train.Supervisor``: TF 1.x's session preparer for between-graph training scripts.

The chief (``is_chief=True``) restores the latest checkpoint of ``logdir`` or runs
``init_op``; every other worker waits, polling every ``recovery_wait_secs``, until
``ready_for_local_init_op`` reports no uninitialized variable, then runs its
``local_init_op`` and checks ``ready_op``. On the chief, a thread saves a checkpoint to
``logdir`` every ``save_model_secs``. As in ``mnist_replica.py``:

>>> sv = tf.train.Supervisor(is_chief=task_index == 0, logdir=train_dir, init_op=init_op,
...                          recovery_wait_secs=1, global_step=global_step)  # doctest: +SKIP
>>> sess = sv.prepare_or_wait_for_session(server.target, config=sess_config)  # doctest: +SKIP
>>> with sv.managed_session(server.target) as sess:  # doctest: +SKIP
...     while not sv.should_stop():
...         sess.run(train_op)

Summaries: ``summary_op`` is accepted and no summary thread runs; ``sv.summary_writer``
is a ``tf.summary.FileWriter`` on ``logdir`` (chief) where dflow has one, and
``sv.summary_computed(sess, summary)`` writes to it.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import threading
import time

from ..errors import DeadlineExceededError, OutOfRangeError
from ..graph import GraphKeys, get_default_graph
from ..runtime.session import Session
from ..variables import (
    global_variables,
    global_variables_initializer,
    local_variables,
    local_variables_initializer,
    report_uninitialized_variables,
)
from .saver import Saver, latest_checkpoint

__all__ = ["Supervisor"]

log = logging.getLogger("dflow")


class _UseDefault:
    def __repr__(self) -> str:
        return "Supervisor.USE_DEFAULT"


class _StopSignal:
    """What a Supervisor's threads watch: ``should_stop`` / ``request_stop`` / ``join``, as
    ``tf.train.Coordinator`` (a script's own queue runners may take it as their ``coord``)."""

    def __init__(self):
        self._event = threading.Event()
        self._error: BaseException | None = None
        self.threads: list[threading.Thread] = []

    def should_stop(self) -> bool:
        return self._event.is_set()

    def request_stop(self, ex: BaseException | None = None) -> None:
        if ex is not None and self._error is None and not isinstance(ex, OutOfRangeError):
            self._error = ex
        self._event.set()

    def wait_for_stop(self, timeout: float | None = None) -> bool:
        return self._event.wait(timeout)

    def clear_stop(self) -> None:
        self._event.clear()
        self._error = None

    def register_thread(self, thread: threading.Thread) -> None:
        self.threads.append(thread)

    def join(self, threads=None, stop_grace_period_secs: float = 120, ignore_live_threads: bool = False):
        deadline = time.monotonic() + stop_grace_period_secs
        for thread in list(threads or []) + self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        alive = [t.name for t in list(threads or []) + self.threads if t.is_alive()]
        if alive and not ignore_live_threads:
            raise RuntimeError(f"these threads did not stop within {stop_grace_period_secs:g} s: "
                               f"{', '.join(alive)}")
        if self._error is not None:
            raise self._error


class Supervisor:
    """Initialize or wait, then train until told to stop (TF 1.x's ``tf.train.Supervisor``).

    Parameters
    ----------
    is_chief : bool
        The chief initializes (or restores ``logdir``'s latest checkpoint) and saves
        checkpoints; the others wait until the variables are initialized.
    logdir : str, optional
        Checkpoints (``model.ckpt-STEP``) and summaries go here; None saves nothing.
    init_op, ready_op, ready_for_local_init_op, local_init_op, saver, global_step :
        TF's defaults (``Supervisor.USE_DEFAULT``): the global initializer, the names of
        uninitialized variables (all; the global ones), the local initializer, a Saver,
        the graph's global step. ``None`` turns each off.
    recovery_wait_secs : float
        How often a waiting worker looks again (TF's name).
    save_model_secs : float
        The chief's checkpoint interval (0: none).
    """

    USE_DEFAULT = _UseDefault()

    def __init__(self, graph=None, ready_op=USE_DEFAULT, ready_for_local_init_op=USE_DEFAULT,
                 is_chief: bool = True, init_op=USE_DEFAULT, init_feed_dict=None,
                 local_init_op=USE_DEFAULT, logdir: str | None = None, summary_op=USE_DEFAULT,
                 saver=USE_DEFAULT, global_step=USE_DEFAULT, save_summaries_secs: float = 120,
                 save_model_secs: float = 600, recovery_wait_secs: float = 30, stop_grace_secs: float = 120,
                 checkpoint_basename: str = "model.ckpt", session_manager=None, summary_writer=USE_DEFAULT,
                 init_fn=None, local_init_run_options=None):
        self._graph = graph or get_default_graph()
        self._is_chief, self._logdir = bool(is_chief), logdir
        self._init_feed_dict, self._init_fn = init_feed_dict, init_fn
        self._recovery_wait_secs, self._stop_grace_secs = recovery_wait_secs, stop_grace_secs
        self._save_model_secs = save_model_secs
        self.save_path = f"{logdir}/{checkpoint_basename}" if logdir else None
        with self._graph.as_default():
            default = self.USE_DEFAULT
            self.init_op = global_variables_initializer() if init_op is default else init_op
            self.ready_op = (report_uninitialized_variables(global_variables() + local_variables())
                             if ready_op is default else ready_op)
            self.ready_for_local_init_op = ready_for_local_init_op
            if ready_for_local_init_op is default:
                self.ready_for_local_init_op = report_uninitialized_variables(global_variables())
            self.local_init_op = self._default_local_init() if local_init_op is default else local_init_op
            self.saver = (Saver() if global_variables() else None) if saver is default else saver
            self.global_step = self._default_global_step() if global_step is default else global_step
            self.summary_op = None if summary_op is default else summary_op
        self.summary_writer = self._default_writer() if summary_writer is default else summary_writer
        self.coord = _StopSignal()
        self._session: Session | None = None
        self._queue_runners: list = []

    def _default_local_init(self):
        ops = [local_variables_initializer(), *self._graph.get_collection(GraphKeys.LOCAL_INIT_OP),
               *self._graph.get_collection(GraphKeys.TABLE_INITIALIZERS)]  # as TF's: the lookup tables
        from ..variables import group

        return group(*ops, name="supervisor_local_init")

    def _default_global_step(self):
        from .training_util import get_global_step

        return get_global_step(self._graph)

    def _default_writer(self):
        if not (self._is_chief and self._logdir):
            return None
        try:
            from ..summary import FileWriter  # written where dflow has tf.summary
        except ImportError:
            return None
        return FileWriter(self._logdir)

    # ---- what scripts read ---------------------------------------------------------------
    @property
    def is_chief(self) -> bool:
        return self._is_chief

    @property
    def session_manager(self):
        return self

    # ---- sessions --------------------------------------------------------------------------
    def prepare_or_wait_for_session(self, master: str = "", config=None, wait_for_checkpoint: bool = False,
                                    max_wait_secs: float = 7200,
                                    start_standard_services: bool = True) -> Session:
        """A session whose variables are ready: the chief makes them so, the others wait
        (up to ``max_wait_secs``) for the chief. With ``start_standard_services`` the graph's
        queue runners are started too (on every task), as TF's Supervisor does."""
        self.coord.clear_stop()
        sess = Session(master, self._graph, config)
        try:
            if self._is_chief:
                self._initialize(sess)
            else:
                self._wait_until(sess, self.ready_for_local_init_op, max_wait_secs, "initialize")
                self._run_local_init(sess)
            missing = self._not_ready(sess, self.ready_op)
            if missing:
                raise RuntimeError(f"the model is not ready after its initialization: {', '.join(missing)} "
                                   "uninitialized; give init_op / local_init_op that initialize them")
        except BaseException:
            sess.close()
            raise
        self._session = sess
        if self._is_chief and start_standard_services:
            self.start_standard_services(sess)
        if start_standard_services:  # as TF's: every task's session starts the graph's queue runners
            self.start_queue_runners(sess)
        return sess

    def _initialize(self, sess: Session) -> None:
        restore_from = latest_checkpoint(self._logdir) if self._logdir and self.saver else None
        if restore_from:
            self.saver.restore(sess, restore_from)
            log.info("Supervisor: restored %s", restore_from)
        else:
            if self.init_op is not None:
                sess.run(self.init_op, self._init_feed_dict)
            if self._init_fn is not None:
                self._init_fn(sess)
        self._run_local_init(sess)

    def _run_local_init(self, sess: Session) -> None:
        if self.local_init_op is not None:
            sess.run(self.local_init_op)

    def _not_ready(self, sess: Session, report) -> list[str]:
        if report is None:
            return []
        return [n.decode() if isinstance(n, bytes) else str(n) for n in sess.run(report)]

    def _wait_until(self, sess: Session, report, max_wait_secs: float, what: str) -> None:
        deadline = time.monotonic() + max_wait_secs
        while True:
            missing = self._not_ready(sess, report)
            if not missing:
                return
            if time.monotonic() + self._recovery_wait_secs > deadline:
                raise DeadlineExceededError(
                    f"waited {max_wait_secs:g} s for the chief to {what} {', '.join(missing[:5])}"
                    f"{' ...' if len(missing) > 5 else ''}: is the chief (is_chief=True) running?")
            log.info("Supervisor: waiting for the chief to %s %s", what, ", ".join(missing[:5]))
            time.sleep(self._recovery_wait_secs)

    @contextlib.contextmanager
    def managed_session(self, master: str = "", config=None, start_standard_services: bool = True,
                        close_summary_writer: bool = True):
        """``with sv.managed_session(target) as sess:``: a prepared session, stopped and closed
        at the end; an ``OutOfRangeError`` (input exhausted) ends the block quietly, as in TF."""
        sess = self.prepare_or_wait_for_session(master, config,
                                                start_standard_services=start_standard_services)
        try:
            yield sess
        except BaseException as error:
            self.request_stop(error)
            if not isinstance(error, OutOfRangeError):
                self._stop_threads(close_summary_writer)
                sess.close()
                raise
        self.stop(close_summary_writer=close_summary_writer)
        sess.close()

    # ---- services ------------------------------------------------------------------------
    def start_standard_services(self, sess: Session) -> list[threading.Thread]:
        """The chief's checkpoint thread (every ``save_model_secs`` into ``logdir``)."""
        threads = []
        if self._logdir and self.saver is not None and self._save_model_secs:
            threads.append(self.loop(self._save_model_secs, self._save_checkpoint, args=(sess,),
                                     start_now=False))
        return threads

    def _save_checkpoint(self, sess: Session) -> None:
        step = None if self.global_step is None else int(sess.run(self.global_step))
        self.saver.save(sess, self.save_path, global_step=step)

    def loop(self, timer_interval_secs: float, target, args=None, kwargs=None,
             start_now: bool = True) -> threading.Thread:
        """Call ``target(*args, **kwargs)`` every ``timer_interval_secs`` on a thread until stopped."""
        def run():
            if start_now:
                target(*(args or ()), **(kwargs or {}))
            while not self.coord.wait_for_stop(timer_interval_secs):
                try:
                    target(*(args or ()), **(kwargs or {}))
                except Exception as error:  # noqa: BLE001 - kept for stop() to raise, as TF's coordinator
                    self.coord.request_stop(error)

        thread = threading.Thread(target=run, daemon=True, name=f"dflow-supervisor-{target.__name__}")
        self.coord.register_thread(thread)
        thread.start()
        return thread

    Loop = loop

    def start_queue_runners(self, sess: Session, queue_runners=None) -> list[threading.Thread]:
        """Start ``queue_runners`` (default: the graph's ``QUEUE_RUNNERS``) on daemon threads; the
        Supervisor stops them in :meth:`stop`."""
        runners = (list(queue_runners) if queue_runners is not None
                   else self._graph.get_collection(getattr(GraphKeys, "QUEUE_RUNNERS", "queue_runners")))
        threads = []
        for runner in runners:
            try:
                threads += runner.create_threads(sess, coord=self.coord, daemon=True, start=True)
            except TypeError:  # a runner that stops itself (SyncReplicasOptimizer's chief runner)
                threads += runner.create_threads(sess, daemon=True, start=True)
            self._queue_runners.append((runner, sess))
        if runners:
            # scripts end without sv.stop() (mnist_replica.py): stop the runners before this
            # process's Server (registered earlier, so it runs later) takes the cluster away
            atexit.register(self._stop_runners_at_exit)
        return threads

    def _stop_runners_at_exit(self) -> None:
        if self._queue_runners:
            with contextlib.suppress(Exception):  # the cluster may be gone already: nothing to stop
                self._stop_threads(close_summary_writer=False)

    def summary_computed(self, sess: Session, summary, global_step=None) -> None:
        """Write a summary computed by the script to ``summary_writer`` (chief, with a logdir)."""
        if self.summary_writer is None:
            return
        if global_step is None and self.global_step is not None:
            global_step = int(sess.run(self.global_step))
        self.summary_writer.add_summary(summary, global_step)

    # ---- stopping --------------------------------------------------------------------------
    def should_stop(self) -> bool:
        return self.coord.should_stop()

    def request_stop(self, ex: BaseException | None = None) -> None:
        self.coord.request_stop(ex)

    def wait_for_stop(self) -> None:
        self.coord.wait_for_stop()

    def stop(self, threads=None, close_summary_writer: bool = True,
             ignore_live_threads: bool = False) -> None:
        """Stop the services and queue runners and wait for their threads (``stop_grace_secs``);
        raise what a thread reported, as TF's coordinator does."""
        self._stop_threads(close_summary_writer)
        self.coord.join(threads, self._stop_grace_secs, ignore_live_threads)

    def _stop_threads(self, close_summary_writer: bool) -> None:
        self.coord.request_stop()
        for runner, sess in self._queue_runners:
            if hasattr(runner, "stop"):  # SyncReplicasOptimizer's: wakes replicas waiting on it
                runner.stop(sess, self._stop_grace_secs)
        self._queue_runners = []
        if close_summary_writer and self.summary_writer is not None:
            self.summary_writer.close()
