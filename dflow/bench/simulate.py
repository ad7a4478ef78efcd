"""``dflow bench simulate``: a discrete-event simulation of distributed training steps.

The plan comes from dflow itself, not from a formula: :func:`model_plan` builds the real
graph of a model and reads its variables (sizes, creation order) and its layers (the
FLOPs of each ``Conv2D``/``MatMul``, the variables each one uses, in forward order);
:func:`place_variables` puts the variables on the PS tasks with the device function
training uses (``replica_device_setter`` with round-robin or
``GreedyLoadBalancingStrategy(byte_size_load_fn)``). :func:`simulate` then plays every
replica's steps against shared resources:

- each node's NIC, full duplex (an ``out`` and an ``in`` link at the preset's bytes/sec,
  each shared equally by the messages in it, as TCP shares a NIC between connections),
  with a per-message latency; a message goes through its sender's ``out`` and its
  receiver's ``in`` at once. PS tasks live on the worker nodes (PS ``j`` on node
  ``j % nodes``), as seed 001 ran them: a PS's traffic shares its node's NIC with the
  worker there, and a read from a PS on one's own node crosses no NIC. On a drop-tail
  (Ethernet) fabric, a message that joins a burst into one port from at least
  ``Hardware.incast_senders`` senders arrives TCP's least retransmission timeout late
  (incast: the senders' first windows overflow the switch port, and a flow that lost its
  whole window waits for the timeout);
- each PS task's CPU, which receives and applies every gradient (bytes / apply rate);
- each device's compute: one step time (measured, or the first row of a table), one third
  forward and two thirds backward, split over the layers in proportion to their FLOPs;
- each node's bus (PCIe, NVLink) for the copies between its devices.

One step of a replica, with the overlap the runtime has: all variable reads are requested
at the step's start and a layer's forward runs once its variables have arrived (the PS
step's level-0 stage sends them all at once, see ``dflow.distributed.partition``); the
backward pass runs in reverse layer order and each layer's gradients are sent as soon as
they exist, overlapping the layers still to compute; the PS applies each gradient as it
arrives. Synchronous steps (``SyncReplicasOptimizer``) start together after every apply
of the step is done; asynchronous replicas start their next step after their own applies.

``distributed_replicated`` sums a node's gradients over its bus first (a ring among its
devices) and its first device alone talks to the PS, then broadcasts the refreshed
variables before the forward pass; ``allreduce`` is Horovod's ring: each bucket of
``fusion_bytes`` gradients, in backward order, costs ``2 (n-1)/n`` bytes per link and
``2 (n-1)`` latencies, over the NICs between nodes and the bus inside one.

>>> from dflow.bench.hardware import LOOPBACK  # 2 GB/s links and PS CPU, 1 ms a message
>>> plan = ModelPlan.uniform("toy", [4_000_000], flops=[1.0])
>>> r = simulate(plan, LOOPBACK, step_time_s=0.1, batch_size=100, num_workers=2, num_ps=1,
...              colocate_ps=False, overlap=False)
>>> round(r.step_s, 3)  # 2 ms serialize, 2 x 2 ms reads, 100 compute, 2 grad, 2 apply, 3 x 1 latency
0.113
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

from .hardware import TCP_MIN_RTO_S, Hardware

__all__ = ["Layer", "ModelPlan", "SimResult", "model_plan", "place_variables", "simulate", "best_setup",
           "ps_candidates", "calibrate_step_time", "SIM_UPDATES", "FORWARD_SHARE"]

#: ``--variable_update`` values the simulator plays (dflow's names)
SIM_UPDATES = ("parameter_server", "distributed_replicated", "allreduce", "replicated")
#: forward : backward = 1 : 2 (a backward pass computes the input and the weight gradients,
#: each as costly as the forward; the common rule, e.g. Kaplan et al. 2020 "6N per token")
FORWARD_SHARE = 1 / 3
#: Horovod's default tensor fusion threshold (HOROVOD_FUSION_THRESHOLD, 64 MiB)
HOROVOD_FUSION_BYTES = 64 * 2**20
ASYNC_STEPS = 4
#: a step within 5% of its compute is compute-bound; slower, the busiest resource is named
COMPUTE_BOUND = 0.95
STEPS = 3  # the first starts from idle links; the step time is the mean of the others


@dataclass(frozen=True)
class Layer:
    """A compute op of the forward pass, its FLOPs per example and the variables it uses."""

    name: str
    flops: float
    variables: tuple[int, ...]  # indices into ModelPlan.sizes


@dataclass
class ModelPlan:
    """A model's variables (all of them, in creation order: what the device setter sees) and
    its layers in forward order."""

    model: str
    sizes: list[int]  # bytes per variable
    trainable: list[bool]
    layers: list[Layer]
    variable_ops: list = field(default_factory=list, repr=False)  # the graph's VariableV2 ops

    @classmethod
    def uniform(cls, model: str, sizes: Sequence[int], flops: Sequence[float]) -> ModelPlan:
        """A plan without a graph: variable ``i`` used by layer ``i`` (for tests and docs)."""
        layers = [Layer(f"layer{i}", f, (i,)) for i, f in enumerate(flops)]
        return cls(model, list(sizes), [True] * len(sizes), layers)

    @property
    def trainable_bytes(self) -> int:
        return sum(s for s, t in zip(self.sizes, self.trainable) if t)


@functools.lru_cache(maxsize=8)
def model_plan(model: str) -> ModelPlan:
    """Build ``model``'s graph (one example) and read its variables and layers from it.

    A variable belongs to the layer of its first consumer: the ``Conv2D``/``MatMul`` that
    takes it, or the last one created before the op that takes it (batch norm's beta, a bias).
    """
    import dflow as tf
    from dflow.models import get_model

    spec = get_model(model)
    graph = tf.Graph()
    with graph.as_default():
        spec(tf.placeholder(tf.float32, [1, *spec.input_shape]))
    ops = graph.get_operations()
    position = {op.name: i for i, op in enumerate(ops)}
    variable_ops = [op for op in ops if op.type == "VariableV2"]
    trainable_names = {v.op.name for v in graph.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES)}
    sizes = [op.outputs[0].shape.num_elements() * op.outputs[0].dtype.size for op in variable_ops]
    compute = [op for op in ops if op.type in ("Conv2D", "MatMul")]
    compute_at = [position[op.name] for op in compute]
    members: dict[int, list[int]] = defaultdict(list)
    for index, op in enumerate(variable_ops):
        if op.name not in trainable_names:
            continue
        first_use = min((position[c.name] for c in _users(op)), default=position[op.name])
        layer = max((i for i, at in enumerate(compute_at) if at <= first_use), default=0)
        members[layer].append(index)
    layers = [Layer(op.name, _flops(op), tuple(members[i])) for i, op in enumerate(compute)]
    trainable = [op.name in trainable_names for op in variable_ops]
    return ModelPlan(model, sizes, trainable, layers, variable_ops)


def _users(variable_op) -> list:
    """The ops taking a variable's value (through its read op) or its reference."""
    users = []
    for consumer in variable_op.outputs[0].consumers():
        if consumer.type in ("ReadVariable", "Identity"):
            users += consumer.outputs[0].consumers()
        elif consumer.type not in ("Assign",):
            users.append(consumer)
    return users


def _flops(op) -> float:
    """Multiply-adds x 2 of one example's ``Conv2D`` (output pixels x kernel) or ``MatMul``."""
    if op.type == "MatMul":
        k, n = op.inputs[1].shape.as_list()
        return 2.0 * k * n
    kh, kw, c_in, c_out = op.inputs[1].shape.as_list()
    out = op.outputs[0].shape.as_list()
    pixels = out[2] * out[3] if op.get_attr("data_format") == "NCHW" else out[1] * out[2]
    return 2.0 * kh * kw * c_in * c_out * pixels


def place_variables(plan: ModelPlan, num_ps: int, ps_strategy: str = "round_robin") -> list[int]:
    """The PS task of every variable, as ``VariableUpdate("parameter_server").device()`` places
    them: ``replica_device_setter`` over ``num_ps`` tasks, round-robin or greedy by bytes.

    >>> place_variables(ModelPlan.uniform("toy", [400, 4, 400, 4], [1] * 4), 2, "greedy")
    [0, 1, 1, 0]
    """
    from ..placement import DeviceSpec
    from ..train.device_setter import GreedyLoadBalancingStrategy, byte_size_load_fn, replica_device_setter

    if num_ps < 1:
        raise ValueError(f"a PS update needs num_ps >= 1, got {num_ps}")
    if not plan.variable_ops:  # a plan without a graph: the same rules on the sizes
        loads, tasks = [0] * num_ps, []
        for i, size in enumerate(plan.sizes):
            tasks.append(loads.index(min(loads)) if ps_strategy == "greedy" else i % num_ps)
            loads[tasks[-1]] += size
        return tasks
    strategy = GreedyLoadBalancingStrategy(num_ps, byte_size_load_fn) if ps_strategy == "greedy" else None
    device_function = replica_device_setter(ps_tasks=num_ps, ps_strategy=strategy)
    return [DeviceSpec.from_string(device_function(op)).task for op in plan.variable_ops]


@dataclass(frozen=True)
class SimResult:
    """One simulated configuration: throughput, what bounds it, and the bytes on the links."""

    workers: int  # nodes
    devices_per_node: int
    gpus: int
    num_ps: int
    variable_update: str
    ps_strategy: str | None
    sync: bool
    batch_size: int
    step_s: float
    images_per_sec: float
    bottleneck: str
    utilization: float
    compute_s: float
    busiest_nic_bytes_per_step: float  # the most bytes one node's NIC carries one way per step
    busiest_ps_bytes_per_step: float  # gradient bytes the busiest PS task receives per step
    incast_timeouts_per_step: float = 0.0  # messages a step that waited TCP's timeout (incast)

    @property
    def scaling_efficiency(self) -> float:
        return self.step_s and self.compute_s / self.step_s

    def as_dict(self) -> dict:
        return {**asdict(self), "scaling_efficiency": self.scaling_efficiency}


class _Channel:
    """A FIFO resource: work starts when it is free, and it counts its busy time."""

    __slots__ = ("name", "free", "busy", "bytes")

    def __init__(self, name: str):
        self.name, self.free, self.busy, self.bytes = name, 0.0, 0.0, 0.0


class _Events:
    """The simulation's clock: actions waiting for their time, played in time order (ties by
    ``priority``, then in the order queued). An action is called with its time."""

    def __init__(self):
        self.queue: list[tuple] = []
        self.order = itertools.count()

    def at(self, t: float, action: Callable[[float], None], priority: int = 0) -> None:
        heapq.heappush(self.queue, (t, priority, next(self.order), action))

    def run(self) -> None:
        while self.queue:
            t, _, _, action = heapq.heappop(self.queue)
            action(t)


class _Message:
    """A message on its way: the links still to carry it, and what to call when it is in."""

    __slots__ = ("links_left", "src", "dst", "arrived", "delay")

    def __init__(self, links_left: int, src: int, dst: int, arrived: Callable[[float], None], delay: float):
        self.links_left, self.src, self.dst, self.arrived, self.delay = links_left, src, dst, arrived, delay


class _SharedLink:
    """A link whose messages share it equally, as TCP connections share a NIC (and HTTP/2
    streams their connection): ``n`` messages in it each move at ``1/n`` of its rate. Kept in
    virtual time, which runs at ``1/n`` of real time: a message of ``work`` seconds (alone on
    the link) that enters at virtual time ``V`` leaves when the link's virtual time reaches
    ``V + work``, whatever enters or leaves meanwhile."""

    __slots__ = ("name", "busy", "bytes", "virtual", "updated", "leaving", "version", "woken_at")

    def __init__(self, name: str):
        self.name, self.busy, self.bytes = name, 0.0, 0.0
        self.virtual = self.updated = 0.0
        self.leaving: list[tuple[float, int, _Message]] = []  # (virtual time it leaves, order, message)
        self.version = 0  # bumped at each wake-up scheduled: an older one is stale
        self.woken_at: float | None = None  # when the link next looks at its first departure

    def _advance(self, t: float) -> None:
        if self.leaving:
            self.virtual += (t - self.updated) / len(self.leaving)
        self.updated = t

    def enter(self, t: float, work: float, nbytes: float, order: int, message: _Message) -> None:
        self._advance(t)
        heapq.heappush(self.leaving, (self.virtual + work, order, message))
        self.busy += work
        self.bytes += nbytes

    def leave(self, t: float) -> _Message:
        self._advance(t)
        return heapq.heappop(self.leaving)[2]

    def next_departure(self) -> float:
        return self.updated + max(0.0, self.leaving[0][0] - self.virtual) * len(self.leaving)


class _Network:
    """The nodes' NICs (full duplex, shared by their messages) and buses (FIFO)."""

    def __init__(self, nodes: int, hardware: Hardware, events: _Events):
        self.hw, self.events = hardware, events
        self.out = [_SharedLink(f"node {n} NIC out") for n in range(nodes)]
        self.into = [_SharedLink(f"node {n} NIC in") for n in range(nodes)]
        self.bus = [_Channel(f"node {n} bus") for n in range(nodes)]
        self.streams: dict[tuple[int, int], _SharedLink] = {}
        # per receiving node: how many of the messages in its port each sender has
        self.senders: list[Counter] = [Counter() for _ in range(nodes)]
        self.messages = itertools.count()
        self.timeouts = 0  # messages delayed by incast, over the whole run

    def send(self, ready: float, src: int, dst: int, nbytes: float, arrived: Callable[[float], None]) -> None:
        """Send ``nbytes`` from node ``src`` to ``dst`` at ``ready``; ``arrived(t)`` when they are in."""
        if src == dst:  # host memory to the device: pipelined, no NIC
            self.events.at(ready + nbytes / self.hw.bus_bytes_per_sec, arrived)
        else:
            self.events.at(ready, lambda t: self._enter(t, src, dst, nbytes, arrived))

    def _enter(self, t: float, src: int, dst: int, nbytes: float, arrived: Callable[[float], None]) -> None:
        # a message is in when its sender's out, its receiver's in and (TF's gRPC) the pair's
        # connection have each carried it, each shared with the other messages it holds: TCP
        # gives concurrent flows equal shares of a NIC, so a PS's reads to N workers all
        # progress together rather than one worker's first
        duration = nbytes / self.hw.nic_bytes_per_sec
        links = [(self.out[src], duration), (self.into[dst], duration)]
        # a connection at least as fast as the NIC never holds a message back: its messages are
        # all in the sender's NIC too, sharing it with the sender's other messages
        if self.hw.stream_bytes_per_sec and self.hw.stream_bytes_per_sec < self.hw.nic_bytes_per_sec:
            pair = self.streams.get((src, dst))
            if pair is None:
                pair = self.streams[(src, dst)] = _SharedLink(f"connection node {src} -> node {dst}")
            links.append((pair, nbytes / self.hw.stream_bytes_per_sec))
        incast = self._incast(src, dst)
        self.timeouts += incast
        delay = self.hw.latency_s + (TCP_MIN_RTO_S if incast else 0.0)
        message = _Message(len(links), src, dst, arrived, delay)
        order = next(self.messages)
        for link, work in links:
            link.enter(t, work, nbytes, order, message)
            departure = link.next_departure()
            if link.woken_at is None or departure < link.woken_at:  # else it wakes early and looks again
                self._wake(link, departure)
        self.senders[dst][src] += 1

    def _wake(self, link: _SharedLink, t: float) -> None:
        link.version += 1
        link.woken_at, version = t, link.version
        self.events.at(t, lambda now: self._depart(now, link, version))

    def _depart(self, t: float, link: _SharedLink, version: int) -> None:
        if version != link.version:  # an earlier wake-up was scheduled since
            return
        link.woken_at = None
        departure = link.next_departure()
        if departure > t + 1e-12:  # messages entered since it was scheduled: each moves slower
            self._wake(link, departure)
            return
        message = link.leave(t)
        if link.leaving:
            self._wake(link, link.next_departure())
        if link is self.into[message.dst]:
            senders = self.senders[message.dst]
            senders[message.src] -= 1
            if not senders[message.src]:
                del senders[message.src]
        message.links_left -= 1
        if not message.links_left:
            self.events.at(t + message.delay, message.arrived)

    def _incast(self, src: int, dst: int) -> bool:
        """Whether a message from ``src`` joins a burst into ``dst`` from so many senders that
        their first windows overflow ``dst``'s switch port: then it loses its window and is
        resent after TCP's least timeout. The port meanwhile serves the others, so the burst
        ends one timeout late, not slower (the timeout is added to the delivery, not to the
        port's busy time). One sender never times out: the term vanishes for one flow."""
        limit = self.hw.incast_senders
        if limit is None:
            return False
        senders = self.senders[dst]
        return len(senders) + (src not in senders) >= limit

    def on_bus(self, ready: float, node: int, duration: float) -> float:
        bus = self.bus[node]
        start = max(ready, bus.free)
        bus.free = start + duration
        bus.busy += duration
        return bus.free


def _layer_times(plan: ModelPlan, compute_s: float) -> tuple[list[float], list[float]]:
    total = sum(layer.flops for layer in plan.layers) or 1.0
    forward = [compute_s * FORWARD_SHARE * layer.flops / total for layer in plan.layers]
    backward = [compute_s * (1 - FORWARD_SHARE) * layer.flops / total for layer in plan.layers]
    return forward, backward


def simulate(plan: ModelPlan, hardware: Hardware, step_time_s: float, batch_size: int, num_workers: int,
             num_ps: int = 1, variable_update: str = "parameter_server", ps_strategy: str = "greedy",
             devices_per_node: int | None = None, sync: bool = True, fusion_bytes: int = HOROVOD_FUSION_BYTES,
             colocate_ps: bool = True, overlap: bool = True, steps: int = STEPS) -> SimResult:
    """Play ``steps`` training steps of ``num_workers`` nodes and ``num_ps`` PS tasks.

    ``step_time_s`` is one device's compute for one batch of ``batch_size``;
    ``devices_per_node`` defaults to the hardware's. ``colocate_ps``: PS tasks on the worker
    nodes (seed 001), else each on a node of its own (``tf.cluster.local``'s roles).
    ``overlap``: TensorFlow's per-variable sends, overlapping reads with the forward pass and
    gradients with the backward pass; False: dflow's runtime, whose PS step is three stages
    (read, compute, apply: ``dflow.distributed.partition``), each task's values to another in
    one message at a stage's end. Returns the mean step time of all but the first step, and
    what bounded it.
    """
    if variable_update not in SIM_UPDATES:
        raise ValueError(f"variable_update must be one of {', '.join(SIM_UPDATES)}, got {variable_update!r}")
    if num_workers < 1 or step_time_s <= 0 or batch_size < 1:
        raise ValueError("num_workers and batch_size must be >= 1 and step_time_s > 0")
    per_node = devices_per_node or hardware.devices_per_node
    steps = steps if sync else max(steps, 3 * ASYNC_STEPS)  # replicas drift apart: a longer window
    if variable_update == "replicated" and num_workers > 1:
        raise ValueError("replicated reduces inside one node: use num_workers=1, or allreduce / "
                         "distributed_replicated across nodes")
    if variable_update in ("allreduce", "replicated"):
        return _simulate_ring(plan, hardware, step_time_s, batch_size, num_workers, per_node, variable_update,
                              fusion_bytes, steps)
    return _simulate_ps(plan, hardware, step_time_s, batch_size, num_workers, per_node, num_ps,
                        variable_update, ps_strategy, sync, colocate_ps, overlap, steps)


def _simulate_ps(plan, hardware, step_time_s, batch_size, nodes, per_node, num_ps, update, ps_strategy,
                 sync, colocate_ps, overlap, steps) -> SimResult:
    placement = place_variables(plan, num_ps, ps_strategy)
    ps_node = [j % nodes if colocate_ps else nodes + j for j in range(num_ps)]
    events = _Events()
    net = _Network(nodes if colocate_ps else nodes + num_ps, hardware, events)
    cpu = [_Channel(f"ps {j} CPU (on node {ps_node[j]})") for j in range(num_ps)]
    forward, backward = _layer_times(plan, step_time_s)
    layers = [[(v, plan.sizes[v], placement[v]) for v in layer.variables] for layer in plan.layers]
    if not overlap:  # one layer of the whole model, one message per PS task each way
        per_ps: dict[int, list] = {}
        for v, size, ps in (item for layer in layers for item in layer):
            per_ps.setdefault(ps, [v, 0, ps])[1] += size
        layers, forward, backward = [[tuple(m) for m in per_ps.values()]], [sum(forward)], [sum(backward)]
    trainable = [v for layer in layers for v in layer]
    # a replica is a device (parameter_server) or a node's leader for its devices (distributed_replicated)
    aggregated = update == "distributed_replicated"
    replicas = nodes if aggregated else nodes * per_node
    node_of = [r if aggregated else r // per_node for r in range(replicas)]
    ring = 2 * (per_node - 1) / per_node / hardware.bus_bytes_per_sec if aggregated and per_node > 1 else 0.0
    broadcast = plan.trainable_bytes / hardware.bus_bytes_per_sec if aggregated and per_node > 1 else 0.0
    images = batch_size * (per_node if aggregated else 1)

    pending_reads = [0] * replicas
    arrivals: list[dict[int, float]] = [{} for _ in range(replicas)]
    pending_applies = [0] * replicas
    step_of = [0] * replicas
    step_start = [0.0] * replicas
    last_apply = [0.0] * replicas
    step_ends: list[list[float]] = [[] for _ in range(replicas)]
    ps_bytes = [0.0] * num_ps
    barrier = [0]  # replicas done with the current synchronous step

    def on_cpu(t: float, ps: int, size: float) -> float:
        """The PS task's CPU copies a variable into its reply (TF's gRPC: a protobuf), or applies
        a gradient, one at a time."""
        channel = cpu[ps]
        channel.free = max(t, channel.free) + size / hardware.ps_apply_bytes_per_sec
        channel.busy += size / hardware.ps_apply_bytes_per_sec
        return channel.free

    def start_step(r: int, t: float) -> None:
        step_start[r] = t
        pending_reads[r] = len(trainable)
        arrivals[r] = {}
        for i, (v, size, ps) in enumerate(trainable):  # interleaved over replicas: fair at message grain
            events.at(t, functools.partial(read, r, v, size, ps), priority=i * replicas + r)

    def read(r: int, v: int, size: float, ps: int, t: float) -> None:
        net.send(on_cpu(t, ps, size), ps_node[ps], node_of[r], size, functools.partial(read_in, r, v))

    def read_in(r: int, v: int, t: float) -> None:
        arrivals[r][v] = t
        pending_reads[r] -= 1
        if not pending_reads[r]:
            compute(r)

    def compute(r: int) -> None:
        """All reads of ``r`` are in: play its forward and backward passes, send its gradients."""
        node, arrived = node_of[r], arrivals[r]
        t = step_start[r]
        if aggregated:  # the leader refreshes its node's copies before the forward pass
            t = net.on_bus(max(arrived.values(), default=t), node, broadcast)
        ready_at = []
        for i, layer in enumerate(layers):
            t = max([t, *(arrived[v] for v, _, _ in layer)]) + forward[i]
        for i in reversed(range(len(layers))):
            t += backward[i]
            ready_at.append((i, t))
        pending_applies[r] = len(trainable)
        for i, t_ready in ready_at:
            for _, size, ps in layers[i]:
                if ring:  # the node's devices sum this gradient first
                    t_ready = net.on_bus(t_ready, node, ring * size)
                net.send(t_ready, node, ps_node[ps], size, functools.partial(apply, r, size, ps))

    def apply(r: int, size: float, ps: int, t: float) -> None:
        """A gradient is in at its PS, whose CPU applies it in the order they come."""
        if step_of[r] == steps - 1:
            ps_bytes[ps] += size
        last_apply[r] = max(last_apply[r], on_cpu(t, ps, size))
        pending_applies[r] -= 1
        if pending_applies[r]:
            return
        step_ends[r].append(last_apply[r])
        step_of[r] += 1
        if not sync:
            if step_of[r] < steps:
                start_step(r, last_apply[r] + hardware.latency_s)
            return
        barrier[0] += 1
        if barrier[0] == replicas:  # every replica's applies of this step are done: all start again
            barrier[0] = 0
            if step_of[0] < steps:
                for other in range(replicas):
                    start_step(other, max(last_apply) + hardware.latency_s)

    for r in range(replicas):
        start_step(r, 0.0)
    events.run()
    if sync:
        ends = [max(step_ends[r][k] for r in range(replicas)) for k in range(steps)]
        step = (ends[-1] - ends[0]) / (steps - 1)
        rate = replicas * images / step
    else:  # the steps every replica finished after the last one's first, over that window
        begin, end = max(e[0] for e in step_ends), max(e[-1] for e in step_ends)
        finished = sum(sum(1 for t in e if t > begin) for e in step_ends)
        rate = finished * images / (end - begin)
        step = replicas * images / rate
    window = step * (steps - 1)
    channels = [*net.out, *net.into, *cpu, *(net.bus if aggregated and per_node > 1 else [])]
    return _result(nodes, per_node, num_ps, update, ps_strategy, sync, batch_size, step, rate, step_time_s,
                   channels, window, steps, max(c.bytes for c in [*net.out, *net.into]) / steps,
                   max(ps_bytes), net.timeouts / steps)


def _result(nodes, per_node, num_ps, update, ps_strategy, sync, batch_size, step, rate, compute_s, channels,
            window, steps, nic_bytes, ps_bytes, incast_per_step: float = 0.0) -> SimResult:
    """The result, with the busiest resource over the steps (busy time / elapsed time)."""
    elapsed = window * steps / (steps - 1)
    busiest = max(channels, key=lambda c: c.busy, default=None)
    utilization = busiest.busy / elapsed if busiest else 0.0
    bottleneck = busiest.name if busiest else "compute"
    if compute_s / step >= COMPUTE_BOUND or not busiest:  # else the busiest resource, though it may idle
        bottleneck, utilization = "compute", compute_s / step
    return SimResult(nodes, per_node, nodes * per_node, num_ps, update, ps_strategy, sync, batch_size, step,
                     rate, bottleneck, min(1.0, utilization), compute_s, nic_bytes, ps_bytes, incast_per_step)


def _simulate_ring(plan, hardware, step_time_s, batch_size, nodes, per_node, update, fusion_bytes,
                   steps) -> SimResult:
    """Horovod's ring allreduce. Every replica computes and reduces alike (each bucket waits for
    all of them, and they are identical), so one replica's timeline is every one's."""
    n = nodes * per_node
    forward, backward = _layer_times(plan, step_time_s)
    collective = _Channel("ring allreduce (NIC)" if nodes > 1 else "ring allreduce (bus)")
    link = hardware.bus_bytes_per_sec if nodes == 1 else min(hardware.nic_bytes_per_sec,
                                                             hardware.bus_bytes_per_sec)
    t = 0.0
    ends = []
    for _ in range(steps):
        start = t
        t = start + sum(forward)
        bucket = 0.0
        for i in reversed(range(len(plan.layers))):
            t += backward[i]
            bucket += sum(plan.sizes[v] for v in plan.layers[i].variables)
            if bucket >= fusion_bytes or i == 0:
                duration = 2 * (n - 1) / n * bucket / link + 2 * (n - 1) * hardware.latency_s
                begin = max(t, collective.free)
                collective.free = begin + duration
                collective.busy += duration
                collective.bytes += 2 * (n - 1) / n * bucket if n > 1 else 0
                bucket = 0.0
        t = max(t, collective.free)
        ends.append(t)
    step = (ends[-1] - ends[0]) / (steps - 1)
    return _result(nodes, per_node, 0, update, None, True, batch_size, step, n * batch_size / step,
                   step_time_s, [collective], step * (steps - 1), steps,
                   collective.bytes / steps if nodes > 1 else 0.0, 0.0)  # inside one node: the bus


# ---- searching setups ---------------------------------------------------------------------------
def ps_candidates(max_ps: int) -> list[int]:
    """PS counts tried for up to ``max_ps``: every count to 4, then about 1.5x apart, and ``max_ps``.

    >>> ps_candidates(128)
    [1, 2, 3, 4, 6, 9, 14, 21, 32, 48, 72, 108, 128]
    """
    counts, n = list(range(1, min(max_ps, 4) + 1)), 4
    while n < max_ps:
        n = max(n + 1, round(n * 1.5))
        counts.append(min(n, max_ps))
    return sorted(set(counts))


def best_setup(plan: ModelPlan, hardware: Hardware, step_time_s: float, batch_size: int, gpus: int,
               updates: Sequence[str] = ("parameter_server", "distributed_replicated"),
               ps_strategy: str = "greedy", sync: bool = True, max_ps: int | None = None,
               min_ps: int = 1, dflow_runtime: bool = False) -> tuple[SimResult, list[SimResult]]:
    """The fastest setup for ``gpus`` devices over ``updates`` and PS counts (as seed 001 searched:
    1 to the number of workers; ``min_ps``..``max_ps`` when given), and every setup tried.
    ``dflow_runtime``: dflow's staged PS step with each PS a process of its own (``simulate``'s
    ``overlap=False, colocate_ps=False``), instead of TensorFlow's overlap on the worker nodes."""
    per_node = min(hardware.devices_per_node, gpus)
    nodes = math.ceil(gpus / per_node)
    tried = []
    for update in updates:
        if update in ("allreduce", "replicated"):
            if update == "replicated" and nodes > 1:
                continue
            tried.append(simulate(plan, hardware, step_time_s, batch_size, nodes, 0, update,
                                  devices_per_node=per_node))
            continue
        for m in ps_candidates(max_ps or (nodes if update == "distributed_replicated" else gpus)):
            if m < (min_ps or 1):
                continue
            tried.append(simulate(plan, hardware, step_time_s, batch_size, nodes, m, update, ps_strategy,
                                  per_node, sync, colocate_ps=not dflow_runtime, overlap=not dflow_runtime))
    best = max(tried, key=lambda r: r.images_per_sec)
    return best, tried





def calibrate_step_time(plan: ModelPlan, hardware: Hardware, images_per_sec: float, batch_size: int) -> float:
    """One device's compute per step such that the simulated one-device run (one PS on its
    node, as a table's first row) makes ``images_per_sec``: the measured rate, less the
    simulated reads and applies it includes."""
    step = batch_size / images_per_sec
    for _ in range(4):  # the overhead barely depends on the step: a few fixed-point rounds
        simulated = simulate(plan, hardware, step, batch_size, 1, 1, devices_per_node=1)
        step *= simulated.images_per_sec / images_per_sec
    return step


def simulate_counts(model: str, hardware: Hardware, gpus: Sequence[int], step_time_s: float | None = None,
                    batch_size: int = 64, variable_update: str = "best", num_ps: int | None = None,
                    ps_strategy: str = "greedy", devices_per_node: int | None = None,
                    sync: bool = True, dflow_runtime: bool = False) -> list[dict]:
    """The best (or the given) setup per GPU count, as dicts (``SimResult.as_dict`` plus ``system``)."""
    import dataclasses

    plan = model_plan(model)
    if devices_per_node:
        hardware = dataclasses.replace(hardware, devices_per_node=devices_per_node)
    if step_time_s is None:
        if hardware.one_device_images_per_sec is None or (model, batch_size) != ("inception3", 64):
            raise ValueError(f"no measured step time for {model} at batch {batch_size} on {hardware.name}: "
                             "give --step_time (one device's compute seconds per step)")
        step_time_s = calibrate_step_time(plan, hardware, hardware.one_device_images_per_sec, batch_size)
    updates = ("parameter_server", "distributed_replicated", "allreduce") if variable_update == "best" \
        else (variable_update,)
    rows = []
    for count in gpus:
        best, _ = best_setup(plan, hardware, step_time_s, batch_size, count, updates, ps_strategy, sync,
                             max_ps=num_ps, min_ps=num_ps, dflow_runtime=dflow_runtime)
        rows.append({"system": hardware.name, "model": model, **best.as_dict()})
    return rows
