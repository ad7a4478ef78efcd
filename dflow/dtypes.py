"""Element types, named as in TensorFlow 1.x (``tf.float32``, ``tf.int64``, ...).

A :class:`DType` is a name; kernels turn it into their array namespace's dtype
with ``dtype.of(xp)``, so the graph never imports NumPy's or CuPy's types.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "DType", "as_dtype", "float16", "float32", "float64", "int8", "int16", "int32",
    "int64", "uint8", "bool", "promote",
    "string",
]


@dataclass(frozen=True)
class DType:
    """An element type. ``tf.float32.name == 'float32'``; ``size`` is in bytes."""

    name: str
    size: int
    kind: str  # "f" float, "i" signed int, "u" unsigned int, "b" bool

    def __reduce__(self):  # unpickled on a worker as the same object, so `is` comparisons hold
        return as_dtype, (self.name,)

    @property
    def is_floating(self) -> bool:
        return self.kind == "f"

    @property
    def is_integer(self) -> bool:
        return self.kind in "iu"

    @property
    def as_numpy_dtype(self):
        import numpy

        if self.kind == "s":  # strings are bytes objects in NumPy object arrays, as in TF
            return numpy.object_
        return numpy.dtype(self.name).type

    @property
    def base_dtype(self) -> DType:
        return self

    def of(self, xp):
        """The dtype object of array namespace ``xp`` (``xp.float32`` ...)."""
        return getattr(xp, self.name)

    def __repr__(self) -> str:
        return f"tf.{self.name}"


float16 = DType("float16", 2, "f")
float32 = DType("float32", 4, "f")
float64 = DType("float64", 8, "f")
int8 = DType("int8", 1, "i")
int16 = DType("int16", 2, "i")
int32 = DType("int32", 4, "i")
int64 = DType("int64", 8, "i")
uint8 = DType("uint8", 1, "u")
bool = DType("bool", 1, "b")  # noqa: A001 - TF's name
# bytes: filenames, reader keys and records (tf.train.string_input_producer, tf.decode_raw)
string = DType("string", 8, "s")

_BY_NAME = {d.name: d for d in (float16, float32, float64, int8, int16, int32, int64, uint8, bool)}
_BY_NAME["string"] = string


def as_dtype(value) -> DType:
    """Convert a DType, a name (``'float32'``), a NumPy dtype or a Python type to a DType."""
    if isinstance(value, DType):
        return value
    if value is float:
        return float32
    if value is int:
        return int32
    name = getattr(value, "name", None) if not isinstance(value, str) else value
    if name is None and isinstance(value, type):
        name = value.__name__
    if name in _BY_NAME:
        return _BY_NAME[name]
    raise TypeError(f"cannot convert {value!r} to a dflow dtype; use one of {sorted(_BY_NAME)}")


def promote(a: DType, b: DType) -> DType:
    """Result dtype of a binary op. Like TF, mixed dtypes are an error, not a silent cast."""
    if a == b:
        return a
    raise TypeError(f"dtypes {a.name} and {b.name} differ; insert tf.cast(x, {a!r}) explicitly")
