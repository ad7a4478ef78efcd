"""The dependency-counting executor: runs a planned set of ops over plain dicts.

The algorithm, on a tiny graph (fetch ``d``; ``a`` and ``b`` are fed)::

    c = Add(a, b)        waiting  = {c: 0, d: 1}   (d waits for c)
    d = Mul(c, a)        refcount = {a: 2, b: 1, c: 1, d: 1 (fetched)}
                         ready    = [c]

Run ``c``; each dependent's count drops (``d`` becomes ready); each input
tensor's refcount drops and ``b`` (refcount 0) is freed at once. Run ``d``;
``a`` and ``c`` are freed. Only the fetches remain. Memory held at any time is
the live tensors, not every tensor of the step.

Ops run on the calling thread (``num_threads=1``: deterministic, easy to
debug) or on a small thread pool, since NumPy and BLAS release the GIL. An
asynchronous op (a collective) returns a future; the ops ready meanwhile run
while its messages travel, which is how communication overlaps the backward pass.

A stage that runs one op at a time anyway (one thread, or a chain where no two ops
are ever ready together) and has no asynchronous op is *compiled* on its first run
(:func:`compile_stage`): the order the counting would give, fixed once, each tensor
a slot of a list, each kernel bound to its attributes, each input freed at its
last use. Running it is one loop over that list: no dicts of counts, no ready
list, no tensor names, 1-2 us per op instead of ~10 (``dflow bench --local``'s
engine figures measure both on a chain of 1,000 tiny ops).

On a GPU (CuPy) kernels only queue work; a run returns when the GPU has done it, as
TF's does, so that an error shows in the step that made it and a step's time is its
work's. Fed values (host arrays, or another task's) move to the namespace of the
ops that take them.
"""

from __future__ import annotations

import contextlib
import functools
import queue
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy

from ..errors import InvalidArgumentError, OpError
from ..ops import denormals, parallel
from ..ops.registry import get_opdef
from .devices import synchronize, to_namespace

__all__ = ["OpNode", "Schedule", "schedule", "execute", "run_nested", "compile_stage", "RunStats", "LATE"]


@dataclass(frozen=True)
class OpNode:
    """One op as plain data: all the executor (or a remote worker) needs to run it."""

    name: str
    type: str
    attrs: dict
    inputs: tuple[str, ...]  # tensor names "op:i"
    control_inputs: tuple[str, ...]  # op names
    num_outputs: int
    device_type: str = "CPU"  # where it computes, after soft placement: "CPU" or "GPU"


@dataclass
class Schedule:
    """The static part of a run, computed once per plan: counts to copy, lists to follow."""

    nodes: dict[str, OpNode]
    waiting: dict[str, int]  # op -> number of ops it waits for
    dependents: dict[str, list[str]]  # op -> ops waiting for it
    refcount: dict[str, int]  # tensor -> consumers (+1 when fetched, so it survives)
    fetches: tuple[str, ...]
    # of the nodes' device types (so a worker's copy, rebuilt from JSON, has them too):
    mixed_devices: bool = field(init=False, default=False)  # two: inputs may need a host/device copy
    on_gpu: bool = field(init=False, default=False)  # a GPU's: a run waits for its work before returning
    # compiled forms by (fed tensors, threads, namespaces), made by the first run that can use one
    compiled: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self):
        device_types = {node.device_type for node in self.nodes.values()}
        self.mixed_devices, self.on_gpu = len(device_types) > 1, "GPU" in device_types


@dataclass
class RunStats:
    """Measured by one run: ops executed and the peak bytes of live tensors (in this
    process), and on a cluster the bytes sent over each (from task, to task) link."""

    ops_run: int = 0
    peak_bytes: int = 0
    order: list[str] = field(default_factory=list)
    bytes_sent: dict[tuple[str, str], int] = field(default_factory=dict)
    staleness: int | None = None  # updates other replicas applied between this step's reads and its own
    compute_s: dict[str, float] = field(default_factory=dict)  # per task: running its ops
    waited_s: dict[str, float] = field(default_factory=dict)  # per task: waiting for other tasks
    # per task: waiting for its collectives with no other op to run (communication not hidden by compute)
    collective_s: dict[str, float] = field(default_factory=dict)
    async_wait_s: float = 0.0  # this run, in this process: the same wait, for asynchronous ops
    # per task: (task, what, start, end) in time.time() seconds: waits, computes, collectives
    timeline: list[tuple[str, str, float, float]] = field(default_factory=list)
    # a traced run's ops in this process, (name, type, start, end) in time.time() seconds, or None:
    # not traced (a list here asks for them; the run then goes op by op, in the counting loop)
    op_spans: list[tuple[str, str, float, float]] | None = None


