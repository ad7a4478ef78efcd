"""``tensorflow.python.platform``: ``tf_logging`` (dflow's ``tf.logging``), as library-style TF 1.x
code imports it (``from tensorflow.python.platform import tf_logging as logging``)."""

import sys

from ... import tf_logging

sys.modules[f"{__name__}.tf_logging"] = tf_logging
