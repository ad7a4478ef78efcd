"""``tf.summary``: summary ops and the ``FileWriter`` that writes them for TensorBoard.

As in TF 1.x, a summary op's value is a serialized ``Summary`` protocol buffer
(``bytes``), and a ``FileWriter`` appends it to an event file that TensorBoard
(and ``tbparse``) read:

>>> import dflow as tf, tempfile
>>> with tf.Graph().as_default():
...     loss = tf.placeholder(tf.float32, [], name="loss")
...     summary = tf.summary.scalar("loss", loss)
...     merged = tf.summary.merge_all()
...     with tf.Session() as sess, tf.summary.FileWriter(tempfile.mkdtemp(), sess.graph) as writer:
...         for step in range(3):
...             writer.add_summary(sess.run(merged, {loss: 1.0 / (step + 1)}), step)

The event files are written with tensorboardX's record writer (TensorFlow's
record format and ``event.proto``); ``tf.Summary`` and its kin are its protobuf
classes, loaded on first use.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
import weakref

from .graph import Graph
from .ops.summary_ops import audio, histogram, image, merge, merge_all, scalar, tensor_summary, text

# (and the protobuf classes of PROTO_CLASSES, through the module's __getattr__)
__all__ = ["scalar", "histogram", "image", "audio", "text", "tensor_summary", "merge", "merge_all",
           "FileWriter", "FileWriterCache"]

log = logging.getLogger("dflow")

# tf.Summary and the other protobuf classes, by the module of tensorboardX.proto defining them
PROTO_CLASSES = {"Summary": "summary_pb2", "SummaryDescription": "summary_pb2",
                 "SummaryMetadata": "summary_pb2", "HistogramProto": "summary_pb2",
                 "Event": "event_pb2", "SessionLog": "event_pb2", "TaggedRunMetadata": "event_pb2"}

# names TF 0.x had and TF 1.0 removed: what replaced each
REMOVED_NAMES = {"scalar_summary": "tf.summary.scalar", "histogram_summary": "tf.summary.histogram",
                 "image_summary": "tf.summary.image", "audio_summary": "tf.summary.audio",
                 "merge_summary": "tf.summary.merge", "merge_all_summaries": "tf.summary.merge_all"}
REMOVED_TRAIN_NAMES = {"SummaryWriter": "tf.summary.FileWriter",
                       "SummaryWriterCache": "tf.summary.FileWriterCache"}


def proto_class(name: str):
    """One of :data:`PROTO_CLASSES` (imports tensorboardX, 0.2 s, on the first call)."""
    import importlib

    return getattr(importlib.import_module(f"tensorboardX.proto.{PROTO_CLASSES[name]}"), name)


def removed_name_error(name: str, where: str = "tf") -> AttributeError:
    use = (REMOVED_TRAIN_NAMES if where == "tf.train" else REMOVED_NAMES)[name]
    return AttributeError(f"{where}.{name} is TensorFlow 0.x API, removed in TF 1.0; dflow does not "
                          f"support it: use {use}")


def __getattr__(name: str):
    if name in PROTO_CLASSES:
        return proto_class(name)
    raise AttributeError(f"module 'dflow.summary' has no attribute {name!r}")


_file_numbers = itertools.count()


class FileWriter:
    """Writes summaries (and the graph) to an event file in ``logdir`` for TensorBoard.

    ``add_summary`` takes what a summary op returned from ``sess.run`` (serialized
    ``bytes``) or a ``tf.Summary`` built by hand. Events are written at once and
    flushed every ``max_queue`` events, every ``flush_secs`` seconds (checked at
    each event), by :meth:`flush` and by :meth:`close` (also at exit).

    >>> import os, tempfile, dflow as tf
    >>> logdir = tempfile.mkdtemp()
    >>> with tf.Graph().as_default(), tf.Session() as sess:
    ...     _ = tf.summary.scalar("loss", tf.constant(0.5))
    ...     merged = tf.summary.merge_all()
    ...     writer = tf.summary.FileWriter(logdir, sess.graph)
    ...     writer.add_summary(sess.run(merged), global_step=1)
    ...     writer.close()
    >>> [name.startswith("events.out.tfevents") for name in os.listdir(logdir)]
    [True]
    """

    def __init__(self, logdir: str, graph: Graph | None = None, max_queue: int = 10,
                 flush_secs: float = 120, graph_def=None, filename_suffix: str | None = None,
                 session=None):
        if session is not None:
            raise TypeError("FileWriter(session=...) is TF 2's summary writer resource; dflow does "
                            "not support it: pass logdir (and the graph)")
        self._logdir = str(logdir)
        self._max_queue, self._flush_secs = max(int(max_queue), 1), float(flush_secs)
        self._suffix = filename_suffix
        self._lock = threading.Lock()
        self._events = None
        self._noted: set[str] = set()
        self.reopen()
        if graph is not None or graph_def is not None:
            self.add_graph(graph, graph_def=graph_def)

    def get_logdir(self) -> str:
        return self._logdir

    def reopen(self) -> None:
        """After :meth:`close`, write further events to a new file in the same directory."""
        from tensorboardX.event_file_writer import EventsWriter
        from tensorboardX.record_writer import directory_check

        with self._lock:
            if self._events is not None:
                return
            directory_check(self._logdir)
            # the file is named by the second it opens in: a pid and a counter keep two files
            # opened in one second in one directory (reopen, a train and a test writer) apart
            suffix = self._suffix if self._suffix is not None else f".{os.getpid()}.{next(_file_numbers)}"
            self._events = EventsWriter(os.path.join(self._logdir, "events"), suffix)
            self._unflushed, self._last_flush = 0, time.monotonic()
            self._finalizer = weakref.finalize(self, self._events.close)  # flushed at exit too

    def add_event(self, event) -> None:
        """Append a ``tf.Event``; its ``wall_time`` is now unless set."""
        if not event.wall_time:
            event.wall_time = time.time()
        with self._lock:
            if self._events is None:
                return  # TF's writer drops events after close() too, until reopen()
            self._events.write_event(event)
            self._unflushed += 1
            if self._unflushed >= self._max_queue or time.monotonic() - self._last_flush >= self._flush_secs:
                self._flush_locked()

    def add_summary(self, summary, global_step=None) -> None:
        """Append a summary: serialized bytes (``sess.run(summary_op)``) or a ``tf.Summary``."""
        Summary = proto_class("Summary")
        if isinstance(summary, (bytes, bytearray, memoryview)) or hasattr(summary, "item"):
            summary = Summary.FromString(_summary_bytes(summary))
        elif not isinstance(summary, Summary):
            raise TypeError(f"add_summary takes a tf.Summary or the bytes a summary op returns, got "
                            f"{type(summary).__name__}")
        self.add_event(self._event(global_step, summary=summary))

    def add_session_log(self, session_log, global_step=None) -> None:
        """Append a ``tf.SessionLog`` (``START`` after a restart, so TensorBoard drops later steps)."""
        self.add_event(self._event(global_step, session_log=session_log))

    def add_graph(self, graph: Graph | None, global_step=None, graph_def=None) -> None:
        """Write ``graph`` (or a dflow ``graph_def`` dict) as a GraphDef: TensorBoard's Graphs tab."""
        if isinstance(graph, dict):  # a dflow graph_def given as the graph, as TF 1.x allowed
            graph, graph_def = None, graph
        if graph is None and graph_def is not None:
            from .graph_io import import_graph_def

            graph = import_graph_def(graph_def)
        if not isinstance(graph, Graph):
            raise TypeError(f"add_graph takes a tf.Graph (sess.graph), got {type(graph).__name__}")
        self.add_event(self._event(global_step, graph_def=graph_proto(graph).SerializeToString()))

    def add_run_metadata(self, run_metadata, tag: str, global_step=None) -> None:
        """Accepted for TF 1.x scripts; dflow records no step stats, so nothing is written."""
        self._note_once("add_run_metadata", "FileWriter.add_run_metadata: dflow records no run "
                        "metadata (step stats), so nothing is written; the summaries are")

    def add_meta_graph(self, meta_graph_def, global_step=None) -> None:
        """Accepted for TF 1.x scripts; dflow has no MetaGraphDef, so nothing is written."""
        self._note_once("add_meta_graph", "FileWriter.add_meta_graph: dflow has no MetaGraphDef; "
                        "nothing is written (add_graph writes the graph)")

    def flush(self) -> None:
        """Write every event added so far to disk."""
        with self._lock:
            if self._events is not None:
                self._flush_locked()

    def close(self) -> None:
        """Flush and close the event file; :meth:`reopen` starts a new one."""
        with self._lock:
            if self._events is not None:
                self._finalizer()
                self._events = None

    def __enter__(self) -> FileWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _flush_locked(self) -> None:
        self._events.flush()
        self._unflushed, self._last_flush = 0, time.monotonic()

    def _event(self, global_step, **fields):
        event = proto_class("Event")(**fields)
        if global_step is not None:
            event.step = int(global_step)
        return event

    def _note_once(self, key: str, message: str) -> None:
        if key not in self._noted:
            self._noted.add(key)
            log.info(message)


