"""A step's values between processes of one host through shared memory: the segments, what a
receiver refuses, and a cluster whose task cannot read them falling back to TCP."""

import errno
import os
import subprocess
import sys

import numpy as np
import pytest

import dflow as tf
from dflow.distributed import shared_memory
from dflow.distributed.shared_memory import Inbox, Outbox, SharedMemoryError
from dflow.processes import pid_namespace

DEST = "tcp://127.0.0.1:1"
NAMESPACE = pid_namespace()


def _on_disk(*shared: dict) -> list[bool]:
    """Whether each segment that ``shared`` descriptions name is still in /dev/shm."""
    return [os.path.exists(os.path.join(shared_memory.DIRECTORY, s["segment"])) for s in shared]


def test_arrays_arrive_read_only_in_the_segment_and_the_rest_in_the_message():
    outbox, inbox = Outbox(), Inbox()
    values = {
        "w:0": np.arange(12, dtype=np.float32).reshape(3, 4),
        "t:0": np.arange(12, dtype=np.float64).reshape(3, 4).T,  # not contiguous
        "n:0": np.array(7, np.int64),
        "mask:0": np.array([True, False, True]),
        "empty:0": np.zeros((0, 5), np.float32),
        "^apply": None,
        "names:0": np.array([b"a", b"bc"], dtype=object),
    }
    inline, shared, segment = outbox.pack(DEST, values)
    assert set(inline) == {"^apply", "names:0"} and inline["names:0"] is values["names:0"]
    assert set(shared["arrays"]) == {"w:0", "t:0", "n:0", "mask:0", "empty:0"}
    assert all(place[0] % 64 == 0 and place[0] >= 64 for place in shared["arrays"].values())
    received = inbox.unpack(shared)
    for name, array in received.items():
        assert array.dtype == values[name].dtype and array.shape == values[name].shape
        np.testing.assert_array_equal(array, values[name])
        assert not array.flags.writeable  # the sender's bytes, not a copy
    with pytest.raises(ValueError, match="read-only"):
        received["w:0"] += 1
    # answered, but the receiver still holds the arrays: the next message goes elsewhere
    outbox.release(DEST, segment)
    again = {"w:0": np.full((3, 4), -1.0, np.float32)}
    _, shared_again, segment_again = outbox.pack(DEST, again)
    assert segment_again is not segment
    np.testing.assert_array_equal(received["w:0"], values["w:0"])
    np.testing.assert_array_equal(inbox.unpack(shared_again)["w:0"], again["w:0"])
    outbox.release(DEST, segment_again)
    # once its last array (a view of one counts) is freed, the segment is written again
    view = received["w:0"][1:]
    del received, array
    _, _, third = outbox.pack(DEST, again)
    assert third is not segment
    outbox.release(DEST, third)
    del view
    _, _, fourth = outbox.pack(DEST, again)
    assert fourth is segment
    assert _on_disk(shared) == [True]
    outbox.close()
    assert _on_disk(shared) == [False]
    assert shared["segment"].startswith(f"dflow-{NAMESPACE}-{os.getpid()}-")


def test_a_segment_whose_receiver_refused_it_or_found_nothing_in_it_is_reused():
    outbox, inbox = Outbox(), Inbox()
    values = {"a:0": np.ones(4, np.float32)}
    _, _, refused = outbox.pack(DEST, values)  # the receiver cannot open it, and says so
    outbox.release(DEST, refused)
    outbox.refuse("elsewhere", refused)
    assert outbox.pack(DEST, values)[2] is refused and "elsewhere" in outbox.refused
    assert outbox.pack("elsewhere", values)[1] is None  # by TCP from now on
    _, shared, bad = outbox.pack("b", values)
    with pytest.raises(ValueError, match="lies beyond its segment"):
        inbox.unpack({"segment": shared["segment"], "arrays": {"a:0": [64, "<f4", [1 << 30]]}})
    outbox.release("b", bad)
    assert outbox.pack("b", values)[2] is bad
    outbox.close()


def test_a_segment_in_use_is_not_reused_and_a_bigger_message_gets_its_own():
    outbox = Outbox()
    small = {"a:0": np.ones(10, np.float32)}
    _, first, held = outbox.pack(DEST, small)
    _, second, other = outbox.pack(DEST, small)  # the first was not given back
    assert first["segment"] != second["segment"]
    outbox.release(DEST, held)
    outbox.release(DEST, other)
    _, big, _ = outbox.pack(DEST, {"a:0": np.ones(2 * shared_memory.GRAIN, np.uint8)})
    assert big["segment"] not in (first["segment"], second["segment"])
    assert _on_disk(first, second, big) == [True] * 3
    outbox.close()
    assert _on_disk(first, second, big) == [False] * 3


