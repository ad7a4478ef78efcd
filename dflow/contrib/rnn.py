"""``tf.contrib.rnn``: the cells of :mod:`dflow.rnn_cell` and the RNN functions of
:mod:`dflow.rnn` under their contrib names (TF 1.x scripts import both spellings).

>>> from dflow.contrib import rnn
>>> cell = rnn.BasicLSTMCell(128, forget_bias=1.0)
"""

from ..rnn import bidirectional_dynamic_rnn, dynamic_rnn, static_bidirectional_rnn, static_rnn
from ..rnn_cell import (
    BasicLSTMCell,
    BasicRNNCell,
    DropoutWrapper,
    GRUCell,
    LSTMCell,
    LSTMStateTuple,
    MultiRNNCell,
    OutputProjectionWrapper,
    ResidualWrapper,
    RNNCell,
)


class LSTMBlockCell(BasicLSTMCell):
    """TF's fused LSTM cell: the same equations as :class:`BasicLSTMCell` (no peepholes here),
    its variables named ``lstm_cell/kernel`` and ``lstm_cell/bias`` as TF names them."""

    _base_name = "lstm_cell"

    def __init__(self, num_units, forget_bias=1.0, cell_clip=None, use_peephole=False, reuse=None,
                 dtype=None, name="lstm_cell"):
        if use_peephole or cell_clip is not None:
            raise ValueError("LSTMBlockCell(use_peephole=, cell_clip=) is not supported by dflow: "
                             "use tf.nn.rnn_cell.LSTMCell(use_peepholes=True, cell_clip=...)")
        super().__init__(num_units, forget_bias, reuse=reuse, name=name, dtype=dtype)


__all__ = ["RNNCell", "BasicRNNCell", "BasicLSTMCell", "LSTMCell", "LSTMBlockCell", "GRUCell",
           "MultiRNNCell", "DropoutWrapper", "ResidualWrapper", "OutputProjectionWrapper", "LSTMStateTuple",
           "static_rnn", "dynamic_rnn", "bidirectional_dynamic_rnn", "static_bidirectional_rnn"]
