"""A step's messages between processes of one host on Unix sockets: the listener and its
connections, the messages' encoding, and a cluster's steps on them and without them."""

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import local_cluster_fixture

import dflow as tf
from dflow.distributed import local_channel
from dflow.distributed.local_channel import ChannelClosedError, Connections, Listener, decode, encode
from dflow.distributed.shared_memory import Inbox, Outbox
from dflow.errors import InvalidArgumentError
from dflow.processes import pid_namespace

cluster = local_cluster_fixture(ps=1, workers=1)


@pytest.fixture
def listener():
    calls = []

    def echo(**message):
        calls.append(message)
        return {"got": message}

    def fail(**message):
        raise KeyError("no such thing")

    listening = Listener({"echo": echo, "fail": fail})
    yield listening
    listening.close()


def test_a_request_is_answered_on_its_connection_and_the_connection_is_reused(listener):
    connections = Connections()
    message = {"op": "echo", "n": 3, "names": ["a:0", "^b"], "blob": b"\x00\x01", "nothing": None}
    assert connections.call(listener.path, message) == {"got": {"n": 3, "names": ["a:0", "^b"],
                                                                "blob": b"\x00\x01", "nothing": None}}
    sock = connections.open(listener.path)  # the idle one, not a new connection
    connections.give_back(listener.path, sock)
    assert connections.call(listener.path, {"op": "echo"}) == {"got": {}}
    assert connections.open(listener.path) is sock
    connections.close()


def test_a_handler_s_error_and_an_unknown_request_are_answered_as_errors(listener):
    connections = Connections()
    answer = connections.call(listener.path, {"op": "fail"})
    assert answer["error"]["type"] == "InternalError" and "KeyError" in answer["error"]["message"]
    answer = connections.call(listener.path, {"op": "pickle"})
    assert "no handler" in answer["error"]["message"] and "echo" in answer["error"]["message"]
    assert "'op'" in connections.call(listener.path, {"n": 1})["error"]["message"]
    connections.close()


def test_an_answer_that_is_not_plain_data_is_an_error_and_garbage_ends_the_connection():
    answers = {"scalars": lambda: {"n": np.int64(3), "t": np.float32(0.5)}, "object": lambda: {"x": object()}}
    listening = Listener(answers)
    connections = Connections()
    assert connections.call(listening.path, {"op": "scalars"}) == {"n": 3, "t": 0.5}
    assert "not plain data" in connections.call(listening.path, {"op": "object"})["error"]["message"]
    sock = connections.open(listening.path)
    sock.sendall(b"\x05\x00\x00\x00\xc1\xc1\xc1\xc1\xc1")  # (0xc1: never used by msgpack)
    with pytest.raises(ChannelClosedError):
        local_channel.receive(sock)
    assert connections.call(listening.path, {"op": "scalars"})["n"] == 3  # the listener goes on
    connections.close()
    listening.close()


def test_a_peer_is_asked_for_its_socket_once_and_again_once_forgotten(listener):
    connections, asked = Connections(), []

    def ask():
        asked.append(1)
        return listener.path

    assert [connections.path_of("tcp://127.0.0.1:1", ask) for _ in range(3)] == [listener.path] * 3
    assert len(asked) == 1
    connections.forget("tcp://127.0.0.1:1")
    assert connections.path_of("tcp://127.0.0.1:1", ask) == listener.path and len(asked) == 2
    connections.close()


def test_only_its_user_may_reach_the_socket_and_closing_removes_it():
    listening = Listener({})
    mode = os.stat(listening.directory).st_mode
    assert stat.S_IMODE(mode) == 0o700 and os.stat(listening.path).st_uid == os.getuid()
    listening.close()
    assert not os.path.exists(listening.directory)
    connections = Connections()
    assert connections.path_of("tcp://127.0.0.1:1", lambda: listening.path) is None  # by Dask instead
    assert connections.path_of("tcp://127.0.0.1:2", lambda: None) is None  # (it has none)


