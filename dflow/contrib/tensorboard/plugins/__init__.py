"""``tf.contrib.tensorboard.plugins``: ``projector``."""
