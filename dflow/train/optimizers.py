"""Optimizers as in TF 1.x: ``minimize`` = ``compute_gradients`` + ``apply_gradients``.

Each update rule is one stateful op of :mod:`dflow.ops.training_ops` (``ApplyGradientDescent``,
``ApplyAdam``...) taking variable *references* (shared names) for the variable and its slots, so
the kernel reads and writes the session state in one step, as TF's ``training_ops`` do.

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     w = tf.Variable(1.0, name="w")
...     train = tf.train.GradientDescentOptimizer(0.25).minimize(w * w)
...     with tf.Session() as sess:
...         _ = sess.run(tf.global_variables_initializer())
...         _ = sess.run(train)
...         float(sess.run(w))  # 1 - 0.25 * 2
0.5
"""

from __future__ import annotations

from ..autodiff import gradients
from ..graph import GraphKeys, Tensor, colocate_with, convert_to_tensor, get_default_graph, name_scope
from ..ops import array_ops, math_ops, state_ops
from ..ops.embedding_ops import scatter_sub
from ..ops.math_ops import scattered_rows
from ..ops.training_ops import apply_update
from ..variables import Variable, group, trainable_variables

__all__ = ["Optimizer", "GradientDescentOptimizer", "MomentumOptimizer", "AdamOptimizer",
           "AdagradOptimizer", "RMSPropOptimizer", "AdadeltaOptimizer", "FtrlOptimizer",
           "exponential_decay"]


