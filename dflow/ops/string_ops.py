"""String ops of TF 1.x's text pipelines: ``tf.string_join``, ``tf.string_split`` (a SparseTensor
of the pieces), ``tf.strings.split``, ``tf.as_string``, ``tf.string_to_number``, ``tf.substr``,
``tf.strings.length``, ``tf.reduce_join``, ``tf.regex_replace``, ``tf.string_strip``.

Strings are bytes in NumPy object arrays (the array API has no strings), so these run on the
host; their results are TensorFlow's for the same inputs. ``regex_replace`` uses Python's ``re``,
whose syntax agrees with TF's RE2 for the usual patterns (RE2 has no backreferences in patterns).

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     words = tf.string_split(tf.constant(["the cat", "sat"]))
...     joined = tf.string_join([tf.constant(["a", "b"]), "x"], separator="_")
...     [v.tolist() for v in tf.Session().run([words.values, joined])]
[[b'the', b'cat', b'sat'], [b'a_x', b'b_x']]
"""

from __future__ import annotations

import re

import numpy

from .. import dtypes
from ..errors import InvalidArgumentError
from ..graph import Tensor, convert_to_tensor, get_default_graph
from ..runtime.devices import numpy_namespace, to_namespace
from .registry import ShapeError, Spec, defop
from .shape_rules import broadcast
from .sparse_ops import SparseTensor

__all__ = ["string_join", "string_split", "split", "as_string", "string_to_number", "substr", "length",
           "reduce_join", "regex_replace", "string_strip"]


def _strings(value) -> numpy.ndarray:
    return numpy.asarray(value, dtype=object)


def _each(function, *arrays) -> numpy.ndarray:
    """``function`` over the elements of ``arrays`` (broadcast), as an object array."""
    return numpy.asarray(numpy.frompyfunc(function, len(arrays), 1)(*arrays), dtype=object)


def _create(op_type: str, inputs: list, attrs: dict | None, name) -> list[Tensor]:
    return get_default_graph().create_op(op_type, inputs, attrs or {}, name=name or op_type).outputs


def _text(value) -> Tensor:
    return convert_to_tensor(value, dtype=dtypes.string)


def _same_shape_strings(inputs, **_):
    for spec in inputs:
        if spec.dtype != dtypes.string:
            raise ShapeError(f"needs string inputs, got {spec.dtype.name}")
    shape = inputs[0].shape
    for spec in inputs[1:]:
        shape = broadcast(shape, spec.shape)
    return [Spec(shape, dtypes.string)]


# ---- joining -------------------------------------------------------------------------------------
defop("StringJoin", _same_shape_strings,
      lambda xp, *parts, separator: _each(lambda *p: separator.encode().join(p), *map(_strings, parts)),
      num_outputs=1, gpu=False)


def string_join(inputs, separator: str = "", name=None) -> Tensor:
    """Element-wise concatenation of ``inputs`` (strings, broadcast), ``separator`` between."""
    return _create("StringJoin", [_text(v) for v in inputs],
                   {"separator": str(separator)}, name)[0]


def _reduce_join_infer(inputs, axis, keep_dims, separator):
    shape = inputs[0].shape
    if shape is None:
        return [Spec(None, dtypes.string)]
    axes = range(len(shape)) if axis is None else [a % len(shape) for a in axis]
    return [Spec(tuple(1 if k in axes else d for k, d in enumerate(shape)) if keep_dims else
                 tuple(d for k, d in enumerate(shape) if k not in axes), dtypes.string)]


def _reduce_join_kernel(xp, x, axis, keep_dims, separator):
    values = _strings(x)
    axes = tuple(range(values.ndim)) if axis is None else tuple(a % values.ndim for a in axis)
    kept = [k for k in range(values.ndim) if k not in axes]
    moved = numpy.transpose(values, kept + list(axes)).reshape(*[values.shape[k] for k in kept], -1)
    rows = moved.reshape(-1, moved.shape[-1])
    joined = numpy.empty(len(rows), dtype=object)
    joined[:] = [separator.encode().join(row) for row in rows]
    joined = joined.reshape(moved.shape[:-1])
    if keep_dims:
        joined = joined.reshape([1 if k in axes else values.shape[k] for k in range(values.ndim)])
    return joined


defop("ReduceJoin", _reduce_join_infer, _reduce_join_kernel, gpu=False)


