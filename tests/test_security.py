"""Who can reach a dflow cluster: loopback by default, TLS with a certificate, plain data only.

A Dask worker runs the code that any peer reaching it sends, so these tests check from
real processes that an embedded cluster listens on loopback only, and that a secure one
refuses every connection without its certificate.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest

import dflow as tf
from dflow.cli import main
from dflow.cluster.spec import worker_infos


def _listening(pid: int) -> set[str]:
    """The addresses the process ``pid`` accepts connections on."""
    process = psutil.Process(pid)
    connections = getattr(process, "net_connections", process.connections)  # (psutil < 6: connections)
    return {c.laddr.ip for c in connections(kind="inet") if c.status == psutil.CONN_LISTEN}


def _train_one_step(target: str) -> float:
    with tf.Graph().as_default():
        with tf.device("/job:ps/task:0"):
            w = tf.Variable(np.ones(3, np.float32), name="w")
        with tf.device("/job:worker/task:0"):
            loss = tf.reduce_sum(tf.square(w))
            train = tf.train.GradientDescentOptimizer(0.25).minimize(loss)
        with tf.Session(target) as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(train)
            return float(sess.run(loss))


# run in a process of its own: a stranger on this machine, without the cluster's certificate
STRANGER = r"""
import json, socket, ssl, sys
import distributed
from distributed.security import Security

outcome = {}
for address in sys.argv[1:]:
    host, port = address.rpartition("://")[2].rsplit(":", 1)
    context = ssl.create_default_context()  # TLS, but no client certificate to show
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:
        with context.wrap_socket(socket.create_connection((host, int(port)), timeout=10)) as tls:
            tls.sendall(b"x")
            outcome[address] = f"answered {tls.recv(1)!r}"
    except (OSError, ssl.SSLError) as error:
        outcome[address] = f"refused: {type(error).__name__}: {error}"
try:  # a Dask client with a certificate of its own, which the cluster's CA did not sign
    distributed.Client(sys.argv[1], security=Security.temporary(), timeout=10)
    outcome["other certificate"] = "connected"
except Exception as error:
    outcome["other certificate"] = f"refused: {type(error).__name__}"
try:  # plain TCP to the TLS port
    distributed.Client(sys.argv[1].replace("tls://", "tcp://"), timeout=10)
    outcome["plain tcp"] = "connected"
except Exception as error:
    outcome["plain tcp"] = f"refused: {type(error).__name__}"
print(json.dumps(outcome))
"""


def _halve(xp, images, rng):
    return images // 2


def _transform_registered(name: str) -> bool:
    from dflow.data import TRANSFORMS

    return name in TRANSFORMS


def test_an_embedded_cluster_and_its_dashboard_listen_on_loopback_only():
    from dflow.data import register_transform

    with tf.cluster.local(ps=1, workers=1) as cluster:
        register_transform("halve", _halve, cluster=cluster)  # (a transform reaches workers by name only)
        assert set(cluster.client.run(_transform_registered, "halve").values()) == {True}
        assert cluster.target.startswith("tcp://127.0.0.1:")
        assert cluster.dashboard_link.startswith("http://127.0.0.1:")
        workers = cluster.client.run(os.getpid)
        for pid in [os.getpid(), *workers.values()]:  # the scheduler and dashboard run in this process
            assert _listening(pid) and _listening(pid) <= {"127.0.0.1"}, (pid, _listening(pid))


def test_a_secure_cluster_trains_and_refuses_whoever_lacks_its_certificate():
    with tf.cluster.local(ps=1, workers=1, secure=True) as cluster:
        assert cluster.target.startswith("tls://127.0.0.1:")
        assert _train_one_step(cluster.target) == pytest.approx(0.75)  # w = 0.5: a real step, over TLS
        workers = sorted(worker_infos(cluster.client))
        assert all(address.startswith("tls://") for address in workers)
        stranger = subprocess.run([sys.executable, "-c", STRANGER, cluster.target, *workers],
                                  capture_output=True, text=True, timeout=120)
        outcome = json.loads(stranger.stdout.splitlines()[-1])
        for address in [cluster.target, *workers]:  # the scheduler and each worker's dflow handlers
            assert outcome[address].startswith("refused: SSL") or "reset" in outcome[address], outcome
        assert outcome["other certificate"].startswith("refused"), outcome
        assert outcome["plain tcp"].startswith("refused"), outcome
        assert _train_one_step(cluster.target) == pytest.approx(0.75)  # and it still serves its clients


def test_tls_security_names_the_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="certificate 'nowhere.pem'"):
        tf.cluster.tls_security(__file__, "nowhere.pem")


def test_joining_a_tls_scheduler_without_a_certificate_says_what_to_pass():
    with pytest.raises(ValueError, match="speaks TLS: pass security=tf.cluster.tls_security"):
        tf.cluster.connect("tls://127.0.0.1:1")


def test_a_worker_for_another_machines_scheduler_must_be_told_where_to_listen(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["worker", "--scheduler", "tcp://192.0.2.1:8786", "--job", "ps", "--task", "0"])
    assert exit_.value.code == 2
    assert "listens on loopback unless told: pass --host" in capsys.readouterr().err


def test_tls_options_need_a_ca_and_a_certificate(capsys):
    with pytest.raises(SystemExit):
        main(["worker", "--scheduler", "tls://127.0.0.1:1", "--job", "ps", "--task", "0",
              "--tls-cert", __file__])
    assert "TLS needs --tls-ca-file and --tls-cert" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train", "--model", "mnist_dnn", "--tls-ca-file", __file__, "--tls-cert", __file__])
    assert "join a running cluster (--cluster tls://HOST:PORT)" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # a Slurm cluster is started by the command: --secure, not these
        main(["train", "--model", "mnist_dnn", "--cluster", "slurm", "--tls-ca-file", __file__,
              "--tls-cert", __file__])
    assert "--secure makes the cluster this command starts speak TLS" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train", "--model", "mnist_dnn", "--cluster", "tcp://127.0.0.1:1", "--secure"])
    assert "a running cluster (--cluster ADDRESS) takes --tls-ca-file" in capsys.readouterr().err


def _self_signed_certificate(directory) -> tuple[str, str]:
    """The README's one openssl command: a self-signed certificate that is also the CA."""
    cert, key = str(directory / "dflow.pem"), str(directory / "dflow-key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=dflow", "-keyout", key, "-out", cert], check=True, capture_output=True)
    return cert, key


