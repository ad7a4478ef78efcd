"""``tensorflow.python.client.timeline``: a traced step as a Chrome trace (``chrome://tracing``,
Perfetto), as TF 1.x scripts write it.

>>> import json
>>> import dflow as tf
>>> from dflow.python.client import timeline
>>> with tf.Graph().as_default():
...     y = tf.matmul(tf.ones([4, 4]), tf.ones([4, 4]), name="y")
...     meta = tf.RunMetadata()
...     with tf.Session() as sess:
...         _ = sess.run(y, options=tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE),
...                      run_metadata=meta)
>>> trace = json.loads(timeline.Timeline(meta.step_stats).generate_chrome_trace_format())
>>> [(e["name"], e["args"]["name"]) for e in trace["traceEvents"] if e["ph"] == "X"][-1]
('MatMul', 'y')
"""

from __future__ import annotations

import json
import re

__all__ = ["Timeline"]

_LABEL = re.compile(r"(?P<name>.*) = (?P<op>[^(]*)\(.*\)")  # TF's "name = Op(inputs)"


class Timeline:
    """The ops of ``step_stats`` (``RunMetadata.step_stats`` of a traced run) as trace events:
    one process row per device or task, one complete event per op (its type as the event's
    name, as TF's timeline shows it) or per timed span of a cluster's task (its compute and
    waits)."""

    def __init__(self, step_stats, graph=None):
        self._step_stats = step_stats

    def generate_chrome_trace_format(self, show_dataflow: bool = True, show_memory: bool = False) -> str:
        """The Chrome trace JSON text (``show_dataflow`` and ``show_memory`` are accepted: dflow
        records neither the tensors' flow between ops nor their allocations)."""
        events = []
        for pid, device in enumerate(self._step_stats.dev_stats):
            events.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": device.device}})
            for node in device.node_stats:
                label = _LABEL.fullmatch(node.timeline_label or "")
                events.append({
                    "name": label["op"] if label else node.node_name, "ph": "X", "cat": "Op",
                    "pid": pid, "tid": 0, "ts": node.all_start_micros, "dur": node.all_end_rel_micros,
                    "args": {"name": node.node_name, "op": label["op"] if label else node.node_name}})
        return json.dumps({"traceEvents": events})
