"""Stateful ops: variables, assignments and random numbers.

Their kernels take the session's :class:`~dflow.runtime.state.SessionState`
first. A variable is named in the state by its ``shared_name``, so two graphs
(two between-graph replicas) that create ``weight`` share it.
"""

from __future__ import annotations

import math

from .. import dtypes
from ..graph import Tensor, convert_to_tensor, get_default_graph
from .array_ops import is_symbolic, shape_tensor, shape_value, static_shape
from .registry import ShapeError, Spec, defop
from .shape_rules import fmt

__all__ = ["assign", "assign_add", "assign_sub", "is_variable_initialized", "random_normal",
           "truncated_normal", "random_uniform", "random_shuffle", "multinomial"]


def _op(op_type, inputs, attrs=None, name=None):
    return get_default_graph().create_op(op_type, inputs, attrs, name=name)


def _variable_ref(state, xp, shape, dtype, shared_name):
    state.declare_variable(shared_name, shape, dtype.name)  # a PS shares it by name: same shape?
    return shared_name


# As in TF, the variable op yields a reference (here: the shared name) and reading
# is a separate op, so an Assign can take the reference without reading it first.
defop("VariableV2", lambda inputs, shape, dtype, shared_name: [Spec(shape, dtype)], _variable_ref,
      stateful=True)
# takes the reference, so it runs where the variable lives (on a cluster: its PS task)
defop("IsVariableInitialized", lambda inputs: [Spec((), dtypes.bool)],
      lambda state, xp, ref: xp.asarray(state.is_initialized(ref)), stateful=True, gpu=False, takes_refs=True)
# the names of the variables whose flag says "not initialized", as TF's bytes
defop("ReportUninitialized", lambda inputs, names: [Spec((None,), dtypes.string)],
      lambda xp, *initialized, names: xp.asarray(
          [name.encode() for name, ready in zip(names, *(f.tolist() for f in initialized)) if not ready],
          dtype=object), gpu=False)
defop("ReadVariable", lambda inputs: [inputs[0]._replace(value=None)],
      lambda state, xp, ref: state.read_variable(ref), stateful=True, takes_refs=True)


def _assign_infer(inputs, var, validate_shape=True):
    ref, value = inputs
    if validate_shape and ref.shape is not None and value.shape is not None:
        compatible = len(ref.shape) == len(value.shape) and all(
            a is None or b is None or a == b for a, b in zip(ref.shape, value.shape))
        if not compatible:
            raise ShapeError(f"cannot assign a value of shape {fmt(value.shape)} "
                             f"to variable {var} of shape {fmt(ref.shape)}")
    if value.dtype != ref.dtype:
        raise ShapeError(f"cannot assign a {value.dtype.name} value to {ref.dtype.name} variable {var}")
    return [Spec(ref.shape if validate_shape else value.shape, ref.dtype)]


def _assign_kernel(update):
    def kernel(state, xp, ref, value, var, validate_shape=True):
        with state.updating(ref):  # concurrent replicas' assign_add (the global step) must all count
            new = update(state.read_variable(ref), value) if update else value
            state.write_variable(ref, new)
            return new

    return kernel


defop("Assign", _assign_infer, _assign_kernel(None), stateful=True, takes_refs=True)
defop("AssignAdd", _assign_infer, _assign_kernel(lambda old, v: old + v), stateful=True, takes_refs=True)
defop("AssignSub", _assign_infer, _assign_kernel(lambda old, v: old - v), stateful=True, takes_refs=True)


def ref_of(ref) -> tuple[Tensor, str]:
    """The variable op's output and its shared name, for a Variable or its tensor."""
    tensor = getattr(ref, "_variable", ref)
    if not isinstance(tensor, Tensor) or tensor.op.type != "VariableV2":
        raise TypeError(f"expected a tf.Variable, got {ref!r}")
    return tensor, tensor.op.attrs["shared_name"]


def is_variable_initialized(variable, name: str = "IsVariableInitialized") -> Tensor:
    """A bool scalar: has ``variable`` been initialized (in this session, or on its task)?"""
    return _op("IsVariableInitialized", [ref_of(variable)[0]], name=name).outputs[0]


def _assign(op_type, ref, value, name, validate_shape=True) -> Tensor:
    tensor, var = ref_of(ref)
    from ..graph import convert_to_tensor

    value = convert_to_tensor(value, dtype=None if isinstance(value, Tensor) else tensor.dtype)
    attrs = {"var": var, "validate_shape": validate_shape}
    return _op(op_type, [tensor, value], attrs, name).outputs[0]


def assign(ref, value, validate_shape=True, use_locking=None, name=None) -> Tensor:
    """Store ``value`` in variable ``ref``; the result is the new value."""
    return _assign("Assign", ref, value, name, validate_shape)


