"""``tf.nn.rnn_cell`` (and ``tf.contrib.rnn``): recurrent cells as TensorFlow 1.x names them.

A cell maps ``(inputs, state)`` to ``(output, new_state)`` for one time step. It
creates its variables on its first call, under the variable scope open then and
its own name (``rnn/basic_lstm_cell/kernel:0``, ``.../bias:0``), and uses the same
variables on every later call, as TF 1.x's layer-based cells do. The LSTM's
kernel holds the gates in TF's order ``i, j, f, o`` (input gate, new input,
forget gate, output gate), so a TF checkpoint's numbers mean the same here.

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     cell = tf.nn.rnn_cell.BasicLSTMCell(4)
...     x = tf.placeholder(tf.float32, [None, 3])
...     with tf.variable_scope("rnn"):
...         out, state = cell(x, cell.zero_state(2, tf.float32))
...     [v.name for v in tf.trainable_variables()]
['rnn/basic_lstm_cell/kernel:0', 'rnn/basic_lstm_cell/bias:0']
"""

from __future__ import annotations

import collections
import re

from . import dtypes
from .graph import Tensor, as_shape, convert_to_tensor, get_default_graph
from .layers import check_input_spec
from .ops import array_ops, math_ops, nn_ops
from .ops.embedding_ops import static_dim
from .variables import constant_initializer, get_variable, variable_scope, zeros_initializer

__all__ = ["RNNCell", "LayerRNNCell", "BasicRNNCell", "BasicLSTMCell", "LSTMCell", "GRUCell", "MultiRNNCell",
           "DropoutWrapper", "ResidualWrapper", "OutputProjectionWrapper", "LSTMStateTuple"]


class LSTMStateTuple(collections.namedtuple("LSTMStateTuple", ("c", "h"))):
    """An LSTM's state: the cell state ``c`` and the output ``h``."""

    __slots__ = ()

    @property
    def dtype(self):
        if self.c.dtype != self.h.dtype:
            raise TypeError(f"inconsistent LSTMStateTuple dtypes: {self.c.dtype} and {self.h.dtype}")
        return self.c.dtype


# ---- nested states (a tensor, or tuples of them) ----------------------------------------------
def flatten(structure) -> list:
    if isinstance(structure, tuple | list):
        return [leaf for item in structure for leaf in flatten(item)]
    return [structure]


def map_structure(fn, *structures):
    """``fn`` over the leaves of equally nested tuples, keeping the (named) tuple types."""
    first = structures[0]
    if isinstance(first, tuple | list):
        items = [map_structure(fn, *parts) for parts in zip(*structures)]
        if isinstance(first, list):
            return items
        return type(first)(*items) if hasattr(first, "_fields") else tuple(items)
    return fn(*structures)


# ---- the base class ----------------------------------------------------------------------------
class RNNCell:
    """A cell: ``output, new_state = cell(inputs, state)``. Subclasses give ``state_size``,
    ``output_size``, ``build(inputs_shape)`` (creating variables with :meth:`add_variable`)
    and ``call(inputs, state)``, as TF 1.x's; an old-style subclass overriding ``__call__``
    works too."""

    @property
    def _base_name(self) -> str:
        """The scope of a cell not given a name: its class's name in snake case, as TF names a
        layer (``STLSTMCell``: ``stlstm_cell``); dflow's cells give TF's names as class attributes."""
        words = re.sub(r"(.)([A-Z][a-z0-9]+)", r"\1_\2", type(self).__name__)
        return re.sub(r"([a-z])([A-Z])", r"\1_\2", words).lower()

    def __init__(self, trainable=True, name=None, dtype=None, _reuse=None, **_layer_kwargs):
        self._reuse = _reuse
        self._name = name
        self._dtype = dtypes.as_dtype(dtype) if dtype is not None else None
        self._scope_name = None  # the variable scope the variables went to, once built
        self._trainable = trainable
        self.built = False
        self.trainable_weights: list = []

    @property
    def state_size(self):
        raise NotImplementedError

    @property
    def output_size(self):
        raise NotImplementedError

    @property
    def variables(self) -> list:
        return list(self.trainable_weights)

    weights = variables

    def zero_state(self, batch_size, dtype):
        """Zeros shaped like the state, ``[batch_size, size]`` per leaf (``batch_size`` may be a
        tensor, e.g. ``tf.shape(x)[0]``)."""
        with get_default_graph().name_scope(type(self).__name__ + "ZeroState"):
            return zero_state_tensors(self.state_size, batch_size, dtype)

    def __call__(self, inputs, state, scope=None):
        inputs = convert_to_tensor(inputs)
        check_input_spec(self, inputs, self._name or self._base_name)
        if self._scope_name is None:
            with variable_scope(scope if scope is not None else self._name or self._base_name,
                                reuse=self._reuse) as vs:
                self._scope_name = vs.name
                self.build(inputs.shape)
                self.built = True
                return self.call(inputs, state)
        with get_default_graph().name_scope(self._scope_name.rsplit("/", 1)[-1]):
            return self.call(inputs, state)

    def build(self, inputs_shape) -> None:
        pass

    def call(self, inputs, state):
        raise NotImplementedError

    def add_variable(self, name, shape, dtype=None, initializer=None, regularizer=None, trainable=True,
                     **_ignored):
        """A variable ``<cell scope>/name``, made (or reused) with ``tf.get_variable``."""
        var = get_variable(name, shape, dtype=dtype or self._dtype or dtypes.float32,
                           initializer=initializer, regularizer=regularizer,
                           trainable=trainable and self._trainable)
        self.trainable_weights.append(var)
        return var

    add_weight = add_variable


