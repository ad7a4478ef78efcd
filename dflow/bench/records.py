"""The record of a benchmark run (:data:`RECORD_KEYS`): what it measured and on which machine; and
the JSON-lines file that keeps records."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess

from .stats import images_per_sec_stats

__all__ = ["RECORD_KEYS", "make_record", "append_record", "machine", "cpu_model", "gpu_names"]

RECORD_KEYS = ("settings", "machine", "images_per_sec", "images_per_sec_mean", "images_per_sec_std",
               "step_times_s", "bytes_per_step", "param_bytes", "data_wait_s_per_step",
               "compute_s_per_step", "communication_s_per_step", "scaled_down", "preset", "accuracy",
               "time_to_steps_s")


def make_record(settings: dict, runs: list[list[dict]]) -> dict:
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
    info.update(cpu=cpu_model() or info["cpu"], gpu=gpu_names(), distributed=distributed.__version__,
                zarr=zarr.__version__, platform=platform.platform())
    return info


def cpu_model() -> str | None:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return None


def gpu_names() -> list[str] | None:
    """The NVIDIA GPUs' names (nvidia-smi), or None without one."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=10, check=True).stdout
        return [name.strip() for name in out.splitlines() if name.strip()] or None
    return None
