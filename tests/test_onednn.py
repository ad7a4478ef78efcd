"""oneDNN's convolutions (dflow/ops/onednn.py): the numbers of dflow's own lowering for every
geometry TF allows, taken by float32 NumPy arrays only, safe from two threads, and a missing
library said once with the lowering running instead."""

from __future__ import annotations

import gc
import logging
import multiprocessing
import platform
import sys
import threading

import array_api_compat.numpy as xp_numpy
import array_api_strict
import numpy as np
import pytest

import dflow as tf
from dflow.ops import conv_lowering, onednn

RNG = np.random.default_rng(5)

# (input NHWC, filter HWIO, strides, dilations, padding): TF's SAME with odd and even sizes
# (asymmetric padding), VALID with rows left over, dilation, 1x1, a window as big as the image,
# the MNIST and CIFAR-10 layers
GEOMETRIES = [
    ((2, 7, 9, 3), (3, 3, 3, 4), (1, 1), (1, 1), "SAME"),
    ((2, 8, 8, 5), (5, 5, 5, 6), (2, 2), (1, 1), "SAME"),
    ((1, 9, 7, 4), (3, 2, 4, 3), (2, 3), (1, 1), "VALID"),
    ((3, 10, 10, 2), (3, 3, 2, 5), (1, 1), (2, 2), "SAME"),
    ((2, 6, 6, 8), (1, 1, 8, 4), (2, 2), (1, 1), "VALID"),
    ((2, 7, 7, 3), (3, 3, 3, 4), (3, 3), (1, 1), "SAME"),
    ((1, 5, 5, 3), (5, 5, 3, 2), (1, 1), (1, 1), "VALID"),
    ((2, 28, 28, 1), (5, 5, 1, 32), (1, 1), (1, 1), "SAME"),
    ((3, 12, 12, 64), (5, 5, 64, 64), (1, 1), (1, 1), "SAME"),
]


def random(shape, dtype=np.float32):
    return np.asarray(RNG.standard_normal(shape), dtype)


def lowered(fn, *arrays_and_args):
    """The lowering's answer in float64: oneDNN never takes float64."""
    return fn(xp_numpy, *(a.astype(np.float64) if isinstance(a, np.ndarray) else a for a in arrays_and_args))


def close(got, expected):
    assert got.dtype == np.float32 and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5 * max(1.0, np.abs(expected).max()))


def geometry(x_shape, w_shape, strides, dilations, padding):
    out_hw, pads = conv_lowering._geometry2d(x_shape[1:3], w_shape[:2], strides, dilations, padding)
    return out_hw, pads


@pytest.fixture(autouse=True)
def needs_the_library():
    if not (sys.platform == "linux" and platform.machine() == "x86_64"):
        pytest.skip(f"oneDNN's wheel (onednn-cpu-tbb) is a dependency on x86-64 Linux only; this machine is "
                    f"{sys.platform} {platform.machine()}, where dflow's own lowering runs")
    assert onednn.available(), "onednn-cpu-tbb is a dependency on x86-64 Linux: it must load here"


@pytest.mark.parametrize("x_shape, w_shape, strides, dilations, padding", GEOMETRIES)
def test_onednn_gives_the_lowering_s_numbers_in_every_kernel_directions(x_shape, w_shape, strides,
                                                                     dilations, padding):
    x, w = random(x_shape), random(w_shape)
    out_hw, pads = geometry(x_shape, w_shape, strides, dilations, padding)
    y = onednn.conv2d(x, w, strides, dilations, pads, out_hw)
    assert y is not None, "oneDNN has kernels for every geometry here"
    close(y, lowered(conv_lowering.conv2d, x, w, strides, dilations, padding))
    dy = random(y.shape)
    dx = onednn.conv2d_input_grad(dy, w, x_shape, strides, dilations, pads)
    close(dx, lowered(conv_lowering.conv2d_input_grad, dy, w, x_shape, strides, dilations, padding))
    dw = onednn.conv2d_filter_grad(x, dy, w_shape, strides, dilations, pads)
    close(dw, lowered(conv_lowering.conv2d_filter_grad, x, dy, w_shape, strides, dilations, padding))


