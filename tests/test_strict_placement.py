"""Strict placement: a session refuses devices it does not have (TF's rules), and a variable
shared by name on a task must be declared as it was created there."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import local_cluster_fixture

import dflow as tf
from dflow.distributed.partition import stages_from_json, stages_to_json
from dflow.runtime.devices import gpu_namespace
from dflow.runtime.passes import Devices, make_plan
from dflow.runtime.state import SessionState

SOFT = tf.ConfigProto(allow_soft_placement=True)
no_gpu = pytest.mark.skipif(gpu_namespace() is not None, reason="this process has a GPU: /gpu:0 exists")


# ---- a session in this process: /job:localhost/replica:0/task:0 -----------------------------------
def test_a_local_session_refuses_another_jobs_device_naming_the_op_and_the_device():
    with tf.device("/job:ps/task:7"):
        w = tf.Variable(1.0, name="w")
    with tf.Session() as sess:
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=r"Cannot assign a device for operation w.*explicitly assigned to "
                                 r"/job:ps/task:7 but available devices are \[ /job:localhost/replica:0/"
                                 r"task:0/device:CPU:0 \].*tf.Session\(cluster.target\)") as error:
            sess.run(w.initializer)
    assert error.value.op.startswith("w")


def test_soft_placement_runs_another_jobs_ops_in_this_process(caplog):
    with tf.device("/job:worker/task:1"):
        y = tf.constant(3.0) * 2.0
    with tf.Session(config=SOFT) as sess, caplog.at_level("WARNING", logger="dflow"):
        assert sess.run(y) == 6.0
    assert "soft placement: /job:worker/task:1 is not a device of this process" in caplog.text


def test_this_process_own_device_names_are_accepted():
    with tf.device("/job:localhost/replica:0/task:0/device:CPU:0"):
        y = tf.constant(3.0) + 1.0
    with tf.device("/cpu:0"):
        z = y * 2.0
    with tf.Session() as sess:
        assert sess.run(z) == 8.0


@no_gpu
@pytest.mark.parametrize("device", ["/gpu:0", "/device:GPU:1", "/cpu:1"])
def test_a_device_this_process_lacks_fails_unless_soft_placement(device):
    with tf.device(device):
        y = tf.constant(3.0) * 2.0
    shown = tf.DeviceSpec.from_string(device).to_string()  # as TF writes it: /device:GPU:0
    with tf.Session() as sess, pytest.raises(tf.errors.InvalidArgumentError,
                                             match=f"explicitly assigned to {shown}.*allow_soft_placement"):
        sess.run(y)
    with tf.Session(config=SOFT) as sess:
        assert sess.run(y) == 6.0


# ---- a variable shared by name ----------------------------------------------------------------------
def test_a_variable_declared_with_another_shape_or_dtype_names_both():
    state = SessionState()
    state.declare_variable("w", (5,), "float32")
    state.declare_variable("w", (None,), "float32")  # unknown dimensions agree with any
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"variable w is declared here with shape \(3\) and dtype float32, but the "
                             r"variable w that this task already holds has shape \(5\) and dtype float32"):
        state.declare_variable("w", (3,), "float32")
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"dtype int32, but .* dtype float32"):
        state.declare_variable("w", (5,), "int32")


cluster = local_cluster_fixture(ps=1, workers=1)


def _client_of(target: str, shape, dtype=np.float32, init: bool = True):
    """A client's graph: PS variable ``w`` of ``shape``; returns the value it reads."""
    with tf.Graph().as_default():
        with tf.device("/job:ps/task:0"):
            w = tf.Variable(np.arange(np.prod(shape)).reshape(shape).astype(dtype), name="w")
        with tf.Session(target) as sess:
            if init:
                sess.run(w.initializer)
            return sess.run(w)


def test_a_second_client_declaring_a_ps_variable_with_another_shape_is_refused(target):
    np.testing.assert_array_equal(_client_of(target, (5,)), np.arange(5))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"variable w is declared here with shape \(3\) "
                                                             r"and dtype float32, but .* has shape \(5\)"):
        _client_of(target, (3,), init=False)  # used to read the first client's 5 values
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"dtype int32, but .* dtype float32"):
        _client_of(target, (5,), np.int32)
    np.testing.assert_array_equal(_client_of(target, (5,), init=False), np.arange(5))  # the same: shared
    tf.Session.reset(target)  # what the error says to do
    np.testing.assert_array_equal(_client_of(target, (3,)), np.arange(3))


