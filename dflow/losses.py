"""``tf.losses``: TF 1.x's losses, weighted and reduced, and the loss collections.

Each loss computes per-element losses, multiplies them by ``weights`` (a scalar or a
tensor that broadcasts to them) and reduces them as ``reduction`` says; by default
(``SUM_BY_NONZERO_WEIGHTS``) the weighted sum divided by the number of non-zero
weights. The result is added to ``GraphKeys.LOSSES`` (``loss_collection``), which
:func:`get_total_loss` adds to the regularization losses
(``GraphKeys.REGULARIZATION_LOSSES``, filled by ``get_variable(regularizer=...)``).

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     loss = tf.losses.mean_squared_error(labels=[1.0, 2.0], predictions=[1.0, 4.0])
...     with tf.Session() as sess:
...         float(sess.run(loss)), float(sess.run(tf.losses.get_total_loss()))
(2.0, 2.0)
"""

from __future__ import annotations

from . import dtypes
from .graph import GraphKeys, Tensor, convert_to_tensor, get_default_graph, name_scope
from .ops import array_ops, math_ops, nn_ops

__all__ = [
    "Reduction", "compute_weighted_loss", "softmax_cross_entropy", "sparse_softmax_cross_entropy",
    "sigmoid_cross_entropy", "mean_squared_error", "absolute_difference", "log_loss", "hinge_loss",
    "huber_loss", "add_loss", "get_losses", "get_regularization_losses", "get_regularization_loss",
    "get_total_loss",
]


class Reduction:
    """How a weighted loss is reduced to what the loss function returns."""

    NONE = "none"  # the weighted per-element losses
    SUM = "weighted_sum"
    SUM_OVER_BATCH_SIZE = "weighted_sum_over_batch_size"  # divided by the number of elements
    MEAN = "weighted_mean"  # divided by the sum of the weights
    SUM_BY_NONZERO_WEIGHTS = "weighted_sum_by_nonzero_weights"  # TF 1.x's default
    SUM_OVER_NONZERO_WEIGHTS = SUM_BY_NONZERO_WEIGHTS

    @classmethod
    def all(cls) -> tuple[str, ...]:
        return (cls.NONE, cls.SUM, cls.MEAN, cls.SUM_OVER_BATCH_SIZE, cls.SUM_BY_NONZERO_WEIGHTS)

    @classmethod
    def validate(cls, key) -> None:
        if key not in cls.all():
            raise ValueError(f"Invalid Reduction Key {key!r}; use one of tf.losses.Reduction's: {cls.all()}")


def _float(x) -> Tensor:
    x = convert_to_tensor(x) if isinstance(x, Tensor) or hasattr(x, "_as_graph_element") \
        else convert_to_tensor(x, dtype=dtypes.float32)
    return x if x.dtype.is_floating else math_ops.cast(x, dtypes.float32)


def safe_divide(numerator, denominator, name="value") -> Tensor:
    """``numerator / denominator``, or 0 where the denominator is 0 (TF's ``div_no_nan``)."""
    nonzero = math_ops.greater(denominator, 0.0)
    safe = math_ops.where(nonzero, denominator, array_ops.ones_like(denominator))
    return math_ops.where(nonzero, numerator / safe, array_ops.zeros_like(numerator), name=name)


