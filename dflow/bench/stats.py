"""tf_cnn_benchmarks' numbers: images/sec with its uncertainty and jitter, per replica and summed,
and the progress line that prints them."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["speed_stats", "images_per_sec_stats", "perf_timing_str"]


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
