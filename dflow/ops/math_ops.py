"""Elementwise math, reductions and matmul (TF's ``math_ops``).

Each op is one ``defop`` line or a small block: shape rule, kernel over ``xp``,
gradient building graph. Binary ops broadcast like NumPy.
"""

from __future__ import annotations

from .. import dtypes
from ..graph import Tensor, convert_to_tensor, get_default_graph
from .array_ops import shape, shape_value
from .registry import ShapeError, Spec, defop
from .shape_rules import broadcast, fmt, normalize_axis, reduced, same_as_input

__all__ = [
    "add", "subtract", "multiply", "divide", "truediv", "pow", "maximum", "minimum", "negative",
    "square", "sqrt", "rsqrt", "exp", "log", "abs", "sign", "sigmoid", "tanh", "matmul",
    "reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "argmax", "argmin",
    "cast", "equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "add_n",
    "sum_to_shape", "logical_and", "logical_or", "logical_not", "where", "floor",
]


def _out(op_type, inputs, attrs=None, name=None) -> Tensor:
    return get_default_graph().create_op(op_type, inputs, attrs, name=name).outputs[0]


def _pair(x, y):
    """Convert operands; a Python number takes the dtype of the tensor beside it, as in TF."""
    if isinstance(x, Tensor) or hasattr(x, "_as_graph_element"):
        x = convert_to_tensor(x)
        return x, convert_to_tensor(y, dtype=None if _is_symbolic(y) else x.dtype)
    y = convert_to_tensor(y)
    return convert_to_tensor(x, dtype=y.dtype), y


def _is_symbolic(v) -> bool:
    return isinstance(v, Tensor) or hasattr(v, "_as_graph_element")


def _binary_infer(inputs, **_):
    a, b = inputs
    return [Spec(broadcast(a.shape, b.shape), dtypes.promote(a.dtype, b.dtype))]


def _compare_infer(inputs, **_):
    a, b = inputs
    return [Spec(broadcast(a.shape, b.shape), dtypes.bool)]


def sum_to_shape(g, target_shape) -> Tensor:
    """Sum ``g`` over the axes that broadcasting added, giving ``target_shape``."""
    return _out("SumToShape", [g, target_shape])


def _unbroadcast(g, x):
    if g.shape.is_fully_defined() and g.shape == x.shape:
        return g  # the common case (no broadcasting) costs no op at all
    return sum_to_shape(g, shape(x))


def _sum_to_shape_kernel(xp, g, target):
    target = tuple(int(d) for d in target)
    if g.shape == target:
        return g
    lead = g.ndim - len(target)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, d in enumerate(target) if d == 1 and g.shape[lead + i] != 1
    )
    return xp.reshape(xp.sum(g, axis=axes), target)


def _sum_to_shape_infer(inputs):
    target = shape_value(inputs[1])
    return [Spec(None if target is None else tuple(target), inputs[0].dtype)]


def _sum_to_shape_grad(op, g):
    from .array_ops import broadcast_to

    return [broadcast_to(g, shape(op.inputs[0])), None]


defop("SumToShape", _sum_to_shape_infer, _sum_to_shape_kernel, _sum_to_shape_grad)


def _binary(op_type, kernel, grad):
    defop(op_type, _binary_infer, lambda xp, a, b: kernel(xp, a, b), grad)

    def build(x, y, name=None) -> Tensor:
        return _out(op_type, _pair(x, y), name=name)

    return build


def _both(op, gx, gy):
    x, y = op.inputs
    return [None if gx is None else _unbroadcast(gx, x), None if gy is None else _unbroadcast(gy, y)]


add = _binary("Add", lambda xp, a, b: a + b, lambda op, g: _both(op, g, g))
subtract = _binary("Sub", lambda xp, a, b: a - b, lambda op, g: _both(op, g, -g))
multiply = _binary("Mul", lambda xp, a, b: a * b,
                   lambda op, g: _both(op, g * op.inputs[1], g * op.inputs[0]))
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
    defop(op_type, infer, kernel, grad)

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
                 lambda op, g: [g * op.outputs[0] * (1.0 - op.outputs[0])], _float_infer)
tanh = _unary("Tanh", lambda xp, x: xp.tanh(x),
              lambda op, g: [g * (1.0 - square(op.outputs[0]))], _float_infer)
logical_not = _unary("LogicalNot", lambda xp, x: xp.logical_not(x))
floor = _unary("Floor", lambda xp, x: xp.floor(x), lambda op, g: [None])


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


def _cast_grad(op, g):
    source = op.inputs[0].dtype
    return [cast(g, source) if source.is_floating and g.dtype.is_floating else None]


defop("Cast", lambda inputs, dtype: [Spec(inputs[0].shape, dtype)],
      lambda xp, x, dtype: xp.astype(x, dtype.of(xp)), _cast_grad)


def cast(x, dtype, name=None) -> Tensor:
    """``x`` converted to ``dtype``."""
    dtype = dtypes.as_dtype(dtype)
    x = convert_to_tensor(x)
    return x if x.dtype == dtype else _out("Cast", [x], {"dtype": dtype}, name)


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


def _matmul_kernel(xp, a, b, transpose_a, transpose_b):
    if transpose_a:
        a = xp.matrix_transpose(a)
    if transpose_b:
        b = xp.matrix_transpose(b)
    return xp.matmul(a, b)


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
    return [Spec(reduced(inputs[0].shape, axis, keepdims), inputs[0].dtype)]


def _reduction(op_type, xp_name, grad):
    def kernel(xp, x, axis, keepdims):
        axes = normalize_axis(axis, x.ndim)
        return getattr(xp, xp_name)(x, axis=axes, keepdims=keepdims)

    defop(op_type, _reduce_infer, kernel, grad)

    def build(input_tensor, axis=None, keepdims=None, name=None, keep_dims=None) -> Tensor:
        keep = bool(keepdims if keepdims is not None else keep_dims)
        if axis is not None:
            axis = [int(a) for a in ((axis,) if isinstance(axis, int) else axis)]
        return _out(op_type, [input_tensor], {"axis": axis, "keepdims": keep}, name)

    return build


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
reduce_prod = _reduction("Prod", "prod", None)


def _arg_infer(inputs, axis, output_type):
    return [Spec(reduced(inputs[0].shape, axis, False), output_type)]


def _arg(op_type, xp_name):
    defop(op_type, _arg_infer,
          lambda xp, x, axis, output_type: xp.astype(getattr(xp, xp_name)(x, axis=axis),
                                                     output_type.of(xp)))

    def build(input, axis=None, name=None, dimension=None, output_type=dtypes.int64) -> Tensor:
        axis = dimension if axis is None else axis
        attrs = {"axis": int(axis or 0), "output_type": dtypes.as_dtype(output_type)}
        return _out(op_type, [input], attrs, name)

    return build


argmax = _arg("ArgMax", "argmax")
argmin = _arg("ArgMin", "argmin")