# ---- what a worker is sent: plain data ------------------------------------------------------------
@pytest.mark.parametrize("worker_gpus", [0, 1])
def test_a_plan_travels_to_its_workers_as_json_and_comes_back_the_same(worker_gpus):
    """The schedule a worker rebuilds is the client's, its device flags too (a GPU worker's stage
    that lost ``on_gpu`` ran CuPy's kernels on the host arrays it was fed: found on an H200)."""
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    with tf.device("/job:ps/task:0"):
        w = tf.Variable(np.ones((3, 1), np.float32), name="w")
    with tf.device("/job:worker/task:0"):  # on its GPU where it has one (TF's placer)
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - 2.0))
        train = tf.train.AdamOptimizer(0.1).minimize(loss)
    tasks = {"/job:ps/task:0": {"GPU": 0}, "/job:worker/task:0": {"GPU": worker_gpus}}
    plan = make_plan(tf.get_default_graph(), [train, loss], {x.name}, Devices("/job:worker/task:0", tasks))
    on_gpu = []
    for stages in plan.stages.values():
        text = stages_to_json(stages)
        assert isinstance(text, str) and json.loads(text)
        again = stages_from_json(text)
        assert stages_to_json(again) == text
        for stage, rebuilt in zip(stages, again, strict=True):
            assert rebuilt.schedule.nodes.keys() == stage.schedule.nodes.keys()
            assert (rebuilt.schedule.on_gpu, rebuilt.schedule.mixed_devices) == \
                (stage.schedule.on_gpu, stage.schedule.mixed_devices)
            on_gpu.append(stage.schedule.on_gpu)
    assert any(on_gpu) == bool(worker_gpus)


def test_a_worker_refuses_a_plan_that_is_not_plain_data(cluster):
    worker = cluster.spec.task_address("worker", 0)
    tf.Session(cluster.target).close()  # installs dflow's handlers on the workers

    async def register(stages):
        return await cluster.client.rpc(worker).dflow_register(plan_id="p", stages=stages, addresses={})

    with pytest.raises(TypeError, match="a plan.s stages arrive as JSON text, got (list|tuple)"):
        cluster.client.sync(register, [["not", "json", "text"]])
    unknown = json.dumps([{"task": "t", "level": 0, "nodes": [{"name": "evil", "type": "os.system"}]}])
    with pytest.raises(ValueError, match="op 'evil' has type 'os.system', which dflow does not know"):
        cluster.client.sync(register, unknown)


def test_string_values_cross_tasks_as_plain_data_not_pickles(target):
    from dflow.distributed.worker import deserialized, serialized

    words = np.array([[b"a", b"bc"]], dtype=object)
    sent = serialized({"t:0": words, "^op": None})
    assert sent == {"t:0": {"objects": [b"a", b"bc"], "shape": [1, 2]}, "^op": None}  # msgpack, no pickle
    np.testing.assert_array_equal(deserialized(sent)["t:0"], words)
    with tf.device("/job:ps/task:0"):
        on_ps = tf.identity(tf.constant([b"ps", b"zero"]))  # (a lone constant would move to its user)
    with tf.device("/job:worker/task:0"):
        fed = tf.placeholder(tf.string, [None])
        both = tf.concat([on_ps, fed], 0)  # the PS's strings go to the worker, the fed ones too
    with tf.Session(target) as sess:
        assert list(sess.run(both, {fed: ["fed", b"bytes"]})) == [b"ps", b"zero", b"fed", b"bytes"]
        assert ("/job:ps/task:0", "/job:worker/task:0") in sess.last_run_stats.bytes_sent


# ---- a stage's values for other tasks ------------------------------------------------------------
def test_values_for_another_host_leave_in_pieces_and_for_this_one_at_the_end(monkeypatch):
    """To a task on another host, a destination's values go as soon as SEND_FROM_BYTES of them
    are made (the big gradients while the backward pass goes on); to a task on this host, which
    shares the cores, all at the end. Each value is sent once; control edges go at the end."""
    from dflow.distributed import worker

    monkeypatch.setattr(worker, "SEND_FROM_BYTES", 1000)
    sends = {"far": ("big:0", "small:0", "last:0", "^op"), "near": ("big:0", "small:0")}
    delivered = []
    outgoing = worker._Outgoing(sends, lambda dest, payload: delivered.append((dest, sorted(payload))),
                                {"far": True, "near": False}.get)
    values = {"big:0": np.zeros(300, np.float32), "small:0": np.zeros(3, np.float32),
              "last:0": np.zeros(3, np.float32)}
    outgoing.add("small:0", values["small:0"])
    assert delivered == []  # 12 bytes wait for more
    outgoing.add("big:0", values["big:0"])
    assert delivered == [("far", ["big:0", "small:0"])]
    outgoing.add("last:0", values["last:0"])
    outgoing.flush(values)
    assert delivered[1:] == [("far", ["^op", "last:0"]), ("near", ["big:0", "small:0"])]
