"""``tf.train.SummarySaverHook`` and ``StepCounterHook``: ``MonitoredTrainingSession`` hooks
writing summaries, and the training speed (``global_step/sec``), for TensorBoard."""

from __future__ import annotations

import logging
import time

from .. import summary
from .session_run_hook import SessionRunArgs, SessionRunHook
from .training_util import get_global_step

__all__ = ["SummarySaverHook", "StepCounterHook", "monitored_session_hooks"]

log = logging.getLogger("dflow")


class SummarySaverHook(SessionRunHook):
    """``tf.train.SummarySaverHook``: in a ``MonitoredTrainingSession``, write ``summary_op`` (default
    ``tf.summary.merge_all()``) every ``save_steps`` global steps or ``save_secs`` seconds.

    >>> import tempfile, dflow as tf
    >>> with tf.Graph().as_default():
    ...     _ = tf.summary.scalar("loss", tf.constant(0.5))
    ...     hook = tf.train.SummarySaverHook(save_steps=10, output_dir=tempfile.mkdtemp(),
    ...                                      summary_op=tf.summary.merge_all())
    """

    def __init__(self, save_steps: int | None = None, save_secs: float | None = None,
                 output_dir: str | None = None, summary_writer: object | None = None,
                 scaffold=None, summary_op=None):
        if (save_steps is None) == (save_secs is None):
            raise ValueError("SummarySaverHook needs exactly one of save_steps and save_secs")
        if output_dir is None and summary_writer is None:
            raise ValueError("SummarySaverHook needs output_dir or summary_writer: where to write")
        self._steps, self._secs = save_steps, save_secs
        self._output_dir, self._writer = output_dir, summary_writer
        self._summary_op = summary_op if summary_op is not None else getattr(scaffold, "summary_op", None)

    def begin(self) -> None:
        self._writer = self._writer or summary.FileWriterCache.get(self._output_dir)
        self._step = get_global_step()
        if self._step is None:
            raise RuntimeError("SummarySaverHook needs a global step: create one with "
                               "tf.train.get_or_create_global_step() before the session")
        if self._summary_op is None:
            self._summary_op = summary.merge_all()
        self._next_step = self._last_written = self._last_time = None

    def before_run(self, run_context):
        self._requested = self._next_step is None or self._due(self._next_step)
        fetches = {"global_step": self._step}
        if self._requested and self._summary_op is not None:
            fetches["summary"] = self._summary_op
        return SessionRunArgs(fetches)

    def after_run(self, run_context, run_values):
        step = int(run_values.results["global_step"]) + 1  # read before this run's update
        if self._next_step is None or self._requested:  # label the summary as TF does: re-read
            step = int(run_context.session.run(self._step))
        if self._next_step is None:  # TensorBoard drops a previous run's events past this step
            self._writer.add_session_log(summary.proto_class("SessionLog")(status="START"), step)
        if self._requested:
            self._last_written, self._last_time = step, time.monotonic()
            if "summary" in run_values.results:
                self._writer.add_summary(run_values.results["summary"], step)
        self._next_step = step + 1

    def end(self, session) -> None:
        self._writer.flush()

    def _due(self, step: int) -> bool:
        if self._last_written is None:
            return True
        if step == self._last_written:
            return False
        if self._secs is not None:
            return time.monotonic() - self._last_time >= self._secs
        return step >= self._last_written + self._steps


class StepCounterHook(SessionRunHook):
    """Write (and log) the global steps per second every ``every_n_steps`` steps or
    ``every_n_secs`` seconds, as the summary ``global_step/sec``."""

    def __init__(self, every_n_steps: int | None = 100, every_n_secs: float | None = None,
                 output_dir: str | None = None, summary_writer=None):
        if (every_n_steps is None) == (every_n_secs is None):
            raise ValueError("StepCounterHook needs exactly one of every_n_steps and every_n_secs")
        self._steps, self._secs = every_n_steps, every_n_secs
        self._output_dir, self._writer = output_dir, summary_writer

    def begin(self) -> None:
        if self._writer is None and self._output_dir:
            self._writer = summary.FileWriterCache.get(self._output_dir)
        self._step = get_global_step()
        if self._step is None:
            raise RuntimeError("StepCounterHook needs a global step: create one with "
                               "tf.train.get_or_create_global_step() before the session")
        self._tag = f"{self._step.op.name}/sec"
        self._last_step = self._last_time = None

    def before_run(self, run_context):
        return SessionRunArgs(self._step)

    def after_run(self, run_context, run_values):
        # the step fetched may have been read before or after this run's update: when it says
        # the count may be due, read it again (after the run) and decide on that
        if not self._due(int(run_values.results) + 1):
            return
        step, now = int(run_context.session.run(self._step)), time.monotonic()
        if self._last_step is not None and not self._due(step):
            return
        if self._last_step is not None and step > self._last_step:
            rate = (step - self._last_step) / (now - self._last_time)
            log.info("%s: %g", self._tag, rate)
            if self._writer is not None:
                value = summary.proto_class("Summary").Value(tag=self._tag, simple_value=rate)
                self._writer.add_summary(summary.proto_class("Summary")(value=[value]), step)
        self._last_step, self._last_time = step, now

    def _due(self, step: int) -> bool:
        if self._last_step is None:
            return True  # the first step starts the clock
        if self._secs is not None:
            return time.monotonic() - self._last_time >= self._secs
        return step >= self._last_step + self._steps


def monitored_session_hooks(checkpoint_dir: str | None, scaffold=None, save_summaries_steps: int | None = 100,
                            save_summaries_secs: float | None = None, summary_dir: str | None = None,
                            log_step_count_steps: int | None = 100, **_other_arguments) -> list:
    """The hooks a chief's ``MonitoredTrainingSession`` adds, as in TF, writing to ``summary_dir`` or
    ``checkpoint_dir``: the speed every ``log_step_count_steps``, and the summaries every
    ``save_summaries_steps`` steps or ``save_summaries_secs`` seconds."""
    output_dir = summary_dir or checkpoint_dir
    if output_dir is None:
        return []
    hooks: list = []
    if log_step_count_steps and log_step_count_steps > 0:
        hooks.append(StepCounterHook(every_n_steps=log_step_count_steps, output_dir=output_dir))
    if save_summaries_secs is not None:
        save_summaries_steps = None
    if save_summaries_steps or save_summaries_secs:
        hooks.append(SummarySaverHook(save_steps=save_summaries_steps, save_secs=save_summaries_secs,
                                      output_dir=output_dir, scaffold=scaffold))
    return hooks
