"""What dflow asks of the operating system about other processes."""

from __future__ import annotations

import functools
import os
import re

__all__ = ["alive", "pid_namespace", "left_by_dead_processes"]


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


def left_by_dead_processes(directory: str, pattern: re.Pattern) -> list[str]:
    """The paths in ``directory`` that this user's processes named for themselves and left when
    they were killed: names ``pattern`` matches with the PID namespace as its first group and the
    process id as its second, of this namespace and of a process that no longer runs."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    left = []
    for name in names:
        match = pattern.fullmatch(name)
        if match is None or int(match.group(1)) != pid_namespace() or alive(int(match.group(2))):
            continue  # (a process id means nothing in another container's namespace)
        path = os.path.join(directory, name)
        try:
            if os.stat(path).st_uid == os.getuid():
                left.append(path)
        except OSError:  # (removed meanwhile)
            pass
    return left