# ---- the base class ------------------------------------------------------------------
class Optimizer:
    """Base class: subclasses give ``_create_slots``, ``_prepare``, ``_apply_dense``
    and optionally ``_finish``.

    Slots (per-variable state such as Momentum's accumulator) are non-trainable
    variables named ``<var>/<Optimizer name>``, ``<var>/<name>_1``..., created on
    the first ``apply_gradients`` and initialized by ``global_variables_initializer``.
    """

    def __init__(self, use_locking: bool, name: str):
        if not name:
            raise ValueError("an Optimizer needs a name")
        self._use_locking = use_locking
        self._name = name
        self._slots: dict[str, dict[Variable, Variable]] = {}
        self._non_slot: dict[tuple, Variable] = {}

    def get_name(self) -> str:
        return self._name

    def minimize(self, loss, global_step=None, var_list=None, gate_gradients=1,
                 aggregation_method=None, colocate_gradients_with_ops=False, name=None,
                 grad_loss=None):
        """An op that takes one step down the gradient of ``loss``.

        Parameters
        ----------
        loss : Tensor
            The value to minimize.
        global_step : Variable, optional
            Incremented by one after the variables are updated.
        var_list : list of Variable, optional
            Defaults to the graph's trainable variables.
        name : str, optional
            Name of the returned op (default: the optimizer's name).

        Example
        -------
        >>> import dflow as tf
        >>> with tf.Graph().as_default():
        ...     w = tf.Variable([1.0, -1.0])
        ...     step = tf.train.get_or_create_global_step()
        ...     train_op = tf.train.AdamOptimizer(1e-3).minimize(tf.reduce_sum(w * w), global_step=step)
        ...     train_op.type
        'AssignAdd'
        """
        grads_and_vars = self.compute_gradients(loss, var_list=var_list, grad_loss=grad_loss)
        if all(g is None for g, _ in grads_and_vars):
            raise ValueError(
                "No gradients provided for any variable, check your graph for ops that do not "
                f"support gradients, between variables {[str(v) for _, v in grads_and_vars]} "
                f"and loss {loss}.")
        return self.apply_gradients(grads_and_vars, global_step=global_step, name=name)

    def compute_gradients(self, loss, var_list=None, gate_gradients=1, aggregation_method=None,
                          colocate_gradients_with_ops=False, grad_loss=None):
        """``[(gradient or None, variable), ...]`` for ``var_list`` (default: trainable)."""
        loss = convert_to_tensor(loss)
        if var_list is None:
            with loss.graph.as_default():
                var_list = trainable_variables()
        var_list = list(dict.fromkeys(var_list))  # drop repeats, keep order
        if not var_list:
            raise ValueError("No variables to optimize.")
        for v in var_list:
            if not isinstance(v, Variable):
                raise TypeError(f"compute_gradients needs tf.Variables in var_list, got {v!r}")
        grads = gradients(loss, var_list, grad_ys=grad_loss)
        return list(zip(grads, var_list))

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """One op applying each non-None gradient, then incrementing ``global_step``.

        TF's order: every variable's update, then ``_finish`` (e.g. Adam's beta
        powers), then the global step, each behind control dependencies.
        """
        grads_and_vars = [(g if g is None else convert_to_tensor(g), v) for g, v in grads_and_vars]
        if not grads_and_vars:
            raise ValueError("No variables provided.")
        for _, v in grads_and_vars:
            if not isinstance(v, Variable):
                raise TypeError(f"apply_gradients needs (gradient, tf.Variable) pairs, got {v!r}")
        updates = [(g, v) for g, v in grads_and_vars if g is not None]
        if not updates:
            raise ValueError("No gradients provided for any variable: "
                             f"{[str(v) for _, v in grads_and_vars]}.")
        graph = updates[0][1].graph
        with graph.as_default():
            self._create_slots([v for _, v in updates])
            with graph.name_scope(name or self._name) as scope:
                self._prepare()
                update_ops = []
                for grad, var in updates:
                    with graph.name_scope("update_" + var.op.name), colocate_with(var):
                        update_ops.append(self._apply_dense(grad, var).op)
                if global_step is None:
                    train_op = self._finish(update_ops, scope)
                else:
                    with graph.control_dependencies([self._finish(update_ops, "update")]):
                        with colocate_with(global_step):
                            train_op = state_ops.assign_add(global_step, 1, name=scope).op
        collection = graph.get_collection_ref(GraphKeys.TRAIN_OP)
        if train_op not in collection:
            collection.append(train_op)
        return train_op

    # ---- slots --------------------------------------------------------------
    def get_slot(self, var: Variable, name: str) -> Variable | None:
        """The slot ``name`` (see :meth:`get_slot_names`) of ``var``, or None."""
        return self._slots.get(name, {}).get(var)

    def get_slot_names(self) -> list[str]:
        return sorted(self._slots)

    def variables(self) -> list[Variable]:
        """Every variable this optimizer created (slots and e.g. Adam's beta powers)."""
        slots = [s for named in self._slots.values() for s in named.values()]
        return list(self._non_slot.values()) + slots

    def _zeros_slot(self, var: Variable, slot_name: str, op_name: str) -> Variable:
        return self._filled_slot(var, 0.0, slot_name, op_name)

    def _filled_slot(self, var: Variable, value: float, slot_name: str, op_name: str) -> Variable:
        """The slot ``slot_name`` of ``var``, created filled with ``value`` (Adagrad's 0.1)."""
        named = self._slots.setdefault(slot_name, {})
        if var not in named:
            named[var] = _create_slot(var, value, op_name)
        return named[var]

    def _get_or_make_non_slot(self, initial_value, name: str, colocate_with: Variable) -> Variable:
        key = (name, colocate_with.graph)
        if key not in self._non_slot:
            graph = colocate_with.graph
            with graph.name_scope(None), graph.colocate_with(colocate_with):
                self._non_slot[key] = Variable(initial_value, trainable=False, name=name)
        return self._non_slot[key]

    # ---- what subclasses give -------------------------------------------------
    def _create_slots(self, var_list) -> None:
        pass

    def _prepare(self) -> None:
        pass

    def _apply_dense(self, grad, var):
        raise NotImplementedError

    def _finish(self, update_ops, name_scope):
        return group(*update_ops, name=name_scope)


def _create_slot(var: Variable, value: float, op_name: str) -> Variable:
    """A variable shaped like ``var`` filled with ``value``, beside it, named ``<var>/<op_name>``."""
    graph = var.graph
    if var.shape.is_fully_defined():
        initial = lambda: array_ops.fill(var.shape.as_list(), float(value), dtype=var.dtype)  # noqa: E731
    else:
        initial = lambda: array_ops.zeros_like(var.initial_value) + float(value)  # noqa: E731
    with graph.name_scope(None), colocate_with(var):
        return Variable(initial, trainable=False, name=f"{var.op.name}/{op_name}",
                        validate_shape=var.shape.is_fully_defined())


def _hyper(value, name) -> Tensor:
    """A hyperparameter as a tensor: a number, a tensor (a decay schedule) or a callable."""
    value = value() if callable(value) and not isinstance(value, (Tensor, Variable)) else value
    return convert_to_tensor(value, name=name)


def _as(tensor: Tensor, var: Variable) -> Tensor:
    return math_ops.cast(tensor, var.dtype)


