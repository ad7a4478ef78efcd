"""``tf.RunOptions`` and ``tf.RunMetadata``: what scripts pass to ``sess.run(..., options=,
run_metadata=)`` to trace a step.

dflow fills ``run_metadata.step_stats`` with the ops each device ran (and, on a cluster,
each task's timed compute and wait spans), in TF's shape
(``step_stats.dev_stats[i].device``, ``.node_stats[j].node_name``). A traced run (any
``trace_level`` but ``NO_TRACE``) times each op: it runs op by op, in the counting loop
rather than a compiled stage, so its ops add up to a little more than an untraced step; on a
cluster (the direct runner) each task times its own ops. ``tensorflow.python.client.timeline``
turns the stats into a Chrome trace.

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     y = tf.multiply(tf.constant(2.0), 3.0, name="y")
...     meta = tf.RunMetadata()
...     with tf.Session() as sess:
...         _ = sess.run(y, options=tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE),
...                      run_metadata=meta)
...     [n.node_name for n in meta.step_stats.dev_stats[0].node_stats][-1]
'y'
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .executor import RunStats

__all__ = ["RunOptions", "RunMetadata", "StepStats", "DeviceStepStats", "NodeExecStats", "fill_run_metadata"]

LOCAL_DEVICE = "/job:localhost/replica:0/task:0/device:CPU:0"


@dataclass
class RunOptions:
    """Options of one ``Session.run`` (TF's proto fields; the trace level is kept, the rest
    accepted). ``tf.RunOptions.FULL_TRACE`` and the other levels are class attributes."""

    NO_TRACE = 0
    SOFTWARE_TRACE = 1
    HARDWARE_TRACE = 2
    FULL_TRACE = 3

    trace_level: int = 0
    timeout_in_ms: int = 0
    inter_op_thread_pool: int = 0
    output_partition_graphs: bool = False
    debug_options: object = None
    report_tensor_allocations_upon_oom: bool = False


@dataclass
class NodeExecStats:
    node_name: str
    all_start_micros: int = 0
    all_end_rel_micros: int = 0
    timeline_label: str = ""


@dataclass
class DeviceStepStats:
    device: str
    node_stats: list[NodeExecStats] = field(default_factory=list)


@dataclass
class StepStats:
    dev_stats: list[DeviceStepStats] = field(default_factory=list)


@dataclass
class RunMetadata:
    """What a traced ``Session.run`` measured: ``step_stats`` (see the module docstring);
    ``partition_graphs`` and ``cost_graph`` stay empty."""

    step_stats: StepStats = field(default_factory=StepStats)
    partition_graphs: list = field(default_factory=list)
    cost_graph: object = None

    def Clear(self) -> None:  # noqa: N802 - the protobuf method's name
        self.step_stats = StepStats()


def fill_run_metadata(metadata: RunMetadata, stats: RunStats) -> None:
    """Put one run's :class:`RunStats` into ``metadata`` in TF's StepStats shape."""
    devices: dict[str, DeviceStepStats] = {}
    for task, what, start, end in stats.timeline:  # a cluster's timed spans (a traced op's too), per task
        device = devices.setdefault(task, DeviceStepStats(task))
        name = what.split(" = ")[0]  # "compute", "wait", or a traced op's "name = Type()"
        device.node_stats.append(NodeExecStats(name, int(start * 1e6), int((end - start) * 1e6), what))
    if stats.op_spans:  # a traced run's ops in this process, timed
        devices.setdefault(LOCAL_DEVICE, DeviceStepStats(LOCAL_DEVICE)).node_stats.extend(
            NodeExecStats(name, int(start * 1e6), int((end - start) * 1e6), f"{name} = {op_type}()")
            for name, op_type, start, end in stats.op_spans)
    elif stats.order:  # the ops this process ran
        devices.setdefault(LOCAL_DEVICE, DeviceStepStats(LOCAL_DEVICE)).node_stats.extend(
            NodeExecStats(name, timeline_label=name) for name in stats.order)
    metadata.step_stats = StepStats(list(devices.values()))
