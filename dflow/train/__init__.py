"""``tf.train``: optimizers, global step, checkpoints."""