# ---- the optimizers --------------------------------------------------------------------
class GradientDescentOptimizer(Optimizer):
    """``var -= learning_rate * grad``.

    >>> import dflow as tf
    >>> tf.train.GradientDescentOptimizer(0.1).get_name()
    'GradientDescent'
    """

    def __init__(self, learning_rate, use_locking=False, name="GradientDescent"):
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate

    def _prepare(self):
        self._learning_rate_tensor = _hyper(self._learning_rate, "learning_rate")

    def _apply_dense(self, grad, var):
        rows = scattered_rows(grad)
        if rows is not None:  # a lookup's gradient: only its rows change (TF's sparse apply), no dense table
            values, indices = rows
            return scatter_sub(var, indices, values * _as(self._learning_rate_tensor, var))
        learning_rate = _as(self._learning_rate_tensor, var)
        return apply_update("ApplyGradientDescent", [var._variable, learning_rate, grad])


class MomentumOptimizer(Optimizer):
    """``accum = momentum * accum + grad; var -= lr * accum`` (slot ``momentum``).

    With ``use_nesterov=True``: ``var -= lr * grad + lr * momentum * accum``.
    """

    def __init__(self, learning_rate, momentum, use_locking=False, name="Momentum",
                 use_nesterov=False):
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate
        self._momentum = momentum
        self._use_nesterov = use_nesterov

    def _create_slots(self, var_list):
        for v in var_list:
            self._zeros_slot(v, "momentum", self._name)

    def _prepare(self):
        self._learning_rate_tensor = _hyper(self._learning_rate, "learning_rate")
        self._momentum_tensor = _hyper(self._momentum, "momentum")

    def _apply_dense(self, grad, var):
        accum = self.get_slot(var, "momentum")
        inputs = [var._variable, accum._variable, _as(self._learning_rate_tensor, var), grad,
                  _as(self._momentum_tensor, var)]
        return apply_update("ApplyMomentum", inputs, {"use_nesterov": self._use_nesterov})


class AdamOptimizer(Optimizer):
    """Adam (Kingma & Ba), with TF's update (the epsilon-hat form)::

        lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t)
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g^2
        var -= lr_t * m / (sqrt(v) + epsilon)

    Slots ``m`` (``<var>/Adam``) and ``v`` (``<var>/Adam_1``); ``beta1^t`` and
    ``beta2^t`` are the variables ``beta1_power``/``beta2_power``, multiplied by
    ``beta1``/``beta2`` after every variable of the step has been updated.
    """

    _lazy = False  # (tf.contrib.opt.LazyAdamOptimizer's: a lookup's gradient changes its rows only)

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8,
                 use_locking=False, name="Adam"):
        super().__init__(use_locking, name)
        self._lr, self._beta1, self._beta2, self._epsilon = learning_rate, beta1, beta2, epsilon

    def _beta_powers(self, graph=None) -> tuple[Variable, Variable]:
        graph = graph or get_default_graph()
        return self._non_slot[("beta1_power", graph)], self._non_slot[("beta2_power", graph)]

    def _create_slots(self, var_list):
        first = min(var_list, key=lambda v: v.name)  # TF colocates the powers with this one
        self._get_or_make_non_slot(self._beta1, "beta1_power", first)
        self._get_or_make_non_slot(self._beta2, "beta2_power", first)
        for v in var_list:
            self._zeros_slot(v, "m", self._name)
            self._zeros_slot(v, "v", self._name)

    def _prepare(self):
        self._lr_t = _hyper(self._lr, "learning_rate")
        self._beta1_t = _hyper(self._beta1, "beta1")
        self._beta2_t = _hyper(self._beta2, "beta2")
        self._epsilon_t = _hyper(self._epsilon, "epsilon")

    def _apply_dense(self, grad, var):
        beta1_power, beta2_power = self._beta_powers(var.graph)
        refs = [var, self.get_slot(var, "m"), self.get_slot(var, "v")]
        # the powers are values, as in TF: they may live on another PS task than ``var``
        values = [beta1_power, beta2_power, self._lr_t, self._beta1_t, self._beta2_t, self._epsilon_t]
        return apply_update("ApplyAdam", [r._variable for r in refs] + [_as(h, var) for h in values] + [grad],
                            lazy=self._lazy)

    def _finish(self, update_ops, name_scope):
        graph = get_default_graph()
        beta1_power, beta2_power = self._beta_powers(graph)
        with graph.control_dependencies(update_ops), colocate_with(beta1_power):
            update_beta1 = state_ops.assign(beta1_power, beta1_power * _as(self._beta1_t, beta1_power))
            update_beta2 = state_ops.assign(beta2_power, beta2_power * _as(self._beta2_t, beta2_power))
        return group(*update_ops, update_beta1, update_beta2, name=name_scope)


