"""``tf.metrics``: streaming metrics over many ``Session.run`` calls, as TF 1.x has them.

Each metric returns ``(value, update_op)``: running ``update_op`` adds a batch to
local variables (``<name>/total``, ``<name>/count``, in ``GraphKeys.LOCAL_VARIABLES``
and ``GraphKeys.METRIC_VARIABLES``) and returns the metric so far; ``value`` reads it
without updating. ``tf.local_variables_initializer()`` starts them over.

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     labels = tf.placeholder(tf.int64, [None])
...     predictions = tf.placeholder(tf.int64, [None])
...     acc, update = tf.metrics.accuracy(labels=labels, predictions=predictions)
...     with tf.Session() as sess:
...         sess.run(tf.local_variables_initializer())
...         _ = sess.run(update, {labels: [1, 2, 3], predictions: [1, 2, 0]})
...         _ = sess.run(update, {labels: [4], predictions: [4]})
...         float(sess.run(acc))
0.75
"""

from __future__ import annotations

from . import dtypes
from .graph import GraphKeys, Tensor, convert_to_tensor, get_default_graph
from .losses import safe_divide
from .ops import array_ops, math_ops, state_ops
from .variables import Variable, variable_scope

__all__ = ["mean", "accuracy", "mean_squared_error", "mean_absolute_error", "root_mean_squared_error",
           "precision", "recall", "true_positives", "false_positives", "false_negatives", "auc"]


def _metric_variable(name: str, shape=()) -> Variable:
    """A float32 local variable starting at 0 (a scalar by default), as TF's ``metric_variable``."""
    return Variable(lambda: array_ops.zeros(list(shape), dtypes.float32), trainable=False, name=name,
                    collections=[GraphKeys.LOCAL_VARIABLES, GraphKeys.METRIC_VARIABLES])


def _collect(metrics_collections, updates_collections, value, update_op) -> tuple[Tensor, Tensor]:
    graph = get_default_graph()
    if metrics_collections:
        graph.add_to_collections(metrics_collections, value)
    if updates_collections:
        graph.add_to_collections(updates_collections, update_op)
    return value, update_op


def _as_float(x) -> Tensor:
    x = convert_to_tensor(x)
    return x if x.dtype == dtypes.float32 else math_ops.cast(x, dtypes.float32)


def mean(values, weights=None, metrics_collections=None, updates_collections=None, name=None):
    """The (weighted) mean of every value seen: ``(mean, update_op)``.

    >>> import dflow as tf
    >>> with tf.Graph().as_default():
    ...     loss = tf.placeholder(tf.float32, [None])
    ...     mean_loss, update = tf.metrics.mean(loss)
    ...     with tf.Session() as sess:
    ...         sess.run(tf.local_variables_initializer())
    ...         for batch in ([1.0, 2.0], [6.0]):
    ...             _ = sess.run(update, {loss: batch})
    ...         float(sess.run(mean_loss))
    3.0
    """
    with variable_scope(name, "mean", (values, weights)):
        values = _as_float(values)
        total, count = _metric_variable("total"), _metric_variable("count")
        if weights is None:
            batch_count = math_ops.cast(math_ops.size(values), dtypes.float32)
        else:
            weights = _as_float(weights) * array_ops.ones_like(values)
            values = values * weights
            batch_count = math_ops.reduce_sum(weights)
        with get_default_graph().colocate_with(total):
            update_total = state_ops.assign_add(total, math_ops.reduce_sum(values))
        with get_default_graph().colocate_with(count):
            update_count = state_ops.assign_add(count, batch_count)
        value = safe_divide(total.value(), count.value(), "value")
        update_op = safe_divide(update_total, update_count, "update_op")
        return _collect(metrics_collections, updates_collections, value, update_op)


def _squeezed(labels: Tensor, predictions: Tensor) -> tuple[Tensor, Tensor]:
    """TF's ``remove_squeezable_dimensions``: a trailing 1 on whichever has one more dim goes."""
    rank_l, rank_p = labels.shape.ndims, predictions.shape.ndims
    if rank_l is not None and rank_p is not None:
        # as TF's: a last dim not known to be 1 (a decode_raw'd label: (?, ?)) is squeezed too
        if rank_l == rank_p + 1 and labels.shape.dims[-1] in (1, None):
            labels = array_ops.squeeze(labels, [-1])
        elif rank_p == rank_l + 1 and predictions.shape.dims[-1] in (1, None):
            predictions = array_ops.squeeze(predictions, [-1])
    return labels, predictions


