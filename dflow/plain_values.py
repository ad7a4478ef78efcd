"""Op attributes as plain data (JSON-ready, no pickle): dtypes, NumPy arrays and tuples tagged,
so that a graph or a partition's stages travel as text and come back equal.

>>> import numpy as np
>>> plain = encode({"dtype": dtypes.float32, "value": np.arange(3, dtype=np.int8), "pair": (1, 2)})
>>> sorted(plain), plain["dtype"], plain["pair"]
(['dtype', 'pair', 'value'], {'__dtype__': 'float32'}, {'__tuple__': [1, 2]})
>>> back = decode(plain)
>>> back["value"].tolist(), back["value"].dtype.name, back["pair"]
([0, 1, 2], 'int8', (1, 2))
"""

from __future__ import annotations

import base64

import numpy

from . import dtypes

__all__ = ["encode", "decode"]


def encode(value):
    if isinstance(value, dtypes.DType):
        return {"__dtype__": value.name}
    if isinstance(value, numpy.ndarray):
        data = numpy.ascontiguousarray(value)
        return {"__ndarray__": base64.b64encode(data.tobytes()).decode("ascii"),
                "dtype": data.dtype.str, "shape": list(value.shape)}  # (ascontiguousarray makes 0-d 1-d)
    if isinstance(value, numpy.generic):
        return value.item()
    if isinstance(value, tuple):
        return {"__tuple__": [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    return value


def decode(value):
    if isinstance(value, list):
        return [decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "__dtype__" in value:
        return dtypes.as_dtype(value["__dtype__"])
    if "__ndarray__" in value:
        raw = base64.b64decode(value["__ndarray__"])
        return numpy.frombuffer(raw, dtype=numpy.dtype(value["dtype"])).reshape(value["shape"]).copy()
    if "__tuple__" in value:
        return tuple(decode(v) for v in value["__tuple__"])
    return {k: decode(v) for k, v in value.items()}
