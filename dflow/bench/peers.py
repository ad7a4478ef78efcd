"""``dflow bench --local --peers``: dflow, PyTorch and TensorFlow ``compat.v1`` side by side.

Each framework trains the same model on synthetic data, in its own process, started
once. ``--model`` picks it (:data:`PEER_MODELS`): the CIFAR-10 tutorial CNN on 24x24x3
images with SGD (the default; ``--lrn``: with its two LRN layers, ``--no-lrn``:
without), the deep MNIST CNN of TF's "Deep MNIST for Experts" with Adam (its dropout
left out for the timing: it would time each framework's random generator, not the
model), or the 784-512-512-10 MNIST-DNN with Adam, both as :mod:`dflow.models` defines
them. The parent then asks them in turn for ``steps`` timed steps at a batch size: a
warm-up pass first (graph building, first-touch allocations, BLAS and oneDNN start-up),
then ``rounds`` rounds in a rotating order, so that the noise of a shared machine falls
on every framework alike. A ratio is taken within a round (dflow's images/sec over the
peer's in the same round) and reported as its median and its spread (min-max) across
rounds.

With ``device="gpu"`` (``--device gpu``) every framework computes on the GPU: dflow and
TensorFlow build the graph under ``tf.device("/gpu:0")``, PyTorch moves its model and batch
to CUDA, and every timed step ends when the GPU has done its work.

With ``memory``, each framework also trains a few steps at each batch size in a fresh
process of its own, and its peak resident memory while it trains, minus its resident
memory just before the first step, is reported beside its images/sec
(:func:`step_memory`): a fresh process, so that no earlier batch size's peak counts.

PyTorch and TensorFlow are optional (never installed by dflow): one that is not
installed is left out and said so.

>>> from dflow.bench import peers
>>> peers.spread([3.0, 1.0, 2.0])
(2.0, 1.0, 3.0)
"""

from __future__ import annotations

import importlib.util
import math
import multiprocessing
import os
import resource
import statistics
import traceback

import numpy

from .cifar_step import time_steps

__all__ = ["DEVICES", "FRAMEWORKS", "PEER_MODELS", "available", "graph_session", "run", "spread",
           "step_memory", "steps_for", "use_checkout"]

#: the frameworks in the order they are reported; dflow's ratios are against the others
FRAMEWORKS = ("dflow", "pytorch", "tensorflow")
_MODULES = {"dflow": "dflow", "pytorch": "torch", "tensorflow": "tensorflow"}
LEARNING_RATE = 0.01  # the CIFAR-10 CNN's SGD

#: the models the frameworks race on: what each is, its one example's shape, its optimizer
PEER_MODELS = {
    "cifar10": ("CIFAR-10 tutorial CNN", (24, 24, 3), ("sgd", LEARNING_RATE)),
    # the tutorial's AdamOptimizer(1e-4); dropout left out (see the module's doc)
    "deep_mnist": ("deep MNIST CNN (TF's Deep MNIST for Experts, no dropout)", (28, 28, 1), ("adam", 1e-4)),
    # dflow.models' train_defaults for mnist_dnn: Adam 1e-3
    "mnist_dnn": ("MNIST-DNN 784-512-512-10 ReLU", (784,), ("adam", 1e-3)),
}
#: where the frameworks compute: ``--device``
DEVICES = ("cpu", "gpu")
#: steps that :func:`step_memory` runs after its baseline reading (the first allocates most)
MEMORY_STEPS = 3


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
def _synthetic_batch(batch_size: int, model: str = "cifar10"):
    rng = numpy.random.default_rng(0)
    return (rng.standard_normal((batch_size, *PEER_MODELS[model][1])).astype(numpy.float32),
            rng.integers(0, 10, batch_size).astype(numpy.int32))


def _graph_step(tf, batch_size: int, lrn: bool, model: str = "cifar10", device: str = "cpu"):
    session, train_op, feeds = graph_session(tf, batch_size, lrn, model, device)
    return lambda: session.run(train_op, feeds)


