"""From graph to executor: the ops a step needs (:func:`prune`) and each as the executor's plain
:class:`~dflow.runtime.executor.OpNode` (:func:`to_node`). The local session, the partitioner and
``tf.data``'s in-graph functions all lower through here.

>>> import dflow as tf
>>> with tf.Graph().as_default() as g:
...     a = tf.constant(2.0, name="a")
...     b = tf.multiply(a, 3.0, name="b")
...     unused = tf.constant(0.0, name="unused")
>>> [op.name for op in prune(g, [b], fed=set())]
['a', 'Const', 'b']
>>> to_node(b.op).inputs
('a:0', 'Const:0')
"""

from __future__ import annotations

from ..graph import Graph, Operation, Tensor
from .executor import OpNode

__all__ = ["prune", "to_node"]


def prune(graph: Graph, fetches: list, fed: set[str]) -> list[Operation]:
    """The ops the fetches need, in creation (topological) order; fed tensors cut the graph."""
    needed: set[Operation] = set()
    stack = [f.op if isinstance(f, Tensor) else f for f in fetches
             if not (isinstance(f, Tensor) and f.name in fed)]
    while stack:
        op = stack.pop()
        if op in needed:
            continue
        needed.add(op)
        stack.extend(t.op for t in op.inputs if t.name not in fed)
        stack.extend(op.control_inputs)
    return sorted(needed, key=lambda op: op._id)


def to_node(op: Operation, device_type: str = "CPU") -> OpNode:
    return OpNode(op.name, op.type, op.attrs, tuple(t.name for t in op.inputs),
                  tuple(c.name for c in op.control_inputs), len(op.outputs), device_type)
