"""Variables, variable scopes and initializers, as in TensorFlow 1.x.

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     w = tf.Variable(0.0, name="weight")
...     with tf.Session() as sess:
...         _ = sess.run(tf.global_variables_initializer())
...         float(sess.run(w.assign_add(2.0)))
2.0
"""

from __future__ import annotations

import contextlib
import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass

from . import dtypes
from .graph import GraphKeys, Operation, Tensor, TensorOperators, convert_to_tensor, get_default_graph
from .ops import array_ops, linalg_ops, math_ops, state_ops
from .ops.state_ops import glorot_limit

__all__ = [
    "Variable", "get_variable", "variable_scope", "get_variable_scope", "AUTO_REUSE",
    "global_variables", "trainable_variables", "local_variables", "variables_initializer",
    "global_variables_initializer", "local_variables_initializer", "initialize_all_variables",
    "group", "initialize_variables", "initialize_local_variables", "zeros_initializer",
    "ones_initializer", "constant_initializer",
    "random_normal_initializer", "truncated_normal_initializer", "random_uniform_initializer",
    "glorot_uniform_initializer", "report_uninitialized_variables", "variance_scaling_initializer",
    "glorot_normal_initializer", "orthogonal_initializer",
]


class Variable(TensorOperators):
    """A tensor whose value persists across ``Session.run`` calls.

    Creates the ops ``NAME`` (the variable), ``NAME/initial_value``,
    ``NAME/Assign`` (the initializer) and ``NAME/read`` (what consumers use).
    """

    def __init__(self, initial_value=None, trainable=True, collections=None, validate_shape=True,
                 name=None, dtype=None, expected_shape=None):
        if initial_value is None:
            raise ValueError("tf.Variable needs an initial_value (a value, tensor or callable)")
        graph = get_default_graph()
        with graph.name_scope(name or "Variable") as scope, graph.control_dependencies(None):
            initializer_ops: list[Operation] = []
            with graph.name_scope("Initializer"):
                if callable(initial_value):
                    # as TF: built outside every device scope, then moved beside the variable
                    with graph.device(None), graph.device(_recorder(initializer_ops)):
                        initial_value = initial_value()
                initial = convert_to_tensor(initial_value, dtype=dtype, name="initial_value")
            if initial.dtype != (dtypes.as_dtype(dtype) if dtype else initial.dtype):
                raise TypeError(f"initial value of {scope[:-1]} has dtype {initial.dtype.name}")
            shape = initial._shape if validate_shape else None
            attrs = {"shape": shape, "dtype": initial.dtype, "shared_name": scope[:-1]}
            self._variable = graph.create_op("VariableV2", [], attrs, name=scope).outputs[0]
            for op in initializer_ops:
                op._set_device(self._variable.device)
            # the state ops live with the variable: on its parameter server, not the worker
            with graph.colocate_with(self._variable):
                self.initializer = state_ops.assign(
                    self._variable, initial, validate_shape=validate_shape, name="Assign").op
                self._snapshot = graph.create_op("ReadVariable", [self._variable], name="read").outputs[0]
        self.initial_value = initial
        self.trainable = trainable
        if collections is None:
            collections = [GraphKeys.GLOBAL_VARIABLES]
        if trainable and GraphKeys.TRAINABLE_VARIABLES not in collections:
            collections = list(collections) + [GraphKeys.TRAINABLE_VARIABLES]
        graph.add_to_collections(collections, self)

    # what a fetch, a feed or an op input sees
    def _as_graph_element(self) -> Tensor:
        return self._snapshot

    def graph_def_entry(self) -> dict:
        """This variable in a collection of ``graph.as_graph_def()``."""
        return {"variable": self.op.name, "initializer": self.initializer.name,
                "initial_value": self.initial_value.name, "trainable": self.trainable}

    @property
    def name(self) -> str:
        return self._variable.name

    @property
    def op(self) -> Operation:
        return self._variable.op

    @property
    def shared_name(self) -> str:
        return self._variable.op.attrs["shared_name"]

    @property
    def dtype(self):
        return self._variable.dtype

    @property
    def shape(self):
        return self._variable.shape

    def get_shape(self):
        return self.shape

    @property
    def graph(self):
        return self._variable.graph

    @property
    def device(self) -> str:
        return self._variable.op.device

    def value(self) -> Tensor:
        """The variable's value, read by the one read op made with it."""
        return self._snapshot

    def read_value(self) -> Tensor:
        """A new read of the variable, under the control dependencies open now (so it sees
        the updates they name, where ``value()`` may have been read before them)."""
        graph = self.graph
        with graph.colocate_with(self._variable.op):
            return graph.create_op("ReadVariable", [self._variable], name="read").outputs[0]

    def assign(self, value, use_locking=None, name=None, read_value=True):
        return state_ops.assign(self, value, name=name)

    def assign_add(self, delta, use_locking=None, name=None, read_value=True):
        return state_ops.assign_add(self, delta, name=name)

    def assign_sub(self, delta, use_locking=None, name=None, read_value=True):
        return state_ops.assign_sub(self, delta, name=name)

    def eval(self, session=None):
        return self._snapshot.eval(session=session)

    def initialized_value(self) -> Tensor:
        """The value the initializer gives (to initialize another variable from this one)."""
        return self.initial_value

    def load(self, value, session=None):
        """Write ``value`` into the variable through ``session`` (no new ops per call)."""
        from .context import session_or_default

        session = session_or_default(session, "load a variable's value")
        session.run(self.initializer, {self.initial_value: value})

    def __repr__(self) -> str:
        return f"<tf.Variable '{self.name}' shape={self.shape} dtype={self.dtype.name}>"


