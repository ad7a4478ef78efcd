"""Neural-network ops: the ``tf.nn`` namespace of TensorFlow 1.x.

Each op is one ``defop``: a shape rule, a kernel over ``xp`` and a gradient
that builds graph. Convolution, pooling and LRN lower to the NHWC array code in
:mod:`dflow.ops.conv_lowering` (im2col + one matmul, strided-slice pooling);
``NCHW`` kernels transpose to NHWC and back.

>>> import dflow as tf
>>> x = tf.placeholder(tf.float32, [None, 24, 24, 3])
>>> w = tf.zeros([5, 5, 3, 64])
>>> y = tf.nn.max_pool(tf.nn.relu(tf.nn.conv2d(x, w, [1, 1, 1, 1], "SAME")),
...                    ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1], padding="SAME")
>>> y.shape
(?, 12, 12, 64)
"""

from __future__ import annotations

from .. import dtypes
from ..graph import Tensor, convert_to_tensor, get_default_graph
from . import batch_norm_ops, fused, math_ops, parallel
from . import conv_lowering as lowering
from .array_ops import expand_dims, pad, reshape, shape, shape_value, squeeze, stop_gradient, transpose
from .math_ops import exp, reduce_mean, reduce_sum, square
from .registry import ShapeError, Spec, defop, get_opdef
from .shape_rules import broadcast, fmt, normalize_axis, same_as_input
from .state_ops import op_seed

__all__ = [
    "relu", "softmax", "log_softmax", "bias_add", "conv2d", "conv2d_backprop_input",
    "conv2d_backprop_filter", "conv2d_transpose", "conv1d", "depthwise_conv2d", "separable_conv2d",
    "max_pool", "avg_pool", "local_response_normalization", "lrn",
    "dropout", "l2_loss", "sparse_softmax_cross_entropy_with_logits",
    "softmax_cross_entropy_with_logits", "softmax_cross_entropy_with_logits_v2",
    "sigmoid_cross_entropy_with_logits", "moments", "in_top_k",
    "softplus", "softsign", "elu", "selu", "relu6", "leaky_relu", "xw_plus_b", "l2_normalize",
    "zero_fraction", "weighted_cross_entropy_with_logits", "relu_layer", "batch_normalization",
    "top_k",
]


def _op(op_type, inputs, attrs=None, name=None):
    return get_default_graph().create_op(op_type, inputs, attrs, name=name)


def _out(op_type, inputs, attrs=None, name=None) -> Tensor:
    return _op(op_type, inputs, attrs, name).outputs[0]


# ---- data formats ------------------------------------------------------------------------------
# Kernels compute in NHWC; an NCHW op transposes in and out (docs/measured.md: NHWC is faster).
def _to_nhwc(xp, x, data_format):
    return x if data_format == "NHWC" else xp.permute_dims(x, (0, 2, 3, 1))


def _from_nhwc(xp, y, data_format):
    return y if data_format == "NHWC" else xp.permute_dims(y, (0, 3, 1, 2))


def _nhwc(dims, data_format):
    """A 4-sequence given in ``data_format`` order, reordered to NHWC."""
    return tuple(dims) if data_format == "NHWC" else (dims[0], dims[2], dims[3], dims[1])


def _from_nhwc_dims(dims, data_format):
    return tuple(dims) if data_format == "NHWC" else (dims[0], dims[3], dims[1], dims[2])


def _four(values, what, data_format):
    """TF's 4-list (``[1, sh, sw, 1]`` in NHWC); an int or a pair is accepted for the spatial dims."""
    if isinstance(values, int):
        values = [values, values]
    values = [int(v) for v in values]
    if len(values) == 2:
        values = [1, *values, 1] if data_format == "NHWC" else [1, 1, *values]
    if len(values) != 4:
        raise ValueError(f"{what} must have 4 entries (one per dim of {data_format}), got {values}")
    n, _, _, c = _nhwc(values, data_format)
    if n != 1 or c != 1:
        raise ValueError(f"{what} {values} must be 1 in the batch and channel dims ({data_format})")
    if min(values) < 1:
        raise ValueError(f"{what} must be positive, got {values}")
    return values


def _window_attrs(strides, padding, data_format, dilations=None, ksize=None):
    if data_format not in ("NHWC", "NCHW"):
        raise ValueError(f"data_format must be 'NHWC' or 'NCHW', got {data_format!r}")
    padding = padding.upper() if isinstance(padding, str) else padding
    if padding not in ("SAME", "VALID"):
        raise ValueError(f"padding must be 'SAME' or 'VALID', got {padding!r}")
    attrs = {"strides": _four(strides, "strides", data_format), "padding": padding,
             "data_format": data_format}
    if ksize is not None:
        attrs["ksize"] = _four(ksize, "ksize", data_format)
    if dilations is not None:
        attrs["dilations"] = _four(dilations, "dilations", data_format)
    return attrs


def _rank4(spec, what):
    if spec.shape is not None and len(spec.shape) != 4:
        raise ShapeError(f"{what} must have rank 4, got shape {fmt(spec.shape)}")
    return (None,) * 4 if spec.shape is None else spec.shape


def _out_size(size, k, stride, dilation, padding, where):
    if size is None or k is None:
        return None
    try:
        return lowering.window_geometry(size, k, stride, dilation, padding)[0]
    except ValueError as e:
        raise ShapeError(f"{e} (input shape {where})") from None


def _windowed_shape(in_shape, window_hw, attrs, channels):
    """Output shape (in ``data_format`` order) of a conv/pool over ``in_shape``."""
    fmt_ = attrs["data_format"]
    n, h, w, _ = _nhwc(in_shape, fmt_)
    _, sh, sw, _ = _nhwc(attrs["strides"], fmt_)
    _, dh, dw, _ = _nhwc(attrs.get("dilations") or [1, 1, 1, 1], fmt_)
    where = fmt(in_shape)
    oh = _out_size(h, window_hw[0], sh, dh, attrs["padding"], where)
    ow = _out_size(w, window_hw[1], sw, dw, attrs["padding"], where)
    return _from_nhwc_dims((n, oh, ow, channels), fmt_)


def _spatial(attrs, key):
    _, a, b, _ = _nhwc(attrs.get(key) or [1, 1, 1, 1], attrs["data_format"])
    return a, b


def _sizes(xp_array):
    """A run-time shape vector (any namespace) as a tuple of Python ints."""
    return tuple(int(xp_array[i]) for i in range(xp_array.shape[0]))


# ---- relu -----------------------------------------------------------------------------------------
def _relu_grad_kernel(xp, g, features):
    if fused.compiled_for(xp, g, features) and g.shape == features.shape:  # one pass: 4x the mask's three
        return fused.relu_grad(g, features)
    # a multiply by the 0/1 mask: 10x faster than where() in NumPy (inf * 0 gives NaN, though)
    return g * xp.astype(features > 0, g.dtype)


def _relu_kernel(xp, x):
    return fused.relu(x) if fused.compiled_for(xp, x) else xp.maximum(x, 0.0)


defop("Relu", same_as_input, _relu_kernel,
      lambda op, g: [_out("ReluGrad", [g, op.outputs[0]])])
defop("ReluGrad", same_as_input, _relu_grad_kernel,
      lambda op, gg: [_out("ReluGrad", [gg, op.inputs[1]]), None])


def relu(features, name=None) -> Tensor:
    """``max(features, 0)``.

    >>> tf.nn.relu(tf.constant([-1.0, 2.0])).eval()  # doctest: +SKIP
    array([0., 2.], dtype=float32)
    """
    return _out("Relu", [features], name=name)


# ---- other activations ----------------------------------------------------------------------------
def _activation(op_type, kernel, grad, infer=same_as_input):
    defop(op_type, infer, kernel, grad)

    def build(features, name=None, **attrs) -> Tensor:
        return _out(op_type, [features], attrs, name)

    return build


