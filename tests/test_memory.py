"""A process with a local session keeps the memory its steps free for the next step (glibc
malloc's thresholds, dflow/runtime/memory.py): a big array comes from the heap, not from a fresh
mapping that faults in page by page and is unmapped again when the step frees it."""

import ctypes
import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent("""
    import ctypes, sys
    import numpy
    import dflow as tf

    class Mallinfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
            "keepcost")]

    mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
    mallinfo2.restype = Mallinfo2
    if sys.argv[1] == "session":
        tf.Session()
    before = mallinfo2().hblks  # blocks malloc got from mmap
    array = numpy.ones(6 * 2**20, numpy.float32)  # 24 MiB
    print(mallinfo2().hblks - before)
""")


def _mapped_blocks_of_a_big_array(after: str) -> int:
    done = subprocess.run([sys.executable, "-c", PROBE, after], capture_output=True, text=True, timeout=120,
                          check=True)
    return int(done.stdout.split()[-1])


def test_a_local_session_keeps_big_arrays_in_the_reused_heap():
    try:
        has_mallinfo2 = hasattr(ctypes.CDLL("libc.so.6"), "mallinfo2")
    except OSError:
        has_mallinfo2 = False
    if not has_mallinfo2:
        pytest.skip("the C library is not glibc >= 2.33, whose malloc thresholds dflow sets")
    assert _mapped_blocks_of_a_big_array("nothing") == 1  # glibc's default: a fresh mapping
    assert _mapped_blocks_of_a_big_array("session") == 0


@pytest.mark.parametrize("op", ["stacked_pieces", "max_pool_grad"])
def test_a_piecewise_op_holds_few_parts_beside_its_result(op):
    """A kernel cut into batch pieces writes each part into its result as the part finishes:
    its peak is the result and a few parts, not the result beside every part (2x), as it was."""
    import tracemalloc

    import array_api_compat.numpy as xp
    import numpy as np

    from dflow.ops import conv_lowering, parallel

    x = np.random.default_rng(0).standard_normal((256, 24, 24, 64)).astype(np.float32)  # 36 MiB
    if op == "stacked_pieces":
        run = lambda: parallel.stacked_pieces(xp, lambda a: a * 2.0, [x], parallel.pieces_for(256, 32))
    else:
        y = conv_lowering.max_pool(xp, x, (3, 3), (2, 2), "SAME")
        dy = np.ones_like(y)
        run = lambda: conv_lowering.max_pool_grad(xp, x, y, dy, (3, 3), (2, 2), "SAME")
    run()  # the pool's threads and BLAS start up outside the measurement
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        result = run()
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert result.nbytes == x.nbytes
    mib = 2**20
    assert peak < 1.5 * result.nbytes, f"peak {peak / mib:.0f} MiB for a {result.nbytes / mib:.0f} MiB result"


# ---- a kernel that works in place takes its input's buffer where nothing else reads it --------
@pytest.fixture
def bias_add_relu_calls(monkeypatch):
    """Each fused BiasAdd + Relu of the session, as whether it wrote into its input's buffer."""
    from dflow.ops import fused

    real, calls = fused.bias_add_relu, []

    def recorded(value, bias, out=None):
        calls.append(out is value)
        return real(value, bias, out)

    monkeypatch.setattr(fused, "bias_add_relu", recorded)
    return calls


def _relu_layer(tf, value, bias):
    return tf.nn.relu(tf.nn.bias_add(value, bias))


def test_a_relu_over_a_layer_s_output_writes_into_its_buffer(bias_add_relu_calls):
    import numpy as np

    import dflow as tf

    x = tf.placeholder(tf.float32, [4, 3])
    bias = tf.constant([-1.0, 0.0, 1.0])
    y = _relu_layer(tf, x * 2.0, bias)  # the product is used by nothing else
    feed = np.arange(12, dtype=np.float32).reshape(4, 3) - 6
    with tf.Session() as sess:
        got = sess.run(y, {x: feed})
    np.testing.assert_array_equal(got, np.maximum(feed * 2 + [-1, 0, 1], 0))
    assert bias_add_relu_calls == [True]


def test_a_buffer_someone_else_reads_is_not_written(bias_add_relu_calls):
    """Not the caller's fed array, nor a value used later, nor one a live view shares, nor a
    variable's: each gives the numbers it gives without working in place."""
    import numpy as np

    import dflow as tf

    x = tf.placeholder(tf.float32, [4, 3])
    bias = tf.constant([-1.0, 0.0, 1.0])
    feed = np.arange(12, dtype=np.float32).reshape(4, 3) - 6
    kept = feed.copy()
    doubled = x * 2.0
    variable = tf.Variable(feed)
    fetches = {
        "fed": _relu_layer(tf, x, bias),
        "used_later": _relu_layer(tf, doubled, bias) + doubled,
        "viewed": _relu_layer(tf, x * 3.0, bias),
        "variable": _relu_layer(tf, variable.read_value(), bias),
    }
    view = tf.reshape(fetches["viewed"].op.inputs[0].op.inputs[0], [12])  # x * 3, seen through a view
    fetches["view"] = view
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        got = sess.run(fetches, {x: feed})
        stored = sess.run(variable)
    relu = lambda v: np.maximum(v + [-1, 0, 1], 0)
    np.testing.assert_array_equal(got["fed"], relu(feed))
    np.testing.assert_array_equal(got["used_later"], relu(feed * 2) + feed * 2)
    np.testing.assert_array_equal(got["viewed"], relu(feed * 3))
    np.testing.assert_array_equal(got["view"], (feed * 3).reshape(12))
    np.testing.assert_array_equal(got["variable"], relu(feed))
    np.testing.assert_array_equal(feed, kept)
    np.testing.assert_array_equal(stored, feed)
    assert bias_add_relu_calls == [False] * 4


def test_a_constant_is_made_once_and_never_written(bias_add_relu_calls, monkeypatch):
    """A compiled stage makes its constants when it is compiled and starts each run with them:
    a kernel that works in place never takes a constant's buffer, so every run sees its value."""
    import dataclasses

    import numpy as np

    import dflow as tf
    from dflow.ops.registry import OP_DEFS

    const_calls = []
    real = OP_DEFS["Const"].kernel
    def counted(xp, **attrs):
        const_calls.append(1)
        return real(xp, **attrs)

    monkeypatch.setitem(OP_DEFS, "Const", dataclasses.replace(OP_DEFS["Const"], kernel=counted))
    x = tf.placeholder(tf.float32, [2, 3])
    first = tf.constant(np.arange(6, dtype=np.float32).reshape(2, 3) - 3)
    y = _relu_layer(tf, first, tf.constant([-1.0, 0.0, 1.0])) + x
    with tf.Session() as sess:
        runs = [sess.run(y, {x: np.ones((2, 3), np.float32)}) for _ in range(3)]
    expected = np.maximum(np.arange(6).reshape(2, 3) - 3 + [-1, 0, 1], 0) + 1
    for got in runs:
        np.testing.assert_array_equal(got, expected)
    assert bias_add_relu_calls == [False] * 3
    assert len(const_calls) == 2  # the two constants, once each