def _recorder(ops: list[Operation]) -> Callable[[Operation], str]:
    """A device function that notes each op created under it and leaves its device alone."""

    def record(op: Operation) -> str:
        ops.append(op)
        return op.device

    return record


# ---- collections and initialization -------------------------------------------------
def global_variables(scope=None) -> list[Variable]:
    return get_default_graph().get_collection(GraphKeys.GLOBAL_VARIABLES, scope)


def trainable_variables(scope=None) -> list[Variable]:
    return get_default_graph().get_collection(GraphKeys.TRAINABLE_VARIABLES, scope)


def local_variables(scope=None) -> list[Variable]:
    return get_default_graph().get_collection(GraphKeys.LOCAL_VARIABLES, scope)


def group(*inputs, name=None) -> Operation:
    """One op that runs after all of ``inputs``."""
    ops = [x.op if isinstance(x, (Tensor, Variable)) else x for x in _flatten(inputs)]
    with get_default_graph().control_dependencies(ops):
        return array_ops.no_op(name=name or "group_deps")


def _flatten(items):
    for item in items:
        if isinstance(item, (list, tuple)):
            yield from _flatten(item)
        else:
            yield item


def variables_initializer(var_list, name="init") -> Operation:
    """An op that runs the initializers of ``var_list``."""
    return group(*[v.initializer for v in var_list], name=name)


def global_variables_initializer() -> Operation:
    """An op that initializes every global variable of the default graph."""
    return variables_initializer(global_variables())


def local_variables_initializer() -> Operation:
    return variables_initializer(local_variables(), name="init_local")


initialize_all_variables = global_variables_initializer
initialize_variables = variables_initializer  # TF 1.x's deprecated spellings
initialize_local_variables = local_variables_initializer


def report_uninitialized_variables(var_list=None, name="report_uninitialized_variables") -> Tensor:
    """The names of the variables of ``var_list`` (default: the global variables) not yet
    initialized, as a 1-D string tensor (fetched as bytes, as in TF); empty when all are.
    Each variable is checked where it lives.

    >>> import dflow as tf
    >>> with tf.Graph().as_default():
    ...     a, b = tf.Variable(1.0, name="a"), tf.Variable(2.0, name="b")
    ...     with tf.Session() as sess:
    ...         _ = sess.run(a.initializer)
    ...         sess.run(tf.report_uninitialized_variables()).tolist()
    [b'b']
    """
    variables = global_variables() if var_list is None else list(var_list)
    if not variables:
        return _report([], [], name)
    flags = array_ops.stack([state_ops.is_variable_initialized(v) for v in variables])
    return _report([flags], [v.op.name for v in variables], name)