def _positive(x):
    return math_ops.cast(x > 0.0, x.dtype)


_softplus = _activation(
    "Softplus", lambda xp, x: xp.maximum(x, 0.0) + xp.log1p(xp.exp(-xp.abs(x))),
    lambda op, g: [g * math_ops.sigmoid(op.inputs[0])])
_softsign = _activation("Softsign", lambda xp, x: x / (1.0 + xp.abs(x)),
                        lambda op, g: [g / square(1.0 + math_ops.abs(op.inputs[0]))])
_elu = _activation("Elu", lambda xp, x: xp.where(x > 0.0, x, xp.expm1(xp.minimum(x, 0.0))),
                   lambda op, g: [math_ops.where(op.outputs[0] > 0.0, g, g * (op.outputs[0] + 1.0))])
_relu6 = _activation("Relu6", lambda xp, x: xp.clip(x, 0.0, 6.0) if hasattr(xp, "clip")
                     else xp.minimum(xp.maximum(x, 0.0), 6.0),
                     lambda op, g: [g * _positive(op.inputs[0]) * _positive(6.0 - op.inputs[0])])
_leaky_relu = _activation(
    "LeakyRelu", lambda xp, x, alpha: xp.where(x > 0.0, x, x * alpha),
    lambda op, g: [math_ops.where(op.inputs[0] > 0.0, g, g * op.attrs["alpha"])])


def softplus(features, name=None) -> Tensor:
    """``log(exp(features) + 1)``, computed without overflow."""
    return _softplus(features, name=name)


def softsign(features, name=None) -> Tensor:
    """``features / (abs(features) + 1)``."""
    return _softsign(features, name=name)


def elu(features, name=None) -> Tensor:
    """``features`` where positive, else ``exp(features) - 1``."""
    return _elu(features, name=name)


def selu(features, name=None) -> Tensor:
    """``scale * elu(features, alpha)`` with the self-normalizing constants."""
    alpha, scale = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
    with get_default_graph().name_scope(name or "selu") as scope:
        x = convert_to_tensor(features)
        negative = alpha * elu(x)
        return math_ops.multiply(math_ops.where(x > 0.0, x, negative), scale, name=scope)


def relu6(features, name=None) -> Tensor:
    """``min(max(features, 0), 6)``."""
    return _relu6(features, name=name)


def leaky_relu(features, alpha=0.2, name=None) -> Tensor:
    """``features`` where positive, else ``alpha * features``."""
    return _leaky_relu(features, name=name, alpha=float(alpha))


# ---- softmax / log_softmax ---------------------------------------------------------------------
def _softmax_kernel(xp, x, axis):
    e = xp.exp(x - xp.max(x, axis=axis, keepdims=True))
    return e / xp.sum(e, axis=axis, keepdims=True)


def _log_softmax_kernel(xp, x, axis):
    shifted = x - xp.max(x, axis=axis, keepdims=True)
    return shifted - xp.log(xp.sum(xp.exp(shifted), axis=axis, keepdims=True))


def _softmax_grad(y, g, axis):
    """Vector-Jacobian product of softmax at output ``y``: ``(g - sum(g*y)) * y``."""
    return (g - reduce_sum(g * y, axis, keepdims=True)) * y


def _axis_infer(inputs, axis):
    normalize_axis(axis, None if inputs[0].shape is None else len(inputs[0].shape))
    return same_as_input(inputs)


defop("Softmax", _axis_infer, _softmax_kernel,
      lambda op, g: [_softmax_grad(op.outputs[0], g, op.attrs["axis"])])
defop("LogSoftmax", _axis_infer, _log_softmax_kernel,
      lambda op, g: [g - reduce_sum(g, op.attrs["axis"], keepdims=True) * exp(op.outputs[0])])


def softmax(logits, axis=None, name=None, dim=None) -> Tensor:
    """``exp(logits) / sum(exp(logits), axis)``, computed stably; ``axis`` defaults to -1."""
    axis = -1 if axis is None and dim is None else int(dim if axis is None else axis)
    return _out("Softmax", [logits], {"axis": axis}, name)


def log_softmax(logits, axis=None, name=None, dim=None) -> Tensor:
    """``logits - log(sum(exp(logits), axis))``, computed stably; ``axis`` defaults to -1."""
    axis = -1 if axis is None and dim is None else int(dim if axis is None else axis)
    return _out("LogSoftmax", [logits], {"axis": axis}, name)


# ---- bias_add -------------------------------------------------------------------------------------
def _channel_axis(rank, data_format):
    return 1 if data_format == "NCHW" else rank - 1


def _bias_add_infer(inputs, data_format):
    value, bias = inputs
    if bias.shape is not None and len(bias.shape) != 1:
        raise ShapeError(f"bias must be a vector, got shape {fmt(bias.shape)}")
    if value.shape is None:
        return [Spec(None, dtypes.promote(value.dtype, bias.dtype))]
    if len(value.shape) < 2:
        raise ShapeError(f"value must have rank >= 2, got shape {fmt(value.shape)}")
    shape_ = list(value.shape)
    ax = _channel_axis(len(shape_), data_format)
    c, b = shape_[ax], None if bias.shape is None else bias.shape[0]
    if c is not None and b is not None and c != b:
        raise ShapeError(f"value shape {fmt(value.shape)} has {c} channels ({data_format}) "
                         f"but bias shape {fmt(bias.shape)} has {b}")
    shape_[ax] = c if c is not None else b
    return [Spec(tuple(shape_), dtypes.promote(value.dtype, bias.dtype))]


def _bias_add_kernel(xp, value, bias, data_format):
    if data_format == "NCHW":
        bias = xp.reshape(bias, (bias.shape[0],) + (1,) * (value.ndim - 2))
    return value + bias


def _bias_add_grad_infer(inputs, data_format):
    s = inputs[0].shape
    return [Spec(None if s is None else (s[_channel_axis(len(s), data_format)],), inputs[0].dtype)]


def _bias_add_grad_kernel(xp, g, data_format):
    keep = _channel_axis(g.ndim, data_format)
    if keep == g.ndim - 1 and g.ndim > 1:  # channels last
        return parallel.sum_rows(xp, g)
    return xp.sum(g, axis=tuple(a for a in range(g.ndim) if a != keep))


def _bias_add_grad_grad(op, gg):
    from .array_ops import zeros_like

    return [bias_add(zeros_like(op.inputs[0]), gg, op.attrs["data_format"])]


defop("BiasAdd", _bias_add_infer, _bias_add_kernel,
      lambda op, g: [g, _out("BiasAddGrad", [g], {"data_format": op.attrs["data_format"]})])
defop("BiasAddGrad", _bias_add_grad_infer, _bias_add_grad_kernel, _bias_add_grad_grad)


def _add_relu_kernel(xp, x, y, data_format="NHWC", out=None):
    if data_format != "NCHW":  # a bias along the last axis, either operand of an Add
        for value, bias in ((x, y), (y, x)):
            if bias.ndim == 1 and value.ndim >= 1 and value.shape[-1] == bias.shape[0] \
                    and fused.compiled_for(xp, value, bias):
                in_place = out is value and value.flags.c_contiguous  # its rows are views of it
                return fused.bias_add_relu(value, bias, out if in_place else None)
    return _relu_kernel(xp, _bias_add_kernel(xp, x, y, data_format))


# Relu(BiasAdd(x, b)) or Relu(Add(x, b)), fused when a stage is lowered (runtime/fusion.py): one
# pass over the layer's output instead of two and a temporary. Not an op of users' graphs, so no
# gradient: their graphs differentiate the BiasAdd and the Relu, before lowering.
defop("_FusedAddRelu", math_ops._binary_infer, _add_relu_kernel, in_place=0)


