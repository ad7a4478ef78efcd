"""Fusing elementwise chains when a stage is lowered to plain ops, as Grappler's remapper does.

A layer's ``relu(conv + b)`` or ``relu(tf.nn.bias_add(conv, b))`` is two passes over the layer's
output and a temporary as big as it (7 ms of the CIFAR-10 CNN's 110 ms step at batch 100); so is
the backward of ``max_pool(relu(...))``: the pooling gradient, then ReluGrad over it. Where the
first op's value is used by nothing but the second, the pair becomes one op in the second's
place and under its name, so every consumer and every fetch of its value is unchanged:

- ``Relu(BiasAdd(x, b))``, ``Relu(Add(x, b))`` -> ``_FusedAddRelu(x, b)``;
- ``_FusedAddRelu(Conv2D(x, w), b)`` -> ``_FusedConv2DBiasRelu(x, w, b)`` (a fused op fuses
  again with the op before it: TF's ``_FusedConv2D``, one oneDNN pass), and ``Relu(Conv2D(x,
  w))`` -> ``_FusedConv2DBiasRelu(x, w)``; a ``Shape`` of the convolution's output (the
  gradient of ``conv + b`` reads it) becomes ``_Conv2DShape(x, w)``, so that it does not keep
  the output from fusing;
- ``ReluGrad(MaxPoolGrad(x, y, dy), x)`` -> ``_FusedMaxPoolGradReluGrad(x, y, dy)``;
- ``Conv2DBackpropFilter(x, sizes, g)`` and ``BiasAddGrad(g)`` of the same ``g`` ->
  ``_Conv2DBackpropFilterWithBias(x, sizes, g)``, its two outputs the filter's and the
  bias's gradients (oneDNN sums ``g`` per channel in the filter gradient's pass over it); the
  BiasAddGrad's place, under its name, becomes an ``Identity`` of the second;
- ``MaxPool(x)`` and ``MaxPoolGrad(x, y, dy)`` (or the fused one above) of the same NHWC
  pooling, on the CPU -> ``_MaxPoolWithWorkspace(x)``, whose second output says where each
  window's maximum was (oneDNN's pass for training), and ``_MaxPoolGradWithWorkspace(x, y,
  dy, workspace)``, which routes by it without reading ``x`` again; ``LRN`` and ``LRNGrad``
  likewise pass the forward's window sums (TF's oneDNN ops pass the same workspaces);
- ``Add(MatMul(a, b), bias)`` or ``BiasAdd(MatMul(a, b), bias)`` -> ``_FusedMatMul(a, b,
  bias)``, and a ``Relu``, ``Sigmoid`` or ``Tanh`` of a MatMul or of that -> ``_FusedMatMul``
  with the activation (TF's ``_FusedMatMul``); a ``Shape`` of the product becomes
  ``_MatMulShape(a, b)``, as for a convolution;
- ``Relu(FusedBatchNorm(x, ...))`` -> ``_FusedBatchNormRelu(x, ...)`` (the Relu's place an
  ``Identity`` of it), and ``FusedBatchNormGrad(ReluGrad(g, y), x, ...)`` ->
  ``_FusedBatchNormGradRelu(g, y, x, ...)``: the ReLU in the batch norm's passes, as TF's
  ``_FusedBatchNormEx``; likewise ``Relu(BatchNormalization(x, ...))`` ->
  ``_BatchNormalizationRelu(x, ...)`` and ``BatchNormalizationGrad(ReluGrad(g, y), x, ...)`` ->
  ``_BatchNormalizationGradRelu(g, y, x, ...)`` (``tf.nn.batch_normalization`` written by hand);
- ``AddN(g, MomentsGrad(x, mean, dmean, dvariance))`` -> ``_MomentsGradAdd(x, mean, dmean,
  dvariance, g)``: a hand-written batch norm's two gradients into its input (through
  ``tf.nn.batch_normalization`` and through ``tf.nn.moments``) summed in the second one's pass,
  into the first one's buffer;
- ``ApplyGradientDescent(var, lr, AddN(g, Mul(x, s)))`` -> ``_ApplyDecayedGradientDescent(var,
  lr, g, x, s)``: an L2 weight decay's gradient (``s * x``, x the weights) summed into the update
  in its one pass over the variable, where the Mul, the AddN and the update made three (the
  CIFAR-10 tutorial's dense layers: 0.5 of 3.7 ms a step at batch 1); where no such update
  takes the sum (a worker's, whose variables are on a parameter server), ``AddN(g, Mul(x, s))``
  -> ``_AddScaled(g, x, s)``, the sum in one pass into ``g``'s buffer.

The pass runs on :class:`~dflow.runtime.executor.OpNode` lists, after partitioning: the graph,
its gradients and the placement never see a fused op.

>>> from dflow.runtime.executor import OpNode
>>> stage = [OpNode("bias", "BiasAdd", {"data_format": "NHWC"}, ("conv:0", "b:0"), (), 1),
...          OpNode("relu", "Relu", {}, ("bias:0",), (), 1)]
>>> [(n.name, n.type, n.inputs) for n in fuse(stage, needed={"relu:0"})]
[('relu', '_FusedAddRelu', ('conv:0', 'b:0'))]
>>> [n.type for n in fuse(stage, needed={"relu:0", "bias:0"})]  # the sum is fetched too
['BiasAdd', 'Relu']
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection

from .executor import OpNode

__all__ = ["fuse"]


def _matmul_bias(add: OpNode, matmul: OpNode) -> tuple[str, dict, tuple] | None:
    if matmul.type != "MatMul" or add.attrs.get("data_format") == "NCHW":
        return None
    return "_FusedMatMul", {**matmul.attrs, "activation": ""}, (*matmul.inputs, add.inputs[1])


def _activation_of(activation: OpNode, first: OpNode) -> tuple[str, dict, tuple] | None:
    if first.type == "MatMul" or (first.type == "_FusedMatMul" and not first.attrs["activation"]):
        return "_FusedMatMul", {**first.attrs, "activation": activation.type}, first.inputs
    return None


def _relu_of(relu: OpNode, first: OpNode) -> tuple[str, dict, tuple] | None:
    if first.type in ("MatMul", "_FusedMatMul"):
        return _activation_of(relu, first)
    if first.type == "Conv2D":  # no bias
        return "_FusedConv2DBiasRelu", first.attrs, first.inputs
    if first.type == "BatchNormalization":  # tf.nn.batch_normalization written by hand
        return "_BatchNormalizationRelu", first.attrs, first.inputs
    if first.type not in ("BiasAdd", "Add"):
        return None
    return "_FusedAddRelu", {"data_format": first.attrs.get("data_format", "NHWC")}, first.inputs


def _conv_bias_relu(add_relu: OpNode, conv: OpNode) -> tuple[str, dict, tuple] | None:
    if conv.type != "Conv2D" or conv.attrs["data_format"] != add_relu.attrs["data_format"]:
        return None
    return "_FusedConv2DBiasRelu", conv.attrs, conv.inputs + add_relu.inputs[1:]


def _max_pool_grad_relu_grad(relu_grad: OpNode, pool_grad: OpNode) -> tuple[str, dict, tuple] | None:
    if pool_grad.type != "MaxPoolGrad" or pool_grad.inputs[0] != relu_grad.inputs[1]:
        return None  # ReluGrad's features must be the pooled input: a ReLU's output
    return "_FusedMaxPoolGradReluGrad", pool_grad.attrs, pool_grad.inputs


#: by the second op's type, given the op making its first input: the fused op's type,
#: attributes and inputs, or None
_RULES = {"Relu": _relu_of, "_FusedAddRelu": _conv_bias_relu, "ReluGrad": _max_pool_grad_relu_grad,
          "Add": _matmul_bias, "BiasAdd": _matmul_bias, "Sigmoid": _activation_of, "Tanh": _activation_of}


def fuse(nodes: list[OpNode], needed: Collection[str]) -> list[OpNode]:
    """``nodes`` (in topological order) with each pair of :data:`_RULES` fused, where nothing
    else uses the first op's value. ``needed``: the tensor and ``^op`` names the stage gives
    out (sent to other tasks, kept for its later stages, fetched): a first op among them is
    left alone."""
    nodes = _shapes_from_inputs(_transposes_folded(nodes, needed))
    sole_producer = _sole_producers(nodes, needed)
    fused, absorbed = {}, set()
    for second in nodes:
        while (rule := _RULES.get(second.type)) is not None:  # a fused op may fuse again
            first = sole_producer(second.inputs[0], second.device_type)
            if first is None:
                break
            first = fused.get(first.name, first)  # (the Add of a MatMul fused before its Sigmoid's turn)
            made = rule(second, first)
            if made is None:
                break
            control = tuple(dict.fromkeys(first.control_inputs + second.control_inputs))
            second = fused[second.name] = OpNode(second.name, *made, control, 1, second.device_type)
            absorbed.add(first.name)
    kept = [fused.get(n.name, n) for n in nodes if n.name not in absorbed]
    kept = _with_decayed_updates(_with_bias_grads(_with_batch_norm_relus(kept, needed)), needed)
    return _with_workspaces(_with_sums_fused(kept, needed))


def _transposes_folded(nodes: list[OpNode], needed: Collection[str]) -> list[OpNode]:
    """Each matrix ``Transpose`` into or out of a ``MatMul`` folded into the product's transpose
    flags, as Grappler does: ``MatMul(Transpose(a), b)`` -> ``MatMul(a, b, transpose_a=True)``, and
    ``Transpose(MatMul(a, b))`` -> ``MatMul(b, a, transpose_a=True, transpose_b=True)`` under the
    Transpose's name ((ab)^T = b^T a^T). A transpose is a view that the product reads as it is, but
    an elementwise op or a reduction over a transposed 128 x 10,000 array ran 10-20x slower
    than over its C-ordered copy (a word2vec's ``transpose(matmul(transpose(w), transpose(e))) +
    b``)."""
    sole_producer = _sole_producers(nodes, needed)
    folded, absorbed = {}, set()

    def transposed(value: str, device_type: str) -> OpNode | None:
        producer = sole_producer(value, device_type)
        return producer if producer is not None and producer.type == "Transpose" and \
            producer.attrs["perm"] == [1, 0] else None

    for node in nodes:
        if node.type == "Transpose" and node.attrs["perm"] == [1, 0]:
            product = sole_producer(node.inputs[0], node.device_type)
            if product is not None and product.type == "MatMul":
                absorbed.add(product.name)
                attrs = {"transpose_a": not product.attrs["transpose_b"],
                         "transpose_b": not product.attrs["transpose_a"]}
                node = OpNode(node.name, "MatMul", attrs, product.inputs[::-1],
                              tuple(dict.fromkeys(product.control_inputs + node.control_inputs)), 1,
                              node.device_type)
        if node.type == "MatMul":
            inputs, attrs, control = list(node.inputs), dict(node.attrs), node.control_inputs
            for at, flag in enumerate(("transpose_a", "transpose_b")):
                transpose = transposed(inputs[at], node.device_type)
                if transpose is not None:
                    absorbed.add(transpose.name)
                    inputs[at], attrs[flag] = transpose.inputs[0], not attrs[flag]
                    control = tuple(dict.fromkeys(control + transpose.control_inputs))
            node = OpNode(node.name, "MatMul", attrs, tuple(inputs), control, 1, node.device_type)
        folded[node.name] = node
    return [folded[n.name] for n in nodes if n.name not in absorbed]


#: by the type of an op whose output's Shape is read: the op that makes that shape from its inputs
_SHAPES_FROM_INPUTS = {"Conv2D": "_Conv2DShape", "MatMul": "_MatMulShape"}
#: the ops after a Conv2D or MatMul that fuse with it
_FUSING_READERS = {"Add", "BiasAdd", "Relu", "Sigmoid", "Tanh"}


def _shapes_from_inputs(nodes: list[OpNode]) -> list[OpNode]:
    """Each ``Shape`` of a Conv2D's or MatMul's output as ``_Conv2DShape`` or ``_MatMulShape`` of
    its inputs (:func:`fuse`), where one other op reads that output and may fuse with it (else
    the Shape would only add a reader of the inputs, such as a variable an update waits for)."""
    producers = {f"{n.name}:0": n for n in nodes if n.type in _SHAPES_FROM_INPUTS}
    readers = {tensor: [] for tensor in producers}  # the types of the ops other than Shape reading each
    for node in nodes:
        for tensor in set(node.inputs) & producers.keys():
            if node.type != "Shape":
                readers[tensor].append(node.type)

    def from_inputs(node: OpNode) -> OpNode:
        producer = producers.get(node.inputs[0]) if node.type == "Shape" else None
        if producer is None or producer.device_type != node.device_type:
            return node
        others = readers[node.inputs[0]]
        if len(others) != 1 or others[0] not in _FUSING_READERS:
            return node
        return OpNode(node.name, _SHAPES_FROM_INPUTS[producer.type], {**producer.attrs, **node.attrs},
                      producer.inputs, node.control_inputs, 1, node.device_type)

    return [from_inputs(n) for n in nodes]


def _sole_producers(nodes: list[OpNode], needed: Collection[str]):
    """``producer(value, device_type)``: the op of ``nodes`` on ``device_type`` making
    ``value``, where one op reads ``value`` and nothing else depends on it (no control edge, not
    ``needed``: see :func:`fuse`); else None."""
    consumers = Counter(t for n in nodes for t in n.inputs)
    controlling = {c for n in nodes for c in n.control_inputs}
    by_name = {n.name: n for n in nodes}
    needed = set(needed)

    def producer(value: str, device_type: str) -> OpNode | None:
        first = by_name.get(value.rpartition(":")[0])
        if (first is None or first.device_type != device_type or consumers[value] > 1 or value in needed
                or first.name in controlling or {first.name, "^" + first.name} & needed):
            return None
        return first

    return producer


#: a batch norm's gradient -> the op that takes the gradient of a ReLU after it in its passes
_WITH_RELU_GRAD = {"FusedBatchNormGrad": ("_FusedBatchNormGradRelu", 3),
                   "BatchNormalizationGrad": ("_BatchNormalizationGradRelu", 5)}


def _with_batch_norm_relus(nodes: list[OpNode], needed: Collection[str]) -> list[OpNode]:
    """``Relu(FusedBatchNorm)`` and the batch norms' ``...Grad(ReluGrad)`` each as one op
    (:func:`fuse`; ``Relu(BatchNormalization)`` is a pair of its rules). FusedBatchNorm has other
    outputs (its moments, for the updates and the gradient): it keeps its name and place, and
    the Relu's becomes an ``Identity`` of its first output."""
    sole_producer = _sole_producers(nodes, needed)
    replaced, absorbed = {}, set()
    for node in nodes:
        first = sole_producer(node.inputs[0], node.device_type) if node.inputs else None
        if first is None:
            continue
        if node.type == "Relu" and first.type == "FusedBatchNorm" and node.inputs[0] == f"{first.name}:0":
            replaced[first.name] = OpNode(first.name, "_FusedBatchNormRelu", first.attrs, first.inputs,
                                          first.control_inputs, 5, first.device_type)
            replaced[node.name] = OpNode(node.name, "Identity", {}, node.inputs, node.control_inputs, 1,
                                         node.device_type)
        elif node.type in _WITH_RELU_GRAD and first.type == "ReluGrad":
            fused_type, num_outputs = _WITH_RELU_GRAD[node.type]
            control = tuple(dict.fromkeys(first.control_inputs + node.control_inputs))
            replaced[node.name] = OpNode(node.name, fused_type, node.attrs, (*first.inputs, *node.inputs[1:]),
                                         control, num_outputs, node.device_type)
            absorbed.add(first.name)
    return [replaced.get(n.name, n) for n in nodes if n.name not in absorbed]