def _report(inputs, names, name) -> Tensor:
    return get_default_graph().create_op("ReportUninitialized", inputs, {"names": tuple(names)},
                                         name=name).outputs[0]


# ---- initializers --------------------------------------------------------------------
@dataclass
class Initializer:
    """Callable ``(shape, dtype) -> Tensor``, as TF 1.x initializers."""

    build: Callable
    dtype: object = dtypes.float32

    def __call__(self, shape, dtype=None, partition_info=None):
        dims = array_ops.static_shape(shape)
        if dims is None or None in dims:
            raise ValueError(f"an initializer needs a fully known shape, got {dims}")
        return self.build(dims, dtypes.as_dtype(dtype or self.dtype))


def zeros_initializer(dtype=dtypes.float32):
    return Initializer(lambda shape, dt: array_ops.zeros(shape, dt), dtype)


def ones_initializer(dtype=dtypes.float32):
    return Initializer(lambda shape, dt: array_ops.ones(shape, dt), dtype)


def constant_initializer(value=0, dtype=dtypes.float32):
    return Initializer(lambda shape, dt: array_ops.constant(value, dt, shape=shape), dtype)


def random_normal_initializer(mean=0.0, stddev=1.0, seed=None, dtype=dtypes.float32):
    return Initializer(lambda shape, dt: state_ops.random_normal(shape, mean, stddev, dt, seed), dtype)


def truncated_normal_initializer(mean=0.0, stddev=1.0, seed=None, dtype=dtypes.float32):
    return Initializer(lambda shape, dt: state_ops.truncated_normal(shape, mean, stddev, dt, seed), dtype)


def random_uniform_initializer(minval=0.0, maxval=1.0, seed=None, dtype=dtypes.float32):
    return Initializer(lambda shape, dt: state_ops.random_uniform(shape, minval, maxval, dt, seed), dtype)


def glorot_uniform_initializer(seed=None, dtype=dtypes.float32):
    """Uniform in +-sqrt(6 / (fan_in + fan_out)): ``get_variable``'s default."""

    def build(shape, dt):
        limit = glorot_limit(shape)
        return state_ops.random_uniform(shape, -limit, limit, dt, seed)

    return Initializer(build, dtype)



def fans(shape) -> tuple[float, float]:
    """TF's fan-in and fan-out (a conv kernel's window multiplies both)."""
    if not shape:
        return 1.0, 1.0
    if len(shape) == 1:
        return float(shape[0]), float(shape[0])
    receptive = math.prod(shape[:-2])
    return float(shape[-2] * receptive), float(shape[-1] * receptive)


def variance_scaling_initializer(scale=1.0, mode="fan_in", distribution="truncated_normal", seed=None,
                                 dtype=dtypes.float32):
    """Samples of variance ``scale / n`` (``n``: ``mode``'s fan-in, fan-out or their mean), from a
    normal truncated at 2 stddevs (rescaled so the variance holds), a normal, or a uniform."""
    if scale <= 0.0:
        raise ValueError(f"`scale` must be a positive float, got {scale}")
    if mode not in ("fan_in", "fan_out", "fan_avg"):
        raise ValueError(f"Invalid `mode` argument: {mode!r} (fan_in, fan_out or fan_avg)")
    distribution = distribution.lower()
    if distribution not in ("normal", "truncated_normal", "untruncated_normal", "uniform"):
        raise ValueError(f"Invalid `distribution` argument: {distribution!r}")

    def build(shape, dt):
        fan_in, fan_out = fans(shape)
        n = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2.0}[mode]
        variance = scale / max(1.0, n)
        if distribution == "uniform":
            limit = math.sqrt(3.0 * variance)
            return state_ops.random_uniform(shape, -limit, limit, dt, seed)
        if distribution == "untruncated_normal":
            return state_ops.random_normal(shape, 0.0, math.sqrt(variance), dt, seed)
        # the stddev of a unit normal truncated to [-2, 2] is 0.8796...: divide it out
        return state_ops.truncated_normal(shape, 0.0, math.sqrt(variance) / 0.87962566103423978, dt, seed)

    return Initializer(build, dtype)


