import importlib.util
import signal

import numpy as np
import pytest

import dflow as tf
from dflow.runtime import runners

# the scripts there write the test data with TensorFlow, which the tests themselves never import
collect_ignore_glob = ["data/*.py"]


def _gpu_available() -> bool:
    if importlib.util.find_spec("cupy") is None:
        return False
    import cupy

    return cupy.is_available()


def pytest_configure(config):
    # A shell without job control starts background jobs (`tox &`) with SIGINT ignored, and an
    # ignored signal stays ignored across exec: the tests' `dflow train` children would never see
    # their Ctrl-C. A handler of our own is reset to the default at exec, which Python turns into
    # KeyboardInterrupt, as in a terminal.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config, items):
    if _gpu_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU with CuPy (none found on this machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def cpu_unless_marked_gpu(request, monkeypatch):
    """A test not marked ``gpu`` is about the CPU: where a GPU exists, its local sessions would
    place the ops of no device there (TF's default), so the GPU is hidden from them."""
    if "gpu" not in request.keywords:
        monkeypatch.setattr(runners, "gpu_namespace", lambda: None)


@pytest.fixture(autouse=True)
def fresh_default_graph():
    """Each test builds into its own empty default graph."""
    tf.reset_default_graph()
    yield
    tf.reset_default_graph()


def local_cluster_fixture(ps: int, workers: int):
    """A module's ``cluster`` fixture: one embedded cluster for the module's tests.

    >>> cluster = local_cluster_fixture(ps=1, workers=2)  # doctest: +SKIP
    """

    @pytest.fixture(scope="module")
    def cluster():
        with tf.cluster.local(ps=ps, workers=workers) as c:
            yield c

    return cluster


@pytest.fixture
def target(request):
    """The module's cluster's target; its variables are forgotten after each test."""
    cluster = request.getfixturevalue("cluster")
    yield cluster.target
    tf.Session.reset(cluster.target)


def train_linear_regression(cluster, steps: int = 10) -> list[float]:
    """Fit y = 3x + 2 with the variables on the cluster's PS; the loss of each step."""
    rng = np.random.default_rng(0)
    xs = rng.uniform(-1, 1, (64, 1)).astype(np.float32)
    ys = 3.0 * xs + 2.0 + rng.normal(0, 0.05, xs.shape).astype(np.float32)
    x = tf.placeholder(tf.float32, [None, 1], name="x")
    y = tf.placeholder(tf.float32, [None, 1], name="y")
    with tf.device(tf.train.replica_device_setter(cluster=cluster.spec)):  # variables on /job:ps/task:0
        weights = tf.Variable(tf.zeros([1, 1]), name="weights")
        bias = tf.Variable(tf.zeros([1]), name="bias")
        loss = tf.reduce_mean(tf.square(tf.matmul(x, weights) + bias - y))
        train = tf.train.GradientDescentOptimizer(0.5).minimize(loss)
    with tf.Session(cluster.target) as sess:
        sess.run(tf.global_variables_initializer())
        return [float(sess.run([train, loss], {x: xs, y: ys})[1]) for _ in range(steps)]


def digits_in_mnist_frames() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's 1,797 digits drawn into MNIST's 28 x 28 uint8 frames (each 8 x 8 pixel
    doubled, centred as MNIST centres its 20 x 20 digits), and their labels as uint8."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = np.zeros((len(digits.images), 28, 28), np.uint8)
    images[:, 6:22, 6:22] = np.kron(digits.images * 255 / 16, np.ones((2, 2))).astype(np.uint8)
    return images, digits.target.astype(np.uint8)
