"""Batch normalization as one op: TF's ``FusedBatchNorm`` and its gradient.

``tf.nn.moments`` + ``tf.nn.batch_normalization`` spell batch normalization as a dozen
elementwise ops and reductions, and their gradients as twice as many: a dozen passes over
a layer's activations each way. ``FusedBatchNorm`` (what ``tf.layers.batch_normalization``
and ``tf.contrib.layers.batch_norm`` build for 4-D inputs, as TF 1.x's do) reads ``x`` twice
and writes ``y`` once while training; its gradient reads ``dy`` and ``x`` twice and writes
``dx`` once (:func:`dflow.ops.fused.batch_norm_training`, over the channels-last view of
the array, each pass split over the cores). The namespaces other than NumPy's (CuPy,
``array_api_strict``) run the same math as array expressions.

Its outputs are TF's: ``y``, the batch's mean and variance (the variance Bessel-corrected,
``n / (n - 1)``, for the moving averages), and two saved for the gradient (the mean and the
inverse standard deviation). Normalizing uses the uncorrected variance.

>>> import dflow as tf
>>> import numpy as np
>>> with tf.Graph().as_default():
...     x = tf.constant(np.arange(8, dtype=np.float32).reshape(2, 2, 1, 2))
...     y, mean, variance = tf.nn.fused_batch_norm(x, tf.ones([2]), tf.zeros([2]))
...     with tf.Session() as sess:
...         sess.run(mean).tolist(), [round(float(v), 4) for v in sess.run(variance)]
([3.0, 4.0], [6.6667, 6.6667])
"""

from __future__ import annotations

from ..graph import Tensor, convert_to_tensor, get_default_graph
from . import fused
from .array_ops import reshape, zeros_like
from .registry import ShapeError, Spec, defop
from .shape_rules import fmt

__all__ = ["fused_batch_norm"]

MIN_EPSILON = 1.001e-5  # TF's kernels (cuDNN's floor) refuse less; its Python raises epsilon to it
_FORMATS = ("NHWC", "NCHW")


def _reduced_axes(data_format: str) -> tuple[int, int, int]:
    return (0, 1, 2) if data_format == "NHWC" else (0, 2, 3)


def _per_channel(xp, vector, data_format: str):
    """A channel vector shaped to broadcast against the 4-D array."""
    return xp.reshape(vector, (1, 1, 1, -1) if data_format == "NHWC" else (1, -1, 1, 1))


def _channels_last(xp, x, data_format: str):
    """``x`` as NHWC: an NCHW array that is a transposed NHWC one (as the convolutions make
    them) becomes that array again, a view, so both layouts compute alike."""
    return x if data_format == "NHWC" else xp.permute_dims(x, (0, 2, 3, 1))


def _channels_back(xp, y, data_format: str):
    return y if data_format == "NHWC" else xp.permute_dims(y, (0, 3, 1, 2))


def _channels_of(x_shape, data_format: str):
    return None if x_shape is None else x_shape[3 if data_format == "NHWC" else 1]


def _batch_norm_infer(inputs, epsilon, data_format, is_training):
    x = inputs[0]
    if x.shape is not None and len(x.shape) != 4:
        raise ShapeError(f"fused_batch_norm takes a 4-D input, got shape {fmt(x.shape)}")
    channels = _channels_of(x.shape, data_format)
    for what, vector in zip(("scale", "offset", "mean", "variance"), inputs[1:]):
        if vector.shape is not None and (len(vector.shape) != 1 or None not in (channels, vector.shape[0])
                                         and vector.shape[0] != channels):
            raise ShapeError(f"fused_batch_norm's {what} must be a vector of the input's {channels} channels "
                             f"({data_format}), got shape {fmt(vector.shape)}")
    vector = Spec((channels,), x.dtype)
    return [Spec(x.shape, x.dtype), vector, vector, vector, vector]


def _relu(xp, y):
    return xp.where(y < 0, xp.zeros_like(y), y)  # NaN stays NaN, as Relu's


