"""``DaskRunner``: each stage of a step is one Dask task, scheduled by Dask's scheduler.

Planning is the direct path's (:class:`~dflow.distributed.runner.DirectRunner`): the passes
place and partition the step, and each task's stages are registered once on its worker. A
step is then one task graph, sent to the scheduler in one message (``client.get`` of a
high-level graph):

- every stage is a task ``run_stage(plan_id, indices, final, run_id, feeds, follows, *upstream)``,
  annotated ``resources={"ps/0": ROLE_SHARE}``: only the worker holding that role offers the resource
  (:func:`dflow.cluster.role_resources`), so the scheduler runs the stage there, and a worker
  restarted under the same role takes the stages again. A stage takes a small share of it, not
  all: the stages of concurrent steps (between-graph replicas) run there side by side, as on
  the direct path, and one that waits for another step (a synchronous replica's token, the
  chief's accumulators) secedes from the worker's threads while it waits;
- the values a stage sends to another task are its result, and the consumer stage depends on
  it: Dask moves them worker to worker, never through the scheduler or the client;
- what a stage keeps for a later stage of its own task stays in the worker
  (``DflowWorker.kept``), and each stage depends on its task's previous one, so a task's
  stages run in level order as on the direct path; variables never leave their owner;
- the fetched values come back through a small ``select`` task per fetching stage, so that a
  stage's gradients never travel to the client with its loss;
- every hop between tasks costs scheduler round trips, so a stage whose results no other task
  takes runs in one task with its task's next one (``_layout``); a last stage of NoOps that
  only waits for other tasks' updates is in no plan (``passes.drop_waits``).

Task keys say what runs where and when, so the dashboard's task stream shows training:
``worker/0:forward-backward:step 120 [3f9c0a1e #1]`` (the bracket tells sessions, and a
task's stages, apart).
The README's "How a step runs" compares this path with the direct one.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections import deque
from collections.abc import Collection
from dataclasses import dataclass, field

import distributed
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer
from distributed.worker import thread_state

from ..cluster.spec import role_name, worker_infos
from ..errors import AbortedError, DeadlineExceededError, FailedPreconditionError, OpError, UnavailableError
from ..placement import DeviceSpec
from ..runtime.executor import RunStats
from ..runtime.passes import Plan
from .runner import DirectRunner, cluster_tasks, count_sent
from .worker import STAGE_STATS, nbytes, run_stage, select

__all__ = ["DaskRunner", "role_resource", "resources_by_role"]

WATCH_EVERY_S = 0.5  # how often a step waiting for its tasks checks that their workers are there
ROLE_SHARE = 1 / 64  # of its role's resource (1) a stage takes: up to 64 at once (exact in binary)


def resources_by_role(client: distributed.Client) -> dict[str, dict]:
    """Each worker's Dask resources by its role (its name): ``{"ps/0": {"ps": 1, "ps/0": 1}}``."""
    return {info.get("name"): info.get("resources", {}) for info in worker_infos(client).values()}


def role_resource(task: str) -> str:
    """The Dask resource that only ``task``'s worker offers: ``/job:ps/task:0`` -> ``ps/0``."""
    spec = DeviceSpec.from_string(task)
    return role_name(spec.job, spec.task)


@dataclass
class _StageTask:
    """Consecutive stages of one task, run as one task of every step: where, and what they wait for."""

    task: str
    indices: tuple[int, ...]  # the stages it runs, in order
    final: bool  # no later stage of its task runs in the step
    label: str  # "worker/0:forward-backward"
    resource: str  # "worker/0"
    feeds: tuple[str, ...]
    upstream: tuple[tuple[str, int], ...]  # (task, first index) of the stage tasks whose results it takes
    fetches: tuple[str, ...]
    sends: bool  # its result holds values for other tasks, not only fetches

    @property
    def index(self) -> int:
        return self.indices[0]


@dataclass
class _Step:
    """A submitted step: what it ran with, and the futures of its results and of its last stages."""

    number: int
    plan: Plan
    feeds: dict
    stats: RunStats
    results: list = field(default_factory=list)  # the keys holding fetched values, and the final ones
    last: dict = field(default_factory=dict)  # task -> its last stage in the step


