"""The GPU path's plumbing on a machine without a GPU: array_api_strict stands in for CuPy as
the GPU's namespace (it refuses NumPy's arrays in its functions, as CuPy does), so a step
placed on /gpu:0 must move its feeds there, keep its variables there and bring its fetches
back to the host. CuPy itself on a real GPU: tests/test_gpu.py."""

import array_api_strict
import numpy as np
import pytest

import dflow as tf
from dflow.runtime import runners

RNG = np.random.default_rng(0)
IMAGES = RNG.standard_normal((4, 8, 8, 3)).astype(np.float32)
KERNEL = RNG.standard_normal((3, 3, 3, 5)).astype(np.float32) * 0.3


@pytest.fixture
def stand_in_gpu(monkeypatch):
    monkeypatch.setattr(runners, "gpu_namespace", lambda: array_api_strict)


def _train(model_device: str | None, loss_device: str | None, steps: int = 3, config=None):
    """A small conv net trained by SGD with its model on one device and its loss on another:
    the losses, the trained kernel, and the session's stored value of the kernel."""
    with tf.Graph().as_default():
        images = tf.placeholder(tf.float32, IMAGES.shape)
        with tf.device(model_device):
            kernel = tf.Variable(KERNEL, name="kernel")
            conv = tf.nn.relu(tf.nn.conv2d(images, kernel, [1, 1, 1, 1], "SAME"))
            pooled = tf.nn.max_pool(conv, [1, 3, 3, 1], [1, 2, 2, 1], "SAME")
        with tf.device(loss_device):
            loss = tf.reduce_mean(tf.square(pooled - 0.5))
        with tf.device(model_device):
            train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
        with tf.Session(config=config) as sess:
            sess.run(tf.global_variables_initializer())
            losses = [sess.run([train, loss], {images: IMAGES})[1] for _ in range(steps)]
            return losses, sess.run(kernel), sess.runner.state.read_variable(kernel.op.name)


@pytest.mark.parametrize("model_device, loss_device",
                         [("/gpu:0", "/gpu:0"), ("/gpu:0", "/cpu:0"), (None, None)],
                         ids=["all-on-gpu", "loss-on-cpu", "no-device-given"])
def test_a_step_on_the_gpu_gives_the_cpu_s_numbers(stand_in_gpu, model_device, loss_device):
    """On the GPU, asked for or (no device given) by TF's default: the CPU's numbers."""
    cpu_losses, cpu_kernel, cpu_stored = _train("/cpu:0", "/cpu:0")
    gpu_losses, gpu_kernel, gpu_stored = _train(model_device, loss_device)
    on_host = (np.ndarray, np.generic)
    assert all(isinstance(value, on_host) for value in (*gpu_losses, gpu_kernel))  # fetched to the host
    assert type(gpu_stored).__module__.startswith("array_api_strict")  # the variable stays on the GPU
    assert type(cpu_stored) is np.ndarray
    np.testing.assert_allclose(gpu_losses, cpu_losses, rtol=1e-5)
    np.testing.assert_allclose(gpu_kernel, cpu_kernel, rtol=1e-5, atol=1e-6)
    assert gpu_losses[-1] < gpu_losses[0]


def _placed(fetches, feeds, config=None) -> dict[str, str]:
    """The device type each op of the plan that fetches ``fetches`` runs on, by op name."""
    with tf.Session(config=config) as sess:
        sess.run(fetches, feeds)
        plan = sess.runner.plans.values()[-1].schedule
    return {node.name: node.device_type for node in plan.nodes.values()}


def test_without_a_device_ops_prefer_the_gpu_but_not_those_without_a_gpu_kernel(stand_in_gpu):
    """TF's placer: an op with a GPU kernel and no device type asked for runs on the GPU; an op
    of strings, a summary, a queue or a Print stays on the CPU; an explicit /cpu:0 is kept."""
    x = tf.placeholder(tf.float32, [3])
    total = tf.reduce_sum(tf.square(x))
    queue = tf.FIFOQueue(2, [tf.float32], shapes=[[]])
    with tf.device("/cpu:0"):
        negated = tf.negative(total)
    fetches = [tf.Print(total, [total], "total: "), tf.summary.scalar("total", total),
               queue.enqueue([total]), negated, tf.constant(["a", "b"])]
    placed = _placed(fetches, {x: np.ones(3, np.float32)})
    assert placed[total.op.name] == placed[total.op.inputs[0].op.name] == "GPU"
    assert all(placed[fetch.op.name if hasattr(fetch, "op") else fetch.name] == "CPU" for fetch in fetches)
    assert placed[queue.queue_ref.op.name] == "CPU"


def test_device_count_gpu_0_keeps_a_session_on_the_cpu(stand_in_gpu):
    losses, _, stored = _train(None, None, steps=1, config=tf.ConfigProto(device_count={"GPU": 0}))
    assert type(stored) is np.ndarray


def test_a_worker_offering_gpus_needs_a_gpu_cupy_can_use(monkeypatch, capsys):
    """Its ops of no device would go to a GPU it cannot compute on: refused before it joins."""
    from dflow.cli import main
    from dflow.runtime import devices

    monkeypatch.setattr(devices, "gpu_namespace", lambda: None)
    with pytest.raises(SystemExit) as exit_:
        main(["worker", "--scheduler", "tcp://127.0.0.1:1", "--job", "worker", "--task", "0", "--gpus", "1"])
    assert exit_.value.code == 2
    assert "--gpus 1: this machine has no GPU that CuPy can use" in capsys.readouterr().err
