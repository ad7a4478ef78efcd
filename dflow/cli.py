"""The ``dflow`` command line: ``dflow train``, ``worker``, ``bench``, ``data`` and ``run``.

Each subcommand is one entry of :data:`COMMANDS`: a function adding its
arguments to an ``argparse`` parser, and a function running it.

    $ dflow train --model deep_mnist --dataset digits
    training deep_mnist on digits: 1437 train / 360 test examples of 28x28x1; ...; asynchronous updates ...
    step 20/600  loss 1.9071  images/sec 231.2  (eta 0:02:05)
    ...
    test accuracy: 0.9861 (360 images)
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from .cli_cluster import (
    SYNCHRONOUS_UPDATES,
    add_cluster_arguments,
    add_worker_arguments,
    check_cluster_arguments,
    run_cluster_train,
    run_worker,
)
from .cli_data import store_path
from .data.cli import add_data_arguments, run_data
from .errors import OpError
from .train.program import (
    OPTIMIZERS,
    Terminated,
    build_training_graph,
    evaluate,
    load_data,
    log_scalars,
)

__all__ = ["main", "COMMANDS", "OPTIMIZERS", "DATASETS"]

DATASETS = {"digits": "scikit-learn's 1,797 handwritten 8x8 digits, resized to the model's input",
            "line": "y = 3x + N(0, 1), the data of the seed's Listing 1 (linear_regression only)"}
_STORE_DATASETS = ("cifar10", "mnist", "imagenet")


def main(argv: list[str] | None = None) -> int:
    """Run ``dflow`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    previous = _terminate_as_interrupt()
    try:
        return COMMANDS[args.command].run(args, parser) or 0
    except KeyboardInterrupt as interrupt:
        # checkpoints are renamed into place whole, so an interrupt loses at most the steps
        # since the last one; say so instead of printing a traceback
        terminated = isinstance(interrupt, Terminated)
        print(f"\ndflow {args.command}: {'terminated' if terminated else 'interrupted'}", file=sys.stderr)
        return 143 if terminated else 130
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _terminate_as_interrupt():
    """SIGTERM (how Slurm preempts) raises :class:`Terminated`, so that it stops the run as Ctrl-C
    does (clusters closed, a last checkpoint) instead of killing the process outright; the previous
    handler, or None off the main thread."""
    def terminate(_signum, _frame):
        raise Terminated()

    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, terminate)


class Command(NamedTuple):
    help: str
    add_arguments: Callable
    run: Callable


def _parser() -> argparse.ArgumentParser:
    from . import DFLOW_VERSION, __version__

    parser = argparse.ArgumentParser(prog="dflow", description="dflow: TF 1.x-style graphs on Dask")
    parser.add_argument("--version", action="version",
                        version=f"dflow {DFLOW_VERSION} (TF 1.x API: tf.__version__ is {__version__})")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, command in COMMANDS.items():
        command.add_arguments(subparsers.add_parser(name, help=command.help,
                                                    description=command.help))
    return parser


# ---- dflow train -------------------------------------------------------------------------------
def _add_train_arguments(p: argparse.ArgumentParser) -> None:
    from .models import DATA_FORMATS, MODELS

    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = "models (and their defaults):\n" + "\n".join(
        f"  {spec.name:<18} {spec.description}\n  {'':<18} "
        + ", ".join(f"{k} {v}" for k, v in spec.train_defaults.items())
        for spec in MODELS.values())
    p.add_argument("--model", required=True, choices=list(MODELS))
    p.add_argument("--dataset", default=None,
                   help="digits (the small models' default; linear_regression uses 'line', synthetic "
                        "y = 3x + noise; resnet50 and inception3 'imagenet'), or a store from `dflow data "
                        "prepare`: its path or URL, or NAME for datasets/NAME.zarr")
    p.add_argument("--batch_size", type=int, help="examples per step (default: per model)")
    steps = p.add_mutually_exclusive_group()
    steps.add_argument("--steps", type=int, help="training steps (default: per model)")
    steps.add_argument("--epochs", type=float, help="passes over the training set, instead of --steps")
    p.add_argument("--learning_rate", type=float, help="default: per model (adam 1e-3)")
    p.add_argument("--optimizer", choices=OPTIMIZERS, help="default: per model")
    p.add_argument("--momentum", type=float, default=0.9, help="for --optimizer momentum")
    p.add_argument("--keep_prob", type=float, help="dropout keep probability (deep_mnist: 0.5)")
    p.add_argument("--data_format", choices=DATA_FORMATS, default="NHWC",
                   help="layout the convolutions compute in (NCHW suits GPUs)")
    p.add_argument("--seed", type=int, default=0, help="seeds initial weights, shuffling, dropout")
    p.add_argument("--log_every", type=int, default=20, help="steps between progress lines")
    p.add_argument("--logdir", help="write loss, images/sec and test accuracy here for TensorBoard")
    p.add_argument("--checkpoint_dir", help="save checkpoints here; resume from the latest one")
    p.add_argument("--checkpoint_every", type=int, default=100,
                   help="steps between checkpoints (with --checkpoint_dir)")
    add_cluster_arguments(p)