@pytest.fixture
def any_kernel_taken(monkeypatch):
    """oneDNN's reference kernels taken too (dflow refuses them: below), so that its numbers
    are checked on every machine, whichever kernel it has there; plans compiled afresh."""
    monkeypatch.setattr(onednn._Library, "implementation", lambda self, pd: "any")
    onednn._compiled.cache_clear()
    yield
    onednn._compiled.cache_clear()


def test_reference_kernels_are_refused_and_the_lowering_runs(monkeypatch):
    # oneDNN picks its C reference loop silently where its JIT has no kernel (AVX2's LRN of the
    # CIFAR-10 model: 23 and 141 ms against the lowering's 7 and 8)
    monkeypatch.setattr(onednn._Library, "implementation", lambda self, pd: "ref:any")
    onednn._compiled.cache_clear()
    try:
        x, w, dy = random((2, 6, 6, 3)), random((3, 3, 3, 4)), random((2, 6, 6, 4))
        assert onednn.conv2d(x, w, (1, 1), (1, 1), (1, 1, 1, 1), (6, 6)) is None
        assert onednn.lrn(x, 2, 1.0, 0.1, 0.75) is None and onednn.lrn_for_grad(x, 2, 1.0, 0.1, 0.75) is None
        assert onednn.lrn_grad(x, x, 2, 1.0, 0.1, 0.75) is None
        params = (4, 1.0, 0.001 / 9, 0.75)
        close(conv_lowering.lrn(xp_numpy, x, *params), lowered(conv_lowering.lrn, x, *params))
        close(conv_lowering.conv2d_input_grad(xp_numpy, dy, w, x.shape, (1, 1), (1, 1), "SAME"),
              lowered(conv_lowering.conv2d_input_grad, dy, w, x.shape, (1, 1), (1, 1), "SAME"))
    finally:
        onednn._compiled.cache_clear()


def test_the_kernels_of_a_cifar10_step_are_never_reference_ones():
    # the plans of the tutorial CNN's layers at batch 10: each a JIT kernel of this machine, or None
    lib, kernels = onednn._library(), []
    for direction in ("forward", "input_grad", "filter_grad"):
        plan = onednn._conv_plan(direction, (10, 12, 12, 64), (5, 5, 64, 64), (10, 12, 12, 64), (1, 1),
                                 (1, 1), (2, 2, 2, 2))
        kernels.append(plan and plan.primitive)
    for direction in ("lrn", "lrn_grad"):
        plan = onednn._plan_of(direction, (10, 12, 12, 64), 4, 1.0, 0.001 / 9.0, 0.75)
        kernels += [plan and plan.primitive, plan and getattr(plan, "forward", None)]
    names = [lib.implementation(kernel.pd) for kernel in kernels if kernel is not None]
    assert names and not [name for name in names if name.startswith("ref")]


@pytest.mark.parametrize("shape, depth_radius, bias, alpha, beta", [
    ((2, 5, 5, 3), 2, 1.0, 0.1, 0.75),
    ((3, 6, 6, 64), 4, 1.0, 0.001 / 9, 0.75),  # the CIFAR-10 tutorial's
    ((1, 4, 4, 8), 0, 2.0, 0.5, 0.5),
    ((2, 3, 3, 4), 7, 0.5, 1e-2, 1.0),  # a window wider than the channels
])
def test_lrn_and_its_gradient_give_the_lowering_s_numbers(shape, depth_radius, bias, alpha, beta,
                                                         any_kernel_taken):
    x, dy = random(shape), random(shape)
    params = (depth_radius, bias, alpha, beta)
    y = onednn.lrn(x, *params)
    expected = lowered(conv_lowering.lrn, x, *params)
    close(y, expected)
    expected_grad = lowered(conv_lowering.lrn_grad, dy, x, expected, *params)
    close(onednn.lrn_grad(dy, x, *params), expected_grad)
    y, workspace = onednn.lrn_for_grad(x, *params)  # the forward for training, and its window sums
    close(y, expected)
    close(onednn.lrn_grad(dy, x, *params, workspace=workspace), expected_grad)
    if workspace.size:  # (a window of one channel needs none)
        assert onednn.lrn_grad(dy, x, *params, workspace=workspace[:-4]) is None  # another LRN's