@pytest.mark.slow
@pytest.mark.skipif(subprocess.run(["which", "openssl"], capture_output=True).returncode != 0,
                    reason="needs the openssl command (apt-get install openssl)")
def test_the_readmes_hand_started_tls_cluster_trains(tmp_path):
    """`dask scheduler --protocol tls`, `dflow worker --tls-...`, `dflow train --cluster tls://...`."""
    cert, key = _self_signed_certificate(tmp_path)
    tls = ["--tls-ca-file", cert, "--tls-cert", cert, "--tls-key", key]
    scheduler_file = tmp_path / "scheduler.json"
    scheduler = [sys.executable, "-m", "distributed.cli.dask_scheduler", "--protocol", "tls", "--host",
                 "127.0.0.1", "--port", "0", "--dashboard-address", "127.0.0.1:0", "--scheduler-file",
                 str(scheduler_file), *tls]
    processes = [subprocess.Popen(scheduler, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        deadline = time.monotonic() + 60
        while not scheduler_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        address = json.loads(scheduler_file.read_text())["address"]
        assert address.startswith("tls://127.0.0.1:")
        for job in ("ps", "worker"):
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "dflow", "worker", "--scheduler", address, "--job", job, "--task", "0",
                 *tls], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        security = tf.cluster.tls_security(cert, cert, key)
        roles = ["ps/0", "worker/0"]
        with tf.cluster.connect(address, roles=roles, timeout=90, security=security) as cluster:
            pids = cluster.client.run(os.getpid)
            assert all(_listening(pid) <= {"127.0.0.1"} for pid in pids.values())
        result = subprocess.run([sys.executable, "-m", "dflow", "train", "--model", "mnist_dnn", "--steps",
                                 "10", "--log_every", "5", "--cluster", address, *tls],
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr
        assert "cluster: 1 PS + 1 workers" in result.stdout and "test accuracy" in result.stdout
        bench_args = ["--model", "mnist_dnn", "--num_workers", "1", "--num_ps", "1", "--variable_update",
                      "parameter_server", "--num_warmup_batches", "1", "--num_batches", "3", "--repeats", "1"]
        bench = subprocess.run([sys.executable, "-m", "dflow", "bench", *bench_args, "--cluster", address,
                                *tls], capture_output=True, text=True, timeout=300)
        assert bench.returncode == 0, bench.stderr
        assert "images/sec" in bench.stdout
        without = subprocess.run([sys.executable, "-m", "dflow", "train", "--model", "mnist_dnn", "--steps",
                                  "10", "--cluster", address], capture_output=True, text=True, timeout=120)
        assert without.returncode != 0 and "speaks TLS: pass" in without.stderr
    finally:
        for process in reversed(processes):
            process.terminate()
            process.wait(timeout=30)


# ---- graph files -----------------------------------------------------------------------------------
def test_a_graph_file_cannot_make_this_process_import_a_module(tmp_path):
    from dflow.data import Dataset, prepare, register_transform

    store = prepare("synthetic", out=str(tmp_path / "s.zarr"), echo=None, image_shape=(4, 4, 1),
                    train_count=8, test_count=0)
    with tf.Graph().as_default() as graph:
        Dataset(store, "train", batch_size=4, transform=None).get_next()
    graph_def = json.loads(json.dumps(graph.as_graph_def()))
    (entry,) = [e for e in graph_def["ops"] if e["type"] == "DatasetNext"]
    entry["attrs"]["spec"]["transform"] = "tests_evil_module:run"  # once imported any module
    sys.modules.pop("tests_evil_module", None)
    (tmp_path / "tests_evil_module.py").write_text("raise SystemExit('imported')\n")
    sys.path.insert(0, str(tmp_path))
    try:
        named = r"'DatasetNext' \(DatasetNext\): unknown transform 'tests_evil_module:run'"
        with pytest.raises(ValueError, match=named + r".*register_transform\('run', function\)"):
            tf.import_graph_def(graph_def, tf.Graph())
        assert "tests_evil_module" not in sys.modules
        with pytest.raises(ValueError, match="never a module to import"):
            Dataset(store, "train", batch_size=4, transform="tests_evil_module:run")
    finally:
        sys.path.remove(str(tmp_path))

    def run(xp, images, rng):
        return images * 0 + 7

    register_transform("run", run)
    entry["attrs"]["spec"]["transform"] = "run"
    imported = tf.import_graph_def(graph_def, tf.Graph())
    with tf.Session(graph=imported) as sess:
        images = sess.run(imported.get_tensor_by_name("DatasetNext:0"))
    assert images.shape == (4, 4, 4, 1) and (images == 7).all()


def test_dflow_train_secure_trains_its_replicas_over_tls(capsys):
    """The replicas run inside the workers and open their own client there: over TLS too."""
    assert main(["train", "--model", "mnist_dnn", "--steps", "10", "--log_every", "5", "--secure"]) == 0
    out = capsys.readouterr().out
    assert "cluster: 1 PS + 2 workers" in out and "test accuracy" in out


def test_a_session_to_a_tls_scheduler_without_a_certificate_says_what_to_do():
    with pytest.raises(ValueError, match=r"speaks TLS: open it first with tf.cluster.connect\('tls://127"):
        tf.Session("tls://127.0.0.1:1")


# ---- tf.train.Server: a TF script, unchanged, made TLS by Dask's configuration ---------------------
SERVER_SCRIPT = r'''
"""One task of a between-graph cluster, as TF 1.x scripts are written: nothing about TLS here."""
import sys

import numpy as np

import dflow as tf

job_name, task_index, ps_hosts, worker_hosts = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
cluster = tf.train.ClusterSpec({"ps": ps_hosts.split(","), "worker": worker_hosts.split(",")})
server = tf.train.Server(cluster, job_name=job_name, task_index=task_index)
print("target =", server.target, flush=True)
if job_name == "ps":
    server.join()

with tf.device(tf.train.replica_device_setter(worker_device="/job:worker/task:%d" % task_index,
                                              cluster=cluster)):
    global_step = tf.train.get_or_create_global_step()
    w = tf.Variable(np.ones(3, np.float32), name="w")
    loss = tf.reduce_sum(tf.square(w))
    train_op = tf.train.GradientDescentOptimizer(0.25).minimize(loss, global_step=global_step)
hooks = [tf.train.StopAtStepHook(last_step=3)]
with tf.train.MonitoredTrainingSession(master=server.target, is_chief=task_index == 0, hooks=hooks) as sess:
    while not sess.should_stop():
        sess.run(train_op)
    print("global step", sess.run(global_step), "loss", sess.run(loss), flush=True)
'''


def _tls_environment(cert: str, key: str) -> dict[str, str]:
    """Dask's TLS configuration as environment variables, for every role of a task (the README's)."""
    env = {"DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "True", "DASK_DISTRIBUTED__COMM__TLS__CA_FILE": cert}
    for role in ("SCHEDULER", "WORKER", "CLIENT"):
        env[f"DASK_DISTRIBUTED__COMM__TLS__{role}__CERT"] = cert
        env[f"DASK_DISTRIBUTED__COMM__TLS__{role}__KEY"] = key
    return env


def _task_process(script, job: str, ps: str, worker: str, env: dict) -> subprocess.Popen:
    path = os.pathsep.join(filter(None, [os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                         os.environ.get("PYTHONPATH")]))
    return subprocess.Popen([sys.executable, str(script), job, "0", ps, worker], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONPATH": path, **env})


@pytest.mark.slow
@pytest.mark.skipif(subprocess.run(["which", "openssl"], capture_output=True).returncode != 0,
                    reason="needs the openssl command (apt-get install openssl)")
def test_an_unchanged_tf_server_script_runs_over_tls_from_dasks_configuration(tmp_path):
    """ps/0 and worker/0 as two processes of a TF-style script; TLS comes from the environment."""
    from test_tf1_distributed import free_addresses

    cert, key = _self_signed_certificate(tmp_path)
    script = tmp_path / "task.py"
    script.write_text(SERVER_SCRIPT)
    ps, worker = free_addresses(2)
    target = f"tls://{ps}"
    env = _tls_environment(cert, key)
    processes = [_task_process(script, "ps", ps, worker, env)]
    try:
        # the PS serves until worker/0 has come and gone: meanwhile, the cluster's owner and a stranger
        security = tf.cluster.tls_security(cert, cert, key)
        with tf.cluster.connect(target, roles=["ps/0"], timeout=120, security=security) as cluster:
            (ps_worker,) = worker_infos(cluster.client)
            assert ps_worker.startswith("tls://127.0.0.1:")
            stranger = subprocess.run([sys.executable, "-c", STRANGER, target, ps_worker],
                                      capture_output=True, text=True, timeout=120)
            outcome = json.loads(stranger.stdout.splitlines()[-1])
            for address in (target, ps_worker):
                assert outcome[address].startswith("refused: SSL") or "reset" in outcome[address], outcome
            assert outcome["other certificate"].startswith("refused"), outcome
            assert outcome["plain tcp"].startswith("refused"), outcome
        with pytest.raises(ValueError, match="speaks TLS: open it first"):  # (this process has no TLS set)
            tf.Session(target)
        processes.append(_task_process(script, "worker", ps, worker, env))
        outputs = [process.communicate(timeout=300)[0] for process in reversed(processes)]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    worker_output, ps_output = outputs
    assert [p.returncode for p in processes] == [0, 0], outputs
    assert f"target = {target}" in ps_output and f"target = {target}" in worker_output
    assert "global step 3 loss 0.046875" in worker_output  # w: 1 -> 0.5 -> 0.25 -> 0.125: three real steps
    assert "Traceback" not in worker_output + ps_output, outputs


def test_a_server_whose_tls_configuration_lacks_a_certificate_names_it():
    import dask
    from test_tf1_distributed import free_addresses

    spec = tf.train.ClusterSpec({"ps": free_addresses(1), "worker": free_addresses(1)})
    with dask.config.set({"distributed.comm.require-encryption": True,
                          "distributed.comm.tls.ca-file": __file__,
                          "distributed.comm.tls.client.cert": __file__}):
        with pytest.raises(ValueError, match=r"sets no distributed\.comm\.tls\.scheduler\.cert, "
                                             r"distributed\.comm\.tls\.worker\.cert \(environment: "
                                             r"DASK_DISTRIBUTED__COMM__TLS__SCHEDULER__CERT"):
            tf.train.Server(spec, job_name="ps", task_index=0)


@pytest.mark.slow
def test_servers_given_security_train_over_tls_in_one_process():
    """``Server(..., security=)``: TF's positional signature stays, the keyword makes the task TLS."""
    from distributed.security import Security
    from test_tf1_distributed import free_addresses

    ps, worker = free_addresses(2)
    spec = tf.train.ClusterSpec({"ps": [ps], "worker": [worker]})
    security = Security.temporary()
    servers = [tf.train.Server(spec, "ps", 0, security=security),
               tf.train.Server(spec, "worker", 0, None, None, True, security=security)]
    try:
        assert servers[0].target == servers[1].target == f"tls://{ps}"
        workers = worker_infos(servers[1].cluster.client)
        assert sorted(workers) and all(address.startswith("tls://127.0.0.1:") for address in workers)
        assert _train_one_step(servers[1].target) == pytest.approx(0.75)
        assert _train_one_step("grpc://" + worker) == pytest.approx(0.75)  # a task's address: TLS too
    finally:
        for server in reversed(servers):
            server.stop()