def graph_session(tf, batch_size: int, lrn: bool = True, model: str = "cifar10",
                  device="cpu", target: str = "", config=None):
    """``model``'s training step (:data:`PEER_MODELS`) written once in the TF 1.x API, built
    with ``tf`` = ``dflow`` or ``tensorflow.compat.v1``: the same graph for both, every op of
    it on ``/cpu:0`` or ``/gpu:0`` (``device`` "cpu" or "gpu"; None: where the framework
    places ops of no device, a GPU where there is one; a device function such as
    ``replica_device_setter``'s: where it says), in a session on ``target`` with ``config``.
    Returns the initialized session, the train op and the feeds of a synthetic batch.

    >>> import dflow
    >>> session, train_op, feeds = graph_session(dflow, 2, model="mnist_dnn")
    >>> session.run(train_op, feeds)
    """
    graph = tf.Graph()
    with graph.as_default(), tf.device(device if callable(device) else device and f"/{device}:0"):
        images = tf.placeholder(tf.float32, [batch_size, *PEER_MODELS[model][1]])
        labels = tf.placeholder(tf.int32, [batch_size])
        logits, decayed = _LOGITS[model](tf, images, lrn)
        cross_entropy = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.cast(labels, tf.int64), logits=logits), name="cross_entropy")  # found by name
        loss = tf.add_n([cross_entropy, *decayed]) if decayed else cross_entropy
        optimizer, learning_rate = PEER_MODELS[model][2]
        train_op = (tf.train.AdamOptimizer(learning_rate) if optimizer == "adam"
                    else tf.train.GradientDescentOptimizer(learning_rate)).minimize(loss)
        init = tf.global_variables_initializer()
    session = tf.Session(target, graph=graph, config=config)
    session.run(init)
    x, y = _synthetic_batch(batch_size, model)
    return session, train_op, {images: x, labels: y}


def _cifar10_logits(tf, images, lrn: bool):
    """The tutorial's ``cifar10.inference`` and its weight-decay terms."""
    batch_size = int(images.shape[0])
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

    x = norm(pool(conv_relu(images, [5, 5, 3, 64], 0.0, "conv1")))
    x = pool(norm(conv_relu(x, [5, 5, 64, 64], 0.1, "conv2")))
    x = tf.reshape(x, [batch_size, 6 * 6 * 64])
    x = dense(x, 384, "local3", 0.04, 0.004, 0.1)
    x = dense(x, 192, "local4", 0.04, 0.004, 0.1)
    return dense(x, 10, "softmax_linear", 1 / 192.0, None, 0.0, relu=False), decayed


def _deep_mnist_logits(tf, images, lrn: bool):
    """:func:`dflow.models.deep_mnist.deep_mnist` in NHWC without dropout: truncated-normal
    weights of stddev 0.1, biases 0.1 (the tutorial's ``weight_variable``/``bias_variable``)."""
    def weight(shape):
        return tf.get_variable("weights", shape, initializer=tf.truncated_normal_initializer(stddev=0.1))

    def bias(shape):
        return tf.get_variable("biases", shape, initializer=tf.constant_initializer(0.1))

    x = images
    for i, (channels_in, channels_out) in enumerate([(1, 32), (32, 64)], start=1):
        with tf.variable_scope(f"conv{i}"):
            conv = tf.nn.conv2d(x, weight([5, 5, channels_in, channels_out]), [1, 1, 1, 1], padding="SAME")
            x = tf.nn.relu(tf.nn.bias_add(conv, bias([channels_out])))
        x = tf.nn.max_pool(x, [1, 2, 2, 1], [1, 2, 2, 1], padding="SAME")
    with tf.variable_scope("fc1"):
        x = tf.nn.relu(tf.matmul(tf.reshape(x, [-1, 7 * 7 * 64]), weight([7 * 7 * 64, 1024])) + bias([1024]))
    with tf.variable_scope("fc2"):
        return tf.matmul(x, weight([1024, 10])) + bias([10]), []


