"""``MonitoredTrainingSession`` and its hooks: who initializes, who waits, when to stop.

As in TF 1.x: the chief (``is_chief=True``, task 0 by convention) restores the
latest checkpoint of ``checkpoint_dir`` or runs the initializers; every other
worker waits until the variables it uses are initialized (on the PS tasks they
share). Then every replica initializes its local variables and runs the ops of
``GraphKeys.LOCAL_INIT_OP`` (its copies taken from the shared masters), and
trains. Hooks see each ``run`` and can stop the loop.

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     step = tf.train.get_or_create_global_step()
...     train_op = tf.assign_add(step, 1)
...     hooks = [tf.train.StopAtStepHook(last_step=3)]
...     with tf.train.MonitoredTrainingSession(hooks=hooks) as sess:
...         while not sess.should_stop():
...             _ = sess.run(train_op)
...     int(_)
3
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import NamedTuple

from ..errors import AbortedError, DeadlineExceededError, OutOfRangeError, UnavailableError
from ..graph import GraphKeys, get_default_graph
from ..runtime.session import ConfigProto, Session
from ..variables import (
    global_variables,
    global_variables_initializer,
    local_variables_initializer,
    report_uninitialized_variables,
)
from .coordinator import Coordinator
from .queue_runner import start_queue_runners
from .saver import Saver, latest_checkpoint
from .session_run_hook import SessionRunArgs, SessionRunContext, SessionRunHook, SessionRunValues
from .summary_saver import monitored_session_hooks
from .training_util import get_global_step

__all__ = ["MonitoredTrainingSession", "SessionRunHook", "SessionRunArgs", "SessionRunContext",
           "SessionRunValues", "StopAtStepHook", "CheckpointSaverHook", "Scaffold", "ChiefSessionCreator",
           "WorkerSessionCreator", "MonitoredSession", "SingularMonitoredSession"]

log = logging.getLogger("dflow")


class StopAtStepHook(SessionRunHook):
    """Stop once the global step reaches ``last_step`` (or ``num_steps`` past its start)."""

    def __init__(self, num_steps: int | None = None, last_step: int | None = None):
        if (num_steps is None) == (last_step is None):
            raise ValueError("StopAtStepHook needs exactly one of num_steps and last_step")
        self._num_steps, self._last_step = num_steps, last_step

    def begin(self) -> None:
        self._step = _global_step_or_fail("StopAtStepHook")

    def after_create_session(self, session: Session, coord) -> None:
        if self._last_step is None:
            self._last_step = int(session.run(self._step)) + self._num_steps

    def before_run(self, run_context):
        return SessionRunArgs(self._step)

    def after_run(self, run_context, run_values):
        # the step fetched was read before this run's update, if it made one: look again (TF's way)
        if int(run_values.results) + 1 >= self._last_step and \
                int(run_context.session.run(self._step)) >= self._last_step:
            run_context.request_stop()


class CheckpointSaverHook(SessionRunHook):
    """Save a checkpoint every ``save_steps`` global steps or ``save_secs`` seconds, and at the end."""

    def __init__(self, checkpoint_dir: str, save_secs: float | None = None, save_steps: int | None = None,
                 saver: Saver | None = None, checkpoint_basename: str = "model.ckpt"):
        if (save_secs is None) == (save_steps is None):
            raise ValueError("CheckpointSaverHook needs exactly one of save_secs and save_steps")
        self._dir, self._secs, self._steps = checkpoint_dir, save_secs, save_steps
        self._saver, self._basename = saver, checkpoint_basename

    def begin(self) -> None:
        self._step = _global_step_or_fail("CheckpointSaverHook")
        os.makedirs(self._dir, exist_ok=True)  # as TF's hook does
        self._saver = self._saver or Saver()
        self._last_time, self._last_step = time.monotonic(), None

    def before_run(self, run_context):
        return SessionRunArgs(self._step)

    def after_run(self, run_context, run_values):
        step = int(run_values.results) + 1
        due = (time.monotonic() - self._last_time >= self._secs if self._secs is not None
               else self._last_step is None or step - self._last_step >= self._steps)
        if due:  # the fetched step may predate or follow this run's update: label it as TF does,
            self._save(run_context.session, int(run_context.session.run(self._step)))  # re-read

    def end(self, session: Session) -> None:
        self._save(session, int(session.run(self._step)))

    def _save(self, session: Session, step: int) -> None:
        if step == self._last_step:
            return
        self._saver.save(session, f"{self._dir}/{self._basename}", global_step=step)
        self._last_time, self._last_step = time.monotonic(), step


class Recovery(NamedTuple):
    """One recovery of a :class:`MonitoredTrainingSession`: the error, its seconds, the checkpoint
    restored (None: initialized afresh or, off the chief, waited for) and the global steps."""

    error: str
    seconds: float
    checkpoint: str | None
    step_restored: int | None
    step_reached: int | None

    @property
    def steps_lost(self) -> int | None:
        if self.step_restored is None or self.step_reached is None:
            return None
        return max(self.step_reached - self.step_restored, 0)

    def outcome(self) -> str:
        source = self.checkpoint or "no checkpoint (variables initialized or waited for)"
        return (f"restored {source} (step {self.step_restored}); training had reached step "
                f"{self.step_reached}: {self.steps_lost} steps lost")


def _global_step_or_fail(hook: str):
    step = get_global_step()
    if step is None:
        raise RuntimeError(f"{hook} needs a global step: create one with "
                           "tf.train.get_or_create_global_step() before the session")
    return step


class MonitoredTrainingSession:
    """A session for training loops: initialization by the chief, waiting for it elsewhere,
    hooks, checkpoints, and recovery from a lost task.

    As TF 1.x's, ``run`` recovers when a task of the cluster is lost: on
    :class:`~dflow.errors.AbortedError` or :class:`~dflow.errors.UnavailableError` (a PS or
    worker task died, or came back at a new address with none of its variables) it closes
    the broken session, creates a new one (the chief restores the latest checkpoint of
    ``checkpoint_dir``, or runs the initializers when there is none; the others wait for the
    chief's variables), calls each hook's ``after_create_session`` again, and runs the call
    again, so ``while not sess.should_stop(): sess.run(train_op)`` goes on. Steps since that
    checkpoint are lost (at most one checkpoint interval). Unlike TF, which retries forever,
    it recovers at most ``max_recoveries`` times (default 3) and gives up on a new session
    after ``recovery_timeout_secs`` (default 300 s); then the error is raised. Each recovery is
    logged in one line (logger ``"dflow"``) and kept in :attr:`recoveries`.

    Parameters
    ----------
    master : str
        The session target: empty for this process, or ``cluster.target``.
    is_chief : bool
        The chief restores ``checkpoint_dir``'s latest checkpoint or runs the initializers;
        the others wait (up to ``max_wait_secs``) until every variable is initialized.
    checkpoint_dir : str, optional
        Where the chief restores from and saves to (every ``save_checkpoint_steps`` steps, or
        ``save_checkpoint_secs`` seconds, default 600, and at the end).
    hooks, chief_only_hooks : list of SessionRunHook
    max_recoveries : int
        How many lost sessions ``run`` replaces before it raises (0: never recover).
    recovery_timeout_secs : float
        How long one recovery may try to create a session while the cluster's tasks come back.
    """

    def __init__(self, master: str = "", is_chief: bool = True, checkpoint_dir: str | None = None,
                 scaffold=None, hooks=None, chief_only_hooks=None, save_checkpoint_secs: float | None = 600,
                 save_checkpoint_steps: int | None = None, config: ConfigProto | None = None,
                 max_wait_secs: float = 7200, stop_grace_period_secs: float = 120, max_recoveries: int = 3,
                 recovery_timeout_secs: float = 300, **_ignored):
        if max_recoveries < 0 or recovery_timeout_secs <= 0:
            raise ValueError(f"MonitoredTrainingSession needs max_recoveries >= 0 (got {max_recoveries}) "
                             f"and recovery_timeout_secs > 0 (got {recovery_timeout_secs})")
        graph = get_default_graph()
        self._hooks = list(hooks or []) + (list(chief_only_hooks or []) if is_chief else [])
        self._saver = None
        scaffold = scaffold or Scaffold()
        if checkpoint_dir:
            self._saver = scaffold.saver or Saver()
            saves = save_checkpoint_steps or save_checkpoint_secs  # both None: TF saves no checkpoints
            if is_chief and saves:
                every = ({"save_steps": save_checkpoint_steps} if save_checkpoint_steps
                         else {"save_secs": save_checkpoint_secs})
                self._hooks.append(CheckpointSaverHook(checkpoint_dir, saver=self._saver, **every))
        if is_chief:  # TF's default: merge_all written to checkpoint_dir every 100 steps
            self._hooks += monitored_session_hooks(checkpoint_dir, scaffold, **_ignored)
        for hook in self._hooks:
            hook.begin()
        variables = global_variables()
        self._init_op = global_variables_initializer() if scaffold.init_op is None else scaffold.init_op
        self._scaffold = scaffold
        self._not_ready = report_uninitialized_variables(variables)
        self._local_init = ([local_variables_initializer(),  # and, as TF's Scaffold, the lookup tables
                             graph.get_collection(GraphKeys.LOCAL_INIT_OP) +
                             graph.get_collection(GraphKeys.TABLE_INITIALIZERS)]
                            if scaffold.local_init_op is None else [scaffold.local_init_op, []])
        self._master, self._graph, self._config = master, graph, config
        self._is_chief, self._checkpoint_dir, self._max_wait_s = is_chief, checkpoint_dir, max_wait_secs
        self._grace_s = stop_grace_period_secs
        self._max_recoveries, self._recovery_timeout_s = max_recoveries, recovery_timeout_secs
        self._global_step = get_global_step()
        self._step_reached: int | None = None
        self.recoveries: list[Recovery] = []
        self._create_session()
        self._stop = False
        self._last_run_stats = None

    def _create_session(self, wait_s: float | None = None) -> str | None:
        """A new session, its variables restored, initialized or waited for (up to ``wait_s``,
        default ``max_wait_secs``), its queue runners started and every hook told; the
        checkpoint restored (None: none)."""
        self._session = Session(self._master, self._graph, self._config)
        restored = None
        if self._is_chief:
            restored = latest_checkpoint(self._checkpoint_dir) if self._checkpoint_dir else None
            if restored:
                self._saver.restore(self._session, restored)
                log.info("restored %s", restored)
            else:
                self._session.run(self._init_op, self._scaffold.init_feed_dict)
                if self._scaffold.init_fn is not None:
                    self._scaffold.init_fn(self._scaffold, self._session)
        else:
            self._wait_until_ready(self._not_ready, self._max_wait_s if wait_s is None else wait_s)
        # each replica's own variables, then (a run later: after, not beside, their initializers)
        # the ops that make them copies of the shared ones
        self._session.run(self._local_init[0])
        self._session.run(self._local_init[1])
        # as TF's: the graph's queue runners start once the variables are ready, stop at close
        self._coord = Coordinator()
        self._threads = start_queue_runners(self._session, self._coord)
        for hook in self._hooks:
            hook.after_create_session(self._session, self._coord)
        return restored

    def _wait_until_ready(self, not_ready, max_wait_secs: float) -> None:
        deadline, pause = time.monotonic() + max_wait_secs, 0.05
        while True:
            missing = [name.decode() for name in self._session.run(not_ready)]
            if not missing:
                return
            if time.monotonic() > deadline:
                raise DeadlineExceededError(
                    f"waited {max_wait_secs:g} s for the chief to initialize {', '.join(missing[:5])}: "
                    "is the chief (is_chief=True, task 0) running?")
            time.sleep(pause)
            pause = min(pause * 2, 1.0)

    @property
    def graph(self):
        return self._session.graph

    @property
    def last_run_stats(self):
        """The wrapped session's :class:`~dflow.runtime.executor.RunStats` of the last ``run``
        (on a cluster: bytes per link, compute and wait seconds per task, staleness)."""
        return self._last_run_stats

    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        """``Session.run`` plus every hook's extra fetches; a hook may end the loop. A lost task
        (AbortedError, UnavailableError) is recovered from, and the call run again."""
        while True:
            try:
                return self._run_hooked(fetches, feed_dict)
            except (AbortedError, UnavailableError) as error:
                if len(self.recoveries) >= self._max_recoveries:
                    if self._max_recoveries:
                        log.error("MonitoredTrainingSession: not recovering again after %d recoveries "
                                  "(max_recoveries=%d)", len(self.recoveries), self._max_recoveries)
                    raise
                self._recover(error)

    def _run_hooked(self, fetches, feed_dict):
        context = SessionRunContext(SessionRunArgs(fetches, feed_dict), self._session)
        requests = [hook.before_run(context) for hook in self._hooks]
        feeds = dict(feed_dict or {})
        for request in requests:
            if request is not None and request.feed_dict:
                feeds.update(request.feed_dict)
        extra = [None if r is None else r.fetches for r in requests]
        step_fetch = [] if self._global_step is None else self._global_step
        try:  # the global step too: how far training got, should a task be lost
            results, extra_results, step = self._session.run(
                [fetches, [e for e in extra if e is not None], step_fetch], feeds)
        except Exception:  # a queue runner's error explains an empty queue better than the queue
            self._coord.raise_requested_exception()
            raise
        if self._global_step is not None:
            self._step_reached = max(int(step), self._step_reached or 0)
        self._last_run_stats = self._session.last_run_stats  # before hooks run steps of their own
        extra_iter = iter(extra_results)
        for hook, request in zip(self._hooks, extra):
            hook.after_run(context, SessionRunValues(None if request is None else next(extra_iter)))
        self._stop = self._stop or context.stop_requested
        return results

    def _recover(self, error: Exception) -> None:
        """Replace the broken session by a new one (restored, initialized or waited for) within
        ``recovery_timeout_secs``, trying again while the lost task is not back yet."""
        began, reached = time.monotonic(), self._step_reached
        what = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        log.warning("MonitoredTrainingSession: the session failed (%s); recovering", what)
        deadline, pause = began + self._recovery_timeout_s, 0.1
        while True:
            self._close_broken_session()
            try:
                restored = self._create_session(wait_s=max(deadline - time.monotonic(), 1.0))
                step = None if self._global_step is None else int(self._session.run(self._global_step))
                break
            except (AbortedError, UnavailableError, OSError, asyncio.TimeoutError) as again:
                # (a task still coming back may also refuse or time out a connection)
                if time.monotonic() + pause > deadline:
                    raise UnavailableError(
                        f"MonitoredTrainingSession could not replace its session within "
                        f"recovery_timeout_secs={self._recovery_timeout_s:g} s after {what}; the last "
                        f"try failed with {type(again).__name__}: {again}. Is the lost task coming "
                        "back (its nanny, or a new worker under its role's name)?") from again
                time.sleep(pause)  # (the task is still coming back: a new try soon)
                pause = min(pause * 2, 2.0)
        recovery = Recovery(what, time.monotonic() - began, restored, step, reached)
        self.recoveries.append(recovery)
        log.warning("MonitoredTrainingSession: recovery %d/%d from %s in %.1f s: %s", len(self.recoveries),
                    self._max_recoveries, what, recovery.seconds, recovery.outcome())

    def _close_broken_session(self) -> None:
        """Close a session whose task was lost: its queue runners may fail as they stop (logged)."""
        try:
            self._coord.request_stop()
            self._coord.join(self._threads, stop_grace_period_secs=self._grace_s)
        except Exception as error:  # they failed for the same reason as the step
            log.info("MonitoredTrainingSession: a queue runner of the lost session failed: %s", error)
        try:
            self._session.close()
        except Exception as error:  # its cluster connection may be broken too: a new one is made
            log.info("MonitoredTrainingSession: closing the lost session failed: %s", error)

    def should_stop(self) -> bool:
        return self._stop or self._coord.should_stop()

    def close(self) -> None:
        self._close(run_end_hooks=True)

    def _close(self, run_end_hooks: bool) -> None:
        try:
            if run_end_hooks:
                for hook in self._hooks:
                    hook.end(self._session)
        finally:
            try:  # the queue runners' threads: stopped (their queues cancelled) and joined
                self._coord.request_stop()
                self._coord.join(self._threads, stop_grace_period_secs=self._grace_s)
            finally:
                self._session.close()

    def __enter__(self) -> MonitoredTrainingSession:
        return self

    def __exit__(self, exc_type, exc, traceback) -> bool:
        # as TF's: the input running out (OutOfRangeError) ends the `with` block quietly
        clean = exc_type is None or issubclass(exc_type, OutOfRangeError | StopIteration)
        self._close(run_end_hooks=clean)
        return exc_type is not None and clean


class Scaffold:
    """What a monitored session builds its model's session from (``tf.train.Scaffold``): the
    initializers (``init_op``, run with ``init_feed_dict``, then ``init_fn(scaffold, session)``),
    ``local_init_op`` (default: local variables, ``LOCAL_INIT_OP`` and the lookup tables),
    ``saver`` and ``summary_op``; None means the session's default."""

    def __init__(self, init_op=None, init_feed_dict=None, init_fn=None, ready_op=None,
                 ready_for_local_init_op=None, local_init_op=None, summary_op=None, saver=None,
                 copy_from_scaffold=None):
        given = {"init_op": init_op, "init_feed_dict": init_feed_dict, "init_fn": init_fn,
                 "local_init_op": local_init_op, "summary_op": summary_op, "saver": saver}
        for field, value in given.items():  # what is not given is copy_from_scaffold's
            setattr(self, field, getattr(copy_from_scaffold, field) if value is None and copy_from_scaffold
                    else value)
        self.ready_op, self.ready_for_local_init_op = ready_op, ready_for_local_init_op

    def finalize(self) -> Scaffold:
        """Fills the defaults TF fills here (the summary op, a saver) and freezes the graph's
        additions no further: dflow's graphs are not finalized."""
        from ..summary import merge_all

        if self.summary_op is None:
            self.summary_op = merge_all()
        if self.saver is None:
            self.saver = Saver()
        return self


class ChiefSessionCreator:
    """How a ``MonitoredSession`` makes the chief's session: restore ``checkpoint_dir``'s latest
    checkpoint, or initialize (``scaffold``)."""

    def __init__(self, scaffold=None, master="", config=None, checkpoint_dir=None,
                 checkpoint_filename_with_path=None):
        if checkpoint_filename_with_path is not None:
            raise ValueError("ChiefSessionCreator(checkpoint_filename_with_path=...) is not supported by "
                             "dflow: give checkpoint_dir, whose latest checkpoint is restored")
        self.scaffold, self.master, self.config = scaffold, master, config
        self.checkpoint_dir, self.is_chief = checkpoint_dir, True


class WorkerSessionCreator(ChiefSessionCreator):
    """How a ``MonitoredSession`` makes a non-chief's session: wait (up to ``max_wait_secs``)
    for the chief to initialize the shared variables."""

    def __init__(self, scaffold=None, master="", config=None, max_wait_secs=30 * 60):
        super().__init__(scaffold, master, config)
        self.is_chief, self.max_wait_secs = False, max_wait_secs


class MonitoredSession(MonitoredTrainingSession):
    """``tf.train.MonitoredSession``: a monitored session made by ``session_creator`` (default:
    a chief's), with ``hooks`` and none of its own (no checkpoint or summary saving, unlike
    ``MonitoredTrainingSession``); it recovers from a lost task as that one does.

    >>> import dflow as tf
    >>> with tf.Graph().as_default():
    ...     step = tf.train.get_or_create_global_step()
    ...     count = tf.assign_add(step, 1)
    ...     with tf.train.MonitoredSession(hooks=[tf.train.StopAtStepHook(last_step=2)]) as sess:
    ...         while not sess.should_stop():
    ...             value = sess.run(count)
    >>> int(value)
    2
    """

    def __init__(self, session_creator=None, hooks=None, stop_grace_period_secs=120):
        creator = session_creator or ChiefSessionCreator()
        super().__init__(creator.master, creator.is_chief, creator.checkpoint_dir, creator.scaffold, hooks,
                         config=creator.config, save_checkpoint_secs=None, save_checkpoint_steps=None,
                         save_summaries_steps=None, log_step_count_steps=None,
                         max_wait_secs=getattr(creator, "max_wait_secs", 7200),
                         stop_grace_period_secs=stop_grace_period_secs)

    def raw_session(self) -> Session:
        """The underlying ``tf.Session``."""
        return self._session


class SingularMonitoredSession(MonitoredSession):
    """``tf.train.SingularMonitoredSession``: a ``MonitoredSession`` of one process, made as the
    chief's from ``scaffold``, ``master``, ``config`` and ``checkpoint_dir``."""

    def __init__(self, hooks=None, scaffold=None, master="", config=None, checkpoint_dir=None,
                 stop_grace_period_secs=120, checkpoint_filename_with_path=None):
        super().__init__(ChiefSessionCreator(scaffold, master, config, checkpoint_dir,
                                             checkpoint_filename_with_path), hooks, stop_grace_period_secs)
