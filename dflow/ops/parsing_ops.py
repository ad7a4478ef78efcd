"""``tf.parse_example`` and ``tf.parse_single_example``: ``tf.train.Example`` records to tensors.

A feature is declared by its key and one of:

- ``tf.FixedLenFeature(shape, dtype, default_value=None)``: exactly ``prod(shape)`` values
  in every record (a dense tensor of ``shape``); a record without it gets
  ``default_value``, or is an error when there is none;
- ``tf.VarLenFeature(dtype)``: any number of values (a :class:`~dflow.ops.sparse_ops.SparseTensor`);
- ``tf.FixedLenSequenceFeature(shape, dtype, allow_missing=True)``: any number of
  ``shape``-d items, padded with ``default_value`` (0) to the longest record's count.

``dtype`` is ``tf.string`` (``bytes_list``), ``tf.float32`` (``float_list``) or
``tf.int64`` (``int64_list``), as in TF. One ``ParseExample`` op decodes the
records (protobuf's parser, on the host); a record that is not an Example, or a
feature of the wrong kind or count, is an ``InvalidArgumentError`` naming the
record and the key.

>>> import dflow as tf
>>> record = tf.train.Example(features=tf.train.Features(feature={
...     "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[3])),
...     "pixels": tf.train.Feature(float_list=tf.train.FloatList(value=[0.5, 1.0]))})).SerializeToString()
>>> with tf.Graph().as_default():
...     parsed = tf.parse_single_example(record, {"label": tf.FixedLenFeature([], tf.int64),
...                                               "pixels": tf.FixedLenFeature([2], tf.float32)})
...     with tf.Session() as sess:
...         values = sess.run(parsed)
>>> int(values["label"]), values["pixels"].tolist()
(3, [0.5, 1.0])
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy

from .. import dtypes
from ..errors import InvalidArgumentError
from ..graph import Tensor, convert_to_tensor, get_default_graph
from ..runtime.devices import numpy_namespace, to_namespace
from .registry import ShapeError, Spec, defop
from .sparse_ops import SparseTensor

__all__ = ["FixedLenFeature", "VarLenFeature", "FixedLenSequenceFeature", "parse_example",
           "parse_single_example", "parse_single_sequence_example"]


class FixedLenFeature(NamedTuple):
    """A feature with ``prod(shape)`` values in every record, parsed to a dense tensor of ``shape``."""

    shape: Any
    dtype: Any
    default_value: Any = None


class VarLenFeature(NamedTuple):
    """A feature with any number of values, parsed to a ``tf.SparseTensor``."""

    dtype: Any


class FixedLenSequenceFeature(NamedTuple):
    """Any number of items of ``shape`` per record, parsed to a dense tensor padded with
    ``default_value`` (TF requires ``allow_missing=True`` in ``parse_example``)."""

    shape: Any
    dtype: Any
    allow_missing: bool = False
    default_value: Any = None


_LISTS = {dtypes.string: "bytes_list", dtypes.float32: "float_list", dtypes.int64: "int64_list"}
_KINDS = {FixedLenFeature: "fixed", VarLenFeature: "var", FixedLenSequenceFeature: "sequence"}


# ---- the op ---------------------------------------------------------------------------------------
def _parse_infer(inputs, keys, kinds, types, shapes, single):
    serialized = inputs[0]
    if serialized.dtype != dtypes.string:
        raise ShapeError(f"parse_example parses strings (serialized tf.train.Example records), got a "
                         f"{serialized.dtype.name} tensor")
    expected_rank = 0 if single else 1
    if serialized.shape is not None and len(serialized.shape) != expected_rank:
        wanted = "parse_single_example takes one record (a scalar)" if single else \
            "parse_example takes a vector of records"
        raise ShapeError(f"{wanted}, got shape {serialized.shape}")
    batch = () if single else (None if serialized.shape is None else serialized.shape[0],)
    specs = []
    for kind, dtype, shape in zip(kinds, types, shapes):
        if kind == "fixed":
            specs.append(Spec((*batch, *shape), dtype))
        elif kind == "sequence":
            specs.append(Spec((*batch, None, *shape), dtype))
        else:  # indices, values, dense_shape
            rank = len(batch) + 1
            specs += [Spec((None, rank), dtypes.int64), Spec((None,), dtype), Spec((rank,), dtypes.int64)]
    return specs


def _parse_kernel(xp, serialized, *defaults, keys, kinds, types, shapes, single):
    from ..core.example.example_pb2 import Example

    records = numpy.asarray(serialized, dtype=object).reshape(-1)
    examples = []
    for index, record in enumerate(records):
        try:
            examples.append(Example.FromString(bytes(record)))
        except Exception as error:  # protobuf's DecodeError, or a str where bytes belong
            raise InvalidArgumentError(f"parse_example: record {index} is not a serialized tf.train.Example "
                                       f"({type(error).__name__}: {error})") from None
    return tuple(_parse_features(xp, [example.features.feature for example in examples], _host(defaults),
                                 keys, kinds, types, shapes, single))


def _host(defaults) -> Iterator:
    """The dense features' default inputs as NumPy arrays (strings are NumPy's already)."""
    return iter([numpy.asarray(to_namespace(d, numpy_namespace)) for d in defaults])


def _parse_features(xp, feature_maps, defaults, keys, kinds, types, shapes, single) -> list:
    """The outputs of each feature over records whose ``features.feature`` maps are ``feature_maps``."""
    outputs = []
    for key, kind, dtype, shape in zip(keys, kinds, types, shapes):
        values = [_values(features[key] if key in features else None, index, key, dtype)
                  for index, features in enumerate(feature_maps)]
        if kind == "fixed":
            outputs.append(_dense(xp, values, key, dtype, shape, next(defaults), single))
        elif kind == "sequence":
            outputs.append(_padded(xp, values, key, dtype, shape, next(defaults), single))
        else:
            outputs += _sparse(xp, values, dtype, single)
    return outputs


def _values(feature, index: int, key: str, dtype) -> list | None:
    """The values of one record's ``feature`` (None when the record has none by that key)."""
    if feature is None:
        return None
    kind = feature.WhichOneof("kind")
    if kind is None:
        return []
    if kind != _LISTS[dtype]:
        raise InvalidArgumentError(f"parse_example: record {index}'s feature {key!r} is a {kind}, but the "
                                   f"features say {dtype.name} (a {_LISTS[dtype]})")
    return list(getattr(feature, kind).value)


