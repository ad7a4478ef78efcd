"""``tf.examples.tutorials.mnist``: ``input_data``, the MNIST reader of TF 1.x's tutorials."""
