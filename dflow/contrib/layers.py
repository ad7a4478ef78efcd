"""``tf.contrib.layers``: initializers, regularizers and layers with contrib's names.

The layers take their defaults from ``tf.contrib.framework.arg_scope``, as in TF.

Layers name their variables ``weights`` and ``biases`` under ``fully_connected``,
``Conv``, ``BatchNorm`` (numbered ``_1``, ``_2``... or the ``scope=`` given), default
to ReLU (``activation_fn``) and take a ``normalizer_fn`` applied before it, as in TF.
They are built on :mod:`dflow.layers`.

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     x = tf.placeholder(tf.float32, [None, 4])
...     y = tf.contrib.layers.fully_connected(x, 3, weights_regularizer=tf.contrib.layers.l2_regularizer(0.1))
...     [v.name for v in tf.trainable_variables()], len(tf.losses.get_regularization_losses())
(['fully_connected/weights:0', 'fully_connected/biases:0'], 1)
"""

from __future__ import annotations

import math
import numbers

from .. import dtypes
from .. import layers as core
from ..graph import GraphKeys, Tensor, convert_to_tensor, get_default_graph, name_scope
from ..ops import array_ops, math_ops, nn_ops, state_ops
from ..train import optimizers as train_optimizers
from ..train.training_util import get_global_step
from ..variables import (
    Initializer,
    constant_initializer,
    fans,
    get_variable,
    ones_initializer,
    trainable_variables,
    variable_scope,
    zeros_initializer,
)
from .framework import add_arg_scope

_ZEROS, _ONES = zeros_initializer(), ones_initializer()

__all__ = [
    "xavier_initializer", "xavier_initializer_conv2d", "variance_scaling_initializer",
    "l1_regularizer", "l2_regularizer", "l1_l2_regularizer", "sum_regularizer", "apply_regularization",
    "flatten", "fully_connected", "conv2d", "convolution2d", "conv2d_transpose", "convolution2d_transpose",
    "one_hot_encoding", "max_pool2d", "avg_pool2d", "dropout",
    "batch_norm", "layer_norm", "optimize_loss", "OPTIMIZER_CLS_NAMES",
]


# ---- initializers ---------------------------------------------------------------------------
def variance_scaling_initializer(factor=2.0, mode="FAN_IN", uniform=False, seed=None, dtype=dtypes.float32):
    """Samples of variance ``factor / n`` (``n``: fan-in, fan-out or their mean, by ``mode``):
    uniform in ``+-sqrt(3 factor / n)``, or truncated normal with stddev ``sqrt(1.3 factor / n)``.
    The default is He et al.'s initialization."""
    if mode not in ("FAN_IN", "FAN_OUT", "FAN_AVG"):
        raise TypeError(f"Unknown mode {mode} [FAN_IN, FAN_OUT, FAN_AVG]")
    if not dtypes.as_dtype(dtype).is_floating:
        raise TypeError("Cannot create initializer for non-floating point type.")

    def build(shape, dt):
        fan_in, fan_out = fans(shape)
        n = {"FAN_IN": fan_in, "FAN_OUT": fan_out, "FAN_AVG": (fan_in + fan_out) / 2.0}[mode]
        if uniform:
            limit = math.sqrt(3.0 * factor / n)
            return state_ops.random_uniform(shape, -limit, limit, dt, seed)
        return state_ops.truncated_normal(shape, 0.0, math.sqrt(1.3 * factor / n), dt, seed)

    return Initializer(build, dtypes.as_dtype(dtype))


def xavier_initializer(uniform=True, seed=None, dtype=dtypes.float32):
    """Glorot & Bengio's initialization: variance ``2 / (fan_in + fan_out)``."""
    return variance_scaling_initializer(1.0, "FAN_AVG", uniform, seed, dtype)


xavier_initializer_conv2d = xavier_initializer


# ---- regularizers ---------------------------------------------------------------------------
def _checked_scale(scale):
    """None where ``scale`` is 0 (the regularizer is off), else ``scale``."""
    if isinstance(scale, numbers.Integral):
        raise ValueError(f"scale cannot be an integer: {scale}")
    if isinstance(scale, numbers.Real):
        if scale < 0.0:
            raise ValueError(f"Setting a scale less than 0 on a regularizer: {scale}.")
        if scale == 0.0:
            return None
    return scale


