"""``dflow bench simulate --reproduce bugliarello2017``: the seed's tables beside the simulator.

For every synthetic-data row of seed 001's tables 1-3 (:mod:`dflow.bench.paper_tables`)
the simulator plays the paper's search: every PS count from a grid over 1 to the number
of workers, ``parameter_server`` and ``distributed_replicated``, and keeps the fastest.
Each system's one-GPU step time comes from its table's first row (one GPU, one PS on
its node); everything else comes from the preset (:mod:`dflow.bench.hardware`) and the
plan of dflow's own Inception v3. Each row also carries what Horovod's ring allreduce
would have made of the same GPUs (what the paper did not measure).

>>> rows = reproduce(systems=["p2.8xlarge"], max_gpus=2)
>>> [(r["gpus"], round(r["paper_images_per_sec"], 2)) for r in rows]
[(1, 30.55), (2, 58.38)]
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

from . import report
from .hardware import get_hardware
from .paper_tables import (
    BUGLIARELLO2017,
    BUGLIARELLO2017_EFFICIENCIES,
    BUGLIARELLO2017_SETUP,
    WANG2017_SATURATION,
)
from .simulate import best_setup, calibrate_step_time, model_plan, simulate

__all__ = ["reproduce", "efficiencies", "saturation", "format_reproduction", "plot_scaling",
           "scaling_figure", "PAPERS"]

PAPERS = ("bugliarello2017",)
PS_UPDATES = ("parameter_server", "distributed_replicated")


def reproduce(systems: Sequence[str] | None = None, max_gpus: int | None = None,
              echo: Callable[[str], None] | None = None) -> list[dict]:
    """One dict per table row: the paper's setup and images/sec beside the simulator's best."""
    model, batch = BUGLIARELLO2017_SETUP["model"], BUGLIARELLO2017_SETUP["batch_size"]
    plan = model_plan(model)
    rows, step_times, start = [], {}, time.monotonic()
    wanted = [row for row in BUGLIARELLO2017
              if not (systems and row.system not in systems) and not (max_gpus and row.gpus > max_gpus)]
    for row in wanted:
        hardware = get_hardware(row.system)
        if row.system not in step_times:  # the table's first row: one GPU, one PS
            step_times[row.system] = calibrate_step_time(plan, hardware, row.images_per_sec, batch)
        step = step_times[row.system]
        best, tried = best_setup(plan, hardware, step, batch, row.gpus, PS_UPDATES)
        paper_setup = [r for r in tried
                       if (r.variable_update, r.num_ps) == (row.variable_update, row.num_ps)]
        ring = simulate(plan, hardware, step, batch, best.workers, 0, "allreduce",
                        devices_per_node=best.devices_per_node)
        rows.append({"system": row.system, "gpus": row.gpus, "num_ps": best.num_ps,
                     "variable_update": best.variable_update, "ps_strategy": best.ps_strategy,
                     "devices_per_node": best.devices_per_node, "workers": best.workers,
                     "paper_num_ps": row.num_ps, "paper_variable_update": row.variable_update,
                     "paper_images_per_sec": row.images_per_sec, "images_per_sec": best.images_per_sec,
                     "error_percent": (best.images_per_sec - row.images_per_sec) / row.images_per_sec * 100,
                     "paper_setup_images_per_sec": paper_setup[0].images_per_sec if paper_setup else None,
                     "scaling_efficiency": best.images_per_sec / (row.gpus * batch / step),
                     "paper_scaling_efficiency": row.images_per_sec / (row.gpus * _first(row.system)),
                     "bottleneck": best.bottleneck, "utilization": best.utilization,
                     "busiest_nic_bytes_per_step": best.busiest_nic_bytes_per_step,
                     "allreduce_images_per_sec": ring.images_per_sec, "step_time_s": step})
        if echo:
            echo(f"[{len(rows)}/{len(wanted)}, {time.monotonic() - start:.0f} s] {row.system} {row.gpus} "
                 f"GPUs: paper {row.images_per_sec:.1f}, simulated {best.images_per_sec:.1f} images/sec")
    return rows


def _first(system: str) -> float:
    return next(r.images_per_sec for r in BUGLIARELLO2017 if r.system == system and r.gpus == 1)


def efficiencies() -> list[dict]:
    """The 8-GPU scaling efficiencies the seed quotes, beside the simulator's (best setup)."""
    model, batch = BUGLIARELLO2017_SETUP["model"], BUGLIARELLO2017_SETUP["batch_size"]
    plan = model_plan(model)
    rows = []
    for system, source, quoted in BUGLIARELLO2017_EFFICIENCIES:
        hardware = get_hardware(system)
        step = calibrate_step_time(plan, hardware, hardware.one_device_images_per_sec, batch)
        updates = (*PS_UPDATES, "replicated") if hardware.devices_per_node >= 8 else PS_UPDATES
        best, _ = best_setup(plan, hardware, step, batch, 8, updates)
        simulated = best.images_per_sec / (8 * batch / step)
        rows.append({"system": system, "measured_by": source, "gpus": 8, "paper_efficiency": quoted,
                     "efficiency": simulated, "variable_update": best.variable_update, "num_ps": best.num_ps,
                     "error_points": (simulated - quoted) * 100})
    return rows


