"""``dflow bench modes``: the variable-update modes side by side, in one run.

Each mode trains the same model on the same cluster shape (the harness,
:func:`dflow.bench.harness.run_benchmark`, one after the other) and the table
shows its images/sec and the bytes each worker sends per step against what the
mode must send (``P`` = the parameters' bytes, ``N`` workers, nodes of ``d``):

======================== ===================================================
parameter_server         ``P`` (its gradients; it also receives ``P``)
replicated, allreduce    ``2 (N - 1) / N x P``: a ring allreduce's share
distributed_replicated   the node's ring ``2 (d - 1) / d x P``, plus, on each
                         node's first worker, ``P`` to the PS and ``(d - 1) P``
                         refreshing the node: averaged over the workers
independent              nothing
======================== ===================================================

and the bytes the PS links carry per step, where ``distributed_replicated`` moves
one aggregate per node instead of one per worker. ``--techniques`` adds the
allreduce's options, each against the default: no fusion (one collective per
gradient), no overlap (communication after the whole backward pass), fp16 on
the wire.

    $ dflow bench modes --model cifar10 --num_workers 2
    $ dflow bench modes --model deep_mnist --num_workers 4 --network 1gbit \\
          --modes parameter_server,allreduce
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from ..distributed.collective import ring_bytes
from ..train.variable_update import VARIABLE_UPDATES
from .harness import NETWORKS

__all__ = ["add_arguments", "main", "compare", "expected_sent_per_worker", "measured", "TECHNIQUES"]

PS_MODES = ("parameter_server", "distributed_replicated")
#: the allreduce's techniques: (label, settings that differ from the default)
TECHNIQUES = (("allreduce (fusion 4 MiB, overlap)", {}),
              ("  no fusion: one allreduce per gradient", {"fusion_bytes": 0}),
              ("  no overlap: after the backward pass", {"overlap": False}),
              ("  fp16 on the wire", {"compact_gradient_transfer": True}))


def expected_sent_per_worker(mode: str, param_bytes: int, workers: int, devices_per_node: int = 1) -> float:
    """The bytes a worker of ``mode`` must send per step, averaged over the workers."""
    if mode == "parameter_server":
        return float(param_bytes)
    if mode in ("replicated", "allreduce"):
        return ring_bytes(param_bytes, workers)
    if mode == "distributed_replicated":
        d = devices_per_node
        per_node = d * ring_bytes(param_bytes, d) + param_bytes + (d - 1) * param_bytes
        return per_node / d
    return 0.0


def measured(record: dict) -> dict:
    """From a harness record: bytes sent per worker per step (mean), and bytes on the PS links."""
    sent: dict[str, int] = {}
    ps_bytes = 0
    for link, count in record["bytes_per_step"].items():
        source, _, dest = link.partition("->")
        if source.startswith("worker/"):
            sent[source] = sent.get(source, 0) + count
        if source.startswith("ps/") or dest.startswith("ps/"):
            ps_bytes += count
    s = record["settings"]
    workers = s["num_workers"] * s["devices_per_node"]
    return {"sent_per_worker": sum(sent.values()) / workers, "ps_bytes": ps_bytes}


def compare(base: dict, modes: Sequence[str], techniques: bool = False,
            echo: Callable[[str], None] = print, run=None) -> list[tuple[str, dict]]:
    """Run each mode (then each technique) with ``base`` settings: ``[(label, record), ...]``."""
    if run is None:
        from .harness import run_benchmark as run
    workers = base.get("num_workers", 1) * base.get("devices_per_node", 1)
    runs = []
    for mode in modes:
        settings = {"variable_update": mode, "num_ps": base.get("num_ps", 1) if mode in PS_MODES else 0}
        if mode == "replicated":  # within one node: the same workers, as one node
            settings.update(num_workers=1, devices_per_node=workers)
        runs.append((mode, settings))
    if techniques:
        runs += [(label, {"variable_update": "allreduce", "num_ps": 0, **extra})
                 for label, extra in TECHNIQUES]
    results = []
    for label, settings in runs:
        echo(f"--- {label.strip()}")
        results.append((label, run({**base, **settings}, echo=lambda line: None)))
        echo(f"    {results[-1][1]['images_per_sec_mean']:.1f} images/sec")
    return results


def table(results: list[tuple[str, dict]]) -> list[str]:
    """The Markdown table of :func:`compare`'s results."""
    lines = ["| variable update | images/sec | sent per worker per step | expected | ratio "
             "| PS links per step |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for label, record in results:
        s, got = record["settings"], measured(record)
        workers = s["num_workers"] * s["devices_per_node"]
        expected = expected_sent_per_worker(s["variable_update"], record["param_bytes"], workers,
                                            s["devices_per_node"])
        if s["compact_gradient_transfer"] and s["variable_update"] != "parameter_server":
            expected /= 2
        ratio = f"{got['sent_per_worker'] / expected:.3f}" if expected else "-"
        lines.append(f"| {label} | {record['images_per_sec_mean']:.1f} | {got['sent_per_worker']:,.0f} | "
                     f"{expected:,.0f} | {ratio} | {got['ps_bytes']:,} |")
    return lines


def _time_allreduce(task_index: int, target: str, workers: int, sizes, algorithms, steps: int) -> dict:
    """One replica of :func:`time_algorithms`: the median seconds of each (algorithm, size)."""
    import statistics
    import time

    import numpy as np

    import dflow as tf
    from dflow.ops import collective_ops

    group = [f"/job:worker/task:{i}" for i in range(workers)]
    timings = {}
    with tf.device(group[task_index]):
        ops = {}
        for algorithm in algorithms:
            for size in sizes:
                x = tf.placeholder(tf.float32, [size // 4])
                key = f"time/{algorithm}/{size}"
                (total,) = collective_ops.all_reduce([x], group, key, algorithm=algorithm)
                ops[algorithm, size] = (x, total)
    with tf.Session(target) as sess:
        for (algorithm, size), (x, total) in ops.items():
            value, seconds = np.ones(size // 4, np.float32), []
            for _ in range(steps + 2):  # two to warm up
                start = time.perf_counter()
                sess.run(total.op, {x: value})
                seconds.append(time.perf_counter() - start)
            timings[f"{algorithm} {size}"] = statistics.median(seconds[2:])
    return timings


def time_algorithms(workers: int, sizes=(1024, 16 * 1024, 256 * 1024, 2**20, 4 * 2**20, 16 * 2**20),
                    algorithms=("ring", "tree"), steps: int = 10, network: str = "none") -> dict:
    """Median milliseconds of one allreduce per (algorithm, buffer bytes) on ``workers`` workers:
    what ``algorithm="auto"``'s threshold (:data:`~dflow.distributed.collective.TREE_MAX_BYTES`)
    is chosen from."""
    import dflow as tf

    if network == "none":
        started = tf.cluster.local(ps=0, workers=workers)
    else:
        from .network import shaped_cluster

        started = shaped_cluster(0, workers, network)
    with started as cluster:
        results = tf.replicate(_time_allreduce, cluster, cluster.target, workers, sizes, algorithms, steps)
    return {key: 1000 * max(r[key] for r in results) for key in results[0]}  # the slowest member's


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="cifar10", help="default cifar10 (1.07M parameters)")
    p.add_argument("--batch_size", type=int, help="per worker (default: the model's)")
    p.add_argument("--num_workers", type=int, default=2, help="worker nodes (default 2)")
    p.add_argument("--devices_per_node", type=int, default=1,
                   help="workers per node: distributed_replicated sums within a node (default 1)")
    p.add_argument("--num_ps", type=int, default=1, help="PS tasks of the PS modes (default 1)")
    p.add_argument("--modes", default=",".join(VARIABLE_UPDATES),
                   help=f"comma-separated (default all: {','.join(VARIABLE_UPDATES)})")
    p.add_argument("--techniques", action="store_true",
                   help="also allreduce without fusion, without overlap, and with fp16")
    p.add_argument("--network", default="none", choices=NETWORKS,
                   help="shape each role's link (root; see dflow bench --network)")
    p.add_argument("--num_warmup_batches", type=int, default=5)
    p.add_argument("--num_batches", type=int, default=30)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--output", help="append each run's record as a JSON line here")
    p.add_argument("--algorithms", action="store_true",
                   help="instead: time one allreduce, ring vs tree, over buffer sizes (1 KiB .. 16 MiB)")


def main(args: argparse.Namespace, echo: Callable[[str], None] = print) -> int:
    from ..errors import OpError
    from .harness import SettingsError, append_record
    from .network import NetworkError

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in VARIABLE_UPDATES]
    if unknown:
        print(f"dflow bench modes: error: unknown mode(s) {', '.join(unknown)}; the modes are "
              f"{', '.join(VARIABLE_UPDATES)}", file=sys.stderr)
        return 2
    workers = args.num_workers * args.devices_per_node
    if args.algorithms:
        timings = time_algorithms(workers, network=args.network)
        echo(f"one allreduce on {workers} workers, network {args.network}: median ms (slowest member)")
        echo("| bytes | ring | tree |\n| ---: | ---: | ---: |")
        for size in sorted({int(key.split()[1]) for key in timings}):
            echo(f"| {size:,} | {timings[f'ring {size}']:.2f} | {timings[f'tree {size}']:.2f} |")
        return 0
    base = {key: getattr(args, key) for key in ("model", "batch_size", "num_workers", "devices_per_node",
                                                 "num_ps", "network", "num_warmup_batches", "num_batches",
                                                 "repeats") if getattr(args, key) is not None}
    echo(f"{args.model}: {workers} workers ({args.num_workers} node(s) of {args.devices_per_node}), "
         f"synchronous, network {args.network}; each mode in turn")
    try:
        results = compare(base, modes, args.techniques, echo)
    except (SettingsError, NetworkError) as error:
        print(f"dflow bench modes: error: {error}", file=sys.stderr)
        return 1
    except (OSError, ValueError, RuntimeError, OpError) as error:
        print(f"dflow bench modes: error on the cluster: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    echo(f"parameters: {results[0][1]['param_bytes']:,} bytes")
    for line in table(results):
        echo(line)
    if args.output:
        for _, record in results:
            append_record(args.output, record)
    return 0