def _fused_matmul_infer(inputs, transpose_a, transpose_b, activation):
    product = math_ops._matmul_infer(inputs[:2], transpose_a, transpose_b)
    return product if len(inputs) == 2 else math_ops._binary_infer([product[0], inputs[2]])


def _fused_matmul_kernel(xp, a, b, bias=None, *, transpose_a, transpose_b, activation):
    y = math_ops.fused_matmul(xp, a, b, bias, activation or None, transpose_a, transpose_b)
    if y is not None:
        return y
    y = get_opdef("MatMul").kernel(xp, a, b, transpose_a, transpose_b)
    if activation == "Relu" and bias is not None:
        return _add_relu_kernel(xp, y, bias, out=y)  # y is this kernel's own
    if bias is not None:
        y = y + bias  # as Add and BiasAdd (NHWC: along the last axis) compute it
    return get_opdef(activation).kernel(xp, y) if activation else y


# MatMul(a, b) with the Add or BiasAdd of a bias after it and a Relu, Sigmoid or Tanh after that
# (either may be missing), fused when a stage is lowered (runtime/fusion.py), as Grappler's
# remapper makes TF's _FusedMatMul: oneDNN adds the bias and applies the activation as it makes
# each block of the product (a GAN's 100 x 784 x 256 layer with a sigmoid: 140 us where the three
# ops took 169). Where oneDNN does not take them, the ops' own kernels, one after another. As
# _FusedAddRelu, never in users' graphs.
defop("_FusedMatMul", _fused_matmul_infer, _fused_matmul_kernel)


def _matmul_shape_infer(inputs, out_type, transpose_a, transpose_b):
    product = math_ops._matmul_infer(inputs, transpose_a, transpose_b)[0]
    return [Spec((None if product.shape is None else len(product.shape),), out_type)]


def _matmul_shape_kernel(xp, a, b, out_type, transpose_a, transpose_b):
    rows = a.shape[-1] if transpose_a else a.shape[-2]
    columns = b.shape[-2] if transpose_b else b.shape[-1]
    batch = broadcast(tuple(a.shape[:-2]), tuple(b.shape[:-2]))  # (a step's product ran: they fit)
    return xp.asarray((*batch, rows, columns), dtype=out_type.of(xp))


# Shape(MatMul(a, b)) from the shapes of a and b, as _Conv2DShape: the gradient of
# ``tf.matmul(x, w) + b`` reads the product's shape, and that read alone kept it from fusing.
defop("_MatMulShape", _matmul_shape_infer, _matmul_shape_kernel)


def xw_plus_b(x, weights, biases, name=None) -> Tensor:
    """``matmul(x, weights) + biases``."""
    with get_default_graph().name_scope(name or "xw_plus_b") as scope:
        return bias_add(math_ops.matmul(x, weights), biases, name=scope)


def relu_layer(x, weights, biases, name=None) -> Tensor:
    """``relu(matmul(x, weights) + biases)``."""
    with get_default_graph().name_scope(name or "relu_layer") as scope:
        return relu(xw_plus_b(x, weights, biases), name=scope)


def bias_add(value, bias, data_format=None, name=None) -> Tensor:
    """``value + bias`` with ``bias`` along the channel axis (last for NHWC, 1 for NCHW)."""
    data_format = data_format or "NHWC"
    if data_format not in ("NHWC", "NCHW"):
        raise ValueError(f"data_format must be 'NHWC' or 'NCHW', got {data_format!r}")
    return _out("BiasAdd", [value, bias], {"data_format": data_format}, name)


# ---- conv2d and its two gradients ---------------------------------------------------------------
def _conv2d_infer(inputs, strides, padding, data_format, dilations):
    x, w = _rank4(inputs[0], "conv2d input"), _rank4(inputs[1], "conv2d filter")
    c = _nhwc(x, data_format)[3]
    if c is not None and w[2] is not None and c != w[2]:
        raise ShapeError(f"input shape {fmt(x)} ({data_format}) has {c} channels but filter "
                         f"shape {fmt(w)} expects {w[2]}")
    attrs = {"strides": strides, "padding": padding, "data_format": data_format, "dilations": dilations}
    out = _windowed_shape(x, w[:2], attrs, w[3])
    return [Spec(out, dtypes.promote(inputs[0].dtype, inputs[1].dtype))]


def _conv2d_kernel(xp, x, w, strides, padding, data_format, dilations):
    attrs = {"data_format": data_format, "strides": strides, "dilations": dilations}
    y = lowering.conv2d(xp, _to_nhwc(xp, x, data_format), w, _spatial(attrs, "strides"),
                        _spatial(attrs, "dilations"), padding)
    return _from_nhwc(xp, y, data_format)


def _conv2d_bias_relu_kernel(xp, x, w, bias=None, *, strides, padding, data_format, dilations):
    if data_format == "NHWC":
        attrs = {"data_format": data_format, "strides": strides, "dilations": dilations}
        y = lowering.conv2d_bias_relu(xp, x, w, bias, _spatial(attrs, "strides"),
                                      _spatial(attrs, "dilations"), padding)
        if y is not None:
            return y
    y = _conv2d_kernel(xp, x, w, strides, padding, data_format, dilations)
    if bias is None:
        return _relu_kernel(xp, y)
    return _add_relu_kernel(xp, y, bias, data_format, out=y)  # y is this kernel's own


# Relu(BiasAdd(Conv2D(x, w), b)), Relu(Add(Conv2D(x, w), b)) and Relu(Conv2D(x, w)) (no bias),
# fused when a stage is lowered (runtime/fusion.py), as Grappler's remapper makes TF's
# _FusedConv2D: the bias and ReLU applied as oneDNN makes each block of the output. Not an op of
# users' graphs, so no gradient (theirs differentiate the ops it replaces).
defop("_FusedConv2DBiasRelu", lambda inputs, **attrs: _conv2d_infer(inputs[:2], **attrs),
      _conv2d_bias_relu_kernel)


def _conv2d_shape_kernel(xp, x, w, out_type, **conv_attrs):
    specs = [Spec(tuple(x.shape), dtypes.float32), Spec(tuple(w.shape), dtypes.float32)]
    return xp.asarray(_conv2d_infer(specs, **conv_attrs)[0].shape, dtype=out_type.of(xp))


# Shape(Conv2D(x, w)) from the shapes of x and w, made when a stage is lowered (runtime/fusion.py):
# the gradient of relu(conv + b) reads the convolution's shape, and that read alone kept the
# convolution's output from fusing with the add and the ReLU.
defop("_Conv2DShape", lambda inputs, out_type, **_: [Spec((4,), out_type)], _conv2d_shape_kernel)


def _conv_attrs(op):
    return {k: op.attrs[k] for k in ("strides", "padding", "data_format", "dilations")}


def _conv2d_grad(op, g):
    x, w = op.inputs
    a = _conv_attrs(op)
    return [_out("Conv2DBackpropInput", [shape(x), w, g], a),
            _out("Conv2DBackpropFilter", [x, shape(w), g], a)]


def _backprop_input_infer(inputs, strides, padding, data_format, dilations):
    sizes, w = shape_value(inputs[0]), _rank4(inputs[1], "filter")
    if sizes is not None:
        return [Spec(tuple(sizes), inputs[1].dtype)]
    batch = _rank4(inputs[2], "out_backprop")[0]  # same in both layouts
    return [Spec(_from_nhwc_dims((batch, None, None, w[2]), data_format), inputs[1].dtype)]


