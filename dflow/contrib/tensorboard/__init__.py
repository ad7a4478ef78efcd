"""``tf.contrib.tensorboard``: the embedding projector's configuration (``plugins.projector``)."""
