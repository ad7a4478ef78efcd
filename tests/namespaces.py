"""The array namespaces the kernels are tested on: NumPy; array_api_strict (nothing beyond the
standard, as CuPy needs); and CuPy itself, marked ``gpu``, where a GPU exists (``tox -e gpu``).

>>> [p.id for p in NAMESPACES]
['numpy', 'strict', 'cupy']
"""

import array_api_compat
import array_api_compat.numpy as numpy_namespace
import array_api_strict
import numpy as np
import pytest

import dflow as tf
from dflow.runtime.devices import gpu_namespace

# gpu_namespace() is None without CuPy or a GPU; conftest then skips the gpu-marked parameter
CUPY = pytest.param(gpu_namespace(), id="cupy", marks=pytest.mark.gpu)
#: Every namespace but NumPy's: where a plan computed with NumPy is run again.
OTHER_NAMESPACES = [pytest.param(array_api_strict, id="strict"), CUPY]
NAMESPACES = [pytest.param(numpy_namespace, id="numpy"), *OTHER_NAMESPACES]


def reference_session() -> tf.Session:
    """A session whose plans are all on the CPU, even where a GPU would take the ops of no
    device: the NumPy reference that a test then runs again on another namespace."""
    return tf.Session(config=tf.ConfigProto(device_count={"GPU": 0}))


def to_host(value) -> np.ndarray:
    """A kernel's output as a NumPy array (CuPy's arrays copy back from the GPU)."""
    return value.get() if array_api_compat.is_cupy_array(value) else np.asarray(value)


def assert_of_namespace(value, xp, name: str = "") -> None:
    """``value`` is an array of ``xp``: a kernel did not drop back to NumPy on the way."""
    if xp is array_api_strict:
        assert type(value).__module__.startswith("array_api_strict"), name
    else:
        assert array_api_compat.is_cupy_array(value), name


def assert_same_on(xp, fetches, feeds=None, rtol=1e-7) -> None:
    """Run ``fetches`` in a NumPy reference session, then their plan again on ``xp``: each value an
    array of ``xp``, equal to NumPy's within ``rtol``. ``feeds``: placeholder -> NumPy value."""
    from dflow.runtime.executor import execute
    from dflow.runtime.state import SessionState

    feeds = feeds or {}
    with reference_session() as sess:
        expected = sess.run(fetches, feeds)
        plan = sess.runner.plans.values()[-1].schedule
    strings = {t.name for t in feeds if t.dtype == tf.string}  # bytes stay NumPy object arrays
    fed = {t.name: v if t.name in strings else xp.asarray(v) for t, v in feeds.items()}
    out = execute(plan, fed, SessionState(), {"CPU": xp})
    for tensor, want in zip(fetches, expected):
        assert_of_namespace(out[tensor.name], xp, tensor.name)
        np.testing.assert_allclose(to_host(out[tensor.name]), want, rtol=rtol, err_msg=tensor.name)
