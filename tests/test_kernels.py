"""The batch-split kernels (dflow/ops/parallel.py) and compiled stages (runtime/executor.py).

Every kernel that cuts its work across cores gives, cut in any number of pieces on
NumPy's threads, the numbers of one piece, and on array_api_strict (where the pieces run
one after the other) the same numbers again; a compiled stage gives the counting
executor's values, order and peak bytes, and its errors name the op.
"""

from __future__ import annotations

import signal
import threading

import array_api_compat.numpy as xp_numpy
import array_api_strict
import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

import dflow as tf
from dflow.ops import parallel
from dflow.ops.registry import get_opdef
from dflow.runtime.executor import RunStats, compile_stage, execute
from dflow.runtime.state import SessionState

RNG = np.random.default_rng(7)
CONV = dict(strides=[1, 1, 1, 1], padding="SAME", data_format="NHWC", dilations=[1, 1, 1, 1])
POOL = dict(ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1], padding="SAME", data_format="NHWC")
LRN = dict(depth_radius=4, bias=1.0, alpha=0.001 / 9.0, beta=0.75)


def normal(*shape):
    return RNG.standard_normal(shape)


def kernel(xp, op_type, *arrays, **attrs):
    out = get_opdef(op_type).kernel(xp, *(xp.asarray(a) for a in arrays), **attrs)
    return tuple(np.asarray(o) for o in out) if isinstance(out, tuple) else np.asarray(out)


def cases():
    """(name, op type, inputs, attrs): the CIFAR-10 layers, small, and MatMul's three cuts."""
    x1, x2 = normal(5, 8, 8, 3), normal(5, 6, 6, 16)
    w1, w2 = normal(5, 5, 3, 16), normal(3, 3, 16, 8)
    dy1, dy2 = normal(5, 8, 8, 16), normal(5, 6, 6, 8)
    pooled = kernel(xp_numpy, "MaxPool", dy1, **POOL)
    lrn = kernel(xp_numpy, "LRN", x2, **LRN)
    plain = dict(transpose_a=False, transpose_b=False)
    return [
        ("conv rgb", "Conv2D", [x1, w1], CONV),
        ("conv rows", "Conv2D", [x2, w2], CONV),
        ("conv input grad", "Conv2DBackpropInput", [np.array(x2.shape), w2, dy2], CONV),
        ("conv filter grad rgb", "Conv2DBackpropFilter", [x1, np.array(w1.shape), dy1], CONV),
        ("conv filter grad rows", "Conv2DBackpropFilter", [x2, np.array(w2.shape), dy2], CONV),
        ("max pool", "MaxPool", [dy1], POOL),
        ("max pool grad", "MaxPoolGrad", [dy1, pooled, 2 * pooled], POOL),
        ("lrn", "LRN", [x2], LRN),
        ("lrn grad", "LRNGrad", [dy2[..., :1] * x2, x2, lrn], LRN),
        ("relu", "Relu", [x2], {}),
        ("relu grad", "ReluGrad", [dy2, x2[..., :8]], {}),
        ("matmul rows", "MatMul", [normal(40, 6), normal(6, 5)], plain),
        ("matmul columns", "MatMul", [normal(5, 6), normal(6, 40)], plain),
        ("matmul batched", "MatMul", [normal(5, 4, 6), normal(5, 6, 3)], plain),
        ("matmul sum", "MatMul", [normal(50, 4), normal(50, 3)], dict(transpose_a=True, transpose_b=False)),
    ]


CASES = cases()


@pytest.fixture
def small_thresholds(monkeypatch):
    """Every op big enough to cut: the thresholds that keep tiny ops whole, at zero."""
    monkeypatch.setattr(parallel, "PARALLEL_MATMUL_FROM", 0)


