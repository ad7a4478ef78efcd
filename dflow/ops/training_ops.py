"""The optimizers' update ops (TF's ``training_ops``): ``ApplyGradientDescent``, ``ApplyMomentum``,
``ApplyAdam``, ``ApplyAdagrad``, ``ApplyRMSProp``, ``ApplyCenteredRMSProp``, ``ApplyAdadelta``,
``ApplyFtrlV2``, and the sparse forms of those TF 1.x applies to a lookup's gradient
(``SparseApplyMomentum`` ...: only the rows looked up change).

Each takes variable *references* (shared names) for the variable and its slots, so the kernel
reads and writes the session state in one step. Kernels compute new arrays and never write into
their inputs, which other ops may share, except an update's into its variable and slots where
nothing but the session state holds them (``SessionState.held_only_here``; the executors run an
update after the ops of the step that read its variable: ``executor.schedule``).
:mod:`dflow.train.optimizers` builds them.
"""

from __future__ import annotations

import contextlib
import math

import numpy

from ..graph import Tensor, get_default_graph
from . import fused
from .math_ops import scattered_rows
from .registry import ShapeError, Spec, defop
from .rows import add_rows, check_range, set_rows, table_to_write
from .shape_rules import fmt

__all__ = ["apply_update", "UPDATE_OPS"]

UPDATE_OPS = ("ApplyGradientDescent", "ApplyMomentum", "ApplyAdam", "ApplyAdagrad", "ApplyRMSProp",
              "ApplyCenteredRMSProp", "ApplyAdadelta", "ApplyFtrlV2")


def _apply_infer(grad_index):
    """Output: the variable's new value. The gradient must fit the variable (input 0)."""

    def infer(inputs, **_):
        var, grad = inputs[0], inputs[grad_index]
        if var.shape is not None and grad.shape is not None and not (
                len(var.shape) == len(grad.shape) and all(
                    a is None or b is None or a == b for a, b in zip(var.shape, grad.shape))):
            raise ShapeError(f"gradient of shape {fmt(grad.shape)} does not fit "
                             f"variable of shape {fmt(var.shape)}")
        if grad.dtype != var.dtype:
            raise ShapeError(f"gradient is {grad.dtype.name}, the variable {var.dtype.name}")
        return [Spec(var.shape, var.dtype)]

    return infer


def _store(state, xp, ref, old, new):
    """Write ``new`` as ``ref`` keeping the variable's dtype (float32 stays float32)."""
    if not (isinstance(new, numpy.ndarray) and new.dtype == old.dtype):  # (the compiled updates' own)
        new = xp.astype(xp.asarray(new), old.dtype, copy=False)
    state.write_variable(ref, new)
    return new


# each update holds its variable's lock (state.updating) over its reads and writes
def _gradient_descent(state, xp, var, alpha, delta):
    with state.updating(var):
        in_place = state.held_only_here(var)
        old = state.read_variable(var)
        return _store(state, xp, var, old, fused.gradient_descent(xp, old, alpha, delta, in_place=in_place))


def _decayed_gradient_descent(state, xp, var, alpha, delta, decayed, decay):
    """``ApplyGradientDescent(var, alpha, AddN(delta, Mul(decayed, decay)))`` in one pass (an L2
    weight decay's gradient, fused when a stage is lowered: :mod:`dflow.runtime.fusion`)."""
    with state.updating(var):
        old = state.read_variable(var)
        return _store(state, xp, var, old, fused.gradient_descent(xp, old, alpha, delta, decayed, decay))


def _momentum(state, xp, var, accum, lr, grad, momentum, use_nesterov=False):
    with state.updating(var):
        in_place = state.held_only_here(var, accum)
        old, old_accum = state.read_variable(var), state.read_variable(accum)
        new, new_accum = fused.momentum(xp, old, old_accum, grad, lr, momentum, use_nesterov, in_place)
        _store(state, xp, accum, old_accum, new_accum)
        return _store(state, xp, var, old, new)


def _adam_rate(xp, lr, beta1_power, beta2_power):
    """Adam's bias-corrected rate ``lr * sqrt(1 - beta2^t) / (1 - beta1^t)``, in the rate's dtype
    as TF's kernel computes it. NumPy values of one dtype go through their scalar type (the 0-d
    arrays' four operations took 3 us an update; a float32's square root taken in double
    precision and rounded is float32's own, correctly rounded)."""
    values = (lr, beta1_power, beta2_power)
    if all(isinstance(v, (numpy.ndarray, numpy.generic)) and v.dtype == lr.dtype for v in values):
        scalar = lr.dtype.type
        one = scalar(1)
        return scalar(lr) * scalar(math.sqrt(one - scalar(beta2_power))) / (one - scalar(beta1_power))
    return lr * xp.sqrt(1 - beta2_power) / (1 - beta1_power)


