"""What the client prints while a benchmark runs: the header, each repeat's progress
(tf_cnn_benchmarks' images/sec lines, and a tqdm bar on a terminal), and the totals."""

from __future__ import annotations

from typing import TextIO

from tqdm import tqdm

from .settings import variable_update_for
from .stats import images_per_sec_stats, perf_timing_str

__all__ = ["RepeatProgress", "print_header", "print_totals"]


class RepeatProgress:
    """The client's view of a repeat: the replicas' timed steps so far, printed every 10 steps
    once every replica has reported them (in asynchronous modes each one's rate counts)."""

    def __init__(self, settings: dict, repeat: int, echo, stream: TextIO):
        self.settings, self.echo = settings, echo
        self.devices = settings["num_workers"] * settings["devices_per_node"]
        label = f"(repeat {repeat + 1}/{settings['repeats']})"
        self.per_task: dict[int, tuple[int, list[float]]] = {}
        self.steps: dict[int, int] = {}
        self.printed, self.loss = 0, float("nan")
        echo(f"Running warm up {label}")
        # chief's steps, warm-up included, drawn in place on a terminal only (a log gets the lines)
        self.bar = tqdm(total=settings["num_warmup_batches"] + settings["num_batches"], desc=label,
                        unit="steps", file=stream, leave=False, disable=not stream.isatty())

    def update(self, message: tuple) -> None:
        kind, task = message[0], message[1]
        if kind == "warmup" and task == 0:
            self._say("Done warm up", "Step\tImg/sec\ttotal_loss")
            self._draw(message[2])
        elif kind == "timed":
            step, times, loss, images = message[2:]
            self.per_task.setdefault(task, (images, []))[1].extend(times)
            self.steps[task] = step
            if task == 0:
                self.loss = loss
                self._draw(self.settings["num_warmup_batches"] + step)
            everyone = min(self.steps.get(t, 0) for t in range(self.devices))
            if everyone > self.printed:
                stats = images_per_sec_stats(self.per_task, self.settings["batch_size"], self.devices)
                self._say(perf_timing_str(everyone, stats, self.loss))
                self.printed = everyone

    def _draw(self, done: int) -> None:
        self.bar.update(done - self.bar.n)

    def _say(self, *lines: str) -> None:
        self.bar.clear()
        for line in lines:
            self.echo(line)
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()


def print_header(settings: dict, cluster, echo) -> None:
    from ..models import get_model

    model = get_model(settings["model"])
    update = variable_update_for(settings, cluster.spec, 0)
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


def print_totals(record: dict, echo) -> None:
    per_repeat = ", ".join(f"{x:.1f}" for x in record["images_per_sec"])
    echo(f"total images/sec: {record['images_per_sec_mean']:.1f} +/- {record['images_per_sec_std']:.1f} "
         f"(mean of {len(record['images_per_sec'])} repeat(s): {per_repeat})")
    echo(f"per step: data wait {1000 * record['data_wait_s_per_step']:.2f} ms, compute "
         f"{1000 * record['compute_s_per_step']:.1f} ms, communication "
         f"{1000 * record['communication_s_per_step']:.1f} ms; bytes per step: "
         + (", ".join(f"{link} {count:,}" for link, count in record["bytes_per_step"].items()) or "none")
         + f" (parameters: {record['param_bytes']:,} bytes)")
