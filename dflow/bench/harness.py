"""``dflow bench --model ...``: one training configuration, measured as tf_cnn_benchmarks measures it.

:func:`run_benchmark` takes one configuration (model, batch size per device, PS and
worker counts, variable update, synchronous or not, real or synthetic data, cluster,
network) and runs it ``repeats`` times on one cluster, started once (the variables
are reset between repeats). Each worker task runs one between-graph replica
(:func:`_replica`): it builds the model under its
:class:`~dflow.train.variable_update.VariableUpdate`, runs ``num_warmup_batches``
untimed steps, then ``num_batches`` timed ones, and returns per step its time, the
time it waited for data, its own compute, and the bytes each link carried
(``sess.last_run_stats``).

What is printed follows tf_cnn_benchmarks' ``benchmark_cnn.py``: a header, then every
10 steps ``images/sec: MEAN +/- UNCERTAINTY (jitter = JITTER)`` over the timed steps
so far (:func:`speed_stats`), and ``total images/sec`` per repeat. A synchronous step
stands for every device's batch and is timed on worker 0; in asynchronous modes each
worker's own rate is measured and they are summed (:func:`images_per_sec_stats`).

A step's time is the wait for its batch plus ``Session.run``: synthetic data is one
batch generated once in memory (tf_cnn_benchmarks' ``--data_name`` without
``--data_dir``), so it waits for nothing; real data streams from a store through
:class:`dflow.data.Dataset` and its wait is part of the step, as in tf_cnn_benchmarks,
whose input pipeline is in the graph. The record splits the step into data wait,
compute (the worker's own ops) and communication (the rest of ``Session.run``:
transfers, waiting for the PS or for peers).

>>> record = run_benchmark({"model": "mnist_dnn", "batch_size": 32, "num_workers": 2,
...                         "num_batches": 20, "repeats": 2})  # doctest: +SKIP
Model:       mnist_dnn (784-512-512-10 ReLU MLP (MPI-TensorFlow's MNIST-DNN))
...
total images/sec: 1841.2 +/- 12.5 (mean of 2 repeats)
>>> record["images_per_sec"]  # doctest: +SKIP
[1832.3, 1850.0]

It starts a cluster: call it under ``if __name__ == "__main__":`` in a script.
"""

from __future__ import annotations

import contextlib
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from typing import TextIO

from .progress import RepeatProgress, print_header, print_totals
from .records import RECORD_KEYS, append_record, machine, make_record
from .replica import bench_replica
from .settings import (
    BENCH_MODELS,
    CLUSTERS,
    DEFAULT_SETTINGS,
    NETWORKS,
    OPTIMIZERS,
    SettingsError,
    resolve_settings,
    variable_update_for,
)
from .stats import images_per_sec_stats, perf_timing_str, speed_stats
from .trace import TraceEvent, write_chrome_trace

# the settings, statistics and records are re-exported: scripts and sweeps import them from here
__all__ = ["run_benchmark", "resolve_settings", "speed_stats", "images_per_sec_stats", "perf_timing_str",
           "append_record", "machine", "SettingsError", "DEFAULT_SETTINGS", "BENCH_MODELS",
           "CLUSTERS", "NETWORKS", "OPTIMIZERS", "RECORD_KEYS"]

_POLL_S = 0.2
_STOP_WAIT_S = 3


def run_benchmark(settings: Mapping, echo: Callable[[str], None] = print, *, trace: str | None = None,
                  progress: TextIO | None = None) -> dict:
    """Run one configuration ``repeats`` times on one cluster; print as tf_cnn_benchmarks; return the record.

    Parameters
    ----------
    settings : the run's settings (:data:`DEFAULT_SETTINGS` fills what is missing).
    echo : prints a line (the header, the images/sec lines, the totals).
    trace : write a Chrome trace (``chrome://tracing``, Perfetto) of the last repeat's timed steps here.
    progress : where the progress bar goes (default ``sys.stderr``); drawn only on a terminal.

    Returns the record (:data:`RECORD_KEYS`). Raises :class:`SettingsError` for a setting
    that cannot run, before starting anything.
    """
    settings = resolve_settings(settings)
    runs: list[list[dict]] = []
    with _start_cluster(settings) as cluster:
        _match_cluster(settings, cluster.spec)
        print_header(settings, cluster, echo)
        for repeat in range(settings["repeats"]):
            _reset(cluster)
            runs.append(_run_repeat(cluster, settings, repeat, trace is not None, echo,
                                    progress or sys.stderr))
    record = make_record(settings, runs)
    print_totals(record, echo)
    if trace is not None:
        write_chrome_trace(trace, [TraceEvent(*e) for result in runs[-1] for e in result["events"]])
        echo(f"trace of the last repeat's timed steps written to {trace} (open it in chrome://tracing "
             "or https://ui.perfetto.dev)")
    return record