def schedule(nodes: list[OpNode], fed: set[str], fetches: list[str]) -> Schedule:
    """Count dependencies among ``nodes`` (in topological order); fed tensors have no producer."""
    by_name = {n.name: n for n in nodes}
    waiting, dependents, refcount = {}, {n.name: [] for n in nodes}, {}
    for node in nodes:
        producers = {t.rpartition(":")[0] for t in node.inputs if t not in fed}
        producers |= set(node.control_inputs)
        producers &= by_name.keys()
        waiting[node.name] = len(producers)
        for p in producers:
            dependents[p].append(node.name)
        for t in node.inputs:
            refcount[t] = refcount.get(t, 0) + 1
    for t in fetches:
        refcount[t] = refcount.get(t, 0) + 1
    _updates_after_reads(by_name, waiting, dependents)
    return Schedule(by_name, waiting, dependents, refcount, tuple(fetches))


def _updates_after_reads(nodes: dict[str, OpNode], waiting: dict, dependents: dict) -> None:
    """Make each update of a variable (an optimizer's) wait for the step's ops that read the
    variable's value (the consumers of its ReadVariable ops), as ordering edges: once they have
    run nothing else holds the old array, and the update may write it in place
    (``SessionState.held_only_here``); and it runs as soon as they have, which frees its gradient
    (TF leaves the order open; a read then sees the step's old value either way). A reader that
    comes after the update anyway (through its own dependencies) is not waited for."""
    consumers: dict[str, list[str]] = {}
    for node in nodes.values():
        for tensor in node.inputs:
            consumers.setdefault(tensor, []).append(node.name)
    readers: dict[str, list[str]] = {}  # variable reference -> the ops that read its value
    for node in nodes.values():
        if node.type == "ReadVariable":
            readers.setdefault(node.inputs[0], []).extend(consumers.get(f"{node.name}:0", ()))
    for node in nodes.values():
        if not get_opdef(node.type).updates:
            continue
        for reader in dict.fromkeys(r for ref in node.inputs for r in readers.get(ref, ())):
            if reader != node.name and not _reaches(dependents, node.name, reader):
                waiting[node.name] += 1
                dependents[reader].append(node.name)


def _reaches(dependents: dict, start: str, target: str) -> bool:
    """Whether ``target`` comes after ``start`` (so that ``start`` waiting for it would never run)."""
    seen, stack = {start}, [start]
    while stack:
        for dependent in dependents[stack.pop()]:
            if dependent == target:
                return True
            if dependent not in seen:
                seen.add(dependent)
                stack.append(dependent)
    return False


class _Late:
    def __repr__(self) -> str:
        return "LATE"


#: a fed value still on its way (another task's): :func:`execute` takes it when an op needs it
LATE = _Late()


def execute(plan: Schedule, feeds: dict, state, namespaces: dict, num_threads: int = 1,
            stats: RunStats | None = None, compiled: bool = True,
            arriving: Callable[[str], Any] | None = None,
            produced: Callable[[str, Any], None] | None = None) -> dict:
    """Run every op of ``plan``; return the values of ``plan.fetches`` by tensor name.

    ``namespaces`` maps a device type ("CPU", "GPU") to its array namespace.
    ``compiled=False`` runs the counting loop even where a compiled stage could run
    (the engine benchmark compares the two). A feed given as :data:`LATE` is
    ``arriving(tensor)``, called when the first op that reads it is next (before the
    run, where the stage is not compiled), and ``produced(tensor, value)`` hears of each
    of ``plan.fetches`` as soon as a compiled stage makes it: a worker's transfers
    overlap its compute (variables arriving while the first layers run, gradients
    leaving while the backward pass goes on).
    """
    if plan.on_gpu and not plan.mixed_devices:  # (a mixed plan moves each op's inputs instead;
        # a CPU plan's feeds are host arrays already: the Session's, or on_host's from a task)
        feeds = {tensor: value if value is LATE else to_namespace(value, namespaces["GPU"])
                 for tensor, value in feeds.items()}
        if arriving is not None:
            arriving = functools.partial(_on_device, arriving, namespaces["GPU"])
    stats = stats if stats is not None else RunStats()
    key = (frozenset(feeds), num_threads, tuple(namespaces.items()))  # namespaces: modules
    compiled = compiled and stats.op_spans is None and plan.compiled.get(key, _NOT_YET)
    if compiled is _NOT_YET:
        compiled = plan.compiled[key] = compile_stage(plan, key[0], namespaces, num_threads)
    # denormals flushed to zero, as in TensorFlow (ops/denormals.py)
    with contextlib.nullcontext() if plan.on_gpu else parallel.one_blas_thread(), denormals.flushed():
        if compiled:
            values, peak_bytes = compiled.run(feeds, state, arriving, produced)
            stats.ops_run += len(compiled.order)
            stats.order.extend(compiled.order)
            stats.peak_bytes = max(stats.peak_bytes, peak_bytes)
        else:
            feeds = {tensor: arriving(tensor) if value is LATE else value for tensor, value in feeds.items()}
            values = _count_and_run(plan, feeds, state, namespaces, num_threads, stats)
    if plan.on_gpu:
        synchronize(namespaces["GPU"])
    return values


