"""Runners: what executes a planned step (DESIGN.md, "the flow of one step", 5).

A runner has three methods: ``plan(fetches, fed) -> Plan`` (the passes of
:mod:`~dflow.runtime.passes`, cached per signature), ``run(plan, feeds, stats) -> values``
(the fetched values by tensor name) and ``close()``, and says whether a step copies the fed
arrays on its way (``copies_feeds``: then the session does not). ``Session`` makes one with
:func:`make_runner` and otherwise does not care which it has:

- :class:`LocalRunner`: the dependency-counting executor in this process;
- :class:`~dflow.distributed.dask_runner.DaskRunner`: each stage one Dask task, pinned to its
  task's worker by the role's resource;
- :class:`~dflow.distributed.runner.DirectRunner`: stages registered on the workers once, a
  step one RPC per task straight to them (an optimization the README measures).

>>> import numpy
>>> import dflow as tf
>>> with tf.Graph().as_default() as g:
...     x = tf.placeholder(tf.float32, [2], name="x")
...     y = x * 3.0
...     runner = LocalRunner(g, tf.ConfigProto())
...     plan = runner.plan([y], {"x:0"})
...     runner.run(plan, {"x:0": numpy.ones(2, numpy.float32)})[y.name]
array([3., 3.], dtype=float32)
"""

from __future__ import annotations

import sys
from collections.abc import Collection
from typing import Protocol

from .devices import gpu_namespace, numpy_namespace
from .executor import RunStats, execute
from .memory import keep_freed_memory_for_reuse
from .passes import LOCAL_TASK, Devices, Plan, PlanCache, make_plan
from .state import SessionState

__all__ = ["Runner", "LocalRunner", "make_runner", "RUNNERS"]

RUNNERS = ("local", "direct", "dask")  # ConfigProto(runner=...); "" picks local, or direct for a target


class Runner(Protocol):
    """What a Session runs its steps with."""

    #: whether running a step copies every fed array (to another process), so that the session
    #: need not copy the caller's arrays first
    copies_feeds: bool

    def plan(self, fetches: list, fed: Collection[str]) -> Plan:
        """The (cached) plan of the step fetching ``fetches`` with the tensors named in ``fed`` fed."""

    def run(self, plan: Plan, feeds: dict, stats: RunStats | None = None) -> dict:
        """One step: the fetched tensors' values by name."""

    def close(self) -> None:
        """Forget the plans and release what the runner holds."""


class LocalRunner:
    """Runs every op in this process, holding the variables in :attr:`state`."""

    copies_feeds = False  # its ops read the fed arrays where they are

    def __init__(self, graph, config):
        self.config = config
        keep_freed_memory_for_reuse()  # each step's arrays reuse the last step's memory
        self.state = _new_state(config)
        self.namespaces = {"CPU": numpy_namespace}
        if gpu_namespace() is not None and (config.device_count or {}).get("GPU", 1) > 0:
            self.namespaces["GPU"] = gpu_namespace()
        threads = config.inter_op_parallelism_threads
        self.num_threads = threads if threads > 0 else 1
        self.devices = Devices.this_process(gpus=int("GPU" in self.namespaces))
        self.graph = graph
        self.plans = PlanCache(self._make_plan)

    def plan(self, fetches: list, fed: Collection[str]) -> Plan:
        return self.plans.get(fetches, fed)

    def _make_plan(self, fetches: list, fed: Collection[str]) -> Plan:
        plan = make_plan(self.graph, fetches, fed, self.devices, self.config.allow_soft_placement)
        if self.config.log_device_placement:  # to stderr in TF's form, as TF prints it whatever the logging
            for name, device in plan.graph.nodes(data="device"):
                print(f"{name}: ({plan.graph.nodes[name]['op'].type}): {device}", file=sys.stderr)
        return plan

    def run(self, plan: Plan, feeds: dict, stats: RunStats | None = None) -> dict:
        stages = plan.stages.get(LOCAL_TASK, [])
        if not stages:  # every fetch was fed
            return {}
        (stage,) = stages  # one task: no task boundary, so one level
        return execute(stage.schedule, feeds, self.state, self.namespaces, self.num_threads, stats)

    def close(self) -> None:
        # the state stays: a queue runner's step that started before the close must find its
        # queue cancelled (CancelledError), not a fresh one to block on
        self.state.cancel_waits()
        self.plans.clear()


def _new_state(config) -> SessionState:
    state = SessionState()
    if config.operation_timeout_in_ms > 0:
        state.operation_timeout_s = config.operation_timeout_in_ms / 1000
    return state


def make_runner(target: str, graph, config) -> Runner:
    """The runner for a session on ``target`` ("" for this process) with ``config``: its
    ``runner`` field names one of :data:`RUNNERS`, or "" for the default (local without a
    target, else the direct path: see the README's "How a step runs" for the measurements)."""
    choice = config.runner or ("direct" if target else "local")
    if choice not in RUNNERS:
        raise ValueError(f"ConfigProto(runner={config.runner!r}): choose one of {', '.join(RUNNERS)}, "
                         "or leave it empty for the default")
    if config.steps_in_flight > 1 and choice != "dask":
        raise ValueError(f"ConfigProto(steps_in_flight={config.steps_in_flight}) leaves steps running as "
                         f"Dask tasks: it needs runner='dask', not {choice!r}")
    if choice == "local":
        if target:
            raise ValueError(f"ConfigProto(runner='local') runs in this process, but the session was given "
                             f"the target {target!r}: leave the target empty, or pick 'direct' or 'dask'")
        return LocalRunner(graph, config)
    if not target:
        raise ValueError(f"ConfigProto(runner={choice!r}) runs on a cluster: give tf.Session its target "
                         "(tf.Session(cluster.target, config=...))")
    timeout_s = config.operation_timeout_in_ms / 1000
    if choice == "dask":  # imports distributed: only when asked
        from ..distributed.dask_runner import DaskRunner

        return DaskRunner(target, graph, config, timeout_s)
    from ..distributed.runner import DirectRunner

    return DirectRunner(target, graph, config, timeout_s)