def _array(values, dtype):
    if dtype == dtypes.string:
        array = numpy.empty(len(values), dtype=object)
        array[:] = values
        return array
    return numpy.asarray(values, dtype=dtype.as_numpy_dtype)


def _result(xp, array, dtype):
    return array if dtype == dtypes.string else xp.asarray(array)


def _dense(xp, values, key, dtype, shape, default, single):
    size = math.prod(shape)
    default = numpy.asarray(default, dtype=object if dtype == dtypes.string else None)
    rows = []
    for index, row in enumerate(values):
        if row is None:
            if default.size == 0:
                raise InvalidArgumentError(f"parse_example: record {index} has no feature {key!r}, which is "
                                           "required: give FixedLenFeature a default_value, or write it in "
                                           "every record")
            rows.append(numpy.broadcast_to(default, shape).reshape(-1))
            continue
        if len(row) != size:
            raise InvalidArgumentError(f"parse_example: record {index}'s feature {key!r} has {len(row)} "
                                       f"values, but FixedLenFeature's shape {list(shape)} needs {size}")
        rows.append(_array(row, dtype))
    stacked = numpy.stack(rows) if rows else _array([], dtype)
    return _result(xp, stacked.reshape(shape if single else (len(rows), *shape)).astype(
        object if dtype == dtypes.string else dtype.as_numpy_dtype), dtype)


