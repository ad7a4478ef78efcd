"""``Session``: prune the graph to what the fetches need, plan once per
(fetches, feeds) signature, and run the plan with the dependency-counting
executor in this process.

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     x = tf.placeholder(tf.float32, [None])
...     y = tf.reduce_sum(x * 2.0)
...     with tf.Session() as sess:
...         float(sess.run(y, {x: [1.0, 2.0]}))
6.0
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy
from threadpoolctl import threadpool_limits

from ..context import default_sessions, get_default_session
from ..errors import InvalidArgumentError
from ..graph import Graph, Operation, Tensor, get_default_graph
from ..placement import DeviceSpec
from .devices import gpu_namespace, numpy_namespace, to_namespace
from .executor import RunStats, Schedule, execute, schedule
from .lowering import prune, to_node
from .run_options import fill_run_metadata
from .state import SessionState

__all__ = ["Session", "InteractiveSession", "ConfigProto", "GPUOptions", "GraphOptions", "OptimizerOptions",
           "get_default_session"]

log = logging.getLogger("dflow")
LOCAL_TASK = "/job:localhost/replica:0/task:0"  # the one task of a session that runs in this process


@dataclass
class GPUOptions:
    """TF 1.x's ``ConfigProto().gpu_options`` fields, accepted so that scripts which set them
    (``config.gpu_options.allow_growth = True``) run; CuPy's pool allocates on demand anyway."""

    allow_growth: bool = False
    per_process_gpu_memory_fraction: float = 0.0
    allocator_type: str = ""
    visible_device_list: str = ""
    deferred_deletion_bytes: int = 0
    polling_active_delay_usecs: int = 0
    force_gpu_compatible: bool = False
    experimental: Any = None


@dataclass
class OptimizerOptions:
    """TF 1.x's ``graph_options.optimizer_options``: accepted, no effect (dflow does not rewrite
    graphs)."""

    do_common_subexpression_elimination: bool = False
    do_constant_folding: bool = False
    do_function_inlining: bool = False
    opt_level: int = 0
    global_jit_level: int = 0


@dataclass
class GraphOptions:
    """TF 1.x's ``ConfigProto().graph_options``: accepted, no effect."""

    optimizer_options: OptimizerOptions = field(default_factory=OptimizerOptions)
    enable_bfloat16_sendrecv: bool = False
    build_cost_model: int = 0
    infer_shapes: bool = False
    place_pruned_graph: bool = False
    enable_recv_scheduling: bool = False
    rewrite_options: Any = None


@dataclass
class ConfigProto:
    """Session options under TF 1.x's names. ``gpu_options`` and ``device_count`` are
    accepted, so TF scripts run, and have no effect."""

    # 0: one thread. Measured on 2 cores (CIFAR-10 CNN, batch 100): 2 inter-op threads
    # beside 2 BLAS threads ran 15% slower than ops one at a time.
    inter_op_parallelism_threads: int = 0
    intra_op_parallelism_threads: int = 0  # BLAS threads (process-wide); 0 leaves BLAS alone
    # TF's default: an op on a device this process lacks (/gpu:0 without a GPU, /job:ps) is an
    # error; True runs it on this process's CPU (TF would still refuse another job)
    allow_soft_placement: bool = False
    log_device_placement: bool = False
    # on a cluster: how long a step waits for another task's value (0: ten minutes)
    operation_timeout_in_ms: int = 0
    gpu_options: GPUOptions = field(default_factory=GPUOptions)
    device_count: Any = None
    # accepted for TF scripts (mnist_replica.py's ["/job:ps", "/job:worker/task:1"]): a dflow
    # session already sees, and waits for, only the tasks its graph is placed on
    device_filters: list[str] = field(default_factory=list)
    graph_options: GraphOptions = field(default_factory=GraphOptions)
    rpc_options: Any = None
    isolate_session_state: bool = False
    use_per_session_threads: bool = False
    placement_period: int = 0
    experimental: Any = None

    def __post_init__(self):
        if self.gpu_options is None:
            self.gpu_options = GPUOptions()
        if self.graph_options is None:
            self.graph_options = GraphOptions()
        bad = [f for f in self.device_filters if not (isinstance(f, str) and f.startswith("/job:"))]
        if bad:
            raise ValueError(f"ConfigProto(device_filters=) takes device names like '/job:ps' or "
                             f"'/job:worker/task:1', got {bad}")


