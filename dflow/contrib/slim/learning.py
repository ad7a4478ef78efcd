"""``tf.contrib.slim.learning``: :func:`create_train_op`, slim's training op (the loss, after one
step). slim's own training loop (``learning.train``, on a Supervisor) is not supported; a
``tf.train.MonitoredTrainingSession`` loop runs the op instead.

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     w = tf.Variable(3.0)
...     train_op = create_train_op(tf.square(w), tf.train.GradientDescentOptimizer(0.25))
...     with tf.Session() as sess:
...         sess.run(tf.global_variables_initializer())
...         loss = sess.run(train_op)
...         float(loss), float(sess.run(w)), int(sess.run(tf.train.get_global_step()))
(9.0, 1.5, 1)
"""

from __future__ import annotations

import logging

from ...graph import GraphKeys, add_to_collection, control_dependencies, get_collection, name_scope
from ...ops import array_ops, math_ops, summary_ops
from ...train.training_util import get_or_create_global_step
from ...variables import trainable_variables

__all__ = ["create_train_op"]

log = logging.getLogger("dflow")

_USE_GLOBAL_STEP = object()  # slim's default: the graph's global step, made where missing


def create_train_op(total_loss, optimizer, global_step=_USE_GLOBAL_STEP, update_ops=None,
                    variables_to_train=None, clip_gradient_norm: float = 0, summarize_gradients: bool = False,
                    gate_gradients=1, aggregation_method=None, colocate_gradients_with_ops: bool = False,
                    gradient_multipliers: dict | None = None, check_numerics: bool = True):
    """A tensor whose evaluation runs ``update_ops`` (default: the ``UPDATE_OPS`` collection, a
    batch norm's moving averages), then ``optimizer``'s step on ``variables_to_train`` (default:
    the trainable ones) with ``global_step`` counted, and gives ``total_loss`` as it was before
    the step. Each gradient is scaled by ``gradient_multipliers`` (variable or its name ->
    factor) and clipped to ``clip_gradient_norm`` where positive, as slim's."""
    if global_step is _USE_GLOBAL_STEP:
        global_step = get_or_create_global_step()
    collected = set(get_collection(GraphKeys.UPDATE_OPS))
    update_ops = collected if update_ops is None else set(update_ops)
    if not collected <= update_ops:
        log.warning("update_ops in create_train_op does not contain all the update_ops in "
                    "GraphKeys.UPDATE_OPS")
    if update_ops:  # the updates before the loss is read, as slim orders them
        with control_dependencies(update_ops):
            barrier = array_ops.no_op(name="update_barrier")
        with control_dependencies([barrier]):
            total_loss = array_ops.identity(total_loss)
    variables = trainable_variables() if variables_to_train is None else variables_to_train
    gradients = optimizer.compute_gradients(total_loss, variables, gate_gradients=gate_gradients,
                                            aggregation_method=aggregation_method,
                                            colocate_gradients_with_ops=colocate_gradients_with_ops)
    gradients = [(_transformed(gradient, variable, gradient_multipliers, clip_gradient_norm), variable)
                 for gradient, variable in gradients]
    if summarize_gradients:
        for gradient, variable in gradients:
            if gradient is not None:
                summary_ops.histogram(f"{variable.op.name}/gradient", gradient)
    step = optimizer.apply_gradients(gradients, global_step=global_step)
    with name_scope("train_op"):
        if check_numerics:
            total_loss = math_ops.check_numerics(total_loss, "LossTensor is inf or nan")
        with control_dependencies([step]):
            train_op = array_ops.identity(total_loss, name="train_op")
    add_to_collection(GraphKeys.TRAIN_OP, train_op)
    return train_op


def _transformed(gradient, variable, multipliers: dict | None, clip_norm: float):
    if gradient is None:
        return None
    if multipliers:
        factor = multipliers.get(variable, multipliers.get(variable.op.name))
        if factor is not None:
            gradient = gradient * factor
    if clip_norm > 0:
        gradient = math_ops.clip_by_norm(gradient, clip_norm)
    return gradient


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(f"tf.contrib.slim.learning.{name} is not supported by dflow; use create_train_op "
                         "with a tf.train.MonitoredTrainingSession loop instead")