class DaskRunner(DirectRunner):
    """Runs a Session's steps as Dask tasks on the cluster at ``target``."""

    def __init__(self, target: str, graph, config, timeout_s: float | None = None):
        super().__init__(target, graph, config, timeout_s)
        self._session = uuid.uuid4().hex[:8]
        self._steps = itertools.count(1)
        self._layouts: dict[str, list[_StageTask]] = {}
        self.steps_in_flight = config.steps_in_flight
        # Per thread (a chief's queue runner runs steps beside the training loop's): the last
        # step's futures, released only after the next step is submitted (the client and the
        # scheduler batch their messages, at most one send per 10 ms, per 5 ms to a worker, so a
        # release sent just before the next step's graph held that graph back, ~5 ms a step);
        # and the steps left running (ConfigProto.steps_in_flight)
        self._per_thread = threading.local()

    def _make_plan(self, fetches: list, fed: Collection[str]) -> Plan:
        plan = super()._make_plan(fetches, fed)
        self._require_role_resources(plan.tasks)
        self._layouts[plan.plan_id] = _layout(plan)
        return plan

    def _require_role_resources(self, tasks: list[str]) -> None:
        """Each task's worker must offer its role as a resource, or its stages would wait forever."""
        offered = resources_by_role(self.client)
        for task in tasks:
            role = role_resource(task)
            if role not in offered.get(role, {}):
                raise FailedPreconditionError(
                    f"ConfigProto(runner='dask') pins each stage to its task's worker by the resource "
                    f"naming its role, but worker {role} offers only {sorted(offered.get(role, {}))}: "
                    f"start it with dflow's launchers (tf.cluster.local, `dflow worker`, which add "
                    f"--resources \"{role}=1\"), or use runner='direct'")

    def _run_once(self, plan: Plan, feeds: dict, stats: RunStats) -> dict:
        local = self._thread_state()
        in_task = getattr(thread_state, "key", None) is not None  # a between-graph replica's program
        leave_running = (self.steps_in_flight > 1 and not in_task and not plan.fetches
                         and not any(stage.waits for stages in plan.stages.values() for stage in stages))
        if not leave_running:
            self._finish_in_flight(local)  # the earlier steps first: their errors are this run's
        step = _Step(next(self._steps), plan, feeds, stats)
        graph, fetching, finishing, last = self._step_graph(plan, feeds, step.number, local.tails)
        keys = fetching + finishing
        # only a step left running is followed by the next one: a step run to its end holds no
        # more of its stages' results than the client takes
        wanted = list(dict.fromkeys(keys + list(last.values()))) if leave_running else keys
        futures = dict(zip(wanted, self.client.get(graph, wanted, sync=False)))
        step.results = [futures[key] for key in keys]
        step.last = {task: futures[key] for task, key in last.items() if key in futures}
        if leave_running:  # the next step's stages on each task will follow this one's last there
            self._release(local, [])
            local.in_flight.append(step)
            local.tails.update(step.last)
            while len(local.in_flight) >= self.steps_in_flight:
                self._finish(local, local.in_flight[0])
            return {}
        self._release(local, list(futures.values()))
        if in_task:  # give the worker's thread back while waiting: this worker's own stages need it
            distributed.secede()
        try:
            return self._collect(step)
        finally:
            if in_task:
                distributed.rejoin()

    def _thread_state(self):
        local = self._per_thread
        if not hasattr(local, "in_flight"):
            local.in_flight, local.tails, local.last_futures = deque(), {}, []
        return local

    def _release(self, local, futures: list) -> None:
        """Release the last step's futures (now that the next step's graph is on its way)."""
        for future in local.last_futures:
            future.release()
        local.last_futures = futures

    def _collect(self, step: _Step) -> dict:
        """Wait for ``step``; its fetched values (its error raises), and its stats filled."""
        self._wait(step.plan, step.results, step.number)
        errors = [f for f in step.results if f.status == "error"]
        if errors:
            errors[0].result()  # raises the stage's error, as its task raised it
        # only the fetched values and the stats travel back (a last stage that fetches
        # nothing returns only the stats of the stages it followed), in one gather
        results = self.client.gather(step.results, direct=self.worker is None)
        values = {name: value for result in results for name, value in result.items()}
        fetched = {name: values[name] for name in step.plan.fetches if name in values}
        self._fill(step.stats, step.plan, step.feeds, results, fetched)
        return fetched

    def _finish(self, local, step: _Step) -> None:
        """Wait for the oldest step left running; if it failed, so do the steps after it (they
        follow its updates): they are dropped, and its error raises here, saying which step."""
        try:
            self._collect(step)
        except OpError as error:
            dropped = len(local.in_flight) - 1
            self._drop_in_flight(local)
            with_it = f" and {dropped} later step(s) with it" if dropped else ""
            raise AbortedError(
                f"step {step.number}, left running by an earlier run (ConfigProto(steps_in_flight="
                f"{self.steps_in_flight})), failed{with_it}: {type(error).__name__}: {error.message}",
                op=error.op) from error
        except BaseException:
            self._drop_in_flight(local)
            raise
        local.in_flight.popleft()
        for task, future in step.last.items():
            if local.tails.get(task) is future:
                del local.tails[task]
        for future in step.results + list(step.last.values()):
            future.release()

    def _finish_in_flight(self, local) -> None:
        while local.in_flight:
            self._finish(local, local.in_flight[0])

    def _drop_in_flight(self, local) -> None:
        futures = [f for step in local.in_flight for f in step.results + list(step.last.values())]
        self.client.cancel(futures)
        local.in_flight.clear()
        local.tails.clear()

    def finish(self) -> None:
        """Wait for the steps this thread's runs left running (ConfigProto.steps_in_flight); the
        first error among them raises here."""
        self._finish_in_flight(self._thread_state())

    def close(self) -> None:
        """Waits for this thread's steps left running (their error raises after the close)."""
        local = self._thread_state()
        try:
            self._finish_in_flight(local)
        finally:
            self._release(local, [])
            super().close()

    def _fill(self, stats: RunStats, plan: Plan, feeds: dict, results: list[dict], fetched: dict) -> None:
        """``stats`` of a step from its stages' reports: the bytes sent per link (fed values from
        the client, values between tasks, fetched values to the client), each task's compute
        time and timeline, the staleness of its updates."""
        here = self.here or "client"
        reports = {key: report for result in results for key, report in result[STAGE_STATS].items()}
        traffic = stats.bytes_sent
        for task, names in plan.feeds.items():
            if names:
                count_sent(traffic, here, task, sum(nbytes(feeds[name]) for name in names))
        for (task, _), report in sorted(reports.items()):
            for dest, count in report["sent"].items():
                count_sent(traffic, task, dest, count)
            stats.compute_s[task] = stats.compute_s.get(task, 0.0) + report["end"] - report["start"]
            stats.timeline.append((task, "compute", report["start"], report["end"]))
            if report["staleness"] is not None:
                stats.staleness = max(stats.staleness or 0, report["staleness"])
        for s in self._layouts[plan.plan_id]:
            count = sum(nbytes(fetched[name]) for name in s.fetches if name in fetched)
            if count and s.task != here:
                count_sent(traffic, s.task, here, count)

    def _wait(self, plan: Plan, futures: list, step: int) -> None:
        """Until the step's tasks are done; a task whose worker left meanwhile is an
        UnavailableError at once (as on the direct path), not a wait for the deadline."""
        deadline = time.monotonic() + self.timeout
        while True:
            left = max(0.0, min(WATCH_EVERY_S, deadline - time.monotonic()))
            try:
                with self.client.as_current():  # (wait finds its client as the current one)
                    distributed.wait(futures, timeout=left)
                return
            except (TimeoutError, distributed.TimeoutError):
                pass
            late = [f.key for f in futures if not f.done()]
            if time.monotonic() >= deadline:
                raise DeadlineExceededError(f"step {step} waited {self.timeout:g} s for {', '.join(late)}: "
                                            "are those workers alive? (ConfigProto.operation_timeout_in_ms "
                                            "sets this limit)")
            gone = sorted(set(plan.tasks) - set(cluster_tasks(self.client)))
            if gone:
                raise UnavailableError(f"task {', '.join(gone)} left the cluster during step {step} (its "
                                       f"worker died or was stopped), so {', '.join(late)} cannot run")

    def _step_graph(self, plan: Plan, feeds: dict, step: int,
                    after: dict) -> tuple[HighLevelGraph, list, list, dict]:
        """Step ``step`` of ``plan`` as one task graph, whose first stage on each task follows
        ``after[task]`` (a future of an earlier step's last stage there, if it may still run);
        with the keys holding the fetched values, the keys of the stages nothing in the step
        follows (it is done when they are) and each task's last stage's key."""
        layout = self._layouts[plan.plan_id]
        run_id = f"{self._session}-{step}"
        keys = {(s.task, s.index): f"{s.label}:step {step} [{self._session} #{s.index}]" for s in layout}
        layers, dependencies, fetching, finishing = {}, {}, [], []
        has_dependents = {up for s in layout for up in s.upstream}
        for s in layout:
            key, upstream = keys[s.task, s.index], [keys[u] for u in s.upstream]
            stage_feeds = {name: feeds[name] for name in s.feeds}
            follows = [after[s.task]] if s.index == 0 and s.task in after else []
            task = (run_stage, plan.plan_id, s.indices, s.final, run_id, stage_feeds, follows, *upstream)
            layers[key] = MaterializedLayer({key: task}, annotations={"resources": {s.resource: ROLE_SHARE}})
            dependencies[key] = set(upstream)
            if s.fetches and s.sends:  # a select task, so that what it sends does not reach the client
                fetch_key = f"{s.label}:fetch:step {step} [{self._session} #{s.index}]"
                layers[fetch_key] = MaterializedLayer({fetch_key: (select, key, list(s.fetches))},
                                                      annotations={"resources": {s.resource: ROLE_SHARE}})
                dependencies[fetch_key] = {key}
                fetching.append(fetch_key)
            elif s.fetches:
                fetching.append(key)
            elif (s.task, s.index) not in has_dependents:
                finishing.append(key)
        last = {s.task: keys[s.task, s.index] for s in layout if s.final}
        return HighLevelGraph(layers, dependencies), fetching, finishing, last