# (input NHWC, window, strides, padding): the CIFAR-10 tutorial's (SAME, 3x3 by 2) and deep MNIST's
# (2x2 by 2), SAME on odd sizes (padding after only), VALID with rows left over, overlapping
# windows of stride 1, a window as big as the image
POOLINGS = [
    ((2, 24, 24, 64), (3, 3), (2, 2), "SAME"),
    ((2, 28, 28, 32), (2, 2), (2, 2), "SAME"),
    ((3, 7, 9, 5), (3, 3), (2, 2), "SAME"),
    ((2, 9, 8, 4), (2, 3), (3, 2), "VALID"),
    ((1, 6, 6, 3), (3, 3), (1, 1), "SAME"),
    ((2, 5, 5, 6), (5, 5), (1, 1), "VALID"),
]


@pytest.mark.parametrize("ties", [False, True], ids=["distinct", "ties"])
@pytest.mark.parametrize("shape, ksize, strides, padding", POOLINGS)
def test_max_pooling_and_its_gradient_from_the_workspace_give_the_lowering_s_numbers(
        shape, ksize, strides, padding, ties):
    """The same maxima, and each window's gradient at its first maximal element in scan order (TF's
    choice; ties: small integers, where most windows have several), written into ``x``'s buffer
    where given."""
    x = np.asarray(RNG.integers(0, 3, shape), np.float32) if ties else random(shape)
    out_hw, pads = conv_lowering._geometry2d(shape[1:3], ksize, strides, (1, 1), padding)
    y, workspace = onednn.max_pool(x, ksize, strides, pads, out_hw)
    np.testing.assert_array_equal(y, conv_lowering.max_pool(xp_numpy, x.astype(np.float64), ksize, strides,
                                                            padding))
    dy = random(y.shape)
    expected = conv_lowering.max_pool_grad(xp_numpy, x.astype(np.float64), y.astype(np.float64),
                                           dy.astype(np.float64), ksize, strides, padding)
    close(onednn.max_pool_grad(dy, workspace, shape, ksize, strides, pads), expected)  # (float32 sums)
    into = x.copy()
    assert onednn.max_pool_grad(dy, workspace, shape, ksize, strides, pads, out=into) is into
    close(into, expected)


def test_a_workspace_of_another_pooling_is_not_read():
    x = random((2, 8, 8, 4))
    _, workspace = onednn.max_pool(x, (2, 2), (2, 2), (0, 0, 0, 0), (4, 4))
    other = onednn.max_pool_grad(random((2, 2, 2, 4)), workspace, x.shape, (3, 3), (3, 3), (0, 0, 0, 0))
    assert other is None
    assert onednn.max_pool(random((0, 8, 8, 4)), (2, 2), (2, 2), (0, 0, 0, 0), (4, 4)) is None


@pytest.mark.parametrize("a_layout", ["C", "transposed", "strided"])
@pytest.mark.parametrize("b_layout", ["C", "transposed", "strided"])
def test_matmul_reads_each_layout_in_its_logical_order(monkeypatch, a_layout, b_layout):
    monkeypatch.setattr(onednn, "MATMUL_FROM", 0)  # small products too

    def laid_out(shape, layout):
        if layout == "transposed":
            return random(shape[::-1]).T
        if layout == "strided":
            return random((shape[0], 2 * shape[1]))[:, ::2]
        return random(shape)

    a, b = laid_out((120, 150), a_layout), laid_out((150, 90), b_layout)
    got = onednn.matmul(a, b)
    assert got is not None
    close(got, a.astype(np.float64) @ b.astype(np.float64))


