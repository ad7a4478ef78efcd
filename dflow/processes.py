"""What dflow asks of the operating system about other processes."""

from __future__ import annotations

import os

__all__ = ["alive"]


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
