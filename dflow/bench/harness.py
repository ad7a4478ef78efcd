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
import itertools
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TextIO

import numpy as np

from ..cluster.spec import device_role
from ..train.allreduce import DEFAULT_FUSION_BYTES
from .trace import TraceEvent, timeline_events, write_chrome_trace

__all__ = ["run_benchmark", "resolve_settings", "speed_stats", "images_per_sec_stats", "perf_timing_str",
           "append_record", "machine", "SettingsError", "DEFAULT_SETTINGS", "BENCH_MODELS",
           "CLUSTERS", "NETWORKS", "OPTIMIZERS", "RECORD_KEYS"]

#: every setting of a run, with its default (``batch_size`` None: the model's own)
DEFAULT_SETTINGS: Mapping = MappingProxyType({
    "model": "cifar10", "batch_size": None, "num_workers": 1, "num_ps": 1,
    "variable_update": "parameter_server", "sync": True, "data_dir": None, "data_format": "NHWC",
    "num_warmup_batches": 10, "num_batches": 100, "repeats": 5, "cluster": "local", "network": "none",
    "ps_strategy": "round_robin", "devices_per_node": 1, "optimizer": "sgd", "eval_accuracy": False,
    # the allreduce's techniques (replicated, distributed_replicated, allreduce)
    "fusion_bytes": DEFAULT_FUSION_BYTES, "overlap": True, "compact_gradient_transfer": False,
    "allreduce_algorithm": "auto",
})
BENCH_MODELS = ("cifar10", "deep_mnist", "mnist_dnn", "inception3", "resnet50")
CLUSTERS = ("local", "cuda", "slurm")  # or a scheduler's ADDRESS
NETWORKS = ("none", "1gbit", "10gbit")
OPTIMIZERS = {"sgd": 0.01, "momentum": 0.01, "adam": 1e-3}  # and the learning rate each runs with
RECORD_KEYS = ("settings", "machine", "images_per_sec", "images_per_sec_mean", "images_per_sec_std",
               "step_times_s", "bytes_per_step", "param_bytes", "data_wait_s_per_step",
               "compute_s_per_step", "communication_s_per_step", "scaled_down", "preset", "accuracy",
               "time_to_steps_s")
DISPLAY_EVERY = 10  # steps between images/sec lines, as tf_cnn_benchmarks' --display_every
_POLL_S = 0.2
_STOP_WAIT_S = 3


class SettingsError(ValueError):
    """A setting that cannot run; the message says which and what to use instead."""


# ---- settings -------------------------------------------------------------------------------------
def resolve_settings(settings: Mapping) -> dict:
    """``settings`` completed with :data:`DEFAULT_SETTINGS` and checked; raises :class:`SettingsError`.

    >>> resolve_settings({"model": "mnist_dnn"})["batch_size"]  # the model's default
    64
    >>> resolve_settings({"model": "resnet"})
    Traceback (most recent call last):
    ...
    dflow.bench.harness.SettingsError: unknown model 'resnet'; choose one of cifar10, deep_mnist, \
mnist_dnn, inception3, resnet50
    """
    unknown = sorted(set(settings) - set(DEFAULT_SETTINGS))
    if unknown:
        raise SettingsError(f"unknown setting(s) {', '.join(unknown)}; the settings are "
                            f"{', '.join(DEFAULT_SETTINGS)}")
    resolved = {**DEFAULT_SETTINGS, **settings}
    model = _check_model(resolved["model"])
    if resolved["batch_size"] is None:
        resolved["batch_size"] = model.train_defaults["batch_size"]
    _check_numbers(resolved)
    _check_choices(resolved)
    if resolved["data_dir"] is not None:
        resolved["data_dir"] = _store(resolved["data_dir"])
    _variable_update(resolved, _planned_spec(resolved), 0)  # its own checks: async allreduce, ...
    return resolved


def _check_model(name: str):
    from ..models import MODELS

    if name not in BENCH_MODELS:
        raise SettingsError(f"unknown model {name!r}; choose one of {', '.join(BENCH_MODELS)}")
    return MODELS[name]


def _check_numbers(s: dict) -> None:
    at_least = {"batch_size": 1, "num_workers": 1, "num_batches": 1, "repeats": 1, "devices_per_node": 1,
                "num_ps": 0, "num_warmup_batches": 0, "fusion_bytes": 0}
    for key, low in at_least.items():
        if not isinstance(s[key], int) or isinstance(s[key], bool) or s[key] < low:
            raise SettingsError(f"{key} must be an integer of at least {low}, got {s[key]!r}")


