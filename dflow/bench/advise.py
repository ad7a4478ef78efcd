"""``dflow bench advise``: predict images/sec on N workers and M PS before running them.

A simple analytic model: a synchronous step takes one worker device's compute
time plus the time its busiest link needs to carry the step's bytes, plus a
per-message latency::

    images/sec = devices x batch / (compute x sharing + busiest link's bytes / bandwidth + messages x latency)

What crosses the busiest link, per step, with P parameter bytes, counting a
link's two directions as one would (full duplex) when they carry different
workers' traffic at once, and adding them when they take turns:

- ``parameter_server``: each worker device reads every variable and sends every
  gradient back. A worker's link carries its reads, then (after its compute) its
  gradients: 2 x P per device on it. A PS's link carries every device's reads out
  and their gradients in at once: P x share x N (N devices, share = the busiest
  PS's part of P: 1/M when balanced; round-robin placement of unequal variables
  is not balanced). The busier of the two sets the time;
- ``distributed_replicated``: each node first sums its devices' gradients, so the
  PS traffic is per node instead of per device: P x share x nodes, and 2 x P on a node's link;
- ``allreduce`` (ring): each worker sends and receives 2 (N-1)/N x P at once, in
  2 (N-1) messages, and there is no PS.

``sharing`` is how much slower a device computes beside the others on one
machine (:func:`core_sharing`): ``tf.cluster.local`` gives each of D workers
``cores // D`` BLAS threads, so a lone worker computes on every core and two on
half each; with a core or GPU per device (a cluster) it is 1.

:func:`predict` gives one configuration, :func:`advise` tabulates worker and PS
counts and recommends the PS count and placement, :func:`compare` puts a sweep's
measured images/sec beside the prediction from its own single-worker run.

>>> p = predict(step_time_s=0.1, variable_bytes=4_000_000, bandwidth="1gbit", batch_size=100,
...             num_workers=4, num_ps=2)
>>> round(p.communication_s, 3)  # 4 MB x 4 workers / 2 PS = 8 MB each way at 125 MB/s, + 2 ms
0.066
>>> round(p.images_per_sec)  # 400 images in 0.1 + 0.066 s
2410
"""

from __future__ import annotations

import argparse
import re
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from ..train.variable_update import PS_STRATEGIES
from . import report
from .network import RATES

__all__ = ["Prediction", "Advice", "predict", "simulate_prediction", "core_sharing", "advise", "compare",
           "ps_loads",
           "parse_bandwidth", "model_variable_bytes", "advise_cluster", "format_advice", "format_compare",
           "add_arguments",
           "main", "VARIABLE_UPDATES", "NETWORK_BYTES_PER_SEC"]

VARIABLE_UPDATES = ("parameter_server", "distributed_replicated", "allreduce")
#: the harness's shaped links (``network`` setting), in bytes/sec
NETWORK_BYTES_PER_SEC = {network: bits / 8 for network, bits in RATES.items() if bits}
#: a worker-to-worker message on loopback costs ~1 ms (docs/measured.md, Dask on loopback)
LATENCY_S = 0.001
#: a PS count whose prediction is this close to the best is as good, and uses fewer machines
GOOD_ENOUGH = 0.95

