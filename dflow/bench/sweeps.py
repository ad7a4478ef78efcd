"""``dflow bench sweep PRESET``: the seeds' experiments as grids of benchmark runs.

A :class:`Preset` is one short declaration: the paper figure or table it
mirrors, the settings every point shares (``base``), the grid (``axes``: the
cartesian product of their values, an axis may depend on the point built so
far) and how to show the result (a :class:`~dflow.bench.report.Figure`).
:func:`run_sweep` runs each point through the single-run harness
(:func:`dflow.bench.harness.run_benchmark`), appends each record to
``OUTPUT/PRESET.jsonl`` as soon as it is measured (a point already there is
skipped, so an interrupted sweep continues where it stopped), then writes
``PRESET.md`` (a table like the paper's) and ``PRESET.png``/``PRESET.svg``.

On a small machine the grid is scaled down (:func:`scale_down`): points that
need more worker devices than the machine has (cores, or GPUs with
``cluster="cuda"``) are left out and every point runs fewer steps and repeats.
What was changed is printed, written under the table, and recorded in each
record's ``scaled_down``; ``full=True`` (``--full``) runs the paper's grid anyway.

>>> points, note = scale_down(PRESETS["wang2017-multinode"], cores=2, gpus=0)
>>> sorted({p["num_workers"] for p in points})
[1, 2]
>>> note.startswith("scaled down")
True
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from . import harness, report
from .records import gpu_names
from .report import Figure

__all__ = ["Preset", "PRESETS", "DEFAULT_SETTINGS", "SMALL_MACHINE", "SweepResult", "grid_points",
           "scale_down", "worker_devices", "run_sweep", "write_report", "add_arguments", "main"]

#: every harness setting, with the value a preset gets when it does not say: the harness's,
#: but batch 100 (the seeds' CIFAR-10 runs) rather than each model's own
DEFAULT_SETTINGS: Mapping = MappingProxyType({**harness.DEFAULT_SETTINGS, "batch_size": 100})

#: the caps of a scaled-down sweep: enough steps for a stable mean on 2 cores, in minutes not hours
SMALL_MACHINE: Mapping = MappingProxyType({"num_batches": 20, "num_warmup_batches": 3, "repeats": 2})

_CAP_NAMES = {"num_batches": "timed steps", "num_warmup_batches": "warm-up steps", "repeats": "repeats"}

Axis = Sequence | Callable[[dict], Sequence]


@dataclass(frozen=True)
class Preset:
    """A sweep: the settings it shares, its grid, and the paper figure it mirrors.

    ``axes`` maps a settings key to its values, or to a function of the point built so
    far (earlier axes) returning them: ``num_ps`` from 1 to ``num_workers``.
    ``real_data_axis``: with a ``data_dir``, each point also runs on synthetic data, for
    the I/O overhead. ``small_machine``: settings a scaled-down run uses instead of the
    paper's (a smaller model standing in), unless the command line sets them.
    """

    name: str
    paper: str
    description: str
    figure: Figure
    axes: Mapping[str, Axis]
    base: Mapping = field(default_factory=dict)
    real_data_axis: bool = False
    small_machine: Mapping = field(default_factory=dict)


def _one_to_workers(point: dict) -> range:
    return range(1, point["num_workers"] + 1)


def _ps_unless_allreduce(point: dict) -> list[int]:
    return [0] if point["variable_update"] == "allreduce" else [1]


PRESETS: dict[str, Preset] = {p.name: p for p in [
    Preset(
        "wang2017-batch", "Wang et al. 2017, Fig. 8",
        "CIFAR-10 tutorial CNN on one device: images/sec against the batch size",
        Figure(x="batch_size", log_x=True, derived=(), title="images/sec vs batch size, one device"),
        axes={"batch_size": (1, 10, 50, 100, 200, 400)},
        base={"num_workers": 1, "num_ps": 0, "variable_update": "independent"}),
    Preset(
        "wang2017-multinode", "Wang et al. 2017, Figs. 10-11",
        "between-graph replication: workers x PS x batch size, on 1 and 10 Gbit/s links",
        Figure(x="num_workers", series=("batch_size", "num_ps"), panels=("network",),
               derived=("speedup",), title="multi-node: images/sec vs workers"),
        axes={"network": ("1gbit", "10gbit"), "num_ps": (1, 2), "batch_size": (100, 200, 400),
              "num_workers": (1, 2, 3, 4, 8)},
        # the tutorial's between-graph trainer applies each worker's update as it arrives
        base={"sync": False}),
    Preset(
        "wang2017-ingraph", "Wang et al. 2017, Fig. 9",
        "in-graph replication (variable_update replicated) over 1..4 devices of one node",
        Figure(x="devices", series=("batch_size",), ideal=True, derived=("speedup", "scaling_efficiency"),
               title="in-graph replication: images/sec vs devices (grey: ideal)"),
        axes={"batch_size": (100, 200, 400), "devices_per_node": (1, 2, 3, 4)},
        base={"num_workers": 1, "num_ps": 0, "variable_update": "replicated"}),
    Preset(
        "bugliarello2017-ps-sweep", "Bugliarello et al. 2017, Tables 1-3 and Figs. 5-11",
        "for each worker count, PS counts 1..workers and both variable updates; the best is "
        "reported (InceptionV3 at batch 64/device, as the paper)",
        Figure(x="num_workers", ys=("images_per_sec", "scaling_efficiency", "io_overhead_percent"),
               series=("data",), best_of=("num_ps", "variable_update"), ideal=True,
               derived=("speedup", "scaling_efficiency", "io_overhead_percent"),
               title="best over PS counts: images/sec, scaling efficiency, I/O overhead"),
        axes={"num_workers": (1, 2, 4, 8), "variable_update": ("parameter_server", "distributed_replicated"),
              "num_ps": _one_to_workers},
        base={"model": "inception3", "batch_size": 64}, real_data_axis=True,
        # InceptionV3 took 1.5 s a step at batch 2 on 2 cores (~50 s at 64): too long for a sweep there
        small_machine={"model": "cifar10"}),
    Preset(
        "gagliano2018-cpu", "Gagliano 2018, section 4.3 (1-vCPU workers)",
        "deep MNIST CNN on CPU workers 1..5 with 1 PS: time to 10,000 global steps, steps/sec, "
        "speedup, final test accuracy",
        Figure(x="num_workers", ys=("time_to_steps_s", "steps_per_sec", "speedup"), ideal=True,
               derived=("steps_per_sec", "time_to_steps_s", "speedup", "accuracy"), target_steps=10_000,
               extra_columns=("measured_time_s",), title="deep MNIST on CPU workers, 1 PS"),
        axes={"num_workers": (1, 2, 3, 4, 5)},
        # asynchronous, as the paper's global step count overshooting 10,000 shows
        base={"model": "deep_mnist", "batch_size": 50, "num_ps": 1, "sync": False,
              "num_batches": 2000, "repeats": 1, "eval_accuracy": True}),
    Preset(
        "vishnu2016-allreduce", "Vishnu et al. 2016 (MPI-TensorFlow)",
        "MNIST-DNN and MNIST-CNN, synchronous allreduce against a parameter server: speedup vs workers",
        Figure(x="num_workers", ys=("images_per_sec", "speedup"), series=("variable_update",),
               panels=("model",), ideal=True, derived=("speedup", "scaling_efficiency")),
        axes={"model": ("mnist_dnn", "deep_mnist"), "variable_update": ("allreduce", "parameter_server"),
              "num_ps": _ps_unless_allreduce, "num_workers": (1, 2, 4, 8, 16)}),
    Preset(
        "tiny", "none (a smoke test of the whole path; CI runs it)",
        "MNIST-DNN, 1 PS, 1 and 2 workers, a few steps: seconds on 2 cores",
        Figure(x="num_workers", series=("model",), ideal=True, derived=("speedup", "scaling_efficiency")),
        axes={"num_workers": (1, 2)},
        base={"model": "mnist_dnn", "batch_size": 32, "num_ps": 1, "num_warmup_batches": 1,
              "num_batches": 5, "repeats": 1}),
]}


# ---- the grid ----------------------------------------------------------------------------------
def _expand(axes: list[tuple[str, Axis]], point: dict) -> Iterator[dict]:
    if not axes:
        yield point
        return
    (key, values), rest = axes[0], axes[1:]
    for value in values(point) if callable(values) else values:
        yield from _expand(rest, {**point, key: value})


def grid_points(preset: Preset, settings: Mapping | None = None) -> list[dict]:
    """Every point of the preset's full grid: complete harness settings, in run order.

    ``settings`` overrides the defaults and the preset's base (a ``cluster``, a
    ``data_dir``); the grid's axes override both. With a ``data_dir``, a preset with
    ``real_data_axis`` runs each point on synthetic data too.

    >>> [p["batch_size"] for p in grid_points(PRESETS["wang2017-batch"])]
    [1, 10, 50, 100, 200, 400]
    """
    point = {**DEFAULT_SETTINGS, **preset.base, **(settings or {})}
    axes = list(preset.axes.items())
    if preset.real_data_axis and point["data_dir"] is not None:
        axes.insert(0, ("data_dir", (None, point["data_dir"])))
    return list(_expand(axes, point))


def worker_devices(point: Mapping) -> int:
    """The devices a point trains on: what must fit the machine (a PS mostly waits)."""
    return point["num_workers"] * point["devices_per_node"]


def machine_devices(cluster: str) -> tuple[int, int] | None:
    """(cores, GPUs) of this machine when ``cluster`` runs on it; None for Slurm or an address."""
    if cluster not in ("local", "cuda"):
        return None
    return os.cpu_count() or 1, _gpu_count()


def _gpu_count() -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    return len(gpu_names() or ())


def scale_down(preset: Preset, cores: int, gpus: int, settings: Mapping | None = None,
               full: bool = False) -> tuple[list[dict], str | None]:
    """The points to run on a machine with ``cores`` and ``gpus``, and what was changed (or None).

    The rule: the full grid runs unchanged when every point's worker devices fit the
    machine (GPUs for ``cluster="cuda"``, cores otherwise) or ``full`` is set. Otherwise
    points needing more devices than the machine has are left out (at least one device is
    kept), every point's steps, warm-up steps and repeats are capped at
    :data:`SMALL_MACHINE`, and the preset's ``small_machine`` settings replace the paper's.
    """
    points = grid_points(preset, settings)
    capacity = max(1, gpus if points[0]["cluster"] == "cuda" else cores)
    needed = max(worker_devices(p) for p in points)
    if full or needed <= capacity:
        return points, None
    stand_ins = {k: v for k, v in preset.small_machine.items() if k not in (settings or {})}
    kept = [{**p, **{k: min(p[k], cap) for k, cap in SMALL_MACHINE.items()}, **stand_ins}
            for p in points if worker_devices(p) <= capacity]
    unit = "GPUs" if points[0]["cluster"] == "cuda" else "cores"
    dropped = sorted({worker_devices(p) for p in points} - {worker_devices(p) for p in kept})
    changes = ", ".join(f"{SMALL_MACHINE[k]} {_CAP_NAMES[k]}" for k in SMALL_MACHINE
                        if any(p[k] > SMALL_MACHINE[k] for p in points))
    note = (f"scaled down for this machine ({capacity} {unit}; the full grid needs {needed}): "
            f"{len(kept)} of {len(points)} points, worker devices capped at {capacity} "
            f"(left out: {', '.join(map(str, dropped))})" + (f", at most {changes}" if changes else "")
            + "".join(f", {k} {v} instead of {points[0][k]}" for k, v in stand_ins.items())
            + "; --full runs the paper's grid")
    return kept, note


# ---- the driver --------------------------------------------------------------------------------
@dataclass
class SweepResult:
    """What a sweep did: every record of the sweep (earlier runs' too), the points that failed
    (settings, error), the files written, and the scale-down note (None: full grid)."""

    records: list[dict]
    failures: list[tuple[dict, str]]
    files: list[str]
    scaled_down: str | None


def _matches(point: Mapping, record: Mapping) -> bool:
    """A record answers a point when every setting of the point is the record's."""
    settings = record.get("settings", {})
    return all(settings.get(key, DEFAULT_SETTINGS.get(key)) == value for key, value in point.items())


def _describe(point: Mapping, preset: Preset) -> str:
    keys = [*preset.axes, *(["data_dir"] if preset.real_data_axis and point["data_dir"] else [])]
    return " ".join(f"{key}={point[key]}" for key in dict.fromkeys(keys))


def run_sweep(preset: Preset | str, output_dir: str, run: Callable[..., dict] | None = None,
              full: bool = False, settings: Mapping | None = None, echo=print,
              machine: tuple[int, int] | None = None) -> SweepResult:
    """Run the preset's grid (scaled to this machine), resumably, then write its table and plot.

    Parameters
    ----------
    preset : a :class:`Preset` or its name in :data:`PRESETS`.
    output_dir : where ``PRESET.jsonl``, ``PRESET.md``, ``PRESET.png`` and ``.svg`` go.
    run : ``run(settings, echo=...) -> record``; by default the harness's ``run_benchmark``.
    full : run the paper's grid even on a small machine.
    settings : overrides for every point (``cluster``, ``data_dir``, ``network`` ...).
    machine : (cores, GPUs) to plan for; by default this machine's (None for remote clusters).

    A point already in ``PRESET.jsonl`` is not run again; a point that raises is reported
    and left out (a rerun retries it). Ctrl-C stops after writing the report of what ran.

    >>> fake = lambda s, echo=None: {"settings": s, "images_per_sec_mean": 10.0 * s["num_workers"]}
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as out:
    ...     result = run_sweep("tiny", out, run=fake, echo=lambda line: None)
    >>> [r["images_per_sec_mean"] for r in result.records]
    [10.0, 20.0]
    """
    preset = PRESETS[preset] if isinstance(preset, str) else preset
    run = run or harness.run_benchmark
    settings = _store_as_recorded(settings or {})
    machine = machine if machine is not None else machine_devices(
        {**DEFAULT_SETTINGS, **preset.base, **settings}["cluster"])
    points, note = (scale_down(preset, *machine, settings=settings, full=full) if machine
                    else (grid_points(preset, settings), None))
    os.makedirs(output_dir, exist_ok=True)
    jsonl = os.path.join(output_dir, f"{preset.name}.jsonl")
    records = report.load_records(jsonl)
    echo(f"{preset.name}: {preset.description} ({preset.paper})")
    if note:
        echo(note)
    failures: list[tuple[dict, str]] = []
    try:
        for index, point in enumerate(points, 1):
            _run_point(preset, point, index, len(points), records, failures, jsonl, run, note, echo)
    except KeyboardInterrupt:
        echo(f"interrupted: {len(records)} records kept in {jsonl}; run the same command to continue")
        write_report(preset, records, output_dir, note, echo)
        raise
    if failures:
        echo(f"{len(failures)} of {len(points)} points failed; rerun to retry them")
    files = write_report(preset, records, output_dir, note, echo)
    return SweepResult(records, failures, [jsonl, *files], note)


def _store_as_recorded(settings: Mapping) -> Mapping:
    """``settings`` with ``data_dir`` as the harness records it (``NAME``: ``datasets/NAME.zarr``),
    so that the points of a rerun find their records."""
    from ..cli_data import store_path

    data_dir = settings.get("data_dir")
    if data_dir is None:
        return settings
    return {**settings, "data_dir": store_path(str(data_dir)) or data_dir}  # no store: the harness says so


def _run_point(preset: Preset, point: dict, index: int, total: int, records: list[dict],
               failures: list, jsonl: str, run: Callable, note: str | None, echo) -> None:
    label = f"[{index}/{total}] {_describe(point, preset)}"
    if any(_matches(point, r) for r in records):
        echo(f"{label}: already measured, skipped")
        return
    try:
        record = run(dict(point), echo=echo)
    except KeyboardInterrupt:
        raise
    except Exception as error:  # one failed point (no root for shaping, no GPU) must not end a sweep
        failures.append((point, f"{type(error).__name__}: {error}"))
        echo(f"{label}: failed: {type(error).__name__}: {error}")
        return
    record = {**record, "preset": preset.name, "scaled_down": note}
    harness.append_record(jsonl, record)
    records.append(record)
    echo(f"{label}: {record.get('images_per_sec_mean', float('nan')):.1f} images/sec")


def write_report(preset: Preset, records: Sequence[dict], output_dir: str, note: str | None = None,
                 echo=print) -> list[str]:
    """``PRESET.md`` (the table) and, when matplotlib is installed, ``PRESET.png``/``.svg``.

    Returns the paths written. Without matplotlib the table is still written and the
    message says how to get the plots.
    """
    table = report.rows(records, preset.figure)
    columns = preset.figure.columns(present=[k for row in table for k, v in row.items() if v is not None])
    stem = os.path.join(output_dir, preset.name)
    with open(f"{stem}.md", "w") as f:
        f.write(_markdown(preset, table, columns, records, note))
    files = [f"{stem}.md"]
    if not table:
        return files
    try:
        files += report.plot(table, preset.figure, [f"{stem}.png", f"{stem}.svg"])
    except ImportError as error:
        echo(f"no plot: {error}")
    echo("wrote " + ", ".join(files))
    return files


def _markdown(preset: Preset, table: list[dict], columns: list[str], records: Sequence[dict],
              note: str | None) -> str:
    body = report.markdown_table(table, columns, _titles(preset.figure)) if table else "(no records yet)"
    lines = [f"# {preset.name}: {preset.paper}", "", preset.description, "", body, ""]
    notes = {r.get("scaled_down") for r in records} | {note}
    lines += [f"Note: {n}." for n in sorted(n for n in notes if n)]
    machines = {json.dumps(r.get("machine"), sort_keys=True) for r in records if r.get("machine")}
    lines += [f"Machine: {m}" for m in sorted(machines)]
    return "\n".join(lines).rstrip() + "\n"


def _titles(figure: Figure) -> dict[str, str]:
    return {"time_to_steps_s": f"time to {figure.target_steps:,} steps (s)"} if figure.target_steps else {}


# ---- command line ------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``dflow bench sweep``'s arguments."""
    parser.add_argument("preset", choices=sorted(PRESETS), help="the experiment to run")
    parser.add_argument("--output_dir", default="bench_results",
                        help="where PRESET.jsonl/.md/.png/.svg go (default: bench_results)")
    parser.add_argument("--full", action="store_true",
                        help="run the paper's grid even when this machine has too few cores/GPUs")
    parser.add_argument("--cluster", help="local, cuda, slurm or a scheduler ADDRESS (default: local)")
    parser.add_argument("--data_dir", help="a prepared store: real data (and synthetic beside it, "
                                           "for the I/O overhead, where the preset reports it)")
    parser.add_argument("--report_only", action="store_true",
                        help="only (re)write the table and plots from PRESET.jsonl")


def main(args: argparse.Namespace, echo=print) -> int:
    """Run ``dflow bench sweep``; 130 when interrupted (the records so far are kept)."""
    preset = PRESETS[args.preset]
    settings = {k: v for k, v in (("cluster", args.cluster), ("data_dir", args.data_dir)) if v is not None}
    if args.report_only:
        records = report.load_records(os.path.join(args.output_dir, f"{preset.name}.jsonl"))
        write_report(preset, records, args.output_dir, echo=echo)
        return 0
    try:
        result = run_sweep(preset, args.output_dir, full=args.full, settings=settings, echo=echo)
    except KeyboardInterrupt:
        return 130
    return 1 if result.failures else 0