def _check_choices(s: dict) -> None:
    from ..distributed.collective import ALGORITHMS
    from ..models import DATA_FORMATS
    from ..train.variable_update import PS_STRATEGIES, VARIABLE_UPDATES

    choices = {"variable_update": VARIABLE_UPDATES, "data_format": DATA_FORMATS, "network": NETWORKS,
               "ps_strategy": PS_STRATEGIES, "optimizer": tuple(OPTIMIZERS), "sync": (True, False),
               "eval_accuracy": (True, False), "overlap": (True, False),
               "compact_gradient_transfer": (True, False), "allreduce_algorithm": ALGORITHMS}
    for key, allowed in choices.items():
        if s[key] not in allowed:
            raise SettingsError(f"{key} must be one of {', '.join(map(str, allowed))}, got {s[key]!r}")
    cluster = s["cluster"]
    if cluster not in CLUSTERS and ":" not in str(cluster):
        raise SettingsError(f"cluster must be {', '.join(CLUSTERS)} or a Dask scheduler's address "
                            f"(tcp://HOST:8786), got {cluster!r}")
    if s["network"] != "none" and cluster != "local":
        raise SettingsError(f"network {s['network']} shapes the links of a cluster it starts on this "
                            f"machine: it needs cluster local, not {cluster!r}")


def _store(data_dir: str) -> str:
    from ..cli_data import store_path

    path = store_path(str(data_dir))
    if path is None:
        raise SettingsError(f"data_dir {data_dir!r} is not a store: prepare one with `dflow data prepare "
                            "NAME --source FILE` (datasets/NAME.zarr), or leave data_dir out for "
                            "synthetic data")
    return path


def _planned_spec(s: Mapping) -> dict:
    """The cluster ``s`` asks for, with placeholder addresses: enough for VariableUpdate's checks."""
    workers = s["num_workers"] * s["devices_per_node"]
    return {"ps": [f"planned:{i}" for i in range(s["num_ps"])],
            "worker": [f"planned:{s['num_ps'] + i}" for i in range(workers)]}


def _variable_update(s: Mapping, spec, task_index: int):
    from ..train.variable_update import VariableUpdate

    try:
        return VariableUpdate(s["variable_update"], spec, task_index, sync=s["sync"],
                              devices_per_node=s["devices_per_node"], ps_strategy=s["ps_strategy"],
                              fusion_bytes=s["fusion_bytes"], overlap=s["overlap"],
                              compression="fp16" if s["compact_gradient_transfer"] else None,
                              algorithm=s["allreduce_algorithm"])
    except ValueError as error:
        raise SettingsError(str(error)) from error


# ---- tf_cnn_benchmarks' numbers -----------------------------------------------------------------
def speed_stats(images_per_step: int, step_times: Sequence[float]) -> tuple[float, float, float]:
    """(images/sec, uncertainty, jitter) of steps, as tf_cnn_benchmarks' ``get_perf_timing``:
    the mean speed is images over the mean step time; the uncertainty is the standard deviation
    of the per-step speeds over sqrt(steps); the jitter is 1.4826 x their median absolute
    deviation (a robust standard deviation).

    >>> [round(x, 1) for x in speed_stats(100, [0.1, 0.1, 0.2, 0.1])]
    [800.0, 108.3, 0.0]
    """
    times = np.asarray(step_times, dtype=float)
    speeds = images_per_step / times
    mean = images_per_step / times.mean()
    uncertainty = float(np.std(speeds) / math.sqrt(len(speeds)))
    jitter = float(1.4826 * np.median(np.abs(speeds - np.median(speeds))))
    return float(mean), uncertainty, jitter


def images_per_sec_stats(per_task: Mapping[int, tuple[int, Sequence[float]]], batch_size: int,
                         devices: int) -> tuple[float, float, float]:
    """The cluster's (images/sec, uncertainty, jitter) from each replica's (images per step, step times).

    A fully synchronous step stands for ``batch_size x devices`` images and is timed on
    worker 0, as tf_cnn_benchmarks does; otherwise every replica's own rate counts and
    they are summed (uncertainty and jitter added in quadrature, the replicas being
    independent).
    """
    chief_images, chief_times = per_task[0]
    if chief_images == batch_size * devices:
        return speed_stats(chief_images, chief_times)
    each = [speed_stats(batch_size, times) for _, times in per_task.values() if len(times)]
    return (sum(m for m, _, _ in each), math.hypot(*(u for _, u, _ in each)),
            math.hypot(*(j for _, _, j in each)))


