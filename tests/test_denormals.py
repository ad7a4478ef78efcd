"""Denormals flushed to zero while dflow computes, as TensorFlow's sessions do (ops/denormals.py)."""

import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import dflow as tf
from dflow.ops import denormals, parallel

pytestmark = pytest.mark.skipif(not denormals.available(),
                                reason="no way to set the CPU's flush-to-zero modes on this platform "
                                       "(dflow sets them on Linux, x86-64 and AArch64)")
TINY = np.float32(1e-20)  # its square, 1e-40, is a denormal float32


def test_flushed_flushes_inside_and_gives_the_thread_its_own_modes_back():
    assert TINY * TINY != 0  # IEEE's gradual underflow, NumPy's default
    with denormals.flushed():
        assert TINY * TINY == 0
        with denormals.flushed():  # nested: still flushing, and still after the inner one ends
            pass
        assert TINY * TINY == 0
    assert TINY * TINY != 0
    with pytest.raises(KeyError), denormals.flushed():
        {}["an error inside gives the modes back too"]
    assert TINY * TINY != 0


def test_a_session_computes_no_denormal_and_leaves_the_caller_s_numpy_alone():
    """TensorFlow's answer: ``1e-20 * 1e-20`` is 0 in a session. The step's elementwise ops, its
    products on oneDNN's threads and its pieces on dflow's pool all flush."""
    x = tf.placeholder(tf.float32, [None])
    rows, columns = tf.placeholder(tf.float32, [784, 100]), tf.placeholder(tf.float32, [100, 300])
    product = tf.matmul(rows, columns)  # big enough for oneDNN, on its threads
    tiny_columns = np.full((100, 300), 1e-39, np.float32)  # denormal: read as zero
    ones = np.ones((784, 100), np.float32)
    with tf.Session() as sess:
        squares, got = sess.run([x * x, product], {x: [TINY, 1e-10], rows: ones, columns: tiny_columns})
    np.testing.assert_array_equal(squares, np.float32([0.0, np.float32(1e-10) ** 2]))
    assert not got.any()  # where the threads read denormals as they are, 100 * 1e-39 is 1e-37
    assert TINY * TINY != 0


def test_dflow_s_pool_threads_flush():
    parallel.map_pieces(np, lambda piece: None, [slice(0, 1), slice(1, 2)])  # the pool made
    seen = []

    def square_on_each_thread(piece):
        seen.append((threading.current_thread().name, float(TINY * TINY)))

    parallel.map_pieces(np, square_on_each_thread, [slice(i, i + 1) for i in range(8)])
    pool_threads = [value for name, value in seen if name.startswith("dflow-intra-op")]
    if parallel.cores() >= 2:
        assert pool_threads
    assert pool_threads == [0.0] * len(pool_threads)


def test_onednn_s_threads_flush_whatever_ran_on_them_first():
    """TBB's threads take the modes of the thread that first ran a primitive: one run outside a
    session (a test's, a user's) must not leave them reading denormals as they are."""
    from dflow.ops import onednn

    if not onednn.available():
        pytest.skip("oneDNN is not installed here (onednn-cpu-tbb: x86-64 Linux only)")
    check = textwrap.dedent("""\
        import numpy as np
        from dflow.ops import onednn
        ones, tiny = np.ones((784, 100), np.float32), np.full((100, 300), 1e-39, np.float32)
        first = onednn.matmul(ones, np.ones((100, 300), np.float32))  # outside any step
        assert first is not None and (first == 100).all()
        assert not onednn.matmul(ones, tiny).any()
        """)
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
