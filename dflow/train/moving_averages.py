"""``tf.train.ExponentialMovingAverage``: shadow copies of variables (or tensors) that
follow them with exponential decay, as TF 1.x keeps them.

``apply(var_list)`` creates, beside each variable, a non-trainable shadow variable
``<var>/ExponentialMovingAverage`` (initialized to the variable's initial value; a
tensor's shadow starts at zero) and returns one op that moves every shadow toward
its variable::

    shadow -= (shadow - variable) * (1 - decay)

With ``num_updates`` (the global step), ``decay = min(decay, (1 + n) / (10 + n))``, so
the averages move quickly at first. ``variables_to_restore()`` maps the shadows'
names to the variables, so a ``Saver`` built from it loads the averages into the model
for evaluation.

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     w = tf.Variable(0.0, name="w")
...     ema = tf.train.ExponentialMovingAverage(0.5)
...     update = ema.apply([w])
...     with tf.Session() as sess:
...         sess.run(tf.global_variables_initializer())
...         _ = sess.run(w.assign(4.0))
...         _ = sess.run(update)
...         ema.average_name(w), float(sess.run(ema.average(w)))
('w/ExponentialMovingAverage', 2.0)
"""

from __future__ import annotations

from ..graph import GraphKeys, Operation, Tensor, colocate_with, convert_to_tensor, get_default_graph
from ..ops import array_ops, math_ops, state_ops
from ..variables import Variable, global_variables, group, trainable_variables

__all__ = ["ExponentialMovingAverage", "assign_moving_average", "moving_average_variables"]


def moving_average_variables(scope=None) -> list[Variable]:
    """The variables ``ExponentialMovingAverage.apply`` has averaged (not their shadows)."""
    return get_default_graph().get_collection(GraphKeys.MOVING_AVERAGE_VARIABLES, scope)


def assign_moving_average(variable: Variable, value, decay, zero_debias=False, name=None) -> Tensor:
    """``variable -= (variable - value) * (1 - decay)``, beside ``variable``."""
    if zero_debias:
        raise ValueError("assign_moving_average(zero_debias=True) is not supported by dflow; "
                         "use zero_debias=False (ExponentialMovingAverage's default)")
    graph = variable.graph
    with graph.name_scope(name or "AssignMovingAvg"), colocate_with(variable):
        one_minus_decay = math_ops.cast(1.0 - convert_to_tensor(decay), variable.dtype)
        return state_ops.assign_sub(variable, (variable - value) * one_minus_decay)


class ExponentialMovingAverage:
    """Moving averages of variables or tensors.

    >>> import dflow as tf
    >>> with tf.Graph().as_default():
    ...     w = tf.Variable(0.0, name="w")
    ...     train_op = tf.assign_add(w, 1.0)
    ...     ema = tf.train.ExponentialMovingAverage(0.5)
    ...     with tf.control_dependencies([train_op]):
    ...         train_op = ema.apply(tf.trainable_variables())
    ...     saver = tf.train.Saver(ema.variables_to_restore())  # at evaluation: w from its average
    ...     with tf.Session() as sess:
    ...         sess.run(tf.global_variables_initializer())
    ...         for _ in range(2):
    ...             sess.run(train_op)
    ...         float(sess.run(ema.average(w)))  # (0 * 0.5 + 1 * 0.5) * 0.5 + 2 * 0.5
    1.25
    """

    def __init__(self, decay, num_updates=None, zero_debias=False, name="ExponentialMovingAverage"):
        if zero_debias:
            raise ValueError("ExponentialMovingAverage(zero_debias=True) is not supported by dflow; "
                             "leave zero_debias=False (TF's default)")
        self._decay = decay
        self._num_updates = num_updates
        self._name = name
        self._averages: dict = {}  # variable or tensor -> its shadow Variable

    @property
    def name(self) -> str:
        return self._name

    def apply(self, var_list=None) -> Operation:
        """Create the shadows of ``var_list`` (default: the trainable variables) and return
        the op that updates them all."""
        graph = get_default_graph()
        var_list = trainable_variables() if var_list is None else list(var_list)
        for var in var_list:
            self._check(var)
        for var in var_list:
            self._averages[var] = self._create_shadow(var)
        with graph.name_scope(self._name) as scope:
            decay = convert_to_tensor(self._decay, name="decay")
            if self._num_updates is not None:
                n = math_ops.cast(self._num_updates, decay.dtype, name="num_updates")
                decay = math_ops.minimum(decay, (1.0 + n) / (10.0 + n))
            updates = [assign_moving_average(self._averages[var], var, decay) for var in var_list]
            return group(*updates, name=scope)

    def _check(self, var) -> None:
        if not isinstance(var, (Variable, Tensor)):
            raise TypeError(f"ExponentialMovingAverage.apply needs variables or tensors, got {var!r}")
        if not var.dtype.is_floating:
            raise TypeError(f"The variables must be half, float, or double: {var.name}")
        if var in self._averages:
            raise ValueError(f"Moving average already computed for: {var.name}")

    def _create_shadow(self, var) -> Variable:
        """``<var>/<name>``, non-trainable, beside ``var``: a variable's starts at its initial
        value, a tensor's at zero (TF's ``slot_creator``)."""
        graph = var.graph
        if isinstance(var, Variable):
            initial = var.initial_value
            graph.add_to_collection(GraphKeys.MOVING_AVERAGE_VARIABLES, var)
        else:
            shape = var.shape
            initial = (lambda: array_ops.zeros(shape.as_list(), var.dtype)) if shape.is_fully_defined() \
                else (lambda: array_ops.zeros_like(var))
        with graph.name_scope(None), colocate_with(var):
            return Variable(initial, trainable=False, name=self.average_name(var),
                            validate_shape=var.shape.is_fully_defined())

    def average(self, var) -> Variable | None:
        """The shadow of ``var``, or None if ``apply`` has not averaged it."""
        return self._averages.get(var)

    def average_name(self, var) -> str:
        """The name of ``var``'s shadow (``<var op name>/<name>``), also its name in checkpoints."""
        return f"{var.op.name}/{self._name}"

    def variables_to_restore(self, moving_avg_variables=None) -> dict[str, Variable]:
        """``{name in the checkpoint: variable}``: each averaged variable reads its shadow's
        value; every other global variable its own."""
        if moving_avg_variables is None:
            moving_avg_variables = trainable_variables() + moving_average_variables()
        averaged = list(dict.fromkeys(moving_avg_variables))
        names = {self.average_name(v): v for v in averaged}
        averaged_names = {v.name for v in averaged}
        for v in global_variables():
            if v.name not in averaged_names and v.op.name not in names:
                names[v.op.name] = v
        return names
