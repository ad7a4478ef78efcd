"""Elementwise math, reductions and matmul (TF's ``math_ops``).

Each op is one ``defop`` line or a small block: shape rule, kernel over ``xp``,
gradient building graph. Binary ops broadcast like NumPy.
"""

from __future__ import annotations

import sys

import numpy as np

from .. import dtypes
from ..errors import InvalidArgumentError
from ..graph import Tensor, convert_to_tensor, get_default_graph, register_op_builders
from . import fused, onednn, parallel
from .array_ops import (
    cast,
    concat,
    constant,
    expand_dims,
    is_symbolic,
    no_op,
    range_,
    reshape,
    shape,
    shape_value,
    static_axis,
    sum_to_shape,
)
from .registry import ShapeError, Spec, defop
from .shape_rules import broadcast, fmt, normalize_axis, reduced, same_as_input

__all__ = [
    "size", "cumsum", "sequence_mask", "eye",
    "add", "subtract", "multiply", "scalar_mul", "divide", "truediv", "pow", "maximum", "minimum", "negative",
    "square", "sqrt", "rsqrt", "exp", "log", "abs", "sign", "sigmoid", "tanh", "matmul",
    "reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "argmax", "argmin",
    "cast", "equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "add_n",
    "logical_and", "logical_or", "logical_not", "where", "floor",
    "log1p", "expm1", "reciprocal", "ceil", "round", "sin", "cos", "erf", "erfc", "is_nan", "is_finite",
    "is_inf",
    "floormod", "mod", "floordiv", "squared_difference", "logical_xor", "reduce_any", "reduce_all",
    "reduce_logsumexp", "count_nonzero", "arg_max", "arg_min", "to_float", "to_double",
    "to_int32", "to_int64", "clip_by_value", "clip_by_norm", "global_norm", "clip_by_global_norm",
    "norm", "Print", "print_tensor", "Assert", "assert_equal", "assert_none_equal", "assert_less",
    "assert_less_equal", "assert_greater", "assert_greater_equal", "assert_positive",
    "assert_negative", "assert_non_negative", "assert_non_positive", "check_numerics",
    "verify_tensor_all_finite", "add_check_numerics_ops",
]


def _out(op_type, inputs, attrs=None, name=None) -> Tensor:
    return get_default_graph().create_op(op_type, inputs, attrs, name=name).outputs[0]


def _pair(x, y):
    """Convert operands; a Python number takes the dtype of the tensor beside it, as in TF."""
    if isinstance(x, Tensor) or hasattr(x, "_as_graph_element"):
        x = convert_to_tensor(x)
        return x, convert_to_tensor(y, dtype=None if is_symbolic(y) else x.dtype)
    y = convert_to_tensor(y)
    return convert_to_tensor(x, dtype=y.dtype), y


def _numeric(*specs) -> None:
    """Strings take the string ops, not arithmetic: say so at build time."""
    if any(spec.dtype == dtypes.string for spec in specs):
        raise ShapeError("dflow does not compute on tf.string tensors with arithmetic: use the string ops "
                         "(tf.string_join or +, tf.string_split, tf.string_to_number, tf.strings.*) or "
                         "tf.decode_raw")


def _binary_infer(inputs, **_):
    a, b = inputs
    _numeric(a, b)
    return [Spec(broadcast(a.shape, b.shape), dtypes.promote(a.dtype, b.dtype))]


def _compare_infer(inputs, **_):
    a, b = inputs
    return [Spec(broadcast(a.shape, b.shape), dtypes.bool)]


def _unbroadcast(g, x, other=None):
    """``g``, the gradient of ``x``'s broadcast against ``other``, summed back to ``x``'s shape:
    no op at all where that broadcast cannot change ``x``'s shape (``x @ w + b``'s product, its
    batch unknown until run, against a bias), as Grappler folds TF's BroadcastGradientArgs."""
    if (g.shape.is_fully_defined() and g.shape == x.shape) or (
            other is not None and _broadcast_keeps(x.shape.dims, other.shape.dims)):
        return g
    return sum_to_shape(g, shape(x))


def _broadcast_keeps(dims, other_dims) -> bool:
    """Whether broadcasting a shape of ``dims`` against ``other_dims`` (static dims, None unknown)
    gives ``dims`` again, whatever sizes the unknown ones take at run time.

    >>> _broadcast_keeps((None, 10), (10,)), _broadcast_keeps((None, 10), (None, 10))
    (True, False)
    """
    if dims is None or other_dims is None or len(other_dims) > len(dims):
        return False
    return all(o == 1 or (d is not None and d != 1 and o in (None, d))
               for d, o in zip(reversed(dims), reversed(other_dims)))


def _binary(op_type, kernel, grad):
    defop(op_type, _binary_infer, lambda xp, a, b: kernel(xp, a, b), grad)

    def build(x, y, name=None) -> Tensor:
        return _out(op_type, _pair(x, y), name=name)

    return build


def _both(op, gx, gy):
    x, y = op.inputs
    return [None if gx is None else _unbroadcast(gx, x, y), None if gy is None else _unbroadcast(gy, y, x)]


_add = _binary("Add", lambda xp, a, b: a + b, lambda op, g: _both(op, g, g))


def add(x, y, name=None) -> Tensor:
    """``x + y``; of two string tensors, their concatenation (as TF's ``Add`` of strings)."""
    if dtypes.string in (getattr(x, "dtype", None), getattr(y, "dtype", None)):  # string_ops' op
        return _out("StringJoin", [convert_to_tensor(x, dtype=dtypes.string),
                                   convert_to_tensor(y, dtype=dtypes.string)], {"separator": ""}, name)
    return _add(x, y, name=name)
subtract = _binary("Sub", lambda xp, a, b: a - b, lambda op, g: _both(op, g, -g))
multiply = _binary("Mul", lambda xp, a, b: a * b,
                   lambda op, g: _both(op, g * op.inputs[1], g * op.inputs[0]))


