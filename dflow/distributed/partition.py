"""Placing a pruned graph on a cluster's tasks and cutting it into stages.

Steps 2-3 of DESIGN.md's "flow of one step", as pure functions over plain data
(no Dask here, so they are tested without a cluster):

- :func:`place` gives every op a task (``/job:ps/task:0``) and a device type:
  the op's device string, its missing job/task filled from the session's
  default task, ops reading or updating a variable colocated with it, a
  constant used on one device only made there;
- :func:`partition` groups each task's ops into *stages*. An op's level is the
  number of task boundaries on its longest input path, and a stage is one
  (task, level). Every value a stage receives from another task comes from a
  lower level, so each task runs its stages in level order, waiting only at a
  stage's start for what it receives, and the steps of all tasks together can
  never wait in a circle. A parameter-server step is three stages: read the
  variables on the PS (level 0), compute the gradients on the worker (1),
  apply them on the PS (2).

A cross-task edge becomes a send in the producing stage and a receive in the
consuming one; a control edge sends a token (``^op``) instead of a value.

:func:`stages_to_json` and :func:`stages_from_json` carry a task's stages to its worker as
plain data (JSON text, the graph file's encoding of attributes): a worker never unpickles
a plan, and an op type it does not know is refused when the plan is registered.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from dataclasses import dataclass, field

from ..errors import InvalidArgumentError
from ..graph import Operation
from ..ops.registry import get_opdef
from ..placement import DeviceSpec
from ..plain_values import decode, encode
from ..runtime.executor import OpNode, Schedule, schedule
from ..runtime.lowering import to_node

__all__ = ["Stage", "Partition", "MissingTaskError", "place", "partition", "describe", "task_of",
           "ref_inputs", "stages_to_json", "stages_from_json"]

log = logging.getLogger("dflow")


@dataclass
class Stage:
    """The ops of one task at one level, and what flows in and out of them."""

    task: str  # "/job:ps/task:0"
    level: int
    schedule: Schedule
    from_client: tuple[str, ...] = ()  # fed tensors this stage consumes
    receives: dict[str, str] = field(default_factory=dict)  # tensor or "^op" token -> sending task
    sends: dict[str, tuple[str, ...]] = field(default_factory=dict)  # task -> tensors/tokens
    keeps: tuple[str, ...] = ()  # values later stages of this task use
    fetches: tuple[str, ...] = ()  # values the client asked for
    applies_updates: bool = False  # has training updates (Apply* ops): counted for staleness


@dataclass
class Partition:
    """A planned step: each task's stages in level order, and who sends the client what."""

    stages: dict[str, list[Stage]]  # task -> stages, by level
    placement: dict[str, str]  # op name -> full device
    fetch_tasks: dict[str, str]  # fetched tensor -> task producing it

    @property
    def tasks(self) -> list[str]:
        return sorted(self.stages)


def task_of(device: str) -> str:
    """``/job:ps/task:0/device:CPU:0`` -> ``/job:ps/task:0``."""
    spec = DeviceSpec.from_string(device)
    return f"/job:{spec.job}/task:{spec.task}"


def ref_inputs(op: Operation) -> list[Operation]:
    """The variables whose reference ``op`` takes: it must run where they live."""
    return [t.op for t in op.inputs if t.op.type == "VariableV2"]


class MissingTaskError(InvalidArgumentError):
    """An op is placed on a task the cluster lacks (yet: a session waits for it a while)."""

    def __init__(self, message: str, op: str, task: str):
        super().__init__(message, op=op)
        self.task = task


def place(ops: list[Operation], default_task: str, tasks: dict[str, dict],
          allow_soft_placement: bool = True) -> dict[str, str]:
    """A full device (``/job:J/task:T/device:TYPE:N``) per op.

    ``tasks`` maps each task of the cluster to what it has (``{"GPU": 1}``).
    ``default_task`` fills the job and task an op left open (TF places those on
    the task running the client). Ops taking a variable's reference go with it.
    """
    default = DeviceSpec.from_string(default_task)
    placement: dict[str, str] = {}
    for op in ops:
        owners = ref_inputs(op)
        if owners and owners[0].name in placement:
            placement[op.name] = placement[owners[0].name]
            continue
        spec = default.make_merged_spec(DeviceSpec.from_string(op.device))
        if spec.job != default.job and spec.task is None:
            spec = DeviceSpec(spec.job, None, 0, spec.device_type, spec.device_index)
        task = f"/job:{spec.job}/task:{spec.task}"
        if task not in tasks:
            raise MissingTaskError(
                f"op '{op.name}' is placed on {op.device or '(no device)'}, i.e. task {task}, "
                f"which this cluster lacks; its tasks are: {', '.join(sorted(tasks))}", op.name, task)
        placement[op.name] = f"{task}/device:{_device_type(op, spec, task, tasks, allow_soft_placement)}"
    _constants_to_their_consumers(ops, placement)
    return placement