def orthogonal_initializer(gain=1.0, seed=None, dtype=dtypes.float32):
    """A random orthogonal matrix times ``gain`` (Saxe et al.), as TF 1.x makes it: the Q of a
    normal matrix's QR, its columns' signs those of R's diagonal; a kernel of more dimensions is
    the matrix of (product of the leading dimensions) x (the last one), reshaped.

    >>> import numpy as np, dflow as tf
    >>> with tf.Graph().as_default(), tf.Session() as sess:
    ...     w = tf.get_variable("w", [4, 3], initializer=tf.orthogonal_initializer(seed=1))
    ...     sess.run(tf.global_variables_initializer())
    ...     value = sess.run(w)
    >>> np.allclose(value.T @ value, np.eye(3), atol=1e-5)
    True
    """

    def build(shape, dt):
        if len(shape) < 2:
            raise ValueError(f"The tensor to initialize must be at least two-dimensional, got {list(shape)}")
        rows, columns = math.prod(shape[:-1]), shape[-1]
        tall = (max(rows, columns), min(rows, columns))
        q, r = linalg_ops.qr(state_ops.random_normal(tall, 0.0, 1.0, dt, seed))
        q = q * math_ops.sign(linalg_ops.matrix_diag_part(r))
        if rows < columns:
            q = array_ops.transpose(q)
        return gain * array_ops.reshape(q, shape)

    return Initializer(build, dtype)


def glorot_normal_initializer(seed=None, dtype=dtypes.float32):
    """Truncated normal of variance ``2 / (fan_in + fan_out)`` (Glorot & Bengio)."""
    return variance_scaling_initializer(1.0, "fan_avg", "truncated_normal", seed, dtype)

# ---- variable scopes and get_variable ------------------------------------------------
class _ReuseAuto:
    def __repr__(self):
        return "tf.AUTO_REUSE"


AUTO_REUSE = _ReuseAuto()


@dataclass
class VariableScope:
    """Prefix, reuse flag and default initializer for ``get_variable``."""

    name: str
    reuse: object = False
    initializer: Callable | None = None

    def reuse_variables(self) -> None:
        self.reuse = True


def _scope_stack(graph) -> list[VariableScope]:
    return graph._variable_scope_stack


def get_variable_scope() -> VariableScope:
    stack = _scope_stack(get_default_graph())
    if not stack:
        stack.append(VariableScope(""))
    return stack[-1]


# graph -> {full variable scope name: times opened}, as TF's variable scope store counts them
_opened_scopes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _unique_scope_name(opened: dict, outer: str, prefix: str) -> str:
    """TF's ``default_name`` rule: ``prefix``, else ``prefix_1``, ``prefix_2``... the first
    not opened yet inside ``outer`` (since ``outer`` was last entered)."""
    name, index = prefix, 0
    while opened.get(f"{outer}/{name}" if outer else name):
        index += 1
        name = f"{prefix}_{index}"
    return name