def test_matmul_leaves_small_products_and_outer_products_to_blas():
    assert onednn.matmul(random((10, 10)), random((10, 10))) is None  # below MATMUL_FROM
    assert onednn.matmul(random((2000, 1)), random((1, 1000))) is None  # parallel.matmul's multiply


def test_a_dense_layer_s_gradients_through_onednn_match_float64(monkeypatch):
    monkeypatch.setattr(onednn, "MATMUL_FROM", 0)  # these small products too
    calls = []
    real = onednn.matmul
    monkeypatch.setattr(onednn, "matmul", lambda a, b, *fused: calls.append(a.shape) or real(a, b, *fused))
    values = random((64, 300)), random((300, 200)), random((64, 200))

    def gradients(dtype):
        with tf.Graph().as_default():
            x, w, t = (tf.constant(v.astype(dtype)) for v in values)
            y = tf.matmul(x, w)
            z = tf.matmul(y, t, transpose_a=True)  # (200, 200)
            loss = tf.reduce_sum(z * z)
            with tf.Session() as sess:
                return sess.run([loss, *tf.gradients(loss, [x, w, t])])

    for got, expected in zip(gradients(np.float32), gradients(np.float64)):
        np.testing.assert_allclose(got, expected, rtol=2e-4, atol=1e-3 * max(1.0, np.abs(expected).max()))
    assert len(calls) >= 5, "the float32 graph's products went to oneDNN"


def test_views_that_are_not_contiguous_are_read_in_their_logical_order():
    x = np.ascontiguousarray(random((6, 6, 3, 2)).transpose(3, 0, 1, 2))  # (2, 6, 6, 3) ...
    x_view = random((3, 6, 6, 2)).transpose(3, 1, 2, 0)  # ... and a strided one
    w_view = random((4, 3, 3, 3)).transpose(1, 2, 3, 0)
    for inp in (x, x_view):
        got = conv_lowering.conv2d(xp_numpy, inp, w_view, (1, 1), (1, 1), "SAME")
        close(got, lowered(conv_lowering.conv2d, np.ascontiguousarray(inp), np.ascontiguousarray(w_view),
                           (1, 1), (1, 1), "SAME"))


def test_the_lowering_takes_float32_numpy_to_onednn_and_nothing_else(monkeypatch):
    calls = []
    for name in ("conv2d", "conv2d_input_grad", "conv2d_filter_grad", "lrn", "lrn_grad"):
        real = getattr(onednn, name)
        monkeypatch.setattr(onednn, name, lambda *a, _real=real, _name=name: calls.append(_name) or _real(*a))
    x, w = random((2, 6, 6, 3)), random((3, 3, 3, 4))
    dy = random((2, 6, 6, 4))

    def every_kernel(xp, x, w, dy):
        conv_lowering.conv2d(xp, x, w, (1, 1), (1, 1), "SAME")
        conv_lowering.conv2d_input_grad(xp, dy, w, x.shape, (1, 1), (1, 1), "SAME")
        conv_lowering.conv2d_filter_grad(xp, x, dy, w.shape, (1, 1), (1, 1), "SAME")

        conv_lowering.lrn(xp, x, 2, 1.0, 0.1, 0.75)
        conv_lowering.lrn_grad(xp, x, x, x, 2, 1.0, 0.1, 0.75)

    every_kernel(xp_numpy, x, w, dy)
    assert calls == ["conv2d", "conv2d_input_grad", "conv2d_filter_grad", "lrn", "lrn_grad"]
    calls.clear()
    every_kernel(xp_numpy, *(a.astype(np.float64) for a in (x, w, dy)))
    every_kernel(array_api_strict, *(array_api_strict.asarray(a) for a in (x, w, dy)))
    conv_lowering.lrn(xp_numpy, x[0], 2, 1.0, 0.1, 0.75)  # not 4-D
    assert calls == []