def run_nested(plan: Schedule, feeds: dict, state, xp) -> dict:
    """:func:`execute` for a traced function that an op runs inside a step (a ``tf.cond``
    branch, a ``while_loop``'s test and body, a ``map_fn``'s function), every op in the op's
    namespace ``xp``: its compiled stage called directly. The step around it holds BLAS at one
    thread and waits for its device, and a function's ops are not counted in the step's stats,
    so :func:`execute`'s set-up is left out (10 of a trivial ``tf.cond``'s 20 us)."""
    key = (frozenset(feeds), xp)
    compiled = plan.compiled.get(key, _NOT_YET)
    if compiled is _NOT_YET:
        compiled = plan.compiled[key] = compile_stage(plan, key[0], {"CPU": xp, "GPU": xp})
    if compiled is None:
        return execute(plan, feeds, state, {"CPU": xp, "GPU": xp})
    return compiled.run(feeds, state)[0]


def _on_device(arriving, xp, tensor: str):
    return to_namespace(arriving(tensor), xp)


def _count_and_run(plan: Schedule, feeds: dict, state, namespaces: dict, num_threads: int,
                   stats: RunStats) -> dict:
    """The counting loop of :func:`execute`."""
    waiting = dict(plan.waiting)
    refcount = dict(plan.refcount)
    values = dict(feeds)
    live_bytes = [sum(getattr(v, "nbytes", 0) for v in values.values())]
    ready = [name for name, count in waiting.items() if count == 0]
    started: dict[str, float] | None = None if stats.op_spans is None else {}  # traced: op -> start

    def finish(node: OpNode, outputs) -> None:
        if started is not None:
            stats.op_spans.append((node.name, node.type, started.pop(node.name), time.time()))
        for i, value in enumerate(outputs):
            tensor = f"{node.name}:{i}"
            if tensor in refcount and tensor not in feeds:
                values[tensor] = value
                live_bytes[0] += getattr(value, "nbytes", 0)
        stats.peak_bytes = max(stats.peak_bytes, live_bytes[0])
        for tensor in node.inputs:  # release what no one needs any more
            refcount[tensor] -= 1
            if refcount[tensor] == 0:
                live_bytes[0] -= getattr(values.pop(tensor, None), "nbytes", 0)
        stats.ops_run += 1
        stats.order.append(node.name)
        for dependent in plan.dependents[node.name]:
            waiting[dependent] -= 1
            if waiting[dependent] == 0:
                ready.append(dependent)

    def arguments(node):
        if plan.mixed_devices:
            return [to_namespace(values[t], namespaces[node.device_type]) for t in node.inputs]
        return [values[t] for t in node.inputs]

    # one loop for every mode: synchronous kernels run here (num_threads=1) or on the pool;
    # asynchronous ones (collectives) return a future and report to `done` when it resolves,
    # so the ops after them in the ready list run meanwhile
    done: queue.SimpleQueue = queue.SimpleQueue()
    in_flight = asynchronous_in_flight = 0
    pool = ThreadPoolExecutor(num_threads, thread_name_prefix="dflow-inter-op",
                              initializer=denormals.flush_on_this_thread) if num_threads > 1 else None
    try:
        while ready or in_flight:
            while ready:
                node = plan.nodes[ready.pop()]
                args, xp = arguments(node), namespaces[node.device_type]
                if started is not None:
                    started[node.name] = time.time()
                if get_opdef(node.type).asynchronous:
                    _start_async(done, node, args, state, xp)
                    in_flight += 1
                    asynchronous_in_flight += 1
                elif pool is None:
                    finish(node, run_op(node, args, state, xp))
                else:
                    pool.submit(_run_into, done, node, args, state, xp)
                    in_flight += 1
            if in_flight:
                only_asynchronous, start = in_flight == asynchronous_in_flight, time.perf_counter()
                node, outputs, error = done.get()
                if only_asynchronous:  # nothing to compute meanwhile: the wait shows in the step
                    stats.async_wait_s += time.perf_counter() - start
                in_flight -= 1
                asynchronous_in_flight -= get_opdef(node.type).asynchronous
                if error is not None:
                    raise error
                finish(node, outputs)
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
    if len(stats.order) != len(plan.nodes):
        stuck = sorted(set(plan.nodes) - set(stats.order))
        raise RuntimeError(f"the executor stopped with ops that never became ready: {stuck[:10]}")
    return {t: values[t] for t in plan.fetches}