def _batch_norm_kernel(xp, x, scale, offset, mean, variance, epsilon, data_format, is_training, relu=False):
    """``(y, batch mean, batch variance (corrected), saved mean, saved inverse std)``; with
    ``relu``, ``max(y, 0)`` instead of ``y`` (``_FusedBatchNormRelu``)."""
    if not is_training:
        inverse_std = 1 / xp.sqrt(variance + epsilon)
        factor, shift = inverse_std * scale, offset - mean * inverse_std * scale
        y = x * _per_channel(xp, factor, data_format) + _per_channel(xp, shift, data_format)
        return _relu(xp, y) if relu else y, mean, variance, mean, inverse_std
    if fused.compiled_for(xp, x, scale, offset):
        y, batch_mean, batch_variance, inverse_std = fused.batch_norm_training(
            _channels_last(xp, x, data_format), scale, offset, epsilon, relu)
        y = _channels_back(xp, y, data_format)
    else:
        axes = _reduced_axes(data_format)
        batch_mean = xp.mean(x, axis=axes)
        centered = x - _per_channel(xp, batch_mean, data_format)
        batch_variance = xp.mean(centered * centered, axis=axes)
        inverse_std = 1 / xp.sqrt(batch_variance + epsilon)
        factor = _per_channel(xp, inverse_std * scale, data_format)
        y = centered * factor + _per_channel(xp, offset, data_format)
        y = _relu(xp, y) if relu else y
    count = x.size // max(x.shape[3 if data_format == "NHWC" else 1], 1)
    corrected = batch_variance * (count / max(count - 1, 1))
    return y, batch_mean, corrected, batch_mean, inverse_std


def _batch_norm_grad(op, dy, *_):
    """dx, dscale, doffset from ``dy`` (TF's rule: the gradients of the batch statistics'
    outputs are not propagated; the moving averages built from them are not differentiated)."""
    if dy is None:
        return [None] * 5
    x, scale = op.inputs[0], op.inputs[1]
    grads = get_default_graph().create_op(
        "FusedBatchNormGrad", [dy, x, scale, op.outputs[3], op.outputs[4]],
        {key: op.attrs[key] for key in ("data_format", "is_training")}).outputs
    return [*grads, None, None]


def _batch_norm_grad_infer(inputs, data_format, is_training):
    dy, x, scale = inputs[:3]
    vector = Spec(scale.shape, x.dtype)
    return [Spec(x.shape if x.shape is not None else dy.shape, x.dtype), vector, vector]


def _batch_norm_grad_kernel(xp, dy, x, scale, mean, inverse_std, data_format, is_training):
    if is_training and fused.compiled_for(xp, dy, x, scale, mean, inverse_std):
        dx, dscale, doffset = fused.batch_norm_training_grad(
            _channels_last(xp, dy, data_format), _channels_last(xp, x, data_format), scale, mean, inverse_std)
        return _channels_back(xp, dx, data_format), dscale, doffset
    return _batch_norm_grad_of(xp, dy, x, scale, mean, inverse_std, data_format, is_training)


def _batch_norm_relu_grad_kernel(xp, g, relu_output, x, scale, mean, inverse_std, data_format, is_training):
    """FusedBatchNormGrad(ReluGrad(g, relu_output), x, ...) in the same passes."""
    if is_training and fused.compiled_for(xp, g, relu_output, x, scale, mean, inverse_std):
        dx, dscale, doffset = fused.batch_norm_training_grad(
            _channels_last(xp, g, data_format), _channels_last(xp, x, data_format), scale, mean, inverse_std,
            _channels_last(xp, relu_output, data_format))
        return _channels_back(xp, dx, data_format), dscale, doffset
    dy = xp.where(relu_output > 0, g, xp.zeros_like(g))
    return _batch_norm_grad_of(xp, dy, x, scale, mean, inverse_std, data_format, is_training)


def _batch_norm_grad_of(xp, dy, x, scale, mean, inverse_std, data_format, is_training):
    """The gradient as array expressions, on any namespace."""
    axes = _reduced_axes(data_format)
    centered = x - _per_channel(xp, mean, data_format)
    sum_dy = xp.sum(dy, axis=axes)
    sum_dy_centered = xp.sum(dy * centered, axis=axes)
    factor = _per_channel(xp, scale * inverse_std, data_format)
    if is_training:
        count = x.size // max(scale.shape[0], 1)
        pulled = _per_channel(xp, inverse_std * inverse_std * sum_dy_centered / count, data_format)
        dx = factor * (dy - _per_channel(xp, sum_dy / count, data_format) - centered * pulled)
    else:
        dx = dy * factor
    return dx, sum_dy_centered * inverse_std, sum_dy


