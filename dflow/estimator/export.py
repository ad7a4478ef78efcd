"""``tf.estimator.export``: what a ``model_fn`` names as its serving outputs, and serving input
receivers (raw placeholders, or serialized ``tf.train.Example`` records parsed), which
``Estimator.export_savedmodel`` turns into a SavedModel's signatures.

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     receiver = tf.estimator.export.build_raw_serving_input_receiver_fn(
...         {"image": tf.placeholder(tf.float32, [None, 28, 28])})()
>>> receiver.features["image"].shape.as_list()
[None, 28, 28]
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from .. import dtypes
from ..graph import Tensor
from ..saved_model import signature_constants, signature_def_utils

__all__ = ["PredictOutput", "ClassificationOutput", "RegressionOutput", "ServingInputReceiver",
           "TensorServingInputReceiver", "build_raw_serving_input_receiver_fn",
           "build_parsing_serving_input_receiver_fn"]

log = logging.getLogger("dflow")


def _tensor_dict(outputs, what: str) -> dict:
    if isinstance(outputs, Tensor):
        return {"output": outputs}
    if not isinstance(outputs, dict) or not all(isinstance(v, Tensor) for v in outputs.values()):
        raise ValueError(f"{what} outputs must be a tensor or a dict of string to tensor, got {outputs!r}")
    return dict(outputs)


class PredictOutput:
    """``export_outputs`` entry: the named tensors a prediction serves."""

    def __init__(self, outputs):
        self.outputs = _tensor_dict(outputs, "PredictOutput")

    def as_signature_def(self, receiver_tensors: dict):
        return signature_def_utils.predict_signature_def(receiver_tensors, self.outputs)


class ClassificationOutput:
    """``export_outputs`` entry: class ``scores`` (float) and/or ``classes`` (string) tensors."""

    def __init__(self, scores=None, classes=None):
        if scores is None and classes is None:
            raise ValueError("ClassificationOutput needs scores, classes or both")
        if scores is not None and not (isinstance(scores, Tensor) and scores.dtype.is_floating):
            raise ValueError(f"ClassificationOutput scores must be a float tensor, got {scores!r}")
        if classes is not None and not (isinstance(classes, Tensor) and classes.dtype == dtypes.string):
            raise ValueError(f"ClassificationOutput classes must be a string tensor, got {classes!r} "
                             "(tf.as_string or a lookup table turns class ids into strings)")
        self.scores, self.classes = scores, classes

    def as_signature_def(self, receiver_tensors: dict):
        examples = _serialized_examples(receiver_tensors, "Classification")
        return signature_def_utils.classification_signature_def(examples, self.classes, self.scores)


class RegressionOutput:
    """``export_outputs`` entry: one float ``value`` tensor."""

    def __init__(self, value):
        if not isinstance(value, Tensor):
            raise ValueError(f"RegressionOutput value must be a tensor, got {value!r}")
        self.value = value

    def as_signature_def(self, receiver_tensors: dict):
        examples = _serialized_examples(receiver_tensors, "Regression")
        return signature_def_utils.regression_signature_def(examples, self.value)


def _serialized_examples(receiver_tensors: dict, kind: str) -> Tensor:
    """The one string tensor that classify and regress signatures take (TF Serving feeds it
    serialized ``tf.train.Example`` records)."""
    tensors = list(receiver_tensors.values())
    if len(tensors) != 1 or tensors[0].dtype != dtypes.string:
        raise ValueError(f"{kind} input must be a single string Tensor; got {receiver_tensors}")
    return tensors[0]


class _ReceiverFields(NamedTuple):
    features: object
    receiver_tensors: dict
    receiver_tensors_alternatives: dict | None = None


class ServingInputReceiver(_ReceiverFields):
    """The features a serving graph gives the model_fn, and the tensors it is fed through. A lone
    tensor in place of a dict is named as TF names it: ``{"feature": t}``, ``{"input": t}``.

    >>> import dflow as tf
    >>> with tf.Graph().as_default():
    ...     images = tf.placeholder(tf.float32, [None, 784])
    ...     receiver = tf.estimator.export.ServingInputReceiver(images, images)
    >>> list(receiver.features), list(receiver.receiver_tensors)
    (['feature'], ['input'])
    """

    __slots__ = ()

    def __new__(cls, features, receiver_tensors, receiver_tensors_alternatives=None):
        return super().__new__(cls, _receiver_dict(features, "feature"),
                               _receiver_dict(receiver_tensors, "input"),
                               _alternatives(receiver_tensors_alternatives))


class TensorServingInputReceiver(_ReceiverFields):
    """As :class:`ServingInputReceiver`, for a model_fn whose ``features`` is one tensor."""

    __slots__ = ()

    def __new__(cls, features, receiver_tensors, receiver_tensors_alternatives=None):
        _check_receiver_value("features", features)
        return super().__new__(cls, features, _receiver_dict(receiver_tensors, "input"),
                               _alternatives(receiver_tensors_alternatives))


def _receiver_dict(tensors, lone_name: str) -> dict:
    """``tensors`` as a receiver holds them: a dict of string to tensor (a lone one named ``lone_name``)."""
    named = tensors if isinstance(tensors, dict) else {lone_name: tensors}
    for key, value in named.items():
        if not isinstance(key, str):
            raise ValueError(f"{lone_name} keys must be strings, got {key!r}")
        _check_receiver_value(f"{lone_name} {key!r}", value)
    return dict(named)


def _check_receiver_value(what: str, value) -> None:
    from ..sparse import SparseTensor

    if not isinstance(value, Tensor | SparseTensor):
        raise ValueError(f"{what} must be a Tensor or SparseTensor, got {value!r}")


def _alternatives(alternatives) -> dict | None:
    if alternatives is None:
        return None
    if not isinstance(alternatives, dict):
        raise ValueError(f"receiver_tensors_alternatives must be a dict of name to tensors, "
                         f"got {alternatives!r}")
    return {name: _receiver_dict(tensors, "input") for name, tensors in alternatives.items()}


def signature_defs(receiver, export_outputs: dict | None, predictions) -> dict:
    """The signatures a SavedModel of ``receiver`` (a serving input receiver) serves: one per
    entry of ``export_outputs`` (``{"serving_default": PredictOutput(predictions)}`` when None;
    a lone entry is also the default), each also over every receiver alternative (named
    ``"receiver:output"``). An output that cannot take the receiver's tensors (a classify or
    regress output needs one string tensor) is left out, saying why, as TF does."""
    default_key = signature_constants.DEFAULT_SERVING_SIGNATURE_DEF_KEY
    if export_outputs is None:
        export_outputs = {default_key: PredictOutput(predictions)}
    outputs = dict(export_outputs)
    for key, output in outputs.items():
        if not isinstance(output, PredictOutput | ClassificationOutput | RegressionOutput):
            raise TypeError(f"export_outputs[{key!r}] must be a tf.estimator.export.PredictOutput, "
                            f"ClassificationOutput or RegressionOutput, got {output!r}")
    if len(outputs) == 1:
        outputs.setdefault(default_key, next(iter(outputs.values())))
    elif default_key not in outputs:
        raise ValueError("Multiple export_outputs were provided, but none of them is specified as the "
                         "default. Do this by naming one of them with "
                         "signature_constants.DEFAULT_SERVING_SIGNATURE_DEF_KEY.")
    receivers = {None: receiver.receiver_tensors, **(receiver.receiver_tensors_alternatives or {})}
    signatures, excluded = {}, {}
    for receiver_name, tensors in receivers.items():
        for key, output in outputs.items():
            name = key if receiver_name is None else f"{receiver_name}:{key}"
            try:
                signatures[name] = output.as_signature_def(tensors)
            except ValueError as error:
                excluded[name] = str(error)
    for name, reason in excluded.items():
        log.warning("Signature %s is not exported: %s", name, reason)
    if not signatures:
        raise ValueError(f"No signature can be exported: {excluded}. Give the model_fn's EstimatorSpec "
                         "export_outputs that take the serving receiver's tensors")
    return signatures


def build_raw_serving_input_receiver_fn(features, default_batch_size=None):
    """A function that makes, in the graph being built, a placeholder like each of ``features``
    (a dict of tensors; batch dimension ``default_batch_size``) and returns a ServingInputReceiver."""
    from ..ops.array_ops import placeholder

    features = _tensor_dict(features, "build_raw_serving_input_receiver_fn")

    def serving_input_receiver_fn() -> ServingInputReceiver:
        copies = {}
        for name, tensor in features.items():
            dims = tensor.shape.dims
            shape = None if dims is None else [default_batch_size, *dims[1:]] if dims else []
            copies[name] = placeholder(tensor.dtype, shape, name=name)
        return ServingInputReceiver(copies, dict(copies))
    return serving_input_receiver_fn


def build_parsing_serving_input_receiver_fn(feature_spec: dict, default_batch_size=None):
    """A function that makes, in the graph being built, a placeholder of serialized
    ``tf.train.Example`` records (``input_example_tensor``, fed as ``examples``) and the features
    ``tf.parse_example`` gets from them by ``feature_spec``, as a ServingInputReceiver."""
    from .. import dtypes
    from ..ops.array_ops import placeholder
    from ..ops.parsing_ops import parse_example

    def serving_input_receiver_fn() -> ServingInputReceiver:
        serialized = placeholder(dtypes.string, [default_batch_size], name="input_example_tensor")
        return ServingInputReceiver(parse_example(serialized, feature_spec), {"examples": serialized})
    return serving_input_receiver_fn
