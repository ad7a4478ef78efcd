"""``dflow bench --local --peers``: dflow, PyTorch and TensorFlow ``compat.v1`` side by side.

Each framework trains the same model, the CIFAR-10 tutorial CNN on 24x24x3 synthetic
images with SGD (``--lrn``: with its two LRN layers, ``--no-lrn``: without), in its
own process, started once. The parent then asks them in turn for ``steps`` timed
steps at a batch size: a warm-up pass first (graph building, first-touch
allocations, BLAS and oneDNN start-up), then ``rounds`` rounds in a rotating order,
so that the noise of a shared machine falls on every framework alike. A ratio is
taken within a round (dflow's images/sec over the peer's in the same round) and
reported as its median and its spread (min-max) across rounds.

PyTorch and TensorFlow are optional (never installed by dflow): one that is not
installed is left out and said so.

>>> from dflow.bench import peers
>>> peers.spread([3.0, 1.0, 2.0])
(2.0, 1.0, 3.0)
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import statistics
import traceback

import numpy

from .cifar_step import time_steps

__all__ = ["FRAMEWORKS", "available", "run", "spread", "steps_for"]

#: the frameworks in the order they are reported; dflow's ratios are against the others
FRAMEWORKS = ("dflow", "pytorch", "tensorflow")
_MODULES = {"dflow": "dflow", "pytorch": "torch", "tensorflow": "tensorflow"}
LEARNING_RATE = 0.01


def available() -> dict[str, bool]:
    """Which of :data:`FRAMEWORKS` can be imported here (without importing them)."""
    return {name: importlib.util.find_spec(module) is not None for name, module in _MODULES.items()}


def spread(values: list[float]) -> tuple[float, float, float]:
    """``(median, min, max)`` of ``values``."""
    return statistics.median(values), min(values), max(values)


def steps_for(batch_size: int, steps: int) -> int:
    """Timed steps of one round: at least ``steps``, more for small batches (whose steps are
    short, so a few would be timer noise), at most 100."""
    return max(steps, min(100, (steps * 100) // max(batch_size, 1)))


# ---- the three steps, each built in its own process ----------------------------------------
def _synthetic_batch(batch_size: int):
    rng = numpy.random.default_rng(0)
    return (rng.standard_normal((batch_size, 24, 24, 3)).astype(numpy.float32),
            rng.integers(0, 10, batch_size).astype(numpy.int32))


def _graph_step(tf, batch_size: int, lrn: bool):
    session, train_op, feeds = graph_session(tf, batch_size, lrn)
    return lambda: session.run(train_op, feeds)


def graph_session(tf, batch_size: int, lrn: bool):
    """The tutorial's ``cifar10.inference`` and ``loss`` written once in the TF 1.x API, built
    with ``tf`` = ``dflow`` or ``tensorflow.compat.v1``: the same graph for both. Returns the
    initialized session, the train op and the feeds of a synthetic batch."""
    decayed = []

    def variable(name, shape, stddev=None, constant=None, wd=None):
        init = (tf.constant_initializer(constant) if constant is not None
                else tf.truncated_normal_initializer(stddev=stddev))
        var = tf.get_variable(name, shape, initializer=init)
        if wd is not None:
            decayed.append(tf.multiply(tf.nn.l2_loss(var), wd))
        return var

    def conv_relu(x, shape, bias, name):
        with tf.variable_scope(name):
            conv = tf.nn.conv2d(x, variable("weights", shape, 5e-2), [1, 1, 1, 1], padding="SAME")
            return tf.nn.relu(tf.nn.bias_add(conv, variable("biases", shape[-1:], constant=bias)))

    def pool(x):
        return tf.nn.max_pool(x, [1, 3, 3, 1], [1, 2, 2, 1], padding="SAME")

    def norm(x):
        return tf.nn.lrn(x, 4, bias=1.0, alpha=0.001 / 9.0, beta=0.75) if lrn else x

    def dense(x, size, name, stddev, wd, bias, relu=True):
        with tf.variable_scope(name):
            y = tf.matmul(x, variable("weights", [int(x.shape[1]), size], stddev, wd=wd))
            y = y + variable("biases", [size], constant=bias)
            return tf.nn.relu(y) if relu else y

    graph = tf.Graph()
    with graph.as_default():
        images = tf.placeholder(tf.float32, [batch_size, 24, 24, 3])
        labels = tf.placeholder(tf.int32, [batch_size])
        x = norm(pool(conv_relu(images, [5, 5, 3, 64], 0.0, "conv1")))
        x = pool(norm(conv_relu(x, [5, 5, 64, 64], 0.1, "conv2")))
        x = tf.reshape(x, [batch_size, 6 * 6 * 64])
        x = dense(x, 384, "local3", 0.04, 0.004, 0.1)
        x = dense(x, 192, "local4", 0.04, 0.004, 0.1)
        logits = dense(x, 10, "softmax_linear", 1 / 192.0, None, 0.0, relu=False)
        cross_entropy = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.cast(labels, tf.int64), logits=logits))
        loss = tf.add_n([cross_entropy, *decayed])
        train_op = tf.train.GradientDescentOptimizer(LEARNING_RATE).minimize(loss)
        init = tf.global_variables_initializer()
    session = tf.Session(graph=graph)
    session.run(init)
    x, y = _synthetic_batch(batch_size)
    return session, train_op, {images: x, labels: y}


def _dflow_step(batch_size: int, lrn: bool):
    import dflow

    return _graph_step(dflow, batch_size, lrn)


def _tensorflow_step(batch_size: int, lrn: bool):
    import tensorflow

    tensorflow.compat.v1.disable_eager_execution()
    return _graph_step(tensorflow.compat.v1, batch_size, lrn)


def _pytorch_step(batch_size: int, lrn: bool):
    """The same model in PyTorch (NCHW, its CPU default), weight decay on local3/local4 as
    a loss term like the tutorial's."""
    import torch
    from torch import nn

    torch.set_num_threads(os.cpu_count() or 1)

    def norm():  # torch's LRN divides alpha by the window size; TF's does not
        return [nn.LocalResponseNorm(9, alpha=0.001, beta=0.75, k=1.0)] if lrn else []

    local3, local4 = nn.Linear(6 * 6 * 64, 384), nn.Linear(384, 192)
    model = nn.Sequential(
        nn.Conv2d(3, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(3, 2, padding=1), *norm(),
        nn.Conv2d(64, 64, 5, padding=2), nn.ReLU(), *norm(), nn.MaxPool2d(3, 2, padding=1),
        nn.Flatten(), local3, nn.ReLU(), local4, nn.ReLU(), nn.Linear(192, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    x, y = _synthetic_batch(batch_size)
    images = torch.from_numpy(x).permute(0, 3, 1, 2).contiguous()
    labels = torch.from_numpy(y).long()

    def step():
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(images), labels)
        loss = loss + 0.002 * (local3.weight.pow(2).sum() + local4.weight.pow(2).sum())
        loss.backward()
        optimizer.step()

    return step


_BUILDERS = {"dflow": _dflow_step, "pytorch": _pytorch_step, "tensorflow": _tensorflow_step}


def _version(framework: str) -> str:
    if framework == "dflow":
        import dflow

        return dflow.DFLOW_VERSION
    module = __import__(_MODULES[framework])
    return module.__version__


def _use_checkout(path: str) -> None:
    """Import ``dflow`` from the checkout at ``path`` from now on (``--baseline``)."""
    import sys

    for name in [m for m in sys.modules if m == "dflow" or m.startswith("dflow.")]:
        del sys.modules[name]
    sys.path.insert(0, os.path.abspath(path))


def _serve(connection, framework: str, lrn: bool, checkout: str | None = None) -> None:
    """A framework's process: ``(batch, warmup, steps)`` requests in, step seconds out.
    With ``checkout``, the dflow of that source tree (``--baseline``) runs the step."""
    steps_at: dict[int, object] = {}
    if checkout is not None:
        _use_checkout(checkout)
    try:
        connection.send(("ok", _version(framework)))
        while (request := connection.recv()) is not None:
            batch_size, warmup, steps = request
            try:
                if batch_size not in steps_at:
                    steps_at[batch_size] = _BUILDERS[framework](batch_size, lrn)
                connection.send(("ok", time_steps(steps_at[batch_size], warmup, steps)))
            except Exception:
                connection.send(("error", traceback.format_exc()))
    except Exception:
        connection.send(("error", traceback.format_exc()))
    finally:
        connection.close()


class _Framework:
    """One framework's process and the pipe to it."""

    def __init__(self, name: str, lrn: bool, checkout: str | None = None):
        context = multiprocessing.get_context("spawn")  # a fresh interpreter: no shared threads
        self.name = "dflow@baseline" if checkout else name
        self._connection, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child, name, lrn, checkout), daemon=True)
        self._process.start()
        child.close()
        self.version: str | None = None

    def started(self, timeout: float) -> str:
        self.version = self._reply(timeout)
        return self.version

    def measure(self, batch_size: int, warmup: int, steps: int, timeout: float) -> list[float]:
        self._connection.send((batch_size, warmup, steps))
        return self._reply(timeout)

    def _reply(self, timeout: float):
        if not self._connection.poll(timeout):
            raise RuntimeError(f"{self.name} gave no answer within {timeout:.0f} s")
        try:
            status, value = self._connection.recv()
        except EOFError:
            raise RuntimeError(f"{self.name}'s process ended without a result "
                               f"(exit code {self._process.exitcode})") from None
        if status != "ok":
            raise RuntimeError(f"{self.name} failed in its process:\n{value}")
        return value

    def close(self) -> None:
        try:
            self._connection.send(None)
        except OSError:
            pass
        self._process.join(10)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        self._connection.close()


