"""``tf.math``: the TF 1.13+ namespace of the elementwise ops and reductions (``tf.math.log`` is
``tf.log``).

>>> import dflow as tf
>>> tf.math.reduce_sum(tf.constant([1.0, 2.0])).op.type
'Sum'
"""

from .nn import in_top_k as _in_top_k
from .nn import l2_normalize, log_softmax, softmax, softplus, top_k, zero_fraction
from .ops.math_ops import (
    abs,
    add,
    add_n,
    argmax,
    argmin,
    ceil,
    cos,
    count_nonzero,
    divide,
    equal,
    erf,
    erfc,
    exp,
    expm1,
    floor,
    floordiv,
    floormod,
    greater,
    greater_equal,
    is_finite,
    is_inf,
    is_nan,
    less,
    less_equal,
    log,
    log1p,
    logical_and,
    logical_not,
    logical_or,
    logical_xor,
    maximum,
    minimum,
    multiply,
    negative,
    not_equal,
    pow,
    reciprocal,
    reduce_all,
    reduce_any,
    reduce_logsumexp,
    reduce_max,
    reduce_mean,
    reduce_min,
    reduce_prod,
    reduce_sum,
    round,
    rsqrt,
    sigmoid,
    sign,
    sin,
    sqrt,
    square,
    squared_difference,
    subtract,
    tanh,
    truediv,
)

__all__ = [
    "abs", "add", "add_n", "argmax", "argmin", "ceil", "cos", "count_nonzero", "divide", "equal",
    "erf", "erfc", "exp", "expm1", "floor", "floordiv", "floormod", "greater", "greater_equal", "in_top_k",
    "is_finite", "is_inf", "is_nan", "l2_normalize", "less", "less_equal", "log", "log1p",
    "log_softmax", "logical_and", "logical_not", "logical_or", "logical_xor", "maximum", "minimum",
    "mod", "multiply", "negative", "not_equal", "pow", "reciprocal", "reduce_all", "reduce_any",
    "reduce_logsumexp", "reduce_max", "reduce_mean", "reduce_min", "reduce_prod", "reduce_sum",
    "round", "rsqrt", "sigmoid", "sign", "sin", "softmax", "softplus", "sqrt", "square",
    "squared_difference", "subtract", "tanh", "top_k", "truediv", "zero_fraction",
]

mod = floormod


def in_top_k(predictions, targets, k, name=None):
    """``tf.nn.in_top_k`` under its ``tf.math`` name (same argument order)."""
    return _in_top_k(predictions, targets, k, name=name)