def zero_state_tensors(state_size, batch_size, dtype):
    """Zeros of ``[batch_size, *size]`` for each leaf ``size`` (an int or a shape) of
    ``state_size``: TF's ``rnn_cell_impl._zero_state_tensors``, which attention wrappers call."""
    dtype = dtypes.as_dtype(dtype)
    return map_structure(lambda size: _zeros(batch_size, size, dtype), state_size)


def _zeros(batch_size, size, dtype):
    dims = [int(size)] if isinstance(size, int) else as_shape(size).as_list()
    if isinstance(batch_size, Tensor):
        zeros = array_ops.zeros(array_ops.stack([batch_size, *dims]), dtype)
        zeros.set_shape([None, *dims])  # the rank and units are known, only the batch is not
        return zeros
    return array_ops.zeros([int(batch_size), *dims], dtype)


def _input_depth(inputs_shape, cell) -> int:
    depth = inputs_shape[-1] if inputs_shape.ndims is not None else None
    depth = getattr(depth, "value", depth)  # an int, or TF's Dimension
    if depth is None:
        raise ValueError(f"{type(cell).__name__} needs the inputs' last dimension at graph-build time, "
                         f"saw shape {inputs_shape}; give the placeholder a static feature size")
    return int(depth)


def _linear(inputs: list, kernel, bias=None):
    """``concat(inputs, 1) @ kernel + bias``: every gate in one matmul."""
    joined = inputs[0] if len(inputs) == 1 else array_ops.concat(inputs, 1)
    out = math_ops.matmul(joined, kernel)
    return out if bias is None else nn_ops.bias_add(out, bias)


#: TF 1.5+'s base of cells that make their variables in ``build`` with ``add_variable``, as
#: every dflow cell does: custom cells written against it subclass this
LayerRNNCell = RNNCell


def _activation(fn):
    return math_ops.tanh if fn is None else fn


# ---- the cells ---------------------------------------------------------------------------------
class BasicRNNCell(RNNCell):
    """``h = activation(W [x, h] + b)``; the output is the new state."""

    _base_name = "basic_rnn_cell"

    def __init__(self, num_units, activation=None, reuse=None, name=None, dtype=None):
        super().__init__(name=name, dtype=dtype, _reuse=reuse)
        self._num_units = int(num_units)
        self._activation = _activation(activation)

    @property
    def state_size(self):
        return self._num_units

    @property
    def output_size(self):
        return self._num_units

    def build(self, inputs_shape):
        input_depth = _input_depth(inputs_shape, self)
        self._kernel = self.add_variable("kernel", [input_depth + self._num_units, self._num_units])
        self._bias = self.add_variable("bias", [self._num_units], initializer=zeros_initializer())

    def call(self, inputs, state):
        output = self._activation(_linear([inputs, state], self._kernel, self._bias))
        return output, output