def _layout(plan: Plan) -> list[_StageTask]:
    """The stages of ``plan`` as Dask tasks, each with the stage tasks it takes results from
    (those it receives values or tokens from, and its own task's previous one).

    Every hop between Dask tasks costs scheduler round trips (a few ms each), so a stage whose
    results no other task takes runs in one task with its task's next stage.
    """
    fed = plan.graph.graph.get("fed", frozenset())
    groups: dict[str, list[list[int]]] = {}
    for task, stages in sorted(plan.stages.items()):
        groups[task] = [[0]]
        for i in range(1, len(stages)):
            if stages[groups[task][-1][-1]].sends:
                groups[task].append([i])
            else:
                groups[task][-1].append(i)
    group_of = {(task, level_index): (task, group[0]) for task, task_groups in groups.items()
                for group in task_groups for level_index in group}
    index_of = {(task, stage.level): (task, i) for task, stages in plan.stages.items()
                for i, stage in enumerate(stages)}
    layout = []
    for task, task_groups in groups.items():
        stages = plan.stages[task]
        for n, group in enumerate(task_groups):
            upstream = {group_of[task, group[0] - 1]} if n else set()
            for i in group:
                for node in stages[i].schedule.nodes.values():
                    producers = [t.rpartition(":")[0] for t in node.inputs if t not in fed]
                    for producer in producers + list(node.control_inputs):
                        if producer not in stages[i].schedule.nodes:
                            upstream.add(group_of[index_of[plan.graph.nodes[producer]["stage"]]])
            upstream.discard((task, group[0]))
            members = [stages[i] for i in group]
            names = [m.name for m in members if m.name != "compute-values"] or ["compute-values"]
            layout.append(_StageTask(
                task, tuple(group), n == len(task_groups) - 1, f"{role_resource(task)}:{names[0]}",
                role_resource(task), tuple(sorted({f for m in members for f in m.from_client})),
                tuple(sorted(upstream)), tuple(f for m in members for f in m.fetches),
                any(bool(m.sends) for m in members)))
    return layout

