"""TF 1.x between-graph scripts, unchanged: ``tf.train.Server`` with a ClusterSpec of host:port
lists, one process per task started in any order, ``Supervisor`` / ``MonitoredTrainingSession``,
and the session surface they use (``report_uninitialized_variables``, ``ConfigProto(device_filters=)``,
``RunOptions``/``RunMetadata``, device functions reading ``op.node_def``).

The replica script below is written in the style of TF's ``mnist_replica.py`` (argparse
stands in for ``tf.app.flags``) and trains on scikit-learn's digits.
"""

import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import dflow as tf
from dflow.errors import DeadlineExceededError, OutOfRangeError

REPLICA_SCRIPT = '''
"""Distributed digits training with model replicas (mnist_replica.py's shape)."""
import argparse
import math
import sys
import tempfile

import numpy as np
from sklearn.datasets import load_digits

import dflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--job_name", default=None, help="job name: worker or ps")
parser.add_argument("--task_index", type=int, default=None, help="Worker task index")
parser.add_argument("--ps_hosts", default="localhost:2222", help="Comma-separated hostname:port pairs")
parser.add_argument("--worker_hosts", default="localhost:2223,localhost:2224")
parser.add_argument("--hidden_units", type=int, default=100)
parser.add_argument("--train_steps", type=int, default=300, help="global training steps")
parser.add_argument("--batch_size", type=int, default=50)
parser.add_argument("--learning_rate", type=float, default=0.01)
parser.add_argument("--sync_replicas", action="store_true", help="aggregate the replicas' gradients")
parser.add_argument("--session", choices=["supervisor", "monitored"], default="supervisor")
FLAGS, _ = parser.parse_known_args()

PIXELS = 8


def main(unused_argv):
    digits = load_digits()
    images = (digits.data / 16.0).astype(np.float32)
    labels = np.eye(10, dtype=np.float32)[digits.target]
    train_x, train_y, test_x, test_y = images[:-360], labels[:-360], images[-360:], labels[-360:]
    print("job name = %s" % FLAGS.job_name)
    print("task index = %d" % FLAGS.task_index)

    cluster = tf.train.ClusterSpec({"ps": FLAGS.ps_hosts.split(","), "worker": FLAGS.worker_hosts.split(",")})
    server = tf.train.Server(cluster, job_name=FLAGS.job_name, task_index=FLAGS.task_index)
    if FLAGS.job_name == "ps":
        server.join()

    is_chief = (FLAGS.task_index == 0)
    worker_device = "/job:worker/task:%d/cpu:0" % FLAGS.task_index
    with tf.device(tf.train.replica_device_setter(worker_device=worker_device, ps_device="/job:ps/cpu:0",
                                                  cluster=cluster)):
        global_step = tf.Variable(0, name="global_step", trainable=False)
        hid_w = tf.Variable(tf.truncated_normal([PIXELS * PIXELS, FLAGS.hidden_units],
                                                stddev=1.0 / PIXELS), name="hid_w")
        hid_b = tf.Variable(tf.zeros([FLAGS.hidden_units]), name="hid_b")
        sm_w = tf.Variable(tf.truncated_normal([FLAGS.hidden_units, 10],
                                               stddev=1.0 / math.sqrt(FLAGS.hidden_units)), name="sm_w")
        sm_b = tf.Variable(tf.zeros([10]), name="sm_b")

        x = tf.placeholder(tf.float32, [None, PIXELS * PIXELS])
        y_ = tf.placeholder(tf.float32, [None, 10])
        hid = tf.nn.relu(tf.matmul(x, hid_w) + hid_b)
        logits = tf.matmul(hid, sm_w) + sm_b
        cross_entropy = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=y_, logits=logits))
        accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), tf.argmax(y_, 1)), tf.float32))
        opt = tf.train.AdamOptimizer(FLAGS.learning_rate)
        num_workers = len(FLAGS.worker_hosts.split(","))
        if FLAGS.sync_replicas:
            opt = tf.train.SyncReplicasOptimizer(opt, replicas_to_aggregate=num_workers,
                                                 total_num_replicas=num_workers, name="digits_sync_replicas")
        train_step = opt.minimize(cross_entropy, global_step=global_step)
        if FLAGS.sync_replicas:
            local_init_op = opt.local_step_init_op
            if is_chief:
                local_init_op = opt.chief_init_op
            ready_for_local_init_op = opt.ready_for_local_init_op
            chief_queue_runner = opt.get_chief_queue_runner()
            sync_init_op = opt.get_init_tokens_op()
        init_op = tf.global_variables_initializer()

    sess_config = tf.ConfigProto(allow_soft_placement=True, log_device_placement=False,
                                 device_filters=["/job:ps", "/job:worker/task:%d" % FLAGS.task_index])
    if is_chief:
        print("Worker %d: Initializing session..." % FLAGS.task_index)
    else:
        print("Worker %d: Waiting for session to be initialized..." % FLAGS.task_index)
    rng = np.random.RandomState(FLAGS.task_index)

    def train(sess, should_stop):
        local_step = step = 0
        while not should_stop():
            batch = rng.randint(0, len(train_x), FLAGS.batch_size)
            _, step = sess.run([train_step, global_step], feed_dict={x: train_x[batch], y_: train_y[batch]})
            local_step += 1
            if step >= FLAGS.train_steps:
                break
        print("Worker %d: %d local steps, global step %d" % (FLAGS.task_index, local_step, step))

    if FLAGS.session == "supervisor":
        if FLAGS.sync_replicas:
            sv = tf.train.Supervisor(is_chief=is_chief, logdir=tempfile.mkdtemp(), init_op=init_op,
                                     local_init_op=local_init_op,
                                     ready_for_local_init_op=ready_for_local_init_op,
                                     recovery_wait_secs=1, global_step=global_step)
        else:
            sv = tf.train.Supervisor(is_chief=is_chief, logdir=tempfile.mkdtemp(), init_op=init_op,
                                     recovery_wait_secs=1, global_step=global_step)
        sess = sv.prepare_or_wait_for_session(server.target, config=sess_config)
        if FLAGS.sync_replicas and is_chief:
            sess.run(sync_init_op)
            sv.start_queue_runners(sess, [chief_queue_runner])
        print("Worker %d: Session initialization complete." % FLAGS.task_index)
        train(sess, sv.should_stop)
        if is_chief:  # and no sv.stop(), as in mnist_replica.py: the chief's queue runner ends at exit
            print("accuracy = %.4f" % sess.run(accuracy, feed_dict={x: test_x, y_: test_y}))
    else:
        hooks = [tf.train.StopAtStepHook(last_step=FLAGS.train_steps)]
        if FLAGS.sync_replicas:
            hooks.append(opt.make_session_run_hook(is_chief))
        with tf.train.MonitoredTrainingSession(master=server.target, is_chief=is_chief, hooks=hooks,
                                               config=sess_config) as sess:
            train(sess, sess.should_stop)
            if is_chief:
                print("accuracy = %.4f" % sess.run(accuracy, feed_dict={x: test_x, y_: test_y}))


if __name__ == "__main__":
    main(sys.argv)
'''