def _adam(state, xp, var, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad):
    lr_t = _adam_rate(xp, lr, beta1_power, beta2_power)
    with state.updating(var):
        in_place = state.held_only_here(var, m, v)
        old_m, old_v, old = state.read_variable(m), state.read_variable(v), state.read_variable(var)
        new, m_t, v_t = fused.adam(xp, old, old_m, old_v, grad, lr_t, beta1, beta2, epsilon, in_place)
        _store(state, xp, m, old_m, m_t)
        _store(state, xp, v, old_v, v_t)
        return _store(state, xp, var, old, new)


def _adagrad(state, xp, var, accum, lr, grad):
    with state.updating(var):
        old, old_accum = state.read_variable(var), state.read_variable(accum)
        new_accum = _store(state, xp, accum, old_accum, old_accum + grad * grad)
        return _store(state, xp, var, old, old - lr * grad / xp.sqrt(new_accum))


def _rms_prop(state, xp, var, ms, mom, lr, rho, momentum, epsilon, grad):
    with state.updating(var):
        in_place = state.held_only_here(var, ms, mom)
        old, old_ms, old_mom = (state.read_variable(r) for r in (var, ms, mom))
        new, new_ms, new_mom = fused.rms_prop(xp, old, old_ms, old_mom, grad, lr, rho, momentum, epsilon,
                                              in_place)
        _store(state, xp, ms, old_ms, new_ms)
        _store(state, xp, mom, old_mom, new_mom)
        return _store(state, xp, var, old, new)


def _centered_rms_prop(state, xp, var, mg, ms, mom, lr, rho, momentum, epsilon, grad):
    with state.updating(var):
        old, old_mg, old_ms, old_mom = (state.read_variable(r) for r in (var, mg, ms, mom))
        new_mg = _store(state, xp, mg, old_mg, rho * old_mg + (1 - rho) * grad)
        new_ms = _store(state, xp, ms, old_ms, rho * old_ms + (1 - rho) * (grad * grad))
        denominator = xp.sqrt(new_ms - new_mg * new_mg + epsilon)
        new_mom = _store(state, xp, mom, old_mom, momentum * old_mom + lr * grad / denominator)
        return _store(state, xp, var, old, old - new_mom)


def _adadelta(state, xp, var, accum, accum_update, lr, rho, epsilon, grad):
    with state.updating(var):
        old, old_accum, old_update = (state.read_variable(r) for r in (var, accum, accum_update))
        new_accum = _store(state, xp, accum, old_accum, rho * old_accum + (1 - rho) * (grad * grad))
        update = xp.sqrt(old_update + epsilon) / xp.sqrt(new_accum + epsilon) * grad
        _store(state, xp, accum_update, old_update, rho * old_update + (1 - rho) * (update * update))
        return _store(state, xp, var, old, old - lr * update)


def _ftrl(state, xp, var, accum, linear, grad, lr, l1, l2, l2_shrinkage, lr_power):
    with state.updating(var):
        old, old_accum, old_linear = (state.read_variable(r) for r in (var, accum, linear))
        shrunk = grad + 2 * l2_shrinkage * old  # ApplyFtrlV2; the accumulator takes the raw gradient
        new_accum = old_accum + grad * grad
        sigma = (new_accum ** -lr_power - old_accum ** -lr_power) / lr
        new_linear = _store(state, xp, linear, old_linear, old_linear + shrunk - sigma * old)
        quadratic = new_accum ** -lr_power / lr + 2 * l2
        pulled = (xp.sign(new_linear) * l1 - new_linear) / quadratic
        _store(state, xp, accum, old_accum, new_accum)
        return _store(state, xp, var, old, xp.where(xp.abs(new_linear) > l1, pulled, xp.zeros_like(pulled)))


# inputs in TF's order; the leading ones are references (shared names), the rest values
defop("ApplyGradientDescent", _apply_infer(2), _gradient_descent, stateful=True, updates=True)
# made from ApplyGradientDescent, AddN and Mul when a stage is lowered, never in users' graphs
defop("_ApplyDecayedGradientDescent", _apply_infer(2), _decayed_gradient_descent, stateful=True, updates=True)
defop("ApplyMomentum", _apply_infer(3), _momentum, stateful=True, updates=True)
defop("ApplyAdam", _apply_infer(9), _adam, stateful=True, updates=True)
defop("ApplyAdagrad", _apply_infer(3), _adagrad, stateful=True, updates=True)
defop("ApplyRMSProp", _apply_infer(7), _rms_prop, stateful=True, updates=True)
defop("ApplyCenteredRMSProp", _apply_infer(8), _centered_rms_prop, stateful=True, updates=True)
defop("ApplyAdadelta", _apply_infer(6), _adadelta, stateful=True, updates=True)
defop("ApplyFtrlV2", _apply_infer(3), _ftrl, stateful=True, updates=True)
_DENSE_KERNELS = {"ApplyMomentum": _momentum, "ApplyAdagrad": _adagrad, "ApplyRMSProp": _rms_prop,
                  "ApplyCenteredRMSProp": _centered_rms_prop, "ApplyAdadelta": _adadelta,
                  "ApplyFtrlV2": _ftrl, "ApplyAdam": _adam}