def _mnist_dnn_logits(tf, images, lrn: bool):
    """:func:`dflow.models.mnist_dnn.mnist_dnn`: ReLU layers of :data:`HIDDEN_UNITS`, weights
    from a truncated normal of stddev ``1/sqrt(fan_in)``, zero biases."""
    from ..models.mnist_dnn import HIDDEN_UNITS

    def dense(x, units):
        fan_in = int(x.shape[-1])
        init = tf.truncated_normal_initializer(stddev=1.0 / math.sqrt(fan_in))
        weights = tf.get_variable("weights", [fan_in, units], initializer=init)
        return tf.matmul(x, weights) + tf.get_variable("biases", [units], initializer=tf.zeros_initializer())

    x = images
    for i, units in enumerate(HIDDEN_UNITS, start=1):
        with tf.variable_scope(f"hidden{i}"):
            x = tf.nn.relu(dense(x, units))
    with tf.variable_scope("softmax_linear"):
        return dense(x, 10), []


_LOGITS = {"cifar10": _cifar10_logits, "deep_mnist": _deep_mnist_logits, "mnist_dnn": _mnist_dnn_logits}


def _dflow_step(batch_size: int, lrn: bool, model: str = "cifar10", device: str = "cpu"):
    import dflow

    # the kernel libraries load now, as the others' load at import: numba and the kernels' code
    # (145 MiB) and libdnnl are the process's, not a step's memory
    for module, load in (("fused", "compiled_kernels"), ("onednn", "available")):
        try:
            kernels = importlib.import_module(f"dflow.ops.{module}")
        except ImportError:  # a --baseline checkout from before it
            continue
        getattr(kernels, load)()
    return _graph_step(dflow, batch_size, lrn, model, device)


def _tensorflow_step(batch_size: int, lrn: bool, model: str = "cifar10", device: str = "cpu"):
    import tensorflow

    tensorflow.compat.v1.disable_eager_execution()
    return _graph_step(tensorflow.compat.v1, batch_size, lrn, model, device)


def _pytorch_step(batch_size: int, lrn: bool, model: str = "cifar10", device: str = "cpu"):
    """The same model in PyTorch (NCHW, its default), the same initial scales and optimizer; on
    the GPU each step waits for CUDA's queued kernels, as a graph step's run does."""
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    if device == "cpu":
        return _PYTORCH_STEPS[model](torch, batch_size, lrn)
    with torch.device("cuda"):  # parameters made here are on the GPU
        step = _PYTORCH_STEPS[model](torch, batch_size, lrn)

    def step_on_gpu():
        step()
        torch.cuda.synchronize()

    return step_on_gpu