def test_plans_dropped_from_the_cache_are_freed_and_compiled_again():
    x, w = random((2, 6, 6, 3)), random((3, 3, 3, 4))
    expected = lowered(conv_lowering.conv2d, x, w, (1, 1), (1, 1), "SAME")
    close(conv_lowering.conv2d(xp_numpy, x, w, (1, 1), (1, 1), "SAME"), expected)
    onednn._compiled.cache_clear()
    gc.collect()  # the plans' primitives and descriptors destroyed
    close(conv_lowering.conv2d(xp_numpy, x, w, (1, 1), (1, 1), "SAME"), expected)
    assert onednn._compiled.cache_info().currsize == 1


def test_onednn_runs_on_at_most_the_threads_the_process_was_given(monkeypatch):
    # TBB's limit follows parallel.cores() (intra_op_parallelism_threads, a worker's --blas_threads)
    from dflow.ops import parallel

    x, w = random((8, 12, 12, 64)), random((5, 5, 64, 64))
    expected = lowered(conv_lowering.conv2d, x, w, (1, 1), (1, 1), "SAME")
    for cores in (1, 2, 1):
        monkeypatch.setattr(parallel, "cores", lambda cores=cores: cores)
        close(conv_lowering.conv2d(xp_numpy, x, w, (1, 1), (1, 1), "SAME"), expected)
        assert onednn._library().threads.active() == cores
    monkeypatch.undo()
    conv_lowering.conv2d(xp_numpy, x, w, (1, 1), (1, 1), "SAME")
    assert onednn._library().threads.active() == parallel.cores()


def test_an_empty_batch_takes_the_lowering():
    x, w = random((0, 5, 5, 3)), random((3, 3, 3, 2))
    y = conv_lowering.conv2d(xp_numpy, x, w, (1, 1), (1, 1), "SAME")
    assert y.shape == (0, 5, 5, 2)
    assert conv_lowering.conv2d_filter_grad(xp_numpy, x, random((0, 5, 5, 2)), w.shape, (1, 1), (1, 1),
                                            "SAME").shape == (3, 3, 3, 2)


def test_two_threads_run_filter_gradients_at_once():
    # with oneDNN's default (one scratchpad for the library) two threads' weight gradients of
    # this size gave wrong numbers or hung; each call now brings its own scratchpad
    cases = [(random((50, 14, 14, 32)), random((50, 14, 14, 64))) for _ in range(2)]
    expected = [lowered(conv_lowering.conv2d_filter_grad, x, dy, (5, 5, x.shape[3], dy.shape[3]),
                        (1, 1), (1, 1), "SAME") for x, dy in cases]
    failures = []

    def worker(i):
        x, dy = cases[i]
        _, pads = geometry(x.shape, (5, 5), (1, 1), (1, 1), "SAME")
        try:
            for _ in range(10):
                close(onednn.conv2d_filter_grad(x, dy, expected[i].shape, (1, 1), (1, 1), pads), expected[i])
        except Exception as error:  # noqa: BLE001 - reported below, on the test's thread
            failures.append(error)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "a oneDNN call did not return in 120 s"
    assert failures == []


def test_a_primitive_s_argument_objects_are_made_once_a_thread_and_point_at_each_run_s_arrays():
    shape, filter_shape = (4, 6, 6, 3), (3, 3, 3, 5)
    _, pads = geometry(shape, (3, 3), (1, 1), (1, 1), "SAME")
    runs = [(random(shape), random((4, 6, 6, 5))) for _ in range(6)]
    expected = [lowered(conv_lowering.conv2d_filter_grad, x, dy, filter_shape, (1, 1), (1, 1), "SAME")
                for x, dy in runs]
    results: dict[int, np.ndarray] = {}

    def run(indices):
        for i in indices:  # the same plan, new arrays each time
            results[i] = onednn.conv2d_filter_grad(*runs[i], filter_shape, (1, 1), (1, 1), pads)

    run([0])
    plan = onednn._conv_plan("filter_grad", shape, filter_shape, (4, 6, 6, 5), (1, 1), (1, 1), pads)
    made = len(plan.primitive._memories)
    run([1, 2])
    assert len(plan.primitive._memories) == made  # reused, not made again
    thread = threading.Thread(target=run, args=([3, 4, 5],), daemon=True)
    thread.start()
    thread.join(timeout=60)
    assert len(plan.primitive._memories) == 2 * made  # the other thread's own
    for i in range(6):
        close(results[i], expected[i])


