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


@pytest.mark.parametrize("op", ["elementwise", "max_pool_grad"])
def test_a_piecewise_op_holds_few_parts_beside_its_result(op):
    """A kernel cut into batch pieces writes each part into its result as the part finishes:
    its peak is the result and a few parts, not the result beside every part (2x), as it was."""
    import tracemalloc

    import array_api_compat.numpy as xp
    import numpy as np

    from dflow.ops import conv_lowering, parallel

    x = np.random.default_rng(0).standard_normal((256, 24, 24, 64)).astype(np.float32)  # 36 MiB
    if op == "elementwise":
        run = lambda: parallel.elementwise(xp, lambda a: a * 2.0, x)
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
