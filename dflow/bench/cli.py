"""``dflow bench``: its arguments and what runs.

    $ dflow bench --model cifar10 --batch_size 64 --num_workers 2 --num_ps 1 --repeats 3
    $ dflow bench --model mnist_dnn --variable_update allreduce --num_workers 2 --num_ps 0
    $ dflow bench sweep tiny                  # a seed's experiment as a grid of runs
    $ dflow bench advise --sweep bench_results/tiny.jsonl
    $ dflow bench simulate --hardware p2.xlarge --gpus 8,64   # a cluster simulated from dflow's plans
    $ dflow bench modes --model cifar10 --num_workers 2 --techniques
    $ dflow bench script --calls 100 mnist_deep.py   # a TF 1.x script on dflow and on TensorFlow
    $ dflow bench --local                     # the single-process benchmark against PyTorch
    $ dflow bench --distributed               # local Session vs 1 PS + 1 worker

Without ``--local``/``--distributed`` or a sub-command, one configuration runs in the
style of tf_cnn_benchmarks (:func:`dflow.bench.harness.run_benchmark`); its flags keep
tf_cnn_benchmarks' names where it had one.
"""

from __future__ import annotations

import argparse
import sys

from .harness import BENCH_MODELS, CLUSTERS, DEFAULT_SETTINGS, NETWORKS, OPTIMIZERS

__all__ = ["add_arguments", "run", "SUBCOMMANDS"]

#: ``dflow bench NAME``: (help, module of dflow.bench with add_arguments(parser) and main(args))
SUBCOMMANDS = {
    "sweep": ("run a seed's experiment (a preset) as a grid of benchmark runs, then its table and plot",
              "sweeps"),
    "modes": ("the variable-update modes side by side: images/sec and bytes per worker per step "
              "against what each mode must send", "modes"),
    "simulate": ("simulate distributed training steps on a cluster preset (Piz Daint, AWS p2, DGX, H100) "
                 "from dflow's own plans; --reproduce bugliarello2017 checks it against the seed's tables",
                 "simulate_cli"),
    "script": ("time a TF 1.x script's training steps, unchanged, on dflow and on TensorFlow (compat.v1): "
               "fresh processes, interleaved rounds, the ratio per round", "script"),
    "advise": ("predict images/sec for N workers x M PS from a step time and the variables' bytes, "
               "and advise a PS count and placement", "advise"),
}
# the harness's settings whose flags (each named as its setting) --local and --distributed refuse:
# all but the step counts and the batch size, which they take too
_HARNESS_ONLY = tuple(key for key in DEFAULT_SETTINGS
                      if key not in ("num_warmup_batches", "num_batches", "batch_size"))
_LEGACY_DEFAULTS = {"batch_size": 100, "num_batches": 20}  # --local / --distributed, as before


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Every ``dflow bench`` argument: the harness's, --local's and --distributed's, the sub-commands."""
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = (f"models: {', '.join(BENCH_MODELS)}\n"
                "examples:\n  dflow bench --model cifar10 --batch_size 64 --num_workers 2 --num_ps 1\n"
                "  dflow bench --model mnist_dnn --variable_update allreduce --num_workers 2 --num_ps 0\n"
                "  dflow bench sweep tiny\n  dflow bench --local")
    _add_legacy_arguments(p)
    _add_harness_arguments(p)
    commands = p.add_subparsers(dest="bench_command", metavar="{" + ",".join(SUBCOMMANDS) + "}",
                                required=False, title="sub-commands (instead of one run)")
    for name, (help_text, module) in SUBCOMMANDS.items():
        _module(module).add_arguments(commands.add_parser(name, help=help_text, description=help_text))


def _module(name: str):
    import importlib

    return importlib.import_module(f"{__package__}.{name}")