defop("FusedBatchNorm", _batch_norm_infer, _batch_norm_kernel, _batch_norm_grad, num_outputs=5)
defop("FusedBatchNormGrad", _batch_norm_grad_infer, _batch_norm_grad_kernel, num_outputs=3)
# Relu(FusedBatchNorm) and FusedBatchNormGrad(ReluGrad), fused when a stage is lowered
# (runtime/fusion.py), as Grappler's remapper makes TF's _FusedBatchNormEx: no pass of their own
defop("_FusedBatchNormRelu", _batch_norm_infer,
      lambda xp, *arrays, **attrs: _batch_norm_kernel(xp, *arrays, **attrs, relu=True), num_outputs=5)
defop("_FusedBatchNormGradRelu",
      lambda inputs, **attrs: _batch_norm_grad_infer([inputs[0], *inputs[2:]], **attrs),
      _batch_norm_relu_grad_kernel, num_outputs=3)


def fused_batch_norm(x, scale, offset, mean=None, variance=None, epsilon: float = 0.001,
                     data_format: str = "NHWC", is_training: bool = True, name=None,
                     exponential_avg_factor: float = 1.0) -> tuple[Tensor, Tensor, Tensor]:
    """Batch normalization of a 4-D ``x`` in one op: ``(y, batch_mean, batch_variance)``.

    While training, ``y`` is normalized with the batch's moments over every axis but the
    channels', and ``batch_variance`` is Bessel-corrected for moving averages; with
    ``exponential_avg_factor < 1`` the two come back averaged into the given ``mean`` and
    ``variance`` by that factor (TF 2's form). Otherwise ``mean`` and ``variance`` (required)
    normalize, and come back unchanged.

    >>> y, batch_mean, batch_variance = tf.nn.fused_batch_norm(x, gamma, beta)  # doctest: +SKIP
    """
    if data_format not in _FORMATS:
        raise ValueError(f"fused_batch_norm's data_format must be 'NHWC' or 'NCHW', got {data_format!r}")
    if not is_training and (mean is None or variance is None):
        raise ValueError("fused_batch_norm with is_training=False normalizes with the given mean and "
                         "variance: pass both (the moving averages)")
    graph = get_default_graph()
    with graph.name_scope(name or "FusedBatchNorm") as scope:
        x = convert_to_tensor(x)
        if not x.dtype.is_floating:
            raise TypeError(f"fused_batch_norm takes a floating-point input, got {x.dtype.name}")
        scale, offset = convert_to_tensor(scale, dtype=x.dtype), convert_to_tensor(offset, dtype=x.dtype)
        given_mean = zeros_like(scale) if mean is None else convert_to_tensor(mean, dtype=x.dtype)
        given_variance = zeros_like(scale) if variance is None else convert_to_tensor(variance, dtype=x.dtype)
        attrs = {"epsilon": max(float(epsilon), MIN_EPSILON), "data_format": data_format,
                 "is_training": bool(is_training)}
        y, batch_mean, batch_variance, _, _ = graph.create_op(
            "FusedBatchNorm", [x, scale, offset, given_mean, given_variance], attrs, name=scope).outputs
        if is_training and exponential_avg_factor != 1.0:
            keep = 1.0 - float(exponential_avg_factor)
            batch_mean = given_mean * keep + batch_mean * float(exponential_avg_factor)
            batch_variance = given_variance * keep + batch_variance * float(exponential_avg_factor)
        return y, batch_mean, batch_variance


# ---- tf.nn.moments + tf.nn.batch_normalization over channels ----------------------------------
# TF 1.x scripts write batch normalization by hand far more often than they call
# fused_batch_norm: ``tf.nn.moments(x, [0])`` (or ``[0, 1, 2]``) and ``tf.nn.batch_normalization``.
# Where the moments are over every axis but the last and the per-channel operands are vectors of
# its channels, each is one op here (two passes over ``x`` forward, four back with the AddN that
# joins their gradients, against a dozen composed ops and reductions each way).
def channel_form(x: Tensor, vectors) -> bool:
    """Whether ``x`` has channels last, known, in float32/64, and each of ``vectors`` (None: absent)
    is one value per channel in ``x``'s dtype (shape ``[C]`` or ``[1, ..., 1, C]``)."""
    shape = x.shape.as_list() if x.shape.ndims is not None else None
    if not shape or len(shape) < 2 or shape[-1] is None or x.dtype.name not in ("float32", "float64"):
        return False
    for vector in vectors:
        if vector is None:
            continue
        vector_shape = vector.shape.as_list() if vector.shape.ndims is not None else None
        if (vector_shape is None or vector.dtype != x.dtype or not 1 <= len(vector_shape) <= len(shape)
                or vector_shape[-1] != shape[-1] or any(d != 1 for d in vector_shape[:-1])):
            return False
    return True