def _constants_to_their_consumers(ops: list[Operation], placement: dict[str, str]) -> None:
    """Make a constant on the one device that uses it (TF's placer does so for input-less
    ops with a single consumer). Else it would be sent there every step, a message of its own:
    the optimizer's learning rate, built beside the model on the worker, is used by the
    updates on the PS."""
    users: dict[str, set] = defaultdict(set)
    for op in ops:
        for t in op.inputs:
            users[t.op.name].add(placement[op.name])
        for c in op.control_inputs:
            users[c.name].add(None)  # ordering, not a value: it stays where it was put
    for op in ops:
        if op.type == "Const" and not op.control_inputs and len(users[op.name]) == 1:
            (device,) = users[op.name]
            if device is not None:
                placement[op.name] = device


def _device_type(op, spec: DeviceSpec, task: str, tasks: dict, allow_soft_placement: bool) -> str:
    if spec.device_type != "GPU":
        return "CPU:0"
    gpus = int(tasks[task].get("GPU", 0))
    index = spec.device_index or 0
    if index < gpus:
        return f"GPU:{index}"
    if not allow_soft_placement:
        raise InvalidArgumentError(
            f"op '{op.name}' is placed on {op.device}, but task {task} has {gpus} GPU(s); "
            "allow_soft_placement=True runs it on that task's CPU", op=op.name)
    log.info("soft placement: %s has no GPU %d, so %s runs on its CPU", task, index, op.name)
    return "CPU:0"