def _regularizer(scale, scope, default_name, penalty):
    scale = _checked_scale(scale)
    if scale is None:
        return lambda _: None

    def regularize(weights):
        with name_scope(scope, default_name, [weights]) as name:
            my_scale = convert_to_tensor(scale, dtype=weights.dtype, name="scale")
            return math_ops.multiply(my_scale, penalty(weights), name=name)

    return regularize


def l2_regularizer(scale, scope=None):
    """``weights -> scale * sum(weights^2) / 2`` (``tf.nn.l2_loss``), for
    ``get_variable(regularizer=...)`` and the layers' ``*_regularizer``."""
    return _regularizer(scale, scope, "l2_regularizer", nn_ops.l2_loss)


def l1_regularizer(scale, scope=None):
    """``weights -> scale * sum(|weights|)``."""
    return _regularizer(scale, scope, "l1_regularizer",
                        lambda w: math_ops.reduce_sum(math_ops.abs(w)))


def sum_regularizer(regularizer_list, scope=None):
    """``weights -> the sum of what each regularizer of the list gives`` (None ones left out)."""
    regularizer_list = [r for r in regularizer_list if r is not None]
    if not regularizer_list:
        return None

    def regularize(weights):
        with name_scope(scope, "sum_regularizer", [weights]) as name:
            penalties = [p for p in (r(weights) for r in regularizer_list) if p is not None]
            return math_ops.add_n(penalties, name=name) if penalties else None

    return regularize


def l1_l2_regularizer(scale_l1=1.0, scale_l2=1.0, scope=None):
    """``l1_regularizer(scale_l1) + l2_regularizer(scale_l2)``."""
    return sum_regularizer([l1_regularizer(scale_l1), l2_regularizer(scale_l2)], scope=scope)


def apply_regularization(regularizer, weights_list=None):
    """The sum of ``regularizer(w)`` over ``weights_list`` (default: ``GraphKeys.WEIGHTS``), also
    added to ``GraphKeys.REGULARIZATION_LOSSES``."""
    weights_list = list(weights_list or get_default_graph().get_collection(GraphKeys.WEIGHTS))
    if not weights_list:
        raise ValueError("No weights to regularize.")
    with name_scope("get_regularization_penalty", values=weights_list) as scope:
        penalties = [regularizer(w) for w in weights_list]
        penalties = [array_ops.constant(0.0) if p is None else p for p in penalties]
        for p in penalties:
            if p.shape.ndims != 0:
                raise ValueError(f"regularizer must return a scalar Tensor instead of a Tensor with rank "
                                 f"{p.shape.ndims}.")
        summed = math_ops.add_n(penalties, name=scope)
    get_default_graph().add_to_collection(GraphKeys.REGULARIZATION_LOSSES, summed)
    return summed


# ---- layers ---------------------------------------------------------------------------------
def _add_to_collections(variable, collections, kind: str) -> None:
    """contrib's ``variables_collections``: a list (every variable) or a dict by kind."""
    if isinstance(collections, dict):
        collections = collections.get(kind)
    for name in [collections] if isinstance(collections, str) else (collections or ()):
        if variable not in get_default_graph().get_collection(name):
            get_default_graph().add_to_collection(name, variable)


def _outputs(outputs, collections):
    for name in [collections] if isinstance(collections, str) else (collections or ()):
        get_default_graph().add_to_collection(name, outputs)
    return outputs


class _NormalizedActivated:
    """contrib's order inside the layer's scope: the linear part, ``normalizer_fn``, ``activation_fn``."""

    def _contrib_options(self, activation_fn, normalizer_fn, normalizer_params):
        self.activation_fn, self.normalizer_fn = activation_fn, normalizer_fn
        self.normalizer_params = normalizer_params or {}

    def call(self, inputs):
        outputs = super().call(inputs)
        if self.normalizer_fn is not None:
            outputs = self.normalizer_fn(outputs, **self.normalizer_params)
        return outputs if self.activation_fn is None else self.activation_fn(outputs)


class _FullyConnected(_NormalizedActivated, core.Dense):
    _base_name = "fully_connected"
    _weight_names = ("weights", "biases")


