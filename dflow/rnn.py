"""Recurrent networks over a sequence: ``tf.nn.static_rnn``, ``dynamic_rnn`` and the
bidirectional forms.

dflow unrolls an RNN over the time steps known at graph-build time: the graph
holds one cell call per step, all sharing the cell's variables. Where the number
of steps is known only when the step runs (a ``padded_batch`` of sentences),
``dynamic_rnn`` is a ``while_loop`` over TensorArrays, as TF builds it, with the
same numbers and gradients. The numbers are TF's, including
``sequence_length``: past an example's length its outputs are zeros and its
state is carried through unchanged, so the final state is the one at its last
step.

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     x = tf.placeholder(tf.float32, [None, 8, 8])       # 8 steps of 8 features
...     cell = tf.nn.rnn_cell.BasicLSTMCell(16)
...     outputs, state = tf.nn.static_rnn(cell, tf.unstack(x, 8, 1), dtype=tf.float32)
...     (len(outputs), outputs[-1].shape.as_list())
(8, [None, 16])
"""

from __future__ import annotations

from . import dtypes
from .graph import Tensor, convert_to_tensor, get_default_graph
from .ops import array_ops, math_ops
from .ops.embedding_ops import reverse_sequence, static_dim
from .rnn_cell import map_structure
from .variables import get_variable_scope, variable_scope

__all__ = ["static_rnn", "dynamic_rnn", "bidirectional_dynamic_rnn", "static_bidirectional_rnn"]


def _batch_size(x):
    batch = static_dim(x, 0)
    return array_ops.shape(x)[0] if batch is None else batch


def _initial_state(cell, initial_state, dtype, first_input):
    if initial_state is not None:
        return initial_state
    if dtype is None:
        raise ValueError("If no initial_state is provided, dtype must be specified")
    return cell.zero_state(_batch_size(first_input), dtypes.as_dtype(dtype))


def _unroll(cell, inputs, state, sequence_length, first_step=0):
    """The cell over a list of per-step inputs (the first at step ``first_step``, an int or a
    loop's counter): ``(outputs, final_state)``."""
    if sequence_length is not None:
        sequence_length = math_ops.cast(convert_to_tensor(sequence_length), dtypes.int32)
        running = array_ops.expand_dims(sequence_length, 1)  # (batch, 1): broadcasts over units
    outputs = []
    for index, x in enumerate(inputs):
        if index == 1:  # as TF: later steps reuse what the first created (old-style cells ask get_variable)
            get_variable_scope().reuse_variables()
        output, new_state = cell(x, state)
        if sequence_length is not None:
            done = math_ops.greater_equal(first_step + index, running)
            output = math_ops.where(done, array_ops.zeros_like(output), output)  # (0, not -0 or NaN)
            new_state = map_structure(lambda old, new, done=done: math_ops.where(done, old, new),
                                      state, new_state)
        outputs.append(output)
        state = new_state
    return outputs, state


def _step_list(inputs, what) -> list:
    if isinstance(inputs, Tensor) or not isinstance(inputs, list | tuple) or not inputs:
        raise TypeError(f"{what} needs a non-empty list of [batch, depth] tensors, one per time step, "
                        f"got {inputs!r}; split a [batch, time, depth] tensor with tf.unstack(x, steps, 1) "
                        "or use tf.nn.dynamic_rnn")
    return [convert_to_tensor(x) for x in inputs]


def static_rnn(cell, inputs, initial_state=None, dtype=None, sequence_length=None, scope=None):
    """The cell over a list of ``[batch, depth]`` inputs: ``(outputs list, final state)``.

    >>> import dflow as tf
    >>> with tf.Graph().as_default():
    ...     x = tf.unstack(tf.zeros([4, 28, 28]), 28, 1)  # 28 steps of [batch, 28]
    ...     outputs, states = tf.nn.static_rnn(tf.nn.rnn_cell.BasicLSTMCell(16), x, dtype=tf.float32)
    ...     len(outputs), outputs[-1].shape.as_list()
    (28, [4, 16])
    """
    inputs = _step_list(inputs, "static_rnn")
    with variable_scope(scope or "rnn"):
        state = _initial_state(cell, initial_state, dtype, inputs[0])
        return _unroll(cell, inputs, state, sequence_length)


def _time_steps(inputs, time_axis, what):
    inputs = convert_to_tensor(inputs)
    steps = static_dim(inputs, time_axis)
    if steps is None:
        raise ValueError(f"{what}: dflow unrolls the RNN over the time steps known at graph-build "
                         f"time, but the inputs' time dimension (axis {time_axis}) is unknown "
                         f"(shape {inputs.shape}); give the placeholder a fixed number of steps "
                         "(pad the sequences and pass sequence_length)")
    return array_ops.unstack(inputs, steps, time_axis)


