"""``tf.test``: what TF 1.x scripts ask about the build and devices, and a small ``TestCase``.

dflow computes on a GPU through CuPy, so "built with CUDA" means CuPy is
installed, and a GPU is available when CuPy sees one.

>>> import dflow as tf
>>> tf.test.gpu_device_name() in ("", "/device:GPU:0")
True
"""

from __future__ import annotations

import contextlib
import importlib.util
import unittest

import numpy as np

from .graph import Graph
from .runtime.devices import gpu_namespace
from .runtime.session import Session

__all__ = ["is_built_with_cuda", "is_gpu_available", "gpu_device_name", "TestCase", "main"]


def is_built_with_cuda() -> bool:
    """True when dflow can compute on an NVIDIA GPU (CuPy is installed)."""
    return importlib.util.find_spec("cupy") is not None


def is_built_with_gpu_support() -> bool:
    return is_built_with_cuda()


def is_gpu_available(cuda_only: bool = False, min_cuda_compute_capability=None) -> bool:
    """True when CuPy sees a GPU (of at least ``min_cuda_compute_capability``, a ``(major, minor)``)."""
    if gpu_namespace() is None:
        return False
    if min_cuda_compute_capability is None:
        return True
    import cupy

    capability = int(cupy.cuda.Device(0).compute_capability)  # "80" for 8.0
    return (capability // 10, capability % 10) >= tuple(min_cuda_compute_capability)


def gpu_device_name() -> str:
    """``"/device:GPU:0"`` when a GPU is available, else ``""``, as TF's."""
    return "/device:GPU:0" if is_gpu_available() else ""


class TestCase(unittest.TestCase):
    """``tf.test.TestCase``: each test in a fresh default graph, ``self.session()`` (also
    ``cached_session``/``test_session``) on it, and the ``assertAll*`` comparisons."""

    def setUp(self):
        super().setUp()
        self._graph_scope = Graph().as_default()
        self._graph_scope.__enter__()

    def tearDown(self):
        self._graph_scope.__exit__(None, None, None)
        super().tearDown()

    @contextlib.contextmanager
    def session(self, graph=None, config=None, use_gpu=False, force_gpu=False):
        with Session(graph=graph, config=config) as sess, sess.as_default():
            yield sess

    cached_session = session

    def test_session(self, graph=None, config=None, use_gpu=False, force_gpu=False):
        """TF 1.x's older name of :meth:`session`."""
        return self.session(graph, config)

    test_session.__test__ = False  # a helper with a test's name: pytest must not collect it

    def evaluate(self, tensors):
        from .context import session_or_default

        return session_or_default(None, "evaluate tensors with `self.evaluate()`").run(tensors)

    def assertAllClose(self, a, b, rtol=1e-6, atol=1e-6, msg=None):  # noqa: N802 - TF's name
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol, err_msg=msg or "")

    def assertAllEqual(self, a, b, msg=None):  # noqa: N802
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=msg or "")

    def assertNear(self, f1, f2, err, msg=None):  # noqa: N802
        self.assertTrue(abs(f1 - f2) <= err, msg or f"{f1} != {f2} +/- {err}")


def main(argv=None):
    """Run the module's tests (``unittest.main``)."""
    return unittest.main(argv=argv)