def _settings(args, parser, spec) -> dict:
    """The run's settings: the command line where given, else the model's defaults."""
    settings = dict(spec.train_defaults)
    for key in ("dataset", "batch_size", "learning_rate", "optimizer", "keep_prob"):
        if getattr(args, key) is not None:
            settings[key] = getattr(args, key)
    dataset = settings["dataset"]
    if dataset in DATASETS:
        if dataset != spec.train_defaults["dataset"]:
            parser.error(f"model {spec.name} trains on the {spec.train_defaults['dataset']!r} "
                         f"dataset, not {dataset!r}")
    elif store_path(dataset) is None:
        parser.error(f"dataset {dataset!r} is neither {' nor '.join(map(repr, DATASETS))} nor a prepared "
                     f"store: prepare it with `dflow data prepare NAME --source FILE` (which writes "
                     f"datasets/NAME.zarr; {', '.join(_STORE_DATASETS)}, ...) or pass the store's path")
    elif spec.num_classes is None:
        parser.error(f"model {spec.name} is a regression: it trains on 'line', not an image store")
    _check_numbers(args, parser, settings)
    return settings


def _check_numbers(args, parser, settings) -> None:
    for key in ("batch_size", "log_every", "checkpoint_every"):
        value = settings[key] if key in settings else getattr(args, key)
        if value < 1:
            parser.error(f"--{key} must be at least 1, got {value}")
    if settings["learning_rate"] <= 0:
        parser.error(f"--learning_rate must be positive, got {settings['learning_rate']}")
    if "keep_prob" in settings and not 0 < settings["keep_prob"] <= 1:
        parser.error(f"--keep_prob must be in (0, 1], got {settings['keep_prob']}")