def _with_bias_grads(nodes: list[OpNode]) -> list[OpNode]:
    """Each Conv2DBackpropFilter with the BiasAddGrad of its ``g`` (:func:`fuse`)."""
    filter_grads = {n.inputs[2]: n for n in nodes if n.type == "Conv2DBackpropFilter"}
    replaced = {}
    for bias_grad in nodes:
        filter_grad = filter_grads.get(bias_grad.inputs[0]) if bias_grad.type == "BiasAddGrad" else None
        if (filter_grad is None or filter_grad.name in replaced
                or filter_grad.device_type != bias_grad.device_type
                or filter_grad.attrs["data_format"] != bias_grad.attrs["data_format"]):
            continue
        replaced[filter_grad.name] = OpNode(filter_grad.name, "_Conv2DBackpropFilterWithBias",
                                            filter_grad.attrs, filter_grad.inputs, filter_grad.control_inputs,
                                            2, filter_grad.device_type)
        replaced[bias_grad.name] = OpNode(bias_grad.name, "Identity", {}, (f"{filter_grad.name}:1",),
                                          bias_grad.control_inputs, 1, bias_grad.device_type)
    return [replaced.get(n.name, n) for n in nodes]


def _with_decayed_updates(nodes: list[OpNode], needed: Collection[str]) -> list[OpNode]:
    """Each ApplyGradientDescent of an AddN of two terms, one a Mul, as one op (:func:`fuse`),
    where nothing else uses the sum or the product."""
    sole_producer = _sole_producers(nodes, needed)

    def only_for(value: str, device_type: str, op_type: str) -> OpNode | None:
        first = sole_producer(value, device_type)
        return first if first is not None and first.type == op_type else None

    replaced, absorbed = {}, set()
    for update in nodes:
        if update.type != "ApplyGradientDescent":
            continue
        var, alpha, delta = update.inputs
        add = only_for(delta, update.device_type, "AddN")
        if add is None or len(add.inputs) != 2:
            continue
        for product_at in (1, 0):  # the decay's gradient comes second in the tutorials' sums
            product = only_for(add.inputs[product_at], update.device_type, "Mul")
            if product is not None:
                break
        if product is None:
            continue
        control = tuple(dict.fromkeys(product.control_inputs + add.control_inputs + update.control_inputs))
        replaced[update.name] = OpNode(update.name, "_ApplyDecayedGradientDescent", {},
                                       (var, alpha, add.inputs[1 - product_at], *product.inputs),
                                       control, 1, update.device_type)
        absorbed |= {add.name, product.name}
    return [replaced.get(n.name, n) for n in nodes if n.name not in absorbed]