def dynamic_rnn(cell, inputs, sequence_length=None, initial_state=None, dtype=None,
                parallel_iterations=None, swap_memory=False, time_major=False, scope=None):
    """The cell over ``inputs`` of shape ``[batch, time, depth]`` (``[time, batch, depth]``
    with ``time_major``): ``(outputs, final state)``, the outputs stacked the same way.

    >>> import dflow as tf
    >>> with tf.Graph().as_default():
    ...     x, n = tf.zeros([4, 10, 8]), tf.constant([10, 7, 3, 1])
    ...     cell = tf.nn.rnn_cell.GRUCell(16)
    ...     outputs, state = tf.nn.dynamic_rnn(cell, x, sequence_length=n, dtype=tf.float32)
    ...     outputs.shape.as_list(), state.shape.as_list()
    ([4, 10, 16], [4, 16])
    """
    time_axis = 0 if time_major else 1
    inputs = convert_to_tensor(inputs)
    if inputs.shape.ndims is None or inputs.shape.ndims < 3:
        raise ValueError("dynamic_rnn takes [batch, time, depth] inputs ([time, batch, depth] with "
                         f"time_major), got shape {inputs.shape}")
    if static_dim(inputs, time_axis) is None:  # a while_loop over the steps, as TF builds it
        with variable_scope(scope or "rnn"):
            steps = inputs if time_major else _swap_time_and_batch(inputs)
            state = _initial_state(cell, initial_state, dtype, steps[0])
            outputs, state = _loop(cell, steps, state, sequence_length)
            return outputs if time_major else _swap_time_and_batch(outputs), state
    steps = _time_steps(inputs, time_axis, "dynamic_rnn")
    with variable_scope(scope or "rnn"):
        state = _initial_state(cell, initial_state, dtype, steps[0])
        outputs, state = _unroll(cell, steps, state, sequence_length)
        return array_ops.stack(outputs, axis=time_axis), state


def _swap_time_and_batch(x):
    return array_ops.transpose(x, [1, 0, *range(2, x.shape.ndims)])


def _loop(cell, inputs, state, sequence_length):
    """The cell over time-major ``inputs`` whose number of steps is known only when the step runs
    (at least one): the first step unrolled (it makes the cell's variables, which the loop then
    reads from outside), the others in a ``while_loop`` over TensorArrays."""
    from .ops.control_flow_ops import while_loop
    from .ops.tensor_array_ops import TensorArray

    count = array_ops.shape(inputs)[0]
    slices = TensorArray(inputs.dtype, size=count, element_shape=inputs.shape[1:]).unstack(inputs)
    (first,), state = _unroll(cell, [slices.read(0)], state, sequence_length)
    outputs = TensorArray(first.dtype, size=count, element_shape=first.shape).write(0, first)
    get_variable_scope().reuse_variables()

    def body(step, state, outputs):
        (output,), state = _unroll(cell, [slices.read(step)], state, sequence_length, first_step=step)
        return step + 1, state, outputs.write(step, output)

    _, state, outputs = while_loop(lambda step, state, outputs: step < count, body, [1, state, outputs])
    return outputs.stack(), state


def _reversed_in_time(x, sequence_length, time_axis):
    if sequence_length is None:
        return array_ops.reverse(x, [time_axis])
    return reverse_sequence(x, math_ops.cast(convert_to_tensor(sequence_length), dtypes.int32),
                            seq_axis=time_axis, batch_axis=1 - time_axis)


def bidirectional_dynamic_rnn(cell_fw, cell_bw, inputs, sequence_length=None, initial_state_fw=None,
                              initial_state_bw=None, dtype=None, parallel_iterations=None,
                              swap_memory=False, time_major=False, scope=None):
    """A forward and a backward RNN over ``inputs`` (the backward one over each example's
    first ``sequence_length`` steps reversed): ``((output_fw, output_bw), (state_fw, state_bw))``,
    the backward outputs put back in forward time order."""
    time_axis = 0 if time_major else 1
    inputs = convert_to_tensor(inputs)
    with variable_scope(scope or "bidirectional_rnn"):
        with variable_scope("fw") as fw_scope:
            output_fw, state_fw = dynamic_rnn(cell_fw, inputs, sequence_length, initial_state_fw, dtype,
                                              time_major=time_major, scope=fw_scope)
        with variable_scope("bw") as bw_scope:
            backward = _reversed_in_time(inputs, sequence_length, time_axis)
            reversed_out, state_bw = dynamic_rnn(cell_bw, backward, sequence_length, initial_state_bw,
                                                 dtype, time_major=time_major, scope=bw_scope)
    output_bw = _reversed_in_time(reversed_out, sequence_length, time_axis)
    return (output_fw, output_bw), (state_fw, state_bw)


def static_bidirectional_rnn(cell_fw, cell_bw, inputs, initial_state_fw=None, initial_state_bw=None,
                             dtype=None, sequence_length=None, scope=None):
    """Like :func:`bidirectional_dynamic_rnn` over a list of inputs: ``(outputs, state_fw,
    state_bw)``, each output the forward and backward outputs of its step concatenated."""
    inputs = _step_list(inputs, "static_bidirectional_rnn")
    with variable_scope(scope or "bidirectional_rnn"):
        with variable_scope("fw") as fw_scope:
            output_fw, state_fw = static_rnn(cell_fw, inputs, initial_state_fw, dtype, sequence_length,
                                             scope=fw_scope)
        with variable_scope("bw") as bw_scope:
            stacked = array_ops.stack(inputs, axis=0)
            backward = array_ops.unstack(_reversed_in_time(stacked, sequence_length, 0), len(inputs), 0)
            reversed_out, state_bw = static_rnn(cell_bw, backward, initial_state_bw, dtype, sequence_length,
                                                scope=bw_scope)
    output_bw = array_ops.unstack(_reversed_in_time(array_ops.stack(reversed_out, 0), sequence_length, 0),
                                  len(inputs), 0)
    with get_default_graph().name_scope("bidirectional_rnn_concat"):
        outputs = [array_ops.concat([fw, bw], 1) for fw, bw in zip(output_fw, output_bw)]
    return outputs, state_fw, state_bw
