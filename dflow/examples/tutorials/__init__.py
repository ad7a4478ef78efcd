"""``tf.examples.tutorials``."""
