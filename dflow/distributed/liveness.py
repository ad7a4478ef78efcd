"""Who is alive: the client's watch over a cluster's roles while replicas run.

A replica is pinned to its worker's address. When that worker dies, Dask keeps the
replica's task waiting for a worker that will never come back (a nanny restarts the
role at a *new* address), and no error ever reaches the client. So the client
watches the roles instead: :class:`RoleWatch` remembers the address each role had
when the replicas started and, polled from the follow loop, reports a role whose
worker left or came back elsewhere as :class:`RoleLostError`, naming the role,
its old address and when it was seen gone.

>>> watch = RoleWatch(cluster.client)  # doctest: +SKIP
>>> watch.check()  # raises RoleLostError("worker/1 at tcp://...: its worker died ...")  # doctest: +SKIP
"""

from __future__ import annotations

import datetime
import time

from ..cluster.spec import task_of, worker_infos
from ..errors import UnavailableError

__all__ = ["RoleWatch", "RoleLostError", "roles_alive"]


class RoleLostError(UnavailableError):
    """The worker holding ``role`` died or left while replicas ran (``at``: ``time.time()``)."""

    def __init__(self, role: str, address: str, at: float, came_back_at: str | None = None):
        when = datetime.datetime.fromtimestamp(at).strftime("%H:%M:%S")
        back = (f"; it came back at {came_back_at} with none of its state" if came_back_at
                else "; no worker holds it now")
        super().__init__(f"{role} (at {address}) died or left the cluster at {when}{back}")
        self.role, self.address, self.at, self.came_back_at = role, address, at, came_back_at


def roles_alive(client) -> dict[str, str]:
    """Role (``"worker/1"``) -> address of every worker that holds a dflow role now."""
    roles = {}
    for address, info in worker_infos(client).items():
        if task_of(info.get("name")) is not None:
            roles[str(info["name"])] = address
    return roles


class RoleWatch:
    """The roles a run started with, and a cheap check that each still has its worker."""

    def __init__(self, client, roles: dict[str, str] | None = None):
        self.client = client
        self.started = roles if roles is not None else roles_alive(client)

    def lost(self) -> list[RoleLostError]:
        """The roles whose worker is gone or was replaced (one scheduler call)."""
        now, alive = time.time(), roles_alive(self.client)
        return [RoleLostError(role, address, now, alive.get(role))
                for role, address in sorted(self.started.items()) if alive.get(role) != address]

    def check(self) -> None:
        """Raise :class:`RoleLostError` for the first role that lost its worker."""
        lost = self.lost()
        if lost:
            raise lost[0]
