"""Symbolic reverse-mode differentiation: ``tf.gradients(ys, xs)``.

Ops are created after their inputs, so the graph's creation order is a
topological order. Find the ops between ``xs`` and ``ys`` on the graph's
networkx view (as the passes do), walk them backwards, ask each
op's gradient rule for its input gradients (new graph, not numbers), and sum
the gradients of tensors that fan out to several consumers.
"""

from __future__ import annotations

import functools
import inspect
import itertools
from collections.abc import Callable

from .graph import Tensor, convert_to_tensor, get_default_graph
from .ops.array_ops import identity_n, ones, shape, zeros_like
from .ops.math_ops import add_n
from .ops.registry import OP_DEFS

__all__ = ["gradients", "RegisterGradient", "NotDifferentiable", "no_gradient", "custom_gradient"]

#: gradient functions registered by name (``tf.RegisterGradient``); None: not differentiable
_REGISTERED: dict[str, Callable | None] = {}
_CUSTOM_GRADIENTS = itertools.count()  # numbers tf.custom_gradient's registered names


class RegisterGradient:
    """``@tf.RegisterGradient("Name")``: the decorated ``f(op, *output_grads)``, which returns the
    gradients of ``op``'s inputs (graph, as dflow's own rules do), is the gradient of the ops that
    ``graph.gradient_override_map`` maps to ``Name``, or of ops of type ``Name`` that have none.

    >>> @tf.RegisterGradient("Reversed")  # doctest: +SKIP
    ... def _reversed(op, grad):
    ...     return [-grad]
    """

    def __init__(self, op_type: str):
        if not isinstance(op_type, str):
            raise TypeError(f"RegisterGradient takes the gradient's name (a string), got {op_type!r}")
        self._op_type = op_type

    def __call__(self, f: Callable) -> Callable:
        _register(self._op_type, f)
        return f


def NotDifferentiable(op_type: str) -> None:  # noqa: N802 - TF's name
    """Ops of type ``op_type`` pass no gradient to their inputs (``tf.NotDifferentiable``)."""
    if not isinstance(op_type, str):
        raise TypeError(f"NotDifferentiable takes an op type (a string), got {op_type!r}")
    _register(op_type, None)


no_gradient = NotDifferentiable


def _register(name: str, f: Callable | None) -> None:
    if name in _REGISTERED or (name in OP_DEFS and OP_DEFS[name].grad is not None):
        raise KeyError(f"Registering two gradients with name {name!r}: it has one already "
                       "(pick another name, and map the op to it with graph.gradient_override_map)")
    _REGISTERED[name] = f


def custom_gradient(f: Callable) -> Callable:
    """``@tf.custom_gradient``: ``f(*x)`` returns ``(y, grad_fn)``, and the gradient that reaches
    each ``x`` through ``y`` is ``grad_fn(dy)`` (graph: one gradient per ``x``, or one tensor for
    one ``x``) instead of the gradient of the ops ``f`` made. Variables that ``f`` reads reach
    ``grad_fn`` as ``variables=``; ``grad_fn`` then returns ``(x_grads, variable_grads)``.

    >>> import dflow as tf
    >>> @tf.custom_gradient
    ... def clip_gradient(x):
    ...     return tf.identity(x), lambda dy: tf.clip_by_value(dy, -1.0, 1.0)
    >>> with tf.Graph().as_default():
    ...     x = tf.constant(2.0)
    ...     (dx,) = tf.gradients(5.0 * clip_gradient(x), [x])
    ...     float(tf.Session().run(dx))
    1.0
    """

    @functools.wraps(f)
    def decorated(*args, **kwargs):
        xs = [convert_to_tensor(x) for x in args]
        result, grad_fn = f(*xs, **kwargs)
        single = not isinstance(result, (list, tuple))
        ys = [convert_to_tensor(y) for y in ([result] if single else result)]
        variables = _variables_read(ys, xs)
        parameters = inspect.signature(grad_fn).parameters
        if variables and "variables" not in parameters and \
                not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
            raise TypeError(f"@custom_gradient function {f.__name__!r} reads variables "
                            f"({', '.join(v.op.name for v in variables)}), so its grad_fn must take them: "
                            "def grad_fn(*dys, variables=None) returning (input_grads, variable_grads)")

        def gradient(op, *output_grads):
            dys = [zeros_like(y) if g is None else g for y, g in zip(ys, output_grads)]
            grads = grad_fn(*dys, variables=variables) if variables else grad_fn(*dys)
            x_grads, variable_grads = grads if variables else (grads, [])
            x_grads = list(x_grads) if isinstance(x_grads, (list, tuple)) else [x_grads]
            if len(x_grads) != len(xs) or len(variable_grads) != len(variables):
                raise ValueError(f"the grad_fn of @custom_gradient function {f.__name__!r} returned "
                                 f"{len(x_grads)} input gradients for {len(xs)} inputs"
                                 + (f" and {len(variable_grads)} for {len(variables)} variables"
                                    if variables else ""))
            return [None] * len(ys) + x_grads + list(variable_grads)

        name = f"CustomGradient-{next(_CUSTOM_GRADIENTS)}"
        _register(name, gradient)
        with get_default_graph().gradient_override_map({"IdentityN": name}):
            outputs = identity_n([*ys, *xs, *(convert_to_tensor(v) for v in variables)])[:len(ys)]
        return outputs[0] if single else type(result)(outputs)

    return decorated


