"""``tf.examples``: what TF 1.x's tutorials import from it (``tutorials.mnist.input_data``)."""