class _Convolution(_NormalizedActivated, core.Conv2D):
    _base_name = "Conv"
    _weight_names = ("weights", "biases")


class _TransposedConvolution(_NormalizedActivated, core.Conv2DTranspose):
    _base_name = "Conv2d_transpose"
    _weight_names = ("weights", "biases")


def _apply_contrib(layer, inputs, variables_collections, outputs_collections):
    outputs = layer.apply(inputs)
    _add_to_collections(layer.kernel, variables_collections, "weights")
    if layer.bias is not None:
        _add_to_collections(layer.bias, variables_collections, "biases")
    return _outputs(outputs, outputs_collections)


@add_arg_scope
def fully_connected(inputs, num_outputs, activation_fn=nn_ops.relu, normalizer_fn=None,
                    normalizer_params=None, weights_initializer=None, weights_regularizer=None,
                    biases_initializer=_ZEROS, biases_regularizer=None, reuse=None,
                    variables_collections=None, outputs_collections=None, trainable=True, scope=None):
    """``activation_fn(normalizer_fn(inputs @ weights + biases))``; ReLU by default, Xavier weights,
    no biases when there is a ``normalizer_fn``.

    >>> import dflow as tf
    >>> with tf.Graph().as_default():
    ...     net = tf.contrib.layers.fully_connected(tf.zeros([2, 64]), 256)
    ...     net.shape.as_list()
    [2, 256]
    """
    layer = _FullyConnected(num_outputs, None, normalizer_fn is None and biases_initializer is not None,
                            weights_initializer or xavier_initializer(), biases_initializer,
                            weights_regularizer, biases_regularizer, trainable=trainable, name=scope,
                            _reuse=reuse)
    layer._contrib_options(activation_fn, normalizer_fn, normalizer_params)
    return _apply_contrib(layer, inputs, variables_collections, outputs_collections)


@add_arg_scope
def conv2d(inputs, num_outputs, kernel_size, stride=1, padding="SAME", data_format=None, rate=1,
           activation_fn=nn_ops.relu, normalizer_fn=None, normalizer_params=None, weights_initializer=None,
           weights_regularizer=None, biases_initializer=_ZEROS, biases_regularizer=None,
           reuse=None, variables_collections=None, outputs_collections=None, trainable=True, scope=None):
    """2-D convolution (variables ``Conv/weights``, ``Conv/biases``), ``'SAME'`` padding and ReLU
    by default."""
    if data_format not in (None, "NHWC", "NCHW"):
        raise ValueError(f"data_format has to be either NCHW or NHWC, got {data_format!r}")
    layer = _Convolution(num_outputs, kernel_size, stride, padding, data_format or "NHWC", rate, None,
                         normalizer_fn is None and biases_initializer is not None,
                         weights_initializer or xavier_initializer(), biases_initializer, weights_regularizer,
                         biases_regularizer, trainable=trainable, name=scope, _reuse=reuse)
    layer._contrib_options(activation_fn, normalizer_fn, normalizer_params)
    return _apply_contrib(layer, inputs, variables_collections, outputs_collections)


convolution2d = conv2d


@add_arg_scope
def conv2d_transpose(inputs, num_outputs, kernel_size, stride=1, padding="SAME", data_format="NHWC",
                     activation_fn=nn_ops.relu, normalizer_fn=None, normalizer_params=None,
                     weights_initializer=None, weights_regularizer=None, biases_initializer=_ZEROS,
                     biases_regularizer=None, reuse=None, variables_collections=None,
                     outputs_collections=None, trainable=True, scope=None):
    """Transposed 2-D convolution (``Conv2d_transpose/weights`` ``[kh, kw, out, in]``), upsampling by
    ``stride``; ``'SAME'`` padding and ReLU by default."""
    if data_format not in ("NHWC", "NCHW"):
        raise ValueError(f"data_format has to be either NCHW or NHWC, got {data_format!r}")
    layer = _TransposedConvolution(num_outputs, kernel_size, stride, padding, data_format, (1, 1), None,
                                   normalizer_fn is None and biases_initializer is not None,
                                   weights_initializer or xavier_initializer(), biases_initializer,
                                   weights_regularizer, biases_regularizer, trainable=trainable, name=scope,
                                   _reuse=reuse)
    layer._contrib_options(activation_fn, normalizer_fn, normalizer_params)
    return _apply_contrib(layer, inputs, variables_collections, outputs_collections)