def test_a_forked_child_leaves_its_parent_s_socket_alone(listener):
    child = os.fork()
    if child == 0:  # the child closes its copy (as its exit would) and ends at once
        listener.close()
        os._exit(0)
    os.waitpid(child, 0)
    assert Connections().call(listener.path, {"op": "echo", "n": 1}) == {"got": {"n": 1}}


def test_a_killed_process_s_socket_directory_is_removed_by_the_next_listener(monkeypatch):
    tmp_path = Path(tempfile.mkdtemp(prefix="dfl-", dir="/tmp"))  # (a socket's path has 107 bytes)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    left = tmp_path / f"dflow-socket-{pid_namespace()}-{int(dead.stdout)}-abc123"
    living = tmp_path / f"dflow-socket-{pid_namespace()}-{os.getpid()}-def456"
    other_namespace = tmp_path / f"dflow-socket-{pid_namespace() + 1}-{int(dead.stdout)}-ghi789"
    for directory in (left, living, other_namespace):
        directory.mkdir()
    listening = Listener({})
    assert not left.exists() and living.exists() and other_namespace.exists()
    assert os.path.dirname(listening.directory) == str(tmp_path)
    listening.close()
    shutil.rmtree(tmp_path)


def test_a_socket_path_too_long_leaves_nothing_behind(tmp_path, monkeypatch):
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    with pytest.raises(OSError, match="too long"):
        Listener({})
    assert os.listdir(deep) == []  # (a worker then goes without one: its peers send by Dask)


def test_a_listener_that_closes_before_answering_is_an_error_not_a_wait():
    started = threading.Event()

    def hang(**message):
        started.set()
        threading.Event().wait(30)  # (the close below ends the wait for the caller, not this)
        return "late"

    listening = Listener({"hang": hang})
    connections = Connections()
    closer = threading.Thread(target=lambda: started.wait(10) and listening.close())
    closer.start()
    with pytest.raises(ChannelClosedError):
        connections.call(listening.path, {"op": "hang"})
    closer.join()