def accuracy(labels, predictions, weights=None, metrics_collections=None, updates_collections=None,
             name=None):
    """The share of ``predictions`` equal to ``labels``: ``(accuracy, update_op)``.

    >>> import dflow as tf
    >>> with tf.Graph().as_default():
    ...     logits = tf.constant([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7]])
    ...     acc, acc_op = tf.metrics.accuracy(labels=[1, 1, 1], predictions=tf.argmax(logits, 1))
    ...     with tf.Session() as sess:
    ...         sess.run(tf.local_variables_initializer())
    ...         round(float(sess.run(acc_op)), 4)
    0.6667
    """
    labels, predictions = _squeezed(convert_to_tensor(labels), convert_to_tensor(predictions))
    if labels.dtype != predictions.dtype:
        predictions = math_ops.cast(predictions, labels.dtype)
    is_correct = math_ops.cast(math_ops.equal(predictions, labels), dtypes.float32)
    return mean(is_correct, weights, metrics_collections, updates_collections, name or "accuracy")


def mean_squared_error(labels, predictions, weights=None, metrics_collections=None,
                       updates_collections=None, name=None):
    """The mean of ``(predictions - labels)^2`` over every element seen."""
    errors = math_ops.square(_as_float(predictions) - _as_float(labels))
    return mean(errors, weights, metrics_collections, updates_collections, name or "mean_squared_error")


def mean_absolute_error(labels, predictions, weights=None, metrics_collections=None,
                        updates_collections=None, name=None):
    """The mean of ``|predictions - labels|`` over every element seen."""
    errors = math_ops.abs(_as_float(predictions) - _as_float(labels))
    return mean(errors, weights, metrics_collections, updates_collections, name or "mean_absolute_error")


def root_mean_squared_error(labels, predictions, weights=None, metrics_collections=None,
                            updates_collections=None, name=None):
    """The square root of :func:`mean_squared_error`."""
    mse, update = mean_squared_error(labels, predictions, weights, None, None,
                                     name or "root_mean_squared_error")
    return _collect(metrics_collections, updates_collections, math_ops.sqrt(mse), math_ops.sqrt(update))


def _count(condition, weights, name):
    """A running (weighted) count of where ``condition`` holds: ``(count, update_op)``."""
    with variable_scope(None, name):
        hits = math_ops.cast(condition, dtypes.float32)
        if weights is not None:
            hits = hits * _as_float(weights)
        count = _metric_variable("count")
        with get_default_graph().colocate_with(count):
            update = state_ops.assign_add(count, math_ops.reduce_sum(hits))
        return count.value(), update


def _bools(labels, predictions):
    return (math_ops.cast(convert_to_tensor(labels), dtypes.bool),
            math_ops.cast(convert_to_tensor(predictions), dtypes.bool))


def true_positives(labels, predictions, weights=None, metrics_collections=None, updates_collections=None,
                   name=None):
    """The running count of ``labels and predictions`` (both read as bools)."""
    labels, predictions = _bools(labels, predictions)
    value, update = _count(math_ops.logical_and(labels, predictions), weights, name or "true_positives")
    return _collect(metrics_collections, updates_collections, value, update)


def false_positives(labels, predictions, weights=None, metrics_collections=None, updates_collections=None,
                    name=None):
    """The running count of ``predictions and not labels``."""
    labels, predictions = _bools(labels, predictions)
    condition = math_ops.logical_and(math_ops.logical_not(labels), predictions)
    value, update = _count(condition, weights, name or "false_positives")
    return _collect(metrics_collections, updates_collections, value, update)


def false_negatives(labels, predictions, weights=None, metrics_collections=None, updates_collections=None,
                    name=None):
    """The running count of ``labels and not predictions``."""
    labels, predictions = _bools(labels, predictions)
    condition = math_ops.logical_and(labels, math_ops.logical_not(predictions))
    value, update = _count(condition, weights, name or "false_negatives")
    return _collect(metrics_collections, updates_collections, value, update)