def _start_cluster(settings: dict):
    """The cluster the settings name, as a context manager; started here unless an address."""
    import dflow as tf

    ps, workers = settings["num_ps"], settings["num_workers"] * settings["devices_per_node"]
    if settings["network"] != "none":
        from .network import shaped_cluster

        return shaped_cluster(ps, workers, settings["network"])
    if settings["cluster"] == "local":
        return tf.cluster.local(ps=ps, workers=workers)
    if settings["cluster"] == "cuda":  # the first `workers` GPUs, not all
        return tf.cluster.cuda(ps=ps, workers=workers)
    if settings["cluster"] == "slurm":
        return tf.cluster.slurm(ps=ps, workers=workers)
    from ..cli_cluster import SCHEDULER_CONNECT_S

    return tf.cluster.connect(settings["cluster"], timeout=SCHEDULER_CONNECT_S)  # unreachable: one line


def _match_cluster(settings: dict, spec) -> None:
    """A cluster that chose its own size (cuda: a worker per GPU; an address: its roles) sets
    ``num_ps`` and ``num_workers``; the settings are then checked against it."""
    num_ps = spec.num_tasks("ps") if "ps" in spec.jobs else 0
    tasks = spec.num_tasks("worker") if "worker" in spec.jobs else 0
    if tasks == 0 or tasks % settings["devices_per_node"]:
        raise SettingsError(f"the cluster has {tasks} worker task(s), not a multiple of devices_per_node "
                            f"{settings['devices_per_node']}; its roles are {', '.join(spec.roles())}")
    settings["num_ps"], settings["num_workers"] = num_ps, tasks // settings["devices_per_node"]
    variable_update_for(settings, spec, 0)


def _reset(cluster) -> None:
    import dflow as tf

    tf.Session.reset(cluster.target)  # the previous repeat's variables, plans and barriers


def _run_repeat(cluster, settings: dict, repeat: int, keep_events: bool, echo, stream) -> list[dict]:
    """One repeat: a replica per worker task, followed until all finish; their results by task."""
    import distributed

    from ..distributed.replicate import cancel_replicas, start_replicas
    from ..train.program import interrupt_at_safe_points

    queue = distributed.Queue(f"dflow-bench-{uuid.uuid4().hex[:8]}", client=cluster.client)
    view = RepeatProgress(settings, repeat, echo, stream)
    futures = start_replicas(bench_replica, cluster, cluster.target, cluster.spec, settings, queue.name,
                             repeat, keep_events and repeat == settings["repeats"] - 1)
    try:
        with interrupt_at_safe_points() as interrupted:
            _follow(queue, futures, view, interrupted)
        return cluster.client.gather(futures)
    except KeyboardInterrupt:
        _stop(cluster, futures)
        raise
    finally:
        view.close()
        cancel_replicas(cluster.client, futures)


def _stop(cluster, futures) -> None:
    """Ctrl-C: ask the replicas to end their step and close their sessions, and give them a few
    seconds. Workers that Ctrl-C reached too (an embedded cluster shares the terminal) are skipped
    quickly instead of retried for Dask's 30 s."""
    import dask

    from ..train.program import stop_replicas

    spec = cluster.spec
    workers = [spec.task_address("worker", i) for i in spec.task_indices("worker")]
    with contextlib.suppress(OSError, TimeoutError), \
            dask.config.set({"distributed.comm.timeouts.connect": f"{_STOP_WAIT_S}s"}):
        cluster.client.run(stop_replicas, workers=workers, on_error="ignore")
    deadline = time.monotonic() + _STOP_WAIT_S
    while not all(f.done() for f in futures) and time.monotonic() < deadline:
        time.sleep(_POLL_S)


def _follow(queue, futures, view: RepeatProgress, interrupted) -> None:
    """Hand the replicas' progress to ``view`` until every replica has finished (or one failed)."""
    while not interrupted.is_set():
        while queue.qsize():  # (a get with a timeout would log an error on the scheduler each time)
            view.update(queue.get())
        failed = [f for f in futures if f.status == "error"]
        if failed:
            failed[0].result()  # raises the replica's error here
        if all(f.done() for f in futures):
            while queue.qsize():
                view.update(queue.get())
            return
        interrupted.wait(_POLL_S)
    raise interrupted.exception()  # Ctrl-C, or Terminated for SIGTERM
