"""``tf.random``: the TF 1.13+ names of the random ops (``tf.random.normal`` is
``tf.random_normal``).

>>> import dflow as tf
>>> tf.random.truncated_normal([2, 3], stddev=0.1).shape
(2, 3)
"""

from .graph import set_random_seed
from .ops.state_ops import multinomial, random_normal, random_shuffle, random_uniform, truncated_normal

__all__ = ["normal", "uniform", "truncated_normal", "shuffle", "multinomial", "categorical",
           "set_random_seed"]

normal = random_normal
uniform = random_uniform
shuffle = random_shuffle


def categorical(logits, num_samples, dtype=None, seed=None, name=None):
    """``num_samples`` class indices per row of ``logits`` (``tf.multinomial``'s newer name)."""
    from . import dtypes

    output_dtype = dtypes.as_dtype(dtype or "int64")
    return multinomial(logits, num_samples, seed=seed, name=name, output_dtype=output_dtype)
