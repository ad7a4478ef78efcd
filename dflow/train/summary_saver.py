"""``tf.train.SummarySaverHook``: a ``MonitoredTrainingSession`` hook writing summaries."""

from __future__ import annotations

import time

from .. import summary
from .monitored_session import SessionRunArgs, SessionRunHook
from .training_util import get_global_step

__all__ = ["SummarySaverHook", "monitored_session_hooks"]


class SummarySaverHook(SessionRunHook):
    """``tf.train.SummarySaverHook``: in a ``MonitoredTrainingSession``, write ``summary_op`` (default
    ``tf.summary.merge_all()``) every ``save_steps`` global steps or ``save_secs`` seconds.

    >>> hook = tf.train.SummarySaverHook(save_steps=10, output_dir="/tmp/logs",
    ...                                  summary_op=tf.summary.merge_all())  # doctest: +SKIP
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


def monitored_session_hooks(checkpoint_dir: str | None, scaffold=None, save_summaries_steps: int | None = 100,
                            save_summaries_secs: float | None = None, summary_dir: str | None = None,
                            **_other_arguments) -> list[SummarySaverHook]:
    """The summary hook a chief's ``MonitoredTrainingSession`` adds, as in TF: to ``summary_dir`` or
    ``checkpoint_dir``, every ``save_summaries_steps`` steps or ``save_summaries_secs`` seconds."""
    output_dir = summary_dir or checkpoint_dir
    if save_summaries_secs is not None:
        save_summaries_steps = None
    if output_dir is None or (save_summaries_steps is None and save_summaries_secs is None):
        return []
    return [SummarySaverHook(save_steps=save_summaries_steps, save_secs=save_summaries_secs,
                             output_dir=output_dir, scaffold=scaffold)]
