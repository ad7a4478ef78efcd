"""Intra-op parallelism for the NumPy kernels: the batch split across cores.

A convolution of a CIFAR-10-sized layer is dozens of small matmuls; with BLAS's own
threads each of them ends in a barrier, and on a busy machine (a neighbour holding a
core) every barrier waits a scheduler time slice: the 5x5x64x64 convolution at batch
100 took 958 ms with 2 OpenBLAS threads against 155 ms with one, beside ~12 runnable
processes on 2 cores (``docs/kernels.md``). So the heavy kernels cut the batch into
one piece per core and run the pieces on this module's threads, each piece's BLAS
calls single-threaded: no barrier inside an op, and a descheduled thread delays only
its own piece. NumPy and BLAS release the GIL, so the pieces truly overlap.

Only the NumPy namespace goes parallel; any other (``array_api_strict`` in the tests,
CuPy) runs the same pieces one after the other, so results are identical.

>>> import array_api_compat.numpy as xp
>>> list(map_pieces(xp, lambda s: s.stop - s.start, [slice(0, 3), slice(3, 5)]))
[3, 2]
"""

from __future__ import annotations

import contextlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor, wait

from . import denormals

__all__ = ["cores", "map_pieces", "pieces_for", "stacked_pieces", "matmul",
           "set_blas_threads", "restore_blas_threads"]

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_blas = None  # threadpoolctl's controllers of the BLAS libraries NumPy loaded
_inside = threading.local()  # set on the pool's threads: no nested parallelism


