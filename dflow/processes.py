"""What dflow asks of the operating system about other processes."""

from __future__ import annotations

import functools
import os

__all__ = ["alive", "pid_namespace"]


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (in this PID namespace): a leftover named by a dead
    process's id (a lock, a shared-memory segment, a network namespace) is anyone's to remove.

    >>> alive(os.getpid())
    True
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


@functools.cache
def pid_namespace() -> int:
    """This process's PID namespace (its inode), 0 where there is none to read: a leftover
    named by a process id is judged only in the namespace that named it."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0