@pytest.mark.parametrize("name, op_type, inputs, attrs", CASES, ids=[c[0] for c in CASES])
def test_pieces_on_threads_give_one_piece_s_numbers(monkeypatch, small_thresholds, name, op_type,
                                                    inputs, attrs):
    monkeypatch.setattr(parallel, "cores", lambda: 1)
    whole = kernel(xp_numpy, op_type, *inputs, **attrs)
    monkeypatch.setattr(parallel, "cores", lambda: 3)  # 5 images: pieces of 2, 2 and 1
    cut = kernel(xp_numpy, op_type, *inputs, **attrs)
    np.testing.assert_allclose(cut, whole, rtol=1e-12, atol=1e-12)
    strict = kernel(array_api_strict, op_type, *inputs, **attrs)  # pieces one after the other
    np.testing.assert_allclose(strict, whole, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("xp", [xp_numpy, array_api_strict], ids=["numpy", "strict"])
def test_a_matmul_over_one_summed_element_is_the_outer_product(xp):
    """A weight's gradient at batch 1, ``x.T @ dy``, is a multiply (not BLAS's slow k = 1 product):
    the same numbers, and a product whose inner sizes differ still fails, never broadcasts."""
    x, dy = np.random.default_rng(3).standard_normal((2, 1, 6))
    got = kernel(xp, "MatMul", xp.asarray(x), xp.asarray(dy[:, :4]), transpose_a=True, transpose_b=False)
    np.testing.assert_array_equal(np.asarray(got), x.T @ dy[:, :4])
    assert got.shape == (6, 4)
    with pytest.raises(ValueError):  # (6, 1) @ (6, 4): no product, whatever broadcasting allows
        kernel(xp, "MatMul", xp.asarray(x.T), xp.asarray(np.ones((6, 4))), transpose_a=False,
               transpose_b=False)


def test_blas_gets_its_threads_back_after_a_cut_op(monkeypatch, small_thresholds):
    monkeypatch.setattr(parallel, "cores", lambda: 2)
    before = [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]
    seen = []
    parallel.map_pieces(xp_numpy, lambda s: seen.append(
        [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]),
        [slice(0, 1), slice(1, 2)])
    assert seen == [[1] * len(before)] * 2  # inside: one BLAS thread per piece
    assert [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"] == before


def test_an_error_in_a_piece_reaches_the_caller(monkeypatch):
    monkeypatch.setattr(parallel, "cores", lambda: 2)

    def fails_on_second(piece):
        if piece.start:
            raise ValueError("piece 2 failed")
        return piece

    with pytest.raises(ValueError, match="piece 2 failed"):
        parallel.map_pieces(xp_numpy, fails_on_second, [slice(0, 1), slice(1, 2)])


def test_ctrl_c_in_a_cut_op_is_raised_after_its_pieces_end(monkeypatch):
    """Ctrl-C while the caller waits for a piece: the piece still writes into the op's arrays
    and runs BLAS, so the interrupt waits for it (raised at once, it left the piece running
    while the session gave BLAS its threads back)."""
    monkeypatch.setattr(parallel, "cores", lambda: 2)
    caller, first_done, ended = threading.main_thread().ident, threading.Event(), []
    a = np.random.default_rng(0).standard_normal((300, 300))

    def piece(rows):
        if rows.start == 0:  # on the caller's thread
            first_done.set()
            return
        first_done.wait(60)  # the caller now waits for this piece: interrupt it there
        signal.pthread_kill(caller, signal.SIGINT)
        for _ in range(20):  # work on after the interrupt
            a @ a
        ended.append(rows)

    with pytest.raises(KeyboardInterrupt):
        parallel.map_pieces(xp_numpy, piece, [slice(0, 1), slice(1, 2)])
    assert ended == [slice(1, 2)]


# ---- compiled stages ------------------------------------------------------------------------------
def _plan(fetches, feeds):
    with tf.Session() as sess:
        sess.run(fetches, feeds)
        return sess.runner.plans.values()[-1].schedule, sess


def test_a_compiled_stage_gives_the_counting_executor_s_values_order_and_peak():
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float64, [4, 6])
        parts = tf.split(x, 3, axis=1)  # an op with several outputs, one of them unused
        y = tf.nn.relu(tf.matmul(parts[0], tf.ones([2, 3], tf.float64)) + parts[1][:, :1])
        feeds = {x: normal(4, 6)}
        plan, _ = _plan([y, parts[0]], feeds)
    fed = {x.name: feeds[x]}
    compiled, counted = RunStats(), RunStats()
    fast = execute(plan, fed, SessionState(), {"CPU": xp_numpy}, stats=compiled)
    slow = execute(plan, fed, SessionState(), {"CPU": xp_numpy}, stats=counted, compiled=False)
    assert compile_stage(plan, set(fed), {"CPU": xp_numpy}) is not None
    assert fast.keys() == slow.keys() == {y.name, parts[0].name}
    for name in fast:
        np.testing.assert_array_equal(fast[name], slow[name])
    assert compiled.order == counted.order and compiled.ops_run == counted.ops_run
    assert compiled.peak_bytes == counted.peak_bytes > 0


def test_an_update_runs_once_the_step_s_reads_of_its_variable_are_consumed_compiled_or_counted():
    # w2's update waits for the ops that read w2 (the forward product, the input gradient), so
    # it finds w2 held by nothing else (it may write it in place), and runs right after them,
    # which frees its gradient before the backward pass goes on to w1
    with tf.Graph().as_default():
        w1, w2 = tf.Variable(normal(5, 6), name="w1"), tf.Variable(normal(6, 3), name="w2")
        # (squared: the loss's gradient reads the product, so the step computes it)
        loss = tf.reduce_sum(tf.square(tf.matmul(tf.nn.relu(tf.matmul(tf.constant(normal(4, 5)), w1)), w2)))
        train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(train)
            plan, state = sess.runner.plans.values()[-1].schedule, sess.runner.state
    orders = []
    for compiled in (True, False):
        stats = RunStats()
        execute(plan, {}, state, {"CPU": xp_numpy}, stats=stats, compiled=compiled)
        orders.append(stats.order)
    assert orders[0] == orders[1]
    order = orders[0]

    def position(variable, op_type: str) -> int:
        return next(i for i, name in enumerate(order) if plan.nodes[name].type == op_type
                    and plan.nodes[name].inputs[0] == variable.op.name + ":0")

    read_w2 = position(w2, "ReadVariable")
    readers_of_w2 = [i for i, name in enumerate(order) if f"{order[read_w2]}:0" in plan.nodes[name].inputs]
    assert len(readers_of_w2) == 2  # the forward product and the gradient of its input
    assert position(w2, "ApplyGradientDescent") == max(readers_of_w2) + 1
    assert position(w2, "ApplyGradientDescent") < position(w1, "ApplyGradientDescent") == len(order) - 2


def test_a_read_that_comes_after_an_update_is_not_waited_for():
    # each read below follows the other variable's update: waiting for it would never end
    with tf.Graph().as_default():
        a, b = tf.Variable(1.0, name="a"), tf.Variable(10.0, name="b")
        step = tf.train.GradientDescentOptimizer(0.5)
        update_a = step.minimize(a * a, var_list=[a])
        with tf.control_dependencies([update_a]):
            b_after = b.read_value() + 0.0
        update_b = step.minimize(b * b, var_list=[b])
        with tf.control_dependencies([update_b]):
            a_after = a.read_value() + 0.0
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            _, _, a_read, b_read = sess.run([update_a, update_b, a_after, b_after])
            assert sess.run([a, b]) == [0.0, 0.0]  # 1 - 0.5 * 2, 10 - 0.5 * 20
    # each read is unordered with its own variable's update (TF leaves it open): either value
    assert a_read in (1.0, 0.0) and b_read in (10.0, 0.0)


def test_a_fed_tensor_can_be_fetched_from_a_compiled_stage():
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float64, [2])
        y = x * 2.0
        with tf.Session() as sess:
            got_x, got_y = sess.run([x, y], {x: [1.0, 2.0]})
    np.testing.assert_array_equal(got_x, [1.0, 2.0])
    np.testing.assert_array_equal(got_y, [2.0, 4.0])


