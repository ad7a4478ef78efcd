"""``tf.py_func``: a Python function over NumPy arrays as an op of the graph (TF's ``script_ops``).

The function stays in this process, registered under a token that the op carries (as TF's
does): it runs only in the process that built the graph (a local session, or the client's own
task), and a graph written out and read back elsewhere has the token, not the function. It
has no gradient. Its results' shapes are unknown until it runs (``set_shape`` them).

>>> import dflow as tf
>>> import numpy as np
>>> with tf.Graph().as_default():
...     y = tf.py_func(lambda x: np.sort(x)[::-1], [tf.constant([3.0, 1.0, 2.0])], tf.float32)
...     tf.Session().run(y).tolist()
[3.0, 2.0, 1.0]
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np

from .. import dtypes
from ..errors import InvalidArgumentError
from ..graph import convert_to_tensor, get_default_graph
from .registry import Spec, defop

__all__ = ["py_func"]

_FUNCTIONS: dict[str, Callable] = {}  # token -> the function, in this process
_TOKENS = itertools.count()


def py_func(func: Callable, inp, Tout, stateful: bool = True, name=None):  # noqa: N803 - TF's name
    """``func(*arrays)`` when the step runs, its result(s) of dtype(s) ``Tout`` (one dtype: one
    tensor; a list: a list)."""
    if not callable(func):
        raise TypeError(f"py_func's func must be callable, got {type(func).__name__}")
    many = isinstance(Tout, (list, tuple))
    out_dtypes = [dtypes.as_dtype(t).name for t in (Tout if many else [Tout])]
    token = f"pyfunc_{next(_TOKENS)}"
    _FUNCTIONS[token] = func
    inputs = [convert_to_tensor(x) for x in inp]
    op = get_default_graph().create_op("PyFunc", inputs, {"token": token, "Tout": out_dtypes},
                                       name=name or "PyFunc")
    return list(op.outputs) if many else op.outputs[0]


def _infer(inputs, token, Tout):  # noqa: N803
    return [Spec(None, dtypes.as_dtype(t)) for t in Tout]


def _kernel(state, xp, *args, token, Tout):  # noqa: N803
    from ..runtime.devices import numpy_namespace, to_namespace

    func = _FUNCTIONS.get(token)
    if func is None:
        raise InvalidArgumentError(f"py_func {token} is not in this process: a py_func runs only in the "
                                   "process that built the graph (place it on the client's own task)")
    returned = func(*(np.asarray(to_namespace(a, numpy_namespace)) for a in args))
    results = list(returned) if isinstance(returned, (list, tuple)) else [returned]
    if len(results) != len(Tout):
        raise InvalidArgumentError(f"py_func {token} returned {len(results)} values, but Tout names "
                                   f"{len(Tout)}")
    return tuple(xp.asarray(np.asarray(r, dtype=dtypes.as_dtype(t).as_numpy_dtype))
                 for r, t in zip(results, Tout))


defop("PyFunc", _infer, _kernel, lambda op, *grads: [None] * len(op.inputs), stateful=True, num_outputs=None)