_NOT_YET = object()


def _sequential_order(plan: Schedule) -> tuple[list[str], int]:
    """The order the counting loop runs ``plan`` in on one thread, and the most ops that were
    ever ready at once (1: a chain, where threads have nothing to overlap)."""
    waiting = dict(plan.waiting)
    ready = [name for name, count in waiting.items() if count == 0]  # a stack: a depth-first walk
    order, widest = [], len(ready)
    while ready:
        name = ready.pop()
        order.append(name)
        for dependent in plan.dependents[name]:
            waiting[dependent] -= 1
            if waiting[dependent] == 0:
                ready.append(dependent)
        widest = max(widest, len(ready))
    return order, widest


def compile_stage(plan: Schedule, fed, namespaces: dict, num_threads: int = 1) -> CompiledStage | None:
    """``plan`` as one function (:class:`CompiledStage`), or None where
    the counting executor must run it: an asynchronous op (its wait overlaps other ops), ops
    on two devices (copies between them), or several threads and ops that could overlap."""
    if plan.mixed_devices or any(get_opdef(n.type).asynchronous for n in plan.nodes.values()):
        return None
    order, widest = _sequential_order(plan)
    if len(order) != len(plan.nodes) or (num_threads > 1 and widest > 1):
        return None  # a cycle is reported by the counting loop; parallel work goes to its pool
    slots: dict[str, int] = {}

    def slot(tensor: str) -> int:
        return slots.setdefault(tensor, len(slots))

    feed_slots = [(t, slot(t)) for t in fed if t in plan.refcount]
    fed_here = dict(feed_slots)
    leaving = set(plan.fetches)
    remaining = dict(plan.refcount)
    nodes = [plan.nodes[name] for name in order]
    steps, constants = [], {}
    for node in nodes:
        opdef = get_opdef(node.type)
        inputs = tuple(slot(t) for t in node.inputs)
        kept = [f"{node.name}:{i}" for i in range(node.num_outputs or 0)]
        outputs = tuple(slot(t) if t in plan.refcount and t not in fed else None for t in kept)
        if node.type == "Const" and kept[0] not in leaving:
            # made once, here: each run starts with it in its slot (a small step has a hundred
            # constants, each an op call a run; on a GPU, each a copy to the device)
            if outputs[0] is not None:
                constants[outputs[0]] = opdef.kernel(namespaces[node.device_type], **node.attrs)
            continue
        frees = []
        for tensor in node.inputs:
            remaining[tensor] -= 1
            if remaining[tensor] == 0:
                frees.append(slots[tensor])
        donated = opdef.in_place  # its buffer may become the output: last use, not the caller's
        if donated is not None:
            tensor = node.inputs[donated]
            if slots[tensor] not in frees or tensor in fed or node.inputs.count(tensor) > 1:
                donated = None
        arrivals = tuple((fed_here[t], t) for t in dict.fromkeys(node.inputs) if t in fed_here)
        made = tuple((t, slots[t]) for t in kept if t in leaving and t not in fed)
        steps.append((functools.partial(opdef.kernel, **node.attrs), namespaces[node.device_type],
                      opdef.stateful, inputs, outputs, opdef.num_outputs != 1, tuple(frees), node,
                      donated, arrivals, made))
    fetch_slots = [(t, slots[t]) for t in plan.fetches]
    first_values = [constants.get(index) for index in range(len(slots))]
    constant_bytes = sum(getattr(value, "nbytes", 0) for value in constants.values())
    run = functools.partial(_run_compiled, steps, feed_slots, fetch_slots, first_values, constant_bytes)
    return CompiledStage(run, order)


@dataclass(frozen=True)
class CompiledStage:
    """What :func:`compile_stage` makes: ``run(feeds, state, arriving=None, produced=None)`` gives
    the fetched values and the peak bytes of the values it held; ``order``, the ops' names in the
    order it runs them."""

    run: Callable[..., tuple[dict, int]]
    order: list[str]


