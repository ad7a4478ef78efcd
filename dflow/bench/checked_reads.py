"""What checking every chunk costs a store's reader: a checked store against an unchecked copy.

The same images are written twice: as ``dflow data prepare`` writes them now (CRC-32C codec,
per-chunk digests, :mod:`dflow.checked_arrays`) and as it wrote them before (Zstd only, no
digests: :func:`unchecked_copy`), which the reader reads unchecked, as it did before. Both are read
in interleaved rounds in this process, so a busy shared machine slows both alike:

- ``chunks``: every chunk of ``train/images`` and ``train/labels`` in a shuffled order, MB/s of
  decoded images (the reading alone: decoding plus checking), the two taking turns chunk by chunk;
- ``epoch``: one shuffled epoch of batches of 100 through :class:`~dflow.data.Dataset` in the
  consumer's thread (``prefetch=0``, a shuffle pool of 1,000 so that the reads spread over the
  batches), images/sec (what a training step waits for), the two taking turns batch by batch.

The table gives each one's median rate and the median of the rounds' ratios checked / unchecked
(1.0: checking is free).

    python -m dflow.bench.checked_reads --count 20000 --rounds 5
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time

import numpy as np
import zarr

__all__ = ["unchecked_copy", "compare", "main"]


def unchecked_copy(store: str, out: str) -> str:
    """Copy ``store`` to ``out`` as dflow wrote stores before it checked chunks: Zstd level 3, no
    CRC-32C, no digests, all-fill chunks left out. Returns ``out``."""
    from zarr.codecs import BytesCodec, ZstdCodec

    source = zarr.open_group(store, mode="r")
    target = zarr.open_group(out, mode="w")
    for split in source.attrs["splits"]:
        group = target.create_group(split, attributes=dict(source[split].attrs))
        for name in ("images", "labels"):
            array = source[f"{split}/{name}"]
            copy = group.create_array(name, shape=array.shape, dtype=array.dtype, chunks=array.chunks,
                                      fill_value=array.fill_value, serializer=BytesCodec(),
                                      compressors=[ZstdCodec(level=3)])
            copy[...] = array[...]
    target.attrs.update(dict(source.attrs))
    return out


def _chunk_pass(readers: dict, seed: int) -> dict:
    """MB/s of decoded images of each kind over every chunk (images and labels), in a shuffled
    order; the kinds take turns chunk by chunk, so that the machine's drift falls on both alike."""
    order = np.random.default_rng(seed).permutation(readers["checked"][0].num_chunks)
    seconds = dict.fromkeys(readers, 0.0)
    decoded = 0
    for position, index in enumerate(order):
        for kind in list(readers)[::1 if position % 2 else -1]:
            begin = time.perf_counter()
            images = readers[kind][0].read_chunk(int(index))
            readers[kind][1].read_chunk(int(index))
            seconds[kind] += time.perf_counter() - begin
        decoded += images.nbytes
    return {kind: decoded / 2 ** 20 / spent for kind, spent in seconds.items()}


def _epoch_pass(stores: dict, seed: int) -> dict:
    """images/sec of one shuffled epoch of each kind, the two read in lockstep (batch by batch,
    the order alternating), so that the machine's drift falls on both alike."""
    from dflow.data import Dataset

    readers = {kind: Dataset(path, "train", 100, num_epochs=1, prefetch=0, seed=seed, shuffle_buffer=1000)
               for kind, path in stores.items()}  # a small pool: reads spread over the batches
    seconds, count = dict.fromkeys(stores, 0.0), dict.fromkeys(stores, 0)
    done, step = False, 0
    while not done:
        for kind in list(stores)[::1 if step % 2 else -1]:
            begin = time.perf_counter()
            batch = next(readers[kind], None)
            seconds[kind] += time.perf_counter() - begin
            done = done or batch is None
            count[kind] += 0 if batch is None else len(batch[1])
        step += 1
    return {kind: count[kind] / seconds[kind] for kind in stores}


def compare(checked: str, unchecked: str, rounds: int = 5) -> dict:
    """``{"chunks": {...}, "epoch": {...}}``, each with the median rate of ``checked`` and of
    ``unchecked``, every round's rates, and ``ratio``: the median of the rounds' checked / unchecked."""
    from dflow.data.store import chunk_reader, open_store

    stores = {"checked": checked, "unchecked": unchecked}
    readers = {}
    for kind, path in stores.items():
        root = open_store(path)
        readers[kind] = [chunk_reader(path, root, f"train/{name}") for name in ("images", "labels")]
    rounds_of: dict = {"chunks": [], "epoch": []}
    for round_index in range(rounds):
        rounds_of["chunks"].append(_chunk_pass(readers, round_index))
        rounds_of["epoch"].append(_epoch_pass(stores, round_index))
    result = {}
    for measure, samples in rounds_of.items():
        result[measure] = {kind: statistics.median(s[kind] for s in samples) for kind in stores}
        result[measure]["rounds"] = samples
        result[measure]["ratio"] = statistics.median(s["checked"] / s["unchecked"] for s in samples)
    return result


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m dflow.bench.checked_reads",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=20_000, help="32x32x3 training images (synthetic)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", help="where to write the two stores (default: a temporary directory)")
    args = parser.parse_args(argv)
    from dflow.data import prepare

    logging.getLogger("dflow").setLevel(logging.ERROR)  # the unchecked copy's warning is expected
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        checked = prepare("synthetic", out=os.path.join(directory, "checked.zarr"), echo=None,
                          image_shape=(32, 32, 3), train_count=args.count, test_count=0)
        unchecked = unchecked_copy(checked, os.path.join(directory, "unchecked.zarr"))
        result = compare(checked, unchecked, args.rounds)
    print(f"{args.count} images 32x32x3, {args.rounds} interleaved rounds (medians)")
    for measure, unit in (("chunks", "MB/s decoded"), ("epoch", "images/s")):
        row = result[measure]
        ratios = sorted(r["checked"] / r["unchecked"] for r in row["rounds"])
        print(f"  {measure:<7} unchecked {row['unchecked']:10.1f} {unit}   checked {row['checked']:10.1f} "
              f"{unit}   checked/unchecked {row['ratio']:.3f} (rounds {ratios[0]:.2f}-{ratios[-1]:.2f})")


if __name__ == "__main__":
    main()
