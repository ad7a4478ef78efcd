"""``tf.contrib.learn.python.learn``: the path to ``datasets.mnist``."""