def test_a_conv_net_s_gradients_in_a_session_match_float64():
    values = random((2, 9, 9, 3)), random((3, 3, 3, 8)), random((3, 3, 8, 4))

    def gradients(dtype):
        with tf.Graph().as_default():
            x, w1, w2 = (tf.constant(v.astype(dtype)) for v in values)
            h = tf.nn.relu(tf.nn.conv2d(x, w1, strides=[1, 2, 2, 1], padding="SAME"))
            y = tf.nn.conv2d(h, w2, strides=[1, 1, 1, 1], padding="VALID")
            loss = tf.reduce_sum(y * y)
            with tf.Session() as sess:
                return sess.run([loss, *tf.gradients(loss, [x, w1, w2])])

    for got, expected in zip(gradients(np.float32), gradients(np.float64)):
        np.testing.assert_allclose(got, expected, rtol=2e-4, atol=1e-3 * max(1.0, np.abs(expected).max()))


def _convolve_in_child(x, w, results):
    results.put([conv_lowering.conv2d(xp_numpy, a, b, (1, 1), (1, 1), "SAME")
                 for a, b in ((x, w), (x.astype(np.float64), w.astype(np.float64)))])


def test_a_child_forked_after_a_step_convolves_without_its_parent_s_threads():
    # the library's and the intra-op pool's threads do not exist in a forked child: waiting for
    # them hung it (with GNU OpenMP; Python's multiprocessing forks by default on Linux); it takes
    # the lowering
    x, w = random((8, 12, 12, 64)), random((5, 5, 64, 64))
    expected = conv_lowering.conv2d(xp_numpy, x, w, (1, 1), (1, 1), "SAME")  # oneDNN, here
    conv_lowering.conv2d(xp_numpy, x.astype(np.float64), w.astype(np.float64), (1, 1), (1, 1), "SAME")
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    child = context.Process(target=_convolve_in_child, args=(x, w, results), daemon=True)
    child.start()
    try:
        got = results.get(timeout=60)
    finally:
        child.join(timeout=10)
        if child.is_alive():
            child.kill()
    close(got[0], expected)
    np.testing.assert_allclose(got[1], expected, rtol=1e-4, atol=1e-3)


def test_a_missing_library_is_said_once_and_the_lowering_runs(monkeypatch, caplog):
    monkeypatch.setattr(onednn, "_library_folders", lambda: ["/nonexistent"])
    with caplog.at_level(logging.WARNING, logger="dflow"):
        assert onednn._library.__wrapped__() is None
    assert "pip install onednn-cpu-tbb intel-cmplr-lib-rt" in caplog.text
    assert "/nonexistent/libintlc.so.5" in caplog.text
    monkeypatch.setattr(onednn, "_library", lambda: None)
    x, w = random((2, 6, 6, 3)), random((3, 3, 3, 4))
    assert not onednn.takes(xp_numpy, x, w)
    close(conv_lowering.conv2d(xp_numpy, x, w, (1, 1), (1, 1), "SAME"),
          lowered(conv_lowering.conv2d, x, w, (1, 1), (1, 1), "SAME"))


def test_dflow_onednn_0_turns_it_off_without_a_warning(monkeypatch, caplog):
    monkeypatch.setenv("DFLOW_ONEDNN", "0")
    with caplog.at_level(logging.WARNING, logger="dflow"):
        assert onednn._library.__wrapped__() is None
    assert caplog.text == ""