def _variables_read(ys: list[Tensor], xs: list[Tensor]) -> list:
    """The variables whose value the ops between ``xs`` and ``ys`` read (a walk back from ``ys``
    that stops at ``xs``), as ``tf.Variable`` objects, in the order met."""
    graph = ys[0].graph
    owner = {v.op: v for key in ("variables", "local_variables") for v in graph.get_collection(key)}
    found, seen, stack = [], set(xs), list(ys)
    while stack:
        tensor = stack.pop()
        if tensor in seen:
            continue
        seen.add(tensor)
        if tensor.op in owner and owner[tensor.op] not in found:
            found.append(owner[tensor.op])
        stack.extend(tensor.op.inputs)
    return found


def _gradient_function(op) -> Callable | None:
    """``op``'s gradient rule: the one registered under its override or its type, else its own."""
    name = op.gradient_override or op.type
    if name in _REGISTERED:
        registered = _REGISTERED[name]
        return None if registered is None else _checked(registered, op, name)
    if op.gradient_override is not None:
        raise LookupError(f"gradient_override_map maps {op.type} op {op.name!r} to {name!r}, but no "
                          f"tf.RegisterGradient({name!r}) was registered")
    return op.opdef.grad


def _checked(f: Callable, op, name: str) -> Callable:
    def gradient(op, *output_grads):
        grads = f(op, *output_grads)
        grads = list(grads) if isinstance(grads, (list, tuple)) else [grads]
        if len(grads) != len(op.inputs):
            raise ValueError(f"the gradient {name!r} returned {len(grads)} gradients for {op.type} op "
                             f"{op.name!r}, which has {len(op.inputs)} inputs")
        return [None if g is None else convert_to_tensor(g) for g in grads]

    return gradient


def gradients(ys, xs, grad_ys=None, name="gradients", stop_gradients=None) -> list[Tensor | None]:
    """Symbolic d(sum of ys)/d(x) for each x; None where x does not reach ys.

    >>> import dflow as tf
    >>> with tf.Graph().as_default():
    ...     x = tf.constant(3.0)
    ...     (dx,) = tf.gradients(x * x, [x])
    ...     float(tf.Session().run(dx))
    6.0
    """
    ys = [convert_to_tensor(y) for y in _as_list(ys)]
    xs = [convert_to_tensor(x) for x in _as_list(xs)]
    stops = {convert_to_tensor(s) for s in _as_list(stop_gradients or [])}
    grad_ys = _as_list(grad_ys) if grad_ys is not None else [None] * len(ys)
    graph = ys[0].graph
    between = _ops_between(graph, xs, ys)
    pending: dict[Tensor, list[Tensor]] = {}
    with graph.as_default(), graph.name_scope(name):
        for i, (y, gy) in enumerate(zip(ys, grad_ys)):
            # ones of y's shape, not ones_like(y), as TF does: where the shape is known the seed reads
            # nothing, so a step that fetches only the train_op does not compute the loss itself
            seed = ones(shape(y), dtype=y.dtype, name=f"grad_ys_{i}") if gy is None else convert_to_tensor(gy)
            pending.setdefault(y, []).append(seed)
        sources = set(xs)
        for op in sorted(between, key=lambda op: op._id, reverse=True):
            out_grads = [_total(pending.pop(t, None)) for t in op.outputs]
            if all(g is None for g in out_grads) or any(t in stops for t in op.outputs):
                continue
            gradient = _gradient_function(op)
            if gradient is None:
                _check_not_differentiable(op, between, sources)
                continue
            with graph.name_scope(op.name + "_grad"):
                in_grads = gradient(op, *out_grads)
            for t, g in zip(op.inputs, in_grads):
                if g is not None and t.dtype.is_floating:
                    pending.setdefault(t, []).append(g)
        return [_total(pending.get(x)) for x in xs]


def _check_not_differentiable(op, between: set, sources: set) -> None:
    """TF's LookupError for an op with no gradient that a gradient reaches on its way to a float
    input on the path: it would otherwise pass nothing back, and the variables behind it would
    silently not train. Stateful ops (updates, queues, random draws) and op types registered
    with ``tf.NotDifferentiable`` pass nothing, as in TF."""
    if op.opdef.stateful or (op.gradient_override or op.type) in _REGISTERED:
        return
    if any(t.dtype.is_floating and (t in sources or t.op in between) for t in op.inputs):
        raise LookupError(f"No gradient defined for operation '{op.name}' (op type: {op.type}): dflow has "
                          "none; wrap its output in tf.stop_gradient where nothing behind it should train, "
                          "or give one with tf.RegisterGradient and gradient_override_map")


def _total(grads: list[Tensor] | None) -> Tensor | None:
    if not grads:
        return None
    return grads[0] if len(grads) == 1 else add_n(grads)


def _ops_between(graph, xs, ys) -> set:
    """Ops that lie on some path of tensors (``graph.nx``'s data edges) from an x to a y."""
    succ, pred = graph.nx.succ, graph.nx.pred  # node -> neighbour -> edge key -> data

    def carries_data(keys) -> bool:  # a tensor's edge, not only a control dependency
        return len(keys) > 1 or "control" not in keys

    # an x's own producer is not differentiated, only what consumes x
    from_x, stack = set(), [consumer.name for x in xs for consumer in x.consumers()]
    while stack:
        name = stack.pop()
        if name not in from_x:
            from_x.add(name)
            stack.extend(consumer for consumer, keys in succ[name].items() if carries_data(keys))
    to_y, stack = set(), [y.op.name for y in ys]
    while stack:
        name = stack.pop()
        if name not in to_y and name in from_x:
            to_y.add(name)
            stack.extend(producer for producer, keys in pred[name].items() if carries_data(keys))
    return {graph.nx.nodes[name]["op"] for name in to_y}


def _as_list(value) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]
