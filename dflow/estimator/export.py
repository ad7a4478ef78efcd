"""``tf.estimator.export``: what a ``model_fn`` names as its serving outputs, and serving input
receivers (raw placeholders, or serialized ``tf.train.Example`` records parsed). dflow's Estimator
predicts from ``model_dir``'s checkpoints; ``Estimator.export_savedmodel`` is not supported, and
says so (``tf.saved_model`` writes a SavedModel from a session).

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     receiver = tf.estimator.export.build_raw_serving_input_receiver_fn(
...         {"image": tf.placeholder(tf.float32, [None, 28, 28])})()
>>> receiver.features["image"].shape.as_list()
[None, 28, 28]
"""

from __future__ import annotations

from typing import NamedTuple

from ..graph import Tensor

__all__ = ["PredictOutput", "ClassificationOutput", "RegressionOutput", "ServingInputReceiver",
           "build_raw_serving_input_receiver_fn", "build_parsing_serving_input_receiver_fn"]


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


class ClassificationOutput:
    """``export_outputs`` entry: class ``scores`` (float) and/or ``classes`` (string) tensors."""

    def __init__(self, scores=None, classes=None):
        if scores is None and classes is None:
            raise ValueError("ClassificationOutput needs scores, classes or both")
        self.scores, self.classes = scores, classes


class RegressionOutput:
    """``export_outputs`` entry: one float ``value`` tensor."""

    def __init__(self, value):
        if not isinstance(value, Tensor):
            raise ValueError(f"RegressionOutput value must be a tensor, got {value!r}")
        self.value = value


class ServingInputReceiver(NamedTuple):
    """The features a serving graph gives the model_fn, and the tensors it is fed through."""

    features: dict
    receiver_tensors: dict
    receiver_tensors_alternatives: dict | None = None


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
