"""``tf.saved_model.signature_def_utils``: signatures, the named inputs and outputs a loader of
the model feeds and fetches, and TF Serving's three kinds of them (predict, classify, regress).

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     x = tf.placeholder(tf.float32, [None, 3], name="x")
...     signature = predict_signature_def({"x": x}, {"y": tf.identity(x, name="y")})
>>> signature.inputs["x"].name, signature.outputs["y"].name, is_valid_signature(signature)
('x:0', 'y:0', True)
"""

from __future__ import annotations

from .. import dtypes
from . import signature_constants as keys
from .meta_graph import SignatureDef, TensorInfo
from .utils import build_tensor_info

__all__ = ["build_signature_def", "predict_signature_def", "classification_signature_def",
           "regression_signature_def", "is_valid_signature"]

_STRING, _FLOAT = dtypes.string.as_datatype_enum, dtypes.float32.as_datatype_enum


def build_signature_def(inputs: dict[str, TensorInfo] | None = None,
                        outputs: dict[str, TensorInfo] | None = None,
                        method_name: str | None = None) -> SignatureDef:
    """A :class:`SignatureDef` of ``inputs`` and ``outputs`` (names -> :class:`TensorInfo`, as
    :func:`~dflow.saved_model.utils.build_tensor_info` makes them)."""
    return SignatureDef(dict(inputs or {}), dict(outputs or {}), method_name or "")


def predict_signature_def(inputs: dict, outputs: dict) -> SignatureDef:
    """A predict signature: ``inputs`` and ``outputs`` map names to tensors."""
    if not inputs:
        raise ValueError("Prediction inputs cannot be None or empty.")
    if not outputs:
        raise ValueError("Prediction outputs cannot be None or empty.")
    return build_signature_def(_infos(inputs), _infos(outputs), keys.PREDICT_METHOD_NAME)


def classification_signature_def(examples, classes, scores) -> SignatureDef:
    """A classify signature: serialized ``tf.Example`` strings in, ``classes`` (strings) and/or
    ``scores`` (floats) out."""
    _check_dtype(examples, _STRING, "Classification examples must be a string Tensor.")
    if classes is None and scores is None:
        raise ValueError("Classification classes and scores cannot both be None.")
    outputs = {}
    if classes is not None:
        _check_dtype(classes, _STRING, "Classification classes must be a string Tensor.")
        outputs[keys.CLASSIFY_OUTPUT_CLASSES] = build_tensor_info(classes)
    if scores is not None:
        _check_dtype(scores, _FLOAT, "Classification scores must be a float Tensor.")
        outputs[keys.CLASSIFY_OUTPUT_SCORES] = build_tensor_info(scores)
    return build_signature_def({keys.CLASSIFY_INPUTS: build_tensor_info(examples)}, outputs,
                               keys.CLASSIFY_METHOD_NAME)


def regression_signature_def(examples, predictions) -> SignatureDef:
    """A regress signature: serialized ``tf.Example`` strings in, float ``predictions`` out."""
    _check_dtype(examples, _STRING, "Regression examples must be a string Tensor.")
    _check_dtype(predictions, _FLOAT, "Regression output must be a float Tensor.")
    return build_signature_def({keys.REGRESS_INPUTS: build_tensor_info(examples)},
                               {keys.REGRESS_OUTPUTS: build_tensor_info(predictions)},
                               keys.REGRESS_METHOD_NAME)


def is_valid_signature(signature_def: SignatureDef | None) -> bool:
    """Whether ``signature_def`` is a predict, classify or regress signature that follows that
    kind's conventions (its keys and dtypes), as TF Serving checks it."""
    if signature_def is None:
        return False
    inputs, outputs = signature_def.inputs, signature_def.outputs
    method = signature_def.method_name
    if method == keys.PREDICT_METHOD_NAME:
        return bool(inputs) and bool(outputs)
    if method == keys.CLASSIFY_METHOD_NAME:
        wanted = {keys.CLASSIFY_OUTPUT_CLASSES: _STRING, keys.CLASSIFY_OUTPUT_SCORES: _FLOAT}
        return (_holds(inputs, {keys.CLASSIFY_INPUTS: _STRING}) and bool(outputs)
                and _holds(outputs, {key: wanted[key] for key in outputs if key in wanted}))
    if method == keys.REGRESS_METHOD_NAME:
        return (_holds(inputs, {keys.REGRESS_INPUTS: _STRING})
                and _holds(outputs, {keys.REGRESS_OUTPUTS: _FLOAT}))
    return False


def _holds(infos: dict[str, TensorInfo], wanted: dict[str, int]) -> bool:
    """Whether ``infos`` has exactly the keys of ``wanted``, each of its dtype."""
    return infos.keys() == wanted.keys() and all(infos[key].dtype == dtype for key, dtype in wanted.items())


def _infos(tensors: dict) -> dict[str, TensorInfo]:
    return {key: build_tensor_info(tensor) for key, tensor in tensors.items()}


def _check_dtype(tensor, dtype: int, message: str) -> None:
    if tensor is None or tensor.dtype.as_datatype_enum != dtype:
        raise ValueError(message)