def compute_weighted_loss(losses, weights=1.0, scope=None, loss_collection=GraphKeys.LOSSES,
                          reduction=Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    """``losses * weights``, reduced as ``reduction`` says, added to ``loss_collection``."""
    Reduction.validate(reduction)
    with name_scope(scope, "weighted_loss", [losses, weights]):
        losses = _float(losses)
        weights = math_ops.cast(convert_to_tensor(weights), losses.dtype) if isinstance(weights, Tensor) \
            else convert_to_tensor(weights, dtype=losses.dtype)
        weighted = math_ops.multiply(losses, weights)
        if reduction == Reduction.NONE:
            loss = weighted
        else:
            loss = math_ops.reduce_sum(weighted)
            every = array_ops.ones_like(losses)
            if reduction == Reduction.MEAN:
                loss = safe_divide(loss, math_ops.reduce_sum(every * weights))
            elif reduction == Reduction.SUM_OVER_BATCH_SIZE:
                loss = safe_divide(loss, math_ops.reduce_sum(every))
            elif reduction == Reduction.SUM_BY_NONZERO_WEIGHTS:
                present = math_ops.cast(math_ops.not_equal(weights, 0.0), losses.dtype)
                loss = safe_divide(loss, math_ops.reduce_sum(every * present))
        if loss_collection is not None:
            add_loss(loss, loss_collection)
        return loss


def softmax_cross_entropy(onehot_labels, logits, weights=1.0, label_smoothing=0, scope=None,
                          loss_collection=GraphKeys.LOSSES,
                          reduction=Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    """Cross-entropy of ``softmax(logits)`` against one-hot (or soft) labels; with
    ``label_smoothing`` the labels become ``labels * (1 - s) + s / num_classes``."""
    with name_scope(scope, "softmax_cross_entropy_loss", [logits, onehot_labels, weights]) as scope:
        logits = _float(logits)
        labels = math_ops.cast(convert_to_tensor(onehot_labels), logits.dtype)
        if label_smoothing > 0:
            classes = math_ops.cast(array_ops.shape(logits)[-1], logits.dtype)
            labels = labels * (1.0 - label_smoothing) + label_smoothing / classes
        losses = nn_ops.softmax_cross_entropy_with_logits(labels=labels, logits=logits, name="xentropy")
        return compute_weighted_loss(losses, weights, scope, loss_collection, reduction)


def sparse_softmax_cross_entropy(labels, logits, weights=1.0, scope=None,
                                 loss_collection=GraphKeys.LOSSES,
                                 reduction=Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    """Cross-entropy of ``softmax(logits)`` against integer class ``labels``."""
    with name_scope(scope, "sparse_softmax_cross_entropy_loss", [logits, labels, weights]) as scope:
        labels = convert_to_tensor(labels)
        if not labels.dtype.is_integer:
            raise TypeError(f"sparse_softmax_cross_entropy needs integer class labels, got "
                            f"{labels.dtype.name}; use softmax_cross_entropy for one-hot labels")
        logits = convert_to_tensor(logits)
        rank_l, rank_p = labels.shape.ndims, logits.shape.ndims
        if rank_l is not None and rank_l == rank_p and labels.shape.dims[-1] in (1, None):
            labels = array_ops.squeeze(labels, [-1])  # TF's remove_squeezable_dimensions: (n, 1) labels
        losses = nn_ops.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits,
                                                                  name="xentropy")
        return compute_weighted_loss(losses, weights, scope, loss_collection, reduction)


def sigmoid_cross_entropy(multi_class_labels, logits, weights=1.0, label_smoothing=0, scope=None,
                          loss_collection=GraphKeys.LOSSES,
                          reduction=Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    """Elementwise logistic loss; with ``label_smoothing`` the labels become
    ``labels * (1 - s) + s / 2``."""
    with name_scope(scope, "sigmoid_cross_entropy_loss", [logits, multi_class_labels, weights]) as scope:
        logits = _float(logits)
        labels = math_ops.cast(convert_to_tensor(multi_class_labels), logits.dtype)
        if label_smoothing > 0:
            labels = labels * (1.0 - label_smoothing) + 0.5 * label_smoothing
        losses = nn_ops.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
        return compute_weighted_loss(losses, weights, scope, loss_collection, reduction)


def _pairwise(labels, predictions):
    """Both as float32, whatever their dtype, as TF 1.x's losses take them (``to_float``)."""
    return tuple(math_ops.cast(convert_to_tensor(x), dtypes.float32) if isinstance(x, Tensor)
                 else convert_to_tensor(x, dtype=dtypes.float32) for x in (labels, predictions))


def mean_squared_error(labels, predictions, weights=1.0, scope=None, loss_collection=GraphKeys.LOSSES,
                       reduction=Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    """``(predictions - labels)^2``, weighted and reduced."""
    with name_scope(scope, "mean_squared_error", [predictions, labels, weights]) as scope:
        labels, predictions = _pairwise(labels, predictions)
        losses = math_ops.square(predictions - labels)
        return compute_weighted_loss(losses, weights, scope, loss_collection, reduction)


def absolute_difference(labels, predictions, weights=1.0, scope=None, loss_collection=GraphKeys.LOSSES,
                        reduction=Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    """``|predictions - labels|``, weighted and reduced."""
    with name_scope(scope, "absolute_difference", [predictions, labels, weights]) as scope:
        labels, predictions = _pairwise(labels, predictions)
        losses = math_ops.abs(predictions - labels)
        return compute_weighted_loss(losses, weights, scope, loss_collection, reduction)


def log_loss(labels, predictions, weights=1.0, epsilon=1e-7, scope=None, loss_collection=GraphKeys.LOSSES,
             reduction=Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    """``-labels * log(p + eps) - (1 - labels) * log(1 - p + eps)`` for probabilities ``p``."""
    with name_scope(scope, "log_loss", [predictions, labels, weights]) as scope:
        labels, predictions = _pairwise(labels, predictions)
        losses = -labels * math_ops.log(predictions + epsilon) - (1.0 - labels) * math_ops.log(
            1.0 - predictions + epsilon)
        return compute_weighted_loss(losses, weights, scope, loss_collection, reduction)


def hinge_loss(labels, logits, weights=1.0, scope=None, loss_collection=GraphKeys.LOSSES,
               reduction=Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    """``max(0, 1 - (2 * labels - 1) * logits)`` for 0/1 ``labels``."""
    with name_scope(scope, "hinge_loss", [logits, labels, weights]) as scope:
        labels, logits = _pairwise(labels, logits)
        losses = math_ops.maximum(1.0 - (2.0 * labels - 1.0) * logits, 0.0)
        return compute_weighted_loss(losses, weights, scope, loss_collection, reduction)


def huber_loss(labels, predictions, weights=1.0, delta=1.0, scope=None, loss_collection=GraphKeys.LOSSES,
               reduction=Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    """``0.5 * e^2`` where ``|e| <= delta``, else ``delta * (|e| - 0.5 * delta)`` (``e`` the error)."""
    with name_scope(scope, "huber_loss", [predictions, labels, weights]) as scope:
        labels, predictions = _pairwise(labels, predictions)
        error = math_ops.abs(predictions - labels)
        quadratic = math_ops.minimum(error, float(delta))
        losses = 0.5 * quadratic * quadratic + float(delta) * (error - quadratic)
        return compute_weighted_loss(losses, weights, scope, loss_collection, reduction)


# ---- collections ----------------------------------------------------------------------------
def add_loss(loss, loss_collection=GraphKeys.LOSSES) -> None:
    """Add ``loss`` to ``loss_collection`` (nothing if it is None)."""
    if loss_collection is not None:
        get_default_graph().add_to_collection(loss_collection, loss)


def get_losses(scope=None, loss_collection=GraphKeys.LOSSES) -> list:
    """The losses of ``loss_collection`` (names matching ``scope``)."""
    return get_default_graph().get_collection(loss_collection, scope)


def get_regularization_losses(scope=None) -> list:
    """The regularization losses: what ``get_variable(regularizer=...)`` and layers' regularizers added."""
    return get_default_graph().get_collection(GraphKeys.REGULARIZATION_LOSSES, scope)


def get_regularization_loss(scope=None, name="total_regularization_loss") -> Tensor:
    """The sum of the regularization losses, or a constant 0.0 if there are none."""
    losses = get_regularization_losses(scope)
    if not losses:
        return array_ops.constant(0.0, name=name)
    return math_ops.add_n(losses, name=name)


def get_total_loss(add_regularization_losses=True, name="total_loss", scope=None) -> Tensor:
    """The sum of the losses of ``GraphKeys.LOSSES`` and (by default) the regularization losses."""
    losses = get_losses(scope)
    if add_regularization_losses:
        losses = losses + get_regularization_losses(scope)
    if not losses:
        raise ValueError("get_total_loss found no losses: build one with tf.losses.* (or add one with "
                         "tf.losses.add_loss) first")
    return math_ops.add_n(losses, name=name)