def reduce_join(inputs, axis=None, keep_dims: bool = False, separator: str = "", name=None,
                reduction_indices=None, keepdims=None) -> Tensor:
    """The strings along ``axis`` (all, by default) joined in order, ``separator`` between."""
    axis = reduction_indices if axis is None else axis
    axis = None if axis is None else [int(a) for a in ([axis] if isinstance(axis, int) else axis)]
    return _create("ReduceJoin", [_text(inputs)],
                   {"axis": axis, "keep_dims": bool(keepdims if keepdims is not None else keep_dims),
                    "separator": str(separator)}, name)[0]


# ---- splitting -----------------------------------------------------------------------------------
def _split_infer(inputs, **_):
    if inputs[0].shape is not None and len(inputs[0].shape) != 1:
        raise ShapeError(f"string_split takes a vector of strings, got shape {inputs[0].shape}")
    return [Spec((None, 2), dtypes.int64), Spec((None,), dtypes.string), Spec((2,), dtypes.int64)]


def _split_kernel(xp, source, delimiter, skip_empty, whole_separator, maxsplit):
    rows = []
    for text in _strings(source).reshape(-1):
        if whole_separator:  # tf.strings.split: Python's str.split of bytes
            pieces = text.split(None if delimiter is None else delimiter.encode(), maxsplit)
        elif delimiter == "":  # tf.string_split with an empty delimiter: the characters
            pieces = [bytes([c]) for c in text]
        else:  # each byte of the delimiter splits
            pieces = re.split(b"[" + re.escape(delimiter.encode()) + b"]", text)
            pieces = [p for p in pieces if p or not skip_empty]
        rows.append(pieces)
    indices = [(r, k) for r, pieces in enumerate(rows) for k in range(len(pieces))]
    values = numpy.empty(len(indices), dtype=object)
    values[:] = [p for pieces in rows for p in pieces]
    shape = [len(rows), max((len(p) for p in rows), default=0)]
    return (xp.asarray(numpy.asarray(indices, numpy.int64).reshape(-1, 2)), values,
            xp.asarray(numpy.asarray(shape, numpy.int64)))


defop("StringSplit", _split_infer, _split_kernel, num_outputs=3, gpu=False)


def _split(source, delimiter, skip_empty: bool, whole_separator: bool, maxsplit: int, name) -> SparseTensor:
    return SparseTensor(*_create("StringSplit", [_text(source)],
                                 {"delimiter": delimiter, "skip_empty": bool(skip_empty),
                                  "whole_separator": whole_separator, "maxsplit": int(maxsplit)}, name))


def string_split(source, delimiter=" ", skip_empty: bool = True) -> SparseTensor:
    """Each string of the vector ``source`` split at every byte of ``delimiter`` (``""``: into
    bytes), empty pieces dropped unless ``skip_empty=False``: a SparseTensor ``[rows, most pieces]``."""
    return _split(source, str(delimiter), skip_empty, False, -1, "StringSplit")


def split(source, sep=None, maxsplit=-1) -> SparseTensor:
    """``tf.strings.split``: Python's ``str.split`` of each string (``sep=None``: runs of
    whitespace), at most ``maxsplit`` times; a SparseTensor ``[rows, most pieces]``."""
    return _split(source, None if sep is None else str(sep), False, True, maxsplit, "StringSplitV2")


# ---- conversions ---------------------------------------------------------------------------------
def _as_string_kernel(xp, x, precision, scientific, shortest, width, fill):
    values = numpy.asarray(to_namespace(x, numpy_namespace))
    if values.dtype == numpy.bool_:
        return _each(lambda v: b"true" if v else b"false", values)
    flags = "0" if fill == "0" else ""
    size = str(width) if width > 0 else ""
    if values.dtype.kind in "iu":
        pattern = f"%{flags}{size}d"
    else:
        kind = "e" if scientific else "g" if shortest else "f"
        pattern = f"%{flags}{size}" + (f".{precision}" if precision >= 0 else "") + kind
    return _each(lambda v: (pattern % v).encode(), values)


defop("AsString", lambda inputs, **_: [Spec(inputs[0].shape, dtypes.string)], _as_string_kernel, gpu=False)