# ---- TF's sparse updates -----------------------------------------------------------------------
#: the dense updates that TF 1.x applies to a lookup's gradient (an ``IndexedSlices``) row by row:
#: their references (the variable, then its slots) and the gradient's place among their inputs
_SPARSE_FORMS = {"ApplyMomentum": (2, 3), "ApplyAdagrad": (2, 3), "ApplyRMSProp": (3, 7),
                 "ApplyCenteredRMSProp": (4, 8), "ApplyAdadelta": (3, 6), "ApplyFtrlV2": (3, 3),
                 "ApplyAdam": (3, 9)}
#: TF 1.x's Adam decays every row's moments for a lookup's gradient too, as the dense rule does;
#: only its LazyAdam (``lazy``) updates the rows looked up
_DENSE_FOR_ROWS = {"ApplyAdam"}


class _Rows:
    """Some rows of a step's variables as a session state, for the dense rule's kernel to update:
    arrays of their own (gathered), written in place or replaced."""

    def __init__(self, values: dict):
        self.values = values

    def updating(self, name):
        return contextlib.nullcontext()  # (the sparse kernel holds the variable's lock)

    def held_only_here(self, *names) -> bool:
        return True

    def read_variable(self, name):
        return self.values[name]

    def write_variable(self, name, value) -> None:
        self.values[name] = value


def _sparse_kernel(dense, num_refs: int, grad_at: int):
    """TF's ``SparseApply*``: the ``dense`` rule's kernel over the rows the gradient's indices
    (the input after it) name, repeated ones summed first as TF 1.x's optimizers do, written back
    into the variable and its slots; every other row keeps its values, momentum and moments too.
    In place where nothing else holds them (an embedding's 128 rows of 50,000, not its copy)."""

    def kernel(state, xp, *args, **attrs):
        refs, values, indices = args[:num_refs], args[grad_at], args[grad_at + 1]
        with state.updating(refs[0]):
            in_place = state.held_only_here(*refs)
            tables = [state.read_variable(ref) for ref in refs]
            ids = xp.reshape(indices, (-1,))
            check_range(xp, ids, tables[0].shape[0], f"sparse update index into {refs[0]}")
            unique, inverse = xp.unique_inverse(ids)
            row_shape, dtype = tuple(tables[0].shape[1:]), tables[0].dtype
            grad = add_rows(xp, xp.zeros((unique.shape[0], *row_shape), dtype=dtype), inverse,
                             xp.astype(xp.reshape(values, (ids.shape[0], *row_shape)), dtype))
            rows = _Rows({ref: xp.take(table, unique, axis=0) for ref, table in zip(refs, tables)})
            dense(rows, xp, *refs, *args[num_refs:grad_at], grad, *args[grad_at + 2:], **attrs)
            for ref, table in zip(refs, tables):
                state.write_variable(ref, set_rows(xp, table_to_write(xp, table, in_place), unique,
                                                    rows.values[ref]))
            return state.read_variable(refs[0])

    return kernel


def _sparse_infer(grad_at: int):
    """As the dense rule's, for a gradient of rows: one per index, each the variable's row shape."""

    def infer(inputs, **_):
        var, values, indices = inputs[0], inputs[grad_at], inputs[grad_at + 1]
        if not indices.dtype.is_integer:
            raise ShapeError(f"a sparse update's indices must be integers, not {indices.dtype.name}")
        if None not in (var.shape, values.shape, indices.shape) and \
                tuple(values.shape) != tuple(indices.shape) + tuple(var.shape[1:]):
            raise ShapeError(f"gradient rows of shape {fmt(values.shape)} do not fit indices of shape "
                             f"{fmt(indices.shape)} into a variable of shape {fmt(var.shape)}")
        if values.dtype != var.dtype:
            raise ShapeError(f"gradient is {values.dtype.name}, the variable {var.dtype.name}")
        return [Spec(var.shape, var.dtype)]

    return infer


for _dense, (_refs, _grad_at) in _SPARSE_FORMS.items():
    defop("Sparse" + _dense, _sparse_infer(_grad_at),
          _sparse_kernel(_DENSE_KERNELS[_dense], _refs, _grad_at), stateful=True, updates=True)


def apply_update(op_type: str, inputs: list, attrs: dict | None = None, lazy: bool = False) -> Tensor:
    """The variable's new value after the update op ``op_type`` (one of :data:`UPDATE_OPS`) ran;
    its sparse form where the gradient is a lookup's rows and TF 1.x applies that form (Adam's
    with ``lazy``)."""
    if op_type in _SPARSE_FORMS and (lazy or op_type not in _DENSE_FOR_ROWS):
        _, grad_at = _SPARSE_FORMS[op_type]
        rows = scattered_rows(inputs[grad_at])
        if rows is not None:
            op_type, inputs = "Sparse" + op_type, [*inputs[:grad_at], *rows, *inputs[grad_at + 1:]]
    return get_default_graph().create_op(op_type, inputs, attrs, name=op_type).outputs[0]
