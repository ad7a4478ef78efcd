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
from ..errors import ResourceExhaustedError, UnavailableError

__all__ = ["RoleWatch", "RoleLostError", "roles_alive", "PAUSED_LIMIT_S"]

# A Dask worker above distributed.worker.memory.pause of its memory limit runs no task: a replica
# waiting to start on it would wait forever. Paused this long, the run ends saying so.
PAUSED_LIMIT_S = 60.0


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
    return {role: address for role, (address, _) in _holders(client).items()}


def _holders(client, infos: dict | None = None) -> dict[str, tuple[str, str]]:
    """Role -> (address, Dask worker id): a worker restarted at the same address has a new id."""
    infos = worker_infos(client) if infos is None else infos
    return {str(info["name"]): (address, str(info.get("id")))
            for address, info in infos.items() if task_of(info.get("name")) is not None}


class RoleWatch:
    """The roles a run started with, and a cheap check that each still has its worker."""

    def __init__(self, client, roles=None):
        """Watch every role the cluster has now, or only ``roles`` (an elastic run's members)."""
        self.client = client
        self._holders = {role: holder for role, holder in _holders(client).items()
                         if roles is None or role in set(roles)}
        self.started = {role: address for role, (address, _) in self._holders.items()}  # role -> address
        self._paused_since: dict[str, float] = {}

    def lost(self, infos: dict | None = None) -> list[RoleLostError]:
        """The roles whose worker is gone or was replaced, also at its address (one scheduler call)."""
        now, holders = time.time(), _holders(self.client, infos)
        return [RoleLostError(role, address, now, holders[role][0] if role in holders else None)
                for role, (address, _) in sorted(self._holders.items())
                if holders.get(role) != self._holders[role]]

    def check(self) -> None:
        """Raise :class:`RoleLostError` for the first role that lost its worker, or
        ResourceExhaustedError for one whose worker has been paused for PAUSED_LIMIT_S."""
        infos = worker_infos(self.client)
        lost = self.lost(infos)
        if lost:
            raise lost[0]
        now = time.monotonic()
        paused = {str(info["name"]): info for info in infos.values()
                  if info.get("status") == "paused" and str(info.get("name")) in self._holders}
        self._paused_since = {role: self._paused_since.get(role, now) for role in paused}
        for role, since in sorted(self._paused_since.items()):
            if now - since > PAUSED_LIMIT_S:
                limit = paused[role].get("memory_limit") or 0
                raise ResourceExhaustedError(
                    f"{role}'s Dask worker has been paused for {now - since:.0f} s: its memory is above "
                    f"distributed.worker.memory.pause of its limit ({limit / 2**30:.2f} GiB), so its "
                    "replica cannot run. Give the workers more memory (tf.cluster.slurm(memory=...)), "
                    "or a smaller --batch_size")
