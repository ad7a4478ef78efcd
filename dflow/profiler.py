"""``tf.profiler``: what a TF 1.x script counts in its graph before it trains it, the float
operations (``ProfileOptionBuilder.float_operation()``) and the trainable parameters
(``ProfileOptionBuilder.trainable_variables_parameter()``), by TensorFlow's rules, so that a
model's FLOPs come out as the TF 1.x script printed them.

TensorFlow counts an op only where its shapes are fully known (build the graph at batch 1 to
count one example) and only for the op types it has a rule for: convolutions and matrix
products (2 x multiply-adds), pooling, elementwise arithmetic and comparisons (one per output
element; ``Rsqrt`` and ``SquaredDifference`` two, ``Softmax`` five), reductions (one per input
element folded away), ``AddN``, ``L2Loss``. Activations (``Relu``, ``Sigmoid``, ``Tanh``, ``Exp``)
count nothing, as in TensorFlow. A random initializer counts what TensorFlow's graph does to
scale its draws (``x * stddev + mean``: two per element; ``x * (max - min) + min``: one more),
which dflow does inside the one op (listed under the random op's type, where ``cmd="op"``
lists TF's under ``Mul`` and ``AddV2``). ``tf.nn.dropout`` counts nothing: TensorFlow's
count of its mask arithmetic changed between versions.

>>> import dflow as tf
>>> with tf.Graph().as_default() as graph:
...     w = tf.get_variable("w", [64, 10], initializer=tf.zeros_initializer())
...     logits = tf.matmul(tf.placeholder(tf.float32, [1, 64]), w)
...     flops = tf.profiler.profile(graph, options=tf.profiler.ProfileOptionBuilder(
...         tf.profiler.ProfileOptionBuilder.float_operation()).with_empty_output().build())
...     params = tf.profiler.profile(graph, options=tf.profiler.ProfileOptionBuilder(
...         tf.profiler.ProfileOptionBuilder.trainable_variables_parameter()).with_empty_output().build())
>>> flops.total_float_ops, params.total_parameters
(1280, 640)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from .graph import Graph, GraphKeys, Operation, get_default_graph

__all__ = ["profile", "ProfileOptionBuilder", "ProfileNode"]


class ProfileOptionBuilder:
    """TF's option builder: ``float_operation()`` and ``trainable_variables_parameter()`` give
    option dicts; ``ProfileOptionBuilder(options).with_empty_output().build()`` silences the report."""

    def __init__(self, options: dict | None = None):
        self._options = dict(options if options is not None else self.trainable_variables_parameter())

    @staticmethod
    def float_operation() -> dict:
        return {"select": ["float_ops"], "min_float_ops": 1, "order_by": "float_ops",
                "account_type_regexes": [".*"], "output": "stdout"}

    @staticmethod
    def trainable_variables_parameter() -> dict:
        return {"select": ["params"], "min_float_ops": 0, "order_by": "name",
                "account_type_regexes": ["_trainable_variables"], "output": "stdout"}

    def with_empty_output(self) -> ProfileOptionBuilder:
        self._options["output"] = "none"
        return self

    def with_stdout_output(self) -> ProfileOptionBuilder:
        self._options["output"] = "stdout"
        return self

    def select(self, attributes) -> ProfileOptionBuilder:
        self._options["select"] = list(attributes)
        return self

    def order_by(self, attribute: str) -> ProfileOptionBuilder:
        self._options["order_by"] = attribute
        return self

    def build(self) -> dict:
        return dict(self._options)


@dataclass
class ProfileNode:
    """A node of the report (TF's ``GraphNodeProto``): one op, or one op type under ``cmd="op"``;
    the root sums its children."""

    name: str
    float_ops: int = 0
    parameters: int = 0
    total_float_ops: int = 0
    total_parameters: int = 0
    children: list[ProfileNode] = field(default_factory=list)


def profile(graph: Graph | None = None, run_meta=None, op_log=None, cmd: str = "scope",
            options: dict | None = None) -> ProfileNode:
    """Count ``options``' ``select`` (``float_ops``, ``params``) over ``graph``'s ops; by op under
    ``cmd="scope"``/``"graph"``/``"code"``, by op type under ``cmd="op"``. Prints the report unless
    the options say ``output: none``. (``run_meta`` and ``op_log`` are taken and not needed: the
    counts come from the graph's static shapes.)"""
    if cmd not in ("scope", "graph", "op", "code"):
        raise ValueError(f"cmd must be one of scope, graph, op, code, got {cmd!r}")
    graph = graph or get_default_graph()
    options = options if options is not None else ProfileOptionBuilder.trainable_variables_parameter()
    select = set(options.get("select", ["float_ops", "params"]))
    trainable = {v.op for v in graph.get_collection(GraphKeys.TRAINABLE_VARIABLES)}
    only_trainable = "_trainable_variables" in options.get("account_type_regexes", [".*"])
    nodes: dict[str, ProfileNode] = {}
    for op in graph.get_operations():
        if only_trainable and op not in trainable:
            continue
        flops = (float_ops(op) or 0) if "float_ops" in select else 0
        params = _num_elements(op.outputs[0].shape) if "params" in select and op in trainable else 0
        if not (flops or params):
            continue
        name = op.type if cmd == "op" else op.name
        node = nodes.setdefault(name, ProfileNode(name))
        node.float_ops += flops
        node.parameters += params
        node.total_float_ops, node.total_parameters = node.float_ops, node.parameters
    children = [n for n in nodes.values() if n.float_ops >= options.get("min_float_ops", 0)]
    key = {"float_ops": lambda n: -n.float_ops, "params": lambda n: -n.parameters}.get(
        options.get("order_by"), lambda n: n.name)
    root = ProfileNode("_TFProfRoot", children=sorted(children, key=key))
    root.total_float_ops = sum(n.float_ops for n in children)
    root.total_parameters = sum(n.parameters for n in children)
    if options.get("output", "stdout") != "none":
        print(_report(root, select))
    return root


def _report(root: ProfileNode, select: set[str]) -> str:
    what = [("float_ops", "float_ops", "total_float_ops"), ("params", "params", "total_parameters")]
    columns = [(label, total) for name, label, total in what if name in select]
    lines = ["node name | " + " | ".join(f"# {label}" for label, _ in columns)]
    for node in [root, *root.children]:
        lines.append(f"{node.name:<40} " + ", ".join(f"{getattr(node, total):,} {label}"
                                                     for label, total in columns))
    return "\n".join(lines)


# ---- TensorFlow's counting rules, per op type -----------------------------------------------------
def _num_elements(shape) -> int | None:
    dims = shape.as_list() if shape.ndims is not None else None
    return None if dims is None or None in dims else math.prod(dims)


def _per_output_element(flops_per_element: int) -> Callable:
    def count(op: Operation) -> int | None:
        elements = _num_elements(op.outputs[0].shape)
        return None if elements is None else flops_per_element * elements
    return count


def _reduction(per_input: int, per_output: int) -> Callable:
    def count(op: Operation) -> int | None:
        folded, kept = _num_elements(op.inputs[0].shape), _num_elements(op.outputs[0].shape)
        return None if folded is None or kept is None else folded * per_input + kept * per_output
    return count


def _spatial(op: Operation, attr: str) -> tuple[int, int]:
    """(height, width) of a 4-long attribute (strides, ksize) in the op's data format."""
    values = op.attrs[attr]
    return (values[2], values[3]) if op.attrs.get("data_format", "NHWC") == "NCHW" else (values[1], values[2])


def _channels(op: Operation, shape) -> int:
    return shape.as_list()[1 if op.attrs.get("data_format", "NHWC") == "NCHW" else 3]


def _matmul(op: Operation) -> int | None:
    a, out = op.inputs[0].shape.as_list(), _num_elements(op.outputs[0].shape)
    k = a[-2] if op.attrs.get("transpose_a") else a[-1]
    return None if out is None or k is None else 2 * k * out


def _conv2d(op: Operation) -> int | None:
    height, width, channels_in, _ = op.inputs[1].shape.as_list()
    out = _num_elements(op.outputs[0].shape)
    if out is None or None in (height, width, channels_in):
        return None
    return 2 * out * height * width * channels_in


def _conv2d_backprop(image) -> Callable:
    """Both of a convolution's gradients: 2 x image elements x kernel x output channels / strides."""
    def count(op: Operation) -> int | None:
        grad = op.inputs[2].shape
        pixels = _num_elements(image(op).shape)
        kernel = op.inputs[1].shape if op.type == "Conv2DBackpropInput" else op.outputs[0].shape
        height, width = kernel.as_list()[:2]
        if pixels is None or None in (height, width) or _num_elements(grad) is None:
            return None
        stride_h, stride_w = _spatial(op, "strides")
        return 2 * pixels * height * width * _channels(op, grad) // (stride_h * stride_w)
    return count


def _pool(op: Operation) -> int | None:
    out = _num_elements(op.outputs[0].shape)
    return None if out is None else math.prod(_spatial(op, "ksize")) * out


def _max_pool_grad(op: Operation) -> int | None:
    pooled = _num_elements(op.inputs[1].shape)
    return None if pooled is None else (math.prod(_spatial(op, "ksize")) + 1) * pooled


def _avg_pool_grad(op: Operation) -> int | None:
    grad = _num_elements(op.inputs[1].shape)
    return None if grad is None else 2 * math.prod(_spatial(op, "ksize")) * grad


def _add_n(op: Operation) -> int | None:
    out = _num_elements(op.outputs[0].shape)
    return None if out is None else (len(op.inputs) - 1) * out


def _l2_loss(op: Operation) -> int | None:
    elements = _num_elements(op.inputs[0].shape)
    return None if elements is None else 3 * elements - 1


def _uniform(op: Operation) -> int | None:
    elements = _num_elements(op.outputs[0].shape)
    return None if elements is None else 0 if op.outputs[0].dtype.is_integer else 2 * elements + 1


_ONE = _per_output_element(1)
FLOPS: dict[str, Callable[[Operation], int | None]] = {
    **dict.fromkeys(["Add", "AddV2", "Sub", "Mul", "RealDiv", "Maximum", "Minimum", "Pow", "Neg", "Square",
                     "Log", "Reciprocal", "Greater", "GreaterEqual", "Less", "LessEqual", "Equal", "NotEqual",
                     "AssignAdd", "AssignSub", "BiasAdd"], _ONE),
    **dict.fromkeys(["Rsqrt", "SquaredDifference"], _per_output_element(2)),
    "Softmax": _per_output_element(5),
    **dict.fromkeys(["Sum", "ArgMax", "ArgMin", "BiasAddGrad"], _reduction(1, -1)),
    "Mean": _reduction(1, 0),
    "MatMul": _matmul,
    "Conv2D": _conv2d,
    "Conv2DBackpropInput": _conv2d_backprop(lambda op: op.outputs[0]),
    "Conv2DBackpropFilter": _conv2d_backprop(lambda op: op.inputs[0]),
    **dict.fromkeys(["MaxPool", "AvgPool"], _pool),
    "MaxPoolGrad": _max_pool_grad,
    "AvgPoolGrad": _avg_pool_grad,
    "AddN": _add_n,
    "L2Loss": _l2_loss,
    **dict.fromkeys(["RandomStandardNormal", "TruncatedNormal", "RandomStandardNormalShaped",
                     "TruncatedNormalShaped"], _per_output_element(2)),
    **dict.fromkeys(["RandomUniform", "RandomUniformShaped"], _uniform),
}


def float_ops(op: Operation) -> int | None:
    """``op``'s float operations by TensorFlow's rule for its type; None where it has none or its
    shapes are not fully known."""
    rule = FLOPS.get(op.type)
    return None if rule is None else rule(op)
