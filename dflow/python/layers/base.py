"""``tensorflow.python.layers.base``: the base layer and its input check (dflow's ``tf.layers``)."""

from ...layers import InputSpec, Layer

__all__ = ["InputSpec", "Layer"]
