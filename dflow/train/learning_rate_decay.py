"""TF 1.x's learning-rate schedules beyond ``exponential_decay``: each a tensor of the global step,
built of graph ops by TF's formulas (``tf.train.polynomial_decay`` ...).

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     step = tf.placeholder(tf.int64, [])
...     rate = tf.train.piecewise_constant(step, [100, 200], [1.0, 0.5, 0.25])
...     with tf.Session() as sess:
...         [float(sess.run(rate, {step: s})) for s in (0, 100, 101, 500)]
[1.0, 1.0, 0.5, 0.25]
"""

from __future__ import annotations

import math

from ..graph import Tensor, convert_to_tensor, name_scope
from ..ops import math_ops

__all__ = ["polynomial_decay", "piecewise_constant", "natural_exp_decay", "inverse_time_decay",
           "cosine_decay", "cosine_decay_restarts"]


def _step(global_step, like: Tensor) -> Tensor:
    if global_step is None:
        raise ValueError("global_step is required for a learning-rate schedule "
                         "(tf.train.get_or_create_global_step())")
    return math_ops.cast(global_step, like.dtype)


def _progress(learning_rate, global_step, decay_steps, staircase: bool) -> tuple[Tensor, Tensor]:
    rate = convert_to_tensor(learning_rate, name="learning_rate")
    progress = math_ops.divide(_step(global_step, rate), math_ops.cast(decay_steps, rate.dtype))
    return rate, math_ops.floor(progress) if staircase else progress


def polynomial_decay(learning_rate, global_step, decay_steps, end_learning_rate=0.0001, power=1.0,
                     cycle=False, name=None) -> Tensor:
    """From ``learning_rate`` to ``end_learning_rate`` over ``decay_steps`` as ``(1 - step /
    decay_steps) ** power``, then ``end_learning_rate`` (with ``cycle``: again, over the next
    multiple of ``decay_steps``)."""
    with name_scope(name, "PolynomialDecay"):
        rate = convert_to_tensor(learning_rate, name="learning_rate")
        step, steps = _step(global_step, rate), math_ops.cast(decay_steps, rate.dtype)
        if cycle:  # the first cycle counts step 0 in it, as TF's
            steps = steps * math_ops.maximum(math_ops.ceil(step / steps), 1.0)
        else:
            step = math_ops.minimum(step, steps)
        end = math_ops.cast(end_learning_rate, rate.dtype)
        return (rate - end) * math_ops.pow(1.0 - step / steps, math_ops.cast(power, rate.dtype)) + end


def piecewise_constant(x, boundaries, values, name=None) -> Tensor:
    """``values[0]`` while ``x <= boundaries[0]``, ``values[i]`` while ``boundaries[i-1] < x <=
    boundaries[i]``, ``values[-1]`` past the last boundary."""
    if len(values) != len(boundaries) + 1:
        raise ValueError(f"piecewise_constant needs one more value than boundaries, got {len(values)} values "
                         f"and {len(boundaries)} boundaries")
    with name_scope(name, "PiecewiseConstant"):
        x = convert_to_tensor(x)
        values = [convert_to_tensor(v) for v in values]
        result = values[-1]
        for boundary, value in zip(reversed(boundaries), reversed(values[:-1])):
            result = math_ops.where(math_ops.less_equal(x, math_ops.cast(boundary, x.dtype)), value, result)
        return result


def natural_exp_decay(learning_rate, global_step, decay_steps, decay_rate, staircase=False,
                      name=None) -> Tensor:
    """``learning_rate * exp(-decay_rate * step / decay_steps)`` (the exponent floored with
    ``staircase``)."""
    with name_scope(name, "NaturalExpDecay"):
        rate, progress = _progress(learning_rate, global_step, decay_steps, staircase)
        return rate * math_ops.exp(-math_ops.cast(decay_rate, rate.dtype) * progress)


def inverse_time_decay(learning_rate, global_step, decay_steps, decay_rate, staircase=False,
                       name=None) -> Tensor:
    """``learning_rate / (1 + decay_rate * step / decay_steps)``."""
    with name_scope(name, "InverseTimeDecay"):
        rate, progress = _progress(learning_rate, global_step, decay_steps, staircase)
        return rate / (1.0 + math_ops.cast(decay_rate, rate.dtype) * progress)


def cosine_decay(learning_rate, global_step, decay_steps, alpha=0.0, name=None) -> Tensor:
    """Half a cosine from ``learning_rate`` down to ``alpha * learning_rate`` over
    ``decay_steps`` (Loshchilov and Hutter's SGDR without restarts), then that."""
    with name_scope(name, "CosineDecay"):
        rate = convert_to_tensor(learning_rate, name="learning_rate")
        steps = math_ops.cast(decay_steps, rate.dtype)
        done = math_ops.minimum(_step(global_step, rate), steps) / steps
        cosine = 0.5 * (1.0 + math_ops.cos(math.pi * done))
        return rate * ((1.0 - alpha) * cosine + alpha)


def cosine_decay_restarts(learning_rate, global_step, first_decay_steps, t_mul=2.0, m_mul=1.0, alpha=0.0,
                          name=None) -> Tensor:
    """SGDR: cosine decays that restart, each ``t_mul`` times longer than the one before and
    starting ``m_mul`` times lower."""
    with name_scope(name, "SGDRDecay"):
        rate = convert_to_tensor(learning_rate, name="learning_rate")
        done = _step(global_step, rate) / math_ops.cast(first_decay_steps, rate.dtype)
        if t_mul == 1.0:
            restarts = math_ops.floor(done)
            done = done - restarts
        else:
            restarts = math_ops.floor(math_ops.log(1.0 - done * (1.0 - t_mul)) / math.log(t_mul))
            total = (1.0 - math_ops.pow(math_ops.cast(t_mul, rate.dtype), restarts)) / (1.0 - t_mul)
            done = (done - total) / math_ops.pow(math_ops.cast(t_mul, rate.dtype), restarts)
        scale = math_ops.pow(math_ops.cast(m_mul, rate.dtype), restarts)
        cosine = 0.5 * scale * (1.0 + math_ops.cos(math.pi * done))
        return rate * ((1.0 - alpha) * cosine + alpha)