def _vector(xp, array):
    return xp.reshape(array, (array.shape[-1],))


def _vector_shape(x_spec, keep_dims: bool):
    channels = x_spec.shape[-1]
    return (1,) * (len(x_spec.shape) - 1) + (channels,) if keep_dims else (channels,)


def _moments_kernel(xp, x, keep_dims):
    if fused.compiled_for(xp, x):
        mean, variance = (v.astype(x.dtype) for v in fused.channel_moments(x))
    else:
        axes = tuple(range(x.ndim - 1))
        mean = xp.mean(x, axis=axes)
        centered = x - mean
        variance = xp.mean(centered * centered, axis=axes)
    shape = (1,) * (x.ndim - 1) + mean.shape if keep_dims else mean.shape
    return xp.reshape(mean, shape), xp.reshape(variance, shape)


def _moments_grad(op, dmean, dvariance):
    """``dmean / n + dvariance * 2 (x - mean) / n``: the variance's gradient does not go through the
    mean (at the mean it is zero), as TF's ``moments`` stops it."""
    mean = op.outputs[0]
    dmean = zeros_like(mean) if dmean is None else dmean
    dvariance = zeros_like(mean) if dvariance is None else dvariance
    return get_default_graph().create_op("MomentsGrad", [op.inputs[0], mean, dmean, dvariance]).outputs


