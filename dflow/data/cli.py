"""``dflow data``: ``prepare`` a store from a dataset's original files, ``info`` on one, ``bench`` reading.

    $ dflow data prepare cifar10 --source ~/Downloads/cifar-10-python.tar.gz
    $ dflow data prepare imagenet --source /data/ILSVRC2012 --size 299 --scheduler tcp://head:8786
    $ dflow data prepare synthetic --shape 32,32,3 --classes 10 --count 50000
    $ dflow data prepare digits               # 28x28x1, as `dflow train --dataset digits` resizes them
    $ dflow data info cifar10                 # datasets/cifar10.zarr, or a path or URL
    $ dflow data verify cifar10               # read every chunk back, checked
    $ dflow data bench
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["add_data_arguments", "run_data"]

_DEFAULT_SIZE = {"imagenet": 224, "digits": 28}  # --size: the models' input side


def _shape(text: str) -> tuple:
    try:
        return tuple(int(d) for d in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers like 32,32,3, got {text!r}") from None


def add_data_arguments(p: argparse.ArgumentParser) -> None:
    from .prepare import CONVERTERS

    actions = p.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    prepare = actions.add_parser("prepare", help="convert a dataset to a chunked Zarr store",
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="datasets:\n" + "\n".join(f"  {name:<10} {text}"
                                                                  for name, (_, text) in CONVERTERS.items()))
    prepare.add_argument("name", choices=list(CONVERTERS))
    prepare.add_argument("--source", help="the original file or directory (never downloaded)")
    prepare.add_argument("--out", help="the store to write (default datasets/NAME.zarr)")
    prepare.add_argument("--chunk_examples", type=int, help="examples per chunk (default ~1 MiB)")
    prepare.add_argument("--overwrite", action="store_true", help="replace an existing store")
    prepare.add_argument("--scheduler", help="a Dask scheduler address to run the conversion on "
                                             "(default: threads in this process)")
    prepare.add_argument("--size", type=int,
                         help=f"imagenet: 224 or 299 (default {_DEFAULT_SIZE['imagenet']}); digits: the side "
                              f"they are resized to (default {_DEFAULT_SIZE['digits']}, the MNIST models' "
                              "input; 8: the original pixels)")
    prepare.add_argument("--shape", type=_shape, default=(32, 32, 3), help="synthetic: H,W,C")
    prepare.add_argument("--classes", type=int, default=10, help="synthetic: number of classes")
    prepare.add_argument("--count", type=int, default=50_000, help="synthetic: training examples")
    prepare.add_argument("--test_count", type=int, default=10_000, help="synthetic: test examples")
    prepare.add_argument("--seed", type=int, default=0, help="synthetic: the generator's seed")
    info = actions.add_parser("info", help="describe a store")
    info.add_argument("store", help="NAME (datasets/NAME.zarr, as `dflow train --dataset NAME` reads) "
                                    "or a store's path or URL")
    verify = actions.add_parser("verify", help="read every chunk of a store, checked: exit 1 naming each "
                                               "damaged chunk")
    verify.add_argument("store", help="NAME (datasets/NAME.zarr) or a store's path or URL")
    bench = actions.add_parser("bench", help="reader throughput and the CIFAR-10 step's I/O overhead")
    bench.add_argument("--store", help="a CIFAR-shaped store to use (default: generate 50,000 images "
                                       "in a temporary directory)")
    bench.add_argument("--steps", type=int, default=200, help="timed training steps of each kind")
    bench.add_argument("--output", help="write the results as JSON here")


def _options(args) -> dict:
    if args.name in _DEFAULT_SIZE:
        return {"size": _DEFAULT_SIZE[args.name] if args.size is None else args.size}
    if args.name == "synthetic":
        return {"image_shape": args.shape, "num_classes": args.classes, "train_count": args.count,
                "test_count": args.test_count, "seed": args.seed}
    return {}


def run_data(args, parser) -> int:
    from ..errors import OpError
    from .sources import SourceError

    try:
        return _run(args)
    except (SourceError, OpError, FileExistsError, FileNotFoundError, ValueError) as error:
        print(f"dflow data {args.data_command}: error: {error}", file=sys.stderr)
        return 1


def _run(args) -> int:
    from .store import describe

    if args.data_command == "info":
        print(describe(_existing_store(args.store)))
    elif args.data_command == "verify":
        return _verify(_existing_store(args.store))
    elif args.data_command == "prepare":
        out = _prepare(args)
        print(f"wrote {out}")
        print(describe(out))
    else:
        from ..bench import data as bench

        bench.run(store=args.store, steps=args.steps, output=args.output,
                  echo=lambda line: print(line, flush=True))
    return 0


def _verify(path: str) -> int:
    import time

    from .store import verify_store

    begin = time.perf_counter()
    count, damage = verify_store(path)
    for message in damage:
        print(f"dflow data verify: {message}", file=sys.stderr)
    if damage:
        print(f"{path}: {len(damage)} of {count} chunks damaged", file=sys.stderr)
        return 1
    print(f"{path}: {count} chunks read back as written ({time.perf_counter() - begin:.1f} s)")
    return 0


def _existing_store(store: str) -> str:
    """The store's path: ``store`` itself, or ``datasets/NAME.zarr`` (what ``--dataset NAME`` reads)."""
    from ..cli_data import store_path
    from .prepare import CONVERTERS

    path = store_path(store)
    if path is None:
        name = store if store in CONVERTERS else "NAME"
        raise FileNotFoundError(f"no store {store!r}: it is not a path, and datasets/{store}.zarr does not "
                                f"exist here; prepare it with `dflow data prepare {name}` or give the "
                                "store's path")
    return path


def _prepare(args) -> str:
    from .prepare import prepare

    echo = lambda line: print(line, flush=True)  # noqa: E731
    if args.scheduler is None:
        return prepare(args.name, args.source, args.out, chunk_examples=args.chunk_examples,
                       overwrite=args.overwrite, echo=echo, **_options(args))
    from distributed import Client

    with Client(args.scheduler) as client:
        return prepare(args.name, args.source, args.out, chunk_examples=args.chunk_examples,
                       overwrite=args.overwrite, client=client, echo=echo, **_options(args))