def _backprop_input_kernel(xp, input_sizes, w, dy, strides, padding, data_format, dilations):
    attrs = {"data_format": data_format, "strides": strides, "dilations": dilations}
    dx = lowering.conv2d_input_grad(
        xp, _to_nhwc(xp, dy, data_format), w, _nhwc(_sizes(input_sizes), data_format),
        _spatial(attrs, "strides"), _spatial(attrs, "dilations"), padding)
    return _from_nhwc(xp, dx, data_format)


def _backprop_input_grad(op, gg):
    _, w, dy = op.inputs
    a = _conv_attrs(op)
    return [None, _out("Conv2DBackpropFilter", [gg, shape(w), dy], a), _out("Conv2D", [gg, w], a)]


def _backprop_filter_infer(inputs, strides, padding, data_format, dilations):
    sizes = shape_value(inputs[1])
    if sizes is not None:
        return [Spec(tuple(sizes), inputs[0].dtype)]
    c = _nhwc(_rank4(inputs[0], "input"), data_format)[3]
    o = _nhwc(_rank4(inputs[2], "out_backprop"), data_format)[3]
    return [Spec((None, None, c, o), inputs[0].dtype)]


def _backprop_filter_kernel(xp, x, filter_sizes, dy, strides, padding, data_format, dilations):
    attrs = {"data_format": data_format, "strides": strides, "dilations": dilations}
    return lowering.conv2d_filter_grad(
        xp, _to_nhwc(xp, x, data_format), _to_nhwc(xp, dy, data_format), _sizes(filter_sizes),
        _spatial(attrs, "strides"), _spatial(attrs, "dilations"), padding)


def _backprop_filter_with_bias_kernel(xp, x, filter_sizes, dy, strides, padding, data_format, dilations):
    if data_format == "NHWC":
        attrs = {"data_format": data_format, "strides": strides, "dilations": dilations}
        both = lowering.conv2d_filter_and_bias_grad(xp, x, dy, _sizes(filter_sizes),
                                                    _spatial(attrs, "strides"), _spatial(attrs, "dilations"),
                                                    padding)
        if both is not None:
            return both
    return (_backprop_filter_kernel(xp, x, filter_sizes, dy, strides, padding, data_format, dilations),
            _bias_add_grad_kernel(xp, dy, data_format))


def _backprop_filter_grad(op, gg):
    x, _, dy = op.inputs
    a = _conv_attrs(op)
    return [_out("Conv2DBackpropInput", [shape(x), gg, dy], a), None, _out("Conv2D", [x, gg], a)]


defop("Conv2D", _conv2d_infer, _conv2d_kernel, _conv2d_grad)
defop("Conv2DBackpropInput", _backprop_input_infer, _backprop_input_kernel, _backprop_input_grad)
defop("Conv2DBackpropFilter", _backprop_filter_infer, _backprop_filter_kernel, _backprop_filter_grad)
# Conv2DBackpropFilter(x, sizes, g) and BiasAddGrad(g), fused when a stage is lowered
# (runtime/fusion.py): oneDNN sums g per channel in the pass that makes the filter's gradient.
defop("_Conv2DBackpropFilterWithBias",
      lambda inputs, **attrs: _backprop_filter_infer(inputs, **attrs)
      + _bias_add_grad_infer(inputs[2:], attrs["data_format"]),
      _backprop_filter_with_bias_kernel, num_outputs=2)


def conv2d(input, filter, strides, padding, use_cudnn_on_gpu=True, data_format="NHWC",
           dilations=None, name=None) -> Tensor:
    """2-D convolution (TF's cross-correlation) of ``input`` with ``filter [kh, kw, in, out]``.

    ``strides`` and ``dilations`` are 4-lists in ``data_format`` order (``[1, s, s, 1]``
    for NHWC); ``padding`` is ``'SAME'`` or ``'VALID'`` with TF's exact padding.
    """
    attrs = _window_attrs(strides, padding, data_format, dilations or [1, 1, 1, 1])
    return _out("Conv2D", [input, filter], attrs, name)


def conv2d_backprop_input(input_sizes, filter, out_backprop, strides, padding,
                          use_cudnn_on_gpu=True, data_format="NHWC", dilations=None,
                          name=None) -> Tensor:
    """The gradient of :func:`conv2d` with respect to its input (of shape ``input_sizes``)."""
    attrs = _window_attrs(strides, padding, data_format, dilations or [1, 1, 1, 1])
    return _out("Conv2DBackpropInput", [input_sizes, filter, out_backprop], attrs, name)


def conv2d_backprop_filter(input, filter_sizes, out_backprop, strides, padding,
                           use_cudnn_on_gpu=True, data_format="NHWC", dilations=None,
                           name=None) -> Tensor:
    """The gradient of :func:`conv2d` with respect to its filter (of shape ``filter_sizes``)."""
    attrs = _window_attrs(strides, padding, data_format, dilations or [1, 1, 1, 1])
    return _out("Conv2DBackpropFilter", [input, filter_sizes, out_backprop], attrs, name)


def conv2d_transpose(value, filter, output_shape, strides, padding="SAME", data_format="NHWC", name=None,
                     dilations=None) -> Tensor:
    """The transpose of :func:`conv2d` (a "deconvolution": the gradient of a convolution with
    respect to its input): ``value`` of ``conv2d``'s output shape becomes ``output_shape``;
    ``filter`` is ``[kh, kw, output channels, value's channels]``."""
    value, filter = convert_to_tensor(value), convert_to_tensor(filter)
    channels = value.shape[3 if data_format == "NHWC" else 1].value if value.shape.ndims == 4 else None
    if channels is not None and filter.shape.ndims == 4 and filter.shape[3].value not in (None, channels):
        raise ValueError(f"conv2d_transpose: value has {channels} channels but filter {filter.shape} "
                         f"expects {filter.shape[3].value} (its last dim)")
    with get_default_graph().name_scope(name or "conv2d_transpose"):
        return conv2d_backprop_input(output_shape, filter, value, strides, padding, data_format=data_format,
                                     dilations=dilations)


def conv1d(value, filters, stride, padding, use_cudnn_on_gpu=None, data_format="NWC", name=None,
           dilations=None) -> Tensor:
    """1-D convolution of ``value [batch, width, in]`` with ``filters [kw, in, out]``: a
    :func:`conv2d` over a height of 1, as TF builds it."""
    if data_format not in ("NWC", "NCW"):
        raise ValueError(f"conv1d's data_format is NWC or NCW, got {data_format!r}")
    with get_default_graph().name_scope(name or "conv1d"):
        height_axis = 1 if data_format == "NWC" else 2
        image = expand_dims(value, height_axis)
        kernel = expand_dims(filters, 0)
        four = "NHWC" if data_format == "NWC" else "NCHW"
        spread = int(dilations or 1) if not isinstance(dilations, (list, tuple)) else int(dilations[-1])
        if four == "NHWC":
            strides, rates = [1, 1, int(stride), 1], [1, 1, spread, 1]
        else:
            strides, rates = [1, 1, 1, int(stride)], [1, 1, 1, spread]
        convolved = conv2d(image, kernel, strides, padding, data_format=four, dilations=rates)
        return squeeze(convolved, [height_axis])