@contextlib.contextmanager
def variable_scope(name_or_scope, default_name=None, values=None, initializer=None, reuse=None):
    """Prefix ``get_variable`` names (and op names): ``with tf.variable_scope('conv1'):``.

    With ``name_or_scope=None``, ``default_name`` made unique (``dense``, ``dense_1``...)
    among the scopes opened inside the enclosing scope since it was entered, as TF does:
    re-entering ``model`` with ``reuse=True`` numbers its unnamed sub-scopes from 0 again.
    """
    graph = get_default_graph()
    outer = get_variable_scope()
    opened = _opened_scopes.setdefault(graph, {})
    if isinstance(name_or_scope, VariableScope):
        name, full = name_or_scope.name.rsplit("/", 1)[-1], name_or_scope.name
    else:
        if not name_or_scope and default_name is None:
            raise TypeError("variable_scope needs a name_or_scope, or a default_name when it is None")
        name = name_or_scope or _unique_scope_name(opened, outer.name, default_name)
        full = f"{outer.name}/{name}" if outer.name else name
    opened[full] = opened.get(full, 0) + 1
    saved = dict(opened) if isinstance(name_or_scope, VariableScope) else None
    inherited = outer.reuse if outer.reuse is not False else False
    scope = VariableScope(full, reuse if reuse else inherited, initializer or outer.initializer)
    _scope_stack(graph).append(scope)
    try:
        with graph.name_scope(name):
            yield scope
    finally:
        _scope_stack(graph).pop()
        if saved is not None:  # TF: a re-entered scope object restores the counts it found
            opened.clear()
            opened.update(saved)
        else:  # leaving a scope closes its sub-scopes: entering it again starts them over
            for key in opened:
                if key.startswith(full + "/"):
                    opened[key] = 0


def get_variable(name, shape=None, dtype=None, initializer=None, regularizer=None,
                 trainable=True, collections=None, caching_device=None, partitioner=None,
                 validate_shape=True, use_resource=None, custom_getter=None, constraint=None,
                 **_ignored) -> Variable:
    """Create a variable ``scope/name``, or return it when the scope reuses variables.

    ``dtype`` takes any TF spelling (``tf.float32``, ``"float"``, ``float``); the default is the
    dtype of a tensor ``initializer``, else float32. ``partitioner`` is not supported."""
    if partitioner is not None:
        raise NotImplementedError("get_variable(partitioner=...): partitioned variables are not "
                                  "supported by dflow; leave partitioner unset")
    if trainable is None:
        trainable = True
    if dtype is None:
        dtype = initializer.dtype if isinstance(initializer, (Tensor, Variable)) else dtypes.float32
    if shape is not None:
        shape = array_ops.static_shape(shape)
    graph = get_default_graph()
    scope = get_variable_scope()
    full = f"{scope.name}/{name}" if scope.name else name
    existing = graph._variables_by_name.get(full)
    if existing is not None:
        if scope.reuse is False:
            raise ValueError(f"Variable {full} already exists, disallowed. Did you mean to set "
                             "reuse=True or reuse=tf.AUTO_REUSE in variable_scope?")
        if shape is not None and not existing.shape.is_compatible_with(shape):
            raise ValueError(f"Variable {full} has shape {existing.shape}, asked for {tuple(shape)}")
        return existing
    if scope.reuse is True:
        raise ValueError(f"Variable {full} does not exist, or was not created with get_variable(); "
                         "set reuse=tf.AUTO_REUSE to create it on first use")
    if initializer is None:  # (not `or`: a Tensor initializer has no truth value)
        initializer = scope.initializer
    dtype = dtypes.as_dtype(dtype)
    if initializer is None:
        initializer = glorot_uniform_initializer() if dtype.is_floating else zeros_initializer()
    if callable(initializer):
        if shape is None:
            raise ValueError(f"get_variable({full!r}) with an initializer needs a shape")
        initial = lambda: initializer(shape, dtype)  # noqa: E731 - built inside the variable's scope
    else:
        initial = initializer
    # the variable is named by its variable scope, whatever name scope is open now
    with graph.name_scope(scope.name + "/" if scope.name else None):
        var = Variable(initial, trainable=trainable, collections=collections, name=name, dtype=dtype,
                       validate_shape=validate_shape)
    graph._variables_by_name[full] = var
    if regularizer is not None:
        with graph.name_scope(full + "/Regularizer/"):
            loss = regularizer(var)
        if loss is not None:
            graph.add_to_collection(GraphKeys.REGULARIZATION_LOSSES, loss)
    return var