def scalar_mul(scalar, x, name=None) -> Tensor:
    """``scalar * x`` for a scalar (a number or a 0-d tensor): TF's ``tf.scalar_mul``."""
    scalar = convert_to_tensor(scalar, dtype=convert_to_tensor(x).dtype)
    if scalar.shape.ndims != 0:
        raise ValueError(f"scalar_mul takes a scalar as its first argument, got shape {scalar.shape}")
    return multiply(scalar, x, name=name)


divide = _binary("RealDiv", lambda xp, a, b: a / b,
                 lambda op, g: _both(op, g / op.inputs[1],
                                     -g * op.inputs[0] / square(op.inputs[1])))
truediv = divide
maximum = _binary("Maximum", lambda xp, a, b: xp.maximum(a, b),
                  lambda op, g: _both(op, g * cast(op.inputs[0] >= op.inputs[1], g.dtype),
                                      g * cast(op.inputs[0] < op.inputs[1], g.dtype)))
minimum = _binary("Minimum", lambda xp, a, b: xp.minimum(a, b),
                  lambda op, g: _both(op, g * cast(op.inputs[0] <= op.inputs[1], g.dtype),
                                      g * cast(op.inputs[0] > op.inputs[1], g.dtype)))


def _pow_grad(op, g):
    x, y = op.inputs
    z = op.outputs[0]
    safe_log = where(x > 0, log(where(x > 0, x, 1.0)), 0.0)  # d/dy x**y is 0 where x <= 0
    return _both(op, g * y * pow(x, y - 1.0), g * z * safe_log)


pow = _binary("Pow", lambda xp, a, b: xp.pow(a, b), _pow_grad)  # noqa: A001 - TF's name


def _compare(op_type, kernel):
    defop(op_type, _compare_infer, kernel)

    def build(x, y, name=None) -> Tensor:
        return _out(op_type, _pair(x, y), name=name)

    return build


equal = _compare("Equal", lambda xp, a, b: a == b)
not_equal = _compare("NotEqual", lambda xp, a, b: a != b)
less = _compare("Less", lambda xp, a, b: a < b)
less_equal = _compare("LessEqual", lambda xp, a, b: a <= b)
greater = _compare("Greater", lambda xp, a, b: a > b)
greater_equal = _compare("GreaterEqual", lambda xp, a, b: a >= b)
logical_and = _compare("LogicalAnd", lambda xp, a, b: xp.logical_and(a, b))
logical_or = _compare("LogicalOr", lambda xp, a, b: xp.logical_or(a, b))


def _unary(op_type, kernel, grad=None, infer=same_as_input):
    def checked_infer(inputs):
        _numeric(*inputs)
        return infer(inputs)

    defop(op_type, checked_infer, kernel, grad)

    def build(x, name=None) -> Tensor:
        return _out(op_type, [x], name=name)

    return build


def _float_infer(inputs):
    if not inputs[0].dtype.is_floating:
        raise ShapeError(f"needs a floating-point input, got {inputs[0].dtype.name}; use tf.cast")
    return same_as_input(inputs)


negative = _unary("Neg", lambda xp, x: -x, lambda op, g: [-g])
square = _unary("Square", lambda xp, x: x * x, lambda op, g: [g * (2.0 * op.inputs[0])])
sqrt = _unary("Sqrt", lambda xp, x: xp.sqrt(x), lambda op, g: [g * 0.5 / op.outputs[0]], _float_infer)
rsqrt = _unary("Rsqrt", lambda xp, x: 1.0 / xp.sqrt(x),
               lambda op, g: [g * -0.5 * op.outputs[0] / op.inputs[0]], _float_infer)
exp = _unary("Exp", lambda xp, x: xp.exp(x), lambda op, g: [g * op.outputs[0]], _float_infer)
log = _unary("Log", lambda xp, x: xp.log(x), lambda op, g: [g / op.inputs[0]], _float_infer)
sign = _unary("Sign", lambda xp, x: xp.sign(x), lambda op, g: [None])
abs = _unary("Abs", lambda xp, x: xp.abs(x), lambda op, g: [g * sign(op.inputs[0])])  # noqa: A001
sigmoid = _unary("Sigmoid", lambda xp, x: 1.0 / (1.0 + xp.exp(-x)),
                 lambda op, g: [sigmoid_grad(op.outputs[0], g)], _float_infer)
tanh = _unary("Tanh", lambda xp, x: xp.tanh(x), lambda op, g: [tanh_grad(op.outputs[0], g)], _float_infer)


def _activation_grad(op_type: str, formula, compiled, slope_in_y):
    """TF's ``SigmoidGrad`` or ``TanhGrad``: ``formula(y, dy)``, the gradient from the activation's
    output ``y``, as one op, one compiled pass where it takes the arrays (the three NumPy ops it
    was took 29 us on a 100 x 784 array, the pass 8; an LSTM step has five); ``slope_in_y(y)``,
    the formula's derivative in ``y`` per unit of ``dy``, makes its own gradient."""

    def kernel(xp, y, dy):
        if y.shape == dy.shape and fused.compiled_for(xp, y, dy):
            return compiled(y, dy)
        return formula(y, dy)

    defop(op_type, lambda inputs: same_as_input(inputs[1:]), kernel,
          lambda op, g: [g * op.inputs[1] * slope_in_y(op.inputs[0]), build(op.inputs[0], g)])

    def build(y, dy, name=None) -> Tensor:
        return _out(op_type, [y, dy], name=name)

    return build


sigmoid_grad = _activation_grad("SigmoidGrad", lambda y, dy: dy * y * (1.0 - y), fused.sigmoid_grad,
                                lambda y: 1.0 - 2.0 * y)
tanh_grad = _activation_grad("TanhGrad", lambda y, dy: dy * (1.0 - y * y), fused.tanh_grad,
                             lambda y: -2.0 * y)
