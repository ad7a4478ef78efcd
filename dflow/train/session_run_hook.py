"""``SessionRunHook`` and what a hook sees of a ``run`` (TF's ``session_run_hook``): the base of
``MonitoredTrainingSession``'s hooks, apart from the session so that hook modules need not import it.

>>> class CountRuns(SessionRunHook):
...     runs = 0
...     def after_run(self, run_context, run_values):
...         self.runs += 1
>>> hook = CountRuns()
>>> hook.after_run(None, SessionRunValues(results=None)); hook.runs
1
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["SessionRunHook", "SessionRunArgs", "SessionRunContext", "SessionRunValues"]


class SessionRunArgs(NamedTuple):
    """What a hook adds to a ``run``: extra fetches (and feeds)."""

    fetches: Any
    feed_dict: dict | None = None


class SessionRunValues(NamedTuple):
    results: Any


class SessionRunContext:
    """What a hook sees of a ``run``; :meth:`request_stop` ends the training loop."""

    def __init__(self, original_args: SessionRunArgs, session):
        self.original_args = original_args
        self.session = session
        self.stop_requested = False

    def request_stop(self) -> None:
        self.stop_requested = True


class SessionRunHook:
    """Base class: override what you need (all default to doing nothing)."""

    def begin(self) -> None:
        """Called once before the session exists: the graph may still grow here."""

    def after_create_session(self, session, coord) -> None:
        """Called once the variables are ready."""

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs | None:
        return None

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        pass

    def end(self, session) -> None:
        pass
