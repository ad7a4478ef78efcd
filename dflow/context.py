"""The defaults TF 1.x code builds and runs in, per thread: the default graph stack (``with
graph.as_default():``) and the default session stack (``with tf.Session():``, ``sess.as_default()``).

Both live here, below :mod:`dflow.graph` and :mod:`dflow.runtime.session`, so that a tensor's
``eval()`` finds the default session without the graph importing the runtime.

>>> from dflow.context import default_sessions, get_default_session
>>> with default_sessions.pushed("a session"):
...     get_default_session()
'a session'
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["DefaultStack", "default_graphs", "default_sessions", "get_default_session", "session_or_default"]


class DefaultStack(threading.local):
    """A stack of defaults, one per thread: the innermost ``with`` block's is on top."""

    def __init__(self):
        self.stack: list[Any] = []

    def top(self) -> Any | None:
        return self.stack[-1] if self.stack else None

    @contextlib.contextmanager
    def pushed(self, value: Any) -> Iterator[Any]:
        """``value`` is the default inside the block."""
        self.stack.append(value)
        try:
            yield value
        finally:
            self.stack.pop()


default_graphs = DefaultStack()  # graphs made the default (the global default graph is not on it)
default_sessions = DefaultStack()


def get_default_session():
    """The innermost ``with tf.Session()`` (or ``sess.as_default()``) session of this thread, or
    None outside one (as TF's)."""
    return default_sessions.top()


def session_or_default(session, doing: str):
    """``session``, else the default one; where there is neither, TF's error naming what was
    ``doing`` (``"evaluate tensor using `eval()`"``)."""
    session = session or get_default_session()
    if session is None:
        raise ValueError(f"Cannot {doing}: No default session is registered. Use `with tf.Session() as "
                         "sess:` or `with sess.as_default():`, or pass the session explicitly (session=sess)")
    return session