def _moments_grad_kernel(xp, x, mean, dmean, dvariance, addend=None, out=None):
    """With ``addend`` (``_MomentsGradAdd``: the AddN that joins it to the normalization's
    gradient, fused when a stage is lowered), ``addend + `` the gradient in the same pass, into
    ``out`` (the addend's own buffer) where the executor hands it over."""
    count = max(x.size // max(x.shape[-1], 1), 1)
    mean, slope, shift = _vector(xp, mean), _vector(xp, dvariance) * (2 / count), _vector(xp, dmean) / count
    if addend is None:
        if fused.compiled_for(xp, x, mean, slope, shift):
            return fused.normalize(x, mean, slope, shift)
        return (x - mean) * slope + shift
    if fused.compiled_for(xp, addend, x, mean, slope, shift):
        in_place = out is addend and addend.flags.c_contiguous  # its rows are views of it
        return fused.add_centered(addend, x, mean, slope, shift, out if in_place else None)
    return addend + (x - mean) * slope + shift


defop("Moments", lambda inputs, keep_dims: [Spec(_vector_shape(inputs[0], keep_dims), inputs[0].dtype)] * 2,
      _moments_kernel, _moments_grad, num_outputs=2)
defop("MomentsGrad", lambda inputs: [Spec(inputs[0].shape, inputs[0].dtype)], _moments_grad_kernel)
defop("_MomentsGradAdd", lambda inputs: [Spec(inputs[0].shape, inputs[0].dtype)], _moments_grad_kernel,
      in_place=4)


def moments(x: Tensor, keep_dims: bool, name: str) -> tuple[Tensor, Tensor]:
    """``tf.nn.moments`` over every axis but the last of an ``x`` in :func:`channel_form`."""
    attrs = {"keep_dims": bool(keep_dims)}
    return tuple(get_default_graph().create_op("Moments", [x], attrs, name=name).outputs)


def _normalization_parts(xp, mean, variance, params, variance_epsilon, has_offset, has_scale):
    """``(mean, 1 / sqrt(variance + epsilon), scale, offset)`` as channel vectors (1 and 0 where absent)."""
    mean, variance = _vector(xp, mean), _vector(xp, variance)
    offset = _vector(xp, params[0]) if has_offset else xp.zeros_like(mean)
    scale = _vector(xp, params[-1]) if has_scale else xp.ones_like(mean)
    return mean, 1 / xp.sqrt(variance + variance_epsilon), scale, offset


def _batch_normalization_kernel(xp, x, mean, variance, *params, variance_epsilon, has_offset, has_scale,
                                relu=False):
    """With ``relu`` (``_BatchNormalizationRelu``), ``max(y, 0)`` in the same pass."""
    mean, inverse, scale, offset = _normalization_parts(xp, mean, variance, params, variance_epsilon,
                                                        has_offset, has_scale)
    if fused.compiled_for(xp, x, mean, scale, offset):
        return fused.normalize(x, mean, inverse * scale, offset, relu)
    y = (x - mean) * (inverse * scale) + offset
    return _relu(xp, y) if relu else y


def _batch_normalization_grad(op, dy):
    """dx, dmean, dvariance and the offset's and scale's gradients, each shaped as its input."""
    if dy is None:
        return [None] * len(op.inputs)
    x, mean, variance, *params = op.inputs
    scale = [params[-1]] if op.attrs["has_scale"] else []
    dx, dmean, dvariance, doffset, dscale = get_default_graph().create_op(
        "BatchNormalizationGrad", [dy, x, mean, variance, *scale], dict(op.attrs)).outputs
    vector_grads = [dmean, dvariance] + [doffset] * op.attrs["has_offset"] + [dscale] * op.attrs["has_scale"]
    return [dx] + [grad if vector.shape.ndims == 1 else reshape(grad, vector.shape.as_list())
                   for grad, vector in zip(vector_grads, op.inputs[1:])]


def _batch_normalization_grad_kernel(xp, dy, x, mean, variance, *scale, variance_epsilon, has_offset,
                                     has_scale, relu_output=None):
    """With ``relu_output`` (``_BatchNormalizationGradRelu``), ``dy`` is the gradient of a ReLU
    after the normalization, taken where its output is positive in the same passes."""
    mean, inverse, scale, _ = _normalization_parts(xp, mean, variance, [scale[0]] if scale else [],
                                                   variance_epsilon, False, has_scale)
    factor = inverse * scale
    if fused.compiled_for(xp, dy, x, mean, factor, *[] if relu_output is None else [relu_output]):
        sums = fused.batch_norm_grad_sums(dy, x, mean, relu_output)
        sum_dy, sum_dy_centered = (v.astype(x.dtype) for v in sums)
        dx = fused.normalize(dy, xp.zeros_like(mean), factor, xp.zeros_like(mean)) if relu_output is None \
            else fused.relu_grad_scaled(dy, relu_output, factor)
    else:
        if relu_output is not None:
            dy = xp.where(relu_output > 0, dy, xp.zeros_like(dy))
        axes = tuple(range(x.ndim - 1))
        sum_dy, sum_dy_centered = xp.sum(dy, axis=axes), xp.sum(dy * (x - mean), axis=axes)
        dx = dy * factor
    return (dx, -sum_dy * factor, sum_dy_centered * factor * inverse * inverse * -0.5, sum_dy,
            sum_dy_centered * inverse)


def _batch_normalization_grad_infer(inputs, **_):
    x = inputs[1]
    vector = Spec((x.shape[-1] if x.shape is not None else None,), x.dtype)
    return [Spec(x.shape, x.dtype)] + [vector] * 4


defop("BatchNormalization", lambda inputs, **_: [Spec(inputs[0].shape, inputs[0].dtype)],
      _batch_normalization_kernel, _batch_normalization_grad)
defop("BatchNormalizationGrad", _batch_normalization_grad_infer, _batch_normalization_grad_kernel,
      num_outputs=5)
# Relu(BatchNormalization) and BatchNormalizationGrad(ReluGrad), fused when a stage is lowered
# (runtime/fusion.py), as the FusedBatchNorm pair is: the ReLU in the normalization's passes
defop("_BatchNormalizationRelu", lambda inputs, **_: [Spec(inputs[0].shape, inputs[0].dtype)],
      lambda xp, *arrays, **attrs: _batch_normalization_kernel(xp, *arrays, **attrs, relu=True))
defop("_BatchNormalizationGradRelu",
      lambda inputs, **attrs: _batch_normalization_grad_infer([inputs[0], *inputs[2:]], **attrs),
      lambda xp, g, relu_output, *arrays, **attrs: _batch_normalization_grad_kernel(
          xp, g, *arrays, **attrs, relu_output=relu_output), num_outputs=5)


def batch_normalization(x: Tensor, mean: Tensor, variance: Tensor, offset, scale, variance_epsilon: float,
                        name: str) -> Tensor:
    """``tf.nn.batch_normalization`` of an ``x`` in :func:`channel_form` with its vectors, as one op."""
    params = [p for p in (offset, scale) if p is not None]
    attrs = {"variance_epsilon": float(variance_epsilon), "has_offset": offset is not None,
             "has_scale": scale is not None}
    return get_default_graph().create_op("BatchNormalization", [x, mean, variance, *params], attrs,
                                         name=name).outputs[0]