logical_not = _unary("LogicalNot", lambda xp, x: xp.logical_not(x))
floor = _unary("Floor", lambda xp, x: xp.floor(x), lambda op, g: [None])
ceil = _unary("Ceil", lambda xp, x: xp.ceil(x), lambda op, g: [None])
round = _unary("Round", lambda xp, x: xp.round(x), lambda op, g: [None])  # noqa: A001 - TF's name
log1p = _unary("Log1p", lambda xp, x: xp.log1p(x), lambda op, g: [g / (1.0 + op.inputs[0])], _float_infer)
expm1 = _unary("Expm1", lambda xp, x: xp.expm1(x), lambda op, g: [g * (op.outputs[0] + 1.0)], _float_infer)
reciprocal = _unary("Reciprocal", lambda xp, x: 1.0 / x,
                    lambda op, g: [-g * square(op.outputs[0])], _float_infer)
sin = _unary("Sin", lambda xp, x: xp.sin(x), lambda op, g: [g * cos(op.inputs[0])], _float_infer)
cos = _unary("Cos", lambda xp, x: xp.cos(x), lambda op, g: [-g * sin(op.inputs[0])], _float_infer)

# erfc's Chebyshev fit (Numerical Recipes' erfcc): relative error below 1.2e-7 everywhere, float32's
# precision; the array API has no erf, so it is this, over xp
_ERFC = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398, 1.48851587,
         -0.82215223, 0.17087277)


def _erfc_kernel(xp, x):
    z = xp.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = 0.0
    for c in reversed(_ERFC):
        poly = c + t * poly
    positive = t * xp.exp(-z * z + poly)
    return xp.where(x >= 0, positive, 2.0 - positive)


def _erf_kernel(xp, x):
    # near 0, 1 - erfc(x) would lose erf's relative precision: there, erf's Taylor series (its next
    # term, x^13 / 9360, is below 1.3e-8 of erf at |x| = 0.5)
    z2 = x * x
    series = 1.1283791670955126 * x * (1.0 + z2 * (-1 / 3 + z2 * (1 / 10 + z2 * (-1 / 42 + z2 * (
        1 / 216 + z2 * (-1 / 1320))))))
    return xp.where(xp.abs(x) < 0.5, series, 1.0 - _erfc_kernel(xp, x))


def _erf_grad(sign_of):
    """d erf(x)/dx = 2/sqrt(pi) exp(-x^2); erfc's is its negative."""
    return lambda op, g: [g * (sign_of * 1.1283791670955126) * exp(-square(op.inputs[0]))]


erf = _unary("Erf", _erf_kernel, _erf_grad(1.0), _float_infer)
erfc = _unary("Erfc", _erfc_kernel, _erf_grad(-1.0), _float_infer)


def _bool_infer(inputs):
    _float_infer(inputs)
    return [Spec(inputs[0].shape, dtypes.bool)]


is_nan = _unary("IsNan", lambda xp, x: xp.isnan(x), infer=_bool_infer)
is_finite = _unary("IsFinite", lambda xp, x: xp.isfinite(x), infer=_bool_infer)
is_inf = _unary("IsInf", lambda xp, x: xp.isinf(x), infer=_bool_infer)
logical_xor = _compare("LogicalXor", lambda xp, a, b: xp.logical_xor(a, b))
floordiv = _binary("FloorDiv", lambda xp, a, b: xp.floor_divide(a, b), lambda op, g: [None, None])
floormod = _binary("FloorMod", lambda xp, a, b: xp.remainder(a, b),
                   lambda op, g: _both(op, g, -g * floor(op.inputs[0] / op.inputs[1])))
mod = floormod


def _squared_difference_grad(op, g):
    gx = g * 2.0 * (op.inputs[0] - op.inputs[1])
    return _both(op, gx, -gx)


squared_difference = _binary("SquaredDifference", lambda xp, a, b: (a - b) * (a - b),
                             _squared_difference_grad)


# ---- where / cast / add_n ------------------------------------------------------
def _where_infer(inputs):
    cond, x, y = inputs
    return [Spec(broadcast(broadcast(cond.shape, x.shape), y.shape), dtypes.promote(x.dtype, y.dtype))]


def _where_grad(op, g):
    cond, x, y = op.inputs
    zeros = g * 0.0
    return [None, _unbroadcast(where(cond, g, zeros), x), _unbroadcast(where(cond, zeros, g), y)]


defop("Select", _where_infer, lambda xp, c, x, y: xp.where(c, x, y), _where_grad)


def where(condition, x, y, name=None) -> Tensor:
    """Elementwise ``x if condition else y`` (both branches given, broadcasting)."""
    x, y = _pair(x, y)
    return _out("Select", [condition, x, y], name=name)


def to_float(x, name="ToFloat") -> Tensor:
    """``tf.cast(x, tf.float32)`` (TF 1.x spelling)."""
    return cast(x, dtypes.float32, name=name)


def to_double(x, name="ToDouble") -> Tensor:
    return cast(x, dtypes.float64, name=name)


def to_int32(x, name="ToInt32") -> Tensor:
    return cast(x, dtypes.int32, name=name)


def to_int64(x, name="ToInt64") -> Tensor:
    return cast(x, dtypes.int64, name=name)


def _add_n_infer(inputs):
    out = inputs[0].shape
    for other in inputs[1:]:
        if out is not None and other.shape is not None and len(out) != len(other.shape):
            raise ShapeError(f"add_n needs equal shapes, got {fmt(out)} and {fmt(other.shape)}")
        out = broadcast(out, other.shape)
    return [Spec(out, inputs[0].dtype)]


def _add_n_kernel(xp, *xs):
    total = xs[0] + xs[1]  # a new array, so the in-place sums below touch no input
    for x in xs[2:]:
        total += x
    return total


defop("AddN", _add_n_infer, lambda xp, *xs: xs[0] if len(xs) == 1 else _add_n_kernel(xp, *xs),
      lambda op, g: [g] * len(op.inputs))
# AddN(g, Mul(w, s)), an L2 weight decay's gradient added to the loss's, fused when a stage is
# lowered where no update takes the sum in its pass (runtime/fusion.py): on a worker whose
# variables, and so their updates, are on a parameter server. Never in users' graphs.
defop("_AddScaled", same_as_input, lambda xp, g, a, b, out=None: fused.add_scaled(xp, g, a, b, out),
      in_place=0)