def as_string(input, precision: int = -1, scientific: bool = False, shortest: bool = False,  # noqa: A002
              width: int = -1, fill: str = "", name=None) -> Tensor:
    """Numbers and booleans as strings, TF's formats: ``3.5`` -> ``b"3.500000"``, ``True`` -> ``b"true"``."""
    return _create("AsString", [convert_to_tensor(input)],
                   {"precision": int(precision), "scientific": bool(scientific), "shortest": bool(shortest),
                    "width": int(width), "fill": str(fill)}, name)[0]


def _to_number_kernel(xp, x, out_type):
    def parse(text):
        try:
            number = float(text) if out_type.is_floating else int(text)
        except ValueError:
            raise InvalidArgumentError(f"StringToNumberOp could not correctly convert string: "
                                       f"{text!r}") from None
        return number
    return xp.asarray(numpy.asarray(_each(parse, _strings(x)).tolist(), dtype=out_type.as_numpy_dtype))


defop("StringToNumber", lambda inputs, out_type: [Spec(inputs[0].shape, out_type)], _to_number_kernel,
      gpu=False)


def string_to_number(string_tensor, out_type=dtypes.float32, name=None) -> Tensor:
    """Each string parsed as a number of ``out_type`` (float32 by default); one that is not a
    number is an InvalidArgumentError naming it."""
    return _create("StringToNumber", [_text(string_tensor)],
                   {"out_type": dtypes.as_dtype(out_type)}, name)[0]


# ---- pieces of strings ---------------------------------------------------------------------------
def _substr_kernel(xp, x, pos, length):
    positions = numpy.asarray(to_namespace(pos, numpy_namespace))
    lengths = numpy.asarray(to_namespace(length, numpy_namespace))

    def cut(text, start, count):
        if not -len(text) <= start <= len(text):
            raise InvalidArgumentError(f"substr: position {start} is outside {text!r}")
        start = start + len(text) if start < 0 else start
        return text[start:start + count]
    return _each(cut, _strings(x), positions, lengths)


defop("Substr", lambda inputs: [Spec(inputs[0].shape, dtypes.string)], _substr_kernel, gpu=False)


def substr(input, pos, len, name=None, unit="BYTE") -> Tensor:  # noqa: A002 - TF's names
    """``len`` bytes of each string from byte ``pos`` (scalars, or one per string)."""
    if unit != "BYTE":
        raise ValueError(f"substr: dflow takes unit='BYTE' only, got {unit!r}")
    return _create("Substr", [_text(input), convert_to_tensor(pos, dtype=dtypes.int32),
                              convert_to_tensor(len, dtype=dtypes.int32)], None, name)[0]


defop("StringLength", lambda inputs: [Spec(inputs[0].shape, dtypes.int32)],
      lambda xp, x: xp.asarray(numpy.asarray(_each(len, _strings(x)).tolist(), numpy.int32).reshape(
          numpy.shape(x))), gpu=False)


def length(input, name=None, unit="BYTE") -> Tensor:  # noqa: A002
    """``tf.strings.length``: each string's length in bytes."""
    return _create("StringLength", [_text(input)], None, name)[0]


def _regex_replace_kernel(xp, x, pattern, rewrite, replace_global):
    compiled, replacement = re.compile(pattern.encode()), rewrite.encode()
    return _each(lambda text: compiled.sub(replacement, text, count=0 if replace_global else 1), _strings(x))


defop("RegexReplace", lambda inputs, **_: [Spec(inputs[0].shape, dtypes.string)], _regex_replace_kernel,
      gpu=False)


def regex_replace(input, pattern: str, rewrite: str, replace_global: bool = True, name=None) -> Tensor:  # noqa: A002
    """Each match of ``pattern`` in each string replaced by ``rewrite`` (``\\1``: a group; only
    the first match unless ``replace_global``)."""
    try:
        re.compile(pattern)
    except re.error as error:
        raise ValueError(f"regex_replace: {pattern!r} is not a regular expression ({error})") from None
    return _create("RegexReplace", [_text(input)],
                   {"pattern": str(pattern), "rewrite": str(rewrite), "replace_global": bool(replace_global)},
                   name)[0]


defop("StringStrip", lambda inputs: [Spec(inputs[0].shape, dtypes.string)],
      lambda xp, x: _each(bytes.strip, _strings(x)), gpu=False)


def string_strip(input, name=None) -> Tensor:  # noqa: A002
    """Each string without its leading and trailing whitespace."""
    return _create("StringStrip", [_text(input)], None, name)[0]