def _pytorch_cifar10(torch, batch_size: int, lrn: bool):
    """Weight decay on local3/local4 as a loss term like the tutorial's."""
    from torch import nn

    def norm():  # torch's LRN divides alpha by the window size; TF's does not
        return [nn.LocalResponseNorm(9, alpha=0.001, beta=0.75, k=1.0)] if lrn else []

    local3, local4 = nn.Linear(6 * 6 * 64, 384), nn.Linear(384, 192)
    model = nn.Sequential(
        nn.Conv2d(3, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(3, 2, padding=1), *norm(),
        nn.Conv2d(64, 64, 5, padding=2), nn.ReLU(), *norm(), nn.MaxPool2d(3, 2, padding=1),
        nn.Flatten(), local3, nn.ReLU(), local4, nn.ReLU(), nn.Linear(192, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    x, y = _synthetic_batch(batch_size)
    images = torch.as_tensor(x).permute(0, 3, 1, 2).contiguous()
    labels = torch.as_tensor(y).long()

    def step():
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(images), labels)
        loss = loss + 0.002 * (local3.weight.pow(2).sum() + local4.weight.pow(2).sum())
        loss.backward()
        optimizer.step()

    return step


def _pytorch_initialized(torch, layers, stddev, bias: float):
    """``layers`` with TF's initial values: weights from a normal truncated at two standard
    deviations, ``stddev(layer)``, and every bias at ``bias``."""
    with torch.no_grad():
        for layer in layers:
            scale = stddev(layer)
            torch.nn.init.trunc_normal_(layer.weight, std=scale, a=-2 * scale, b=2 * scale)
            layer.bias.fill_(bias)
    return layers


def _pytorch_deep_mnist(torch, batch_size: int, lrn: bool):
    from torch import nn

    conv1, conv2 = nn.Conv2d(1, 32, 5, padding=2), nn.Conv2d(32, 64, 5, padding=2)
    fc1, fc2 = nn.Linear(7 * 7 * 64, 1024), nn.Linear(1024, 10)
    _pytorch_initialized(torch, [conv1, conv2, fc1, fc2], lambda layer: 0.1, 0.1)
    model = nn.Sequential(conv1, nn.ReLU(), nn.MaxPool2d(2, 2), conv2, nn.ReLU(), nn.MaxPool2d(2, 2),
                          nn.Flatten(), fc1, nn.ReLU(), fc2)
    x, y = _synthetic_batch(batch_size, "deep_mnist")
    return _pytorch_classifier_step(torch, model, torch.as_tensor(x).permute(0, 3, 1, 2).contiguous(),
                                    y, "deep_mnist")


def _pytorch_mnist_dnn(torch, batch_size: int, lrn: bool):
    from torch import nn

    from ..models.mnist_dnn import HIDDEN_UNITS

    sizes = [784, *HIDDEN_UNITS, 10]
    layers = _pytorch_initialized(torch, [nn.Linear(a, b) for a, b in zip(sizes, sizes[1:])],
                                  lambda layer: 1.0 / math.sqrt(layer.in_features), 0.0)
    model = nn.Sequential(*[m for layer in layers[:-1] for m in (layer, nn.ReLU())], layers[-1])
    x, y = _synthetic_batch(batch_size, "mnist_dnn")
    return _pytorch_classifier_step(torch, model, torch.as_tensor(x), y, "mnist_dnn")


def _pytorch_classifier_step(torch, model, images, labels, name: str):
    """A step of ``model`` with :data:`PEER_MODELS`' optimizer for ``name`` (Adam, or SGD)."""
    optimizer, learning_rate = PEER_MODELS[name][2]
    optimizer = (torch.optim.Adam if optimizer == "adam" else torch.optim.SGD)(model.parameters(),
                                                                              lr=learning_rate)
    labels = torch.as_tensor(labels).long()

    def step():
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(images), labels).backward()
        optimizer.step()

    return step


_PYTORCH_STEPS = {"cifar10": _pytorch_cifar10, "deep_mnist": _pytorch_deep_mnist,
                  "mnist_dnn": _pytorch_mnist_dnn}
_BUILDERS = {"dflow": _dflow_step, "pytorch": _pytorch_step, "tensorflow": _tensorflow_step}


def _version(framework: str) -> str:
    if framework == "dflow":
        import dflow

        return dflow.DFLOW_VERSION
    module = __import__(_MODULES[framework])
    return module.__version__


def use_checkout(path: str) -> None:
    """Import ``dflow`` from the checkout at ``path`` from now on (``--baseline``)."""
    import sys

    for name in [m for m in sys.modules if m == "dflow" or m.startswith("dflow.")]:
        del sys.modules[name]
    sys.path.insert(0, os.path.abspath(path))


def _serve(connection, framework: str, lrn: bool, checkout: str | None = None,
           model: str = "cifar10", device: str = "cpu") -> None:
    """A framework's process: ``(batch, warmup, steps)`` requests in, step seconds out.
    With ``checkout``, the dflow of that source tree (``--baseline``) runs the step."""
    steps_at: dict[int, object] = {}
    if checkout is not None:
        use_checkout(checkout)
    try:
        connection.send(("ok", _version(framework)))
        while (request := connection.recv()) is not None:
            batch_size, warmup, steps = request
            try:
                if batch_size not in steps_at:
                    steps_at[batch_size] = _BUILDERS[framework](batch_size, lrn, model, device)
                connection.send(("ok", time_steps(steps_at[batch_size], warmup, steps)))
            except Exception:
                connection.send(("error", traceback.format_exc()))
    except Exception:
        connection.send(("error", traceback.format_exc()))
    finally:
        connection.close()


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _restart_peak_rss() -> bool:
    """Restart the kernel's record of this process's peak resident set (``VmHWM``) from its
    current size: Linux's ``clear_refs`` 5. False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_rss_bytes(restarted: bool) -> int:
    if restarted:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def step_memory(framework: str, batch_size: int, model: str = "cifar10", lrn: bool = True,
                steps: int = MEMORY_STEPS, checkout: str | None = None) -> dict:
    """Bytes that ``framework``'s training of ``model`` at ``batch_size`` adds to this process's
    resident memory at its peak: the peak while ``steps`` steps run, minus the resident size
    just before the first (the model built, variables initialized, the batch in memory).

    The peak is the kernel's high-water mark restarted just before the first step, so that
    importing and building do not count; where the kernel refuses the restart, the lifetime
    peak (``ru_maxrss``) stands in and ``peak_since`` says so. Call it in a fresh process
    (:func:`measure_step_memory`) so that no earlier, larger step's peak counts either.

    >>> step_memory("dflow", 4, model="mnist_dnn")["batch_size"]
    4
    """
    if checkout is not None:
        use_checkout(checkout)
    step = _BUILDERS[framework](batch_size, lrn, model)
    before = _rss_bytes()
    restarted = _restart_peak_rss()
    time_steps(step, 0, steps)
    peak = _peak_rss_bytes(restarted)
    return {"framework": framework, "batch_size": batch_size, "steps": steps, "rss_before_bytes": before,
            "peak_rss_bytes": peak, "step_memory_bytes": max(0, peak - before),
            "peak_since": "first step" if restarted else "process start (ru_maxrss)"}


def measure_step_memory(framework: str, batch_size: int, model: str = "cifar10", lrn: bool = True,
                        steps: int = MEMORY_STEPS, checkout: str | None = None) -> dict:
    """:func:`step_memory` in a fresh process of its own, e.g. the MiB a dflow step of the
    CIFAR-10 CNN at batch 400 adds::

        measure_step_memory("dflow", 400)["step_memory_bytes"] / 2**20
    """
    from .local import in_fresh_process

    return in_fresh_process(step_memory, framework, batch_size, model, lrn, steps, checkout)


class _Framework:
    """One framework's process and the pipe to it."""

    def __init__(self, name: str, lrn: bool, checkout: str | None = None, model: str = "cifar10",
                 device: str = "cpu"):
        context = multiprocessing.get_context("spawn")  # a fresh interpreter: no shared threads
        self.name = "dflow@baseline" if checkout else name
        self.framework, self.checkout = name, checkout
        self._connection, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child, name, lrn, checkout, model, device),
                                        daemon=True)
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
        lrn: bool | None = None, frameworks: tuple[str, ...] | None = None, baseline: str | None = None,
        timeout: float = 600.0, echo=print, model: str = "cifar10", memory: bool = False,
        device: str = "cpu") -> dict:
    """Interleaved rounds of every installed framework at each batch size; print a table of
    images/sec (median, min-max over rounds) and dflow's ratios, and return the results.

    ``model``: one of :data:`PEER_MODELS`; ``lrn`` (the CIFAR-10 CNN's two LRN layers, on
    when None) applies to ``cifar10`` only. ``baseline``: a dflow source tree (another
    checkout, say main) timed beside this one as ``dflow@baseline``: a before/after in the
    same rounds. ``memory``: also each framework's peak step memory at each batch size, in a
    fresh process per framework and batch size (:func:`measure_step_memory`). ``device``: one of
    :data:`DEVICES`.

    >>> run([2], model="mnist_dnn", lrn=False)
    Traceback (most recent call last):
    ...
    ValueError: --lrn/--no-lrn choose the CIFAR-10 CNN's LRN layers; mnist_dnn has none: leave them out
    """
    if model not in PEER_MODELS:
        raise ValueError(f"unknown model {model!r} for --peers; choose one of: {', '.join(PEER_MODELS)}")
    if lrn is not None and model != "cifar10":
        raise ValueError(f"--lrn/--no-lrn choose the CIFAR-10 CNN's LRN layers; {model} has none: "
                         "leave them out")
    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r} for --peers; choose one of: {', '.join(DEVICES)}")
    if device == "gpu":
        from ..runtime.devices import gpu_namespace

        if gpu_namespace() is None:
            raise ValueError("--device gpu: dflow finds no GPU here (it computes on GPUs through CuPy: "
                             "pip install 'dflow[gpu]' on a machine with an NVIDIA GPU)")
    if memory and device != "cpu":
        raise ValueError("--memory measures each step's resident host memory, not the GPU's: "
                         "leave out --memory or --device gpu")
    lrn = model == "cifar10" and lrn is not False
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
    title, _, (optimizer, learning_rate) = PEER_MODELS[model]
    if model == "cifar10":
        title += " with LRN" if lrn else " without LRN (--no-lrn)"
    optimizer_name = {"sgd": "SGD", "adam": "Adam"}[optimizer]
    echo(f"{title}, {optimizer_name} {learning_rate:g}, synthetic data, on the {device.upper()}; "
         "each framework in its own process, "
         f"{warmup} warm-up steps, then {rounds} interleaved rounds")
    if missing:
        echo(f"not installed, left out: {', '.join(_MODULES[m] for m in missing)} "
             f"(pip install {' '.join(_MODULES[m] for m in missing)})")
    results = {"model": model, "lrn": lrn, "device": device, "optimizer": optimizer,
               "learning_rate": learning_rate, "rounds": rounds, "warmup_steps": warmup,
               "load_before": _load(), "versions": {}, "batches": []}
    workers = [_Framework(name, lrn, model=model, device=device) for name in names]
    if baseline is not None:
        workers.insert(1, _Framework("dflow", lrn, checkout=baseline, model=model, device=device))
    try:
        for worker in workers:
            results["versions"][worker.name] = worker.started(timeout)
        echo("  ".join(f"{name} {version}" for name, version in results["versions"].items()))
        for batch in batch_sizes:
            row = _one_batch(workers, batch, warmup, steps_for(batch, steps), rounds, timeout, echo)
            if memory:
                row.update(_memory_of_batch(workers, batch, model, lrn, echo))
            results["batches"].append(row)
    finally:
        for worker in workers:
            worker.close()
    results["load_after"] = _load()
    echo(f"machine: {results['load_after']} (before: {results['load_before']})")
    return results


def _memory_of_batch(workers, batch: int, model: str, lrn: bool, echo) -> dict:
    """Each framework's peak step memory at ``batch``, each in a fresh process, one after another
    (the framework processes of the timed rounds wait meanwhile: their memory is not counted)."""
    mib = {}
    for worker in workers:
        measured = measure_step_memory(worker.framework, batch, model, lrn, checkout=worker.checkout)
        mib[worker.name] = measured["step_memory_bytes"] / 2**20
    ratios = {name: mib["dflow"] / value for name, value in mib.items() if name != "dflow" and value > 0}
    cells = [f"{name} {value:.1f}" for name, value in mib.items()]
    cells += [f"dflow/{name} {ratio:.2f}x" for name, ratio in ratios.items()]
    echo(f"batch {batch:>4}: peak step memory MiB (over {MEMORY_STEPS} steps, fresh processes) "
         + "; ".join(cells))
    return {"step_memory_mib": mib, "memory_ratios": ratios}


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