class BasicLSTMCell(RNNCell):
    """The LSTM of Zaremba et al. (no peepholes, no projection), as TF's ``BasicLSTMCell``::

        i, j, f, o = split(W [x, h] + b, 4)
        c' = c * sigmoid(f + forget_bias) + sigmoid(i) * tanh(j)
        h' = tanh(c') * sigmoid(o)

    The state is ``LSTMStateTuple(c, h)`` (or ``concat([c, h], 1)`` when
    ``state_is_tuple=False``).
    """

    _base_name = "basic_lstm_cell"

    def __init__(self, num_units, forget_bias=1.0, state_is_tuple=True, activation=None, reuse=None,
                 name=None, dtype=None):
        super().__init__(name=name, dtype=dtype, _reuse=reuse)
        self._num_units = int(num_units)
        self._forget_bias = forget_bias
        self._state_is_tuple = state_is_tuple
        self._activation = _activation(activation)

    @property
    def state_size(self):
        units = self._num_units
        return LSTMStateTuple(units, units) if self._state_is_tuple else 2 * units

    @property
    def output_size(self):
        return self._num_units

    def build(self, inputs_shape):
        input_depth = _input_depth(inputs_shape, self)
        self._kernel = self.add_variable("kernel", [input_depth + self._num_units, 4 * self._num_units])
        self._bias = self.add_variable("bias", [4 * self._num_units], initializer=zeros_initializer())

    def call(self, inputs, state):
        c, h = _lstm_state(state, self._state_is_tuple, self._num_units)
        i, j, f, o = array_ops.split(_linear([inputs, h], self._kernel, self._bias), 4, axis=1)
        new_c = c * math_ops.sigmoid(f + self._forget_bias) + math_ops.sigmoid(i) * self._activation(j)
        new_h = self._activation(new_c) * math_ops.sigmoid(o)
        return new_h, _lstm_new_state(new_c, new_h, self._state_is_tuple)


def _lstm_state(state, is_tuple, c_units):
    if is_tuple:
        return state
    return array_ops.split(state, [c_units, static_dim(state, -1) - c_units], axis=1)


def _lstm_new_state(c, h, is_tuple):
    return LSTMStateTuple(c, h) if is_tuple else array_ops.concat([c, h], 1)


def _clip(x, limit):
    return math_ops.minimum(math_ops.maximum(x, -limit), limit)


class LSTMCell(RNNCell):
    """TF's ``LSTMCell``: the basic LSTM plus optional peepholes (``w_f_diag``, ``w_i_diag``,
    ``w_o_diag``), cell clipping, and a projection of the output to ``num_proj`` units
    (``projection/kernel``). The state is ``LSTMStateTuple(c, m)``."""

    _base_name = "lstm_cell"

    def __init__(self, num_units, use_peepholes=False, cell_clip=None, initializer=None, num_proj=None,
                 proj_clip=None, num_unit_shards=None, num_proj_shards=None, forget_bias=1.0,
                 state_is_tuple=True, activation=None, reuse=None, name=None, dtype=None):
        super().__init__(name=name, dtype=dtype, _reuse=reuse)
        if num_unit_shards is not None or num_proj_shards is not None:
            raise ValueError("LSTMCell(num_unit_shards=, num_proj_shards=) is not supported by dflow "
                             "(deprecated in TF 1.x too): leave them unset")
        self._num_units = int(num_units)
        self._use_peepholes = use_peepholes
        self._cell_clip, self._proj_clip = cell_clip, proj_clip
        self._initializer = initializer
        self._num_proj = None if num_proj is None else int(num_proj)
        self._forget_bias = forget_bias
        self._state_is_tuple = state_is_tuple
        self._activation = _activation(activation)

    @property
    def state_size(self):
        out = self._num_proj or self._num_units
        return LSTMStateTuple(self._num_units, out) if self._state_is_tuple else self._num_units + out

    @property
    def output_size(self):
        return self._num_proj or self._num_units

    def build(self, inputs_shape):
        input_depth, units, out = _input_depth(inputs_shape, self), self._num_units, self.output_size
        init = self._initializer
        self._kernel = self.add_variable("kernel", [input_depth + out, 4 * units], initializer=init)
        self._bias = self.add_variable("bias", [4 * units], initializer=zeros_initializer())
        if self._use_peepholes:
            self._w_f, self._w_i, self._w_o = (self.add_variable(n, [units], initializer=init)
                                               for n in ("w_f_diag", "w_i_diag", "w_o_diag"))
        if self._num_proj is not None:
            with variable_scope("projection"):
                self._projection = self.add_variable("kernel", [units, self._num_proj], initializer=init)

    def call(self, inputs, state):
        c_prev, m_prev = _lstm_state(state, self._state_is_tuple, self._num_units)
        i, j, f, o = array_ops.split(_linear([inputs, m_prev], self._kernel, self._bias), 4, axis=1)
        sigmoid, act = math_ops.sigmoid, self._activation
        if self._use_peepholes:
            c = (sigmoid(f + self._forget_bias + self._w_f * c_prev) * c_prev
                 + sigmoid(i + self._w_i * c_prev) * act(j))
        else:
            c = sigmoid(f + self._forget_bias) * c_prev + sigmoid(i) * act(j)
        if self._cell_clip is not None:
            c = _clip(c, self._cell_clip)
        m = sigmoid(o + self._w_o * c if self._use_peepholes else o) * act(c)
        if self._num_proj is not None:
            m = math_ops.matmul(m, self._projection)
            if self._proj_clip is not None:
                m = _clip(m, self._proj_clip)
        return m, _lstm_new_state(c, m, self._state_is_tuple)