class AdagradOptimizer(Optimizer):
    """Adagrad (Duchi et al.), TF's update::

        accum += grad^2
        var -= lr * grad / sqrt(accum)

    Slot ``accumulator`` (``<var>/Adagrad``), starting at ``initial_accumulator_value``.

    >>> import dflow as tf
    >>> tf.train.AdagradOptimizer(0.1).get_name()
    'Adagrad'
    """

    def __init__(self, learning_rate, initial_accumulator_value=0.1, use_locking=False, name="Adagrad"):
        if initial_accumulator_value <= 0.0:
            raise ValueError(f"initial_accumulator_value must be positive: {initial_accumulator_value}")
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate
        self._initial_accumulator_value = initial_accumulator_value

    def _create_slots(self, var_list):
        for v in var_list:
            self._filled_slot(v, self._initial_accumulator_value, "accumulator", self._name)

    def _prepare(self):
        self._learning_rate_tensor = _hyper(self._learning_rate, "learning_rate")

    def _apply_dense(self, grad, var):
        accum = self.get_slot(var, "accumulator")
        lr = _as(self._learning_rate_tensor, var)
        return apply_update("ApplyAdagrad", [var._variable, accum._variable, lr, grad])


class RMSPropOptimizer(Optimizer):
    """RMSProp (Hinton's lecture 6e), TF's update::

        ms = decay * ms + (1 - decay) * grad^2
        mom = momentum * mom + lr * grad / sqrt(ms + epsilon)
        var -= mom

    With ``centered=True`` the second moment is centered by a running mean of the
    gradient ``mg = decay * mg + (1 - decay) * grad``: ``sqrt(ms - mg^2 + epsilon)``.
    Slots, named in TF's order: ``rms`` (starting at 1: ``<var>/RMSProp``), ``mg`` when
    centered, ``momentum`` (``<var>/RMSProp_1``, or ``_2`` when centered).

    >>> import dflow as tf
    >>> tf.train.RMSPropOptimizer(0.001, decay=0.9, momentum=0.9).get_name()
    'RMSProp'
    """

    def __init__(self, learning_rate, decay=0.9, momentum=0.0, epsilon=1e-10, use_locking=False,
                 centered=False, name="RMSProp"):
        super().__init__(use_locking, name)
        self._learning_rate, self._decay, self._momentum = learning_rate, decay, momentum
        self._epsilon, self._centered = epsilon, centered

    def _create_slots(self, var_list):
        for v in var_list:
            self._filled_slot(v, 1.0, "rms", self._name)
            if self._centered:
                self._zeros_slot(v, "mg", self._name)
            self._zeros_slot(v, "momentum", self._name)

    def _prepare(self):
        self._hypers = [_hyper(self._learning_rate, "learning_rate"), _hyper(self._decay, "decay"),
                        _hyper(self._momentum, "momentum"), _hyper(self._epsilon, "epsilon")]

    def _apply_dense(self, grad, var):
        names = ["mg", "rms", "momentum"] if self._centered else ["rms", "momentum"]
        refs = [var._variable] + [self.get_slot(var, n)._variable for n in names]
        op_type = "ApplyCenteredRMSProp" if self._centered else "ApplyRMSProp"
        return apply_update(op_type, refs + [_as(h, var) for h in self._hypers] + [grad])


class AdadeltaOptimizer(Optimizer):
    """Adadelta (Zeiler), TF's update::

        accum = rho * accum + (1 - rho) * grad^2
        update = sqrt(accum_update + epsilon) / sqrt(accum + epsilon) * grad
        accum_update = rho * accum_update + (1 - rho) * update^2
        var -= lr * update

    Slots ``accum`` (``<var>/Adadelta``) and ``accum_update`` (``<var>/Adadelta_1``).
    TF's default ``learning_rate=0.001`` (the paper's rule has none: pass 1.0).
    """

    def __init__(self, learning_rate=0.001, rho=0.95, epsilon=1e-8, use_locking=False, name="Adadelta"):
        super().__init__(use_locking, name)
        self._learning_rate, self._rho, self._epsilon = learning_rate, rho, epsilon

    def _create_slots(self, var_list):
        for v in var_list:
            self._zeros_slot(v, "accum", self._name)
            self._zeros_slot(v, "accum_update", self._name)

    def _prepare(self):
        self._hypers = [_hyper(self._learning_rate, "lr"), _hyper(self._rho, "rho"),
                        _hyper(self._epsilon, "epsilon")]

    def _apply_dense(self, grad, var):
        refs = [var._variable] + [self.get_slot(var, n)._variable for n in ("accum", "accum_update")]
        return apply_update("ApplyAdadelta", refs + [_as(h, var) for h in self._hypers] + [grad])


