"""``tensorflow.python.layers.core``: the dense, dropout and flatten layers (dflow's ``tf.layers``)."""

from ...layers import Dense, Dropout, Flatten, dense, dropout, flatten

__all__ = ["Dense", "Dropout", "Flatten", "dense", "dropout", "flatten"]
