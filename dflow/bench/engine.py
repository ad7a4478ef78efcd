"""What the engine costs: a planned step against the same kernels called by hand.

Two graphs, each measured in one process in interleaved rounds (every variant once
per round, in a rotating order), so that a busy machine slows all of them alike:

- a chain of 1,000 tiny ops (``Add`` of two float64 scalars): microseconds per op of
  ``Session.run``, of the compiled stage and of the dependency-counting loop
  (:func:`~dflow.runtime.executor.execute`), of the kernels called by hand over a dict
  of tensor names, and of the bare kernels, each fed the last one's result; the per-op
  overhead is each one's excess over the bare kernels;
- the CIFAR-10 training step at a batch size: ``Session.run`` against its kernels
  by hand, the ratio taken per round and given with its spread.

>>> from dflow.bench import engine
>>> result = engine.tiny_chain_overhead(ops=50, rounds=1, steps=2)
>>> sorted(result["us_per_op"])
['by_hand', 'compiled_stage', 'counting_executor', 'kernels_alone', 'session_run']
"""

from __future__ import annotations

import functools
import statistics
import time

import numpy

__all__ = ["tiny_chain_overhead", "step_overhead", "kernels_by_hand"]


def kernels_by_hand(session, fetch, feeds):
    """The session's plan for ``fetch`` as a flat loop, the way a careful hand-written step runs:
    every kernel in the same order, each array dropped after its last use, nothing else."""
    import array_api_compat.numpy as xp

    from ..runtime.executor import run_op

    session.run(fetch, feeds)
    plan = session.runner.plans.values()[-1].schedule  # the step, planned by the run just above
    nodes = [plan.nodes[name] for name in session.last_run_stats.order]
    last_use = {t: i for i, node in enumerate(nodes) for t in node.inputs}
    dead_after = [[t for t, last in last_use.items() if last == i] for i in range(len(nodes))]
    fed = {t.name: numpy.asarray(v) for t, v in feeds.items()}

    def step():
        values = dict(fed)
        for node, dead in zip(nodes, dead_after):
            outputs = run_op(node, [values[t] for t in node.inputs], session.state, xp)
            for i, value in enumerate(outputs):
                values[f"{node.name}:{i}"] = value
            for t in dead:
                del values[t]

    return step


def _interleaved(variants: dict, rounds: int, steps: int) -> dict[str, list[float]]:
    """Seconds per step of each variant, one mean per round, the order rotating by round."""
    names = list(variants)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for name in names:  # warm-up: plans, first-touch allocations
        variants[name]()
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            start = time.perf_counter()
            for _ in range(steps):
                variants[name]()
            seconds[name].append((time.perf_counter() - start) / steps)
    return seconds


def _median_spread(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def tiny_chain_overhead(ops: int = 1000, rounds: int = 5, steps: int = 20) -> dict:
    """Microseconds per op of a chain of ``ops`` scalar additions, four ways (see above)."""
    import dflow as tf
    from dflow.ops.registry import get_opdef
    from dflow.runtime.executor import RunStats, execute, run_op

    graph = tf.Graph()
    with graph.as_default():
        x = tf.placeholder(tf.float64, [], name="x")
        one = tf.constant(1.0, tf.float64)
        y = x
        for _ in range(ops):
            y = tf.add(y, one)
    session = tf.Session(graph=graph)
    feeds = {x: 0.0}
    session.run(y, feeds)
    plan = session.runner.plans.values()[-1].schedule
    by_name = {x.name: numpy.float64(0.0)}
    planned = len(plan.nodes)

    namespaces = session.runner.namespaces

    def run(compiled):
        return lambda: execute(plan, by_name, session.state, namespaces, 1, RunStats(), compiled)

    adds = [node for node in plan.nodes.values() if node.type == "Add"]
    kernels = [functools.partial(get_opdef(node.type).kernel, **node.attrs) for node in adds]
    xp = session.runner.namespaces["CPU"]
    (constant,) = run_op(plan.nodes[one.op.name], [], session.state, xp)  # as the plan has it

    def kernels_alone():  # the floor: each Add's kernel on the last one's result, nothing else
        value = by_name[x.name]
        for kernel in kernels:
            value = kernel(xp, value, constant)

    seconds = _interleaved({"session_run": lambda: session.run(y, feeds), "compiled_stage": run(True),
                            "counting_executor": run(False), "by_hand": kernels_by_hand(session, y, feeds),
                            "kernels_alone": kernels_alone}, rounds, steps)
    session.close()
    us = {name: statistics.median(values) / planned * 1e6 for name, values in seconds.items()}
    return {"ops": planned, "rounds": rounds, "us_per_op": us,
            "overhead_us_per_op": {name: us[name] - us["kernels_alone"] for name in us
                                   if name != "kernels_alone"}}


def step_overhead(batch_size: int = 100, rounds: int = 5, steps: int = 5) -> dict:
    """``Session.run`` of the CIFAR-10 training step against its kernels by hand: images/sec of
    each per round and the by-hand/session ratio per round (1.0: the engine costs nothing)."""
    from .cifar_step import build_dflow_step, synthetic_batch

    session, train_op, images, labels = build_dflow_step(batch_size, "NHWC")
    x, y = synthetic_batch(batch_size)
    feeds = {images: x, labels: y}
    seconds = _interleaved({"session_run": lambda: session.run(train_op, feeds),
                            "by_hand": kernels_by_hand(session, train_op, feeds)}, rounds, steps)
    ratios = [s / h for s, h in zip(seconds["session_run"], seconds["by_hand"])]
    return {"batch_size": batch_size, "rounds": rounds, "steps_per_round": steps,
            "images_per_sec": {name: [batch_size / s for s in values] for name, values in seconds.items()},
            "overhead": ratios, "overhead_spread": _median_spread(ratios)}