convolution2d_transpose = conv2d_transpose


@add_arg_scope
def one_hot_encoding(labels, num_classes, on_value=1.0, off_value=0.0, outputs_collections=None, scope=None):
    """``labels`` (class indices) as one-hot float vectors of ``num_classes``."""
    with name_scope(scope, "OneHotEncoding", [labels]):
        labels = convert_to_tensor(labels)
        if labels.dtype == dtypes.int32:
            labels = math_ops.cast(labels, dtypes.int64)
        outputs = array_ops.one_hot(labels, num_classes, on_value=on_value, off_value=off_value)
    return _outputs(outputs, outputs_collections)


@add_arg_scope
def max_pool2d(inputs, kernel_size, stride=2, padding="VALID", data_format="NHWC", outputs_collections=None,
               scope=None):
    """2-D max pooling, stride 2 and ``'VALID'`` by default."""
    with name_scope(scope, "MaxPool2D", [inputs]):
        outputs = core.max_pooling2d(inputs, kernel_size, stride, padding, data_format)
    return _outputs(outputs, outputs_collections)


@add_arg_scope
def avg_pool2d(inputs, kernel_size, stride=2, padding="VALID", data_format="NHWC", outputs_collections=None,
               scope=None):
    """2-D average pooling, stride 2 and ``'VALID'`` by default."""
    with name_scope(scope, "AvgPool2D", [inputs]):
        outputs = core.average_pooling2d(inputs, kernel_size, stride, padding, data_format)
    return _outputs(outputs, outputs_collections)


@add_arg_scope
def flatten(inputs, outputs_collections=None, scope=None):
    """``[batch, ...]`` to ``[batch, features]``."""
    with name_scope(scope, "Flatten", [inputs]):
        return _outputs(core.flatten(inputs), outputs_collections)


@add_arg_scope
def dropout(inputs, keep_prob=0.5, noise_shape=None, is_training=True, outputs_collections=None, scope=None,
            seed=None):
    """Keep each element with probability ``keep_prob`` while ``is_training`` (a bool or tensor)."""
    with name_scope(scope, "Dropout", [inputs]):
        outputs = core.dropout(inputs, 1.0 - keep_prob, noise_shape, seed, training=is_training)
    return _outputs(outputs, outputs_collections)


class _BatchNorm(core.BatchNormalization):
    _base_name = "BatchNorm"


@add_arg_scope
def batch_norm(inputs, decay=0.999, center=True, scale=False, epsilon=0.001, activation_fn=None,
               param_initializers=None, param_regularizers=None, updates_collections=GraphKeys.UPDATE_OPS,
               is_training=True, reuse=None, variables_collections=None, outputs_collections=None,
               trainable=True, batch_weights=None, fused=None, data_format="NHWC",
               zero_debias_moving_mean=False, scope=None, renorm=False, renorm_clipping=None,
               renorm_decay=0.99, adjustment=None):
    """contrib's batch normalization (``BatchNorm/beta``, ``moving_mean``, ``moving_variance``;
    ``gamma`` only with ``scale=True``). ``updates_collections=None`` runs the moving averages'
    updates with the output instead of through ``GraphKeys.UPDATE_OPS``."""
    if batch_weights is not None or zero_debias_moving_mean:
        raise ValueError("batch_norm's batch_weights and zero_debias_moving_mean are not supported by dflow")
    init, regs = param_initializers or {}, param_regularizers or {}
    layer = _BatchNorm(1 if data_format == "NCHW" else -1, decay, epsilon, center, scale,
                       init.get("beta", _ZEROS), init.get("gamma", _ONES),
                       init.get("moving_mean", _ZEROS),
                       init.get("moving_variance", _ONES), regs.get("beta"), regs.get("gamma"),
                       renorm=renorm, trainable=trainable, adjustment=adjustment, name=scope, _reuse=reuse)
    layer._updates_collection = updates_collections
    outputs = layer.apply(inputs, training=is_training)
    if updates_collections is None and layer.updates:
        with get_default_graph().control_dependencies(layer.updates):
            outputs = array_ops.identity(outputs)
    for variable in layer.weights:
        _add_to_collections(variable, variables_collections, variable.op.name.rsplit("/", 1)[-1])
    if activation_fn is not None:
        outputs = activation_fn(outputs)
    return _outputs(outputs, outputs_collections)