def saturation(workers: Sequence[int] = (1, 2, 3, 4, 5, 6, 7, 8)) -> list[dict]:
    """Seed 000's saturation points: where CIFAR-10's images/sec stops growing (within 5%) with
    the workers, one PS, asynchronous, over 1 and 10 Gbit/s. The one-GPU speed is the
    ``ethernet_*`` preset's (seed 000 gives it only as a figure)."""
    plan = model_plan("cifar10")
    rows = []
    for system, batch, paper in WANG2017_SATURATION:
        hardware = get_hardware(system)
        step = batch / hardware.one_device_images_per_sec
        rates = [simulate(plan, hardware, step, batch, n, 1, sync=False, colocate_ps=False).images_per_sec
                 for n in workers]
        grows = [n for i, n in enumerate(workers[1:], 1) if rates[i] > 1.05 * max(rates[:i])]
        simulated = max(grows, default=workers[0])
        rows.append({"system": system, "batch_size": batch,
                     "paper_saturates_at": paper,
                     "saturates_at": None if simulated == workers[-1] else simulated,
                     "images_per_sec": [round(r, 1) for r in rates]})
    return rows


def format_reproduction(rows: Sequence[dict]) -> str:
    """The rows as a Markdown table, with the mean and worst absolute error under it."""
    columns = ["system", "gpus", "paper_num_ps", "paper_variable_update", "paper_images_per_sec",
               "num_ps", "variable_update", "images_per_sec", "error_percent", "allreduce_images_per_sec",
               "bottleneck"]
    table = report.markdown_table(rows, columns)
    if not rows:
        return table
    errors = [abs(r["error_percent"]) for r in rows]
    return (f"{table}\n\nmean absolute error: {statistics.fmean(errors):.1f}% over {len(rows)} rows; "
            f"worst {max(errors):.1f}%")


def plot_scaling(rows: Sequence[dict], paths: Sequence[str], title: str = "") -> list[str]:
    """:func:`scaling_figure` written to each of ``paths`` (the format from the suffix)."""
    pyplot = report._pyplot()
    fig = scaling_figure(rows, title)
    for path in paths:
        fig.savefig(path, dpi=120)
    pyplot.close(fig)
    return list(paths)


def scaling_figure(rows: Sequence[dict], title: str = ""):
    """Images/sec and scaling efficiency against GPUs, one colour per system: the simulator's
    lines, the paper's points (where ``paper_images_per_sec`` is there), the allreduce dotted."""
    pyplot = report._pyplot()
    fig, (speed, efficiency) = pyplot.subplots(1, 2, figsize=(10, 3.8))
    systems = list(dict.fromkeys(r["system"] for r in rows))
    for index, system in enumerate(systems):
        color = report.COLORS[index % len(report.COLORS)]
        points = sorted((r for r in rows if r["system"] == system), key=lambda r: r["gpus"])
        gpus = [r["gpus"] for r in points]
        one = points[0]["images_per_sec"] / points[0]["gpus"]
        speed.plot(gpus, [r["images_per_sec"] for r in points], color=color, marker="o",
                   label=f"{system}: dflow simulate")
        efficiency.plot(gpus, [r["images_per_sec"] / (r["gpus"] * one) for r in points], color=color,
                        marker="o")
        if all(r.get("allreduce_images_per_sec") for r in points):
            speed.plot(gpus, [r["allreduce_images_per_sec"] for r in points], color=color, linestyle=":",
                       label=f"{system}: allreduce (simulated)")
        if all(r.get("paper_images_per_sec") for r in points):
            paper_one = points[0]["paper_images_per_sec"] / points[0]["gpus"]
            speed.plot(gpus, [r["paper_images_per_sec"] for r in points], color=color, linestyle="none",
                       marker="x", markersize=8, label=f"{system}: paper")
            efficiency.plot(gpus, [r["paper_images_per_sec"] / (r["gpus"] * paper_one) for r in points],
                            color=color, linestyle="none", marker="x", markersize=8)
    for axis, label in ((speed, "images/sec"), (efficiency, "scaling efficiency")):
        axis.set_xscale("log", base=2)
        axis.set_xlabel("GPUs")
        axis.set_ylabel(label)
        axis.grid(True, alpha=0.3)
    speed.set_yscale("log")
    efficiency.set_ylim(0, 1.1)
    speed.legend(fontsize="x-small")
    if title:
        fig.suptitle(title, fontsize="medium")
    fig.tight_layout()
    return fig