def _affinity() -> int:
    """Cores this process may run on (its affinity mask, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cores() -> int:
    """How many pieces an op may run at once: the BLAS thread count this process was given
    (``OPENBLAS_NUM_THREADS``, ``ConfigProto(intra_op_parallelism_threads=...)``, a cluster
    worker's ``--blas_threads``), so a setting that asked for one thread gets one; at most
    the affinity mask's cores."""
    held = _cores_while_held  # (read without the lock: fixed while BLAS is held at one thread)
    if held:
        return held
    _setup()
    with _lock:
        blas = max((lib.num_threads for lib in _blas_libraries()), default=0)
    return _cores_for(blas)


def _cores_for(blas_threads: int) -> int:
    return max(1, min(blas_threads or _affinity(), _affinity()))


def pieces_for(n: int, most: int) -> list[slice]:
    """Slices of ``range(n)``: at most ``most`` long each, and at least one per core when the
    namespace will run them in parallel (so a batch of 100 still uses both cores)."""
    size = max(1, min(most, -(-n // cores())))
    # stops stay in bounds: the array API leaves out-of-bounds slice stops unspecified
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


def _is_numpy(xp) -> bool:
    return getattr(xp, "__name__", "").startswith(("numpy", "array_api_compat.numpy"))


def _setup():
    global _pool
    with _lock:
        if _pool is None:
            _blas_libraries()
            _pool = ThreadPoolExecutor(_affinity(), thread_name_prefix="dflow-intra-op",
                                       initializer=denormals.flush_on_this_thread)
    return _pool


def _blas_libraries() -> list:
    global _blas
    if _blas is None:
        from threadpoolctl import ThreadpoolController

        _blas = [lib for lib in ThreadpoolController().lib_controllers if lib.user_api == "blas"]
    return _blas


def forget_blas_libraries() -> None:
    """Find the loaded BLAS libraries again at the next use (a module loaded another one)."""
    global _blas
    with _lock:
        _blas = None


def set_blas_threads(count: int) -> list:
    """Set every BLAS library's thread count to ``count``, whichever thread calls; return what
    to pass back to restore the counts before.

    threadpoolctl (3.8) lets only the first thread that sets an OpenBLAS limit set it again and
    silently ignores the others. A Dask worker's main thread sets the worker's count at start,
    so the batch pieces that its stage threads ran kept BLAS's two threads each, fighting
    for the same two cores: the CIFAR-10 step computed 149 ms there against 112 in a local
    session (docs/kernels.md). dflow's own changes take control of the limit first.
    """
    libraries = _blas_libraries()
    before = [(lib, lib.num_threads) for lib in libraries]
    restore_blas_threads([(lib, count) for lib in libraries])
    return before


def restore_blas_threads(counts: list) -> None:
    """Give each BLAS library the thread count that :func:`set_blas_threads` returned for it."""
    for lib, count in counts:
        release_control = getattr(type(lib), "clear_controlling_thread", None)  # threadpoolctl >= 3.8
        if release_control is None:
            lib.set_num_threads(count)
            continue
        release_control(force=True)  # so that this thread's change counts,
        lib.set_num_threads(count)
        release_control(force=True)  # and the next thread's (a user's threadpool_limits) too


def _single_threaded(fn, item):
    _inside.active = True
    return fn(item)


def _piece_here(fn, item):
    """``fn(item)`` on the calling thread as one of the pieces: what it cuts runs in turn."""
    was_inside = getattr(_inside, "active", False)
    _inside.active = True
    try:
        return fn(item)
    finally:
        _inside.active = was_inside


def map_pieces(xp, fn, items: list):
    """``fn(item)`` for each of ``items``, in order: on the NumPy namespace with several
    cores, concurrently on this module's threads, BLAS at one thread in every piece (with
    one item, on the calling thread: on a busy machine BLAS's threads wait at every small
    matmul's barrier for a time slice, 10x slower at batch 1)."""
    if not _is_numpy(xp) or getattr(_inside, "active", False) or (len(items) < 2 and _depth) or cores() < 2:
        return [fn(item) for item in items]  # (one item while a step holds BLAS at one thread: here)
    pool = _setup()
    _blas_to_one_thread(+1)  # even for one piece: a small op gains nothing from BLAS's threads
    try:
        if len(items) < 2:
            return [fn(item) for item in items]
        # the calling thread runs the first piece while the pool's threads wake for the others: a
        # wake-up took 40-100 us on a 2-core VM, as long as a small op's whole piece
        others = [pool.submit(_single_threaded, fn, item) for item in items[1:]]
        try:
            first = _piece_here(fn, items[0])
        finally:
            _all_ended(others)  # none still writes when this returns, or raises
        return [first, *(piece.result() for piece in others)]
    finally:
        _blas_to_one_thread(-1)


def _all_ended(pieces: list) -> None:
    """Returns when every one of ``pieces`` (futures) has ended, Ctrl-C (or SIGTERM's
    ``Terminated``) included: the interrupt is raised after them. Raised at once, it left
    pieces writing into arrays their caller had given up, and running BLAS while the step's
    end gave BLAS its threads back."""
    interrupt = None
    while True:
        try:
            wait(pieces)
            break
        except BaseException as caught:  # (KeyboardInterrupt: the wait is interruptible)
            interrupt = interrupt or caught
    if interrupt is not None:
        raise interrupt


def stacked_pieces(xp, fn, arrays, pieces: list) -> object:
    """``fn`` over each piece (a slice of the leading axis) of ``arrays``, its parts written into
    one result as they finish: at most one part per core is held beside the result, never all of
    them (which doubled the peak memory of a step's largest elementwise ops).

    >>> import array_api_compat.numpy as xp
    >>> stacked_pieces(xp, lambda a: a * 2, [xp.arange(5)], [slice(0, 3), slice(3, 5)]).tolist()
    [0, 2, 4, 6, 8]
    """
    result, lock = [], threading.Lock()

    def piece(rows):
        part = fn(*(a[rows, ...] for a in arrays))
        with lock:  # the first part to finish sizes the result
            if not result:
                result.append(xp.empty((arrays[0].shape[0], *part.shape[1:]), dtype=part.dtype))
        result[0][rows, ...] = part  # disjoint rows: the pieces' threads never write the same ones

    map_pieces(xp, piece, pieces)
    return result[0]


_depth = 0  # map_pieces calls running (inter-op threads may run two ops at once)
_saved: list = []
_cores_while_held = 0  # while BLAS is held at one thread (_depth > 0): what cores() says


def _forget_threads_in_a_forked_child() -> None:
    """A forked child has none of its parent's threads: the pool's work would wait forever for
    them (a multiprocessing "fork" child running a convolution hung), so it starts its own."""
    global _lock, _pool, _depth, _saved, _cores_while_held
    _lock, _pool, _depth, _saved, _cores_while_held = threading.Lock(), None, 0, [], 0


os.register_at_fork(after_in_child=_forget_threads_in_a_forked_child)


@contextlib.contextmanager
def one_blas_thread():
    """BLAS at one thread inside, counted with :func:`map_pieces`'s. A step on the CPU runs inside
    (``runtime.executor.execute``): its kernels then switch nothing per op, where each switch cost
    12-30 us inside a step (CIFAR-10 without LRN 1.02-1.05x at batch 1 to 100)."""
    _blas_to_one_thread(+1)
    try:
        yield
    finally:
        _blas_to_one_thread(-1)


def _blas_to_one_thread(change: int) -> None:
    """BLAS at one thread while any map_pieces runs; its own count back after the last."""
    global _depth, _saved, _cores_while_held
    with _lock:
        if change > 0 and _depth == 0:
            _saved = set_blas_threads(1)
            # what cores() says meanwhile: the count BLAS was given, not its one thread (a step's
            # small ops ask it each time: 1.8 us with the lock and the affinity mask read)
            _cores_while_held = _cores_for(max((threads for _, threads in _saved), default=0))
        _depth += change
        if _depth == 0:
            restore_blas_threads(_saved)
            _cores_while_held = 0


PARALLEL_MATMUL_FROM = 1 << 23  # multiply-adds: below, a thread hand-off (20-100 us) costs more


SUM_ROWS_BY_PRODUCT_FROM = 1024  # rows; below, NumPy's sum beats a BLAS call's set-up


def sum_rows(xp, a):
    """``a`` summed over every axis but the last (a channels-last bias's gradient). Over many
    rows (a convolution's N x H x W) a row of ones times the ``(rows, C)`` matrix, a BLAS product:
    2-4x faster than NumPy's sum over the leading axes on 2 cores (0.28 against 1.2 ms at
    CIFAR-10's conv1), 1.2 ms of a 10.7 ms step on a GPU; over a dense layer's batch of rows
    NumPy's sum, 6 against 23 us at 100 x 512. Through :func:`matmul`: a product with BLAS's own
    threads leaves them spinning after it, and the next convolution's pieces ran 1.5x slower
    beside them."""
    rows = xp.reshape(a, (-1, a.shape[-1]))
    if rows.shape[0] < SUM_ROWS_BY_PRODUCT_FROM:
        return xp.sum(rows, axis=0)
    ones = xp.ones((1, rows.shape[0]), dtype=a.dtype)
    return xp.reshape(matmul(xp, ones, rows), (a.shape[-1],))


def matmul(xp, a, b):
    """``a @ b``; a big 2-D product on the NumPy namespace is cut along its largest dimension
    (rows of ``a``, columns of ``b``, or the summed one) into one part per core."""
    if a.ndim == 2 and b.ndim == 2 and a.shape[1] == b.shape[0] == 1:
        # an outer product, a weight's gradient at batch 1: BLAS's k = 1 product took 1.5 ms where
        # a multiply takes 0.3 (CIFAR-10's 2304 x 384 layer, a sixth of the batch-1 step), and
        # two cores' parts of the multiply 0.5-0.8
        return a * b
    if a.ndim >= 3 and a.shape[:-2] == b.shape[:-2] and a.shape[0] > 1 and _is_numpy(xp) \
            and a.size * b.shape[-1] >= PARALLEL_MATMUL_FROM and cores() >= 2:
        # a batch of products (einsum's, attention's): a part of the batch per core, as a step
        # runs BLAS on one thread
        return stacked_pieces(xp, xp.matmul, [a, b], pieces_for(a.shape[0], a.shape[0]))
    if a.ndim != 2 or b.ndim != 2 or not _is_numpy(xp):
        return xp.matmul(a, b)
    (m, k), n = a.shape, b.shape[1]
    if m * k * n < PARALLEL_MATMUL_FROM:  # whole, on one BLAS thread: the step's hold, else map_pieces'
        # (inside a step at once: map_pieces' checks took a 64 x 10 x 10 product from 0.9 to 3.7 us)
        return a @ b if _depth else map_pieces(xp, lambda _: a @ b, [None])[0]
    if cores() < 2:
        return xp.matmul(a, b)
    if k > 4 * max(m, n):  # a long sum (a weight gradient over the batch): add the parts up
        parts = map_pieces(xp, lambda s: a[:, s] @ b[s, :], pieces_for(k, k))
        total = parts[0]
        for part in parts[1:]:
            total += part
        return total
    import numpy  # the namespace is NumPy's here: its matmul writes into the output's parts

    out = numpy.empty((m, n), dtype=numpy.result_type(a, b))
    if m >= n:
        map_pieces(xp, lambda s: numpy.matmul(a[s, :], b, out=out[s, :]), pieces_for(m, m))
    else:
        map_pieces(xp, lambda s: numpy.matmul(a, b[:, s], out=out[:, s]), pieces_for(n, n))
    return out