def assign_add(ref, value, use_locking=None, name=None) -> Tensor:
    """``ref += value``; the result is the new value."""
    return _assign("AssignAdd", ref, value, name)


def assign_sub(ref, value, use_locking=None, name=None) -> Tensor:
    """``ref -= value``; the result is the new value."""
    return _assign("AssignSub", ref, value, name)


# ---- random numbers ----------------------------------------------------------
def _random_infer(inputs, shape, dtype, seed, **_):
    return [Spec(tuple(shape), dtype)]


def _normal(state, xp, shape, dtype, seed, mean, stddev):
    sample = state.random_generator(seed).standard_normal(tuple(shape))
    return xp.asarray(sample * stddev + mean, dtype=dtype.of(xp))


def _truncated(state, xp, shape, dtype, seed, mean, stddev):
    # TF's rule: redraw every value farther than 2 standard deviations from the mean
    rng = state.random_generator(seed)
    sample = rng.standard_normal(tuple(shape))
    outside = abs(sample) > 2.0
    while outside.any():
        sample[outside] = rng.standard_normal(int(outside.sum()))
        outside = abs(sample) > 2.0
    return xp.asarray(sample * stddev + mean, dtype=dtype.of(xp))


def _uniform(state, xp, shape, dtype, seed, minval, maxval):
    rng = state.random_generator(seed)
    if dtype.is_integer:
        return xp.asarray(rng.integers(minval, maxval, tuple(shape)), dtype=dtype.of(xp))
    return xp.asarray(rng.uniform(minval, maxval, tuple(shape)), dtype=dtype.of(xp))


defop("RandomStandardNormal", _random_infer, _normal, stateful=True)
defop("TruncatedNormal", _random_infer, _truncated, stateful=True)
defop("RandomUniform", _random_infer, _uniform, stateful=True)


# The same draws with the shape as an input tensor (``tf.random_normal(tf.shape(z))``), as TF's
# ops take it; a shape known at build time stays an attribute, so existing graphs read the same.
def _shaped_infer(inputs, dtype, seed, **_):
    target = shape_value(inputs[0])
    return [Spec(None if target is None else tuple(target), dtype)]


def _shaped(draw):
    def kernel(state, xp, target, **attrs):
        return draw(state, xp, tuple(int(d) for d in target), **attrs)

    return kernel


defop("RandomStandardNormalShaped", _shaped_infer, _shaped(_normal), stateful=True)
defop("TruncatedNormalShaped", _shaped_infer, _shaped(_truncated), stateful=True)
defop("RandomUniformShaped", _shaped_infer, _shaped(_uniform), stateful=True)


def op_seed(seed):
    """TF's seeding rule: (graph seed, op seed) when either is set, else None (fresh entropy)."""
    graph = get_default_graph()
    if seed is None and graph.seed is None:
        return None
    if seed is None:
        seed = graph.version  # a different stream per op, reproducible for a given graph
    return [graph.seed if graph.seed is not None else 87654321, int(seed)]


def _random(op_type, shape, dtype, seed, name, **params) -> Tensor:
    attrs = {"dtype": dtypes.as_dtype(dtype), "seed": op_seed(seed), **params}
    if is_symbolic(shape) or (isinstance(shape, (list, tuple)) and any(map(is_symbolic, shape))):
        return _op(op_type + "Shaped", [shape_tensor(shape)], attrs, name).outputs[0]
    dims = static_shape(shape)
    if dims is None or any(d is None or d < 0 for d in dims):
        raise ValueError(f"random ops need a fully known shape, got {dims}; "
                         "use tf.shape(x) for a shape known only at run time")
    return _op(op_type, [], {"shape": dims, **attrs}, name).outputs[0]


def _scaled(op_type, shape, dtype, seed, name, scale, shift, scale_name, shift_name) -> Tensor:
    """Draws with ``scale``/``shift`` (stddev/mean, maxval-minval/minval) as attributes when they
    are numbers, else as graph on a standard draw: ``stddev=<Tensor>`` works as in TF."""
    dtype = dtypes.as_dtype(dtype)
    if not is_symbolic(scale) and not is_symbolic(shift):
        return _random(op_type, shape, dtype, seed, name, **{scale_name: scale, shift_name: shift})
    if not dtype.is_floating:
        raise TypeError(f"{op_type} with tensor {scale_name}/{shift_name} needs a float dtype, got {dtype!r}")
    from .math_ops import add, multiply

    graph = get_default_graph()
    with graph.name_scope(name or op_type.lower()) as scope:
        params = {scale_name: 1.0, shift_name: 0.0}
        if op_type == "RandomUniform":
            params = {"minval": 0.0, "maxval": 1.0}
        draw = _random(op_type, shape, dtype, seed, None, **params)
        scaled = multiply(draw, convert_to_tensor(scale, dtype=None if is_symbolic(scale) else dtype))
        return add(scaled, convert_to_tensor(shift, dtype=None if is_symbolic(shift) else dtype),
                   name=scope)