class GRUCell(RNNCell):
    """The gated recurrent unit (Cho et al. 2014), as TF's ``GRUCell``::

        r, u = split(sigmoid(W_g [x, h] + b_g), 2)      # gates/kernel, gates/bias (init 1.0)
        c = tanh(W_c [x, r * h] + b_c)                 # candidate/kernel, candidate/bias
        h' = u * h + (1 - u) * c
    """

    _base_name = "gru_cell"

    def __init__(self, num_units, activation=None, reuse=None, kernel_initializer=None,
                 bias_initializer=None, name=None, dtype=None):
        super().__init__(name=name, dtype=dtype, _reuse=reuse)
        self._num_units = int(num_units)
        self._activation = _activation(activation)
        self._kernel_initializer = kernel_initializer
        self._bias_initializer = bias_initializer

    @property
    def state_size(self):
        return self._num_units

    @property
    def output_size(self):
        return self._num_units

    def build(self, inputs_shape):
        units, depth = self._num_units, _input_depth(inputs_shape, self) + self._num_units
        init = self._kernel_initializer
        with variable_scope("gates"):
            self._gate_kernel = self.add_variable("kernel", [depth, 2 * units], initializer=init)
            self._gate_bias = self.add_variable(
                "bias", [2 * units], initializer=self._bias_initializer or constant_initializer(1.0))
        with variable_scope("candidate"):
            self._candidate_kernel = self.add_variable("kernel", [depth, units], initializer=init)
            self._candidate_bias = self.add_variable(
                "bias", [units], initializer=self._bias_initializer or zeros_initializer())

    def call(self, inputs, state):
        gates = math_ops.sigmoid(_linear([inputs, state], self._gate_kernel, self._gate_bias))
        r, u = array_ops.split(gates, 2, axis=1)
        c = self._activation(_linear([inputs, r * state], self._candidate_kernel, self._candidate_bias))
        new_h = u * state + (1.0 - u) * c
        return new_h, new_h


class MultiRNNCell(RNNCell):
    """Cells stacked: layer ``k`` reads layer ``k-1``'s output; variables under
    ``multi_rnn_cell/cell_k/``. The state is the tuple of the cells' states."""

    _base_name = "multi_rnn_cell"

    def __init__(self, cells, state_is_tuple=True):
        super().__init__()
        self._cells = list(cells)
        if not self._cells:
            raise ValueError("MultiRNNCell needs at least one cell")
        if not state_is_tuple:
            raise ValueError("MultiRNNCell(state_is_tuple=False) is not supported by dflow (deprecated "
                             "in TF 1.x): use the default state_is_tuple=True")
        if len({id(c) for c in self._cells}) != len(self._cells):
            raise ValueError("MultiRNNCell got the same cell object twice, which would share its "
                             "variables between layers; build a new cell per layer: "
                             "MultiRNNCell([make_cell() for _ in range(n)])")

    @property
    def state_size(self):
        return tuple(c.state_size for c in self._cells)

    @property
    def output_size(self):
        return self._cells[-1].output_size

    @property
    def variables(self):
        return [v for c in self._cells for v in c.variables]

    def zero_state(self, batch_size, dtype):
        with get_default_graph().name_scope("MultiRNNCellZeroState"):
            return tuple(c.zero_state(batch_size, dtype) for c in self._cells)

    def __call__(self, inputs, state, scope=None):
        if self._scope_name is None:
            with variable_scope(scope if scope is not None else self._base_name) as vs:
                self._scope_name = vs.name
                return self.call(inputs, state)
        with get_default_graph().name_scope(self._scope_name.rsplit("/", 1)[-1]):
            return self.call(inputs, state)

    def call(self, inputs, state):
        output, new_states = inputs, []
        for index, (cell, cell_state) in enumerate(zip(self._cells, state)):
            with variable_scope(f"cell_{index}"):
                output, new_state = cell(output, cell_state)
            new_states.append(new_state)
        return output, tuple(new_states)


