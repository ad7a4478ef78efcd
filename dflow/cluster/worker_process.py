"""A role's Dask worker as a ``python -m distributed.cli.dask_worker`` subprocess.

``distributed``'s own local workers are started by multiprocessing's *spawn*, which
re-imports the script's main module in each child: a plain script that calls
``tf.cluster.local()`` at its top level (no ``if __name__ == "__main__":``, as TF 1.x
scripts are written) would start a cluster again in every child and fail with a wall of
tracebacks. A worker started as a module of its own never imports the script.

Each worker runs in a process group of its own: Ctrl-C in a terminal signals the whole
foreground group, and workers that caught it too would print KeyboardInterrupt tracebacks
while the client still needs them to stop the replicas and save a last checkpoint. And a
worker that dies (SIGKILL, the OOM killer) is started again under its role's name, as a
nanny would restart it: at a new address, with none of its variables (the replicas restore
them from the latest checkpoint, see ``dflow train --max_failures``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time

from distributed.deploy.spec import ProcessInterface

from .worker_preload import WORKER_PRELOAD

__all__ = ["WorkerProcess", "die_with_parent", "import_path_env", "QUIET_DASK", "MAX_RESTARTS"]

log = logging.getLogger("dflow")
CLOSE_TIMEOUT_S = 10.0
MAX_RESTARTS = 10  # a role whose process keeps dying stays down after this many restarts
QUIET_DASK = {"DASK_LOGGING__DISTRIBUTED": "warning"}  # a worker's INFO chatter drowns the script's output


def import_path_env() -> dict[str, str]:
    """``PYTHONPATH`` carrying this process's ``sys.path``, as multiprocessing's spawn passes it:
    a worker must import the modules whose functions it is sent (``tf.replicate``'s, a test's)."""
    paths = [os.getcwd() if entry == "" else entry for entry in sys.path]
    return {"PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}


def die_with_parent() -> None:
    """In the child, before exec: be sent SIGTERM when the process that started it dies
    (Linux), so that a killed script leaves no worker behind."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_DEATHSIG
    except (OSError, AttributeError):
        pass


class WorkerProcess(ProcessInterface):
    """One Dask worker process for ``SpecCluster.worker_spec`` (``{"cls": WorkerProcess,
    "options": {...}}``), named after its role, with its resources and environment."""

    def __init__(self, scheduler: str, name: str, nthreads: int = 1, resources: dict | None = None,
                 env: dict | None = None, host: str = "127.0.0.1", death_timeout: float = 60):
        super().__init__(scheduler, name)
        resources = " ".join(f"{key}={value}" for key, value in (resources or {}).items())
        self.argv = [sys.executable, "-m", "distributed.cli.dask_worker", scheduler, "--name", str(name),
                     "--nthreads", str(nthreads), "--no-nanny", "--no-dashboard", "--host", host,
                     # (its HTTP server, /health and /metrics, is served with or without a dashboard)
                     "--dashboard-address", f"{host}:0",
                     "--death-timeout", str(int(death_timeout)), *WORKER_PRELOAD] + (
                         ["--resources", resources] if resources else [])
        # Dask's logs only if the user asks for them
        self.env = {**QUIET_DASK, **os.environ, **import_path_env(), **(env or {})}
        self.process: asyncio.subprocess.Process | None = None
        self.name = str(name)
        self.deaths: list[tuple[float, int]] = []  # (time.time(), returncode) of each unexpected exit
        self._closing = False
        self._watch: asyncio.Task | None = None

    async def start(self) -> None:
        await self._spawn()
        self._watch = asyncio.ensure_future(self._restart_when_killed())
        await super().start()

    async def _spawn(self) -> None:
        posix = os.name == "posix"
        self.process = await asyncio.create_subprocess_exec(
            *self.argv, env=self.env, start_new_session=posix, preexec_fn=die_with_parent if posix else None)

    async def _restart_when_killed(self) -> None:
        """Start the role's process again when it dies by a signal or an error (not when the
        scheduler retired it: it then exits with 0)."""
        while True:
            returncode = await self.process.wait()
            if self._closing or returncode == 0 or len(self.deaths) >= MAX_RESTARTS:
                return
            self.deaths.append((time.time(), returncode))
            log.info("%s died (exit status %s); starting it again", self.name, returncode)
            await self._spawn()

    async def close(self) -> None:
        self._closing = True
        if self._watch is not None:
            self._watch.cancel()
        if self.process is not None and self.process.returncode is None:
            self.process.terminate()
            try:
                await asyncio.wait_for(self.process.wait(), CLOSE_TIMEOUT_S)
            except asyncio.TimeoutError:
                self.process.kill()
                await self.process.wait()
        await super().close()