class Session:
    """Runs ops and evaluates tensors of one graph, holding the variables' values.

    Parameters
    ----------
    target : str, optional
        Empty for this process (the default), or a Dask scheduler address
        (``cluster.target``) to run on that cluster's tasks: variables live on
        the task they are placed on, ops without a job run on
        ``/job:worker/task:0`` (or, inside a between-graph replica, on its own task).
    graph : Graph, optional
        Defaults to the default graph.
    config : ConfigProto, optional
        ``inter_op_parallelism_threads=1`` runs ops one by one in a fixed order.
    """

    def __init__(self, target: str = "", graph: Graph | None = None, config: ConfigProto | None = None):
        self.graph = graph or get_default_graph()
        self.config = config or ConfigProto()
        self.target = target
        self._cluster = None
        if target:
            from ..distributed.runner import ClusterRunner  # imports distributed: only when asked

            self._cluster = ClusterRunner(target, self.config.operation_timeout_in_ms / 1000)
        threads = self.config.inter_op_parallelism_threads
        self.num_threads = threads if threads > 0 else 1
        self.state = self._new_state()
        self._stats = threading.local()  # per thread: a chief's queue runner runs steps beside the loop's
        self._plans: dict[tuple, Schedule] = {}
        self._closed = False
        self._contexts: list = []
        self._warned_devices: set[str] = set()
        self._namespaces = {"CPU": numpy_namespace}
        if gpu_namespace() is not None:
            self._namespaces["GPU"] = gpu_namespace()
        self._blas_limit = None
        if self.config.intra_op_parallelism_threads > 0:
            self._blas_limit = threadpool_limits(self.config.intra_op_parallelism_threads, "blas")

    # ---- context management -----------------------------------------------
    def __enter__(self) -> Session:
        stack = contextlib.ExitStack()
        stack.enter_context(self.graph.as_default())
        stack.enter_context(default_sessions.pushed(self))
        self._contexts.append(stack)
        return self

    def __exit__(self, *exc) -> None:
        self._contexts.pop().close()
        self.close()

    @property
    def graph_def(self):
        """The session graph's GraphDef, as ``graph.as_graph_def()`` returns it (old scripts pass
        ``sess.graph_def`` to a FileWriter)."""
        return self.graph.as_graph_def()

    def as_default(self):
        return default_sessions.pushed(self)

    def close(self) -> None:
        if self._blas_limit is not None and not self._closed:
            self._blas_limit.restore_original_limits()
        self._closed = True
        self.state.cancel_waits()
        self.state = self._new_state()
        self._plans.clear()
        if self._cluster is not None:
            self._cluster.close()

    def _new_state(self) -> SessionState:
        state = SessionState()
        if self.config.operation_timeout_in_ms > 0:
            state.operation_timeout_s = self.config.operation_timeout_in_ms / 1000
        return state

    @staticmethod
    def reset(target: str, containers=None, config: ConfigProto | None = None) -> None:
        """Forget every variable held by the tasks of the cluster at ``target`` (TF 1.x's
        ``tf.Session.reset``), and every collective's run count; sessions that are open
        there must re-initialize them.

        >>> tf.Session.reset(cluster.target)  # doctest: +SKIP
        """
        from ..distributed.runner import ClusterRunner

        runner = ClusterRunner(target)
        try:
            runner.reset()
        finally:
            runner.close()

    # ---- running ---------------------------------------------------------------
    @property
    def last_run_stats(self) -> RunStats:
        """What this thread's last ``run`` measured (:class:`~dflow.runtime.executor.RunStats`)."""
        return getattr(self._stats, "last", None) or RunStats()

    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        """Evaluate ``fetches`` (a tensor, op, name or nested list/tuple/dict of them).

        Only the ops the fetches need run; fed tensors cut the graph there. Ops
        fetch as ``None``; tensors fetch as NumPy arrays (0-d as NumPy scalars).
        """
        if self._closed:
            raise RuntimeError("Attempted to use a closed Session")
        flat, rebuild = _flatten_fetches(fetches, self.graph)
        feeds = self._convert_feeds(feed_dict or {})
        key = (tuple(f.name for f in flat), tuple(sorted(feeds)))
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._make_plan(flat, feeds)
        stats = RunStats()
        if self._cluster is not None:
            values = self._cluster.run(plan, feeds, stats)
            values.update({name: feeds[name] for name in key[0] if name in feeds})
        else:
            values = execute(plan, feeds, self.state, self._namespaces, self.num_threads, stats)
        self._stats.last = stats
        if run_metadata is not None:
            fill_run_metadata(run_metadata, stats)
        results = [_to_host(values[f.name]) if isinstance(f, Tensor) else None for f in flat]
        return rebuild(results)

    def make_callable(self, fetches, feed_list=None):
        """A function running ``fetches`` with positional feeds (TF 1.x ``make_callable``)."""
        feed_list = list(feed_list or [])
        return lambda *values: self.run(fetches, dict(zip(feed_list, values)))

    # ---- planning ------------------------------------------------------------------
    def describe_placement(self, fetches, feed_dict=None) -> str:
        """Where each op of the step ``fetches`` runs, stage by stage, and (after one run of
        it) how many bytes crossed each link between tasks.

        >>> print(sess.describe_placement(train_op))  # doctest: +SKIP
        /job:ps/task:0 stage 0: 9 ops (w, w/read, ...)
        /job:worker/task:0 stage 1: 40 ops (...)
        /job:ps/task:0 stage 2: 8 ops (GradientDescent/update_w/ApplyGradientDescent, ...)
        bytes per step: /job:ps/task:0 -> /job:worker/task:0: 4,300,840 ...
        """
        if self._cluster is None:
            return "this session runs in one process: every op on its CPU (or GPU)"
        flat, _ = _flatten_fetches(fetches, self.graph)
        feeds = self._convert_feeds(feed_dict or {})
        key = (tuple(f.name for f in flat), tuple(sorted(feeds)))
        plan = self._plans.get(key) or self._make_plan(flat, feeds)
        lines = [plan.describe()]
        traffic = self.last_run_stats.bytes_sent
        if traffic:
            lines.append("bytes per step (last run):")
            lines += [f"  {src} -> {dst}: {count:,}" for (src, dst), count in sorted(traffic.items())]
        return "\n".join(lines)

    def _make_plan(self, fetches: list, feeds: dict) -> Schedule:
        ops = prune(self.graph, fetches, set(feeds))
        for op in ops:
            if op.type == "Placeholder" and op.outputs[0].name not in feeds:
                t = op.outputs[0]
                raise InvalidArgumentError(
                    f"You must feed a value for placeholder tensor '{op.name}' with dtype "
                    f"{t.dtype.name} and shape {t.shape}", op=op.name)
        fetch_names = [f.name for f in fetches if isinstance(f, Tensor)]
        if self._cluster is not None:
            plan = self._cluster.plan(ops, set(feeds), fetch_names, self.config.allow_soft_placement)
            if self.config.log_device_placement:
                log.info("placement:\n%s", plan.describe())
            return plan
        nodes = [to_node(op, self._device_type(op)) for op in ops]
        if self.config.log_device_placement:
            # to stderr in TF's form, as TF prints it whatever the logging setup
            for node in nodes:
                print(f"{node.name}: ({node.type}): /job:localhost/replica:0/task:0/device:"
                      f"{node.device_type}:0", file=sys.stderr)
        return schedule(nodes, set(feeds), fetch_names)

    def _device_type(self, op: Operation) -> str:
        """Where a local session runs ``op``: a GPU op on the GPU when CuPy sees one. An op on a
        device this process (``/job:localhost/replica:0/task:0``) lacks is an error naming the op
        and device, as in TF, unless ``allow_soft_placement``: then it runs on the CPU (logged
        once). TF refuses another job's device (``/job:ps/task:7``) even then; dflow runs it, so a
        cluster's graph can be rehearsed in one process when asked."""
        spec = DeviceSpec.from_string(op.device)
        other_task = (spec.job not in (None, "localhost") or spec.replica not in (None, 0)
                      or spec.task not in (None, 0))
        if spec.device_type == "GPU" and "GPU" in self._namespaces and not other_task:
            return "GPU"
        if spec.device_type in (None, "CPU") and not spec.device_index and not other_task:
            return "CPU"
        if not self.config.allow_soft_placement:
            where = ("This session runs the graph in this process (job localhost): give tf.Session the "
                     "cluster's target (tf.Session(cluster.target)) to run it on that job's tasks"
                     if other_task else "This process has no such device (no GPU, or no CuPy, for /gpu:N)")
            raise InvalidArgumentError(f"{self._unavailable(op)} {where}; ConfigProto("
                                       "allow_soft_placement=True) runs the op on this process's CPU instead",
                                       op=op.name)
        if op.device not in self._warned_devices:
            self._warned_devices.add(op.device)
            log.warning("soft placement: %s is not a device of this process, so its ops run on the CPU",
                        op.device)
        return "GPU" if spec.device_type == "GPU" and "GPU" in self._namespaces else "CPU"

    def _unavailable(self, op: Operation) -> str:
        """TF's words for an op placed on a device this process lacks."""
        devices = [f"{LOCAL_TASK}/device:{kind}:0" for kind in sorted(self._namespaces)]
        return (f"Cannot assign a device for operation {op.name}: Operation was explicitly assigned to "
                f"{op.device} but available devices are [ {', '.join(devices)} ].")

    def _convert_feeds(self, feed_dict: dict) -> dict:
        feeds = {}
        for key, value in feed_dict.items():
            tensor = self.graph.as_graph_element(key)
            if isinstance(tensor, Operation):
                raise TypeError(f"cannot feed operation {tensor.name}; feed one of its output tensors")
            if tensor.dtype.name == "string":
                value = _as_bytes_feed(value)
            try:
                # a copy, so that an assign from a feed does not alias the caller's array
                array = numpy.array(value, dtype=tensor.dtype.as_numpy_dtype, copy=True)
            except (TypeError, ValueError) as e:
                raise InvalidArgumentError(
                    f"cannot feed {type(value).__name__} to {tensor.name} ({tensor.dtype.name}): {e}"
                ) from None
            if not tensor.shape.is_compatible_with(array.shape):
                raise InvalidArgumentError(
                    f"Cannot feed value of shape {array.shape} for tensor '{tensor.name}', "
                    f"which has shape {tensor.shape}", op=tensor.op.name)
            feeds[tensor.name] = array
        return feeds