def perf_timing_str(step: int, stats: tuple[float, float, float], loss: float) -> str:
    """tf_cnn_benchmarks' progress line.

    >>> perf_timing_str(10, (95.04, 0.21, 0.5), 7.849)
    '10\\timages/sec: 95.0 +/- 0.2 (jitter = 0.5)\\t7.849'
    """
    mean, uncertainty, jitter = stats
    return f"{step}\timages/sec: {mean:.1f} +/- {uncertainty:.1f} (jitter = {jitter:.1f})\t{loss:.3f}"


# ---- one replica, inside its worker ------------------------------------------------------------
def _replica(task_index: int, target: str, spec, settings: dict, progress_name: str, repeat: int,
             keep_events: bool) -> dict:
    """One worker task's benchmark: warm-up steps, timed steps; per step what it cost."""
    import distributed

    import dflow as tf
    from dflow.models import get_model
    from dflow.train.program import STOP

    model = get_model(settings["model"])
    update = _variable_update(settings, spec, task_index)
    data, batches = _replica_data(settings, model, task_index, len(update.workers))
    tf.set_random_seed(repeat)  # each repeat its own weights, every replica the chief's
    with tf.device(update.device()):
        g = _build_graph(model, settings, update)
    feed_extra = {g.keep_prob: model.train_defaults["keep_prob"]} if g.keep_prob is not None else {}
    progress = distributed.Queue(progress_name)
    steps = _Steps(update.worker_device, update.num_ps > 0, keep_events)
    STOP.clear()
    with tf.train.MonitoredTrainingSession(target, is_chief=update.is_chief, hooks=update.hooks()) as sess:
        for _ in range(settings["num_warmup_batches"]):
            steps.run(sess, g, batches, feed_extra, timed=False)
        progress.put(("warmup", task_index, settings["num_warmup_batches"]))
        images = update.images_per_step(settings["batch_size"])
        begin = time.perf_counter()
        for step in range(1, settings["num_batches"] + 1):
            if STOP.is_set() or not steps.run(sess, g, batches, feed_extra, timed=True):
                break
            if step % DISPLAY_EVERY == 0 or step == settings["num_batches"]:
                progress.put(("timed", task_index, step, steps.times[-(step - steps.reported):],
                              steps.loss, images))
                steps.reported = step
        wall = time.perf_counter() - begin
        accuracy = _accuracy(sess, g, data) if settings["eval_accuracy"] and task_index == 0 else None
    return {**steps.summary(), "task": task_index, "images_per_step": images, "timed_wall_s": wall,
            "param_bytes": _param_bytes(g), "accuracy": accuracy}


def _build_graph(model, settings: dict, update):
    """``dflow train``'s graph, its optimizer wrapped by the variable update."""
    from dflow.train.program import build_training_graph

    train_settings = {"optimizer": settings["optimizer"], "learning_rate": OPTIMIZERS[settings["optimizer"]],
                      **({"keep_prob": model.train_defaults["keep_prob"]} if model.dropout else {})}
    return build_training_graph(model, train_settings, settings["data_format"],
                                optimizer_wrapper=update.optimizer)


def _replica_data(settings: dict, model, task_index: int, replicas: int):
    """(the store's data or None, an iterator of training batches for this replica)."""
    batch = settings["batch_size"]
    if settings["data_dir"] is None:
        # generated once, served every step, as tf_cnn_benchmarks' synthetic data
        rng = np.random.default_rng(task_index)
        images = rng.standard_normal((batch, *model.input_shape)).astype(np.float32)
        labels = rng.integers(0, model.num_classes, batch).astype(np.int64)
        return None, itertools.repeat((images, labels))
    from dflow.train.program import load_data

    data = load_data(settings["data_dir"], model)
    return data, data.train_batches(batch, seed=task_index, shard=(task_index, replicas))


def _accuracy(sess, g, data) -> float | None:
    if data is None:
        return None  # synthetic images have no test split worth the name
    from dflow.train.program import evaluate

    total, count, _ = evaluate(sess, g, data, regression=False)
    return total / count if count else None


