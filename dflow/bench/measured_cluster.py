"""``dflow bench advise --cluster ADDRESS``: a running Dask cluster measured into a simulator preset.

Four measurements on the cluster's own workers, each what one of :class:`Hardware`'s fields
means, so that the simulator advises on the cluster as it does on a published preset:

- the link (``nic_bytes_per_sec``): one TCP connection from one worker's host to another's
  carries ``link_bytes`` (:func:`dflow.bench.network.measure_link_between`): what the wire
  allows, without Dask's per-message costs;
- a message's cost (``latency_s``): a chain of tiny Dask tasks, each on the other worker and
  taking the last one's result, timed end to end: a hop is what one stage's values cost to
  reach the next stage's worker in dflow's Dask runtime (scheduler round trip included);
- a PS's apply rate (``ps_apply_bytes_per_sec``): SGD's ``w -= lr * g`` over 32 MB of
  float32 on a worker, as gradient bytes per second;
- one step (the simulator's ``step_time_s``): the model's training step (forward, backward,
  SGD) on one worker with a synthetic batch, the median of a few after a warm-up.

Each Dask worker is a node of one device. The switch is unknown, so no incast is modelled
(``port_buffer_bytes=None``), nor a per-connection cap.

>>> measured = measure_cluster("tcp://10.0.0.5:8786", model="cifar10", batch_size=64)  # doctest: +SKIP
>>> measured.hardware().nic_bytes_per_sec / 1e9, measured.step_time_s  # doctest: +SKIP
(1.17, 0.31)
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

from .hardware import Hardware

__all__ = ["ClusterMeasurement", "measure_cluster", "measure_message_latency", "time_model_step"]

LINK_BYTES = 50_000_000
HOPS = 20
APPLY_ELEMENTS = 8_000_000  # 32 MB of float32: past the caches, as a model's variables are
WAIT_S = 600.0  # the longest a measurement may take (a worker that died or hangs: an error, not a wait)


@dataclass(frozen=True)
class ClusterMeasurement:
    """What :func:`measure_cluster` found, in the simulator's units (bytes/sec, seconds)."""

    address: str
    workers: int
    link_bytes_per_sec: float
    message_latency_s: float
    apply_bytes_per_sec: float
    step_time_s: float
    model: str
    batch_size: int

    def hardware(self) -> Hardware:
        """The cluster as a preset: one device a worker, the links and rates measured."""
        description = f"{self.workers} Dask workers at {self.address}, measured"
        return Hardware(f"measured {self.address}", description, 1,
                        nic_bytes_per_sec=self.link_bytes_per_sec, latency_s=self.message_latency_s,
                        bus_bytes_per_sec=self.link_bytes_per_sec,  # host copies: no device bus measured
                        ps_apply_bytes_per_sec=self.apply_bytes_per_sec, device="measured worker")

    def as_dict(self) -> dict:
        return asdict(self)


def _pass_on(value: int) -> int:
    return value + 1


def measure_message_latency(client, first: str, second: str, hops: int = HOPS) -> float:
    """Seconds per hop of a chain of ``hops`` tiny tasks alternating between two workers."""
    future = client.submit(_pass_on, 0, workers=[first], pure=False)
    future.result(timeout=WAIT_S)  # the chain starts from a value in place: no submission in the timing
    start = time.perf_counter()
    for hop in range(hops):
        future = client.submit(_pass_on, future, workers=[second if hop % 2 == 0 else first], pure=False)
    future.result(timeout=WAIT_S)
    return (time.perf_counter() - start) / hops


def _apply_bytes_per_sec(elements: int = APPLY_ELEMENTS, repeats: int = 5) -> float:
    """Gradient bytes per second that SGD's in-place update takes on this worker (best of a few)."""
    import numpy

    variable, gradient = numpy.ones(elements, numpy.float32), numpy.ones(elements, numpy.float32)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        variable -= numpy.float32(0.01) * gradient
        best = min(best, time.perf_counter() - start)
    return gradient.nbytes / best


def time_model_step(model: str, batch_size: int, warmup: int = 1, steps: int = 3) -> float:
    """The median seconds of ``model``'s training step on a synthetic batch, in this process."""
    import numpy

    import dflow as tf
    from dflow.models import get_model

    from .cifar_step import time_steps

    spec = get_model(model)
    if spec.num_classes is None:
        raise ValueError(f"{model} is a regression: time a classifier (--model)")
    graph = tf.Graph()
    with graph.as_default():
        images = tf.placeholder(tf.float32, [batch_size, *spec.input_shape])
        labels = tf.placeholder(tf.int32, [batch_size])
        train = tf.train.GradientDescentOptimizer(0.01).minimize(spec.loss(spec(images), labels))
        init = tf.global_variables_initializer()
    rng = numpy.random.default_rng(0)
    feeds = {images: rng.standard_normal((batch_size, *spec.input_shape)).astype(numpy.float32),
             labels: rng.integers(0, spec.num_classes, batch_size).astype(numpy.int32)}
    with tf.Session(graph=graph) as sess:
        sess.run(init)
        return statistics.median(time_steps(lambda: sess.run(train, feeds), warmup, steps))


def measure_cluster(client_or_address, model: str = "cifar10", batch_size: int = 64,
                    link_bytes: int = LINK_BYTES) -> ClusterMeasurement:
    """Measure a running cluster (a ``distributed.Client`` or its scheduler's address) between
    its first two workers, and time ``model``'s step on the first."""
    from ..cluster import worker_infos
    from .network import measure_link_between

    client, owned = _client(client_or_address)
    try:
        addresses = sorted(worker_infos(client))
        if len(addresses) < 2:
            raise ValueError(f"measuring links needs two workers; {client.scheduler.address} has "
                             f"{len(addresses)}")
        first, second = addresses[:2]
        link = measure_link_between(client, first, second, link_bytes) / 8
        latency = measure_message_latency(client, first, second)
        apply = client.run(_apply_bytes_per_sec, workers=[first])[first]
        step = client.submit(time_model_step, model, batch_size, workers=[first], pure=False).result(
            timeout=WAIT_S)
        return ClusterMeasurement(client.scheduler.address, len(addresses), link, latency, apply, step,
                                  model, batch_size)
    finally:
        if owned:
            client.close()


def _client(client_or_address):
    """A client of the given one (not ours to close) or a new one on an address (ours)."""
    if not isinstance(client_or_address, str):
        return client_or_address, False
    from ..cluster import connect

    return connect(client_or_address).client, True