def _load() -> str:
    try:
        return f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    except OSError:
        return "load average unknown"


def run(batch_sizes=(1, 10, 100), warmup: int = 10, steps: int = 20, rounds: int = 3,
        lrn: bool = True, frameworks: tuple[str, ...] | None = None, baseline: str | None = None,
        timeout: float = 600.0, echo=print) -> dict:
    """Interleaved rounds of every installed framework at each batch size; print a table of
    images/sec (median, min-max over rounds) and dflow's ratios, and return the results.

    ``baseline``: a dflow source tree (another checkout, say main) timed beside this one as
    ``dflow@baseline``: a before/after in the same rounds."""
    if baseline is not None and not os.path.isdir(os.path.join(baseline, "dflow")):
        raise ValueError(f"--baseline {baseline!r} is not a dflow source tree (no dflow/ in it): "
                         "give the root of a checkout")
    if rounds < 1 or steps < 1 or warmup < 0:
        raise ValueError(f"rounds and steps must be >= 1 and warmup >= 0, got rounds={rounds}, "
                         f"steps={steps}, warmup={warmup}")
    found = available()
    wanted = frameworks or FRAMEWORKS
    names = [name for name in wanted if found.get(name)]
    missing = [name for name in wanted if not found.get(name)]
    if "dflow" not in names:
        raise ValueError("the peers benchmark compares against dflow: keep 'dflow' in frameworks")
    model = "with LRN" if lrn else "without LRN (--no-lrn)"
    echo(f"CIFAR-10 tutorial CNN {model}, SGD, synthetic data; each framework in its own process, "
         f"{warmup} warm-up steps, then {rounds} interleaved rounds")
    if missing:
        echo(f"not installed, left out: {', '.join(_MODULES[m] for m in missing)} "
             f"(pip install {' '.join(_MODULES[m] for m in missing)})")
    results = {"model": "cifar10", "lrn": lrn, "rounds": rounds, "warmup_steps": warmup,
               "load_before": _load(), "versions": {}, "batches": []}
    workers = [_Framework(name, lrn) for name in names]
    if baseline is not None:
        workers.insert(1, _Framework("dflow", lrn, checkout=baseline))
    try:
        for worker in workers:
            results["versions"][worker.name] = worker.started(timeout)
        echo("  ".join(f"{name} {version}" for name, version in results["versions"].items()))
        for batch in batch_sizes:
            results["batches"].append(_one_batch(workers, batch, warmup, steps_for(batch, steps),
                                                 rounds, timeout, echo))
    finally:
        for worker in workers:
            worker.close()
    results["load_after"] = _load()
    echo(f"machine: {results['load_after']} (before: {results['load_before']})")
    return results


def _one_batch(workers, batch: int, warmup: int, steps: int, rounds: int, timeout: float, echo) -> dict:
    for worker in workers:  # builds the step and warms it up; not timed
        worker.measure(batch, warmup, 1, timeout)
    per_round: dict[str, list[float]] = {w.name: [] for w in workers}
    for r in range(rounds):
        for worker in workers[r % len(workers):] + workers[:r % len(workers)]:
            times = worker.measure(batch, 0, steps, timeout)
            per_round[worker.name].append(batch * len(times) / sum(times))
    row = {"batch_size": batch, "steps_per_round": steps, "images_per_sec": per_round, "ratios": {}}
    cells = []
    for name, values in per_round.items():
        median, low, high = spread(values)
        cells.append(f"{name} {median:.1f} [{low:.1f}-{high:.1f}]")
    for name in per_round:
        if name != "dflow":
            ratios = [ours / theirs for ours, theirs in zip(per_round["dflow"], per_round[name])]
            row["ratios"][name] = ratios
            median, low, high = spread(ratios)
            cells.append(f"dflow/{name} {median:.2f}x [{low:.2f}-{high:.2f}]")
    echo(f"batch {batch:>4}: images/sec " + "; ".join(cells))
    return row