def _param_bytes(g) -> int:
    from .distributed import parameter_bytes

    return parameter_bytes(g.loss.graph)


class _Steps:
    """A replica's steps: run one, and keep what the timed ones cost."""

    def __init__(self, worker_device: str, has_ps: bool, keep_events: bool):
        self.task, self.me = worker_device, device_role(worker_device)  # "/job:worker/task:0", "worker/0"
        self.has_ps, self.keep_events = has_ps, keep_events
        self.times: list[float] = []
        self.data_wait: list[float] = []
        self.compute: list[float] = []
        self.links: dict[str, int] = {}
        self.events: list[TraceEvent] = []
        self.loss, self.reported = float("nan"), 0

    def run(self, sess, g, batches, feed_extra: dict, timed: bool) -> bool:
        """One step; False when synchronous training ended while this replica waited at the barrier."""
        from dflow.errors import CancelledError

        start, fetch = time.perf_counter(), time.time()
        images, labels = next(batches)
        fetched, begin = time.perf_counter(), time.time()
        try:
            _, loss = sess.run([g.train_op, g.loss], {g.inputs: images, g.targets: labels, **feed_extra})
        except CancelledError:
            return False
        end, finished = time.perf_counter(), time.time()
        self.loss = float(loss)
        if timed:
            self._record(sess.last_run_stats, end - start, fetched - start, (fetch, begin, finished))
        return True

    def _record(self, stats, step_s: float, data_s: float, stamps: tuple[float, float, float]) -> None:
        self.times.append(step_s)
        self.data_wait.append(data_s)
        # the wait for collectives that compute did not hide is inside the executor's time:
        # it is communication
        self.compute.append(stats.compute_s.get(self.task, 0.0) - stats.collective_s.get(self.task, 0.0))
        for (source, dest), count in stats.bytes_sent.items():
            link = f"{device_role(source)}->{device_role(dest)}"
            self.links[link] = self.links.get(link, 0) + count
        if self.keep_events:
            self.events += self._events(stats, *stamps)

    def _events(self, stats, fetch: float, begin: float, end: float) -> list[TraceEvent]:
        step = len(self.times)
        events = [TraceEvent(self.me, "waiting for data", "data", fetch, begin),
                  TraceEvent(self.me, "step", f"step {step}", begin, end)]
        timeline = getattr(stats, "timeline", None)
        if timeline:
            return events + timeline_events(timeline, self.me, self.has_ps)
        # a runtime without a timeline: the worker's compute first, then what it waited for
        compute = self.compute[-1]
        waiting = "waiting for PS" if self.has_ps else "waiting for workers"
        return events + [TraceEvent(self.me, "compute", "compute", begin, begin + compute),
                         TraceEvent(self.me, waiting, "wait", begin + compute, end)]

    def summary(self) -> dict:
        n = max(len(self.times), 1)
        return {"step_times": self.times, "data_wait": self.data_wait, "compute": self.compute,
                "bytes_per_step": {link: round(total / n) for link, total in sorted(self.links.items())},
                "events": [tuple(e) for e in self.events], "loss": self.loss}


# ---- the client: cluster, repeats, progress ------------------------------------------------------
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
        _print_header(settings, cluster, echo)
        for repeat in range(settings["repeats"]):
            _reset(cluster)
            runs.append(_run_repeat(cluster, settings, repeat, trace is not None, echo,
                                    progress or sys.stderr))
    record = _record(settings, runs)
    _print_totals(record, echo)
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
    _variable_update(settings, spec, 0)


def _reset(cluster) -> None:
    import dflow as tf

    tf.Session.reset(cluster.target)  # the previous repeat's variables, plans and barriers


def _run_repeat(cluster, settings: dict, repeat: int, keep_events: bool, echo, stream) -> list[dict]:
    """One repeat: a replica per worker task, followed until all finish; their results by task."""
    import distributed

    from ..distributed.replicate import start_replicas
    from ..train.program import interrupt_at_safe_points

    queue = distributed.Queue(f"dflow-bench-{uuid.uuid4().hex[:8]}", client=cluster.client)
    view = _Progress(settings, repeat, echo, _Bar(stream))
    futures = start_replicas(_replica, cluster, cluster.target, cluster.spec, settings, queue.name, repeat,
                             keep_events and repeat == settings["repeats"] - 1)
    try:
        with interrupt_at_safe_points() as interrupted:
            _follow(queue, futures, view, interrupted)
        return cluster.client.gather(futures)
    except KeyboardInterrupt:
        _stop(cluster, futures)
        raise
    finally:
        view.bar.close()
        cluster.client.cancel(futures)


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


