"""Symbolic reverse-mode differentiation: ``tf.gradients(ys, xs)``.

Ops are created after their inputs, so the graph's creation order is a
topological order. Walk the ops between ``xs`` and ``ys`` backwards, ask each
op's gradient rule for its input gradients (new graph, not numbers), and sum
the gradients of tensors that fan out to several consumers.
"""

from __future__ import annotations

from .graph import Tensor, convert_to_tensor
from .ops.array_ops import ones_like
from .ops.math_ops import add_n

__all__ = ["gradients"]


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
        for y, gy in zip(ys, grad_ys):
            pending.setdefault(y, []).append(ones_like(y) if gy is None else convert_to_tensor(gy))
        for op in sorted(between, key=lambda op: op._id, reverse=True):
            out_grads = [_total(pending.pop(t, None)) for t in op.outputs]
            if all(g is None for g in out_grads) or op.opdef.grad is None:
                continue
            if any(t in stops for t in op.outputs):
                continue
            with graph.name_scope(op.name + "_grad"):
                in_grads = op.opdef.grad(op, *out_grads)
            for t, g in zip(op.inputs, in_grads):
                if g is not None and t.dtype.is_floating:
                    pending.setdefault(t, []).append(g)
        return [_total(pending.get(x)) for x in xs]


def _total(grads: list[Tensor] | None) -> Tensor | None:
    if not grads:
        return None
    return grads[0] if len(grads) == 1 else add_n(grads)


def _ops_between(graph, xs, ys) -> set:
    """Ops that lie on some path from an x to a y."""
    # an x's own producer is not differentiated, only what consumes x
    from_x = set()
    stack = [c for x in xs for c in graph._consumers.get(x.op.name, ()) if x in c.inputs]
    while stack:
        op = stack.pop()
        if op not in from_x:
            from_x.add(op)
            stack.extend(c for t in op.outputs for c in graph._consumers.get(op.name, ()) if t in c.inputs)
    to_y, stack = set(), [y.op for y in ys]
    while stack:
        op = stack.pop()
        if op not in to_y and op in from_x:
            to_y.add(op)
            stack.extend(t.op for t in op.inputs)
    return to_y


def _as_list(value) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]
