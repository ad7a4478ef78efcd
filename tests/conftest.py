import importlib.util

import pytest

import dflow as tf


def _gpu_available() -> bool:
    if importlib.util.find_spec("cupy") is None:
        return False
    import cupy

    return cupy.is_available()


def pytest_collection_modifyitems(config, items):
    if _gpu_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU with CuPy (none found on this machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def fresh_default_graph():
    """Each test builds into its own empty default graph."""
    tf.reset_default_graph()
    yield
    tf.reset_default_graph()
