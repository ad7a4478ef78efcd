"""Shaped links (``dflow bench --network``): a real cluster of network namespaces as root,
the rates its links allow, that nothing is left behind, and the one-line refusals."""

import os
import re
import signal
import subprocess
import sys

import pytest
from conftest import train_linear_regression

import dflow as tf
from dflow.bench import network
from dflow.bench.network import (
    NetworkError,
    check_network_shaping,
    dflow_namespaces,
    measure_link,
    remove_stale_namespaces,
    shaped_cluster,
)


def _why_not_here() -> str | None:
    try:
        check_network_shaping()
    except NetworkError as error:
        return str(error)
    return None


_WHY_NOT_HERE = _why_not_here()
needs_shaping = pytest.mark.skipif(_WHY_NOT_HERE is not None, reason=str(_WHY_NOT_HERE))


def _driver_links() -> set[str]:
    return set(re.findall(r"^\d+: (dfl\d+-[0-9a-f]{4})[@:]", subprocess.run(
        ["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout, re.MULTILINE))


def _network_namespace_of_each_role(cluster) -> dict[str, str]:
    found = cluster.client.run(lambda dask_worker: (dask_worker.name, os.readlink("/proc/self/ns/net")))
    return dict(found.values())


@pytest.fixture(scope="module")
def gbit_cluster():
    with shaped_cluster(ps=1, workers=2, network="1gbit") as cluster:
        yield cluster


# ---- a real shaped cluster (root) ---------------------------------------------------------------
@needs_shaping
@pytest.mark.slow
def test_each_role_has_its_own_namespace_and_a_session_step_runs(gbit_cluster):
    assert gbit_cluster.spec.roles() == ["ps/0", "worker/0", "worker/1"]
    namespaces = _network_namespace_of_each_role(gbit_cluster)
    assert len(set(namespaces.values())) == 3
    assert os.readlink("/proc/self/ns/net") not in namespaces.values()
    owned = [name for name, owner in dflow_namespaces().items() if owner == os.getpid()]
    assert {name.split("-", 3)[3] for name in owned} == {"hub", "scheduler", "ps-0", "worker-0", "worker-1"}
    losses = train_linear_regression(gbit_cluster)
    assert losses[-1] < 0.1 * losses[0]
    tf.Session.reset(gbit_cluster.target)


@needs_shaping
@pytest.mark.slow
@pytest.mark.parametrize("source, destination", [("worker/0", "worker/1"), ("worker/1", "ps/0")])
def test_a_1gbit_link_moves_about_1_gbit_per_second(gbit_cluster, source, destination):
    assert 0.5e9 < measure_link(gbit_cluster, source, destination) < 1.2e9


@needs_shaping
@pytest.mark.slow
def test_10gbit_is_faster_and_nothing_is_left_after_an_exception(gbit_cluster):
    """Two runs at once (the 1gbit one stays up) do not collide; this one raises inside its block."""
    namespaces_before, links_before = set(dflow_namespaces()), _driver_links()
    one_gbit = measure_link(gbit_cluster, "worker/0", "worker/1")
    with pytest.raises(ZeroDivisionError), shaped_cluster(ps=0, workers=2, network="10gbit") as cluster:
        assert set(dflow_namespaces()) > namespaces_before
        ten_gbit = measure_link(cluster, "worker/0", "worker/1")
        raise ZeroDivisionError("inside the block")
    assert ten_gbit > 2 * one_gbit, (ten_gbit, one_gbit)
    assert set(dflow_namespaces()) == namespaces_before
    assert _driver_links() == links_before


@needs_shaping
def test_a_role_that_dies_at_start_is_named_with_its_last_words_and_nothing_is_left(monkeypatch):
    namespaces_before, links_before = set(dflow_namespaces()), _driver_links()
    dying = [sys.executable, "-c", "raise SystemExit('no GPU here')"]
    monkeypatch.setattr(network, "worker_command", lambda *args, **kwargs: (dying, dict(os.environ)))
    expected = r"^worker/0 exited with status 1 before the cluster was up; its last output: no GPU here$"
    with pytest.raises(NetworkError, match=expected), shaped_cluster(ps=0, workers=1, timeout=20):
        pass
    assert set(dflow_namespaces()) == namespaces_before
    assert _driver_links() == links_before


_RUN_UNTIL_SIGNALLED = """
import sys, time
from dflow.bench.network import shaped_cluster
if __name__ == "__main__":
    with shaped_cluster(ps=0, workers=1, network="1gbit"):
        print("up", flush=True)
        time.sleep(120)
"""


@needs_shaping
@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_a_signalled_run_cleans_up_or_its_leftovers_are_removed_later(signum):
    child = subprocess.Popen([sys.executable, "-c", _RUN_UNTIL_SIGNALLED], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    try:
        assert child.stdout.readline().strip() == "up"
        assert child.pid in dflow_namespaces().values()
        child.send_signal(signum)
        child.wait(timeout=30)
    finally:
        child.kill()
    if signum == signal.SIGKILL:  # no chance to clean up: the next run removes what it left
        leftovers = [name for name, owner in dflow_namespaces().items() if owner == child.pid]
        assert len(leftovers) == 3  # hub, scheduler, worker-0, with their processes still running
        remove_stale_namespaces()
    assert child.pid not in dflow_namespaces().values()
    assert not any(link.startswith(f"dfl{child.pid}-") for link in _driver_links())


# ---- refusals: one line saying what to do (no root needed) ---------------------------------------
def test_not_linux_is_refused_in_one_line(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    expected = r"needs Linux .* this is darwin: run on Linux, or leave out --network$"
    with pytest.raises(NetworkError, match=expected):
        check_network_shaping()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the root check follows the Linux one")
def test_not_root_is_refused_in_one_line(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    expected = r"needs root .*: run it as root \(sudo\), or leave out --network$"
    with pytest.raises(NetworkError, match=expected):
        check_network_shaping()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the tool check follows the Linux one")
def test_missing_tools_say_how_to_install_them(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(network, "_tool", lambda name: None if name == "tc" else "/usr/sbin/ip")
    with pytest.raises(NetworkError, match=r"needs the tc command of iproute2: apt-get install iproute2$"):
        check_network_shaping()


@pytest.mark.skipif(network._tool("tc") is None, reason="needs tc (apt-get install iproute2)")
def test_a_kernel_refusal_names_the_command_and_the_answer():
    expected = r"^the kernel refused `tc qdisc add dev dflow-none0 root tbf .*: .*\(network shaping needs"
    with pytest.raises(NetworkError, match=expected) as caught:
        network._run("tc", "qdisc", "add", "dev", "dflow-none0", "root", *network._tbf(1e9))
    assert "\n" not in str(caught.value)


def test_an_unknown_network_is_a_value_error():
    with pytest.raises(ValueError, match="network must be one of 1gbit, 10gbit, none, got '100mbit'"):
        with shaped_cluster(ps=1, workers=1, network="100mbit"):
            pass


def test_the_tbf_bucket_holds_2_ms_and_at_least_1_mib():
    assert network._tbf(1e9)[:5] == ["tbf", "rate", "1000000000bit", "burst", str(2**20)]
    assert network._tbf(1e10)[4] == str(2_500_000)


def test_a_run_whose_owner_lives_is_not_stale(monkeypatch):
    monkeypatch.setattr(network, "dflow_namespaces", lambda: {
        f"dflow-{os.getpid()}-abcd-hub": os.getpid()})
    deleted = []
    monkeypatch.setattr(network, "_delete_namespace", deleted.append)
    monkeypatch.setattr(network, "_run", lambda *args: "")
    assert remove_stale_namespaces() == [] and deleted == []


@needs_shaping
@pytest.mark.slow
def test_values_sent_in_pieces_between_hosts_give_a_local_session_s_numbers(gbit_cluster):
    """Between namespaces (other hosts, to a worker) the 1.6 MB gradient leaves as soon as it is
    made and the PS applies what has come while the rest travels (worker.py's _Outgoing,
    executor's LATE): the same training as in one process."""
    import numpy as np

    rng = np.random.default_rng(3)
    start = {"w1": rng.standard_normal((64, 16)).astype(np.float32) * 0.1,
             "w2": rng.standard_normal((16, 25_000)).astype(np.float32) * 0.01}  # 1.6 MB: two pieces
    batch = rng.standard_normal((8, 64)).astype(np.float32)

    def train(target, device_setter):
        with tf.Graph().as_default():
            with tf.device(device_setter):
                w1, w2 = (tf.Variable(start[name], name=name) for name in ("w1", "w2"))
                loss = tf.reduce_mean(tf.square(tf.matmul(tf.nn.relu(tf.matmul(batch, w1)), w2) - 1.0))
                step = tf.train.GradientDescentOptimizer(0.5).minimize(loss)
            with tf.Session(target) as sess:
                sess.run(tf.global_variables_initializer())
                losses = [sess.run([step, loss])[1] for _ in range(3)]
                return losses, sess.run([w1, w2])

    on_the_ps = tf.train.replica_device_setter(cluster=gbit_cluster.spec)
    far_losses, far_values = train(gbit_cluster.target, on_the_ps)
    local_losses, local_values = train("", None)
    np.testing.assert_allclose(far_losses, local_losses, rtol=1e-5)
    assert far_losses[-1] < far_losses[0]
    for far, local in zip(far_values, local_values, strict=True):
        np.testing.assert_allclose(far, local, rtol=1e-5, atol=1e-6)
    tf.Session.reset(gbit_cluster.target)
