"""Loaded into every dflow worker process (``dask worker --preload dflow.cluster.worker_preload``).

A worker told to close (SIGTERM, the scheduler's retire) closes its connections while a
heartbeat may still be on its way to the scheduler; Dask then logs that heartbeat's
``CommClosedError`` as an error with a traceback, at the end of a run that went well. The
filter drops that one record, and only while the worker is closing: a heartbeat that fails
while the worker runs is still reported. The same race seen from the other side: the
scheduler removed the worker (a closing cluster does) and answers a heartbeat already on its
way "missing"; Dask warns and the worker closes, as it was about to. That warning goes too: a
worker lost mid-training is named by dflow's liveness check (``dflow/distributed/liveness.py``).
"""

from __future__ import annotations

import logging

WORKER_PRELOAD = ["--preload", __name__]  # the arguments of `dask worker` that load this module
_CLOSING = {"closing", "closed", "closing_gracefully", "failed"}  # (distributed.core.Status names)
_HEARTBEAT_FAILED = "Failed to communicate with scheduler during heartbeat"


class _DropHeartbeatErrorsWhileClosing(logging.Filter):
    def __init__(self, worker):
        super().__init__()
        self.worker = worker

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.getMessage().startswith(_HEARTBEAT_FAILED) and self.worker.status.name in _CLOSING)


def _drop_missed_heartbeat(record: logging.LogRecord) -> bool:
    return record.getMessage() != "Scheduler was unaware of this worker; shutting down."


def dask_setup(worker) -> None:
    """Dask's preload hook, called as the worker starts."""
    logging.getLogger("distributed.worker").addFilter(_DropHeartbeatErrorsWhileClosing(worker))
    logging.getLogger("distributed.worker").addFilter(_drop_missed_heartbeat)
