"""``tf.train.Coordinator``: threads that stop together, and the first error they report.

>>> import threading, dflow as tf
>>> coord = tf.train.Coordinator()
>>> def work():
...     with coord.stop_on_exception():
...         raise ValueError("bad record")
>>> thread = threading.Thread(target=work); thread.start()
>>> coord.join([thread])
Traceback (most recent call last):
ValueError: bad record
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time

from ..errors import OutOfRangeError

__all__ = ["Coordinator", "LooperThread"]

log = logging.getLogger("dflow")


class Coordinator:
    """A stop flag shared by threads, the first exception reported to it, and ``join`` with a
    grace period (TF 1.x's).

    ``request_stop(ex)`` sets the flag and keeps ``ex`` to re-raise in :meth:`join`; an
    ``OutOfRangeError`` (input exhausted) counts as a clean stop, as
    ``clean_stop_exception_types`` says. Queue runners started with this coordinator close
    their queues when a stop is requested, so a blocked dequeue ends.
    """

    def __init__(self, clean_stop_exception_types=None):
        self._clean_stop_types = tuple(clean_stop_exception_types if clean_stop_exception_types is not None
                                       else (OutOfRangeError,))
        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        self._exc_info = None
        self._registered: set[threading.Thread] = set()
        self._on_stop: list = []
        self._joined = False

    def should_stop(self) -> bool:
        return self._stop_event.is_set()

    def request_stop(self, ex=None) -> None:
        """Ask every thread to stop; ``ex`` (an exception or ``sys.exc_info()``) is re-raised by ``join``."""
        with self._lock:
            if ex is not None and self._exc_info is None and not self._joined:
                info = ex if isinstance(ex, tuple) else (type(ex), ex, ex.__traceback__)
                if not issubclass(info[0], self._clean_stop_types):
                    self._exc_info = info
            if self._stop_event.is_set():
                return
            self._stop_event.set()
            callbacks, self._on_stop = self._on_stop, []
        for callback in callbacks:
            callback()

    def _on_request_stop(self, callback) -> None:
        """Run ``callback()`` when a stop is requested (at once if it already was)."""
        with self._lock:
            if not self._stop_event.is_set():
                self._on_stop.append(callback)
                return
        callback()

    def clear_stop(self) -> None:
        """Forget the stop request and the exception, to start threads again."""
        with self._lock:
            self._joined, self._exc_info = False, None
            self._stop_event.clear()

    def wait_for_stop(self, timeout: float | None = None) -> bool:
        return self._stop_event.wait(timeout)

    @contextlib.contextmanager
    def stop_on_exception(self):
        """``with coord.stop_on_exception():`` reports an exception raised inside to the coordinator."""
        try:
            yield
        except BaseException:
            self.request_stop(sys.exc_info())

    def register_thread(self, thread: threading.Thread) -> None:
        with self._lock:
            self._registered.add(thread)

    def join(self, threads=None, stop_grace_period_secs: float = 120, ignore_live_threads: bool = False):
        """Wait until the threads end (or a stop is requested, then at most ``stop_grace_period_secs``
        more), then re-raise the exception reported to ``request_stop``, if any.

        Raises RuntimeError naming the threads still running after the grace period, unless
        ``ignore_live_threads``.
        """
        with self._lock:
            threads = set(threads or ()) | self._registered
        while any(t.is_alive() for t in threads) and not self.wait_for_stop(1.0):
            pass
        deadline = time.monotonic() + stop_grace_period_secs
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            self._joined = True
            self._registered.clear()
            exc_info = self._exc_info
        stragglers = sorted(t.name for t in threads if t.is_alive())
        if stragglers:
            message = f"Coordinator stopped with threads still running: {' '.join(stragglers)}"
            if not ignore_live_threads:
                raise RuntimeError(message)
            log.warning(message)
        if exc_info is not None:
            raise exc_info[1].with_traceback(exc_info[2])

    @property
    def joined(self) -> bool:
        return self._joined

    def raise_requested_exception(self) -> None:
        """Re-raise the exception reported to ``request_stop``, if any."""
        with self._lock:
            exc_info = self._exc_info
        if exc_info is not None:
            raise exc_info[1].with_traceback(exc_info[2])


class LooperThread(threading.Thread):
    """Calls ``target(*args)`` every ``timer_interval_secs`` until the coordinator stops."""

    def __init__(self, coord: Coordinator, timer_interval_secs, target=None, args=None, kwargs=None):
        super().__init__(daemon=True)
        self._coord, self._interval = coord, timer_interval_secs
        self._target_fn, self._args, self._kwargs = target, tuple(args or ()), dict(kwargs or {})
        coord.register_thread(self)

    def run(self) -> None:
        with self._coord.stop_on_exception():
            while not self._coord.should_stop():
                self.run_loop()
                if self._interval is None or self._coord.wait_for_stop(self._interval):
                    break

    def run_loop(self) -> None:
        if self._target_fn is not None:
            self._target_fn(*self._args, **self._kwargs)

    @staticmethod
    def loop(coord, timer_interval_secs, target, args=None, kwargs=None) -> LooperThread:
        thread = LooperThread(coord, timer_interval_secs, target, args, kwargs)
        thread.start()
        return thread
