"""CuPy paths: ops placed on /gpu:0 compute on the GPU and agree with the CPU.
Marked `gpu`; skipped with a reason where no GPU or CuPy exists."""

import numpy as np
import pytest

import dflow as tf
from dflow.bench.peers import PEER_MODELS, graph_session

pytestmark = pytest.mark.gpu


def _model(device):
    rng = np.random.default_rng(0)
    with tf.device(device):
        images = tf.constant(rng.standard_normal((4, 8, 8, 3)).astype(np.float32))
        kernel = tf.Variable(rng.standard_normal((3, 3, 3, 5)).astype(np.float32))
        conv = tf.nn.relu(tf.nn.conv2d(images, kernel, [1, 1, 1, 1], "SAME"))
        pooled = tf.nn.max_pool(conv, [1, 3, 3, 1], [1, 2, 2, 1], "SAME")
        loss = tf.reduce_mean(tf.square(pooled))
        (grad,) = tf.gradients(loss, [kernel])
    return loss, grad


def test_gpu_ops_match_cpu():
    results = []
    for device in ("/cpu:0", "/gpu:0"):
        with tf.Graph().as_default():
            loss, grad = _model(device)
            with tf.Session() as sess:
                sess.run(tf.global_variables_initializer())
                results.append(sess.run([loss, grad]))
                assert any(n.device_type == "GPU" for n in _nodes(sess)) == (device == "/gpu:0")
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-4)
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("gpu_device", ["gpu", None], ids=["on-gpu0", "no-device-given"])
@pytest.mark.parametrize("model", list(PEER_MODELS))
def test_training_steps_on_the_gpu_match_the_cpu(model, gpu_device):
    """The benchmark's models (SGD, Adam) trained 3 steps from the same initial values on the
    CPU and on the GPU (asked for, or TF's default for ops of no device): the same losses; the
    GPU's variables stay CuPy arrays between steps."""
    cpu, train_cpu, feeds_cpu = graph_session(tf, 8, model=model)
    gpu, train_gpu, feeds_gpu = graph_session(tf, 8, model=model, device=gpu_device)
    with cpu.graph.as_default():
        cpu_variables = tf.trainable_variables()
    with gpu.graph.as_default():
        gpu_variables = tf.trainable_variables()
    for source, target in zip(cpu_variables, gpu_variables):
        target.load(cpu.run(source), gpu)
    losses = []
    for sess, train, feeds in ((cpu, train_cpu, feeds_cpu), (gpu, train_gpu, feeds_gpu)):
        loss = sess.graph.get_tensor_by_name("cross_entropy:0")
        losses.append([sess.run([train, loss], feeds)[1] for _ in range(3)])
    np.testing.assert_allclose(losses[1], losses[0], rtol=2e-4)
    np.testing.assert_allclose(gpu.run(gpu_variables[-1]), cpu.run(cpu_variables[-1]), rtol=1e-3, atol=1e-5)
    stored = gpu.runner.state.read_variable(gpu_variables[0].op.name)
    assert type(stored).__module__.startswith("cupy"), type(stored)


def _nodes(sess):
    """The ops of the session's last plan (not the initializer's: it is on the default device)."""
    return list(sess.runner.plans.values()[-1].schedule.nodes.values())


def test_cuda_cluster_computes_on_its_gpu_worker():
    """tf.cluster.cuda: GPU workers offer /gpu:0 (without soft placement a task lacking it is an
    error), the PS is on the CPU."""
    pytest.importorskip("dask_cuda", reason="dflow.cluster.cuda needs dask-cuda (pip install .[gpu])")
    x = tf.placeholder(tf.float32, [None, 4])
    with tf.cluster.cuda(ps=1) as cluster:
        assert cluster.spec.num_tasks("ps") == 1 and cluster.spec.num_tasks("worker") >= 1
        devices = cluster.spec.devices()
        assert devices["/job:worker/task:0"]["GPU"] == 1 and devices["/job:ps/task:0"]["GPU"] == 0
        worker = "/job:worker/task:0/gpu:0"
        with tf.device(tf.train.replica_device_setter(cluster=cluster.spec, worker_device=worker)):
            w = tf.Variable(tf.zeros([4, 1]), name="w")
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - 1.0))
            train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
        with tf.Session(cluster.target, config=tf.ConfigProto(allow_soft_placement=False)) as sess:
            sess.run(tf.global_variables_initializer())
            losses = [float(sess.run([train, loss], {x: np.ones((8, 4), np.float32)})[1]) for _ in range(5)]
    assert losses[-1] < losses[0]
