"""``tf.contrib.learn.python``: the path to ``learn.datasets.mnist``."""