def test_concurrent_callers_each_have_a_connection_of_their_own():
    both = threading.Barrier(2, timeout=10)  # (one shared connection would answer one at a time)

    def meet(**message):
        both.wait()
        return message["who"]

    listening = Listener({"meet": meet})
    connections = Connections()
    answers = {}
    threads = [threading.Thread(target=lambda who=who: answers.update(
        {who: connections.call(listening.path, {"op": "meet", "who": who})})) for who in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert answers == {"a": "a", "b": "b"}
    connections.close()
    listening.close()


def test_values_travel_in_shared_memory_or_in_the_message_and_arrive_as_they_left():
    values = {"w:0": np.arange(12, dtype=np.float32).reshape(3, 4),
              "n:0": np.array(7, np.int64),
              "names:0": np.array([b"a", "bc"], dtype=object),
              "^apply": None}
    outbox, inbox = Outbox(), Inbox()
    plain, shared, segment = encode(values, outbox, "dest")
    assert set(shared["arrays"]) == {"w:0", "n:0"} and set(plain) == {"names:0", "^apply"}
    arrived = {**decode(plain), **inbox.unpack(shared)}
    outbox.release("dest", segment)
    in_message, no_shared, _ = encode(values, None, "dest")  # (a receiver that cannot read the segment)
    assert no_shared is None
    for received in (arrived, decode(in_message)):
        assert received["^apply"] is None
        for name in ("w:0", "n:0", "names:0"):
            assert received[name].dtype == values[name].dtype
            np.testing.assert_array_equal(received[name], values[name])
    assert decode(in_message)["w:0"].flags.writeable  # (a fetched value is the caller's to change)
    outbox.close()


def test_a_message_claiming_objects_as_bytes_is_refused():
    with pytest.raises(ValueError, match="objects"):
        decode({"x:0": {"dtype": "|O", "shape": [1], "data": b"\x00" * 8}})
    with pytest.raises(TypeError, match="map"):
        decode(["x:0"])


def _ps_step():
    with tf.device("/job:ps/task:0"):
        w = tf.Variable([1.0, 2.0, 3.0], name="w")
    with tf.device("/job:worker/task:0"):
        x = tf.placeholder(tf.float32, [3], name="x")
        loss = tf.reduce_sum(w * x)
    train = tf.train.GradientDescentOptimizer(0.5).minimize(loss)
    return w, x, loss, train


def test_a_cluster_on_this_host_steps_on_its_sockets_and_by_dask_alike(cluster, target, monkeypatch):
    w, x, loss, train = _ps_step()
    with tf.Session(target) as sess:
        sess.run(tf.global_variables_initializer())
        by_socket = [sess.run([loss, train], {x: [1.0, 0.0, 2.0]})[0] for _ in range(2)]
        paths = set(sess.runner._connections._paths.values())
        assert len(paths) == 2 and None not in paths  # the PS's and the worker's sockets
        assert sess.last_run_stats.bytes_sent[("/job:worker/task:0", "/job:ps/task:0")] == 12
        monkeypatch.setenv("DFLOW_UNIX_SOCKETS", "0")
        by_dask = [sess.run([loss, train], {x: [1.0, 0.0, 2.0]})[0] for _ in range(2)]
        np.testing.assert_allclose(sess.run(w), [-1.0, 2.0, -1.0])
    np.testing.assert_allclose(by_socket + by_dask, [7.0, 4.5, 2.0, -0.5])


def _steps_ended_on_ps(dask_worker, at_least: int = 0) -> int:
    """How many steps' stages have ended on this worker, once it is ``at_least`` (or 10 s passed)."""
    import time

    mailbox = dask_worker.plugins["dflow"].mailbox
    deadline = time.monotonic() + 10
    while len(mailbox._finished) < at_least and time.monotonic() < deadline:
        time.sleep(0.01)
    return len(mailbox._finished)


def _on_ps(cluster, function, **kwargs):
    workers = cluster.client.scheduler_info()["workers"]
    (address,) = [address for address, info in workers.items() if info["name"] == "ps/0"]
    return cluster.client.run(function, workers=[address], **kwargs)[address]


def test_a_failed_stage_s_error_keeps_its_type_and_the_other_tasks_are_not_left_waiting(cluster, target):
    with tf.device("/job:ps/task:0"):
        w = tf.Variable([1.0, 2.0, 3.0], name="w")
    with tf.device("/job:worker/task:0"):
        x = tf.placeholder(tf.float32, [None], name="x")
        loss = tf.reduce_sum(w * tf.reshape(x, [3]))
    train = tf.train.GradientDescentOptimizer(1.0).minimize(loss)  # the PS waits for the gradient
    with tf.Session(target, config=tf.ConfigProto(operation_timeout_in_ms=60_000)) as sess:
        sess.run(tf.global_variables_initializer())
        ended = _on_ps(cluster, _steps_ended_on_ps)
        with pytest.raises(InvalidArgumentError, match="Reshape"):
            sess.run(train, {x: [1.0, 1.0, 1.0, 1.0]})
        # the PS's stages of the failed step, which would wait 60 s for the gradient, were woken
        assert _on_ps(cluster, _steps_ended_on_ps, at_least=ended + 1) == ended + 1
        sess.run(train, {x: [1.0, 1.0, 1.0]})  # at once: the PS's stage of the failed step was woken
        np.testing.assert_allclose(sess.run(w), [0.0, 1.0, 2.0])


def test_the_environment_turns_the_sockets_off(monkeypatch):
    assert local_channel.enabled()
    monkeypatch.setenv("DFLOW_UNIX_SOCKETS", "0")
    assert not local_channel.enabled()


def test_workers_without_a_socket_still_step_by_dask(tmp_path, monkeypatch):
    deep = tmp_path / ("d" * 100)  # no socket's path fits under it
    deep.mkdir()
    monkeypatch.setenv("TMPDIR", str(deep))  # (the workers' processes read it)
    w, x, loss, train = _ps_step()
    with tf.cluster.local(ps=1, workers=1) as small, tf.Session(small.target) as sess:
        sess.run(tf.global_variables_initializer())
        assert [sess.run([loss, train], {x: [1.0, 0.0, 2.0]})[0] for _ in range(2)] == [7.0, 4.5]
        assert set(sess.runner._connections._paths.values()) == {None}
