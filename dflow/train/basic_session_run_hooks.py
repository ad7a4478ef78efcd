"""TF 1.x's everyday hooks for ``MonitoredTrainingSession``: stop on a NaN loss, log tensors
(``StepCounterHook`` lives beside ``SummarySaverHook``: it writes a summary).

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     step = tf.train.get_or_create_global_step()
...     loss = tf.constant(0.5) * tf.cast(step, tf.float32)
...     train_op = tf.assign_add(step, 1)
...     hooks = [tf.train.NanTensorHook(loss), tf.train.LoggingTensorHook({"loss": loss}, every_n_iter=2),
...              tf.train.StopAtStepHook(last_step=3)]
...     with tf.train.MonitoredTrainingSession(hooks=hooks) as sess:
...         while not sess.should_stop():
...             _ = sess.run(train_op)
"""

from __future__ import annotations

import logging
import time

import numpy

from .session_run_hook import SessionRunArgs, SessionRunHook

__all__ = ["NanTensorHook", "NanLossDuringTrainingError", "LoggingTensorHook", "FeedFnHook"]

log = logging.getLogger("dflow")


class NanLossDuringTrainingError(RuntimeError):
    def __str__(self) -> str:
        return "NaN loss during training."


class NanTensorHook(SessionRunHook):
    """Stop (or raise :class:`NanLossDuringTrainingError`, the default) when ``loss_tensor`` is NaN."""

    def __init__(self, loss_tensor, fail_on_nan_loss: bool = True):
        self._loss, self._fail = loss_tensor, fail_on_nan_loss

    def before_run(self, run_context):
        return SessionRunArgs(self._loss)

    def after_run(self, run_context, run_values):
        if numpy.isnan(run_values.results).any():
            if self._fail:
                log.error("Model diverged with loss = NaN.")
                raise NanLossDuringTrainingError
            log.warning("Model diverged with loss = NaN.")
            run_context.request_stop()


def _as_graph_tensor(name_or_tensor):
    """The tensor a hook's string names: ``"op:i"``, or ``"op"`` for an op with one output."""
    if not isinstance(name_or_tensor, str):
        return name_or_tensor
    from ..graph import get_default_graph

    graph = get_default_graph()
    if ":" in name_or_tensor:
        return graph.as_graph_element(name_or_tensor)
    op = graph.as_graph_element(name_or_tensor)
    outputs = getattr(op, "outputs", None)
    if outputs is None:  # already a tensor
        return op
    if len(outputs) != 1:
        raise ValueError(f"Name {name_or_tensor} is ambiguous, as this `Operation` has {len(outputs)} "
                         f"outputs: name one of them, {name_or_tensor}:0 ...")
    return outputs[0]


class LoggingTensorHook(SessionRunHook):
    """Log ``tensors`` (a dict name -> tensor, or a list) every ``every_n_iter`` runs or
    ``every_n_secs`` seconds, and at the end with ``at_end``; ``formatter(values)`` shapes the line."""

    def __init__(self, tensors, every_n_iter: int | None = None, every_n_secs: float | None = None,
                 at_end: bool = False, formatter=None):
        if (every_n_iter is None) == (every_n_secs is None) and not at_end:
            raise ValueError("LoggingTensorHook needs at_end=True and/or exactly one of every_n_iter and "
                             "every_n_secs")
        if every_n_iter is not None and every_n_iter <= 0:
            raise ValueError(f"invalid every_n_iter={every_n_iter}")
        self._tensors = tensors if isinstance(tensors, dict) else {
            getattr(t, "name", str(t)): t for t in tensors}
        self._every_n_iter, self._every_n_secs, self._at_end = every_n_iter, every_n_secs, at_end
        self._formatter = formatter
        self._iter, self._last_time = 0, None

    def begin(self) -> None:
        # as TF's: a name without ":i" means the op's only output ('train_accuracy' logs the tensor
        # that tf.identity(..., name='train_accuracy') made, not the op's None)
        self._tensors = {tag: _as_graph_tensor(t) for tag, t in self._tensors.items()}

    def _due(self) -> bool:
        if self._every_n_iter is not None:
            return self._iter % self._every_n_iter == 0
        return self._every_n_secs is not None and (
            self._last_time is None or time.monotonic() - self._last_time >= self._every_n_secs)

    def before_run(self, run_context):
        self._should_log = self._due()
        return SessionRunArgs(self._tensors) if self._should_log else None

    def after_run(self, run_context, run_values):
        if self._should_log:
            self._log(run_values.results)
        self._iter += 1

    def end(self, session) -> None:
        if self._at_end:
            self._log(session.run(self._tensors))

    def _log(self, values: dict) -> None:
        self._last_time = time.monotonic()
        if self._formatter is not None:
            log.info(self._formatter(values))
        else:
            log.info(", ".join(f"{tag} = {values[tag]}" for tag in self._tensors))


class FeedFnHook(SessionRunHook):
    """Adds ``feed_fn()``'s dict to every run's feeds."""

    def __init__(self, feed_fn):
        self.feed_fn = feed_fn

    def before_run(self, run_context):
        return SessionRunArgs(fetches=None, feed_dict=self.feed_fn())