#: by the type of the op making one of an AddN's two terms: the op both become, and its inputs
#: from that op's and the other term
_SUMS = {
    "MomentsGrad": ("_MomentsGradAdd", lambda term_inputs, other: (*term_inputs, other)),
    "Mul": ("_AddScaled", lambda term_inputs, other: (other, *term_inputs)),
}


def _with_sums_fused(nodes: list[OpNode], needed: Collection[str]) -> list[OpNode]:
    """Each AddN of two terms, one made by an op of :data:`_SUMS` that nothing else uses, as one
    op (:func:`fuse`; after :func:`_with_decayed_updates`, which takes a weight decay's sum into
    its update where it can)."""
    sole_producer = _sole_producers(nodes, needed)
    replaced, absorbed = {}, set()
    for add in nodes:
        if add.type != "AddN" or len(add.inputs) != 2:
            continue
        for term_at in (1, 0):  # (the decay's gradient comes second in the tutorials' sums)
            term = sole_producer(add.inputs[term_at], add.device_type)
            if term is not None and term.type in _SUMS:
                fused_type, inputs = _SUMS[term.type]
                control = tuple(dict.fromkeys(term.control_inputs + add.control_inputs))
                replaced[add.name] = OpNode(add.name, fused_type, {},
                                            inputs(term.inputs, add.inputs[1 - term_at]), control, 1,
                                            add.device_type)
                absorbed.add(term.name)
                break
    return [replaced.get(n.name, n) for n in nodes if n.name not in absorbed]