def _as_bytes_feed(value):
    """TF hands back a fed ``str`` as ``bytes`` (UTF-8), in arrays and lists too."""
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (list, tuple)) or (isinstance(value, numpy.ndarray) and value.dtype.kind in "UO"):
        return numpy.vectorize(lambda v: v.encode() if isinstance(v, str) else v, otypes=[object])(
            numpy.asarray(value, dtype=object))
    return value


class InteractiveSession(Session):
    """A session that makes itself the default on creation (for shells and notebooks)."""

    def __init__(self, target: str = "", graph: Graph | None = None, config: ConfigProto | None = None):
        super().__init__(target, graph, config)
        default_sessions.stack.append(self)

    def close(self) -> None:
        if self in default_sessions.stack:
            default_sessions.stack.remove(self)
        super().close()


def _to_host(value):
    # a copy: the caller may change what it fetched, and a variable's value must not follow
    array = numpy.array(to_namespace(value, numpy_namespace), copy=True)
    return array[()] if array.ndim == 0 else array


def _flatten_fetches(fetches, graph: Graph):
    """Flat list of graph elements, and a function rebuilding the user's structure."""
    if isinstance(fetches, (list, tuple)) and not hasattr(fetches, "_fields"):
        parts = [_flatten_fetches(f, graph) for f in fetches]
        return _join(parts, lambda values: type(fetches)(values))
    if hasattr(fetches, "_fields"):  # namedtuple
        parts = [_flatten_fetches(f, graph) for f in fetches]
        return _join(parts, lambda values: type(fetches)(*values))
    if isinstance(fetches, dict):
        keys = list(fetches)
        parts = [_flatten_fetches(fetches[k], graph) for k in keys]
        return _join(parts, lambda values: type(fetches)(zip(keys, values)))
    if fetches is None:
        raise TypeError("Fetch argument None has invalid type; fetch a tensor, op or name")
    element = graph.as_graph_element(fetches)
    if isinstance(element, Tensor) and element.op.type == "VariableV2":
        element = _variable_value(graph, element)
    return [element], lambda values: values[0]


def _variable_value(graph: Graph, ref: Tensor) -> Tensor:
    """Fetching a variable's reference (``'w:0'``) gives its value, as in TF."""
    for consumer in graph._consumers.get(ref.op.name, ()):
        if consumer.type == "ReadVariable":
            return consumer.outputs[0]
    raise ValueError(f"variable {ref.op.name} has no read op to fetch its value from")


def _join(parts, build):
    flat = [e for elements, _ in parts for e in elements]
    sizes = [len(elements) for elements, _ in parts]

    def rebuild(values):
        out, start = [], 0
        for (_, sub), n in zip(parts, sizes):
            out.append(sub(values[start:start + n]))
            start += n
        return build(out)

    return flat, rebuild