def _add_harness_arguments(p: argparse.ArgumentParser) -> None:
    from ..distributed.collective import ALGORITHMS
    from ..models import DATA_FORMATS
    from ..train.variable_update import PS_STRATEGIES, VARIABLE_UPDATES

    d = DEFAULT_SETTINGS
    run = p.add_argument_group("one configuration, as tf_cnn_benchmarks (the default)")
    run.add_argument("--model", help=f"{', '.join(BENCH_MODELS)} (default {d['model']})")
    # --batch_size is --distributed's too (added with its arguments): one flag, two defaults
    batch_size = next(a for a in p._actions if a.dest == "batch_size")
    batch_size.help = "images per step per worker device (default: the model's; --distributed: 100)"
    run.add_argument("--num_workers", type=int, help=f"worker nodes (default {d['num_workers']})")
    run.add_argument("--devices_per_node", type=int,
                     help=f"worker devices per node, one replica each (default {d['devices_per_node']})")
    run.add_argument("--num_ps", type=int, help=f"parameter-server tasks (default {d['num_ps']})")
    run.add_argument("--variable_update", choices=VARIABLE_UPDATES,
                     help=f"where variables live and how they are updated (default {d['variable_update']})")
    sync = run.add_mutually_exclusive_group()
    sync.add_argument("--sync", dest="sync", action="store_const", const=True,
                      help="synchronous updates (the default)")
    sync.add_argument("--async", dest="sync", action="store_const", const=False,
                      help="asynchronous updates (parameter_server, distributed_replicated, independent)")
    run.add_argument("--data_dir", help="a store from `dflow data prepare` (default: synthetic data)")
    run.add_argument("--data_format", choices=DATA_FORMATS, help="convolution layout (default NHWC)")
    run.add_argument("--repeats", type=int, help=f"runs averaged (default {d['repeats']})")
    run.add_argument("--cluster", help=f"{' | '.join(CLUSTERS)} | a scheduler ADDRESS (default local)")
    from ..cli_cluster import add_tls_arguments

    add_tls_arguments(run)  # --cluster tls://HOST:PORT
    run.add_argument("--network", choices=NETWORKS,
                     help="shape each role's link on this machine (root; default none)")
    run.add_argument("--ps_strategy", choices=PS_STRATEGIES,
                     help="variables over the PS tasks: round_robin (default) or greedy by bytes")
    run.add_argument("--optimizer", choices=tuple(OPTIMIZERS), help="default sgd")
    run.add_argument("--eval_accuracy", action="store_const", const=True,
                     help="after the last repeat, the chief's test accuracy (real data only)")
    run.add_argument("--trace", metavar="FILE", help="Chrome trace of the last repeat's timed steps")
    collective = p.add_argument_group("the allreduce (replicated, distributed_replicated, allreduce)")
    collective.add_argument("--fusion_bytes", type=int,
                            help=f"gradients packed per allreduce, in bytes; 0: one per gradient "
                                 f"(default {d['fusion_bytes']})")
    collective.add_argument("--no_overlap", dest="overlap", action="store_const", const=False,
                            help="start the allreduce after the whole backward pass, not per bucket")
    collective.add_argument("--compact_gradient_transfer", action="store_const", const=True,
                            help="send gradients as float16 (half the bytes)")
    collective.add_argument("--allreduce_algorithm", choices=ALGORITHMS,
                            help="ring, tree (recursive doubling) or auto: tree below 1 MiB (default)")


