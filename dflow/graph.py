"""Graphs of operations, as in TensorFlow 1.x.

A :class:`Graph` holds :class:`Operation` s; an operation's outputs are
:class:`Tensor` s, symbolic handles that other operations take as inputs.
Underneath, the graph is a ``networkx.MultiDiGraph`` (ops are nodes, tensors
are edges keyed ``(output_index, input_index)``), which serves analysis,
export to DOT, and plain-data (JSON) round trips.

>>> import dflow as tf
>>> g = tf.Graph()
>>> with g.as_default():
...     a = tf.constant(2.0, name="a")
...     b = a * 3.0
>>> b.name, b.op.type, b.graph is g
('mul:0', 'Mul', True)
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from . import dtypes, plain_values
from .context import default_graphs, session_or_default
from .ops.registry import ShapeError, Spec, get_opdef
from .ops.shape_rules import fmt
from .placement import DeviceSpec

__all__ = [
    "Graph", "Operation", "Tensor", "TensorShape", "Dimension", "as_shape", "as_dimension",
    "unknown_shape", "GraphKeys", "get_default_graph",
    "reset_default_graph", "set_random_seed", "get_collection", "add_to_collection", "name_scope",
    "control_dependencies", "device", "colocate_with",
    "convert_to_tensor",
]
__all__ += ["NodeDef"]

GRAPH_FORMAT_VERSION = 1  # of as_graph_def()'s plain data


class GraphKeys:
    """Standard collection names."""

    GLOBAL_VARIABLES = "variables"
    TRAINABLE_VARIABLES = "trainable_variables"
    LOCAL_VARIABLES = "local_variables"
    LOCAL_INIT_OP = "local_init_op"  # run by every replica once the global variables are ready
    GLOBAL_STEP = "global_step"
    LOSSES = "losses"
    REGULARIZATION_LOSSES = "regularization_losses"
    UPDATE_OPS = "update_ops"
    MOVING_AVERAGE_VARIABLES = "moving_average_variables"  # ExponentialMovingAverage.apply's variables
    METRIC_VARIABLES = "metric_variables"  # tf.metrics' local totals and counts
    WEIGHTS = "weights"  # tf.contrib.layers.apply_regularization's default list
    TRAIN_OP = "train_op"
    SUMMARIES = "summaries"
    QUEUE_RUNNERS = "queue_runners"  # tf.train.start_queue_runners starts these
    TABLE_INITIALIZERS = "table_initializer"  # lookup tables' initializers: tf.tables_initializer()
    ASSET_FILEPATHS = "asset_filepaths"  # the files a SavedModel copies into its assets/


class Dimension:
    """One dim of a :class:`TensorShape`, as TF 1.x's: ``shape[1].value`` is an int or None.

    Known dims behave as their int (``int(d)``, ``d * 2``, ``d == 3``, ``range(d)``, a dim of
    a NumPy shape); arithmetic with an unknown dim is unknown.

    >>> d = Dimension(784)
    >>> d.value, int(d // 2), (d + Dimension(None)).value
    (784, 392, None)
    """

    __slots__ = ("_value",)

    def __init__(self, value):
        if isinstance(value, Dimension):
            value = value.value
        if value is not None:
            if hasattr(value, "_as_graph_element") or isinstance(value, Tensor):
                raise TypeError(f"a Dimension is a static size, got the tensor {value!r}; "
                                "use tf.shape(x)[i] for a size known only at run time")
            integer = int(value)
            if integer != value or integer < 0:
                raise ValueError(f"a Dimension must be a non-negative int or None, got {value!r}")
            value = integer
        self._value = value

    @property
    def value(self) -> int | None:
        return self._value

    def is_compatible_with(self, other) -> bool:
        other = as_dimension(other)
        return self._value is None or other.value is None or self._value == other.value

    def assert_is_compatible_with(self, other) -> None:
        if not self.is_compatible_with(other):
            raise ValueError(f"Dimensions {self} and {other} are not compatible")

    def merge_with(self, other) -> Dimension:
        """The more specific of two compatible dims."""
        other = as_dimension(other)
        self.assert_is_compatible_with(other)
        return Dimension(self._value if self._value is not None else other.value)

    def __int__(self) -> int:
        if self._value is None:
            raise TypeError("int() of an unknown Dimension (its size is known only at run time); "
                            "use tf.shape(x)[i]")
        return self._value

    __index__ = __int__

    def __float__(self) -> float:
        return float(int(self))

    def _apply(self, other, fn) -> Dimension:
        other_value = _dim_value(other)
        if self._value is None or other_value is None:
            return Dimension(None)
        return Dimension(fn(self._value, other_value))

    def __add__(self, other):
        return self._apply(other, lambda a, b: a + b)

    __radd__ = __add__

    def __sub__(self, other):
        return self._apply(other, lambda a, b: a - b)

    def __rsub__(self, other):
        return self._apply(other, lambda a, b: b - a)

    def __mul__(self, other):
        return self._apply(other, lambda a, b: a * b)

    __rmul__ = __mul__

    def __floordiv__(self, other):
        return self._apply(other, lambda a, b: a // b)

    def __rfloordiv__(self, other):
        return self._apply(other, lambda a, b: b // a)

    def __mod__(self, other):
        return self._apply(other, lambda a, b: a % b)

    def __truediv__(self, other):
        raise TypeError(f"unsupported operand type(s) for /: 'Dimension' and {type(other).__name__!r}, "
                        "please use // instead (as TF 1.x)")

    def _compare(self, other, fn):
        other_value = _dim_value(other)
        return None if self._value is None or other_value is None else fn(self._value, other_value)

    def __eq__(self, other):
        if other is None:  # `None in shape` (and `shape[0] == None`) asks whether it is unknown
            return self._value is None
        try:
            return self._compare(other, lambda a, b: a == b)
        except (TypeError, ValueError):
            return NotImplemented

    def __ne__(self, other):
        equal = self.__eq__(other)
        return equal if equal is None or equal is NotImplemented else not equal

    def __lt__(self, other):
        return self._compare(other, lambda a, b: a < b)

    def __le__(self, other):
        return self._compare(other, lambda a, b: a <= b)

    def __gt__(self, other):
        return self._compare(other, lambda a, b: a > b)

    def __ge__(self, other):
        return self._compare(other, lambda a, b: a >= b)

    def __hash__(self):
        return hash(self._value)

    def __reduce__(self):
        return Dimension, (self._value,)

    def __repr__(self) -> str:
        return f"Dimension({self._value})"

    def __str__(self) -> str:
        return "?" if self._value is None else str(self._value)


def _dim_value(d) -> int | None:
    """A dim given as None, an int, a Dimension or anything with ``__index__``, as int or None."""
    if d is None:
        return None
    if isinstance(d, Dimension):
        return d.value
    if isinstance(d, Tensor) or hasattr(d, "_as_graph_element"):
        raise TypeError(f"a static shape takes ints or None, got the tensor {d!r}")
    return int(d)


def as_dimension(value) -> Dimension:
    return value if isinstance(value, Dimension) else Dimension(value)


class TensorShape:
    """A static shape: dims that are ints or unknown (``None``), or an unknown rank.

    As in TF 1.x, ``shape[i]`` is a :class:`Dimension` (``.value``, ``int()``); ``dims``
    is the plain tuple (ints and None) that dflow's shape rules use.

    >>> s = TensorShape((None, 784))
    >>> s.as_list(), s[1].value, s.ndims, s[1:].as_list()
    ([None, 784], 784, 2, [784])
    """

    __slots__ = ("dims",)

    def __init__(self, dims):
        if isinstance(dims, TensorShape):
            dims = dims.dims
        elif hasattr(dims, "unknown_rank"):  # a TensorShapeProto (a SavedModel's TensorInfo.tensor_shape)
            dims = dims.to_plain()
        elif dims is not None and not isinstance(dims, (str, bytes)) and _is_single_dim(dims):
            dims = (dims,)  # TF's rule: TensorShape(5) is the shape [5]
        self.dims = None if dims is None else tuple(_dim_value(d) for d in dims)

    @property
    def ndims(self) -> int | None:
        return None if self.dims is None else len(self.dims)

    rank = ndims

    def as_list(self) -> list:
        if self.dims is None:
            raise ValueError("as_list() is not defined on an unknown TensorShape")
        return list(self.dims)

    def is_fully_defined(self) -> bool:
        return self.dims is not None and None not in self.dims

    def assert_is_fully_defined(self) -> None:
        if not self.is_fully_defined():
            raise ValueError(f"Shape {self} is not fully defined")

    def num_elements(self) -> int | None:
        if not self.is_fully_defined():
            return None
        n = 1
        for d in self.dims:
            n *= d
        return n

    def is_compatible_with(self, other) -> bool:
        other = as_shape(other)
        if self.dims is None or other.dims is None:
            return True
        return len(self.dims) == len(other.dims) and all(
            a is None or b is None or a == b for a, b in zip(self.dims, other.dims)
        )

    def assert_is_compatible_with(self, other) -> None:
        if not self.is_compatible_with(other):
            raise ValueError(f"Shapes {self} and {as_shape(other)} are incompatible")

    def merge_with(self, other) -> TensorShape:
        """The most specific shape compatible with both (a ValueError if they conflict)."""
        other = as_shape(other)
        self.assert_is_compatible_with(other)
        if self.dims is None:
            return other
        if other.dims is None:
            return self
        return TensorShape([a if a is not None else b for a, b in zip(self.dims, other.dims)])

    def concatenate(self, other) -> TensorShape:
        other = as_shape(other)
        if self.dims is None or other.dims is None:
            return TensorShape(None)
        return TensorShape(self.dims + other.dims)

    __add__ = concatenate

    def __radd__(self, other):
        return as_shape(other).concatenate(self)

    def with_rank(self, rank: int) -> TensorShape:
        return self.merge_with(TensorShape([None] * rank))

    def with_rank_at_least(self, rank: int) -> TensorShape:
        if self.dims is not None and len(self.dims) < rank:
            raise ValueError(f"Shape {self} must have rank at least {rank}")
        return self

    def assert_has_rank(self, rank: int) -> None:
        if self.dims is not None and len(self.dims) != rank:
            raise ValueError(f"Shape {self} must have rank {rank}")

    def __len__(self) -> int:
        if self.dims is None:
            raise ValueError("len() of a TensorShape of unknown rank")
        return len(self.dims)

    def __bool__(self) -> bool:
        return self.dims is not None

    def __iter__(self):
        if self.dims is None:
            raise ValueError("cannot iterate over a TensorShape of unknown rank")
        return iter([Dimension(d) for d in self.dims])

    def __getitem__(self, key):
        if self.dims is None:
            if isinstance(key, slice):
                return TensorShape(None)
            return Dimension(None)
        result = self.dims[key]
        return TensorShape(result) if isinstance(key, slice) else Dimension(result)

    def __eq__(self, other) -> bool:
        try:
            return self.dims == as_shape(other).dims
        except (TypeError, ValueError):
            return NotImplemented

    def __hash__(self):
        return hash(self.dims)

    def __reduce__(self):
        return TensorShape, (self.dims,)

    def __repr__(self) -> str:
        if self.dims is None:
            return "TensorShape(None)"
        return fmt(self.dims)


def _is_single_dim(value) -> bool:
    return isinstance(value, Dimension) or (not hasattr(value, "__iter__") and hasattr(value, "__index__"))


def as_shape(shape) -> TensorShape:
    """A TensorShape for ``shape``: a TensorShape, a list/tuple of ints, None or Dimensions, an
    int (a vector of that length, as TF), or None (unknown rank)."""
    return shape if isinstance(shape, TensorShape) else TensorShape(shape)


def unknown_shape(ndims=None) -> TensorShape:
    return TensorShape(None if ndims is None else [None] * ndims)


class _OpBuilders:
    """The op builders that Python operators and tensor conversion call (``add``, ``strided_slice``,
    ``constant``, ``stack``...). The op modules build on this one, so they register these as they are
    imported (:func:`register_op_builders`) instead of this module importing them."""

    def __getattr__(self, name: str):
        raise AttributeError(f"the op builder {name!r} is not registered: import dflow (its op modules "
                           "register it)")


op_builders = _OpBuilders()


def register_op_builders(**builders: Callable) -> None:
    """Make ``builders`` (name -> op builder) what tensors' operators and conversions call."""
    vars(op_builders).update(builders)


class TensorOperators:
    """Python operators on anything convertible to a Tensor (tensors, variables). A binary one's op
    is named as TF 1.x names it (``a + b`` is ``add``, ``a / b`` ``truediv``; ``tf.add`` is ``Add``):
    scripts find tensors by those names after loading a graph."""

    __array_priority__ = 100  # numpy scalars/arrays on the left defer to us

    def __add__(self, other):
        return op_builders.add(self, other, name="add")

    def __radd__(self, other):
        return op_builders.add(other, self, name="add")

    def __sub__(self, other):
        return op_builders.subtract(self, other, name="sub")

    def __rsub__(self, other):
        return op_builders.subtract(other, self, name="sub")

    def __mul__(self, other):
        return op_builders.multiply(self, other, name="mul")

    def __rmul__(self, other):
        return op_builders.multiply(other, self, name="mul")

    def __truediv__(self, other):
        return op_builders.divide(self, other, name="truediv")

    def __rtruediv__(self, other):
        return op_builders.divide(other, self, name="truediv")

    def __matmul__(self, other):
        return op_builders.matmul(self, other, name="matmul")

    def __rmatmul__(self, other):
        return op_builders.matmul(other, self, name="matmul")

    def __pow__(self, other):
        return op_builders.pow(self, other, name="pow")

    def __rpow__(self, other):
        return op_builders.pow(other, self, name="pow")

    def __floordiv__(self, other):
        return op_builders.floordiv(self, other, name="floordiv")

    def __rfloordiv__(self, other):
        return op_builders.floordiv(other, self, name="floordiv")

    def __mod__(self, other):
        return op_builders.floormod(self, other, name="mod")

    def __rmod__(self, other):
        return op_builders.floormod(other, self, name="mod")

    def __and__(self, other):
        return op_builders.logical_and(self, other, name="and")

    def __rand__(self, other):
        return op_builders.logical_and(other, self, name="and")

    def __or__(self, other):
        return op_builders.logical_or(self, other, name="or")

    def __ror__(self, other):
        return op_builders.logical_or(other, self, name="or")

    def __xor__(self, other):
        return op_builders.logical_xor(self, other, name="xor")

    def __rxor__(self, other):
        return op_builders.logical_xor(other, self, name="xor")

    def __invert__(self):
        return op_builders.logical_not(self)

    def __neg__(self):
        return op_builders.negative(self)

    def __abs__(self):
        return op_builders.abs(self)

    def __lt__(self, other):
        return op_builders.less(self, other)

    def __le__(self, other):
        return op_builders.less_equal(self, other)

    def __gt__(self, other):
        return op_builders.greater(self, other)

    def __ge__(self, other):
        return op_builders.greater_equal(self, other)

    def __getitem__(self, key):
        return op_builders.strided_slice(self, key)

    def __iter__(self):
        """``a, b = tensor`` along a first dim known at build time (TF 1.x's rule)."""
        dims = self.get_shape().dims
        if dims is None:
            raise TypeError("Cannot iterate over a tensor with unknown shape.")
        if not dims:
            raise TypeError("Cannot iterate over a scalar tensor.")
        if dims[0] is None:
            raise TypeError("Cannot iterate over a tensor with unknown first dimension; "
                            "use tf.unstack(x, num=...) with a known count")
        return iter([self[i] for i in range(dims[0])])

    # Tensors are graph nodes: equality is identity, so they can key dicts (feed_dict).
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def __bool__(self):
        raise TypeError(
            "a symbolic Tensor has no truth value until a Session runs it; "
            "use tf.equal/tf.greater and Session.run instead of `if tensor:`"
        )


class Tensor(TensorOperators):
    """The ``value_index``-th output of an :class:`Operation`."""

    __slots__ = ("op", "value_index", "_shape", "dtype", "_const_value")

    def __init__(self, op: Operation, value_index: int, spec: Spec):
        self.op = op
        self.value_index = value_index
        self._shape = spec.shape
        self.dtype = spec.dtype
        self._const_value = spec.value

    @property
    def name(self) -> str:
        return f"{self.op.name}:{self.value_index}"

    @property
    def graph(self) -> Graph:
        return self.op.graph

    @property
    def device(self) -> str:
        return self.op.device

    @property
    def shape(self) -> TensorShape:
        return TensorShape(self._shape)

    def get_shape(self) -> TensorShape:
        return self.shape

    def set_shape(self, shape) -> None:
        """Refine the static shape with what the caller knows (it must agree with what is known)."""
        new = TensorShape(shape)
        if not self.shape.is_compatible_with(new):
            raise ValueError(f"{self.name} has shape {self.shape}, which cannot be set to {new}")
        if self._shape is None:
            self._shape = new.dims
        elif new.dims is not None:
            self._shape = tuple(a if a is not None else b for a, b in zip(self._shape, new.dims))

    @property
    def spec(self) -> Spec:
        return Spec(self._shape, self.dtype, self._const_value)

    def consumers(self) -> list[Operation]:
        """The ops that take this tensor as an input, in the order they were created."""
        edges = self.graph.nx
        return [edges.nodes[name]["op"] for name, keys in edges.succ[self.op.name].items()
                if any(key != "control" and key[0] == self.value_index for key in keys)]

    def eval(self, feed_dict=None, session=None):
        """``session.run(self)``; the default session is the innermost ``with Session()``."""
        return session_or_default(session, "evaluate tensor using `eval()`").run(self, feed_dict=feed_dict)

    def __repr__(self) -> str:
        return f"<tf.Tensor '{self.name}' shape={self.shape} dtype={self.dtype.name}>"

    def __str__(self) -> str:  # what print(tensor) shows in TF 1.x
        shape = f", shape={self.shape}" if self.shape.ndims is not None else ""
        device = f", device={self.device}" if self.device else ""
        return f'Tensor("{self.name}"{shape}, dtype={self.dtype.name}{device})'


@dataclass(frozen=True)
class NodeDef:
    """An op as TF's ``NodeDef`` shows it to device functions: ``op`` (its type), ``name``,
    ``device``, ``input`` (tensor names), ``attr`` (``tf.NodeDef`` for ``isinstance`` checks)."""

    name: str
    op: str
    device: str = ""
    input: tuple = ()
    attr: dict = field(default_factory=dict)


class Operation:
    """A node of the graph: an op type, input tensors, attributes, a device."""

    def __init__(self, graph, op_type, name, inputs, attrs, control_inputs, output_specs):
        self.graph = graph
        self.type = op_type
        self.name = name
        self.inputs = tuple(inputs)
        self.attrs = attrs
        self.control_inputs = list(control_inputs)
        self.device = ""
        self.outputs = [Tensor(self, i, spec) for i, spec in enumerate(output_specs)]
        self.gradient_override: str | None = None  # a registered gradient's name (gradient_override_map)

    @property
    def opdef(self):
        return get_opdef(self.type)

    def get_attr(self, name: str):
        return self.attrs[name]

    @property
    def node_def(self) -> NodeDef:
        """TF's view of this op (device functions read ``op.node_def.op``)."""
        inputs = tuple(t.name for t in self.inputs)
        return NodeDef(self.name, self.type, self.device, inputs, dict(self.attrs))

    def values(self) -> list[Tensor]:
        return list(self.outputs)

    def run(self, feed_dict=None, session=None):
        session_or_default(session, "execute operation using `run()`").run(self, feed_dict=feed_dict)

    def _set_device(self, device: str | DeviceSpec | None) -> None:
        self.device = DeviceSpec.from_string(str(device or "")).to_string()

    def __repr__(self) -> str:
        return f"<tf.Operation '{self.name}' type={self.type}>"


class Graph:
    """A dataflow graph. Use ``with graph.as_default():`` to build into it."""

    def __init__(self):
        self.nx = nx.MultiDiGraph()
        self._ops: dict[str, Operation] = {}
        self._names_in_use: dict[str, int] = {}
        self._name_stack = ""
        self._control_stack: list[list[Operation]] = []
        self._gradient_overrides: dict[str, str] = {}  # op type -> gradient name (gradient_override_map)
        self._device_stack: list[str | Callable | None] = []
        self._collections: dict[str, list] = {}
        self._variable_scope_stack: list = []  # dflow.variables.VariableScope
        self._variables_by_name: dict = {}  # get_variable's registry
        self.version = 0  # bumps on every new op; sessions key plan caches on it
        self._lock = threading.RLock()
        self.seed = None
        self._finalized = False

    # ---- building ---------------------------------------------------------
    def finalize(self) -> None:
        """Make the graph read-only: adding an op is then an error (TF's guard against a training
        loop that grows the graph every step)."""
        self._finalized = True

    @property
    def finalized(self) -> bool:
        return self._finalized

    def _unsafe_unfinalize(self) -> None:
        self._finalized = False

    def create_op(self, op_type: str, inputs=(), attrs=None, name=None) -> Operation:
        """Add an op, infer its outputs, and apply the scopes in force (name, control, device)."""
        if self._finalized:
            raise RuntimeError(f"Graph is finalized and cannot be modified: a {op_type} op was being added "
                               "(build every op before graph.finalize(), e.g. outside the training loop)")
        attrs = dict(attrs or {})
        inputs = [convert_to_tensor(t) for t in inputs]
        for t in inputs:
            if t.graph is not self:
                raise ValueError(
                    f"{t.name} belongs to another graph than the {op_type} op being built; "
                    "build all ops of one model inside one `with graph.as_default():`"
                )
        opdef = get_opdef(op_type)
        if not opdef.takes_refs:  # a variable op's output ('w:0', by name) gives its value, as in TF
            inputs = [self.variable_value(t) if t.op.type == "VariableV2" else t for t in inputs]
        with self._lock:
            op_name = self.unique_name(name or op_type)
            try:
                specs = opdef.infer([t.spec for t in inputs], **attrs)
            except ShapeError as e:
                raise ValueError(f"{op_type} op '{op_name}': {e}") from None
            control = [c for frame in self._control_stack for c in frame]
            op = Operation(self, op_type, op_name, inputs, attrs, control, specs)
            op.gradient_override = self._gradient_overrides.get(op_type)
            self._apply_device_functions(op)
            self._add(op)
        return op

    def variable_value(self, ref: Tensor) -> Tensor:
        """The value of the variable whose op gives ``ref``: its read op's output (``w/read:0``),
        made beside the variable where it has none yet."""
        for consumer in ref.consumers():
            if consumer.type == "ReadVariable":
                return consumer.outputs[0]
        with self.name_scope(ref.op.name + "/"), self.colocate_with(ref), self.control_dependencies(None):
            return self.create_op("ReadVariable", [ref], name="read").outputs[0]

    def _add(self, op: Operation) -> None:
        op._id = len(self._ops)  # creation order is a topological order
        self._ops[op.name] = op
        self.nx.add_node(op.name, op=op)
        for index, t in enumerate(op.inputs):
            self.nx.add_edge(t.op.name, op.name, key=(t.value_index, index), tensor=t)
        for c in op.control_inputs:
            self.nx.add_edge(c.name, op.name, key="control")
        self.version += 1

    def _apply_device_functions(self, op: Operation) -> None:
        # TF's rule: the innermost scope decides first; outer string scopes only
        # fill fields still open; `device(None)` stops the outer scopes.
        for entry in reversed(self._device_stack):
            if entry is None:
                break
            if callable(entry):
                op._set_device(entry(op))
            else:
                outer = DeviceSpec.from_string(entry)
                op._set_device(outer.make_merged_spec(DeviceSpec.from_string(op.device)))

    def unique_name(self, name: str, mark_as_used: bool = True) -> str:
        """``name`` under the current name scope, suffixed ``_1``, ``_2``... if taken.

        A name ending in ``/`` is a full name already made unique (a name scope's)."""
        if name.endswith("/"):
            self._names_in_use.setdefault(name[:-1].lower(), 1)
            return name[:-1]
        full = f"{self._name_stack}/{name}" if self._name_stack else name
        key = full.lower()
        count = self._names_in_use.get(key, 0)
        if mark_as_used:
            self._names_in_use[key] = count + 1
        if count:
            candidate = f"{full}_{count}"
            while candidate.lower() in self._names_in_use:
                count += 1
                candidate = f"{full}_{count}"
            if mark_as_used:
                self._names_in_use[candidate.lower()] = 1
            full = candidate
        return full

    # ---- scopes -------------------------------------------------------------
    @contextlib.contextmanager
    def as_default(self) -> Iterator[Graph]:
        with default_graphs.pushed(self):
            yield self

    @contextlib.contextmanager
    def name_scope(self, name: str | None) -> Iterator[str]:
        old = self._name_stack
        if name is None or name == "":
            self._name_stack = ""
        elif name.endswith("/"):
            self._name_stack = name[:-1]
        else:
            self._name_stack = self.unique_name(name)
        try:
            yield self._name_stack + "/" if self._name_stack else ""
        finally:
            self._name_stack = old

    @contextlib.contextmanager
    def control_dependencies(self, control_inputs) -> Iterator[None]:
        if control_inputs is None:  # clears the outer control scopes, as in TF
            saved, self._control_stack = self._control_stack, []
            try:
                yield
            finally:
                self._control_stack = saved
            return
        ops = [_as_operation(c) for c in control_inputs]
        self._control_stack.append(ops)
        try:
            yield
        finally:
            self._control_stack.pop()

    @contextlib.contextmanager
    def device(self, device_name_or_function) -> Iterator[None]:
        entry = device_name_or_function
        if isinstance(entry, DeviceSpec):
            entry = entry.to_string()
        if isinstance(entry, str):
            DeviceSpec.from_string(entry)  # parse now: a typo fails at the `with`, not later
        self._device_stack.append(entry)
        try:
            yield
        finally:
            self._device_stack.pop()

    @contextlib.contextmanager
    def gradient_override_map(self, op_type_map: dict[str, str]) -> Iterator[None]:
        """Ops of the types ``op_type_map`` names, created inside, take their gradient from the
        function ``tf.RegisterGradient`` registered under the name it maps them to.

        >>> @tf.RegisterGradient("Reversed")  # doctest: +SKIP
        ... def _reversed(op, grad):
        ...     return [-grad]
        >>> with tf.get_default_graph().gradient_override_map({"Identity": "Reversed"}):  # doctest: +SKIP
        ...     y = tf.identity(x)  # its gradient is minus y's
        """
        if not isinstance(op_type_map, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in op_type_map.items()):
            raise TypeError("gradient_override_map takes a dict from op types to registered gradient "
                            f"names (both strings), got {op_type_map!r}")
        saved = self._gradient_overrides
        self._gradient_overrides = {**saved, **op_type_map}
        try:
            yield
        finally:
            self._gradient_overrides = saved

    @contextlib.contextmanager
    def colocate_with(self, op) -> Iterator[None]:
        """Ops created inside go where ``op`` (an op, tensor or variable) is, whatever
        device scopes and device functions are open (TF's ``colocate_with``)."""
        with self.device(None), self.device(op.device):
            yield

    # ---- lookup -------------------------------------------------------------
    def get_operations(self) -> list[Operation]:
        return list(self._ops.values())

    def get_operation_by_name(self, name: str) -> Operation:
        try:
            return self._ops[name]
        except KeyError:
            raise KeyError(f"the graph has no operation named {name!r}") from None

    def get_tensor_by_name(self, name: str) -> Tensor:
        op_name, sep, index = name.rpartition(":")
        if not sep or not index.isdigit():
            raise ValueError(f"{name!r} is not a tensor name; tensor names look like 'op_name:0'")
        op = self.get_operation_by_name(op_name)
        if int(index) >= len(op.outputs):
            raise ValueError(f"operation {op_name!r} has {len(op.outputs)} outputs; {name!r} is out of range")
        return op.outputs[int(index)]

    def as_graph_element(self, obj):
        """A Tensor or Operation of this graph from a tensor/op/variable or its name."""
        if isinstance(obj, str):
            return self.get_tensor_by_name(obj) if ":" in obj else self.get_operation_by_name(obj)
        if hasattr(obj, "_as_graph_element"):
            obj = obj._as_graph_element()
        if isinstance(obj, (Tensor, Operation)):
            if obj.graph is not self:
                raise ValueError(f"{obj.name} is not an element of this graph")
            return obj
        raise TypeError(f"cannot fetch {obj!r}: expected a Tensor, Operation, Variable or name")

    # ---- collections --------------------------------------------------------
    def add_to_collection(self, name: str, value) -> None:
        self._collections.setdefault(name, []).append(value)

    def add_to_collections(self, names, value) -> None:
        for name in [names] if isinstance(names, str) else names:
            self.add_to_collection(name, value)

    def get_collection(self, name: str, scope: str | None = None) -> list:
        items = list(self._collections.get(name, ()))
        if scope is None:
            return items
        pattern = re.compile(scope)
        return [i for i in items if pattern.match(getattr(i, "name", ""))]

    def get_collection_ref(self, name: str) -> list:
        return self._collections.setdefault(name, [])

    def get_all_collection_keys(self) -> list[str]:
        return list(self._collections)

    # ---- export -------------------------------------------------------------
    def as_graph_def(self) -> dict:
        """The graph as plain data (JSON-ready): every op (name, type, inputs, control inputs,
        attrs, device) and the collections. :func:`dflow.graph_io.import_graph_def` reads it back."""
        ops = [{"name": op.name, "type": op.type, "inputs": [t.name for t in op.inputs],
                "control_inputs": [c.name for c in op.control_inputs],
                "attrs": plain_values.encode(op.attrs), "device": op.device}
               for op in self.get_operations()]
        collections = {}
        for key in self.get_all_collection_keys():
            items = [_collection_entry(v) for v in self.get_collection(key)]
            collections[key] = [i for i in items if i is not None]
        return {"format": "dflow.graph", "version": GRAPH_FORMAT_VERSION, "ops": ops,
                "collections": collections}

    def to_dot(self) -> str:
        """Graphviz DOT text: ops as boxes labelled with their type, tensors as edges."""
        lines = ["digraph dflow {", "  rankdir=TB;"]
        for op in self.get_operations():
            label = f"{op.name}\n{op.type}"  # json.dumps writes the newline as DOT's \n
            lines.append(f"  {json.dumps(op.name)} [shape=box, label={json.dumps(label)}];")
        for src, dst, key, data in self.nx.edges(keys=True, data=True):
            style = "style=dashed" if key == "control" else f"label={json.dumps(str(data['tensor'].shape))}"
            lines.append(f"  {json.dumps(src)} -> {json.dumps(dst)} [{style}];")
        lines.append("}")
        return "\n".join(lines) + "\n"


def _collection_entry(value) -> dict | None:
    """A collection item as plain data; other Python objects do not survive the round trip."""
    if hasattr(value, "graph_def_entry"):  # a Variable describes itself
        return value.graph_def_entry()
    if isinstance(value, Tensor):
        return {"tensor": value.name}
    if isinstance(value, Operation):
        return {"operation": value.name}
    return None


def _as_operation(x) -> Operation:
    if hasattr(x, "_as_graph_element"):
        x = x._as_graph_element()
    if isinstance(x, Tensor):
        return x.op
    if isinstance(x, Operation):
        return x
    raise TypeError(f"control_dependencies takes Operations or Tensors, got {x!r}")


_global_default_graph = Graph()


def get_default_graph() -> Graph:
    """The innermost ``with graph.as_default()`` graph, else the global default graph."""
    top = default_graphs.top()
    return _global_default_graph if top is None else top


def reset_default_graph() -> None:
    """Replace the global default graph by a new, empty one."""
    global _global_default_graph
    if default_graphs.stack:
        raise AssertionError("reset_default_graph() called inside a `with graph.as_default()` block")
    _global_default_graph = Graph()


def set_random_seed(seed: int | None) -> None:
    """The graph-level seed: with it, every random op of the default graph is reproducible."""
    get_default_graph().seed = seed


def get_collection(key: str, scope: str | None = None) -> list:
    """Items of collection ``key`` in the default graph (names matching ``scope``)."""
    return get_default_graph().get_collection(key, scope)


def add_to_collection(name: str, value) -> None:
    get_default_graph().add_to_collection(name, value)


def name_scope(name: str | None, default_name: str | None = None, values=None):
    """Prefix the names of ops created inside: ``with tf.name_scope('layer1'):``."""
    graph = _graph_of(values)
    return graph.name_scope(name if name is not None else default_name)


def control_dependencies(control_inputs):
    """Ops created inside run only after ``control_inputs``."""
    return get_default_graph().control_dependencies(control_inputs)


def device(device_name_or_function):
    """Device scope: ``with tf.device('/job:ps/task:0'):`` or a device function."""
    return get_default_graph().device(device_name_or_function)


def colocate_with(op):
    """Place the ops created inside on ``op``'s device: ``with tf.colocate_with(var):``.

    How the state ops of a variable (its initializer, its reads, an optimizer's
    update) follow it to a parameter server under ``replica_device_setter``.
    """
    return get_default_graph().colocate_with(op)


def _graph_of(values) -> Graph:
    for v in values or ():
        if isinstance(v, (Tensor, Operation)):
            return v.graph
    return get_default_graph()


def _first_tensor_dtype(value):
    """The dtype of the first tensor in a nested list, or None when it holds none."""
    for item in value:
        if isinstance(item, Tensor) or hasattr(item, "_as_graph_element"):
            return convert_to_tensor(item).dtype
        if isinstance(item, (list, tuple)):
            found = _first_tensor_dtype(item)
            if found is not None:
                return found
    return None


def _autopack(value, dtype, name) -> Tensor:
    """TF packs a (nested) list that holds tensors: ``tf.reduce_mean([loss_a, loss_b])``,
    ``tf.reduce_mean(scores)`` of the tuple that ``KMeans.training_graph`` returns."""
    dtype = dtype if dtype is not None else _first_tensor_dtype(value)
    return op_builders.stack([convert_to_tensor(v, dtype=dtype) for v in value], name=name or "packed")


def convert_to_tensor(value: Any, dtype=None, name=None) -> Tensor:
    """A Tensor for ``value``: tensors pass through, variables give their value,
    Python/NumPy values become constants."""
    if isinstance(value, Tensor):
        if dtype is not None and value.dtype != dtypes.as_dtype(dtype):
            raise TypeError(
                f"{value.name} has dtype {value.dtype.name}, but {dtypes.as_dtype(dtype).name} "
                "was requested; use tf.cast"
            )
        return value
    if hasattr(value, "_as_graph_element"):
        return convert_to_tensor(value._as_graph_element(), dtype=dtype)
    if isinstance(value, (list, tuple)) and value and _first_tensor_dtype(value) is not None:
        return _autopack(value, dtype, name)
    return op_builders.constant(value, dtype=dtype, name=name or "Const")