class FtrlOptimizer(Optimizer):
    """FTRL-Proximal (McMahan et al., "Ad Click Prediction"), TF's update::

        g' = grad + 2 * l2_shrinkage * var
        accum_new = accum + grad^2
        linear += g' - (accum_new^-p - accum^-p) / lr * var      (p = learning_rate_power)
        quadratic = accum_new^-p / lr + 2 * l2
        var = (sign(linear) * l1 - linear) / quadratic if |linear| > l1 else 0
        accum = accum_new

    Slots ``accum`` (starting at ``initial_accumulator_value``: ``<var>/Ftrl``) and
    ``linear`` (``<var>/Ftrl_1``).
    """

    def __init__(self, learning_rate, learning_rate_power=-0.5, initial_accumulator_value=0.1,
                 l1_regularization_strength=0.0, l2_regularization_strength=0.0, use_locking=False,
                 name="Ftrl", accum_name=None, linear_name=None, l2_shrinkage_regularization_strength=0.0):
        super().__init__(use_locking, name)
        checks = {"initial_accumulator_value": (initial_accumulator_value, initial_accumulator_value < 0),
                  "learning_rate_power": (learning_rate_power, learning_rate_power > 0),
                  "l1_regularization_strength": (l1_regularization_strength, l1_regularization_strength < 0),
                  "l2_regularization_strength": (l2_regularization_strength, l2_regularization_strength < 0),
                  "l2_shrinkage_regularization_strength": (l2_shrinkage_regularization_strength,
                                                           l2_shrinkage_regularization_strength < 0)}
        for what, (value, bad) in checks.items():
            if bad:
                sign = "<= 0" if what == "learning_rate_power" else ">= 0"
                raise ValueError(f"{what} {value} needs to be {sign}")
        self._learning_rate, self._learning_rate_power = learning_rate, learning_rate_power
        self._initial_accumulator_value = initial_accumulator_value
        self._l1, self._l2 = l1_regularization_strength, l2_regularization_strength
        self._l2_shrinkage = l2_shrinkage_regularization_strength
        self._accum_name, self._linear_name = accum_name, linear_name

    def _create_slots(self, var_list):
        for v in var_list:
            self._filled_slot(v, self._initial_accumulator_value, "accum", self._accum_name or self._name)
            self._zeros_slot(v, "linear", self._linear_name or self._name)

    def _prepare(self):
        self._hypers = [_hyper(self._learning_rate, "learning_rate"),
                        _hyper(self._l1, "l1_regularization_strength"),
                        _hyper(self._l2, "l2_regularization_strength"),
                        _hyper(self._l2_shrinkage, "l2_shrinkage_regularization_strength"),
                        _hyper(self._learning_rate_power, "learning_rate_power")]

    def _apply_dense(self, grad, var):
        refs = [var._variable] + [self.get_slot(var, n)._variable for n in ("accum", "linear")]
        return apply_update("ApplyFtrlV2", refs + [grad] + [_as(h, var) for h in self._hypers])


# ---- learning-rate schedules -------------------------------------------------------------
def exponential_decay(learning_rate, global_step, decay_steps, decay_rate, staircase=False,
                      name=None) -> Tensor:
    """``learning_rate * decay_rate ** (global_step / decay_steps)``, a tensor.

    With ``staircase=True`` the exponent is floored, so the rate drops every
    ``decay_steps`` steps.

    >>> import dflow as tf
    >>> with tf.Graph().as_default():
    ...     step = tf.train.get_or_create_global_step()
    ...     lr = tf.train.exponential_decay(0.1, step, 1000, 0.96, staircase=True)
    ...     with tf.Session() as sess:
    ...         sess.run(tf.global_variables_initializer())
    ...         _ = sess.run(tf.assign(step, 2500))
    ...         round(float(sess.run(lr)), 6)  # 0.1 * 0.96 ** 2
    0.09216
    """
    if global_step is None:
        raise ValueError("global_step is required for exponential_decay.")
    with name_scope(name, "ExponentialDecay", [learning_rate, global_step]) as scope:
        lr = convert_to_tensor(learning_rate, name="learning_rate")
        exponent = math_ops.divide(math_ops.cast(global_step, lr.dtype),
                                   math_ops.cast(decay_steps, lr.dtype))
        if staircase:
            exponent = math_ops.floor(exponent)
        return math_ops.multiply(lr, math_ops.pow(math_ops.cast(decay_rate, lr.dtype), exponent),
                                 name=scope)