#: by a gradient's type: the forward's type, where the gradient reads its input and output, and
#: the pair that pass the forward's workspace (the gradient's last input) and the attributes it adds
_POOL_PAIR = ("_MaxPoolWithWorkspace", "_MaxPoolGradWithWorkspace")
_WORKSPACES = {
    "MaxPoolGrad": ("MaxPool", (0, 1), *_POOL_PAIR, {"relu_grad": False}),
    "_FusedMaxPoolGradReluGrad": ("MaxPool", (0, 1), *_POOL_PAIR, {"relu_grad": True}),
    "LRNGrad": ("LRN", (1, 2), "_LRNWithWorkspace", "_LRNGradWithWorkspace", {}),
}


def _with_workspaces(nodes: list[OpNode]) -> list[OpNode]:
    """Each NHWC MaxPool and each LRN on the CPU whose gradient is in the stage, and that
    gradient, passing the forward's workspace (:func:`fuse`)."""
    by_name = {n.name: n for n in nodes}
    replaced = {}
    for grad in nodes:
        if grad.type not in _WORKSPACES or grad.device_type != "CPU":
            continue
        forward_type, (x_at, y_at), with_workspace, grad_with_workspace, added = _WORKSPACES[grad.type]
        x, y = grad.inputs[x_at], grad.inputs[y_at]
        forward = by_name.get(y.rpartition(":")[0])
        if (forward is None or forward.type != forward_type or y != f"{forward.name}:0"
                or forward.inputs[0] != x or forward.device_type != "CPU"
                or grad.attrs.get("data_format", "NHWC") != "NHWC"
                or any(forward.attrs[k] != grad.attrs[k] for k in grad.attrs)):
            continue
        replaced[forward.name] = OpNode(forward.name, with_workspace, forward.attrs, forward.inputs,
                                        forward.control_inputs, 2, "CPU")
        replaced[grad.name] = OpNode(grad.name, grad_with_workspace, {**grad.attrs, **added},
                                     (*grad.inputs, f"{forward.name}:1"), grad.control_inputs, 1, "CPU")
    return [replaced.get(n.name, n) for n in nodes]