DEADLINE_S = 240


def free_addresses(n: int) -> list[str]:
    """``n`` distinct free loopback ``host:port`` addresses."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [f"127.0.0.1:{s.getsockname()[1]}" for s in sockets]
    finally:
        for s in sockets:
            s.close()


def run_tasks(script: Path, order: list[tuple[str, int]], extra: list[str]) -> dict[str, tuple[int, str]]:
    """Start one process per task in ``order``; wait (up to DEADLINE_S) for all to exit;
    ``{"worker/0": (returncode, output)}``."""
    ps, w0, w1 = free_addresses(3)
    hosts = ["--ps_hosts", ps, "--worker_hosts", f"{w0},{w1}"]
    processes = {f"{job}/{task}": subprocess.Popen(
        [sys.executable, str(script), "--job_name", job, "--task_index", str(task), *hosts, *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=script.parent)
        for job, task in order}
    deadline = time.monotonic() + DEADLINE_S
    results = {}
    try:
        for role, process in processes.items():
            output, _ = process.communicate(timeout=max(1.0, deadline - time.monotonic()))
            results[role] = (process.returncode, output)
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()
    return results


@pytest.mark.slow
@pytest.mark.parametrize("flags, order", [
    (["--session", "supervisor"], [("worker", 1), ("ps", 0), ("worker", 0)]),
    (["--session", "supervisor", "--sync_replicas", "--train_steps", "100"],
     [("ps", 0), ("worker", 0), ("worker", 1)]),
    (["--session", "monitored", "--sync_replicas", "--train_steps", "100"],
     [("worker", 0), ("worker", 1), ("ps", 0)]),
], ids=["supervisor-async", "supervisor-sync", "monitored-sync"])
def test_replica_script_runs_as_three_processes_in_any_order(tmp_path, flags, order):
    script = tmp_path / "digits_replica.py"
    script.write_text(REPLICA_SCRIPT)
    results = run_tasks(script, order, flags)
    for role, (code, output) in results.items():
        assert code == 0, f"{role} exited with {code}:\n{output[-3000:]}"
        assert "Traceback" not in output and "cannot be reached" not in output, f"{role}:\n{output[-3000:]}"
    chief = results["worker/0"][1]
    accuracy = float(chief.split("accuracy = ")[1].split()[0])
    assert accuracy > 0.8, chief  # 0.90 on these 360 held-out digits, as in one process
    steps = [int(results[r][1].split(" local steps")[0].rsplit(" ", 1)[1]) for r in ("worker/0", "worker/1")]
    assert all(s > 0 for s in steps), steps  # both replicas trained
    assert "Waiting for session to be initialized" in results["worker/1"][1]


PLAIN_SCRIPT = '''
import dflow as tf

cluster = tf.cluster.local(ps=1, workers=1)
with tf.device(tf.train.replica_device_setter(cluster=cluster.spec)):
    w = tf.Variable(3.0, name="w")
y = w * 2.0
sess = tf.Session(cluster.target)
sess.run(tf.global_variables_initializer())
print("y =", sess.run(y))
'''


@pytest.mark.slow
def test_cluster_local_at_the_top_of_a_plain_script_runs_without_tracebacks(tmp_path):
    script = tmp_path / "plain.py"
    script.write_text(PLAIN_SCRIPT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "y = 6.0"
    assert done.stderr.strip() == ""  # no spawn tracebacks, no Dask chatter, no hang at exit


def test_a_worker_whose_ps_never_starts_says_which_task_to_start():
    ps, worker = free_addresses(2)
    spec = tf.train.ClusterSpec({"ps": [ps], "worker": [worker]})
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"task ps/0 hosts it: start that task's process "
                                           r"\(--job_name=ps --task_index=0\)"):
        tf.train.Server(spec, job_name="worker", task_index=0, timeout=3)
    assert time.monotonic() - start < 20


def test_server_needs_a_role_of_the_spec():
    spec = tf.train.ClusterSpec({"ps": ["localhost:1"], "worker": ["localhost:2"]})
    with pytest.raises(ValueError, match="needs job_name="):
        tf.train.Server(spec)
    with pytest.raises(ValueError, match=r"job 'worker' has no task 3; its tasks are \[0\]"):
        tf.train.Server(spec, job_name="worker", task_index=3)
    with pytest.raises(ValueError, match="host:port"):
        tf.train.Server(tf.train.ClusterSpec({"ps": ["nohostport"]}), job_name="ps", task_index=0)


def test_report_uninitialized_variables_names_them_for_a_polling_non_chief():
    a, b = tf.Variable(1.0, name="a"), tf.Variable(2.0, name="b")
    ready_op = tf.report_uninitialized_variables()
    assert ready_op.dtype == tf.string
    with tf.Session() as sess:
        names = sess.run(ready_op)
        assert names.tolist() == [b"a", b"b"] and len(names) == 2
        sess.run(a.initializer)
        assert sess.run(ready_op).tolist() == [b"b"]
        assert not sess.run(tf.is_variable_initialized(b))
        sess.run(b.initializer)
        assert len(sess.run(ready_op)) == 0  # the loop a non-chief polls ends
        assert sess.run(tf.report_uninitialized_variables([])).tolist() == []


def test_config_proto_takes_device_filters_and_checks_them():
    config = tf.ConfigProto(allow_soft_placement=True, log_device_placement=False,
                            device_filters=["/job:ps", "/job:worker/task:1"])
    assert config.device_filters == ["/job:ps", "/job:worker/task:1"]
    with pytest.raises(ValueError, match="device_filters"):
        tf.ConfigProto(device_filters=["ps"])


def test_run_options_and_run_metadata_trace_a_step():
    x = tf.placeholder(tf.float32, [None], name="x")
    y = tf.reduce_sum(x * 2.0, name="total")
    options = tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE)
    metadata = tf.RunMetadata()
    with tf.Session() as sess:
        assert sess.run(y, {x: [1.0, 2.0]}, options=options, run_metadata=metadata) == 6.0
    names = [n.node_name for d in metadata.step_stats.dev_stats for n in d.node_stats]
    assert "total" in names and metadata.step_stats.dev_stats[0].device.endswith("CPU:0")


def test_a_traced_step_times_each_op_and_the_timeline_writes_a_chrome_trace():
    import json

    from dflow.python.client import timeline

    x = tf.placeholder(tf.float32, [64, 128])
    w = tf.Variable(tf.ones([128, 128]), name="w")
    loss = tf.reduce_sum(tf.matmul(x, w))
    train = tf.train.GradientDescentOptimizer(0.01).minimize(loss)
    batch = np.ones((64, 128), np.float32)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run([train, loss], {x: batch})
        assert sess.last_run_stats.op_spans is None  # untraced: a compiled stage, no clock read per op
        metadata = tf.RunMetadata()
        before = time.time()
        sess.run([train, loss], {x: batch}, options=tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE),
                 run_metadata=metadata)
        after = time.time()
    (device,) = metadata.step_stats.dev_stats
    nodes = device.node_stats
    assert [n.node_name for n in nodes] == sess.last_run_stats.order
    starts = [n.all_start_micros for n in nodes]
    assert starts == sorted(starts) and before * 1e6 <= starts[0] and starts[-1] <= after * 1e6
    assert all(n.all_end_rel_micros >= 0 for n in nodes)
    products = [n for n in nodes if n.timeline_label.endswith("= MatMul()")]
    assert len(products) == 2 and all(n.all_end_rel_micros > 0 for n in products)
    trace = json.loads(timeline.Timeline(metadata.step_stats).generate_chrome_trace_format())
    ops = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert [e["args"]["name"] for e in ops] == [n.node_name for n in nodes]
    assert [e["dur"] for e in ops] == [n.all_end_rel_micros for n in nodes]
    assert {e["name"] for e in ops} >= {"MatMul", "ApplyGradientDescent"}
    assert trace["traceEvents"][0]["args"]["name"] == device.device


def test_device_function_reads_node_def_as_tf_scripts_do():
    ps_ops = ["Variable", "VariableV2", "VarHandleOp"]

    def assign_to_device(op):
        node_def = op if isinstance(op, tf.NodeDef) else op.node_def
        return "/job:ps/task:0" if node_def.op in ps_ops else "/job:worker/task:0"

    with tf.device(assign_to_device):
        w = tf.Variable(1.0, name="w")
        y = tf.multiply(w, 2.0, name="y")
    assert w.op.device == "/job:ps/task:0" and y.op.device == "/job:worker/task:0"
    assert y.op.node_def.name == "y" and y.op.node_def.op == "Mul"


def _model():
    step = tf.Variable(0, name="global_step", trainable=False)
    w = tf.Variable(5.0, name="w")
    train_op = tf.train.GradientDescentOptimizer(0.1).minimize(tf.square(w), global_step=step)
    return step, w, train_op


def test_supervisor_chief_initializes_saves_and_restores(tmp_path):
    step, w, train_op = _model()
    sv = tf.train.Supervisor(is_chief=True, logdir=str(tmp_path), recovery_wait_secs=1, global_step=step)
    assert sv.global_step is step and sv.saver is not None
    with sv.managed_session() as sess:
        for _ in range(3):
            sess.run(train_op)
        sv.saver.save(sess, sv.save_path, global_step=sv.global_step)
        trained = float(sess.run(w))
    assert sv.should_stop()
    again = tf.train.Supervisor(is_chief=True, logdir=str(tmp_path), global_step=step)
    sess = again.prepare_or_wait_for_session("")
    assert int(sess.run(step)) == 3 and float(sess.run(w)) == pytest.approx(trained)
    again.stop()


def test_supervisor_non_chief_waits_with_a_deadline_naming_the_variables():
    _model()
    sv = tf.train.Supervisor(is_chief=False, recovery_wait_secs=0.05)
    start = time.monotonic()
    with pytest.raises(DeadlineExceededError, match=r"chief to initialize global_step, w"):
        sv.prepare_or_wait_for_session("", max_wait_secs=0.3)
    assert time.monotonic() - start < 5


def test_managed_session_ends_quietly_on_out_of_range_and_raises_the_rest():
    step, w, train_op = _model()
    sv = tf.train.Supervisor(logdir=None)
    with sv.managed_session() as sess:
        sess.run(train_op)
        raise OutOfRangeError("input exhausted")
    assert sv.should_stop()
    with pytest.raises(ValueError, match="boom"):
        with sv.managed_session() as sess:
            raise ValueError("boom")


def test_supervisor_runs_sync_replicas_chief_queue_runner():
    step = tf.Variable(0, name="global_step", trainable=False)
    w = tf.Variable(np.float32(4.0), name="w")
    opt = tf.train.SyncReplicasOptimizer(tf.train.GradientDescentOptimizer(0.25), replicas_to_aggregate=1,
                                         total_num_replicas=1)
    train_op = opt.minimize(tf.square(w), global_step=step)
    sv = tf.train.Supervisor(is_chief=True, local_init_op=opt.chief_init_op,
                             ready_for_local_init_op=opt.ready_for_local_init_op, recovery_wait_secs=1,
                             global_step=step)
    sess = sv.prepare_or_wait_for_session("")
    sess.run(opt.get_init_tokens_op())
    sv.start_queue_runners(sess, [opt.get_chief_queue_runner()])
    for _ in range(2):
        sess.run(train_op)
    assert int(sess.run(step)) == 2 and float(sess.run(w)) == pytest.approx(1.0)  # 4 -> 2 -> 1
    sv.stop()
    sess.close()



def test_nan_logging_and_step_counter_hooks(caplog):
    step = tf.train.get_or_create_global_step()
    scale = tf.placeholder(tf.float32, [], name="scale")
    loss = tf.multiply(scale, 2.0, name="loss")
    train_op = tf.assign_add(step, 1)
    counter = tf.train.StepCounterHook(every_n_steps=2)
    logging_hook = tf.train.LoggingTensorHook({"loss": loss}, every_n_iter=2)
    hooks = [tf.train.NanTensorHook(loss), logging_hook, counter]
    with caplog.at_level("INFO", logger="dflow"):
        with tf.train.MonitoredTrainingSession(hooks=hooks) as sess:
            for _ in range(5):
                sess.run(train_op, {scale: 1.0})
            with pytest.raises(tf.train.NanLossDuringTrainingError, match="NaN loss"):
                sess.run(train_op, {scale: np.nan})
    assert [r.getMessage() for r in caplog.records if r.getMessage().startswith("loss = ")] == \
        ["loss = 2.0"] * 3  # runs 0, 2 and 4
    rates = [r.getMessage() for r in caplog.records if r.getMessage().startswith("global_step/sec: ")]
    assert rates and all(float(m.split(": ")[1]) > 0 for m in rates)


@pytest.mark.slow
def test_servers_in_one_process_and_sessions_to_a_tasks_grpc_address():
    ps, worker = free_addresses(2)
    spec = tf.train.ClusterSpec({"ps": [ps], "worker": [worker]})
    servers = [tf.train.Server(spec, job_name="ps", task_index=0),
               tf.train.Server(spec, job_name="worker", task_index=0)]
    try:
        assert servers[0].target == servers[1].target == f"tcp://{ps}"
        with tf.device(tf.train.replica_device_setter(cluster=spec)):
            v = tf.Variable(2.0, name="v")
        y = tf.multiply(v, 3.0, name="y")
        # mnist_replica.py --existing_servers: "grpc://" + the worker's host:port
        with tf.Session("grpc://" + worker) as sess:
            sess.run(tf.global_variables_initializer())
            assert float(sess.run(y)) == 6.0
            assert "/job:worker/task:0" in sess.describe_placement(y)
        with tf.Session("grpc://" + ps) as sess:  # the scheduler's task: the scheduler answers
            assert float(sess.run(y)) == 6.0
    finally:
        for server in reversed(servers):
            server.stop()
    with socket.socket() as probe:  # the scheduler closed: no one listens there any more
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # (closed connections linger)
        probe.bind(("127.0.0.1", int(ps.rsplit(":", 1)[1])))


FAILING_SCRIPT = '''
import sys
import dflow as tf

spec = tf.train.ClusterSpec({"ps": [sys.argv[1]], "worker": [sys.argv[2]]})
server = tf.train.Server(spec, job_name="ps", task_index=0)
print("started", flush=True)
raise RuntimeError("the script failed here")
'''


@pytest.mark.slow
def test_a_failing_task_exits_at_once_and_stops_its_worker_and_scheduler(tmp_path):
    script = tmp_path / "failing.py"
    script.write_text(FAILING_SCRIPT)
    ps, worker = free_addresses(2)
    start = time.monotonic()
    done = subprocess.run([sys.executable, str(script), ps, worker], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1 and done.stdout.strip() == "started"
    assert done.stderr.count("Traceback") == 1 and "RuntimeError: the script failed here" in done.stderr
    assert time.monotonic() - start < 60  # not distributed's 240 s in Client.__del__


@pytest.mark.slow
def test_create_local_server_runs_unplaced_ops_on_its_task():
    server = tf.train.Server.create_local_server()
    try:
        product = tf.multiply(tf.constant(2.0), 3.0, name="product")
        with tf.Session(server.target) as sess:
            assert float(sess.run(product)) == 6.0
            assert sess.describe_placement(product).startswith("/job:localhost/task:0")
    finally:
        server.stop()
