"""``tf.contrib.opt``: the decoupled-weight-decay optimizers (Loshchilov and Hutter's AdamW and
its momentum twin), as TF 1.x's ``DecoupledWeightDecayExtension`` builds them: each variable is
first shrunk by ``weight_decay * var`` (not scaled by the learning rate), then the base
optimizer's update runs on it; and ``LazyAdamOptimizer``, whose step for a lookup's gradient
changes only the rows looked up and their moments. Any other name says to use ``tf.train``'s
optimizers.

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     w = tf.Variable(2.0)
...     step = tf.contrib.opt.MomentumWOptimizer(0.1, learning_rate=0.5, momentum=0.9).minimize(w * 0.0)
...     with tf.Session() as sess:
...         sess.run(tf.global_variables_initializer())
...         _ = sess.run(step)
...         round(float(sess.run(w)), 6)  # 2 - 0.1 * 2, and a zero gradient's step
1.8
"""

from __future__ import annotations

from ..graph import get_default_graph
from ..ops import state_ops
from ..train.optimizers import AdamOptimizer, MomentumOptimizer

__all__ = ["AdamWOptimizer", "LazyAdamOptimizer", "MomentumWOptimizer"]


class _DecoupledWeightDecay:
    """``var -= weight_decay * var`` before the base optimizer's update of ``var``."""

    def _decayed_then(self, grad, var, update):
        shrink = state_ops.assign_sub(var, var * self._weight_decay_rate)
        with get_default_graph().control_dependencies([shrink]):
            return update(grad, var)


class AdamWOptimizer(_DecoupledWeightDecay, AdamOptimizer):
    """Adam with decoupled weight decay: ``var -= weight_decay * var``, then Adam's step."""

    def __init__(self, weight_decay, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8,
                 use_locking=False, name="AdamW"):
        super().__init__(learning_rate, beta1, beta2, epsilon, use_locking, name)
        self._weight_decay_rate = weight_decay

    def _apply_dense(self, grad, var):
        return self._decayed_then(grad, var, super()._apply_dense)


class MomentumWOptimizer(_DecoupledWeightDecay, MomentumOptimizer):
    """Momentum with decoupled weight decay: ``var -= weight_decay * var``, then the momentum step."""

    def __init__(self, weight_decay, learning_rate, momentum, use_locking=False, name="MomentumW",
                 use_nesterov=False):
        super().__init__(learning_rate, momentum, use_locking, name, use_nesterov)
        self._weight_decay_rate = weight_decay

    def _apply_dense(self, grad, var):
        return self._decayed_then(grad, var, super()._apply_dense)


class LazyAdamOptimizer(AdamOptimizer):
    """Adam whose step for a lookup's gradient (an embedding's) updates only the rows looked up, and
    only their moments, as TF 1.x's: a large table's step costs its batch's rows, not the table.
    Dense gradients take Adam's step."""

    _lazy = True  # (its slots and name are Adam's, as in TF)


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(f"tf.contrib.opt.{name} is not supported by dflow; use the optimizers of tf.train "
                         "(or AdamWOptimizer / MomentumWOptimizer / LazyAdamOptimizer here)")