@pytest.mark.parametrize("shared, message", [
    ({"segment": "../../etc/passwd", "arrays": {}}, "not a dflow shared-memory segment"),
    ({"segment": "/etc/shadow", "arrays": {}}, "not a dflow shared-memory segment"),
    ({"segment": 3, "arrays": {}}, "not a dflow shared-memory segment"),
    ({"arrays": []}, "names a segment and its arrays"),
])
def test_a_receiver_refuses_what_is_not_a_segment(shared, message):
    with pytest.raises(ValueError, match=message):
        Inbox().unpack(shared)


@pytest.mark.parametrize("place, message", [
    ([0, "|O", [2]], "not an array of numbers"),
    ([-64, "<f4", [2]], "not an array of numbers"),
    ([0, "<f4", [2]], "not an array of numbers"),  # over the flag that lends the segment
    ([0, "<f4", [-1]], "not an array of numbers"),
    ([64, "<f4", [1 << 30]], "lies beyond its segment"),
    ([0, "no such type", [2]], r"is not \[offset, dtype, shape\]"),
    ([0, "<f4"], r"is not \[offset, dtype, shape\]"),
])
def test_a_receiver_refuses_places_outside_the_segment_and_objects(place, message):
    outbox = Outbox()
    _, shared, _ = outbox.pack(DEST, {"a:0": np.ones(4, np.float32)})
    try:
        with pytest.raises(ValueError, match=message):
            Inbox().unpack({"segment": shared["segment"], "arrays": {"a:0": place}})
    finally:
        outbox.close()


def test_a_segment_this_process_cannot_open_is_a_shared_memory_error():
    name = f"dflow-{NAMESPACE}-{os.getpid()}-{'0' * 16}"  # well formed, never made
    with pytest.raises(SharedMemoryError, match="cannot open segment"):
        Inbox().unpack({"segment": name, "arrays": {}})


def test_without_shared_memory_the_values_stay_in_the_message(monkeypatch):
    monkeypatch.setattr(shared_memory, "DIRECTORY", "/nonexistent-dflow-shm")
    values = {"a:0": np.ones(4, np.float32)}
    inline, shared, segment = Outbox().pack(DEST, values)
    assert inline == values and shared is None and segment is None


MiB = shared_memory.GRAIN