def _summary_bytes(value) -> bytes:
    """The bytes of what a summary op fetched: ``bytes``, or a NumPy scalar/0-d array of them."""
    if hasattr(value, "item") and not isinstance(value, (bytes, bytearray)):
        value = value.item()
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError(f"add_summary takes a tf.Summary or the bytes a summary op returns, got "
                        f"{type(value).__name__}")
    return bytes(value)


def graph_proto(graph: Graph):
    """``graph`` as TensorFlow's GraphDef protocol buffer (ops, inputs, devices, output shapes),
    which TensorBoard draws."""
    from tensorboardX.proto import attr_value_pb2, graph_pb2, node_def_pb2, versions_pb2

    nodes = []
    for op in graph.get_operations():
        inputs = [t.op.name if t.value_index == 0 else t.name for t in op.inputs]
        inputs += [f"^{c.name}" for c in op.control_inputs]
        shapes = attr_value_pb2.AttrValue(list=attr_value_pb2.AttrValue.ListValue(
            shape=[_shape_proto(t.shape) for t in op.outputs]))
        nodes.append(node_def_pb2.NodeDef(name=op.name, op=op.type, input=inputs, device=op.device,
                                          attr={"_output_shapes": shapes}))
    return graph_pb2.GraphDef(node=nodes, versions=versions_pb2.VersionDef(producer=22))


def _shape_proto(shape):
    from tensorboardX.proto import tensor_shape_pb2

    if shape.dims is None:
        return tensor_shape_pb2.TensorShapeProto(unknown_rank=True)
    return tensor_shape_pb2.TensorShapeProto(
        dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=-1 if d is None else d) for d in shape.dims])


class FileWriterCache:
    """One :class:`FileWriter` per log directory, shared by the code that asks for it."""

    _writers: dict[str, FileWriter] = {}
    _lock = threading.Lock()

    @staticmethod
    def get(logdir: str) -> FileWriter:
        with FileWriterCache._lock:
            key = os.path.abspath(str(logdir))
            if key not in FileWriterCache._writers:
                FileWriterCache._writers[key] = FileWriter(logdir)
            return FileWriterCache._writers[key]

    @staticmethod
    def clear() -> None:
        """Close and forget every cached writer."""
        with FileWriterCache._lock:
            for writer in FileWriterCache._writers.values():
                writer.close()
            FileWriterCache._writers.clear()