def depthwise_conv2d(input, filter, strides, padding, rate=None, name=None, data_format=None) -> Tensor:
    """Each input channel convolved with its own ``channel_multiplier`` filters: ``filter [kh, kw,
    in, multiplier]``, output channel ``c * multiplier + m``. Built, as a sum over the window's
    ``kh * kw`` offsets of a strided slice times that offset's filter taps, from differentiable
    ops: its gradient is theirs."""
    input, filter = convert_to_tensor(input), convert_to_tensor(filter)
    channels_first = data_format == "NCHW"
    with get_default_graph().name_scope(name or "depthwise"):
        image = transpose(input, [0, 2, 3, 1]) if channels_first else input
        kh, kw, channels, multiplier = filter.shape.as_list()
        sh, sw = (strides[2], strides[3]) if channels_first else (strides[1], strides[2])
        rh, rw = (1, 1) if rate is None else (int(rate[0]), int(rate[1]))
        _, height, width, _ = image.shape.as_list()
        if None in (kh, kw, channels, multiplier, height, width):
            raise ValueError("depthwise_conv2d needs the filter's shape and the input's height and width "
                             f"when the graph is built, got input {image.shape} and filter {filter.shape}")
        span_h, span_w = (kh - 1) * rh + 1, (kw - 1) * rw + 1
        if padding.upper() == "SAME":
            out_h, out_w = -(-height // sh), -(-width // sw)
            total_h = max((out_h - 1) * sh + span_h - height, 0)
            total_w = max((out_w - 1) * sw + span_w - width, 0)
            image = pad(image, [[0, 0], [total_h // 2, total_h - total_h // 2],
                                [total_w // 2, total_w - total_w // 2], [0, 0]])
        else:
            out_h, out_w = (height - span_h) // sh + 1, (width - span_w) // sw + 1
        taps = []
        for i in range(kh):
            for j in range(kw):
                rows = slice(i * rh, i * rh + (out_h - 1) * sh + 1, sh)
                columns = slice(j * rw, j * rw + (out_w - 1) * sw + 1, sw)
                window = image[:, rows, columns, :]
                taps.append(expand_dims(window, -1) * filter[i, j])  # [N, H', W', C, M]
        summed = math_ops.add_n(taps) if len(taps) > 1 else taps[0]
        output = reshape(summed, [-1, out_h, out_w, channels * multiplier])
        return transpose(output, [0, 3, 1, 2]) if channels_first else output


def separable_conv2d(input, depthwise_filter, pointwise_filter, strides, padding, rate=None, name=None,
                     data_format=None) -> Tensor:
    """:func:`depthwise_conv2d`, then a 1x1 :func:`conv2d` with ``pointwise_filter [1, 1, in *
    multiplier, out]`` mixing the channels (MobileNet's and Xception's block)."""
    with get_default_graph().name_scope(name or "separable_conv2d"):
        depthwise = depthwise_conv2d(input, depthwise_filter, strides, padding, rate, data_format=data_format)
        return conv2d(depthwise, pointwise_filter, [1, 1, 1, 1], "VALID", data_format=data_format or "NHWC")


# ---- pooling ----------------------------------------------------------------------------------
def _pool_infer(inputs, ksize, strides, padding, data_format):
    x = _rank4(inputs[0], "pooling input")
    attrs = {"strides": strides, "padding": padding, "data_format": data_format}
    c = _nhwc(x, data_format)[3]
    out = _windowed_shape(x, _nhwc(ksize, data_format)[1:3], attrs, c)
    return [Spec(out, inputs[0].dtype)]


def _pool_args(ksize, strides, data_format):
    return _nhwc(ksize, data_format)[1:3], _nhwc(strides, data_format)[1:3]


def _max_pool_kernel(xp, x, ksize, strides, padding, data_format):
    k, s = _pool_args(ksize, strides, data_format)
    return _from_nhwc(xp, lowering.max_pool(xp, _to_nhwc(xp, x, data_format), k, s, padding),
                      data_format)


def _max_pool_grad_kernel(xp, x, y, dy, ksize, strides, padding, data_format):
    k, s = _pool_args(ksize, strides, data_format)
    x, y, dy = (_to_nhwc(xp, a, data_format) for a in (x, y, dy))
    return _from_nhwc(xp, lowering.max_pool_grad(xp, x, y, dy, k, s, padding), data_format)


def _max_pool_relu_grad_kernel(xp, x, y, dy, ksize, strides, padding, data_format, out=None):
    k, s = _pool_args(ksize, strides, data_format)
    if data_format != "NHWC":  # the transposed x is a copy: no buffer to write into
        out = None
    x, y, dy = (_to_nhwc(xp, a, data_format) for a in (x, y, dy))
    return _from_nhwc(xp, lowering.max_pool_grad(xp, x, y, dy, k, s, padding, positive_only=True,
                                                 out=out), data_format)


# (NHWC only: runtime/fusion.py makes these for NHWC pooling)
def _max_pool_with_workspace_kernel(xp, x, ksize, strides, padding, data_format):
    return lowering.max_pool_with_workspace(xp, x, *_pool_args(ksize, strides, data_format), padding)


def _max_pool_grad_with_workspace_kernel(xp, x, y, dy, workspace, ksize, strides, padding, data_format,
                                         relu_grad=False, out=None):
    if relu_grad and workspace.shape[0]:  # routed by the workspace: the ReLU's gradient first, on dy,
        dy, relu_grad = _relu_grad_kernel(xp, dy, y), False  # where the window's maximum is not positive
    k, s = _pool_args(ksize, strides, data_format)
    return lowering.max_pool_grad_with_workspace(xp, x, y, dy, workspace, k, s, padding, relu_grad, out)


def _avg_pool_kernel(xp, x, ksize, strides, padding, data_format):
    k, s = _pool_args(ksize, strides, data_format)
    return _from_nhwc(xp, lowering.avg_pool(xp, _to_nhwc(xp, x, data_format), k, s, padding),
                      data_format)


def _avg_pool_grad_infer(inputs, ksize, strides, padding, data_format):
    sizes = shape_value(inputs[0])
    return [Spec(None if sizes is None else tuple(sizes), inputs[1].dtype)]


def _avg_pool_grad_kernel(xp, input_sizes, dy, ksize, strides, padding, data_format):
    k, s = _pool_args(ksize, strides, data_format)
    dx = lowering.avg_pool_grad(xp, _nhwc(_sizes(input_sizes), data_format),
                                _to_nhwc(xp, dy, data_format), k, s, padding)
    return _from_nhwc(xp, dx, data_format)


def _pool_attrs(op):
    return {k: op.attrs[k] for k in ("ksize", "strides", "padding", "data_format")}


defop("MaxPool", _pool_infer, _max_pool_kernel,
      lambda op, g: [_out("MaxPoolGrad", [op.inputs[0], op.outputs[0], g], _pool_attrs(op))])
defop("MaxPoolGrad", lambda inputs, **_: same_as_input(inputs), _max_pool_grad_kernel)
# ReluGrad(MaxPoolGrad(x, y, dy), x): a ReLU layer's pooling gradient and its own, fused when a
# stage is lowered (runtime/fusion.py); as _FusedAddRelu, never in users' graphs
defop("_FusedMaxPoolGradReluGrad", lambda inputs, **_: same_as_input(inputs), _max_pool_relu_grad_kernel,
      in_place=0)
# MaxPool and its gradient (with ReluGrad, where that fused too) in one stage: the forward keeps
# where each maximum was, the gradient routes by it (runtime/fusion.py); never in users' graphs
defop("_MaxPoolWithWorkspace",
      lambda inputs, **attrs: [*_pool_infer(inputs, **attrs), Spec((None,), dtypes.uint8)],
      _max_pool_with_workspace_kernel, num_outputs=2)
defop("_MaxPoolGradWithWorkspace", lambda inputs, **_: same_as_input(inputs),
      _max_pool_grad_with_workspace_kernel, in_place=0)
defop("AvgPool", _pool_infer, _avg_pool_kernel,
      lambda op, g: [_out("AvgPoolGrad", [shape(op.inputs[0]), g], _pool_attrs(op))])
defop("AvgPoolGrad", _avg_pool_grad_infer, _avg_pool_grad_kernel,
      lambda op, gg: [None, _out("AvgPool", [gg], _pool_attrs(op))])


def max_pool(value, ksize, strides, padding, data_format="NHWC", name=None) -> Tensor:
    """Max over windows of ``ksize`` (a 4-list like ``[1, 3, 3, 1]``); the gradient goes to
    each window's first maximal element, as in TF."""
    attrs = _window_attrs(strides, padding, data_format, ksize=ksize)
    return _out("MaxPool", [value], attrs, name)


def avg_pool(value, ksize, strides, padding, data_format="NHWC", name=None) -> Tensor:
    """Mean over windows; with SAME padding TF divides by the number of non-padding elements."""
    attrs = _window_attrs(strides, padding, data_format, ksize=ksize)
    return _out("AvgPool", [value], attrs, name)


# ---- local response normalization -------------------------------------------------------------
def _lrn_infer(inputs, **_):
    _rank4(inputs[0], "LRN input")
    return same_as_input(inputs)


defop("LRN", _lrn_infer, lambda xp, x, **a: lowering.lrn(xp, x, **a),
      lambda op, g: [_out("LRNGrad", [g, op.inputs[0], op.outputs[0]], dict(op.attrs))])
defop("LRNGrad", _lrn_infer, lambda xp, g, x, y, **a: lowering.lrn_grad(xp, g, x, y, **a))
# as _MaxPoolWithWorkspace: the window sums of the forward's pass, read by the gradient
defop("_LRNWithWorkspace", lambda inputs, **_: [*_lrn_infer(inputs), Spec((None,), dtypes.uint8)],
      lambda xp, x, **a: lowering.lrn_with_workspace(xp, x, **a), num_outputs=2)
defop("_LRNGradWithWorkspace", lambda inputs, **_: _lrn_infer(inputs),
      lambda xp, g, x, y, workspace, **a: lowering.lrn_grad(xp, g, x, y, **a, workspace=workspace))


def local_response_normalization(input, depth_radius=5, bias=1, alpha=1, beta=0.5,
                                 name=None) -> Tensor:
    """TF's LRN over the last (channel) axis of an NHWC tensor::

        sqr_sum[n, h, w, d] = sum(input[n, h, w, d - depth_radius : d + depth_radius + 1] ** 2)
        output = input / (bias + alpha * sqr_sum) ** beta
    """
    attrs = {"depth_radius": int(depth_radius), "bias": float(bias), "alpha": float(alpha),
             "beta": float(beta)}
    return _out("LRN", [input], attrs, name)


lrn = local_response_normalization


# ---- dropout ----------------------------------------------------------------------------------
def _dropout_infer(inputs, noise_shape, seed):
    x, keep_prob = inputs
    if keep_prob.shape not in (None, ()):
        raise ShapeError(f"keep_prob must be a scalar, got shape {fmt(keep_prob.shape)}")
    mask_shape = x.shape if noise_shape is None else tuple(noise_shape)
    if noise_shape is not None and x.shape is not None:
        if len(mask_shape) != len(x.shape) or broadcast(mask_shape, x.shape) != x.shape:
            raise ShapeError(f"noise_shape {fmt(mask_shape)} does not broadcast to x shape {fmt(x.shape)}")
    return [Spec(x.shape, x.dtype), Spec(mask_shape, x.dtype)]


def _dropout_kernel(state, xp, x, keep_prob, noise_shape, seed):
    """Outputs ``x * scale`` and ``scale = (uniform < keep_prob) / keep_prob`` (for the gradient)."""
    shape_ = x.shape if noise_shape is None else tuple(noise_shape)
    generator = state.random_generator(seed)
    if shape_ == x.shape and fused.compiled_for(xp, x) and 0 < float(keep_prob) <= 1:
        return fused.dropout(x, keep_prob, generator)
    uniform = xp.asarray(generator.random(shape_))
    kept = uniform < xp.astype(keep_prob, uniform.dtype)
    scale = xp.astype(kept, x.dtype) / keep_prob
    return x * scale, scale


defop("Dropout", _dropout_infer, _dropout_kernel,
      lambda op, g, _g_scale=None: [None if g is None else g * op.outputs[1], None],
      stateful=True, num_outputs=2)


def dropout(x, keep_prob=None, noise_shape=None, seed=None, name=None, rate=None) -> Tensor:
    """Keep each element with probability ``keep_prob`` (scaled by ``1/keep_prob``), else 0.

    ``keep_prob`` may be a tensor (a placeholder, to turn dropout off at test time);
    a fresh mask is drawn on every run. ``rate = 1 - keep_prob`` is the TF 2 spelling.
    """
    x = convert_to_tensor(x)
    if (keep_prob is None) == (rate is None):
        raise ValueError("give exactly one of keep_prob and rate")
    if keep_prob is None:
        keep_prob = 1 - rate
    if isinstance(keep_prob, (int, float)):
        if not 0 < keep_prob <= 1:
            raise ValueError(f"keep_prob must be a scalar in (0, 1], got {keep_prob}")
        if keep_prob == 1:
            return x
    keep_prob = convert_to_tensor(keep_prob, dtype=x.dtype)
    noise_shape = None if noise_shape is None else [int(d) for d in noise_shape]
    attrs = {"noise_shape": noise_shape, "seed": op_seed(seed)}
    return _op("Dropout", [x, keep_prob], attrs, name).outputs[0]


# ---- losses -----------------------------------------------------------------------------------
def _l2_loss_kernel(xp, x):
    if not xp.isdtype(x.dtype, "real floating"):
        return xp.sum(x * x * 0.5)  # halve before summing: 0-d float32 / 2 is float64 in NumPy 1.x
    flat = xp.reshape(x, (-1,))
    # one BLAS dot, no x*x temporary: 4.6x faster for local3's 884,736 weights (59 vs 269 us)
    return xp.vecdot(flat, flat) * xp.asarray(0.5, dtype=x.dtype)


defop("L2Loss", lambda inputs: [Spec((), inputs[0].dtype)], _l2_loss_kernel,
      lambda op, g: [op.inputs[0] * g])


def l2_loss(t, name=None) -> Tensor:
    """``sum(t ** 2) / 2``, a scalar."""
    return _out("L2Loss", [t], name=name)


def _sparse_xent_infer(inputs):
    logits, labels = inputs
    if not labels.dtype.is_integer:
        raise ShapeError(f"labels must be integer class indices, got {labels.dtype.name}")
    batch = None if logits.shape is None else logits.shape[:-1]
    if batch is not None and labels.shape is not None:
        batch = _merged(labels.shape, batch)
        if batch is None:
            raise ShapeError(f"labels shape {fmt(labels.shape)} must equal logits shape "
                             f"{fmt(logits.shape)} without its last dimension")
    elif labels.shape is not None:
        batch = labels.shape
    logits_shape = None if batch is None or logits.shape is None else batch + logits.shape[-1:]
    return [Spec(batch, logits.dtype), Spec(logits_shape or logits.shape, logits.dtype)]


def _merged(a, b):
    """The most specific shape compatible with both ``a`` and ``b``, or None if they conflict."""
    if len(a) != len(b) or any(x is not None and y is not None and x != y for x, y in zip(a, b)):
        return None
    return tuple(x if x is not None else y for x, y in zip(a, b))


def _sparse_xent_kernel(xp, logits, labels):
    if logits.ndim == 2 and fused.compiled_for(xp, logits):  # one pass a row: 15x the NumPy at batch 1
        return fused.sparse_xent(logits, labels)
    classes = logits.shape[-1]
    if labels.size and bool(xp.any((labels < 0) | (labels >= classes))):
        raise ValueError(f"labels must be in [0, {classes}) (the logits have {classes} classes); "
                         f"got labels from {int(xp.min(labels))} to {int(xp.max(labels))}")
    log_probs = _log_softmax_kernel(xp, logits, -1)
    onehot = xp.astype(labels[..., None] == xp.arange(classes, dtype=labels.dtype), logits.dtype)
    return -xp.sum(onehot * log_probs, axis=-1), xp.exp(log_probs) - onehot


def _xent_logits_grad(op, g_loss, g_backprop, axis):
    """TF's rule: ``g_loss * backprop``, plus the softmax term when ``backprop`` itself is used."""
    grad = None if g_loss is None else expand_dims(g_loss, axis) * op.outputs[1]
    if g_backprop is not None:
        extra = _softmax_grad(softmax(op.inputs[0], axis), g_backprop, axis)
        grad = extra if grad is None else grad + extra
    return grad


defop("SparseSoftmaxCrossEntropyWithLogits", _sparse_xent_infer, _sparse_xent_kernel,
      lambda op, g_loss, g_bp=None: [_xent_logits_grad(op, g_loss, g_bp, -1), None],
      num_outputs=2)


def sparse_softmax_cross_entropy_with_logits(_sentinel=None, labels=None, logits=None,
                                             name=None) -> Tensor:
    """Per-example ``-log softmax(logits)[label]``; ``labels`` are class indices.

    Call with keywords: ``tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=z)``.
    Labels outside ``[0, num_classes)`` raise at run time.
    """
    if _sentinel is not None or labels is None or logits is None:
        raise ValueError("call sparse_softmax_cross_entropy_with_logits with named arguments: "
                         "(labels=..., logits=...)")
    return _op("SparseSoftmaxCrossEntropyWithLogits", [logits, labels], name=name).outputs[0]


def _xent_infer(inputs, axis):
    logits, labels = inputs
    shape_ = logits.shape if labels.shape is None else labels.shape
    if logits.shape is not None and labels.shape is not None:
        shape_ = _merged(logits.shape, labels.shape)
        if shape_ is None:
            raise ShapeError(f"logits shape {fmt(logits.shape)} and labels shape "
                             f"{fmt(labels.shape)} must be equal")
    dtype = dtypes.promote(logits.dtype, labels.dtype)
    if shape_ is None:
        return [Spec(None, dtype), Spec(None, dtype)]
    (ax,) = normalize_axis(axis, len(shape_))
    return [Spec(shape_[:ax] + shape_[ax + 1:], dtype), Spec(shape_, dtype)]


def _xent_kernel(xp, logits, labels, axis):
    # TF's kernel: one exp pass (the log-softmax's and the softmax's two cost 2x on a 128 x 10,000
    # word2vec's logits), the loss sum(labels * (log(sum(exp)) - shifted))
    shifted = logits - xp.max(logits, axis=axis, keepdims=True)
    exp = xp.exp(shifted)
    total = xp.sum(exp, axis=axis, keepdims=True)
    return xp.sum(labels * (xp.log(total) - shifted), axis=axis), exp / total - labels


def _xent_grad(op, g_loss, g_bp=None):
    axis = op.attrs["axis"]
    labels_grad = None
    if g_loss is not None:
        labels_grad = expand_dims(g_loss, axis) * -log_softmax(op.inputs[0], axis)
    return [_xent_logits_grad(op, g_loss, g_bp, axis), labels_grad]


defop("SoftmaxCrossEntropyWithLogits", _xent_infer, _xent_kernel, _xent_grad, num_outputs=2)


def softmax_cross_entropy_with_logits_v2(_sentinel=None, labels=None, logits=None, dim=-1,
                                         name=None, axis=None) -> Tensor:
    """Per-example ``-sum(labels * log softmax(logits), dim)``; gradients reach ``labels`` too."""
    if _sentinel is not None or labels is None or logits is None:
        raise ValueError("call softmax_cross_entropy_with_logits with named arguments: "
                         "(labels=..., logits=...)")
    logits = convert_to_tensor(logits)
    labels = convert_to_tensor(labels, dtype=None if isinstance(labels, Tensor) else logits.dtype)
    axis = int(dim if axis is None else axis)
    if (logits.shape.ndims is not None and labels.shape.ndims is not None
            and logits.shape.ndims != labels.shape.ndims and axis in (-1, logits.shape.ndims - 1)):
        # TF flattens each to [rows, classes] before its kernel: labels of [128, 1, 10000] for
        # logits of [128, 10000] (a widely copied word2vec's) are the same rows
        labels = reshape(labels, shape(logits))
    return _op("SoftmaxCrossEntropyWithLogits", [logits, labels], {"axis": axis}, name).outputs[0]


def softmax_cross_entropy_with_logits(_sentinel=None, labels=None, logits=None, dim=-1,
                                      name=None) -> Tensor:
    """Like :func:`softmax_cross_entropy_with_logits_v2`, but (as TF 1.x) no gradient reaches
    ``labels``."""
    if labels is not None and logits is not None:
        logits = convert_to_tensor(logits)
        labels = stop_gradient(convert_to_tensor(
            labels, dtype=None if isinstance(labels, Tensor) else logits.dtype))
    return softmax_cross_entropy_with_logits_v2(_sentinel, labels, logits, dim, name)


# the logistic loss as one op (TF builds it of nine, and its gradient of a dozen more): a GAN's
# three losses, nce_loss's, a multi-label classifier's
def _sigmoid_xent_infer(inputs):
    logits, labels = inputs
    if labels.dtype != logits.dtype:
        raise ShapeError(f"labels are {labels.dtype.name}, logits {logits.dtype.name}: cast one of them")
    if logits.shape is None or labels.shape is None:
        return [Spec(logits.shape if labels.shape is None else labels.shape, logits.dtype)]
    merged = _merged(logits.shape, labels.shape)
    if merged is None:
        raise ShapeError(f"logits and labels must have the same shape ({fmt(logits.shape)} vs "
                         f"{fmt(labels.shape)})")
    return [Spec(merged, logits.dtype)]


def _sigmoid_xent_grad_grad(op, gg):
    x, z, g = op.inputs
    s = math_ops.sigmoid(x)
    return [gg * g * s * (1.0 - s), -gg * g, gg * (s - z)]


# (NumPy's passes, not a compiled loop: NumPy's exp and log1p are vectorized, numba's call libm for
# each element, 10 ns a log1p)
defop("SigmoidCrossEntropyWithLogits", _sigmoid_xent_infer,
      lambda xp, x, z: xp.maximum(x, xp.zeros_like(x)) - x * z + xp.log1p(xp.exp(-xp.abs(x))),
      lambda op, g: [_out("SigmoidCrossEntropyWithLogitsGrad", [*op.inputs, g]), -g * op.inputs[0]])
defop("SigmoidCrossEntropyWithLogitsGrad", lambda inputs: _sigmoid_xent_infer(inputs[:2]),
      lambda xp, x, z, g: g * (1.0 / (1.0 + xp.exp(-x)) - z), _sigmoid_xent_grad_grad)


def sigmoid_cross_entropy_with_logits(_sentinel=None, labels=None, logits=None,
                                      name=None) -> Tensor:
    """Elementwise ``-z*log(sigmoid(x)) - (1-z)*log(1-sigmoid(x))``, as TF's stable
    ``max(x, 0) - x*z + log1p(exp(-|x|))``, for logits and labels of one shape; its gradient in
    the logits is ``sigmoid(x) - z``.

    >>> import dflow as tf
    >>> with tf.Graph().as_default():
    ...     loss = tf.nn.sigmoid_cross_entropy_with_logits(labels=[1.0, 0.0], logits=[0.0, 0.0])
    ...     print([round(float(v), 4) for v in tf.Session().run(loss)])
    [0.6931, 0.6931]
    """
    if _sentinel is not None or labels is None or logits is None:
        raise ValueError("call sigmoid_cross_entropy_with_logits with named arguments: "
                         "(labels=..., logits=...)")
    x = convert_to_tensor(logits)
    z = convert_to_tensor(labels, dtype=None if isinstance(labels, Tensor) else x.dtype)
    return _out("SigmoidCrossEntropyWithLogits", [x, z], name=name or "logistic_loss")


def weighted_cross_entropy_with_logits(targets=None, logits=None, pos_weight=None, name=None,
                                       labels=None) -> Tensor:
    """Sigmoid cross-entropy with the positive term weighted by ``pos_weight``:
    ``(1 - z) * x + (1 + (q - 1) * z) * (log(1 + exp(-|x|)) + max(-x, 0))``."""
    targets = labels if targets is None else targets
    if targets is None or logits is None or pos_weight is None:
        raise ValueError("weighted_cross_entropy_with_logits needs targets (or labels), logits "
                         "and pos_weight")
    with get_default_graph().name_scope(name or "logistic_loss"):
        x = convert_to_tensor(logits)
        z = convert_to_tensor(targets, dtype=None if isinstance(targets, Tensor) else x.dtype)
        log_weight = 1.0 + (pos_weight - 1.0) * z
        softplus_neg = math_ops.log1p(exp(-math_ops.abs(x))) + math_ops.maximum(-x, 0.0)
        return (1.0 - z) * x + log_weight * softplus_neg


def l2_normalize(x, axis=None, epsilon=1e-12, name=None, dim=None) -> Tensor:
    """``x / sqrt(max(sum(x ** 2, axis), epsilon))`` (TF 1.x's ``dim=`` too)."""
    axis = dim if axis is None else axis
    with get_default_graph().name_scope(name or "l2_normalize") as scope:
        x = convert_to_tensor(x)
        square_sum = reduce_sum(square(x), math_ops.static_axis(axis), keepdims=True)
        inverse_norm = math_ops.rsqrt(math_ops.maximum(square_sum, epsilon))
        return math_ops.multiply(x, inverse_norm, name=scope)


def zero_fraction(value, name=None) -> Tensor:
    """The fraction of zeros in ``value`` (a float32 scalar), as the CIFAR-10 summaries use it."""
    with get_default_graph().name_scope(name or "zero_fraction") as scope:
        value = convert_to_tensor(value)
        zero = False if value.dtype == dtypes.bool else 0
        return reduce_mean(math_ops.cast(math_ops.equal(value, zero), dtypes.float32), name=scope)


# ---- statistics and evaluation ----------------------------------------------------------------
def moments(x, axes, shift=None, name=None, keep_dims=None, keepdims=None):
    """``(mean, variance)`` of ``x`` over ``axes``.

    >>> mean, variance = tf.nn.moments(x, axes=[0])  # doctest: +SKIP
    """
    axes = [int(a) for a in axes]
    keep_dims = keepdims if keepdims is not None else keep_dims
    with get_default_graph().name_scope(name or "moments") as scope:
        x = convert_to_tensor(x)
        rank = x.shape.ndims
        if rank is not None and sorted(a % rank for a in axes) == list(range(rank - 1)) \
                and batch_norm_ops.channel_form(x, []):
            return batch_norm_ops.moments(x, keep_dims, scope)
        mean = reduce_mean(x, axes, keepdims=True)
        # the variance's gradient through the mean is zero at the mean: TF stops it
        variance = reduce_mean(square(x - stop_gradient(mean)), axes, keepdims=True)
        if not keep_dims:
            mean, variance = squeeze(mean, axes), squeeze(variance, axes)
        return mean, variance


def _in_top_k_infer(inputs, k):
    predictions, targets = inputs
    if predictions.shape is not None and len(predictions.shape) != 2:
        raise ShapeError(f"predictions must be [batch, classes], got shape {fmt(predictions.shape)}")
    if targets.shape is not None and len(targets.shape) != 1:
        raise ShapeError(f"targets must be a vector, got shape {fmt(targets.shape)}")
    batch = None if predictions.shape is None else predictions.shape[0]
    if targets.shape is not None and batch is not None and targets.shape[0] not in (None, batch):
        raise ShapeError(f"predictions shape {fmt(predictions.shape)} and targets shape "
                         f"{fmt(targets.shape)} differ in batch size")
    if batch is None and targets.shape is not None:
        batch = targets.shape[0]
    return [Spec((batch,), dtypes.bool)]


def _in_top_k_kernel(xp, predictions, targets, k):
    """True where fewer than ``k`` classes score strictly higher than the target (TF's ties)."""
    classes = predictions.shape[1]
    onehot = targets[:, None] == xp.arange(classes, dtype=targets.dtype)[None, :]
    target = xp.sum(xp.where(onehot, predictions, xp.zeros_like(predictions)), axis=1, keepdims=True)
    higher = xp.sum(xp.astype(predictions > target, xp.int32), axis=1)
    valid = xp.any(onehot, axis=1) & xp.isfinite(target[:, 0])
    return (higher < k) & valid


defop("InTopK", _in_top_k_infer, _in_top_k_kernel)


def in_top_k(predictions, targets, k, name=None) -> Tensor:
    """Whether each ``targets[i]`` is among the top ``k`` of ``predictions[i]``."""
    return _out("InTopK", [predictions, targets], {"k": int(k)}, name)


def batch_normalization(x, mean, variance, offset, scale, variance_epsilon, name=None) -> Tensor:
    """``(x - mean) / sqrt(variance + variance_epsilon) * scale + offset``; ``offset`` and
    ``scale`` may be None (0 and 1), as in TF."""
    with get_default_graph().name_scope(name or "batchnorm") as scope:
        x, mean, variance = (convert_to_tensor(t) for t in (x, mean, variance))
        offset, scale = (None if t is None else convert_to_tensor(t, dtype=x.dtype) for t in (offset, scale))
        if batch_norm_ops.channel_form(x, [mean, variance, offset, scale]):
            return batch_norm_ops.batch_normalization(x, mean, variance, offset, scale, variance_epsilon,
                                                      scope)
        inverse = math_ops.rsqrt(variance + variance_epsilon)
        if scale is not None:
            inverse = inverse * scale
        shift = -mean * inverse if offset is None else offset - mean * inverse
        return math_ops.add(x * inverse, shift, name=scope)


# ---- top_k -------------------------------------------------------------------------------------
def _top_k_infer(inputs, k, sorted):
    s = inputs[0].shape
    if s is not None and not s:
        raise ShapeError("top_k needs a tensor of rank >= 1, got a scalar")
    if s is not None and s[-1] is not None and s[-1] < k:
        raise ShapeError(f"top_k: k={k} is more than the last dim of {fmt(s)}")
    out = None if s is None else s[:-1] + (k,)
    return [Spec(out, inputs[0].dtype), Spec(out, dtypes.int32)]


def _top_k_kernel(xp, x, k, sorted):
    # a stable descending sort: equal values keep their order (lower index first), as TF's
    order = xp.argsort(x, axis=-1, descending=True, stable=True)[..., :k]
    values = xp.sort(x, axis=-1, descending=True, stable=True)[..., :k]  # (take_along_axis is newer)
    return values, xp.astype(order, xp.int32)


def _top_k_grad(op, g_values, g_indices=None):
    """Each value's gradient goes back to the position it was taken from."""
    if g_values is None:
        return [None]
    from .array_ops import one_hot

    depth = op.inputs[0].shape[-1].value
    if depth is None:
        raise ValueError(f"the gradient of {op.name} needs the last dim of its input at build time")
    picked = one_hot(op.outputs[1], depth, dtype=g_values.dtype)  # [..., k, n]
    return [reduce_sum(picked * expand_dims(g_values, -1), -2)]


defop("TopKV2", _top_k_infer, _top_k_kernel, _top_k_grad, num_outputs=2)


def top_k(input, k=1, sorted=True, name=None):
    """``(values, indices)`` of the ``k`` largest entries along the last axis, largest first."""
    return tuple(_op("TopKV2", [input], {"k": int(k), "sorted": bool(sorted)}, name).outputs)
