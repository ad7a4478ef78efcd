"""``tf.contrib.legacy_seq2seq``: the per-example and batch sequence losses of TF 1.x's
language-model tutorials (``sequence_loss_by_example``, ``sequence_loss``) and the plain
decoder ``rnn_decoder`` (char-rnn's), over lists with one tensor per time step. The attention
and embedding seq2seq models are not supported by dflow.
"""

from __future__ import annotations

from ..graph import get_default_graph
from ..ops import array_ops, math_ops, nn_ops
from ..variables import get_variable_scope, variable_scope

__all__ = ["sequence_loss_by_example", "sequence_loss", "rnn_decoder"]


def rnn_decoder(decoder_inputs, initial_state, cell, loop_function=None, scope=None):
    """Run ``cell`` over ``decoder_inputs`` (a list of ``[batch, size]`` tensors) from
    ``initial_state``: ``(outputs, last state)``, one output per input. With ``loop_function``,
    the input of each step after the first is ``loop_function(previous output, step)`` instead
    (sampling from the model). One set of the cell's variables serves every step.

    >>> import dflow as tf
    >>> with tf.Graph().as_default():
    ...     cell = tf.nn.rnn_cell.BasicLSTMCell(3)
    ...     inputs = [tf.ones([2, 4]) for _ in range(5)]
    ...     outputs, state = rnn_decoder(inputs, cell.zero_state(2, tf.float32), cell)
    ...     len(outputs), outputs[0].shape.as_list(), len(tf.trainable_variables())
    (5, [2, 3], 2)
    """
    with variable_scope(scope or "rnn_decoder"):
        state, outputs, previous = initial_state, [], None
        for step, step_input in enumerate(decoder_inputs):
            if loop_function is not None and previous is not None:
                with variable_scope("loop_function", reuse=True):
                    step_input = loop_function(previous, step)
            if step > 0:
                get_variable_scope().reuse_variables()
            output, state = cell(step_input, state)
            outputs.append(output)
            previous = output
        return outputs, state


def sequence_loss_by_example(logits, targets, weights, average_across_timesteps=True,
                             softmax_loss_function=None, name=None):
    """``sum_t weights[t] * xent(logits[t], targets[t])`` per example, divided by
    ``sum_t weights[t]`` (plus 1e-12) when ``average_across_timesteps``: shape ``[batch]``."""
    if not (len(logits) == len(targets) == len(weights)):
        raise ValueError("Lengths of logits, weights, and targets must be the same "
                         f"{len(logits)}, {len(weights)}, {len(targets)}.")
    with get_default_graph().name_scope(name or "sequence_loss_by_example"):
        loss_fn = softmax_loss_function or nn_ops.sparse_softmax_cross_entropy_with_logits
        terms = [loss_fn(labels=array_ops.reshape(target, [-1]), logits=logit) * weight
                 for logit, target, weight in zip(logits, targets, weights)]
        total = math_ops.add_n(terms)
        if average_across_timesteps:
            total = total / (math_ops.add_n(list(weights)) + 1e-12)
        return total


def sequence_loss(logits, targets, weights, average_across_timesteps=True, average_across_batch=True,
                  softmax_loss_function=None, name=None):
    """The sum of :func:`sequence_loss_by_example` over the batch, divided by the batch size
    when ``average_across_batch``: a scalar."""
    with get_default_graph().name_scope(name or "sequence_loss"):
        per_example = sequence_loss_by_example(logits, targets, weights, average_across_timesteps,
                                               softmax_loss_function)
        cost = math_ops.reduce_sum(per_example)
        if average_across_batch:
            batch = math_ops.cast(array_ops.shape(targets[0])[0], cost.dtype)
            cost = cost / batch
        return cost