def partition(ops: list[Operation], placement: dict[str, str], fed: set[str],
              fetches: list[str]) -> Partition:
    """Cut ``ops`` (topologically ordered, placed) into per-task stages ordered by level."""
    task = {op.name: task_of(placement[op.name]) for op in ops}
    level: dict[str, int] = {}
    for op in ops:
        producers = [t.op.name for t in op.inputs if t.name not in fed and t.op.name in task]
        producers += [c.name for c in op.control_inputs if c.name in task]
        level[op.name] = max((level[p] + (task[p] != task[op.name]) for p in producers), default=0)

    members: dict[tuple[str, int], list[Operation]] = defaultdict(list)
    for op in ops:
        members[task[op.name], level[op.name]].append(op)
    stage_of = {op.name: key for key, group in members.items() for op in group}

    # what each stage needs from outside itself, and from whom
    needs: dict[tuple, dict[str, str | None]] = defaultdict(dict)  # stage -> value -> producer
    for op in ops:
        here = stage_of[op.name]
        for t in op.inputs:
            producer = None if t.name in fed else stage_of.get(t.op.name)
            if producer != here:
                needs[here][t.name] = None if producer is None else producer
        for c in op.control_inputs:
            producer = stage_of.get(c.name)
            if producer is not None and producer[0] != here[0]:
                needs[here]["^" + c.name] = producer
    fetch_producer = {name: stage_of[name.rpartition(":")[0]] for name in fetches
                      if name not in fed}

    sends: dict[tuple, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    keeps: dict[tuple, set[str]] = defaultdict(set)
    for consumer, values in needs.items():
        for value, producer in values.items():
            if producer is None:
                continue
            if producer[0] == consumer[0]:
                keeps[producer].add(value)
            else:
                sends[producer][consumer[0]].add(value)

    stages: dict[str, list[Stage]] = defaultdict(list)
    for key in sorted(members, key=lambda k: (k[0], k[1])):
        nodes = [to_node(op, placement[op.name].rpartition("/device:")[2].split(":")[0])
                 for op in members[key]]
        inputs = needs.get(key, {})
        own_fetches = tuple(sorted(f for f, p in fetch_producer.items() if p == key))
        outgoing = {dest: tuple(sorted(values)) for dest, values in sends.get(key, {}).items()}
        outputs = {v for vs in outgoing.values() for v in vs if not v.startswith("^")}
        outputs |= keeps.get(key, set()) | set(own_fetches)
        available = {v for v in inputs if not v.startswith("^")}
        stages[key[0]].append(Stage(
            task=key[0], level=key[1],
            schedule=schedule(nodes, available, sorted(outputs)),
            from_client=tuple(sorted(v for v, p in inputs.items() if p is None)),
            receives={v: p[0] for v, p in sorted(inputs.items()) if p is not None and p[0] != key[0]},
            sends=outgoing,
            keeps=tuple(sorted(keeps.get(key, ()))),
            fetches=own_fetches,
            applies_updates=any(node.type.startswith("Apply") for node in nodes),
        ))
    fetch_tasks = {name: producer[0] for name, producer in fetch_producer.items()}
    return Partition(dict(stages), placement, fetch_tasks)


_NODE_FIELDS = ("name", "type", "inputs", "control_inputs", "num_outputs", "device_type")
_STAGE_FIELDS = ("task", "level", "from_client", "receives", "sends", "keeps", "fetches", "applies_updates")


def stages_to_json(stages: list[Stage]) -> str:
    """A task's stages as JSON text: ops with their attributes encoded as in a graph file."""
    def node(n: OpNode) -> dict:
        try:
            attrs = json.loads(json.dumps(encode(n.attrs)))
        except TypeError as error:
            raise TypeError(f"op '{n.name}' ({n.type}) has an attribute that is not plain data, so it "
                            f"cannot be sent to a worker: {error}") from None
        return {**{key: getattr(n, key) for key in _NODE_FIELDS}, "attrs": attrs}

    return json.dumps([{**{key: getattr(stage, key) for key in _STAGE_FIELDS},
                        "nodes": [node(n) for n in stage.schedule.nodes.values()],
                        "waiting": stage.schedule.waiting, "dependents": stage.schedule.dependents,
                        "refcount": stage.schedule.refcount, "outputs": stage.schedule.fetches,
                        "mixed_devices": stage.schedule.mixed_devices} for stage in stages])


def stages_from_json(text: str) -> list[Stage]:
    """The stages :func:`stages_to_json` wrote; ValueError for anything else (an op type this
    process does not know, a missing field), naming what is wrong."""
    if not isinstance(text, str):
        raise TypeError(f"a plan's stages arrive as JSON text, got {type(text).__name__}")
    stages = []
    try:
        for entry in json.loads(text):
            nodes = {}
            for n in entry["nodes"]:
                try:  # an unknown op type fails here, not mid-step
                    get_opdef(n["type"])
                except KeyError:
                    raise ValueError(f"op {n['name']!r} has type {n['type']!r}, which dflow does not know "
                                     "here: do the client and the workers run the same dflow?") from None
                nodes[n["name"]] = OpNode(n["name"], n["type"], decode(n["attrs"]), tuple(n["inputs"]),
                                          tuple(n["control_inputs"]), n["num_outputs"], n["device_type"])
            plan = Schedule(nodes, entry["waiting"], entry["dependents"], entry["refcount"],
                            tuple(entry["outputs"]), entry["mixed_devices"])
            stages.append(Stage(entry["task"], entry["level"], plan, tuple(entry["from_client"]),
                                entry["receives"], {k: tuple(v) for k, v in entry["sends"].items()},
                                tuple(entry["keeps"]), tuple(entry["fetches"]), entry["applies_updates"]))
    except (KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"not a dflow plan's stages ({type(error).__name__}: {error})") from None
    return stages


def describe(part: Partition) -> str:
    """A table of which ops run on which task, stage by stage."""
    lines = []
    for task in part.tasks:
        for stage in part.stages[task]:
            nodes = stage.schedule.nodes
            lines.append(f"{task} stage {stage.level}: {len(nodes)} ops ({list_names(nodes)})")
    return "\n".join(lines)


def list_names(names, limit: int = 200) -> str:
    """``names`` joined by commas, whole names only, up to about ``limit`` characters; what is
    left out is counted: ``a, b, ... and 40 more``."""
    shown, length = [], 0
    for name in names:
        if shown and length + len(name) + 2 > limit:
            return f"{', '.join(shown)}, ... and {len(names) - len(shown)} more"
        shown.append(name)
        length += len(name) + 2
    return ", ".join(shown)