def add_n(inputs, name=None) -> Tensor:
    """The sum of a list of tensors of one shape."""
    return _out("AddN", list(inputs), name=name)


# ---- matmul ---------------------------------------------------------------------
def _matmul_infer(inputs, transpose_a, transpose_b):
    a, b = inputs
    if a.shape is None or b.shape is None:
        return [Spec(None, dtypes.promote(a.dtype, b.dtype))]
    if len(a.shape) < 2 or len(b.shape) < 2:
        raise ShapeError(f"matmul needs rank >= 2, got {fmt(a.shape)} and {fmt(b.shape)}")
    m, ka = (a.shape[-1], a.shape[-2]) if transpose_a else a.shape[-2:]
    kb, n = (b.shape[-1], b.shape[-2]) if transpose_b else b.shape[-2:]
    if ka is not None and kb is not None and ka != kb:
        raise ShapeError(
            f"shapes {fmt(a.shape)} and {fmt(b.shape)} are incompatible for matmul "
            f"(transpose_a={transpose_a}, transpose_b={transpose_b}): inner dims {ka} != {kb}"
        )
    batch = broadcast(a.shape[:-2], b.shape[:-2])
    return [Spec(batch + (m, n), dtypes.promote(a.dtype, b.dtype))]


def _oriented(xp, a, b, transpose_a, transpose_b):
    if type(a) is type(b) is np.ndarray and a.ndim == b.ndim == 2:  # (a view: array_api_compat's 0.6 us)
        return a.T if transpose_a else a, b.T if transpose_b else b
    return xp.matrix_transpose(a) if transpose_a else a, xp.matrix_transpose(b) if transpose_b else b


def _matmul_kernel(xp, a, b, transpose_a, transpose_b):
    a, b = _oriented(xp, a, b, transpose_a, transpose_b)
    if a.ndim == b.ndim == 2:
        if a.shape[1] == b.shape[0] == 1 and fused.compiled_for(xp, a, b):
            return fused.outer(a, b)
        product = _onednn_matmul(xp, a, b)
        if product is not None:
            return product
    return parallel.matmul(xp, a, b)


def _onednn_matmul(xp, a, b, bias=None, activation=None):
    """oneDNN's ``a @ b`` of 2-D arrays, with ``bias`` and ``activation`` as :func:`onednn.matmul`
    takes them; None where it does not."""
    # (the size first: a step's small products skip oneDNN's checks, 4 us a product)
    if a.shape[0] * a.shape[1] * b.shape[1] < onednn.MATMUL_FROM:
        return None
    if bias is not None and not (bias.ndim == 1 and bias.shape[0] == b.shape[1]):
        return None
    if not onednn.takes(xp, a, b, *(() if bias is None else (bias,))):
        return None
    return onednn.matmul(a, b, bias, activation)


def fused_matmul(xp, a, b, bias, activation, transpose_a=False, transpose_b=False):
    """oneDNN's product of 2-D ``a`` and ``b`` (transposed as MatMul's attributes say) plus
    ``bias`` (one per column, or None), then ``activation`` (``"Relu"``, ``"Sigmoid"``,
    ``"Tanh"`` or None) in the same pass: TF's ``_FusedMatMul``. None where oneDNN does not take
    them; the caller composes the ops then."""
    if a.ndim != 2 or b.ndim != 2 or a.size * b.shape[0 if transpose_b else 1] < onednn.MATMUL_FROM:
        return None  # (a small product's fused op composes the ops: not oriented twice)
    return _onednn_matmul(xp, *_oriented(xp, a, b, transpose_a, transpose_b), bias, activation)


def _matmul_grad(op, g):
    a, b = op.inputs
    ta, tb = op.attrs["transpose_a"], op.attrs["transpose_b"]
    if not ta and not tb:
        return [matmul(g, b, transpose_b=True), matmul(a, g, transpose_a=True)]
    if not ta and tb:
        return [matmul(g, b), matmul(g, a, transpose_a=True)]
    if ta and not tb:
        return [matmul(b, g, transpose_b=True), matmul(a, g)]
    return [matmul(b, g, transpose_a=True, transpose_b=True),
            matmul(g, a, transpose_a=True, transpose_b=True)]


defop("MatMul", _matmul_infer, _matmul_kernel, _matmul_grad)


def matmul(a, b, transpose_a=False, transpose_b=False, name=None) -> Tensor:
    """Matrix product ``a @ b`` (batched over leading dims), optionally transposing either."""
    return _out("MatMul", _pair(a, b),
                {"transpose_a": bool(transpose_a), "transpose_b": bool(transpose_b)}, name)


# ---- reductions ------------------------------------------------------------------
def _reduce_infer(inputs, axis, keepdims):
    _numeric(*inputs)
    return [Spec(reduced(inputs[0].shape, axis, keepdims), inputs[0].dtype)]


def _bool_reduce_infer(inputs, axis, keepdims):
    if inputs[0].dtype != dtypes.bool:
        raise ShapeError(f"needs a bool input, got {inputs[0].dtype.name}; compare first (tf.greater...)")
    return _reduce_infer(inputs, axis, keepdims)


def _reduce_args(axis, keepdims, reduction_indices, keep_dims):
    """TF 1.x's deprecated spellings: ``reduction_indices`` for ``axis``, ``keep_dims``."""
    if axis is not None and reduction_indices is not None:
        raise ValueError("give axis or reduction_indices (its TF 1.x name), not both")
    axis = reduction_indices if axis is None else axis
    return static_axis(axis), bool(keepdims if keepdims is not None else keep_dims)