@add_arg_scope
def layer_norm(inputs, center=True, scale=True, activation_fn=None, reuse=None, variables_collections=None,
               outputs_collections=None, trainable=True, begin_norm_axis=1, begin_params_axis=-1, scope=None):
    """Layer normalization (Ba et al.): each example normalized over the axes from
    ``begin_norm_axis`` on, then ``* gamma + beta`` (``LayerNorm/gamma``, ``LayerNorm/beta``,
    shaped like the axes from ``begin_params_axis`` on)."""
    inputs = convert_to_tensor(inputs)
    rank = inputs.shape.ndims
    if rank is None:
        raise ValueError(f"layer_norm needs inputs of known rank, got {inputs.name}")
    begin_norm_axis %= rank
    if begin_params_axis >= rank or begin_norm_axis >= rank:
        raise ValueError(f"begin_params_axis ({begin_params_axis}) and begin_norm_axis ({begin_norm_axis}) "
                         f"must be < rank ({rank})")
    params_shape = inputs.shape.as_list()[begin_params_axis:]
    if None in params_shape:
        raise ValueError(f"layer_norm needs the parameters' dimensions known, got shape {inputs.shape}")
    with variable_scope(scope, "LayerNorm", [inputs], reuse=reuse):
        params = []
        for name, wanted, initializer in (("beta", center, _ZEROS), ("gamma", scale, _ONES)):
            variable = get_variable(name, params_shape, inputs.dtype, initializer, trainable=trainable) \
                if wanted else None
            if variable is not None:
                _add_to_collections(variable, variables_collections, name)
            params.append(variable)
        beta, gamma = params
        mean, variance = nn_ops.moments(inputs, list(range(begin_norm_axis, rank)), keep_dims=True)
        factor = math_ops.rsqrt(variance + 1e-12)  # contrib's variance_epsilon
        if gamma is not None:
            factor = factor * gamma
        outputs = inputs * factor + (-mean * factor if beta is None else beta - mean * factor)
        if activation_fn is not None:
            outputs = activation_fn(outputs)
    return _outputs(outputs, outputs_collections)


# ---- optimize_loss ----------------------------------------------------------------------------
OPTIMIZER_CLS_NAMES = {
    "Adagrad": train_optimizers.AdagradOptimizer,
    "Adam": train_optimizers.AdamOptimizer,
    "Ftrl": train_optimizers.FtrlOptimizer,
    "Momentum": lambda learning_rate: train_optimizers.MomentumOptimizer(learning_rate, momentum=0.9),
    "RMSProp": train_optimizers.RMSPropOptimizer,
    "SGD": train_optimizers.GradientDescentOptimizer,
}


def _learning_rate(learning_rate):
    if learning_rate is None or isinstance(learning_rate, Tensor) and learning_rate.shape.ndims == 0:
        return learning_rate
    if isinstance(learning_rate, numbers.Real) and not isinstance(learning_rate, bool):
        if learning_rate < 0.0:
            raise ValueError(f"Invalid learning_rate {learning_rate}.")
        return get_variable("learning_rate", [], trainable=False,
                            initializer=constant_initializer(float(learning_rate)))
    raise ValueError(f"Learning rate should be 0d Tensor or float. Got {learning_rate!r}")


def _make_optimizer(optimizer, lr):
    if isinstance(optimizer, str):
        if optimizer not in OPTIMIZER_CLS_NAMES:
            raise ValueError(f"Optimizer name should be one of [{', '.join(OPTIMIZER_CLS_NAMES)}], "
                             f"you provided {optimizer}.")
        if lr is None:
            raise ValueError(f"Learning rate is None, but should be specified if optimizer is string "
                             f"({optimizer}).")
        return OPTIMIZER_CLS_NAMES[optimizer](learning_rate=lr)
    if isinstance(optimizer, train_optimizers.Optimizer):
        return optimizer
    if isinstance(optimizer, type) and issubclass(optimizer, train_optimizers.Optimizer):
        return optimizer(learning_rate=lr)
    if callable(optimizer):
        made = optimizer(lr) if lr is not None else optimizer()
        if isinstance(made, train_optimizers.Optimizer):
            return made
    raise ValueError("optimizer should be a name (one of OPTIMIZER_CLS_NAMES), an Optimizer subclass or "
                     f"instance, or a function returning an Optimizer; got {optimizer!r}")


