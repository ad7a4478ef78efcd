"""``dflow bench --local``: single-process training throughput on the CPU.

Measures the CIFAR-10 tutorial CNN (24x24x3, SGD) at the first seed's batch
sizes (1, 10, 50, 100, 200, 400): warm-up steps, then the mean images/sec of
the timed steps. Reported side by side in the same run:

- the engine's overhead (:mod:`dflow.bench.engine`): per op on a chain of 1,000
  tiny ops, and ``Session.run`` of the step against the same kernels by hand, in
  interleaved rounds with their spread;
- PyTorch on the CPU with the same model and batch, when torch is installed;
- peak memory of a training step (resident-set growth in a fresh process, and
  the executor's peak of live tensor bytes) at the largest batch.

Every measurement runs in a fresh process, so one does not inherit another's
memory or threads.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import platform
import resource
import traceback

from .cifar_step import build_dflow_step, synthetic_batch, time_steps

__all__ = ["run", "BATCH_SIZES"]

BATCH_SIZES = (1, 10, 50, 100, 200, 400)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def measure_dflow(batch_size: int, warmup: int, steps: int, data_format: str = "NHWC") -> dict:
    """images/sec of dflow's training step."""
    sess, train_op, images, labels = build_dflow_step(batch_size, data_format)
    x, y = synthetic_batch(batch_size)
    feeds = {images: x, labels: y}
    rss_before = _rss_bytes()  # before the first step: freed memory often stays resident
    times = time_steps(lambda: sess.run(train_op, feeds), warmup, steps)
    result = _summary("dflow", batch_size, times)
    result["step_memory_bytes"] = max(0, _peak_rss_bytes() - rss_before)
    result["live_tensor_peak_bytes"] = sess.last_run_stats.peak_bytes
    return result


