"""Stateful ops: variables, assignments and random numbers.

Their kernels take the session's :class:`~dflow.runtime.state.SessionState`
first. A variable is named in the state by its ``shared_name``, so two graphs
(two between-graph replicas) that create ``weight`` share it.
"""

from __future__ import annotations

import math

from .. import dtypes
from ..graph import Tensor, get_default_graph
from .registry import ShapeError, Spec, defop
from .shape_rules import fmt

__all__ = ["assign", "assign_add", "assign_sub", "is_variable_initialized", "random_normal",
           "truncated_normal", "random_uniform"]


def _op(op_type, inputs, attrs=None, name=None):
    return get_default_graph().create_op(op_type, inputs, attrs, name=name)


# As in TF, the variable op yields a reference (here: the shared name) and reading
# is a separate op, so an Assign can take the reference without reading it first.
defop("VariableV2", lambda inputs, shape, dtype, shared_name: [Spec(shape, dtype)],
      lambda xp, shape, dtype, shared_name: shared_name)
# takes the reference, so it runs where the variable lives (on a cluster: its PS task)
defop("IsVariableInitialized", lambda inputs: [Spec((), dtypes.bool)],
      lambda state, xp, ref: xp.asarray(state.is_initialized(ref)), stateful=True)
# the names of the variables whose flag says "not initialized", as TF's bytes
defop("ReportUninitialized", lambda inputs, names: [Spec((None,), dtypes.string)],
      lambda xp, *initialized, names: xp.asarray(
          [name.encode() for name, ready in zip(names, *(f.tolist() for f in initialized)) if not ready],
          dtype=object))
defop("ReadVariable", lambda inputs: [inputs[0]._replace(value=None)],
      lambda state, xp, ref: state.read_variable(ref), stateful=True)


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


defop("Assign", _assign_infer, _assign_kernel(None), stateful=True)
defop("AssignAdd", _assign_infer, _assign_kernel(lambda old, v: old + v), stateful=True)
defop("AssignSub", _assign_infer, _assign_kernel(lambda old, v: old - v), stateful=True)


def _ref_of(ref) -> tuple[Tensor, str]:
    """The variable op's output and its shared name, for a Variable or its tensor."""
    tensor = getattr(ref, "_variable", ref)
    if not isinstance(tensor, Tensor) or tensor.op.type != "VariableV2":
        raise TypeError(f"expected a tf.Variable, got {ref!r}")
    return tensor, tensor.op.attrs["shared_name"]


def is_variable_initialized(variable, name: str = "IsVariableInitialized") -> Tensor:
    """A bool scalar: has ``variable`` been initialized (in this session, or on its task)?"""
    return _op("IsVariableInitialized", [_ref_of(variable)[0]], name=name).outputs[0]


def _assign(op_type, ref, value, name, validate_shape=True) -> Tensor:
    tensor, var = _ref_of(ref)
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


def op_seed(seed):
    """TF's seeding rule: (graph seed, op seed) when either is set, else None (fresh entropy)."""
    graph = get_default_graph()
    if seed is None and graph.seed is None:
        return None
    if seed is None:
        seed = graph.version  # a different stream per op, reproducible for a given graph
    return [graph.seed if graph.seed is not None else 87654321, int(seed)]


def _random(op_type, shape, dtype, seed, name, **params) -> Tensor:
    shape = [int(d) for d in shape]
    if any(d is None or d < 0 for d in shape):
        raise ValueError(f"random ops need a fully known shape, got {shape}")
    attrs = {"shape": shape, "dtype": dtypes.as_dtype(dtype), "seed": op_seed(seed), **params}
    return _op(op_type, [], attrs, name).outputs[0]


def random_normal(shape, mean=0.0, stddev=1.0, dtype=dtypes.float32, seed=None, name=None) -> Tensor:
    """Normal samples, new on every run."""
    return _random("RandomStandardNormal", shape, dtype, seed, name, mean=mean, stddev=stddev)


def truncated_normal(shape, mean=0.0, stddev=1.0, dtype=dtypes.float32, seed=None, name=None) -> Tensor:
    """Normal samples within two standard deviations of the mean."""
    return _random("TruncatedNormal", shape, dtype, seed, name, mean=mean, stddev=stddev)


def random_uniform(shape, minval=0, maxval=None, dtype=dtypes.float32, seed=None, name=None) -> Tensor:
    """Uniform samples in ``[minval, maxval)`` (``maxval`` defaults to 1 for floats)."""
    dtype = dtypes.as_dtype(dtype)
    if maxval is None:
        if dtype.is_integer:
            raise ValueError("random_uniform with an integer dtype needs maxval")
        maxval = 1.0
    return _random("RandomUniform", shape, dtype, seed, name, minval=minval, maxval=maxval)


def glorot_limit(shape) -> float:
    """sqrt(6 / (fan_in + fan_out)) with TF's fan rule for conv kernels."""
    if len(shape) < 2:
        fan_in = fan_out = shape[0] if shape else 1
    else:
        receptive = math.prod(shape[:-2])
        fan_in, fan_out = shape[-2] * receptive, shape[-1] * receptive
    return math.sqrt(6.0 / max(1.0, fan_in + fan_out))