def _clip_by_global_norm(grads_and_vars, clip_norm):
    """Every gradient scaled by ``clip_norm / max(global_norm, clip_norm)``."""
    grads = [g for g, _ in grads_and_vars if g is not None]
    global_norm = math_ops.sqrt(math_ops.add_n([2.0 * nn_ops.l2_loss(g) for g in grads]), name="global_norm")
    scale = clip_norm / math_ops.maximum(global_norm, clip_norm)
    return [(None if g is None else g * math_ops.cast(scale, g.dtype), v) for g, v in grads_and_vars]


def optimize_loss(loss, global_step, learning_rate, optimizer, gradient_noise_scale=None,
                  gradient_multipliers=None, clip_gradients=None, learning_rate_decay_fn=None,
                  update_ops=None, variables=None, name=None, summaries=None,
                  colocate_gradients_with_ops=False, increment_global_step=True):
    """One training step of ``loss``: contrib's wrapper that makes the optimizer (a name such as
    ``"Adam"``, a class or an instance), runs ``GraphKeys.UPDATE_OPS`` first, optionally decays the
    learning rate and clips the gradients by their global norm, and returns the loss computed
    before the update. ``summaries`` are not written (add ``tf.summary.scalar`` yourself).

    >>> import dflow as tf
    >>> with tf.Graph().as_default():
    ...     w = tf.Variable(1.0)
    ...     step = tf.train.get_or_create_global_step()
    ...     train_op = tf.contrib.layers.optimize_loss(tf.square(w), step, 0.01, "Adam")
    ...     with tf.Session() as sess:
    ...         sess.run(tf.global_variables_initializer())
    ...         float(sess.run(train_op)), int(sess.run(step))  # the loss before the update
    (1.0, 1)
    """
    if gradient_noise_scale is not None:
        raise ValueError("optimize_loss(gradient_noise_scale=) is not supported by dflow")
    loss = convert_to_tensor(loss)
    if global_step is None:
        global_step = get_global_step()  # none at all: no step counts the updates, as in TF
    if global_step is None and learning_rate_decay_fn is not None:
        raise ValueError("optimize_loss(learning_rate_decay_fn=...) decays by the global step, and there is "
                         "none: create one with tf.train.get_or_create_global_step()")
    graph = loss.graph
    with variable_scope(name, "OptimizeLoss", [loss, global_step]):
        update_ops = list(graph.get_collection(GraphKeys.UPDATE_OPS) if update_ops is None else update_ops)
        if update_ops:
            with graph.control_dependencies(update_ops):
                loss = array_ops.identity(loss)
        lr = _learning_rate(learning_rate)
        if lr is not None and learning_rate_decay_fn is not None:
            lr = learning_rate_decay_fn(lr, global_step)
        opt = _make_optimizer(optimizer, lr)
        gradients = opt.compute_gradients(loss, trainable_variables() if variables is None else variables)
        if gradient_multipliers:
            gradients = [(g if g is None or v not in gradient_multipliers else g * gradient_multipliers[v], v)
                         for g, v in gradients]
        if isinstance(clip_gradients, numbers.Real):
            gradients = _clip_by_global_norm(gradients, float(clip_gradients))
        elif callable(clip_gradients):
            gradients = clip_gradients(gradients)
        elif clip_gradients is not None:
            raise ValueError(f"Unknown type {type(clip_gradients)} for clip_gradients")
        update = opt.apply_gradients(gradients, global_step=global_step if increment_global_step else None,
                                     name="train")
        with graph.control_dependencies([update]):
            return array_ops.identity(loss, name="train_op")


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(f"tf.contrib.layers.{name} is not supported by dflow; the supported names are "
                         f"{', '.join(__all__)} (and tf.layers has the core layers)")