def measure_torch(batch_size: int, warmup: int, steps: int) -> dict:
    """images/sec of the same model and SGD step in PyTorch on the CPU."""
    import torch
    from torch import nn

    torch.set_num_threads(os.cpu_count() or 1)
    model = nn.Sequential(
        nn.Conv2d(3, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(3, 2, padding=1),
        # torch's LRN divides alpha by the window size; TF's does not
        nn.LocalResponseNorm(9, alpha=0.001, beta=0.75, k=1.0),
        nn.Conv2d(64, 64, 5, padding=2), nn.ReLU(),
        nn.LocalResponseNorm(9, alpha=0.001, beta=0.75, k=1.0), nn.MaxPool2d(3, 2, padding=1),
        nn.Flatten(), nn.Linear(6 * 6 * 64, 384), nn.ReLU(), nn.Linear(384, 192), nn.ReLU(),
        nn.Linear(192, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = synthetic_batch(batch_size)
    images = torch.from_numpy(x).permute(0, 3, 1, 2).contiguous()
    labels = torch.from_numpy(y).long()

    def step():
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(images), labels).backward()
        optimizer.step()

    rss_before = _rss_bytes()
    times = time_steps(step, warmup, steps)
    result = _summary("pytorch", batch_size, times)
    result["step_memory_bytes"] = max(0, _peak_rss_bytes() - rss_before)
    result["torch_version"] = torch.__version__
    return result


def _summary(name: str, batch_size: int, times: list[float]) -> dict:
    mean = sum(times) / len(times)
    return {"framework": name, "batch_size": batch_size, "steps": len(times),
            "step_seconds": times, "mean_step_seconds": mean, "images_per_sec": batch_size / mean}


def _child(connection, function, args, kwargs):
    try:
        connection.send(("ok", function(*args, **kwargs)))
    except BaseException:
        connection.send(("error", traceback.format_exc()))
    finally:
        connection.close()


def in_fresh_process(function, *args, **kwargs) -> dict:
    """``function(*args, **kwargs)`` in a new process. Not a Pool: a pool's daemonic workers
    may not start the cluster's worker processes."""
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(sender, function, args, kwargs))
    process.start()
    sender.close()
    try:
        status, value = receiver.recv()
    except EOFError:  # it died without a word (killed, out of memory)
        status, value = "error", "the process ended without a result"
    process.join()
    if status != "ok" and process.exitcode:
        value += f" (exit code {process.exitcode})"
    if status != "ok":
        raise RuntimeError(f"{function.__name__} failed in its process:\n{value}")
    return value


def write_results(results: dict, output: str | None, echo) -> None:
    """``results`` as JSON at ``output`` (when given)."""
    if output:
        with open(output, "w") as f:
            json.dump(results, f, indent=1)
        echo(f"results written to {output}")


def _torch_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def _steps_for(batch_size: int, steps: int) -> int:
    # small batches are fast: time more steps so the mean is not noise
    return max(steps, min(100, 2000 // batch_size))


def run(batch_sizes=BATCH_SIZES, warmup: int = 10, steps: int = 20, compare_batch: int = 100,
        memory_batch: int = 400, output: str | None = None, torch: bool | None = None,
        echo=print) -> dict:
    """Run the whole local benchmark; print a table and return (and write) the results."""
    torch = _torch_available() if torch is None else torch
    results = {"machine": machine_info(), "warmup_steps": warmup, "sweep": [], "compare": {}}
    echo(f"CIFAR-10 tutorial CNN, SGD, synthetic data, NHWC; {warmup} warm-up steps, then timed")
    echo(f"{'batch':>6} {'dflow img/s':>12} {'torch img/s':>12} {'ratio':>6}")
    for batch in batch_sizes:
        n = _steps_for(batch, steps)
        ours = in_fresh_process(measure_dflow, batch, warmup, n)
        theirs = in_fresh_process(measure_torch, batch, warmup, n) if torch else None
        results["sweep"].append({"dflow": ours, "pytorch": theirs})
        ratio = f"{ours['images_per_sec'] / theirs['images_per_sec']:.2f}" if theirs else "-"
        torch_ips = f"{theirs['images_per_sec']:.1f}" if theirs else "n/a"
        echo(f"{batch:>6} {ours['images_per_sec']:>12.1f} {torch_ips:>12} {ratio:>6}")
    results["compare"] = _engine_overhead(compare_batch, _steps_for(compare_batch, steps), echo)
    results["memory"] = _memory(memory_batch, warmup=2, steps=3, torch=torch, echo=echo)
    write_results(results, output, echo)
    return results


def _engine_overhead(batch: int, steps: int, echo, rounds: int = 5) -> dict:
    from . import engine

    chain = in_fresh_process(engine.tiny_chain_overhead, 1000, rounds)
    us, over = chain["us_per_op"], chain["overhead_us_per_op"]
    echo(f"engine, a chain of {chain['ops']} tiny ops, us/op (median of {rounds} interleaved rounds): "
         f"Session.run {us['session_run']:.1f}, compiled stage {us['compiled_stage']:.1f}, counting "
         f"executor {us['counting_executor']:.1f}, kernels by hand {us['by_hand']:.1f}, bare kernels "
         f"{us['kernels_alone']:.1f} -> overhead per op {over['session_run']:.1f} us (target <= 5)")
    step = in_fresh_process(engine.step_overhead, batch, rounds, max(1, steps // 4))
    spread = step["overhead_spread"]
    echo(f"engine at batch {batch}: Session.run / kernels by hand = {spread['median']:.3f}x "
         f"[{spread['min']:.3f}-{spread['max']:.3f}] over {rounds} interleaved rounds (target <= 1.05x)")
    return {"tiny_chain": chain, "step": step}


def _memory(batch: int, warmup: int, steps: int, torch: bool, echo) -> dict:
    ours = in_fresh_process(measure_dflow, batch, warmup, steps)
    theirs = in_fresh_process(measure_torch, batch, warmup, steps) if torch else None
    mb = 1 / 2**20
    line = (f"peak memory of a training step at batch {batch}: dflow "
            f"{ours['step_memory_bytes'] * mb:.0f} MB "
            f"(live tensors {ours['live_tensor_peak_bytes'] * mb:.0f} MB)")
    if theirs:
        line += f", PyTorch {theirs['step_memory_bytes'] * mb:.0f} MB"
    echo(line)
    return {"batch_size": batch, "dflow": ours, "pytorch": theirs}


def machine_info() -> dict:
    import dask
    import numpy as np

    import dflow

    return {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "python": platform.python_version(), "numpy": np.__version__, "dask": dask.__version__,
            "dflow": dflow.DFLOW_VERSION}