def test_a_kernel_error_in_a_compiled_stage_names_the_op():
    with tf.Graph().as_default():
        a = tf.placeholder(tf.float32, [None, 3])
        b = tf.placeholder(tf.float32, [None, 3])
        bad = tf.matmul(a, b, name="the_matmul")
        with tf.Session() as sess:
            with pytest.raises(tf.errors.InvalidArgumentError, match="MatMul op 'the_matmul' failed"):
                sess.run(bad, {a: np.ones((2, 3)), b: np.ones((2, 3))})


def test_parallel_branches_on_several_threads_stay_with_the_counting_executor():
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float64, [3])
        branches = tf.add(tf.sin(x), tf.cos(x))
        chain = tf.sin(tf.cos(x))
        plan_branches, _ = _plan(branches, {x: np.ones(3)})
        plan_chain, _ = _plan(chain, {x: np.ones(3)})
    namespaces, fed = {"CPU": xp_numpy}, {x.name}
    assert compile_stage(plan_branches, fed, namespaces, num_threads=2) is None
    assert compile_stage(plan_branches, fed, namespaces, num_threads=1) is not None
    assert compile_stage(plan_chain, fed, namespaces, num_threads=2) is not None


def test_one_blas_thread_asked_for_means_no_pieces():
    """intra_op_parallelism_threads=1 (or OPENBLAS_NUM_THREADS=1, a worker's --blas_threads 1)
    limits BLAS to one thread: the ops then stay whole on the calling thread."""
    with threadpool_limits(1, "blas"):
        assert parallel.cores() == 1
        assert parallel.pieces_for(8, 100) == [slice(0, 8)]


def _blas_threads_now() -> int:
    return max(info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas")


def test_blas_threads_are_set_from_any_thread():
    """A Dask worker's main thread sets BLAS's thread count at start; threadpoolctl (3.8) then
    ignores every other thread's limits, so a stage thread's batch pieces kept two BLAS threads
    each and fought over the cores (the CIFAR-10 step computed 149 ms on a worker, 112 locally)."""
    from concurrent.futures import ThreadPoolExecutor

    with threadpool_limits(2, "blas"), ThreadPoolExecutor(1) as stage_thread:  # this thread takes control
        before = stage_thread.submit(parallel.set_blas_threads, 1).result()
        assert _blas_threads_now() == 1
        parallel.restore_blas_threads(before)
        assert _blas_threads_now() == 2
        in_pieces = stage_thread.submit(parallel.map_pieces, xp_numpy, lambda _: _blas_threads_now(), [0, 1])
        assert in_pieces.result() == ([1, 1] if parallel.cores() >= 2 else [2, 2])
        assert _blas_threads_now() == 2


def test_a_users_blas_limit_still_counts_after_dflow_set_one():
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as stage_thread:  # alive: threadpoolctl would let it keep control
        before = stage_thread.submit(parallel.set_blas_threads, 1).result()
        with threadpool_limits(3, "blas"):
            assert _blas_threads_now() == 3
        parallel.restore_blas_threads(before)
