"""``tf.data.experimental``: the transformations TF 1.x scripts pass to ``Dataset.apply``.

>>> import dflow as tf
>>> data = tf.data.Dataset.range(10).apply(tf.data.experimental.map_and_batch(lambda x: x * 2, 4))
>>> data.output_shapes.as_list()
[None]
"""

from __future__ import annotations

__all__ = ["AUTOTUNE", "shuffle_and_repeat", "map_and_batch", "parallel_interleave",
           "batch_and_drop_remainder"]

AUTOTUNE = -1  # num_parallel_calls / prefetch sizes: dflow makes elements as they are asked for


def shuffle_and_repeat(buffer_size, count=None, seed=None):
    """``dataset.shuffle(buffer_size, seed).repeat(count)``, each pass shuffled anew."""
    return lambda dataset: dataset.shuffle(buffer_size, seed).repeat(count)


def map_and_batch(map_func, batch_size, num_parallel_batches=None, drop_remainder=False,
                  num_parallel_calls=None):
    """``dataset.map(map_func).batch(batch_size, drop_remainder)``."""
    return lambda dataset: dataset.map(map_func).batch(batch_size, drop_remainder)


def parallel_interleave(map_func, cycle_length, block_length=1, sloppy=False, buffer_output_elements=None,
                        prefetch_input_elements=None):
    """``dataset.interleave(map_func, cycle_length, block_length)``, in its deterministic order
    (a ``sloppy`` one may be any order: this one is TF's)."""
    return lambda dataset: dataset.interleave(map_func, cycle_length, block_length)


def batch_and_drop_remainder(batch_size):
    """``dataset.batch(batch_size, drop_remainder=True)`` (TF 1.x before ``drop_remainder``)."""
    return lambda dataset: dataset.batch(batch_size, drop_remainder=True)
