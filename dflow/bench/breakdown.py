"""Where a training step's time goes: ms per op type, GFLOP/s per convolution.

    python -m dflow.bench.breakdown --batch_size 100 --steps 5 [--no-lrn] [--device gpu]
        [--model cifar10|deep_mnist|mnist_dnn]

Runs the step's planned kernels one by one with a timer around each (the plan of
``Session.run``, so the kernels and their order are the engine's; each value is dropped
after its last use, as the executor drops it, so the allocator reuses memory as in a
step), and sets each
convolution's rate beside this machine's SGEMM rate, measured with a NumPy matmul of
the same ``(M, K) x (K, N)`` sizes as the layer's im2col product and of 2048^3. Prints
the CPU's vector flags too (AVX2, AVX-512): they decide BLAS's peak. With ``--device gpu``
the kernels run on CuPy, each timed to the end of its GPU work, against CuPy's SGEMM.
``docs/kernels.md`` holds runs of it.
"""

from __future__ import annotations

import argparse
import collections
import time

import numpy

__all__ = ["cpu_flags", "sgemm_gflops", "breakdown", "main"]

# (the fused ones: the input and the filter or its sizes come first, as in the plain ones)
_CONVS = ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "_FusedConv2DBiasRelu",
          "_Conv2DBackpropFilterWithBias")


def cpu_flags() -> list[str]:
    """The SIMD flags of this CPU that BLAS kernels use, from /proc/cpuinfo (Linux)."""
    wanted = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16")
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return []
    return [flag for flag in wanted if flag in flags]


def _best_seconds(fn, repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def sgemm_gflops(m: int, k: int, n: int, repeats: int = 5, xp=None) -> float:
    """GFLOP/s of a float32 matmul ``(m, k) @ (k, n)`` on ``xp`` (NumPy's by default; the
    best of ``repeats``, each to the end of its device work)."""
    from ..runtime.devices import numpy_namespace, synchronize

    xp = xp or numpy_namespace
    rng = numpy.random.default_rng(0)
    a = xp.asarray(rng.standard_normal((m, k), dtype=numpy.float32))
    b = xp.asarray(rng.standard_normal((k, n), dtype=numpy.float32))

    def product():
        a @ b
        synchronize(xp)

    return 2 * m * k * n / _best_seconds(product, repeats) / 1e9


def breakdown(batch_size: int = 100, steps: int = 5, lrn: bool = True, device: str = "cpu",
              model: str = "cifar10") -> dict:
    """ms per op type per step and, per convolution, its ms and GFLOP/s against SGEMM's, on the
    ``device`` ("cpu", or "gpu": CuPy)."""
    import dflow
    from dflow.runtime.devices import gpu_namespace, numpy_namespace, synchronize, to_namespace
    from dflow.runtime.executor import run_op

    from .peers import graph_session

    xp = numpy_namespace if device == "cpu" else gpu_namespace()
    if xp is None:
        raise ValueError("--device gpu: dflow finds no GPU here (it computes on GPUs through CuPy)")
    session, train_op, feeds = graph_session(dflow, batch_size, lrn, model=model, device=device)
    session.run(train_op, feeds)
    plan = session.runner.plans.values()[-1].schedule
    nodes = [plan.nodes[name] for name in session.last_run_stats.order]
    fed = {tensor.name: to_namespace(numpy.asarray(value), xp) for tensor, value in feeds.items()}
    last_use = {tensor: i for i, node in enumerate(nodes) for tensor in node.inputs}
    per_type: dict[str, float] = collections.defaultdict(float)
    per_conv: dict[str, list] = {}
    for repeat in range(steps + 1):
        values = dict(fed)
        for position, node in enumerate(nodes):
            args = [values[t] for t in node.inputs]
            for tensor in node.inputs:
                if last_use[tensor] == position and tensor not in fed:
                    del values[tensor]
            start = time.perf_counter()
            outputs = run_op(node, args, session.state, xp)
            synchronize(xp)
            took = time.perf_counter() - start
            if repeat:  # the first pass warms up
                per_type[node.type] += took / steps
                if node.type in _CONVS:  # a 1-D input is a shape: (n, h, w, c) or the filter's
                    shapes = [tuple(int(d) for d in (to_namespace(a, numpy_namespace) if a.ndim == 1
                                                     else a.shape)) for a in args]
                    per_conv.setdefault(node.name, [node.type, shapes, 0.0])[2] += took / steps
            for i, value in enumerate(outputs):
                if f"{node.name}:{i}" in last_use:  # else nothing reads it: dropped now
                    values[f"{node.name}:{i}"] = value
    convs = []
    for name, (op_type, shapes, seconds) in per_conv.items():
        (n, h, w, c), (kh, kw, _, o) = shapes[0], shapes[1]  # input (or its sizes), filter (or its)
        m, k = n * h * w, kh * kw * c  # stride 1, SAME (CIFAR-10's): one output per input pixel
        flops = 2.0 * m * k * o
        convs.append({"op": name, "type": op_type, "mkn": (m, k, o), "ms": seconds * 1e3,
                      "gflops": flops / seconds / 1e9, "sgemm_gflops": sgemm_gflops(m, k, o, xp=xp)})
    return {"model": model, "batch_size": batch_size, "lrn": lrn, "device": device,
            "ms_per_type": {k: v * 1e3 for k, v in per_type.items()}, "convolutions": convs,
            "sgemm_2048_gflops": sgemm_gflops(2048, 2048, 2048, xp=xp), "cpu_flags": cpu_flags()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch_size", type=int, default=100)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--lrn", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--model", choices=("cifar10", "deep_mnist", "mnist_dnn"), default="cifar10")
    args = parser.parse_args(argv)
    try:
        result = breakdown(args.batch_size, args.steps, args.lrn, args.device, args.model)
    except ValueError as error:
        parser.error(str(error))
    total = sum(result["ms_per_type"].values())
    lrn = f", {'with' if args.lrn else 'without'} LRN" if args.model == "cifar10" else ""
    print(f"{args.model} step on the {args.device.upper()}, batch {args.batch_size}{lrn}: "
          f"{total:.1f} ms of kernels; CPU flags: {' '.join(result['cpu_flags'])}; "
          f"SGEMM 2048^3: {result['sgemm_2048_gflops']:.1f} GFLOP/s")
    print("| op type | ms per step | share |\n| --- | ---: | ---: |")
    for op_type, ms in sorted(result["ms_per_type"].items(), key=lambda kv: -kv[1]):
        if ms >= 0.05 * total / 100:
            print(f"| {op_type} | {ms:.2f} | {ms / total:.0%} |")
    print("\n| convolution | (M, K, N) | ms | GFLOP/s | SGEMM of that size | share of it |\n"
          "| --- | --- | ---: | ---: | ---: | ---: |")
    for conv in result["convolutions"]:
        print(f"| {conv['op']} ({conv['type']}) | {conv['mkn']} | {conv['ms']:.1f} | {conv['gflops']:.1f} | "
              f"{conv['sgemm_gflops']:.1f} | {conv['gflops'] / conv['sgemm_gflops']:.0%} |")


if __name__ == "__main__":
    main()
