"""``tf.saved_model.signature_constants``: the keys and method names of TF Serving's signatures.

>>> from dflow.saved_model import signature_constants
>>> signature_constants.DEFAULT_SERVING_SIGNATURE_DEF_KEY, signature_constants.PREDICT_METHOD_NAME
('serving_default', 'tensorflow/serving/predict')
"""

__all__ = ["DEFAULT_SERVING_SIGNATURE_DEF_KEY", "PREDICT_METHOD_NAME", "CLASSIFY_METHOD_NAME",
           "REGRESS_METHOD_NAME", "PREDICT_INPUTS", "PREDICT_OUTPUTS", "CLASSIFY_INPUTS",
           "CLASSIFY_OUTPUT_CLASSES", "CLASSIFY_OUTPUT_SCORES", "REGRESS_INPUTS", "REGRESS_OUTPUTS"]

#: the signature a server uses when a request names none
DEFAULT_SERVING_SIGNATURE_DEF_KEY = "serving_default"

PREDICT_METHOD_NAME = "tensorflow/serving/predict"
CLASSIFY_METHOD_NAME = "tensorflow/serving/classify"
REGRESS_METHOD_NAME = "tensorflow/serving/regress"

PREDICT_INPUTS = "inputs"
PREDICT_OUTPUTS = "outputs"
CLASSIFY_INPUTS = "inputs"
CLASSIFY_OUTPUT_CLASSES = "classes"
CLASSIFY_OUTPUT_SCORES = "scores"
REGRESS_INPUTS = "inputs"
REGRESS_OUTPUTS = "outputs"
