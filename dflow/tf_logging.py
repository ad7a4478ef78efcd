"""``tf.logging``: TF 1.x's logging functions over Python's ``logging`` (the ``"dflow"`` logger).

As in TF 1.x, messages below WARN are hidden until ``set_verbosity`` lowers the
threshold (until then it follows Python's root logger), and lines read
``INFO:dflow:message`` on stderr. The threshold is the ``"dflow"`` logger's level,
so it also governs what dflow itself logs. The ``"dflow"`` logger reports to Python's
``"tensorflow"`` logger, the one TF 1.x logs to: a script's handlers and level there
(``logging.getLogger('tensorflow').addHandler(...)``) apply to dflow's records too.

>>> import dflow as tf
>>> tf.logging.set_verbosity(tf.logging.INFO)
>>> tf.logging.get_verbosity() == tf.logging.INFO
True
>>> tf.logging.set_verbosity(tf.logging.WARN)
"""

from __future__ import annotations

import logging as _logging
import sys
import threading

__all__ = ["DEBUG", "INFO", "WARN", "ERROR", "FATAL", "set_verbosity", "get_verbosity", "get_logger",
           "log", "debug", "info", "warn", "warning", "error", "fatal", "vlog", "log_every_n",
           "log_first_n", "log_if", "flush", "TaskLevelStatusMessage"]

DEBUG = _logging.DEBUG
INFO = _logging.INFO
WARN = _logging.WARN
ERROR = _logging.ERROR
FATAL = _logging.FATAL

_LOGGER_NAME = "dflow"
# the records go on to TF's logger, where TF 1.x scripts configure logging, then to the root
_logging.getLogger(_LOGGER_NAME).parent = _logging.getLogger("tensorflow")
_handler_lock = threading.Lock()
_handler: _logging.Handler | None = None
_counts: dict[tuple, int] = {}


def get_logger() -> _logging.Logger:
    """The ``"dflow"`` logger, given a stderr handler on first use unless the program
    configured Python's root logger itself (then its handlers print, as in TF 1.x)."""
    global _handler
    logger = _logging.getLogger(_LOGGER_NAME)
    if _handler is None:
        with _handler_lock:
            if _handler is None and not _logging.getLogger().handlers:
                _handler = _logging.StreamHandler(sys.stderr)
                _handler.setFormatter(_logging.Formatter(_logging.BASIC_FORMAT))
                logger.addHandler(_handler)
    return logger


def set_verbosity(v: int) -> None:
    """Show messages at level ``v`` (``tf.logging.INFO``, ...) and above."""
    get_logger().setLevel(v)


def get_verbosity() -> int:
    return get_logger().getEffectiveLevel()


def log(level: int, msg, *args, **kwargs) -> None:
    get_logger().log(level, msg, *args, **kwargs)


def debug(msg, *args, **kwargs) -> None:
    get_logger().debug(msg, *args, **kwargs)


def info(msg, *args, **kwargs) -> None:
    get_logger().info(msg, *args, **kwargs)


def warning(msg, *args, **kwargs) -> None:
    get_logger().warning(msg, *args, **kwargs)


warn = warning


def error(msg, *args, **kwargs) -> None:
    get_logger().error(msg, *args, **kwargs)


def fatal(msg, *args, **kwargs) -> None:
    """Log at FATAL; as in TF 1.x, the program goes on (raise or exit to stop it)."""
    get_logger().fatal(msg, *args, **kwargs)


def vlog(level: int, msg, *args, **kwargs) -> None:
    get_logger().log(level, msg, *args, **kwargs)


def _count_at_call_site() -> int:
    """How many times the line calling ``log_every_n``/``log_first_n`` has called it (0 first)."""
    caller = sys._getframe(2)
    site = (caller.f_code.co_filename, caller.f_lineno)
    with _handler_lock:
        count = _counts.get(site, 0)
        _counts[site] = count + 1
    return count


def log_every_n(level: int, msg, n: int, *args) -> None:
    """Log on this line's 1st, (n+1)th, (2n+1)th... call."""
    if _count_at_call_site() % max(n, 1) == 0:
        log(level, msg, *args)


def log_first_n(level: int, msg, n: int, *args) -> None:
    """Log on this line's first ``n`` calls only."""
    if _count_at_call_site() < n:
        log(level, msg, *args)


def log_if(level: int, msg, condition, *args) -> None:
    if condition:
        log(level, msg, *args)


def flush() -> None:
    for handler in get_logger().handlers:
        handler.flush()


def TaskLevelStatusMessage(msg) -> None:  # noqa: N802 - TF 1.x's name
    error(msg)