def _add_legacy_arguments(p: argparse.ArgumentParser) -> None:
    from . import distributed

    legacy = p.add_argument_group("the fixed benchmarks (instead of one configuration)")
    mode = legacy.add_mutually_exclusive_group()
    mode.add_argument("--local", action="store_true",
                      help="the single-process CPU benchmark: batch sizes 1..400, against PyTorch")
    mode.add_argument("--distributed", action="store_true",
                      help="CIFAR-10 batch 100: local Session vs 1 PS + 1 worker (images/sec, ratio, "
                           "bytes per link), and the per-step overhead of 1 PS + 2 workers")
    legacy.add_argument("--batch_sizes", type=lambda s: [int(b) for b in s.split(",")],
                        default=None,
                        help="--local: comma-separated (default: the seed's, 1,10,50,100,200,400)")
    legacy.add_argument("--no_torch", action="store_true", help="--local: skip the PyTorch comparison")
    legacy.add_argument("--peers", action="store_true",
                        help="--local: dflow, PyTorch and TensorFlow compat.v1 (those installed) in "
                             "interleaved rounds, images/sec with spread and ratios (default batch "
                             "sizes 1,10,100); --distributed: TensorFlow's own local and 1 PS + 1 "
                             "worker steps beside dflow's")
    legacy.add_argument("--lrn", action=argparse.BooleanOptionalAction, default=None,
                        help="--local --peers, the cifar10 model only: with its two LRN layers (default) "
                             "or without")
    legacy.add_argument("--memory", action="store_true",
                        help="--local --peers: also each framework's peak step memory at each batch size "
                             "(MiB, a fresh process per framework and batch size) and dflow's ratio")
    legacy.add_argument("--device", choices=("cpu", "gpu"), default=None,
                        help="--local --peers: where every framework computes (default cpu; gpu: "
                             "dflow and TensorFlow under tf.device('/gpu:0'), PyTorch on CUDA)")
    legacy.add_argument("--rounds", type=int, default=3, help="--local --peers: timed rounds (default 3)")
    legacy.add_argument("--baseline", metavar="PATH",
                        help="--local --peers: also time the dflow of this source tree (before/after)")
    distributed.add_arguments(legacy, common=False)  # --batch_size --block_steps --overhead_steps --input
    p.add_argument("--num_warmup_batches", type=int, default=DEFAULT_SETTINGS["num_warmup_batches"])
    p.add_argument("--num_batches", type=int,
                   help=f"timed steps (default {DEFAULT_SETTINGS['num_batches']}; "
                        f"--local/--distributed: {_LEGACY_DEFAULTS['num_batches']})")
    p.add_argument("--output", help="append the run's record as a JSON line here (--local/--distributed: "
                                    "write their results as JSON)")
    p.set_defaults(batch_size=None, sync=None)  # None: the harness's or the model's, or the legacy one


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run what the arguments ask for; the exit status."""
    command = getattr(args, "bench_command", None)
    if command is not None:
        return _module(SUBCOMMANDS[command][1]).main(args)
    if args.peers and not (args.local or args.distributed):
        parser.error("--peers compares frameworks in the fixed benchmarks: add --local or --distributed")
    if not args.peers and (args.memory or args.lrn is not None or args.device):
        flag = "--memory" if args.memory else "--device" if args.device else "--lrn/--no-lrn"
        parser.error(f"{flag} belongs to --local --peers: add --local --peers")
    if args.local or args.distributed:
        return _run_legacy(args, parser)
    return _run_harness(args, parser)


def _update_mode(args: argparse.Namespace) -> str:
    if args.sync is None:
        return "synchronous updates (the default; --async for asynchronous)"
    return "synchronous updates (--sync)" if args.sync else "asynchronous updates (--async)"


def _run_legacy(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    # --peers races the frameworks on one of its own models (--model)
    harness_only = [key for key in _HARNESS_ONLY if not (args.peers and key == "model")]
    given = [f"--{key}" for key in harness_only if getattr(args, key) is not None]
    given += ["--trace"] if args.trace else []
    if given:
        parser.error(f"--local and --distributed are fixed benchmarks; {', '.join(given)} set one run "
                     "of the harness (leave out --local/--distributed for it)")
    for key, default in _LEGACY_DEFAULTS.items():
        if getattr(args, key) is None:
            setattr(args, key, default)
    if args.distributed:
        from . import distributed

        return distributed.run(args)
    if args.peers:
        from . import peers

        try:
            results = peers.run(args.batch_sizes or (1, 10, 100), warmup=args.num_warmup_batches,
                                steps=args.num_batches, rounds=args.rounds, lrn=args.lrn,
                                baseline=args.baseline, echo=lambda line: print(line, flush=True),
                                model=args.model or "cifar10", memory=args.memory,
                                device=args.device or "cpu")
        except ValueError as error:  # a combination it cannot run, said before anything starts
            parser.error(str(error))
        from .local import write_results

        write_results(results, args.output, print)
        return 0
    from . import local

    local.run(args.batch_sizes or local.BATCH_SIZES, warmup=args.num_warmup_batches, steps=args.num_batches,
              output=args.output, torch=False if args.no_torch else None,
              echo=lambda line: print(line, flush=True))
    return 0


def _run_harness(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from ..cli_cluster import tls_configured
    from ..errors import OpError
    from .harness import SettingsError, append_record, resolve_settings, run_benchmark
    from .network import NetworkError

    tls = tls_configured(args, parser)  # the client of --cluster tls://... uses the --tls-* options
    settings = {key: getattr(args, key) for key in DEFAULT_SETTINGS if getattr(args, key) is not None}
    try:
        resolved = resolve_settings(settings)
    except SettingsError as error:
        parser.error(str(error))
    print(f"dflow bench: {resolved['model']}, {resolved['variable_update']}, {_update_mode(args)}",
          flush=True)
    try:
        with tls:
            record = run_benchmark(settings, echo=lambda line: print(line, flush=True), trace=args.trace)
    except (SettingsError, NetworkError) as error:  # the cluster it got cannot run the settings
        print(f"dflow bench: error: {error}", file=sys.stderr)
        return 1
    except (OSError, ValueError, RuntimeError, OpError) as error:  # raised in a replica
        print(f"dflow bench: error on the cluster: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    if args.output:
        append_record(args.output, record)
        print(f"record appended to {args.output}", flush=True)
    return 0