def _padded(xp, values, key, dtype, shape, default, single):
    size = math.prod(shape)
    counts = []
    for index, row in enumerate(values):
        count = len(row or ())
        if count % size:
            raise InvalidArgumentError(f"parse_example: record {index}'s feature {key!r} has {count} values, "
                                       f"which is not a whole number of items of shape {list(shape)}")
        counts.append(count // size)
    longest = max(counts, default=0)
    pad = default.reshape(-1)[0] if numpy.size(default) else (b"" if dtype == dtypes.string else 0)
    out = numpy.full((len(values), longest * size), pad,
                     dtype=object if dtype == dtypes.string else dtype.as_numpy_dtype)
    for index, row in enumerate(values):
        out[index, :len(row or ())] = _array(row or [], dtype)
    out = out.reshape(len(values), longest, *shape)
    return _result(xp, out[0] if single else out, dtype)


def _sparse(xp, values, dtype, single):
    counts = [len(row or ()) for row in values]
    flat = _array([v for row in values for v in (row or ())], dtype)
    positions = numpy.concatenate([numpy.arange(n) for n in counts]) if counts else numpy.zeros(0, int)
    if single:
        indices = positions.reshape(-1, 1)
        dense_shape = [counts[0]]
    else:
        rows = numpy.repeat(numpy.arange(len(counts)), counts)
        indices = numpy.stack([rows, positions], axis=1) if len(rows) else numpy.zeros((0, 2), int)
        dense_shape = [len(counts), max(counts, default=0)]
    return [xp.asarray(indices.astype(numpy.int64)), _result(xp, flat, dtype),
            xp.asarray(numpy.asarray(dense_shape, dtype=numpy.int64))]


defop("ParseExample", _parse_infer, _parse_kernel, num_outputs=None, gpu=False)


def _sequence_infer(inputs, context, sequence):
    dense_context = sum(kind != "var" for kind in context["kinds"])
    specs = _parse_infer(inputs[:1 + dense_context], single=True, **context) if context["keys"] else []
    for kind, dtype, shape in zip(sequence["kinds"], sequence["types"], sequence["shapes"]):
        specs += [Spec((None, *shape), dtype)] if kind == "sequence" else \
            [Spec((None, 2), dtypes.int64), Spec((None,), dtype), Spec((2,), dtypes.int64)]
    return specs


def _sequence_kernel(xp, serialized, *defaults, context, sequence):
    from ..core.example.example_pb2 import SequenceExample

    try:
        record = SequenceExample.FromString(bytes(numpy.asarray(serialized, dtype=object).item()))
    except Exception as error:  # protobuf's DecodeError, or a str where bytes belong
        raise InvalidArgumentError(f"parse_single_sequence_example: the record is not a serialized "
                                   f"tf.train.SequenceExample ({type(error).__name__}: {error})") from None
    outputs = _parse_features(xp, [record.context.feature], _host(defaults), single=True, **context)
    lists = record.feature_lists.feature_list
    for key, kind, dtype, shape, required in zip(*sequence.values()):
        if key not in lists and required:
            raise InvalidArgumentError(f"parse_single_sequence_example: the record has no feature list "
                                       f"{key!r}, which is required: pass allow_missing=True, or write it")
        steps = lists[key].feature if key in lists else []
        values = [_values(step, index, key, dtype) for index, step in enumerate(steps)]
        outputs += [_dense(xp, values, key, dtype, shape, (), single=False)] if kind == "sequence" else \
            _sparse(xp, values, dtype, single=False)
    return tuple(outputs)


defop("ParseSingleSequenceExample", _sequence_infer, _sequence_kernel, num_outputs=None, gpu=False)


# ---- the functions --------------------------------------------------------------------------------
def parse_example(serialized, features: dict, name=None, example_names=None) -> dict:
    """A dict of tensors (or SparseTensors) per key of ``features``, parsed from a vector of
    serialized ``tf.train.Example`` records: each tensor has the batch as its first dimension."""
    return _parse(serialized, features, single=False, name=name or "ParseExample")


def parse_single_example(serialized, features: dict, name=None, example_names=None) -> dict:
    """As :func:`parse_example`, for one record (a scalar string): no batch dimension."""
    return _parse(serialized, features, single=True, name=name or "ParseSingleExample")


def parse_single_sequence_example(serialized, context_features: dict | None = None,
                                  sequence_features: dict | None = None, example_name=None,
                                  name=None) -> tuple[dict, dict]:
    """``(context, sequences)`` parsed from one serialized ``tf.train.SequenceExample``:
    ``context_features`` as in :func:`parse_single_example`; each of ``sequence_features``
    (``tf.FixedLenSequenceFeature`` or ``tf.VarLenFeature``) over the steps of its feature list,
    a ``[steps, *shape]`` tensor or a 2-d SparseTensor.

    >>> import dflow as tf
    >>> record = tf.train.SequenceExample()
    >>> record.context.feature["length"].int64_list.value.append(2)
    >>> for word in (4, 7):
    ...     record.feature_lists.feature_list["words"].feature.add().int64_list.value.append(word)
    >>> with tf.Graph().as_default():
    ...     context, sequences = tf.parse_single_sequence_example(
    ...         record.SerializeToString(), {"length": tf.FixedLenFeature([], tf.int64)},
    ...         {"words": tf.FixedLenSequenceFeature([], tf.int64)})
    ...     length, words = tf.Session().run([context["length"], sequences["words"]])
    >>> int(length), words.tolist()
    (2, [4, 7])
    """
    context = _declarations(context_features or {}, True, "context_features")
    keys, kinds, types, shapes, _ = _declarations(sequence_features or {}, True, "sequence_features")
    if not context[0] and not keys:
        raise ValueError("parse_single_sequence_example needs context_features or sequence_features")
    kinds = ["sequence" if kind == "fixed" else kind for kind in kinds]  # TF 1.0 took FixedLenFeature here
    required = [kind == "sequence" and not getattr(sequence_features[key], "allow_missing", False)
                for key, kind in zip(keys, kinds)]
    serialized = convert_to_tensor(serialized, dtype=dtypes.string, name="serialized")
    op = get_default_graph().create_op(
        "ParseSingleSequenceExample", [serialized, *context[4]],
        {"context": dict(zip(("keys", "kinds", "types", "shapes"), context[:4])),
         "sequence": {"keys": keys, "kinds": kinds, "types": types, "shapes": shapes, "required": required}},
        name=name or "ParseSingleSequenceExample")
    outputs = iter(op.outputs)
    return _results(outputs, context[0], context[1]), _results(outputs, keys, kinds)


def _parse(serialized, features: dict, single: bool, name: str) -> dict:
    keys, kinds, types, shapes, defaults = _declarations(features, single, "features")
    if not keys:
        raise ValueError("features must be a non-empty dict of key -> tf.FixedLenFeature / tf.VarLenFeature")
    serialized = convert_to_tensor(serialized, dtype=dtypes.string, name="serialized")
    op = get_default_graph().create_op(
        "ParseExample", [serialized, *defaults],
        {"keys": keys, "kinds": kinds, "types": types, "shapes": shapes, "single": single}, name=name)
    return _results(iter(op.outputs), keys, kinds)


def _results(outputs, keys, kinds) -> dict:
    """Each key's output: a tensor, or a SparseTensor of the next three."""
    return {key: SparseTensor(*[next(outputs) for _ in range(3)]) if kind == "var" else next(outputs)
            for key, kind in zip(keys, kinds)}


def _declarations(features: dict, single: bool, what: str) -> tuple[list, list, list, list, list]:
    """(keys, kinds, dtypes, shapes, default tensors of the dense ones) of a features dict."""
    if not isinstance(features, dict):
        raise ValueError(f"{what} must be a dict of key -> tf.FixedLenFeature / tf.VarLenFeature, "
                         f"got {features!r}")
    keys = sorted(features)
    kinds, types, shapes, defaults = [], [], [], []
    for key in keys:
        feature = features[key]
        if type(feature) not in _KINDS:
            raise TypeError(f"features[{key!r}] must be a tf.FixedLenFeature, tf.VarLenFeature or "
                            f"tf.FixedLenSequenceFeature, got {feature!r}")
        dtype = dtypes.as_dtype(feature.dtype)
        if dtype not in _LISTS:
            raise ValueError(f"features[{key!r}]: an Example holds tf.string, tf.float32 or tf.int64 values, "
                             f"not {dtype.name}: parse as one of those and tf.cast")
        kind = _KINDS[type(feature)]
        shape = () if kind == "var" else _shape(feature.shape, key)
        if kind == "sequence" and not (single or feature.allow_missing):
            raise ValueError(f"features[{key!r}]: parse_example takes a FixedLenSequenceFeature only with "
                             "allow_missing=True (as TF)")
        if kind != "var":
            defaults.append(_default(feature.default_value, dtype, shape, key, kind))
        kinds.append(kind)
        types.append(dtype)
        shapes.append(shape)
    return keys, kinds, types, shapes, defaults


def _shape(shape, key: str) -> list[int]:
    if isinstance(shape, int):  # FixedLenFeature((23), tf.int64): TF reads an int as one dim
        shape = [shape]
    dims = list(getattr(shape, "as_list", lambda: shape)()) if shape is not None else []
    if any(d is None or int(d) < 0 for d in dims):
        raise ValueError(f"features[{key!r}]: a FixedLenFeature's shape must be fully known, got {shape}")
    return [int(d) for d in dims]


def _default(value, dtype, shape, key: str, kind: str) -> Tensor:
    """The op's default input: the value as an array, or an empty one where the feature is required."""
    array = numpy.asarray([] if value is None else value,
                          dtype=object if dtype == dtypes.string else dtype.as_numpy_dtype)
    if kind == "fixed" and value is not None:
        try:
            numpy.broadcast_to(array, shape)
        except ValueError:
            raise ValueError(f"features[{key!r}]: default_value of shape {list(array.shape)} does not fit "
                             f"the feature's shape {shape}") from None
    return convert_to_tensor(array, dtype=dtype, name="default_value")
