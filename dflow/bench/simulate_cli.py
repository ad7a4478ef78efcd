"""``dflow bench simulate``: the command line over :mod:`dflow.bench.simulate` (a table or JSON of
simulated setups) and :mod:`dflow.bench.reproduce` (a paper's tables beside the simulator).
"""

from __future__ import annotations

import sys

from .simulate import SIM_UPDATES, simulate_counts

__all__ = ["add_arguments", "main"]


def add_arguments(parser) -> None:
    """``dflow bench simulate``'s arguments."""
    from .hardware import PRESETS

    parser.add_argument("--model", default="inception3", help="a dflow.models name (default inception3)")
    parser.add_argument("--hardware", default="piz_daint",
                        help=f"a cluster preset: {', '.join(PRESETS)} (default piz_daint)")
    parser.add_argument("--step_time", type=float,
                        help="one device's compute seconds per step (default: the preset's measured "
                             "Inception v3 speed at batch 64, where a paper gives one)")
    parser.add_argument("--batch_size", type=int, default=64, help="per device (default 64)")
    parser.add_argument("--gpus", default="1,2,4,8,16,32,64,128", type=_counts,
                        help="comma-separated device counts (default 1,2,...,128)")
    parser.add_argument("--variable_update", default="best", choices=("best", *SIM_UPDATES),
                        help="one mode, or best: the fastest of parameter_server, distributed_replicated "
                             "and allreduce (default)")
    parser.add_argument("--num_ps", type=int, help="PS tasks (default: the best of 1..workers)")
    parser.add_argument("--ps_strategy", default="greedy", choices=("round_robin", "greedy"),
                        help="variables over the PS tasks (default greedy, as tf_cnn_benchmarks)")
    parser.add_argument("--devices_per_node", type=int, help="default: the preset's")
    parser.add_argument("--async", dest="sync", action="store_false", help="asynchronous PS updates")
    parser.add_argument("--reproduce", choices=("bugliarello2017",),
                        help="the seed's tables 1-3 beside the simulator, its 8-GPU efficiencies and "
                             "seed 000's saturation points")
    parser.add_argument("--systems", type=lambda s: s.split(","),
                        help="--reproduce: only these systems (piz_daint,p2.xlarge,p2.8xlarge)")
    parser.add_argument("--max_gpus", type=int, help="--reproduce: only the rows up to this many GPUs")
    parser.add_argument("--format", default="table", choices=("table", "json"))
    parser.add_argument("--plot", metavar="FILE", action="append",
                        help="images/sec and scaling efficiency against GPUs (.png/.svg; repeatable)")


def _counts(text: str) -> list[int]:
    try:
        counts = [int(n) for n in text.split(",")]
    except ValueError:
        raise ValueError(f"--gpus takes comma-separated integers like 1,2,4,8, got {text!r}") from None
    if min(counts) < 1:
        raise ValueError(f"--gpus counts must be >= 1, got {text!r}")
    return counts



def main(args, echo=print) -> int:
    """Run ``dflow bench simulate``: a table (or JSON) of simulated setups, or a paper's reproduction."""
    import json

    from . import report
    from .hardware import get_hardware
    from .reproduce import efficiencies, format_reproduction, plot_scaling, reproduce, saturation

    try:
        if args.reproduce:
            # minutes of work (rows of 128 GPUs over many PS counts): a line per row on stderr
            rows = reproduce(args.systems, args.max_gpus,
                             echo=lambda line: print(line, file=sys.stderr, flush=True))
            extra = {} if args.systems or args.max_gpus else {"efficiencies": efficiencies(),
                                                             "saturation": saturation()}
        else:
            rows = simulate_counts(args.model, get_hardware(args.hardware), args.gpus, args.step_time,
                                   args.batch_size, args.variable_update, args.num_ps, args.ps_strategy,
                                   args.devices_per_node, args.sync)
            extra = {}
    except ValueError as error:
        echo(f"dflow bench simulate: {error}")
        return 2
    if args.format == "json":
        echo(json.dumps(rows if not extra else rows + [{"check": k, "rows": v} for k, v in extra.items()],
                        indent=1))
    elif args.reproduce:
        echo(format_reproduction(rows))
        for name, table in extra.items():
            echo(f"\n{name}:\n\n" + report.markdown_table(table, list(table[0])))  # Markdown: a blank line
    else:
        echo(report.markdown_table(rows, ["system", "gpus", "workers", "devices_per_node", "variable_update",
                                          "num_ps", "images_per_sec", "scaling_efficiency", "bottleneck",
                                          "utilization", "busiest_nic_bytes_per_step"]))
    if args.plot:
        plot_scaling(rows, args.plot, "dflow bench simulate" + (f" --reproduce {args.reproduce}"
                                                                if args.reproduce else ""))
    return 0