def random_normal(shape, mean=0.0, stddev=1.0, dtype=dtypes.float32, seed=None, name=None) -> Tensor:
    """Normal samples, new on every run. ``shape`` may be a tensor (``tf.shape(z)``), ``mean`` and
    ``stddev`` tensors: ``tf.random_normal(tf.shape(z), stddev=sigma)``."""
    return _scaled("RandomStandardNormal", shape, dtype, seed, name, stddev, mean, "stddev", "mean")


def truncated_normal(shape, mean=0.0, stddev=1.0, dtype=dtypes.float32, seed=None, name=None) -> Tensor:
    """Normal samples within two standard deviations of the mean."""
    return _scaled("TruncatedNormal", shape, dtype, seed, name, stddev, mean, "stddev", "mean")


def random_uniform(shape, minval=0, maxval=None, dtype=dtypes.float32, seed=None, name=None) -> Tensor:
    """Uniform samples in ``[minval, maxval)`` (``maxval`` defaults to 1 for floats)."""
    dtype = dtypes.as_dtype(dtype)
    if maxval is None:
        if dtype.is_integer:
            raise ValueError("random_uniform with an integer dtype needs maxval")
        maxval = 1.0
    if is_symbolic(minval) or is_symbolic(maxval):
        from .math_ops import subtract

        width = subtract(maxval, minval)
        return _scaled("RandomUniform", shape, dtype, seed, name, width, minval, "maxval", "minval")
    return _random("RandomUniform", shape, dtype, seed, name, minval=minval, maxval=maxval)


# ---- shuffles and categorical draws ----------------------------------------------------------
def _shuffle_kernel(state, xp, value, seed):
    order = state.random_generator(seed).permutation(value.shape[0]) if value.ndim else None
    return value if order is None else xp.take(value, xp.asarray(order), axis=0)


defop("RandomShuffle", lambda inputs, seed: [inputs[0]._replace(value=None)], _shuffle_kernel,
      stateful=True)


def random_shuffle(value, seed=None, name=None) -> Tensor:
    """``value`` with its first dimension randomly permuted, a new order on every run."""
    return _op("RandomShuffle", [value], {"seed": op_seed(seed)}, name).outputs[0]


def _multinomial_infer(inputs, num_samples, seed, output_dtype):
    s = inputs[0].shape
    if s is not None and len(s) != 2:
        raise ShapeError(f"multinomial needs logits of shape [batch, classes], got {fmt(s)}")
    return [Spec((None if s is None else s[0], num_samples), output_dtype)]


def _multinomial_kernel(state, xp, logits, num_samples, seed, output_dtype):
    """Inverse-CDF sampling: the count of cumulative probabilities below a uniform draw."""
    batch, classes = logits.shape
    e = xp.exp(logits - xp.max(logits, axis=1, keepdims=True))
    probs = e / xp.sum(e, axis=1, keepdims=True)
    index = xp.arange(classes)
    upper = xp.astype(index[:, None] <= index[None, :], probs.dtype)
    cdf = xp.matmul(probs, upper)  # (no cumsum in every array namespace)
    uniform = xp.asarray(state.random_generator(seed).random((batch, num_samples, 1)), dtype=probs.dtype)
    draws = xp.sum(xp.astype(uniform > cdf[:, None, :], xp.int64), axis=2)
    return xp.astype(xp.minimum(draws, xp.asarray(classes - 1, dtype=xp.int64)), output_dtype.of(xp))


defop("Multinomial", _multinomial_infer, _multinomial_kernel, stateful=True)


def multinomial(logits, num_samples, seed=None, name=None, output_dtype=dtypes.int64) -> Tensor:
    """``num_samples`` class indices per row drawn from ``softmax(logits)`` (TF 1.x's
    ``tf.multinomial``)."""
    attrs = {"num_samples": int(num_samples), "seed": op_seed(seed),
             "output_dtype": dtypes.as_dtype(output_dtype)}
    return _op("Multinomial", [logits], attrs, name).outputs[0]


def glorot_limit(shape) -> float:
    """sqrt(6 / (fan_in + fan_out)) with TF's fan rule for conv kernels."""
    if len(shape) < 2:
        fan_in = fan_out = shape[0] if shape else 1
    else:
        receptive = math.prod(shape[:-2])
        fan_in, fan_out = shape[-2] * receptive, shape[-1] * receptive
    return math.sqrt(6.0 / max(1.0, fan_in + fan_out))