def _follow(queue, futures, view: _Progress, interrupted) -> None:
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


class _Bar:
    """``[#####.....] 40/110 steps`` redrawn in place on a terminal; nothing elsewhere."""

    WIDTH = 30

    def __init__(self, stream: TextIO):
        self.stream = stream if stream.isatty() else None
        self.line = ""

    def draw(self, done: int, total: int, label: str) -> None:
        if self.stream is None:
            return
        filled = self.WIDTH * done // max(total, 1)
        self.line = f"[{'#' * filled}{'.' * (self.WIDTH - filled)}] {done}/{total} steps {label}"
        self.stream.write(f"\r{self.line}")
        self.stream.flush()

    def clear(self) -> None:
        if self.stream is not None and self.line:
            self.stream.write("\r" + " " * len(self.line) + "\r")
            self.stream.flush()

    def close(self) -> None:
        self.clear()
        self.line = ""


class _Progress:
    """The client's view of a repeat: the replicas' timed steps so far, printed every 10 steps
    once every replica has reported them (in asynchronous modes each one's rate counts)."""

    def __init__(self, settings: dict, repeat: int, echo, bar: _Bar):
        self.settings, self.echo, self.bar = settings, echo, bar
        self.devices = settings["num_workers"] * settings["devices_per_node"]
        self.total = settings["num_warmup_batches"] + settings["num_batches"]
        self.label = f"(repeat {repeat + 1}/{settings['repeats']})"
        self.per_task: dict[int, tuple[int, list[float]]] = {}
        self.steps: dict[int, int] = {}
        self.printed, self.loss = 0, float("nan")
        echo(f"Running warm up {self.label}")
        bar.draw(0, self.total, self.label)

    def update(self, message: tuple) -> None:
        kind, task = message[0], message[1]
        if kind == "warmup" and task == 0:
            self._say("Done warm up", "Step\tImg/sec\ttotal_loss")
            self.bar.draw(message[2], self.total, self.label)
        elif kind == "timed":
            step, times, loss, images = message[2:]
            self.per_task.setdefault(task, (images, []))[1].extend(times)
            self.steps[task] = step
            if task == 0:
                self.loss = loss
                self.bar.draw(self.settings["num_warmup_batches"] + step, self.total, self.label)
            everyone = min(self.steps.get(t, 0) for t in range(self.devices))
            if everyone > self.printed:
                stats = images_per_sec_stats(self.per_task, self.settings["batch_size"], self.devices)
                self._say(perf_timing_str(everyone, stats, self.loss))
                self.printed = everyone

    def _say(self, *lines: str) -> None:
        self.bar.clear()
        for line in lines:
            self.echo(line)


# ---- output ---------------------------------------------------------------------------------------
def _print_header(settings: dict, cluster, echo) -> None:
    from ..models import get_model

    model = get_model(settings["model"])
    update = _variable_update(settings, cluster.spec, 0)
    devices = settings["num_workers"] * settings["devices_per_node"]
    global_batch = update.images_per_step(settings["batch_size"])
    shape = "x".join(map(str, model.input_shape))
    data = (f"real: {settings['data_dir']}" if settings["data_dir"] else
            f"synthetic ({shape}, one batch generated in memory)")
    network = settings["network"]
    where = settings["cluster"] + (f", network {network}" if network != "none" else "")
    lines = [("Model:", f"{model.name} ({model.description})"), ("Dataset:", data), ("Mode:", "training"),
             ("Batch size:", f"{global_batch} global"), ("", f"{settings['batch_size']} per device"),
             ("Num batches:", f"{settings['num_batches']} (+{settings['num_warmup_batches']} warm-up), "
                              f"{settings['repeats']} repeat(s)"),
             ("Devices:", f"{list(update.workers)} ({settings['num_workers']} worker(s) x "
                          f"{settings['devices_per_node']} device(s))"),
             ("Data format:", settings["data_format"]), ("Optimizer:", settings["optimizer"]),
             ("Variables:", update.describe()),
             ("Cluster:", f"{where}: {settings['num_ps']} PS + {devices} worker task(s); roles "
                          f"{', '.join(cluster.spec.roles())}")]
    for title, value in lines:
        echo(f"{title:<13}{value}")
    echo("==========")