def _run_compiled(steps, feed_slots, fetch_slots, first_values, constant_bytes, feeds, state, arriving=None,
                  produced=None) -> tuple[dict, int]:
    """One run of a compiled stage (:func:`compile_stage`) whose slots start as ``first_values``
    (its constants, ``constant_bytes`` of them): the fetched values, and the peak bytes of the
    values it held."""
    values = first_values.copy()
    for tensor, index in feed_slots:
        values[index] = feeds[tensor]
    live = peak = constant_bytes + sum(getattr(values[i], "nbytes", 0) for _, i in feed_slots)
    for kernel, xp, stateful, inputs, outputs, many, frees, node, donated, arrivals, made in steps:
        if arrivals:  # (rare: an op reading a fed value)
            for index, tensor in arrivals:
                if values[index] is LATE:
                    values[index] = arriving(tensor)
                    live += getattr(values[index], "nbytes", 0)
        args = [values[i] for i in inputs]
        try:
            if stateful:
                result = kernel(state, xp, *args)
            elif donated is not None and _held_only_here(args[donated]):
                result = kernel(xp, *args, out=args[donated])
                if result is args[donated]:  # one buffer, counted once
                    live -= result.nbytes
            else:
                result = kernel(xp, *args)
        except Exception as error:
            named = _named(error, node, args)
            if named is error:
                raise
            raise named from error
        if many:
            for index, value in zip(outputs, result):
                if index is not None:
                    values[index] = value
                    live += getattr(value, "nbytes", 0)
        elif outputs[0] is not None:
            values[outputs[0]] = result
            live += getattr(result, "nbytes", 0)
        result = value = None  # the slots hold the outputs: a name here would count as a holder
        if made and produced is not None:
            for tensor, index in made:
                produced(tensor, values[index])
        if live > peak:
            peak = live
        for index in frees:
            live -= getattr(values[index], "nbytes", 0)
            values[index] = None
    return {tensor: values[index] for tensor, index in fetch_slots}, peak


def _held_only_here(array) -> bool:
    """Whether ``array``, passed as ``_held_only_here(args[i])`` by :func:`_run_compiled`, is a
    NumPy array whose buffer no one else can read: its own (not a view), writable, and referred
    to by nothing but the run's slot list and its arguments (a variable's value, a constant, a
    fetched value or an array that another one views has more references: NumPy elides its
    temporaries by the same test)."""
    return (type(array) is numpy.ndarray and array.base is None and array.flags.writeable
            and sys.getrefcount(array) <= _REFERENCES_WHEN_HELD_ONLY_HERE)


def _references_of_a_slot_value() -> int:
    """What ``sys.getrefcount`` says in :func:`_held_only_here` of an array held by a slot list and
    an argument list alone, called as :func:`_run_compiled` calls it (interpreters count
    differently)."""
    values = [numpy.empty(1)]
    args = [values[0]]

    def count(array) -> int:
        return sys.getrefcount(array)

    return count(args[0])


_REFERENCES_WHEN_HELD_ONLY_HERE = _references_of_a_slot_value()


def _run_into(done, node, args, state, xp):
    try:
        done.put((node, run_op(node, args, state, xp), None))
    except BaseException as error:  # handed to the scheduling thread, which re-raises
        done.put((node, None, error))


def _start_async(done, node, args, state, xp) -> None:
    try:
        future = run_op(node, args, state, xp)  # a Future: asynchronous ops have num_outputs=None
    except BaseException as error:
        done.put((node, None, error))
        return

    def report(finished) -> None:
        error = finished.exception()
        if error is not None and isinstance(error, OpError) and error.op is None:
            error.op = node.name
        done.put((node, None if error else tuple(finished.result()), error))

    future.add_done_callback(report)


def run_op(node: OpNode, args: list, state, xp) -> tuple:
    """Call the op's kernel; the result as a tuple of outputs. Errors name the op."""
    opdef = get_opdef(node.type)
    try:
        if opdef.stateful:
            result = opdef.kernel(state, xp, *args, **node.attrs)
        else:
            result = opdef.kernel(xp, *args, **node.attrs)
    except Exception as error:
        named = _named(error, node, args)
        if named is error:
            raise
        raise named from error
    return result if opdef.num_outputs != 1 else (result,)


def _named(error: Exception, node: OpNode, args: list) -> Exception:
    """A kernel's error naming its op: an OpError gets the op's name, anything else becomes an
    InvalidArgumentError with the op's type, name and input shapes (the traceback kept)."""
    if isinstance(error, OpError):
        if error.op is None:
            error.op = node.name
        return error
    shapes = ", ".join(str(getattr(a, "shape", "?")) for a in args)
    return InvalidArgumentError(
        f"{node.type} op '{node.name}' failed on inputs of shapes [{shapes}]: "
        f"{type(error).__name__}: {error}", op=node.name).with_traceback(sys.exc_info()[2])