_UNITS = {"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "kib": 2**10, "mib": 2**20, "gib": 2**30,
          "bit": 1 / 8, "kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8}


def parse_bandwidth(value: str | float) -> float:
    """Bytes/sec from a number or a text like ``1gbit``, ``10gbit``, ``2.3GB/s``, ``800MiB/s``.

    >>> parse_bandwidth("1gbit"), parse_bandwidth("2.5 GB/s")
    (125000000.0, 2500000000.0)
    """
    if isinstance(value, int | float):
        return float(value)
    match = re.fullmatch(r"\s*([0-9.]+(?:e[0-9]+)?)\s*([a-z]*)(?:/s|ps)?\s*", value.lower())
    if not match or match.group(2) not in _UNITS:
        raise ValueError(f"bandwidth {value!r}: give bytes/sec, or a number with a unit like "
                         "1gbit, 10gbit, 800MB/s, 2.3GB/s")
    return float(match.group(1)) * _UNITS[match.group(2)]


def ps_loads(variable_bytes: float | Sequence[int], num_ps: int,
             strategy: str = "round_robin") -> list[float]:
    """Bytes held by each PS when the variables (in creation order) are placed by ``strategy``.

    ``round_robin`` is ``replica_device_setter``'s default; ``greedy`` puts each variable on
    the least-loaded PS (``GreedyLoadBalancingStrategy`` with ``byte_size_load_fn``). A total
    alone (a number) is taken as perfectly divisible.

    >>> ps_loads([400, 4, 400, 4], 2), ps_loads([400, 4, 400, 4], 2, "greedy")
    ([800, 8], [404, 404])
    """
    if num_ps < 1:
        raise ValueError(f"num_ps must be >= 1 for a PS update, got {num_ps}")
    if isinstance(variable_bytes, int | float):
        return [variable_bytes / num_ps] * num_ps
    loads = [0] * num_ps
    for index, size in enumerate(variable_bytes):
        target = index % num_ps if strategy == "round_robin" else loads.index(min(loads))
        loads[target] += size
    return loads


@dataclass(frozen=True)
class Prediction:
    """The analytic model's answer for one configuration (times per step, in seconds)."""

    variable_update: str
    num_workers: int
    num_ps: int
    ps_strategy: str | None
    devices_per_node: int
    batch_size: int
    compute_s: float
    communication_s: float
    busiest_link_bytes: float
    images_per_sec: float


def core_sharing(devices: int, cores: int | None) -> float:
    """How much slower each of ``devices`` worker devices on one machine of ``cores`` computes
    than a lone device on all of them.

    ``tf.cluster.local`` gives each worker ``cores // devices`` BLAS threads (the step is mostly
    GEMM, which scales with them), so a device computes on that many cores, or on a
    ``cores / devices`` share of one when they outnumber the cores; a lone device has all
    ``cores``. ``cores=None``: each device has its own (a cluster, or GPUs), no slowdown.

    >>> core_sharing(1, cores=2), core_sharing(2, cores=2), core_sharing(3, cores=8), core_sharing(8, None)
    (1.0, 2.0, 4.0, 1.0)
    """
    return cores / min(max(1, cores // devices), cores / devices) if cores else 1.0


def predict(step_time_s: float, variable_bytes: float | Sequence[int], bandwidth: str | float,
            batch_size: int, num_workers: int, num_ps: int = 1, variable_update: str = "parameter_server",
            ps_strategy: str = "round_robin", devices_per_node: int = 1,
            latency_s: float = LATENCY_S, cores: int | None = None) -> Prediction:
    """images/sec of ``num_workers`` nodes (``devices_per_node`` each) and ``num_ps`` PS.

    ``step_time_s`` is one device's compute time for one batch with the cores to itself (a
    single-worker run's ``compute_s_per_step``); ``variable_bytes`` the model's trainable
    variables (sizes in creation order, or their total); ``bandwidth`` a link's bytes/sec (or
    ``"1gbit"``); ``cores``: the cores of the one machine whose worker devices share them
    (each one's compute slows by :func:`core_sharing`), or None when each has its own.
    """
    total = variable_bytes if isinstance(variable_bytes, int | float) else sum(variable_bytes)
    link = parse_bandwidth(bandwidth)
    devices = num_workers * devices_per_node
    if variable_update == "allreduce":
        link_bytes = 2 * (num_workers - 1) / num_workers * total
        messages, num_ps, ps_strategy = 2 * (num_workers - 1), 0, None
    elif variable_update in ("parameter_server", "distributed_replicated"):
        share = max(ps_loads(variable_bytes, num_ps, ps_strategy)) / total if total else 0
        senders = devices if variable_update == "parameter_server" else num_workers
        # a worker reads, computes, then sends: its two directions take turns; a PS's
        # reads out and gradients in come from different workers at once (full duplex)
        worker_link = 2 * total * (devices_per_node if variable_update == "parameter_server" else 1)
        link_bytes = max(total * share * senders, worker_link)
        messages = 2
    else:
        raise ValueError(f"variable_update must be one of {VARIABLE_UPDATES}, got {variable_update!r}")
    compute = step_time_s * core_sharing(devices, cores)
    communication = link_bytes / link + messages * latency_s
    return Prediction(variable_update, num_workers, num_ps, ps_strategy, devices_per_node, batch_size,
                      compute, communication, link_bytes,
                      devices * batch_size / (compute + communication))


def simulate_prediction(step_time_s: float, variable_bytes, bandwidth: str | float, batch_size: int,
                        num_workers: int, num_ps: int = 1, variable_update: str = "parameter_server",
                        ps_strategy: str = "round_robin", devices_per_node: int = 1,
                        latency_s: float = LATENCY_S, cores: int | None = None, sync: bool = True,
                        hardware=None) -> Prediction:
    """:func:`predict`'s question answered by ``dflow bench simulate`` on dflow's own runtime.

    ``variable_bytes`` is a model name (its real plan: :func:`dflow.bench.simulate.model_plan`),
    the variables' sizes in creation order, or their total. Every role is a node of its own
    with one link of ``bandwidth`` (``tf.cluster.local`` with ``--network``), or ``hardware``'s
    nodes; a PS step is dflow's three stages, without per-variable overlap.

    >>> p = simulate_prediction(0.1, [2_000_000, 2_000_000], "1gbit", 100, num_workers=4, num_ps=2)
    >>> round(p.communication_s, 3)  # each PS link carries 4 x 2 MB of reads (68 ms) together, and
    ... # 4 gradients in together after the compute; serializing, applying, latencies besides
    0.13
    """
    import dataclasses

    from .hardware import LOOPBACK
    from .simulate import ModelPlan, model_plan, simulate

    if isinstance(variable_bytes, str):
        plan = model_plan(variable_bytes)
    else:
        sizes = [variable_bytes] if isinstance(variable_bytes, int | float) else list(variable_bytes)
        plan = ModelPlan.uniform("variables", sizes, [1.0] * len(sizes))
    link = parse_bandwidth(bandwidth)
    node = hardware or dataclasses.replace(LOOPBACK, nic_bytes_per_sec=link, bus_bytes_per_sec=link,
                                           latency_s=latency_s)
    compute = step_time_s * core_sharing(num_workers * devices_per_node, cores)
    if variable_update in ("allreduce", "replicated"):
        from ..train.allreduce import DEFAULT_FUSION_BYTES

        result = simulate(plan, node, compute, batch_size, num_workers, 0, variable_update,
                          devices_per_node=devices_per_node, fusion_bytes=DEFAULT_FUSION_BYTES)
        num_ps, ps_strategy = 0, None
    elif variable_update in ("parameter_server", "distributed_replicated"):
        result = simulate(plan, node, compute, batch_size, num_workers, num_ps, variable_update, ps_strategy,
                          devices_per_node, sync, colocate_ps=hardware is not None,
                          overlap=hardware is not None)
    else:
        raise ValueError(f"variable_update must be one of {VARIABLE_UPDATES}, got {variable_update!r}")
    return Prediction(variable_update, num_workers, num_ps, ps_strategy, devices_per_node, batch_size,
                      compute, result.step_s - compute, result.busiest_nic_bytes_per_step,
                      result.images_per_sec)


def _engine(name: str):
    engines = {"simulate": simulate_prediction, "formula": predict}
    if name not in engines:
        raise ValueError(f"engine must be one of {', '.join(engines)}, got {name!r}")
    return engines[name]


# ---- advice ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Advice:
    """Every prediction tabulated, and per worker count the recommended configuration."""

    predictions: list[Prediction]
    recommended: dict[int, Prediction]
    recommended_ps: dict[tuple[int, str], Prediction]


def _best_ps(candidates: list[Prediction]) -> Prediction:
    """The fewest PS within :data:`GOOD_ENOUGH` of the best; round-robin unless greedy is better."""
    best = max(p.images_per_sec for p in candidates)
    good = [p for p in candidates if p.images_per_sec >= GOOD_ENOUGH * best]
    fewest = min(p.num_ps for p in good)
    at_fewest = [p for p in good if p.num_ps == fewest]
    return max(at_fewest, key=lambda p: (p.images_per_sec, p.ps_strategy == "round_robin"))


def advise(step_time_s: float, variable_bytes: float | Sequence[int], bandwidth: str | float, batch_size: int,
           workers: Sequence[int] = (1, 2, 4, 8), devices_per_node: int = 1,
           latency_s: float = LATENCY_S, engine: str = "simulate") -> Advice:
    """Predict every update, PS count 1..N and placement for each worker count; recommend.

    ``engine``: ``simulate`` (:func:`simulate_prediction`, the default) or ``formula``
    (:func:`predict`).

    >>> a = advise(0.1, [3_000_000, 1_000, 1_000_000, 1_000], "1gbit", 100, workers=[4])
    >>> best = a.recommended_ps[(4, "parameter_server")]
    >>> best.num_ps, best.ps_strategy
    (2, 'greedy')
    """
    model = _engine(engine)
    predictions, recommended, recommended_ps = [], {}, {}
    for n in workers:
        common = dict(step_time_s=step_time_s, variable_bytes=variable_bytes, bandwidth=bandwidth,
                      batch_size=batch_size, num_workers=n, devices_per_node=devices_per_node,
                      latency_s=latency_s)
        per_update = []
        for update in ("parameter_server", "distributed_replicated"):
            candidates = [model(**common, num_ps=m, variable_update=update, ps_strategy=s)
                          for m in range(1, n + 1) for s in PS_STRATEGIES]
            predictions += candidates
            recommended_ps[(n, update)] = _best_ps(candidates)
            per_update.append(recommended_ps[(n, update)])
        ring = model(**common, variable_update="allreduce")
        predictions.append(ring)
        recommended[n] = max([*per_update, ring], key=lambda p: p.images_per_sec)
    return Advice(predictions, recommended, recommended_ps)


def format_advice(advice: Advice) -> str:
    """The recommendations as a Markdown table: per worker count and update, the best PS setup."""
    rows = []
    for (n, _), p in sorted(advice.recommended_ps.items()):
        rows.append(_prediction_row(p, recommended=advice.recommended[n] == p))
    # a PS update's best is among those rows already
    rows += [_prediction_row(best, recommended=True) for best in advice.recommended.values()
             if best.variable_update == "allreduce"]
    rows.sort(key=lambda r: (r["num_workers"], r["variable_update"]))
    columns = ["num_workers", "variable_update", "num_ps", "ps_strategy", "compute_ms",
               "communication_ms", "images_per_sec", "best"]
    return report.markdown_table(rows, columns)


def _prediction_row(p: Prediction, recommended: bool) -> dict:
    return {**asdict(p), "compute_ms": p.compute_s * 1e3, "communication_ms": p.communication_s * 1e3,
            "best": "<- best" if recommended else ""}


# ---- predicted vs measured ---------------------------------------------------------------------
def _step_compute_s(record: dict) -> float:
    """A record's compute time per step: measured when the harness split it out, else the step."""
    if record.get("compute_s_per_step"):
        return record["compute_s_per_step"]
    settings = record["settings"]
    return settings["batch_size"] * settings.get("devices_per_node", 1) / record["images_per_sec_mean"]


def _record_bandwidth(record: dict, bandwidth: str | float | None) -> float:
    """The link speed behind a record: given, the shaped network, or bytes/communication measured."""
    if bandwidth is not None:
        return parse_bandwidth(bandwidth)
    network = record["settings"].get("network", "none")
    if network in NETWORK_BYTES_PER_SEC:
        return NETWORK_BYTES_PER_SEC[network]
    links = record.get("bytes_per_step") or {}
    moved = sum(b for link, b in links.items() if "worker/0" in link)
    if moved and record.get("communication_s_per_step"):
        return moved / record["communication_s_per_step"]
    raise ValueError("no link bandwidth for an unshaped network: the record has no bytes_per_step and "
                     "communication_s_per_step to measure it from; give one (--bandwidth 2GB/s)")


def _calibration_key(settings: dict) -> tuple:
    # in-graph replication grows by devices in one node: its baseline is the fewest devices
    per_node = None if settings.get("variable_update") == "replicated" else settings.get("devices_per_node")
    return (per_node, *(settings.get(k) for k in ("model", "batch_size", "data_format", "data_dir",
                                                  "network")))


def _devices(record: dict) -> int:
    return record["settings"]["num_workers"] * record["settings"].get("devices_per_node", 1)


def _communicates(settings: dict) -> bool:
    alone = settings["num_workers"] * settings.get("devices_per_node", 1) == 1
    return not (settings["variable_update"] == "independent" or
                (settings["variable_update"] == "replicated" and alone))


def _link_bandwidth(base: dict, group: Sequence[dict], bandwidth: str | float | None) -> float:
    """The baseline's link speed; a baseline that sent nothing (one device, no PS) borrows it from
    the fewest-device record of its group that did."""
    senders = [r for r in group if r.get("bytes_per_step")]
    source = base if base.get("bytes_per_step") or not senders else min(senders, key=_devices)
    return _record_bandwidth(source, bandwidth)


def _machine_cores(record: dict) -> int | None:
    """The cores all of a record's workers and PS shared: one machine's, unless GPUs compute."""
    on_one_machine = record["settings"].get("cluster", "local") == "local"
    return (record.get("machine") or {}).get("cores") if on_one_machine else None


def _prediction(s: dict, compute: float, link: float, sizes, latency_s: float,
                cores: int | None, engine: str = "simulate") -> Prediction:
    """The model's prediction for a record's settings."""
    if s["variable_update"] == "replicated" and engine == "simulate":  # in-graph: a ring over one node's bus
        return simulate_prediction(compute, sizes, link, s["batch_size"], 1, 0, "replicated",
                                   devices_per_node=_devices({"settings": s}), latency_s=latency_s,
                                   cores=cores)
    if s["variable_update"] == "replicated":  # in-graph: the node's devices reduce as a ring
        return predict(compute, sizes, link, s["batch_size"], _devices({"settings": s}), 0, "allreduce",
                       latency_s=latency_s, cores=cores)
    update = s["variable_update"] if s["variable_update"] in VARIABLE_UPDATES else "parameter_server"
    extra = {"sync": s.get("sync", True)} if engine == "simulate" else {}
    return _engine(engine)(compute, sizes, link, s["batch_size"], s["num_workers"],
                           max(1, s.get("num_ps", 1)), update, s.get("ps_strategy", "round_robin"),
                           s.get("devices_per_node", 1), latency_s, cores, **extra)


def _unshared_compute_s(base: dict, cores: int | None) -> float:
    """The baseline's compute per step on all the cores: measured, less its own sharing."""
    return _step_compute_s(base) / core_sharing(_devices(base), cores)


def compare(records: Sequence[dict], bandwidth: str | float | None = None,
            variable_bytes: dict[str, Sequence[int]] | None = None,
            latency_s: float = LATENCY_S, engine: str = "simulate", own_compute: bool = False) -> list[dict]:
    """Each record's measured images/sec beside the model's prediction, with the error.

    The prediction for a point uses only what a single-worker run tells: the compute time
    of the record with the fewest workers of the same model, batch, data and network, its
    ``param_bytes`` (or ``variable_bytes[model]``, the sizes in creation order, for the
    placement's imbalance) and the link's bandwidth (given; else the shaped ``network``;
    else measured from the baseline's bytes and communication time). Where the record ran on
    one machine (``cluster="local"``), its ``machine.cores`` are shared: the baseline's compute
    is divided by its own :func:`core_sharing` and each point's multiplied by its own.
    ``engine``: ``simulate`` (the default) or ``formula`` (:func:`predict`). ``own_compute``:
    feed each point its own measured ``compute_s_per_step`` (the cores as that run shared
    them) instead of the baseline's scaled by :func:`core_sharing`, so that only the
    communication and its overlap are predicted.
    """
    groups: dict[tuple, list[dict]] = {}
    for record in records:
        groups.setdefault(_calibration_key(record["settings"]), []).append(record)
    baselines = {key: min(group, key=_devices) for key, group in groups.items()}
    rows = []
    for record in records:
        s = record["settings"]
        key = _calibration_key(s)
        base = baselines[key]
        sizes = (variable_bytes or {}).get(s["model"]) or int(base["param_bytes"])
        cores = _machine_cores(record)
        compute = _unshared_compute_s(base, cores)
        if own_compute and record.get("compute_s_per_step"):
            compute, cores = record["compute_s_per_step"], None
        if _communicates(s):
            link = _link_bandwidth(base, groups[key], bandwidth)
            predicted = _prediction(s, compute, link, sizes, latency_s, cores, engine).images_per_sec
        else:  # nothing shared but the cores: each device alone
            devices = _devices(record)
            predicted = devices * s["batch_size"] / (compute * core_sharing(devices, cores))
        measured = record["images_per_sec_mean"]
        rows.append({**{k: s.get(k) for k in report.ROW_SETTINGS}, "predicted": predicted,
                     "measured": measured, "error_percent": (predicted - measured) / measured * 100})
    return rows


def format_compare(rows: Sequence[dict]) -> str:
    """Predicted vs measured as a Markdown table, with the mean absolute error under it."""
    columns = ["model", "batch_size", "num_workers", "devices_per_node", "num_ps", "variable_update",
               "network", "predicted", "measured", "error_percent"]
    table = report.markdown_table(rows, columns)
    if not rows:
        return table
    mean_error = statistics.fmean(abs(r["error_percent"]) for r in rows)
    return f"{table}\n\nmean absolute error: {mean_error:.1f}% over {len(rows)} points"


# ---- the model's variables ---------------------------------------------------------------------
def model_variable_bytes(model: str) -> list[int]:
    """The byte sizes of a model's trainable variables, in creation order (PS placement order).

    >>> sum(model_variable_bytes("mnist_dnn"))
    2678824
    """
    import numpy

    import dflow as tf
    from dflow.models import get_model

    spec = get_model(model)
    graph = tf.Graph()
    with graph.as_default():
        spec(tf.placeholder(tf.float32, [1, *spec.input_shape]))
    return [int(numpy.prod(v.shape)) * v.dtype.size for v in graph.get_collection("trainable_variables")]


# ---- command line ------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``dflow bench advise``'s arguments."""
    parser.add_argument("--step_time", type=float,
                        help="one worker's compute seconds per step (compute_s_per_step of a 1-worker run)")
    parser.add_argument("--model", help="take the variable sizes from this model (dflow.models)")
    parser.add_argument("--param_bytes", type=int, help="the variables' total bytes (instead of --model)")
    parser.add_argument("--bandwidth", help="link bytes/sec or 1gbit, 10gbit, 2GB/s (default for advice: "
                                            "1gbit; for --sweep: each record's network or its measurement)")
    parser.add_argument("--batch_size", type=int, help="per device (default 100; --hardware: 64)")
    parser.add_argument("--workers", default="1,2,4,8", type=lambda s: [int(n) for n in s.split(",")],
                        help="comma-separated worker counts (default 1,2,4,8)")
    parser.add_argument("--devices_per_node", type=int, default=1)
    parser.add_argument("--latency_ms", type=float, default=LATENCY_S * 1e3,
                        help="per message (default: 1 ms, loopback)")
    parser.add_argument("--sweep", help="a sweep's PRESET.jsonl: show predicted vs measured per point")
    parser.add_argument("--hardware", help="a cluster preset of dflow.bench.hardware (piz_daint, p2.xlarge, "
                                           "p2.8xlarge, dgx1, h100_ib400, ...): advise from the simulator "
                                           "for the --workers GPU counts (--model, default inception3)")
    parser.add_argument("--cluster", metavar="ADDRESS",
                        help="a running Dask scheduler: measure its workers' link, per-message cost, PS "
                             "apply rate and one --model step (default cifar10, batch 64), and advise "
                             "from the simulator on that cluster for the --workers counts")
    parser.add_argument("--own_compute", action="store_true",
                        help="--sweep: feed each point its own measured compute per step (predict only "
                             "the communication) instead of the baseline's shared by the cores")
    parser.add_argument("--formula", dest="engine", action="store_const", const="formula", default="simulate",
                        help="the closed-form model instead of the simulator (dflow bench simulate)")


# ---- advice on a cluster preset ------------------------------------------------------------------
def _remedy(result: dict) -> str:
    """What would lift a simulated run's bound, from what bounds it."""
    bound = result["bottleneck"]
    if bound == "compute":
        return "compute-bound: more GPUs scale it"
    if result.get("incast_timeouts_per_step"):
        return (f"TCP incast: {result['incast_timeouts_per_step']:.0f} messages a step wait a 200 ms timeout "
                "(too many senders into one port): fewer PS tasks, allreduce, or a lossless fabric")
    if result["utilization"] < 0.5:  # the busiest resource idles most of the step: waits bound it
        return (f"no resource half busy ({bound} the busiest): messages' latency and stages in series; "
                "fewer, larger messages (fewer PS tasks, larger fusion buckets), or overlap")
    if "CPU" in bound:
        return "a PS's CPU: more PS tasks, greedy placement, or allreduce (no PS)"
    if "connection" in bound:
        return "one gRPC connection per worker-PS pair: more PS tasks, or allreduce over MPI/NCCL"
    if "bus" in bound:
        return "the node's bus: NVLink, or fewer devices per node"
    if result["variable_update"] == "parameter_server" and result["devices_per_node"] > 1:
        return f"{bound}: sum the node's gradients first (distributed_replicated), or a faster NIC"
    return f"{bound}: a faster NIC, allreduce (2(n-1)/n bytes a link), or local aggregation"


def advise_cluster(model: str, hardware, gpus: Sequence[int], step_time_s: float | None = None,
                   batch_size: int = 64, dflow_runtime: bool = False) -> list[dict]:
    """Per GPU count, the simulator's best setup on a cluster preset (every update, PS counts
    1..workers, greedy placement), the best of each update, what bounds it and what would help.
    ``hardware``: a preset's name, or a :class:`~dflow.bench.hardware.Hardware` (a measured one);
    ``dflow_runtime``: play dflow's staged step, each PS a process of its own (as dflow's
    launchers start roles), not TensorFlow's overlap with the PS on the worker nodes."""
    from .hardware import get_hardware
    from .simulate import simulate_counts

    node = get_hardware(hardware) if isinstance(hardware, str) else hardware
    rows = []
    for update in ("parameter_server", "distributed_replicated", "allreduce"):
        rows += simulate_counts(model, node, gpus, step_time_s, batch_size, update,
                                dflow_runtime=dflow_runtime)
    best = {}
    for row in rows:
        if row["images_per_sec"] > best.get(row["gpus"], {}).get("images_per_sec", 0):
            best[row["gpus"]] = row
    for row in rows:
        row["best"] = "<- best" if best[row["gpus"]] is row else ""
        row["what_would_help"] = _remedy(row)
    return sorted(rows, key=lambda r: (r["gpus"], -r["images_per_sec"]))


def _measured(args: argparse.Namespace, echo) -> tuple:
    """``--cluster ADDRESS``: its links, a message, a PS apply and one step measured, as a preset."""
    from .measured_cluster import measure_cluster

    measured = measure_cluster(args.cluster, args.model or "cifar10", args.batch_size or 64)
    echo(f"measured {measured.address} ({measured.workers} workers): link "
         f"{measured.link_bytes_per_sec * 8 / 1e9:.2f} Gbit/s, {measured.message_latency_s * 1e3:.2f} ms "
         f"a message, PS apply {measured.apply_bytes_per_sec / 1e9:.2f} GB/s, one {measured.model} step "
         f"at batch {measured.batch_size}: {measured.step_time_s:.3f} s\n")
    step_time = args.step_time or measured.step_time_s  # --step_time: a GPU's, where the workers have none
    return measured.hardware(), step_time


def main(args: argparse.Namespace, echo=print) -> int:
    """Run ``dflow bench advise``: the advice table, the comparison with a sweep, or both."""
    latency = args.latency_ms / 1e3
    if args.hardware or args.cluster:
        try:
            hardware, step_time = args.hardware, args.step_time
            if args.cluster:
                hardware, step_time = _measured(args, echo)
            rows = advise_cluster(args.model or ("cifar10" if args.cluster else "inception3"), hardware,
                                  args.workers, step_time, args.batch_size or 64,
                                  dflow_runtime=bool(args.cluster))  # a Dask cluster runs dflow's step
        except ValueError as error:
            echo(f"dflow bench advise: {error}")
            return 2
        echo(report.markdown_table(rows, ["gpus", "variable_update", "num_ps", "devices_per_node",
                                          "images_per_sec", "scaling_efficiency", "bottleneck", "utilization",
                                          "what_would_help", "best"]))
        return 0
    args.batch_size = args.batch_size or 100
    if args.step_time is None and args.sweep is None:
        echo("dflow bench advise: give --step_time (with --model or --param_bytes) or --sweep FILE.jsonl")
        return 2
    sizes = {args.model: model_variable_bytes(args.model)} if args.model else {}
    if args.step_time is not None:
        variables = sizes.get(args.model) or args.param_bytes
        if variables is None:
            echo("dflow bench advise: --step_time needs the variables: --model NAME or --param_bytes N")
            return 2
        advice = advise(args.step_time, variables, args.bandwidth or "1gbit", args.batch_size, args.workers,
                        args.devices_per_node, latency, args.engine)
        echo(format_advice(advice))
    if args.sweep is not None:
        records = report.load_records(args.sweep)
        for model in {r["settings"]["model"] for r in records} - set(sizes):
            sizes[model] = model_variable_bytes(model)
        echo(format_compare(compare(records, args.bandwidth, sizes, latency, args.engine, args.own_compute)))
    return 0