def test_segments_stay_within_the_budget():
    outbox = Outbox(budget=2 * MiB)
    _, first, segment = outbox.pack("a", {"x:0": np.ones(MiB // 4, np.float32)})  # 1 MiB
    outbox.release("a", segment)
    # 2 MiB for "b" do not fit beside the 1 MiB "a" is not using: that one is unlinked for it
    _, second, held = outbox.pack("b", {"x:0": np.ones(MiB // 4 + 1, np.float32)})
    assert second is not None and _on_disk(first, second) == [False, True]
    assert outbox.held_bytes == 2 * MiB
    # while "b" still uses its 2 MiB, nothing more fits: "a"'s next message goes in itself
    values = {"x:0": np.ones(16, np.float32)}
    inline, shared, segment = outbox.pack("a", values)
    assert inline == values and shared is None and segment is None
    outbox.release("b", held)
    # and a message bigger than the whole budget always goes in itself
    big = {"x:0": np.ones(MiB, np.float32)}
    assert outbox.pack("a", big)[1] is None and outbox.held_bytes == 2 * MiB
    outbox.close()


def test_a_full_dev_shm_is_asked_only_once(monkeypatch):
    tries = []

    def full(fd, offset, length):
        tries.append(length)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    outbox = Outbox(budget=64 * MiB)
    values = {"x:0": np.ones(1000, np.float32)}
    for _ in range(3):
        inline, shared, _ = outbox.pack(DEST, values)
        assert inline == values and shared is None
    assert tries == [MiB] and outbox.budget == 0 and outbox.held_bytes == 0
    assert not [name for name in os.listdir(shared_memory.DIRECTORY)
                if name.startswith(f"dflow-{NAMESPACE}-{os.getpid()}-")]  # nothing left behind


@pytest.mark.parametrize("setting, budget", [("0", 0), ("off", 0), ("64MiB", 64 * MiB), ("2 GiB", 2 << 30)])
def test_the_environment_sets_the_budget_or_turns_shared_memory_off(monkeypatch, setting, budget):
    monkeypatch.setenv("DFLOW_SHARED_MEMORY", setting)
    outbox = Outbox()
    assert outbox.budget == budget
    values = {"x:0": np.ones(4, np.float32)}
    assert (outbox.pack(DEST, values)[1] is None) == (budget == 0)
    outbox.close()


def test_the_default_budget_is_a_quarter_of_dev_shm_and_a_bad_setting_is_refused(monkeypatch):
    monkeypatch.delenv("DFLOW_SHARED_MEMORY", raising=False)
    stat = os.statvfs(shared_memory.DIRECTORY)
    assert Outbox().budget == stat.f_blocks * stat.f_frsize // 4
    monkeypatch.setenv("DFLOW_SHARED_MEMORY", "lots")
    with pytest.raises(ValueError, match="DFLOW_SHARED_MEMORY='lots' is neither 0"):
        Outbox()


def test_a_receiver_unmaps_segments_their_sender_unlinked():
    inbox, first, second = Inbox(), Outbox(), Outbox()
    _, gone, _ = first.pack(DEST, {"x:0": np.ones(4, np.float32)})
    inbox.unpack(gone)
    first.close()  # as a sender does to stay within its budget
    _, kept, _ = second.pack(DEST, {"x:0": np.ones(4, np.float32)})
    inbox.unpack(kept)
    assert list(inbox._mapped) == [kept["segment"]]
    second.close()


def test_segments_of_a_killed_process_are_removed_by_the_next_outbox():
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    stale = os.path.join(shared_memory.DIRECTORY, f"dflow-{NAMESPACE}-{dead}-{'ab' * 8}")
    mine = os.path.join(shared_memory.DIRECTORY, f"dflow-{NAMESPACE}-{os.getpid()}-{'cd' * 8}")
    # the same process id in another container's namespace may be a live process there
    elsewhere = os.path.join(shared_memory.DIRECTORY, f"dflow-{NAMESPACE + 1}-{dead}-{'ef' * 8}")
    for path in (stale, mine, elsewhere):
        with open(path, "wb") as f:
            f.write(b"x")
    try:
        Outbox()
        assert not os.path.exists(stale)
        assert os.path.exists(mine) and os.path.exists(elsewhere)  # a live process keeps its own
    finally:
        for path in (stale, mine, elsewhere):
            if os.path.exists(path):
                os.unlink(path)


def _no_shared_memory():
    from dflow.distributed import shared_memory

    shared_memory.DIRECTORY = "/nonexistent-dflow-shm"


def _refused(dask_worker):
    return sorted(dask_worker.plugins["dflow"].outbox.refused)


def test_a_task_that_cannot_read_the_segments_gets_its_values_by_tcp():
    with tf.cluster.local(ps=1, workers=1) as cluster:
        roles = {info["name"]: address for address, info in tf.cluster.worker_infos(cluster.client).items()}
        cluster.client.run(_no_shared_memory, workers=[roles["worker/0"]])  # as in another container
        with tf.Graph().as_default():
            x = tf.placeholder(tf.float32, [4, 3])
            with tf.device("/job:ps/task:0"):
                w = tf.Variable(tf.ones([3, 2]), name="w")
            with tf.device("/job:worker/task:0"):
                loss = tf.reduce_sum(tf.matmul(x, w))
                train = tf.train.GradientDescentOptimizer(0.5).minimize(loss)
            config = tf.ConfigProto(operation_timeout_in_ms=30_000)  # a value that never came fails
            with tf.Session(cluster.target, config=config) as sess:
                sess.run(tf.global_variables_initializer())
                for _ in range(2):  # (the loss fetched, so that the worker reads w)
                    sess.run([train, loss], {x: np.ones((4, 3), np.float32)})
                np.testing.assert_allclose(sess.run(w), np.full((3, 2), 1.0 - 2 * 0.5 * 4))
                # the client's feeds and the PS's reads went by TCP once refused
                assert sess.runner._outbox.refused == {roles["worker/0"]}
        refused = cluster.client.run(_refused)
        assert refused[roles["ps/0"]] == [roles["worker/0"]]  # the PS's reads, refused once
        assert refused[roles["worker/0"]] == []  # it made no segment: its gradients went in the message


def _outbox_budget_and_bytes(dask_worker):
    outbox = dask_worker.plugins["dflow"].outbox
    return outbox.budget, outbox.held_bytes


def test_a_cluster_started_with_shared_memory_off_trains_by_tcp(monkeypatch):
    monkeypatch.setenv("DFLOW_SHARED_MEMORY", "0")  # the workers' processes inherit it
    with tf.cluster.local(ps=1, workers=1) as cluster, tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [4, 3])
        with tf.device("/job:ps/task:0"):
            w = tf.Variable(tf.ones([3, 2]), name="w")
        with tf.device("/job:worker/task:0"):
            train = tf.train.GradientDescentOptimizer(0.5).minimize(tf.reduce_sum(tf.matmul(x, w)))
        with tf.Session(cluster.target) as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(train, {x: np.ones((4, 3), np.float32)})
            np.testing.assert_allclose(sess.run(w), np.full((3, 2), 1.0 - 0.5 * 4))
            assert sess.runner._outbox.budget == 0
        assert set(cluster.client.run(_outbox_budget_and_bytes).values()) == {(0, 0)}


def test_a_cluster_s_steps_reuse_their_segments_and_a_value_kept_from_one_keeps_its_own():
    """The receivers read the step's arrays in the senders' segments: training holds as many
    segments at the 20th step as at the first, and a fed array that a variable keeps (an
    assign) is not overwritten by the next feeds, which go to another segment meanwhile."""
    with tf.cluster.local(ps=1, workers=1) as cluster, tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [64, 256])
        with tf.device("/job:ps/task:0"):
            w = tf.Variable(tf.fill([256, 256], 0.01), name="w")
        with tf.device("/job:worker/task:0"):
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w)))
            train = tf.train.MomentumOptimizer(0.1, 0.9).minimize(loss)
            kept = tf.Variable(tf.zeros([64, 256]), name="kept")
            keep = kept.assign(x)
        batches = np.random.default_rng(0).random((21, 64, 256), np.float32)
        with tf.Session(cluster.target) as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(train, {x: batches[0]})
            def held() -> tuple:  # by the client, and by the PS and the worker (with their budgets)
                return sess.runner._outbox.held_bytes, cluster.client.run(_outbox_budget_and_bytes)

            held_at_first = held()
            for batch in batches[1:]:
                sess.run(train, {x: batch})
            assert held() == held_at_first
            sess.run(keep, {x: batches[0]})
            for batch in batches[1:4]:
                sess.run(train, {x: batch})
            np.testing.assert_array_equal(sess.run(kept), batches[0])
            # still training right: the reference, the same steps in one process
            trained = sess.run(w)
        with tf.Session(graph=w.graph, config=tf.ConfigProto(allow_soft_placement=True)) as local:
            local.run(tf.global_variables_initializer())
            for batch in [*batches, *batches[1:4]]:
                local.run(train, {x: batch})
            np.testing.assert_allclose(trained, local.run(w), rtol=1e-5)


# ---- a parameter server's variables, lent where they live ----------------------------------------
def _state_with(**arrays):
    """A PS's SessionState holding ``arrays`` as variables, and ``Outbox.pack``'s ``variables``
    for a payload of them (as the worker builds it)."""
    from dflow.distributed.worker import _variables_in
    from dflow.runtime.state import SessionState

    state = SessionState()
    state.lent_elsewhere = shared_memory.lent_in_place
    for name, value in arrays.items():
        state.write_variable(name, value)
    return state, lambda payload: _variables_in(payload, state)


def test_variables_are_lent_from_their_resident_segment_without_a_copy_after_the_first():
    from dflow.ops import fused

    outbox, inbox = Outbox(), Inbox()
    w0, b0 = np.arange(12, dtype=np.float32).reshape(3, 4), np.array([1.0, 2.0])
    state, variables_in = _state_with(w=w0, b=b0)
    payload = {"w/read:0": state.variables["w"], "b/read:0": state.variables["b"]}
    inline, shared, lend = outbox.pack(DEST, payload, variables_in(payload))
    assert inline == {} and shared["flag"] >= 1
    w, b = state.variables["w"], state.variables["b"]  # now views of the resident segment, same values
    assert w is not w0 and w.base is b.base and id(w.base) in fused.VARIABLE_ARENAS
    np.testing.assert_array_equal(w, w0)
    received = inbox.unpack(shared)
    np.testing.assert_array_equal(received["w/read:0"], w0)
    assert shared_memory.lent_in_place(w) and not state.held_only_here("w")
    # a second receiver meanwhile: the same places, its own flag, and nothing copied
    payload = {"w/read:0": w, "b/read:0": b}
    _, again, _ = outbox.pack("tcp://127.0.0.1:2", payload, variables_in(payload))
    assert again["segment"] == shared["segment"] and again["arrays"] == shared["arrays"]
    assert again["flag"] != shared["flag"]
    also = inbox.unpack(again)
    del received
    assert shared_memory.lent_in_place(w)  # the second still reads them
    del also
    assert not shared_memory.lent_in_place(w)
    assert fused._writable(fused.compiled_kernels(), w)  # an update may write it where it is
    del w, b, payload
    assert state.held_only_here("w", "b")


def test_an_update_while_a_receiver_reads_the_variable_makes_a_new_array():
    """The receiver reads the step's value to the end; the update's value is the variable's, and
    the next send copies it into a resident segment no one reads."""
    from dflow.ops.registry import get_opdef
    from dflow.runtime.devices import numpy_namespace

    outbox, inbox = Outbox(), Inbox()
    state, variables_in = _state_with(w=np.ones(1000, np.float32))
    payload = {"w/read:0": state.variables["w"]}
    first = outbox.pack(DEST, payload, variables_in(payload))[1]
    received = inbox.unpack(first)["w/read:0"]
    update = get_opdef("ApplyGradientDescent").kernel
    update(state, numpy_namespace, "w", np.float32(0.5), np.ones(1000, np.float32))
    assert np.all(received == 1.0) and np.all(state.variables["w"] == 0.5)
    assert id(state.variables["w"].base) not in shared_memory._RESIDENT  # out of place
    payload = {"w/read:0": state.variables["w"]}
    second = outbox.pack(DEST, payload, variables_in(payload))[1]
    assert second["segment"] != first["segment"]  # the first is still read
    received_second = inbox.unpack(second)["w/read:0"]
    np.testing.assert_array_equal(received_second, 0.5)
    del received, payload
    # the first segment holds no variable now, and no receiver: it takes the next payload of them
    update(state, numpy_namespace, "w", np.float32(0.5), np.ones(1000, np.float32))
    assert np.all(received_second == 0.5)
    payload = {"w/read:0": state.variables["w"]}
    third = outbox.pack(DEST, payload, variables_in(payload))[1]
    assert third["segment"] == first["segment"]
    np.testing.assert_array_equal(inbox.unpack(third)["w/read:0"], 0.0)
    # and once no one reads it, an update writes the variable where it is
    resident = id(state.variables["w"])
    update(state, numpy_namespace, "w", np.float32(0.5), np.ones(1000, np.float32))
    assert id(state.variables["w"]) == resident and np.all(state.variables["w"] == -0.5)


def test_a_payload_with_values_that_are_not_variables_is_copied():
    outbox = Outbox()
    state, variables_in = _state_with(w=np.ones(4, np.float32))
    payload = {"w/read:0": state.variables["w"], "g:0": np.zeros(4, np.float32)}
    _, shared, segment = outbox.pack(DEST, payload, variables_in(payload))
    assert "flag" not in shared and isinstance(segment, shared_memory._Segment)
    assert state.variables["w"].base is None  # not moved
    outbox.release(DEST, segment)


def _variables_of_ps(dask_worker):
    from dflow.ops.fused import VARIABLE_ARENAS

    state = dask_worker.plugins["dflow"].state
    return {name: (id(value), id(value.base) in VARIABLE_ARENAS) for name, value in state.variables.items()}


def test_a_ps_lends_its_variables_in_place_and_updates_them_there():
    """On 1 PS + 1 worker the PS's variables move into shared memory at the first step; after it
    each step lends them without a copy and updates them where they are (the worker lets go of
    them before it sends its gradients), and training gives one process's numbers."""
    batches = np.random.default_rng(1).random((6, 32, 20), np.float32)
    with tf.cluster.local(ps=1, workers=1) as cluster, tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [32, 20])
        with tf.device("/job:ps/task:0"):
            w = tf.Variable(tf.fill([20, 8], 0.05), name="w")
            b = tf.Variable(tf.zeros([8]), name="b")
        with tf.device("/job:worker/task:0"):
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b))
            train = tf.train.MomentumOptimizer(0.1, 0.9).minimize(loss)
        ps = cluster.spec.task_address("ps", 0)
        with tf.Session(cluster.target) as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(train, {x: batches[0]})
            after_first = cluster.client.run(_variables_of_ps, workers=[ps])[ps]
            for batch in batches[1:]:
                sess.run(train, {x: batch})
            after_all = cluster.client.run(_variables_of_ps, workers=[ps])[ps]
            trained = sess.run([w, b])
        assert after_first["w"][1] and after_first["b"][1]  # resident
        assert after_all["w"] == after_first["w"] and after_all["b"] == after_first["b"]  # in place
        with tf.Session(graph=w.graph, config=tf.ConfigProto(allow_soft_placement=True)) as local:
            local.run(tf.global_variables_initializer())
            for batch in batches:
                local.run(train, {x: batch})
            for got, expected in zip(trained, local.run([w, b])):
                np.testing.assert_allclose(got, expected, rtol=1e-6)
