"""``tf.compat``: text/bytes conversions, and ``v1``, which is dflow itself.

dflow is TF 1.x, so ``tf.compat.v1`` is the ``dflow`` module: a script written for
TF 2's ``import tensorflow.compat.v1 as tf`` runs as ``import dflow.compat.v1 as tf``,
and its ``tf.disable_v2_behavior()`` does nothing (there is no TF 2 behaviour to turn off).

>>> import dflow as tf
>>> tf.compat.as_str(b"caf\\xc3\\xa9"), tf.compat.as_bytes("abc")
('café', b'abc')
>>> tf.compat.v1 is tf
True
"""

from __future__ import annotations

import numbers
import os
import sys

import numpy as _np

__all__ = ["as_bytes", "as_text", "as_str", "as_str_any", "path_to_str", "bytes_or_text_types",
           "integral_types", "real_types", "complex_types", "v1", "forward_compatible"]

bytes_or_text_types = (bytes, str)
integral_types = (numbers.Integral, _np.integer)
real_types = (numbers.Real, _np.integer, _np.floating)
complex_types = (numbers.Complex, _np.number)


def as_bytes(bytes_or_text, encoding: str = "utf-8") -> bytes:
    """``bytes_or_text`` as bytes, text encoded with ``encoding``."""
    if isinstance(bytes_or_text, bytearray):
        return bytes(bytes_or_text)
    if isinstance(bytes_or_text, str):
        return bytes_or_text.encode(encoding)
    if isinstance(bytes_or_text, bytes):
        return bytes_or_text
    raise TypeError(f"expected binary or unicode string, got {bytes_or_text!r}")


def as_text(bytes_or_text, encoding: str = "utf-8") -> str:
    """``bytes_or_text`` as text, bytes decoded with ``encoding``."""
    if isinstance(bytes_or_text, str):
        return bytes_or_text
    if isinstance(bytes_or_text, (bytes, bytearray)):
        return bytes_or_text.decode(encoding)
    raise TypeError(f"expected binary or unicode string, got {bytes_or_text!r}")


as_str = as_text


def as_str_any(value) -> str:
    """``str(value)``, decoding bytes as UTF-8 first."""
    return as_str(value) if isinstance(value, bytes) else str(value)


def path_to_str(path):
    """An ``os.PathLike`` as its string; anything else unchanged."""
    return os.fspath(path) if isinstance(path, os.PathLike) else path


def forward_compatible(year: int, month: int, day: int) -> bool:
    """TF's check for graph features newer than a date: dflow's graphs never need them."""
    return False


def disable_v2_behavior() -> None:
    """A no-op: dflow always builds graphs and runs them in sessions, as TF 1.x."""


def disable_eager_execution() -> None:
    """A no-op: dflow has no eager mode to disable."""


def executing_eagerly() -> bool:
    return False


# ``tf.compat.v1`` is dflow; registered as a module so ``import dflow.compat.v1 as tf`` works too
v1 = sys.modules[__package__]
sys.modules[f"{__name__}.v1"] = v1