def _steps(args, parser, settings, n_train: int) -> int:
    if settings["batch_size"] > n_train:
        parser.error(f"--batch_size {settings['batch_size']} is larger than the {n_train} "
                     "training examples")
    if args.epochs is not None:
        if args.epochs <= 0:
            parser.error(f"--epochs must be positive, got {args.epochs}")
        return max(1, math.ceil(args.epochs * (n_train // settings["batch_size"])))
    steps = args.steps if args.steps is not None else settings["steps"]
    if steps < 1:
        parser.error(f"--steps must be at least 1, got {steps}")
    return steps


def run_train(args, parser) -> int:
    """``dflow train``: train a model, printing progress, then evaluate it on the test split."""
    import dflow as tf

    from .models import get_model

    spec = get_model(args.model)
    settings = _settings(args, parser, spec)
    try:
        data = load_data(settings["dataset"], spec)
    except (ValueError, OpError) as error:  # a store that is not one, or not for this model
        parser.error(str(error))
    steps = _steps(args, parser, settings, data.num_train)
    check_cluster_arguments(args, parser)
    _describe(spec, settings, data, steps, args)

    def report(total: float, n: int, weights: list[float]) -> None:
        _report(spec, total, n, weights)
        log_scalars(args.logdir, steps, **{"accuracy" if spec.num_classes else "mse": total / n})

    if not args.local:
        return run_cluster_train(args, settings, steps, report)
    graph = tf.Graph()
    with graph.as_default():
        tf.set_random_seed(args.seed)
        g = build_training_graph(spec, settings, args.data_format, args.momentum)
        saver = tf.train.Saver() if args.checkpoint_dir else None
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            start = _restore(tf, saver, sess, args.checkpoint_dir, g.global_step)
            batches = data.train_batches(settings["batch_size"], seed=args.seed + start)
            try:
                _train_loop(sess, g, batches, start, steps, settings, args, saver)
            except FloatingPointError as e:
                print(f"dflow train: error: {e}", file=sys.stderr)
                return 1
            report(*evaluate(sess, g, data, spec.num_classes is None))
    return 0


def _describe(spec, settings, data, steps, args) -> None:
    shape = "x".join(str(d) for d in spec.input_shape) or "scalar"
    layout = f", {args.data_format}" if spec.convolutional else ""
    print(f"training {spec.name} on {settings['dataset']}: {data.num_train} train / "
          f"{data.num_test} test examples of {shape}; {settings['optimizer']} "
          f"lr {settings['learning_rate']:g}, batch {settings['batch_size']}, {steps} steps{layout}; "
          f"{_update_mode(args)}", flush=True)


def _update_mode(args) -> str:
    """How the replicas update the variables, and whether that is the default."""
    if args.local:
        return "in this process (--local)"
    if args.variable_update in SYNCHRONOUS_UPDATES:
        return f"synchronous updates ({args.variable_update} always is)"
    if args.sync:
        return f"synchronous updates (--sync, {args.variable_update})"
    return f"asynchronous updates (the default; --sync for synchronous, {args.variable_update})"


def _restore(tf, saver, sess, checkpoint_dir, global_step) -> int:
    """The step to start from: the latest checkpoint's, or 0."""
    if saver is None:
        return 0
    latest = tf.train.latest_checkpoint(checkpoint_dir)
    if latest is None:
        return 0
    saver.restore(sess, latest)
    step = int(sess.run(global_step))
    print(f"restored {latest} (step {step})", flush=True)
    return step


def _train_loop(sess, g, batches, start, steps, settings, args, saver) -> None:
    batch_size = settings["batch_size"]
    begin = last = time.perf_counter()
    losses = []
    for step in range(start + 1, steps + 1):
        x, y = next(batches)
        feed = {g.inputs: x, g.targets: y}
        if g.keep_prob is not None:
            feed[g.keep_prob] = settings["keep_prob"]
        _, loss = sess.run([g.train_op, g.loss], feed)
        losses.append(float(loss))
        if not math.isfinite(losses[-1]):
            raise FloatingPointError(f"the loss is {losses[-1]} at step {step}; "
                                     "try a lower --learning_rate")
        if step % args.log_every == 0 or step == steps:
            now = time.perf_counter()
            rate = len(losses) * batch_size / (now - last)
            eta = (now - begin) / (step - start) * (steps - step)
            print(f"step {step}/{steps}  loss {np.mean(losses):.4f}  images/sec {rate:.1f}  "
                  f"(eta {datetime.timedelta(seconds=round(eta))})", flush=True)
            log_scalars(args.logdir, step, loss=np.mean(losses), images_per_sec=rate)
            last, losses = now, []
        if saver is not None and (step % args.checkpoint_every == 0 or step == steps):
            _save(saver, sess, args.checkpoint_dir, step)
    elapsed = time.perf_counter() - begin
    if steps > start:
        print(f"trained {steps - start} steps in {datetime.timedelta(seconds=round(elapsed))} "
              f"({(steps - start) * batch_size / elapsed:.1f} images/sec)", flush=True)


def _save(saver, sess, checkpoint_dir: str, step: int) -> None:
    os.makedirs(checkpoint_dir, exist_ok=True)
    saver.save(sess, os.path.join(checkpoint_dir, "model.ckpt"), global_step=step)


def _report(spec, total: float, n: int, weights: list[float]) -> None:
    if spec.num_classes is not None:
        print(f"test accuracy: {total / n:.4f} ({n} images)", flush=True)
        return
    weight, bias = weights
    print(f"learned weight {weight:.4f}  bias {bias:.4f}  (data: y = 3x + N(0, 1))")
    print(f"test mse: {total / n:.4f} ({n} examples)", flush=True)


# ---- dflow bench ---------------------------------------------------------------------------------
def _add_bench_arguments(p: argparse.ArgumentParser) -> None:
    from .bench.cli import add_arguments

    add_arguments(p)


def run_bench(args, parser) -> int:
    from .bench.cli import run

    return run(args, parser)


# ---- dflow run ---------------------------------------------------------------------------------
def _add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("script", help="a Python file written for TF 1.x (or TF 2's tensorflow.compat.v1)")
    p.add_argument("script_args", nargs=argparse.REMAINDER, help="its own arguments")


def _run_script(args, parser) -> int:
    from .scripts import alias_tensorflow, run_script

    if not os.path.isfile(args.script):  # (checked here: whatever the script raises is its own)
        parser.error(f"{args.script}: no such script")
    alias_tensorflow()
    try:
        run_script(args.script, args.script_args)
    except SystemExit as exit:  # the script's own sys.exit / tf.app.run
        return exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
    return 0


COMMANDS: dict[str, Command] = {
    "train": Command("train a model on a dataset, then report its test accuracy (on a local cluster of "
                     "1 PS + 2 workers with asynchronous updates unless --sync or --local)",
                     _add_train_arguments, run_train),
    "bench": Command("measure training throughput (images/sec) against references (synchronous updates "
                     "unless --async)", _add_bench_arguments, run_bench),
    "worker": Command("start a Dask worker that holds a dflow role (ps/0, worker/1) of a cluster",
                      add_worker_arguments, run_worker),
    "data": Command("prepare datasets as chunked Zarr stores, describe them, benchmark reading",
                    add_data_arguments, run_data),
    "run": Command("run a TF 1.x script unchanged on dflow: its `import tensorflow` imports dflow",
                   _add_run_arguments, _run_script),
}


if __name__ == "__main__":
    sys.exit(main())
