"""``tf.contrib.learn``: only where its MNIST reader lives (``contrib.learn.python.learn.datasets.mnist``),
which TF 1.x's tutorials import (``convert_to_records.py``); the Estimator API is ``tf.estimator``."""
