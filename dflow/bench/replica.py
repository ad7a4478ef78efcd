"""One worker task's benchmark, run inside its worker (:func:`bench_replica`): ``dflow train``'s
graph (:mod:`dflow.train.program`) under the run's variable update, warm-up steps, then timed
steps, each split into its data wait, its own compute and communication (:class:`StepCosts`)."""

from __future__ import annotations

import itertools
import time

import numpy as np

from ..cluster.spec import device_role
from .settings import OPTIMIZERS, variable_update_for
from .trace import TraceEvent, timeline_events

__all__ = ["bench_replica", "StepCosts", "DISPLAY_EVERY"]

DISPLAY_EVERY = 10  # steps between images/sec lines, as tf_cnn_benchmarks' --display_every


def bench_replica(task_index: int, target: str, spec, settings: dict, progress_name: str, repeat: int,
             keep_events: bool) -> dict:
    """One worker task's benchmark: warm-up steps, timed steps; per step what it cost."""
    import distributed

    import dflow as tf
    from dflow.models import get_model
    from dflow.train.program import STOP

    model = get_model(settings["model"])
    update = variable_update_for(settings, spec, task_index)
    data, batches = _replica_data(settings, model, task_index, len(update.workers))
    tf.set_random_seed(repeat)  # each repeat its own weights, every replica the chief's
    with tf.device(update.device()):
        g = _build_graph(model, settings, update)
    feed_extra = {g.keep_prob: model.train_defaults["keep_prob"]} if g.keep_prob is not None else {}
    progress = distributed.Queue(progress_name)
    steps = StepCosts(update.worker_device, update.num_ps > 0, keep_events)
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


class StepCosts:
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
