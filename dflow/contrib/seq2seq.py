"""``tf.contrib.seq2seq``: the weighted cross-entropy over a batch of sequences that TF 1.x
language models train on (``sequence_loss``). The decoders and attention of TF's module
are not supported by dflow.

>>> import dflow as tf
>>> from dflow.contrib import seq2seq
>>> with tf.Graph().as_default():
...     logits = tf.zeros([2, 3, 4])                     # batch 2, 3 steps, 4 classes
...     loss = seq2seq.sequence_loss(logits, tf.zeros([2, 3], tf.int32), tf.ones([2, 3]))
...     round(float(tf.Session().run(loss)), 4)          # log(4)
1.3863
"""

from __future__ import annotations

from ..graph import convert_to_tensor, get_default_graph
from ..ops import array_ops, math_ops, nn_ops

__all__ = ["sequence_loss"]


def sequence_loss(logits, targets, weights, average_across_timesteps=True, average_across_batch=True,
                  softmax_loss_function=None, name=None, sum_over_timesteps=False, sum_over_batch=False):
    """Cross-entropy of ``logits`` ``[batch, steps, classes]`` against class ids ``targets``
    ``[batch, steps]``, each term times ``weights`` ``[batch, steps]``, reduced as TF 1.15 does:
    ``average_across_*`` divide the sum by the weights' sum, ``sum_over_*`` by the count of
    nonzero weights (a batch average when both of one kind are set, averaging winning over
    summing); a scalar when both axes are reduced, else ``[steps]`` or ``[batch]``."""
    if average_across_timesteps and sum_over_timesteps:
        raise ValueError("average_across_timesteps and sum_over_timesteps cannot be set to True at "
                         "same time.")
    if average_across_batch and sum_over_batch:
        raise ValueError("average_across_batch and sum_over_batch cannot be set to True at same time.")
    with get_default_graph().name_scope(name or "sequence_loss"):
        logits, targets, weights = (convert_to_tensor(t) for t in (logits, targets, weights))
        if logits.shape.ndims != 3 or targets.shape.ndims != 2 or weights.shape.ndims != 2:
            raise ValueError(f"sequence_loss needs logits [batch, steps, classes] and targets and weights "
                             f"[batch, steps], got {logits.shape}, {targets.shape} and {weights.shape}")
        flat_logits = array_ops.reshape(logits, array_ops.concat([[-1], array_ops.shape(logits)[2:]], 0))
        flat_targets = array_ops.reshape(targets, [-1])
        loss_fn = softmax_loss_function or nn_ops.sparse_softmax_cross_entropy_with_logits
        terms = loss_fn(labels=flat_targets, logits=flat_logits) * array_ops.reshape(weights, [-1])
        if average_across_timesteps and average_across_batch:
            return _divide(math_ops.reduce_sum(terms), math_ops.reduce_sum(weights))
        if sum_over_timesteps and sum_over_batch:
            return _divide(math_ops.reduce_sum(terms), _nonzero(weights, None))
        terms = array_ops.reshape(terms, array_ops.shape(targets))
        if average_across_timesteps or average_across_batch:
            axis = [0] if average_across_batch else [1]
            return _divide(math_ops.reduce_sum(terms, axis), math_ops.reduce_sum(weights, axis))
        if sum_over_timesteps or sum_over_batch:
            axis = [0] if sum_over_batch else [1]
            return _divide(math_ops.reduce_sum(terms, axis), _nonzero(weights, axis))
        return terms


def _nonzero(weights, axis):
    return math_ops.reduce_sum(math_ops.cast(math_ops.not_equal(weights, 0.0), weights.dtype), axis)


def _divide(total, count):
    """``total / count``, 0 where ``count`` is 0 (TF's div_no_nan)."""
    safe = math_ops.where(count > 0.0, count, count * 0.0 + 1.0)
    return math_ops.where(count > 0.0, total / safe, total * 0.0)