class _Wrapper(RNNCell):
    """A cell around another: no variables or scope of its own (TF names the wrapped cell's
    variables as if it were unwrapped)."""

    def __init__(self, cell):
        super().__init__()
        self._cell = cell

    @property
    def state_size(self):
        return self._cell.state_size

    @property
    def output_size(self):
        return self._cell.output_size

    @property
    def variables(self):
        return self._cell.variables

    def zero_state(self, batch_size, dtype):
        return self._cell.zero_state(batch_size, dtype)

    def __call__(self, inputs, state, scope=None):
        return self.call(convert_to_tensor(inputs), state, scope)


class DropoutWrapper(_Wrapper):
    """Dropout on a cell's inputs, outputs and (the ``h`` part of) its state, a fresh mask each
    step. Keep probabilities may be tensors (a placeholder set to 1.0 at test time)."""

    def __init__(self, cell, input_keep_prob=1.0, output_keep_prob=1.0, state_keep_prob=1.0,
                 variational_recurrent=False, input_size=None, dtype=None, seed=None,
                 dropout_state_filter_visitor=None):
        super().__init__(cell)
        if variational_recurrent:
            raise ValueError("DropoutWrapper(variational_recurrent=True) is not supported by dflow: "
                             "use the default (a new mask at every step)")
        if dropout_state_filter_visitor is not None:
            raise ValueError("DropoutWrapper(dropout_state_filter_visitor=) is not supported by dflow: "
                             "leave it unset (dropout then skips an LSTM's c, as TF's default does)")
        self._keep = (input_keep_prob, output_keep_prob, state_keep_prob)
        self._seed = seed

    def _drop(self, x, keep_prob):
        if isinstance(keep_prob, int | float) and keep_prob == 1.0:
            return x
        return nn_ops.dropout(x, keep_prob, seed=self._seed)

    def call(self, inputs, state, scope=None):
        keep_in, keep_out, keep_state = self._keep
        output, new_state = self._cell(self._drop(inputs, keep_in), state, scope=scope)
        if not (isinstance(keep_state, int | float) and keep_state == 1.0):
            new_state = _drop_state(new_state, lambda t: self._drop(t, keep_state))
        return self._drop(output, keep_out), new_state


def _drop_state(state, drop):
    """Dropout on every state tensor but an LSTM's memory ``c`` (TF's default filter)."""
    if isinstance(state, LSTMStateTuple):
        return LSTMStateTuple(state.c, _drop_state(state.h, drop))
    if isinstance(state, tuple | list):
        return type(state)(_drop_state(s, drop) for s in state)
    return drop(state)


class OutputProjectionWrapper(RNNCell):
    """The cell's output projected to ``output_size`` units (``kernel``, ``bias`` in the
    wrapper's scope ``output_projection_wrapper/``, the cell's variables inside it)."""

    _base_name = "output_projection_wrapper"

    def __init__(self, cell, output_size, activation=None, reuse=None):
        super().__init__(_reuse=reuse)
        self._cell, self._output_size, self._projection_activation = cell, int(output_size), activation

    @property
    def state_size(self):
        return self._cell.state_size

    @property
    def output_size(self):
        return self._output_size

    def zero_state(self, batch_size, dtype):
        return self._cell.zero_state(batch_size, dtype)

    def build(self, inputs_shape):
        pass  # the kernel's input size is the cell's output size, known after the cell runs

    def call(self, inputs, state):
        output, new_state = self._cell(inputs, state)
        if not hasattr(self, "_kernel"):
            self._kernel = self.add_variable("kernel", [self._cell.output_size, self._output_size])
            self._bias = self.add_variable("bias", [self._output_size], initializer=zeros_initializer())
        projected = _linear([output], self._kernel, self._bias)
        if self._projection_activation is not None:
            projected = self._projection_activation(projected)
        return projected, new_state


class ResidualWrapper(_Wrapper):
    """``output = cell(inputs) + inputs`` (the input and output sizes must agree)."""

    def call(self, inputs, state, scope=None):
        output, new_state = self._cell(inputs, state, scope=scope)
        return output + inputs, new_state
