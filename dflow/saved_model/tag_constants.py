"""``tf.saved_model.tag_constants``: the tags that name a SavedModel's meta graphs by their use.

>>> from dflow.saved_model import tag_constants
>>> tag_constants.SERVING, tag_constants.TRAINING
('serve', 'train')
"""

__all__ = ["SERVING", "TRAINING", "GPU", "TPU"]

SERVING = "serve"
TRAINING = "train"
GPU = "gpu"
TPU = "tpu"
