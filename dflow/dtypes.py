"""Element types, named as in TensorFlow 1.x (``tf.float32``, ``tf.int64``, ...).

A :class:`DType` is a name; kernels turn it into their array namespace's dtype
with ``dtype.of(xp)``, so the graph never imports NumPy's or CuPy's types.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass

__all__ = [
    "DType", "as_dtype", "float16", "float32", "float64", "int8", "int16", "int32",
    "int64", "uint8", "uint16", "uint32", "uint64", "bool", "complex64", "complex128", "string",
    "half", "double", "promote",
]


@dataclass(frozen=True)
class DType:
    """An element type. ``tf.float32.name == 'float32'``; ``size`` is in bytes."""

    name: str
    size: int
    kind: str  # "f" float, "i" signed int, "u" unsigned int, "b" bool, "c" complex, "S" string

    def __reduce__(self):  # unpickled on a worker as the same object, so `is` comparisons hold
        return as_dtype, (self.name,)

    @property
    def is_floating(self) -> bool:
        return self.kind == "f"

    @property
    def is_integer(self) -> bool:
        return self.kind in "iu"

    @property
    def is_unsigned(self) -> bool:
        return self.kind in "ub"

    @property
    def is_bool(self) -> bool:
        return self.kind == "b"

    @property
    def is_complex(self) -> bool:
        return self.kind == "c"

    @property
    def is_numpy_compatible(self) -> bool:
        return True

    @property
    def as_numpy_dtype(self):
        import numpy

        return numpy.object_ if self.kind == "S" else numpy.dtype(self.name).type

    @property
    def as_datatype_enum(self) -> int:
        """TF's ``DataType`` enum value (``tf.float32.as_datatype_enum == 1``)."""
        return _DATATYPE_ENUM[self.name]

    @property
    def base_dtype(self) -> DType:
        return self

    @property
    def real_dtype(self) -> DType:
        """The type of the real and imaginary parts of a complex type; else itself."""
        return {"complex64": float32, "complex128": float64}.get(self.name, self)

    @property
    def min(self):
        """The smallest value of the type (``tf.float32.min == -3.4028235e38``)."""
        return self._limits()[0]

    @property
    def max(self):
        return self._limits()[1]

    @property
    def limits(self) -> tuple:
        return self._limits()

    def _limits(self):
        import numpy

        if self.kind == "b":
            return False, True
        if self.kind in "iu":
            info = numpy.iinfo(self.name)
            return int(info.min), int(info.max)
        if self.kind == "f":
            info = numpy.finfo(self.name)
            return float(info.min), float(info.max)
        raise TypeError(f"{self!r} has no min and max")

    def is_compatible_with(self, other) -> bool:
        """True when a value of type ``other`` can be used where this type is expected."""
        return self == as_dtype(other)

    def __eq__(self, other) -> bool:
        if isinstance(other, DType):
            return self.name == other.name
        try:
            return self.name == as_dtype(other).name
        except TypeError:
            return False

    def __ne__(self, other) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(self.name)

    def of(self, xp):
        """The dtype object of array namespace ``xp`` (``xp.float32`` ...)."""
        if self.kind == "S":
            raise TypeError("tf.string has no array-namespace dtype: string tensors are bytes in NumPy "
                            "object arrays, read and decoded by the reader ops (tf.decode_raw, ...)")
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
uint16 = DType("uint16", 2, "u")
uint32 = DType("uint32", 4, "u")
uint64 = DType("uint64", 8, "u")
bool = DType("bool", 1, "b")  # noqa: A001 - TF's name
complex64 = DType("complex64", 8, "c")
complex128 = DType("complex128", 16, "c")
string = DType("string", 0, "S")  # bytes in object arrays: constants, fetches, file names, records, summaries
half = float16
double = float64

_BY_NAME = {d.name: d for d in (float16, float32, float64, int8, int16, int32, int64, uint8, uint16,
                                uint32, uint64, bool, complex64, complex128, string)}
# the other spellings TF's as_dtype takes ("int" and "long": dflow's default integer, as for int)
_ALIASES = {"float": float32, "double": float64, "half": float16, "int": int32, "long": int64,
            "complex": complex128, "str": string, "bytes": string, "bool_": bool, "object": string}
_PYTHON_TYPES = {float: float32, int: int32, builtins.bool: bool, complex: complex128, str: string,
                 bytes: string, object: string}
_DATATYPE_ENUM = {"float32": 1, "float64": 2, "int32": 3, "uint8": 4, "int16": 5, "int8": 6,
                  "string": 7, "complex64": 8, "int64": 9, "bool": 10, "uint16": 17, "complex128": 18,
                  "float16": 19, "uint32": 22, "uint64": 23}
_BY_ENUM = {number: _BY_NAME[name] for name, number in _DATATYPE_ENUM.items()}


def as_dtype(value) -> DType:
    """Convert a DType or anything TF 1.x takes as one to a DType: a name (``'float32'``,
    ``'float'``, ``'double'``), a Python type (``float``, ``int``, ``bool``), a NumPy type or
    dtype (``np.float32``, ``np.dtype('float32')``), a DataType enum number, or an object with
    ``as_numpy_dtype``/``dtype``.

    >>> as_dtype("float"), as_dtype(float), as_dtype(int)
    (tf.float32, tf.float32, tf.int32)
    """
    if isinstance(value, DType):
        return value
    found = _lookup(value)
    if found is None:
        raise TypeError(f"cannot convert {value!r} to a dflow dtype; use tf.float32 or one of "
                        f"{sorted(_BY_NAME)} (or 'float', 'double', 'int', float, int, bool, np.float32)")
    return found


def _lookup(value) -> DType | None:
    if isinstance(value, str):
        return _BY_NAME.get(value) or _ALIASES.get(value)
    if isinstance(value, builtins.bool):
        return None
    if isinstance(value, int):
        return _BY_ENUM.get(value)
    if isinstance(value, type) and value in _PYTHON_TYPES:
        return _PYTHON_TYPES[value]
    if hasattr(value, "kind") and getattr(value, "kind", None) in ("U", "S", "O"):
        return string  # np.dtype('<U5'), np.dtype(object): what TF maps to tf.string
    name = getattr(value, "name", None) or getattr(value, "__name__", None)
    if isinstance(name, str) and (name in _BY_NAME or name in _ALIASES):
        return _BY_NAME.get(name) or _ALIASES.get(name)
    if isinstance(name, str) and name in ("str_", "bytes_", "object_"):
        return string
    dtype = getattr(value, "dtype", None)  # jax/array-api dtypes, tensors, arrays
    return None if dtype is None or dtype is value else _lookup(dtype)


def promote(a: DType, b: DType) -> DType:
    """Result dtype of a binary op. Like TF, mixed dtypes are an error, not a silent cast."""
    if a == b:
        return a
    raise TypeError(f"dtypes {a.name} and {b.name} differ; insert tf.cast(x, {a!r}) explicitly")
