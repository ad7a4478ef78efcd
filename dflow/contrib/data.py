"""``tf.contrib.data``: TF 1.x's dataset transformations before ``tf.data.experimental`` held them."""

from ..data.experimental import (
    AUTOTUNE,
    batch_and_drop_remainder,
    map_and_batch,
    parallel_interleave,
    shuffle_and_repeat,
)

__all__ = ["AUTOTUNE", "batch_and_drop_remainder", "map_and_batch", "parallel_interleave",
           "shuffle_and_repeat"]
