"""The global step: one int64 counter per graph that optimizers increment.

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     step = tf.train.get_or_create_global_step()
...     with tf.Session() as sess:
...         _ = sess.run(tf.global_variables_initializer())
...         int(sess.run(step))
0
"""

from __future__ import annotations

from .. import dtypes
from ..graph import Graph, GraphKeys, get_default_graph
from ..ops import array_ops
from ..variables import Variable

__all__ = ["get_global_step", "create_global_step", "get_or_create_global_step", "global_step"]


def get_global_step(graph: Graph | None = None) -> Variable | None:
    """The graph's global step variable, or None if it has none.

    Looks in the ``GLOBAL_STEP`` collection, then for a global variable named ``global_step``,
    as TF does; more than one entry is an error.
    """
    graph = graph or get_default_graph()
    steps = graph.get_collection(GraphKeys.GLOBAL_STEP)
    if not steps:  # as TF: a variable named 'global_step' made by hand (mnist_replica.py's tf.Variable(0))
        steps = [v for v in graph.get_collection(GraphKeys.GLOBAL_VARIABLES)
                 if getattr(v, "op", None) is not None and v.op.name == "global_step"]
    if len(steps) > 1:
        raise TypeError(f"Multiple tensors in global_step collection: {steps}")
    return steps[0] if steps else None


def create_global_step(graph: Graph | None = None) -> Variable:
    """Create the int64 scalar variable ``global_step`` (0, not trainable).

    It joins ``GLOBAL_VARIABLES`` (so the initializer and the Saver see it) and
    ``GLOBAL_STEP``. It is named ``global_step`` whatever name scope is open.
    """
    graph = graph or get_default_graph()
    if get_global_step(graph) is not None:
        raise ValueError('"global_step" already exists.')
    with graph.as_default(), graph.name_scope(None):
        return Variable(lambda: array_ops.constant(0, dtypes.int64), trainable=False,
                        name=GraphKeys.GLOBAL_STEP, dtype=dtypes.int64,
                        collections=[GraphKeys.GLOBAL_VARIABLES, GraphKeys.GLOBAL_STEP])


def get_or_create_global_step(graph: Graph | None = None) -> Variable:
    """The graph's global step, created on first use."""
    step = get_global_step(graph)
    return step if step is not None else create_global_step(graph)


def global_step(sess, global_step_tensor) -> int:
    """The current value of ``global_step_tensor`` in ``sess``, as a Python int."""
    return int(sess.run(global_step_tensor))
