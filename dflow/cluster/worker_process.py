"""A role's Dask worker as a ``python -m distributed.cli.dask_worker`` subprocess.

``distributed``'s own local workers are started by multiprocessing's *spawn*, which
re-imports the script's main module in each child: a plain script that calls
``tf.cluster.local()`` at its top level (no ``if __name__ == "__main__":``, as TF 1.x
scripts are written) would start a cluster again in every child and fail with a wall of
tracebacks. A worker started as a module of its own never imports the script.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from distributed.deploy.spec import ProcessInterface

__all__ = ["WorkerProcess", "die_with_parent", "import_path_env", "QUIET_DASK"]

CLOSE_TIMEOUT_S = 10.0
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
                     "--death-timeout", str(int(death_timeout))] + (["--resources", resources] if resources
                                                                   else [])
        # Dask's logs only if the user asks for them
        self.env = {**QUIET_DASK, **os.environ, **import_path_env(), **(env or {})}
        self.process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        self.process = await asyncio.create_subprocess_exec(
            *self.argv, env=self.env, preexec_fn=die_with_parent if os.name == "posix" else None)
        await super().start()

    async def close(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.terminate()
            try:
                await asyncio.wait_for(self.process.wait(), CLOSE_TIMEOUT_S)
            except asyncio.TimeoutError:
                self.process.kill()
                await self.process.wait()
        await super().close()