def _ratio(hits_fn, misses_fn, default_name, labels, predictions, weights, metrics_collections,
           updates_collections, name):
    with variable_scope(name, default_name, (predictions, labels, weights)):
        hits, hits_update = hits_fn(labels, predictions, weights)
        misses, misses_update = misses_fn(labels, predictions, weights)
        value = safe_divide(hits, hits + misses, "value")
        update = safe_divide(hits_update, hits_update + misses_update, "update_op")
        return _collect(metrics_collections, updates_collections, value, update)


def precision(labels, predictions, weights=None, metrics_collections=None, updates_collections=None,
              name=None):
    """``true_positives / (true_positives + false_positives)`` so far: ``(precision, update_op)``."""
    return _ratio(true_positives, false_positives, "precision", labels, predictions, weights,
                  metrics_collections, updates_collections, name)


def recall(labels, predictions, weights=None, metrics_collections=None, updates_collections=None,
           name=None):
    """``true_positives / (true_positives + false_negatives)`` so far: ``(recall, update_op)``."""
    return _ratio(true_positives, false_negatives, "recall", labels, predictions, weights,
                  metrics_collections, updates_collections, name)


_AUC_EPSILON = 1e-7  # TF's: keeps the rates finite and puts the end thresholds just outside [0, 1]


def _confusion_at_thresholds(labels, predictions, weights, thresholds):
    """Running ``[tp, fn, tn, fp]`` per threshold (``prediction > threshold`` is positive)."""
    predicted = math_ops.greater(array_ops.reshape(_as_float(predictions), [-1, 1]),
                                 array_ops.constant([thresholds], dtypes.float32))
    actual = array_ops.reshape(math_ops.cast(convert_to_tensor(labels), dtypes.bool), [-1, 1])
    weight = 1.0 if weights is None else array_ops.reshape(_as_float(weights), [-1, 1])
    negative, not_predicted = math_ops.logical_not(actual), math_ops.logical_not(predicted)
    cells = {"true_positives": math_ops.logical_and(actual, predicted),
             "false_negatives": math_ops.logical_and(actual, not_predicted),
             "true_negatives": math_ops.logical_and(negative, not_predicted),
             "false_positives": math_ops.logical_and(negative, predicted)}
    values, updates = [], []
    for name, condition in cells.items():
        count = _metric_variable(name, [len(thresholds)])
        with get_default_graph().colocate_with(count):
            updates.append(state_ops.assign_add(
                count, math_ops.reduce_sum(math_ops.cast(condition, dtypes.float32) * weight, 0)))
        values.append(count.value())
    return values, updates


def _area(tp, fn, tn, fp, curve):
    """The trapezoidal area under the ROC (recall against false-positive rate) or PR curve."""
    recall = tp / (tp + fn + _AUC_EPSILON)
    if curve == "ROC":
        x, y = fp / (fp + tn + _AUC_EPSILON), recall
    else:
        x, y = recall, tp / (tp + fp + _AUC_EPSILON)
    return math_ops.reduce_sum((x[:-1] - x[1:]) * (y[:-1] + y[1:]) / 2.0)


def auc(labels, predictions, weights=None, num_thresholds=200, metrics_collections=None,
        updates_collections=None, curve="ROC", name=None, summation_method="trapezoidal", thresholds=None):
    """The area under the ROC (or ``curve='PR'``) curve of scores ``predictions`` in [0, 1] against
    boolean ``labels``, from confusion counts at ``num_thresholds`` thresholds: ``(auc, update_op)``."""
    if curve not in ("ROC", "PR"):
        raise ValueError(f"curve must be either ROC or PR, {curve} unknown")
    if summation_method != "trapezoidal":
        raise ValueError(f"auc(summation_method={summation_method!r}) is not supported by dflow; "
                         "use 'trapezoidal'")
    if thresholds is None:
        thresholds = [(i + 1) / (num_thresholds - 1) for i in range(num_thresholds - 2)]
    thresholds = [0.0 - _AUC_EPSILON, *[float(t) for t in thresholds], 1.0 + _AUC_EPSILON]
    with variable_scope(name, "auc", (labels, predictions, weights)):
        values, updates = _confusion_at_thresholds(labels, predictions, weights, thresholds)
        value = math_ops.multiply(_area(*values, curve), 1.0, name="value")
        update_op = math_ops.multiply(_area(*updates, curve), 1.0, name="update_op")
        return _collect(metrics_collections, updates_collections, value, update_op)