def _print_totals(record: dict, echo) -> None:
    per_repeat = ", ".join(f"{x:.1f}" for x in record["images_per_sec"])
    echo(f"total images/sec: {record['images_per_sec_mean']:.1f} +/- {record['images_per_sec_std']:.1f} "
         f"(mean of {len(record['images_per_sec'])} repeat(s): {per_repeat})")
    echo(f"per step: data wait {1000 * record['data_wait_s_per_step']:.2f} ms, compute "
         f"{1000 * record['compute_s_per_step']:.1f} ms, communication "
         f"{1000 * record['communication_s_per_step']:.1f} ms; bytes per step: "
         + (", ".join(f"{link} {count:,}" for link, count in record["bytes_per_step"].items()) or "none")
         + f" (parameters: {record['param_bytes']:,} bytes)")


def _record(settings: dict, runs: list[list[dict]]) -> dict:
    """The JSON record of all repeats (:data:`RECORD_KEYS`)."""
    devices = settings["num_workers"] * settings["devices_per_node"]
    rates = [images_per_sec_stats({r["task"]: (r["images_per_step"], r["step_times"]) for r in results},
                                  settings["batch_size"], devices)[0] for results in runs]
    every = [r for results in runs for r in results]
    steps = [(t, d, c) for r in every for t, d, c in zip(r["step_times"], r["data_wait"], r["compute"])]
    links: dict[str, list[int]] = {}
    for results in runs:
        for link, count in _links_of(results).items():
            links.setdefault(link, []).append(count)
    return {
        "settings": dict(settings), "machine": machine(),
        "images_per_sec": rates, "images_per_sec_mean": statistics.fmean(rates),
        "images_per_sec_std": statistics.stdev(rates) if len(rates) > 1 else 0.0,
        "step_times_s": [_chief(results)["step_times"] for results in runs],
        "bytes_per_step": {link: round(statistics.fmean(counts)) for link, counts in sorted(links.items())},
        "param_bytes": _chief(runs[0])["param_bytes"],
        "data_wait_s_per_step": statistics.fmean(d for _, d, _ in steps),
        "compute_s_per_step": statistics.fmean(c for _, _, c in steps),
        "communication_s_per_step": statistics.fmean(max(t - d - c, 0.0) for t, d, c in steps),
        "scaled_down": None, "preset": None, "accuracy": _chief(runs[-1])["accuracy"],
        "time_to_steps_s": statistics.fmean(_chief(results)["timed_wall_s"] for results in runs),
    }


def _chief(results: list[dict]) -> dict:
    return next(r for r in results if r["task"] == 0)


def _links_of(results: list[dict]) -> dict[str, int]:
    """Bytes per step on each link: each replica's own step's links, added up over the replicas."""
    total: dict[str, int] = {}
    for result in results:
        for link, count in result["bytes_per_step"].items():
            total[link] = total.get(link, 0) + count
    return total


def append_record(path: str, record: dict) -> None:
    """Append ``record`` to the JSON-lines file ``path`` (one line per run).

    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "results.jsonl")
    >>> append_record(path, {"images_per_sec_mean": 1.0}); append_record(path, {"images_per_sec_mean": 2.0})
    >>> [json.loads(line)["images_per_sec_mean"] for line in open(path)]
    [1.0, 2.0]
    """
    # on disk when this returns: a sweep killed during its next point keeps every record before it
    with open(path, "a") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def machine() -> dict:
    """This machine and the versions that ran: :func:`dflow.bench.local.machine_info` and more."""
    import distributed
    import zarr

    from .local import machine_info

    info = machine_info()
    info.update(cpu=_cpu_model() or info["cpu"], gpu=_gpu_names(), distributed=distributed.__version__,
                zarr=zarr.__version__, platform=platform.platform())
    return info


def _cpu_model() -> str | None:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return None


def _gpu_names() -> list[str] | None:
    """The NVIDIA GPUs' names (nvidia-smi), or None without one."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=10, check=True).stdout
        return [name.strip() for name in out.splitlines() if name.strip()] or None
    return None