def _reduction(op_type, xp_name, grad, infer=_reduce_infer):
    def kernel(xp, x, axis, keepdims):
        axes = normalize_axis(axis, x.ndim)
        if xp_name in ("sum", "mean") and _per_channel(x, axes) and xp.isdtype(x.dtype, "real floating"):
            # per channel, over every other axis (batch norm's moments): one BLAS product over the
            # cores, where NumPy's sum adds the rows one after another on one
            total = parallel.sum_rows(xp, x)
            if xp_name == "mean":
                total = total / (x.size // x.shape[-1])
            return xp.reshape(total, (1,) * (x.ndim - 1) + (x.shape[-1],)) if keepdims else total
        return getattr(xp, xp_name)(x, axis=axes, keepdims=keepdims)

    defop(op_type, infer, kernel, grad)

    def build(input_tensor, axis=None, keepdims=None, name=None, reduction_indices=None,
              keep_dims=None) -> Tensor:
        axis, keep = _reduce_args(axis, keepdims, reduction_indices, keep_dims)
        return _out(op_type, [input_tensor], {"axis": axis, "keepdims": keep}, name)

    build.__name__ = build.__qualname__ = f"reduce_{xp_name}"
    return build


def _per_channel(x, axes) -> bool:
    return x.ndim >= 2 and tuple(sorted(axes)) == tuple(range(x.ndim - 1)) and x.size > 0


def _unreduce(op, g, mean=False):
    """``g`` broadcast back over the axes the reduction removed (and divided by their size)."""
    attrs = {"axis": op.attrs["axis"], "keepdims": op.attrs["keepdims"], "mean": mean}
    return _out("ReductionGrad", [g, shape(op.inputs[0])], attrs)


def _unreduce_infer(inputs, axis, keepdims, mean):
    target = shape_value(inputs[1])
    return [Spec(None if target is None else tuple(target), inputs[0].dtype)]


def _unreduce_kernel(xp, g, target, axis, keepdims, mean):
    target = tuple(int(d) for d in target)
    axes = normalize_axis(axis, len(target))
    if not keepdims:
        g = xp.reshape(g, tuple(1 if i in axes else d for i, d in enumerate(target)))
    if mean:
        count = 1
        for ax in axes:
            count *= target[ax]
        g = g / count
    return xp.broadcast_to(g, target)


def _unreduce_grad(op, g):
    reduce = reduce_mean if op.attrs["mean"] else reduce_sum
    return [reduce(g, op.attrs["axis"], keepdims=op.attrs["keepdims"]), None]


defop("ReductionGrad", _unreduce_infer, _unreduce_kernel, _unreduce_grad)


def _max_grad(op, g):
    x = op.inputs[0]
    at_max = cast(equal(x, _unreduce(op, op.outputs[0])), g.dtype)
    ties = _unreduce(op, reduce_sum(at_max, op.attrs["axis"], keepdims=op.attrs["keepdims"]))
    return [_unreduce(op, g) * at_max / ties]


reduce_sum = _reduction("Sum", "sum", lambda op, g: [_unreduce(op, g)])
reduce_mean = _reduction("Mean", "mean", lambda op, g: [_unreduce(op, g, mean=True)])
reduce_max = _reduction("Max", "max", _max_grad)
reduce_min = _reduction("Min", "min", _max_grad)
reduce_prod = _reduction("Prod", "prod", lambda op, g: [_out("ProdGrad", [op.inputs[0], g], dict(op.attrs))])


def _prod_grad_kernel(xp, x, g, axis, keepdims):
    """``g`` times d prod/dx: each element's group's product of the others, exact where the group
    holds zeros (one zero: its place gets the others' product, the rest 0; two: all 0), as TF's."""
    axes = normalize_axis(axis, x.ndim)
    if not keepdims:
        g = xp.reshape(g, tuple(1 if i in axes else d for i, d in enumerate(x.shape)))
    zero = x == 0
    zeros = xp.sum(xp.astype(zero, xp.int64), axis=axes, keepdims=True)
    nonzero = xp.where(zero, xp.ones_like(x), x)
    others = xp.prod(nonzero, axis=axes, keepdims=True)
    partial = xp.where(zeros == 0, others / nonzero, xp.where(zero & (zeros == 1), others, xp.zeros_like(x)))
    return partial * g


defop("ProdGrad", same_as_input, _prod_grad_kernel)
reduce_any = _reduction("Any", "any", None, _bool_reduce_infer)
reduce_all = _reduction("All", "all", None, _bool_reduce_infer)


def size(input, name=None, out_type=dtypes.int32):
    """The number of elements of ``input``, as a scalar of ``out_type``."""
    return reduce_prod(shape(input, out_type=out_type), name=name)


def reduce_logsumexp(input_tensor, axis=None, keepdims=None, name=None, reduction_indices=None,
                     keep_dims=None) -> Tensor:
    """``log(sum(exp(x), axis))``, computed without overflow (the max is taken out first)."""
    from .array_ops import stop_gradient, zeros_like

    axis, keep = _reduce_args(axis, keepdims, reduction_indices, keep_dims)
    with get_default_graph().name_scope(name or "ReduceLogSumExp") as scope:
        raw_max = reduce_max(input_tensor, axis, keepdims=True)
        shift = stop_gradient(where(is_finite(raw_max), raw_max, zeros_like(raw_max)))
        total = log(reduce_sum(exp(input_tensor - shift), axis, keepdims=True)) + shift
        return total if keep else _squeeze_axes(total, axis, scope)


def _squeeze_axes(x, axis, name):
    from .array_ops import reshape

    kept = reduced(x.shape.dims, axis, False)
    if kept is not None and None not in kept:
        return reshape(x, list(kept), name=name)
    return reduce_sum(x, axis, name=name)  # (the reduced axes have size 1: a sum drops them)


def count_nonzero(input_tensor, axis=None, keepdims=None, dtype=dtypes.int64, name=None,
                  reduction_indices=None, keep_dims=None) -> Tensor:
    """The number of non-zero entries (over ``axis``)."""
    axis, keep = _reduce_args(axis, keepdims, reduction_indices, keep_dims)
    with get_default_graph().name_scope(name or "count_nonzero"):
        x = convert_to_tensor(input_tensor)
        nonzero = not_equal(x, False if x.dtype == dtypes.bool else 0)
        return reduce_sum(cast(nonzero, dtypes.as_dtype(dtype)), axis, keepdims=keep)

def _arg_infer(inputs, axis, output_type):
    return [Spec(reduced(inputs[0].shape, axis, False), output_type)]


def _arg(op_type, xp_name):
    defop(op_type, _arg_infer,
          lambda xp, x, axis, output_type: xp.astype(getattr(xp, xp_name)(x, axis=axis),
                                                     output_type.of(xp)))

    def build(input, axis=None, name=None, dimension=None, output_type=dtypes.int64) -> Tensor:
        axis = dimension if axis is None else axis
        axis = static_axis(axis)
        attrs = {"axis": int(axis[0]) if axis else 0, "output_type": dtypes.as_dtype(output_type)}
        return _out(op_type, [input], attrs, name)

    build.__name__ = build.__qualname__ = xp_name
    return build


argmax = _arg("ArgMax", "argmax")
argmin = _arg("ArgMin", "argmin")


def arg_max(input, dimension, name=None, output_type=dtypes.int64) -> Tensor:
    """TF 1.x's older spelling of :func:`argmax`."""
    return argmax(input, dimension, name=name, output_type=output_type)


def arg_min(input, dimension, name=None, output_type=dtypes.int64) -> Tensor:
    """TF 1.x's older spelling of :func:`argmin`."""
    return argmin(input, dimension, name=name, output_type=output_type)


# ---- clipping and norms --------------------------------------------------------------
def clip_by_value(t, clip_value_min, clip_value_max, name=None) -> Tensor:
    """``t`` with values below ``clip_value_min`` / above ``clip_value_max`` set to them; the
    gradient flows where ``t`` is inside the range."""
    with get_default_graph().name_scope(name or "clip_by_value") as scope:
        return minimum(maximum(t, clip_value_min), clip_value_max, name=scope)


def norm(tensor, ord="euclidean", axis=None, keepdims=None, name=None, keep_dims=None) -> Tensor:
    """Vector norms over ``axis`` (``'euclidean'``/``'fro'``/2, 1, ``np.inf``); the Frobenius
    norm over a pair of axes."""
    axis = static_axis(axis)
    keep = bool(keepdims if keepdims is not None else keep_dims)
    with get_default_graph().name_scope(name or "norm") as scope:
        if ord in ("euclidean", "fro", 2, 2.0) and (ord != 2 or axis is None or len(axis) == 1):
            return sqrt(reduce_sum(square(tensor), axis, keepdims=keep), name=scope)
        if ord in (1, 1.0) and (axis is None or len(axis) == 1):
            return reduce_sum(abs(tensor), axis, keepdims=keep, name=scope)
        if ord == float("inf") and (axis is None or len(axis) == 1):
            return reduce_max(abs(tensor), axis, keepdims=keep, name=scope)
    raise NotImplementedError(f"tf.norm(ord={ord!r}, axis={axis}): dflow supports the 'euclidean'/"
                              "'fro', 1 and inf vector norms and the Frobenius matrix norm")


def _l2_norm(t, axes, keepdims):
    """TF's safe l2 norm: 0 (with a 0 gradient, not NaN) for an all-zero ``t``."""
    l2sum = reduce_sum(square(t), axes, keepdims=keepdims)
    positive = l2sum > 0.0
    safe = where(positive, l2sum, l2sum * 0.0 + 1.0)
    return where(positive, sqrt(safe), l2sum)


def clip_by_norm(t, clip_norm, axes=None, name=None) -> Tensor:
    """``t * clip_norm / max(l2norm(t, axes), clip_norm)``: rescaled so its L2 norm is at most
    ``clip_norm``."""
    with get_default_graph().name_scope(name or "clip_by_norm") as scope:
        t = convert_to_tensor(t)
        clip = convert_to_tensor(clip_norm, dtype=None if is_symbolic(clip_norm) else t.dtype)
        l2norm = _l2_norm(t, static_axis(axes), True)
        return divide(t * clip, maximum(l2norm, clip), name=scope)


def scattered_rows(grad):
    """``(rows, indices)`` when ``grad`` is a scatter-add of rows into a dense tensor (a gather's
    gradient, a sum of them, either times a scalar: a clipped one), else None: an optimizer may
    then update only those rows, and a norm read the rows, as TF treats an ``IndexedSlices``."""
    if not isinstance(grad, Tensor):
        return None
    if grad.op.type == "Mul":  # (clip_by_global_norm's scale)
        for part, scale in (grad.op.inputs, grad.op.inputs[::-1]):
            inner = scattered_rows(part) if scale.shape.ndims == 0 else None
            if inner is not None:
                return multiply(inner[0], scale), inner[1]
        return None
    parts = grad.op.inputs if grad.op.type == "AddN" else [grad]
    if not all(isinstance(p, Tensor) and p.op.type == "UnsortedSegmentSum" for p in parts):
        return None
    if len(parts) == 1:
        data, ids, _ = parts[0].op.inputs
        return data, ids
    row_shape = concat([[-1], shape(grad)[1:]], 0)
    rows = concat([reshape(p.op.inputs[0], row_shape) for p in parts], 0)
    return rows, concat([reshape(p.op.inputs[1], [-1]) for p in parts], 0)


def _rows_or_whole(t):
    rows = scattered_rows(t)
    return t if rows is None else rows[0]


def global_norm(t_list, name=None) -> Tensor:
    """``sqrt(sum of the squared L2 norms of every tensor in t_list)``; None entries are skipped. A
    lookup's gradient counts its rows, each looked-up row once per lookup, as TF counts an
    ``IndexedSlices``'s values (and no dense table is made for it)."""
    tensors = [convert_to_tensor(t) for t in t_list if t is not None]
    if not tensors:
        raise ValueError("global_norm needs at least one tensor")
    with get_default_graph().name_scope(name or "global_norm") as scope:
        squares = [reduce_sum(square(_rows_or_whole(t))) for t in tensors]
        return sqrt(add_n(squares), name=scope)


def clip_by_global_norm(t_list, clip_norm, use_norm=None, name=None):
    """``(t_list rescaled by clip_norm / max(global_norm, clip_norm), global_norm)``, as RNN
    scripts clip their gradients; None entries stay None.

    >>> import dflow as tf
    >>> with tf.Graph().as_default():
    ...     clipped, norm = tf.clip_by_global_norm([tf.constant([3.0]), tf.constant([4.0])], 1.0)
    ...     (a, b), norm = tf.Session().run([clipped, norm])
    >>> a.tolist(), b.tolist(), float(norm)
    ([0.6000000238418579], [0.800000011920929], 5.0)
    """
    if isinstance(t_list, (Tensor, str)) or not hasattr(t_list, "__iter__"):
        raise TypeError("clip_by_global_norm takes a list of tensors")
    t_list = list(t_list)
    with get_default_graph().name_scope(name or "clip_by_global_norm"):
        norm_ = global_norm(t_list) if use_norm is None else convert_to_tensor(use_norm)
        clip = convert_to_tensor(clip_norm, dtype=None if is_symbolic(clip_norm) else norm_.dtype)
        # min(1/norm, 1/clip): an infinite norm gives NaNs, as in TF, rather than a silent 0
        scale = clip * minimum(reciprocal(norm_), reciprocal(clip))
        clipped = [None if t is None else multiply(t, cast(scale, convert_to_tensor(t).dtype))
                   for t in t_list]
    return clipped, norm_


# ---- Print ------------------------------------------------------------------------------
def _print_kernel(state, xp, value, *data, message, first_n, summarize, key):
    counter = state.resource(f"Print:{key}", lambda: [0])
    counter[0] += 1
    if first_n is None or first_n < 0 or counter[0] <= first_n:
        parts = "".join(f"[{_summary(xp, d, summarize)}]" for d in data)
        print(f"{message}{parts}", file=sys.stderr, flush=True)
    return value


def _summary(xp, array, summarize):
    """The first ``summarize`` entries, space-separated, as TF's Print shows them."""
    flat = xp.reshape(array, (-1,))
    count = flat.shape[0]
    shown = [_host_scalar(flat[i]) for i in range(min(summarize, count))]
    return " ".join(str(v) for v in shown) + ("..." if count > summarize else "")


def _host_scalar(value):
    if hasattr(value, "item"):  # NumPy, CuPy (bytes stay bytes, decoded for printing)
        value = value.item()
        return value.decode(errors="replace") if isinstance(value, bytes) else value
    kind = str(value.dtype)  # array_api_strict
    return bool(value) if kind == "bool" else int(value) if "int" in kind else float(value)


defop("Print", lambda inputs, **_: [inputs[0]._replace(value=None)], _print_kernel,
      lambda op, g: [g] + [None] * (len(op.inputs) - 1), stateful=True, gpu=False)


def Print(input_, data, message=None, first_n=None, summarize=None, name=None) -> Tensor:  # noqa: N802
    """``input_`` unchanged; running it prints ``message`` and the first ``summarize`` (3)
    entries of each tensor in ``data`` to stderr (the first ``first_n`` times, if given)."""
    graph = get_default_graph()
    key = graph.unique_name(name or "Print", mark_as_used=False)
    attrs = {"message": message or "", "first_n": first_n,
             "summarize": 3 if summarize is None else int(summarize), "key": key}
    return _out("Print", [input_, *list(data or [])], attrs, name)


print_tensor = Print


# ---- assertions ------------------------------------------------------------------------------
def _assert_kernel(xp, condition, *data, message, summarize):
    if not bool(xp.all(condition)):
        shown = " ".join(f"[{_summary(xp, d, summarize)}]" for d in data)
        raise InvalidArgumentError(" ".join(p for p in ("assertion failed:", message, shown) if p))
    return ()


defop("Assert", lambda inputs, **_: [], _assert_kernel, num_outputs=0, gpu=False)


def Assert(condition, data, summarize=None, name=None):  # noqa: N802 - TF's name
    """An op that fails the step (``InvalidArgumentError``, showing ``data``) when ``condition``
    is false somewhere; run it, or put it in ``tf.control_dependencies``."""
    attrs = {"message": "", "summarize": 3 if summarize is None else int(summarize)}
    return get_default_graph().create_op("Assert", [condition, *list(data or [])], attrs,
                                         name=name or "Assert")


def _assert_compare(condition_text, compare, default_y=None):
    def build(x, y=None, data=None, summarize=None, message=None, name=None):
        x, y = _pair(convert_to_tensor(x), default_y if y is None else y)
        attrs = {"message": f"{message or ''} Condition {condition_text} did not hold".strip(),
                 "summarize": 3 if summarize is None else int(summarize)}
        shown = ([x] if default_y is not None else [x, y]) if data is None else list(data)
        return get_default_graph().create_op("Assert", [compare(x, y), *shown], attrs,
                                             name=name or "assert")

    return build


def _assert_sign(condition_text, compare):
    check = _assert_compare(condition_text, compare, 0)

    def build(x, data=None, summarize=None, message=None, name=None):
        return check(x, None, data, summarize, message, name)

    return build


assert_equal = _assert_compare("x == y", equal)
assert_none_equal = _assert_compare("x != y", not_equal)
assert_less = _assert_compare("x < y", less)
assert_less_equal = _assert_compare("x <= y", less_equal)
assert_greater = _assert_compare("x > y", greater)
assert_greater_equal = _assert_compare("x >= y", greater_equal)
assert_positive = _assert_sign("x > 0", greater)
assert_negative = _assert_sign("x < 0", less)
assert_non_negative = _assert_sign("x >= 0", greater_equal)
assert_non_positive = _assert_sign("x <= 0", less_equal)

# ---- numerics checks -------------------------------------------------------------------------
def _check_numerics_kernel(xp, x, message):
    nan, inf = bool(xp.any(xp.isnan(x))), bool(xp.any(xp.isinf(x)))
    if nan or inf:  # TF's words, which scripts' logs and tests look for
        found = "Inf and NaN" if nan and inf else "NaN" if nan else "Inf"
        raise InvalidArgumentError(f"{message} : Tensor had {found} values")
    return x


defop("CheckNumerics", same_as_input, _check_numerics_kernel,
      lambda op, g: [check_numerics(g, "Not a number (NaN) or infinity (Inf) values detected in gradient. "
                                       + op.attrs["message"])])


def check_numerics(tensor, message, name=None) -> Tensor:
    """``tensor`` unchanged, where it holds no NaN and no infinity; else the step fails with
    ``InvalidArgumentError`` ("``message`` : Tensor had NaN values"). Its gradient checks the
    gradient the same way.

    >>> import dflow as tf
    >>> with tf.Graph().as_default():
    ...     x = tf.placeholder(tf.float32, [2])
    ...     checked = tf.check_numerics(x * 2.0, "x doubled")
    ...     with tf.Session() as sess:
    ...         sess.run(checked, {x: [1.0, float("inf")]})
    Traceback (most recent call last):
    dflow.errors.InvalidArgumentError: x doubled : Tensor had Inf values
    """
    tensor = convert_to_tensor(tensor)
    if not tensor.dtype.is_floating:
        raise TypeError(f"check_numerics checks floating-point tensors; {tensor.name} is "
                        f"{tensor.dtype.name}, which holds no NaN or infinity")
    return _out("CheckNumerics", [tensor], {"message": str(message)}, name)


def verify_tensor_all_finite(t=None, msg=None, name=None, x=None, message=None) -> Tensor:
    """TF 1.x's name for :func:`check_numerics` (``x`` and ``message`` are its later spellings)."""
    tensor, text = (t if t is not None else x), (msg if msg is not None else message)
    if tensor is None or text is None:
        raise TypeError("verify_tensor_all_finite needs the tensor (t) and the message (msg)")
    return check_numerics(tensor, text, name=name or "VerifyFinite")


def add_check_numerics_ops():
    """One op that checks every floating-point tensor of the default graph (each a
    :func:`check_numerics` named by its tensor, ``"op:0"``): run it beside the training step,
    ``sess.run([train_op, check_op])``, to find the first tensor that holds a NaN or an
    infinity. As in TF, every such tensor is computed, so the feeds must reach them all."""
    graph = get_default_graph()
    checks = [check_numerics(output, f"{op.name}:{index}")
              for op in list(graph.get_operations()) if op.type != "CheckNumerics"
              for index, output in enumerate(op.outputs) if output.dtype.is_floating]
    with graph.control_dependencies([check.op for check in checks]):
        return no_op(name="CheckNumericsGroup")


# what Python's operators on tensors and variables build (graph.py cannot import this module)
register_op_builders(add=add, subtract=subtract, multiply=multiply, divide=divide, matmul=matmul, pow=pow,
                     floordiv=floordiv, floormod=floormod, logical_and=logical_and, logical_or=logical_or,
                     logical_xor=logical_xor, logical_not=logical_not, negative=negative, abs=abs,
                     less=less, less_equal=less_equal, greater=greater, greater_equal=greater_equal)


# ---- cumsum ----------------------------------------------------------------------------------------
def _cumsum_kernel(xp, x, axis, exclusive, reverse):
    if reverse:
        x = xp.flip(x, axis=axis)
    total = xp.cumulative_sum(x, axis=axis) if hasattr(xp, "cumulative_sum") else xp.cumsum(x, axis=axis)
    if exclusive:  # each sum without its own element: the running sum before it
        total = total - x
    return xp.flip(total, axis=axis) if reverse else total


def _cumsum_grad(op, g):
    attrs = op.attrs
    return [_out("Cumsum", [g], {**attrs, "reverse": not attrs["reverse"]})]


def _cumsum_infer(inputs, axis, exclusive, reverse):
    (x,) = inputs
    if x.shape is not None:
        normalize_axis(axis, len(x.shape))
    return [Spec(x.shape, x.dtype)]


defop("Cumsum", _cumsum_infer, _cumsum_kernel, _cumsum_grad)


def cumsum(x, axis=0, exclusive: bool = False, reverse: bool = False, name=None) -> Tensor:
    """Running sums along ``axis``: ``tf.cumsum([a, b, c]) = [a, a + b, a + b + c]``;
    ``exclusive`` leaves each element out of its own sum, ``reverse`` sums from the end."""
    x = convert_to_tensor(x)
    axis = int(static_axis(axis, "cumsum's axis")[0])
    if x.shape.ndims is not None and axis < 0:
        axis += x.shape.ndims
    return _out("Cumsum", [x], {"axis": axis, "exclusive": bool(exclusive), "reverse": bool(reverse)}, name)


def sequence_mask(lengths, maxlen=None, dtype=dtypes.bool, name=None) -> Tensor:
    """``mask[..., j] = j < lengths[...]`` over ``maxlen`` positions (the longest length where
    not given): ``tf.sequence_mask([1, 3], 4)`` is ``[[T, F, F, F], [T, T, T, F]]``."""
    graph = get_default_graph()
    with graph.name_scope(name or "SequenceMask"):
        lengths = convert_to_tensor(lengths)
        if not lengths.dtype.is_integer:
            raise TypeError(f"sequence_mask's lengths must be integers, got {lengths.dtype.name}")
        limit = reduce_max(lengths) if maxlen is None else convert_to_tensor(maxlen, dtype=lengths.dtype)
        mask = less(range_(0, limit, 1, dtype=lengths.dtype), expand_dims(lengths, -1))
        return mask if dtypes.as_dtype(dtype) == dtypes.bool else cast(mask, dtype)


def eye(num_rows: int, num_columns: int | None = None, batch_shape=None, dtype=dtypes.float32,
        name=None) -> Tensor:
    """The identity matrix ``[num_rows, num_columns]`` (square by default), repeated over
    ``batch_shape``: ``tf.eye(3)``."""
    columns = num_rows if num_columns is None else num_columns
    if is_symbolic(num_rows) or is_symbolic(columns):
        raise ValueError("dflow needs eye's num_rows and num_columns when the graph is built (ints)")
    matrix = np.eye(int(num_rows), int(columns), dtype=dtypes.as_dtype(dtype).as_numpy_dtype)
    if batch_shape is not None:
        matrix = np.broadcast_to(matrix, [*batch_shape, *matrix.shape]).copy()
    return constant(matrix, dtype=dtype, name=name or "eye")
