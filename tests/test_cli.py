"""The ``dflow`` command line: ``dflow train`` as a user runs it, and its errors."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

import dflow as tf
from dflow.cli import main
from dflow.models import MODELS

PROGRESS = re.compile(r"^step (\d+)/(\d+)  loss \d+\.\d{4}  images/sec \d+\.\d  "
                      r"\(eta \d+:\d\d:\d\d\)$")
ACCURACY = re.compile(r"^test accuracy: (\d\.\d{4}) \((\d+) images\)$")


def dflow(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dflow", *args], capture_output=True, text=True,
                          timeout=120)


def test_train_prints_progress_and_test_accuracy():
    result = dflow("train", "--model", "mnist_dnn", "--dataset", "digits", "--steps", "30",
                   "--log_every", "10", "--batch_size", "32", "--local")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("training mnist_dnn on digits: 1437 train / 360 test")
    progress = [PROGRESS.match(line) for line in lines if line.startswith("step ")]
    assert [(m.group(1), m.group(2)) for m in progress] == [("10", "30"), ("20", "30"),
                                                            ("30", "30")]
    accuracy = ACCURACY.match(lines[-1])
    assert accuracy, lines[-1]
    assert accuracy.group(2) == "360" and float(accuracy.group(1)) > 0.3  # chance is 0.1


def test_unknown_model_exits_2_and_lists_the_choices():
    result = dflow("train", "--model", "resnet9000")
    assert result.returncode == 2
    assert "invalid choice: 'resnet9000'" in result.stderr
    for name in MODELS:
        assert name in result.stderr


@pytest.mark.parametrize("dataset", ["cifar10", "imagenet", "mnist"])
def test_datasets_not_prepared_point_to_data_prepare(dataset, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no datasets/NAME.zarr here
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--model", "deep_mnist", "--dataset", dataset])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"dataset {dataset!r} is neither 'digits' nor 'line' nor a prepared store" in err
    assert "dflow data prepare NAME --source FILE" in err


@pytest.fixture(scope="module")
def cifar_store(tmp_path_factory):
    """A store in the CIFAR-10 layout (32x32x3, 10 classes), from the synthetic generator."""
    from dflow.data import prepare

    return prepare("synthetic", out=str(tmp_path_factory.mktemp("stores") / "cifar.zarr"), echo=None,
                   image_shape=(32, 32, 3), num_classes=10, train_count=300, test_count=60)


@pytest.mark.parametrize("where", [["--local"], ["--workers", "2"]])
def test_train_streams_a_prepared_store(cifar_store, where, capsys):
    """cifar10 on a 32x32x3 store: the tutorial's crops; on a cluster each worker reads its shard."""
    assert main(["train", "--model", "cifar10", "--dataset", cifar_store, "--steps", "4",
                 "--batch_size", "20", "--log_every", "2", *where]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"training cifar10 on {cifar_store}: 300 train / 60 test examples of 24x24x3")
    assert lines[0].endswith("; in this process (--local)" if where == ["--local"] else
                             "; asynchronous updates (the default; --sync for synchronous, parameter_server)")
    assert ACCURACY.match(lines[-1]).group(2) == "60"


def test_a_store_the_model_cannot_read_is_refused(cifar_store, capsys, tmp_path):
    for dataset, message in [(cifar_store, "model deep_mnist takes 28x28x1 images but"),
                             (str(tmp_path), "is not a Zarr group")]:
        with pytest.raises(SystemExit) as exit_:
            main(["train", "--model", "deep_mnist", "--dataset", dataset, "--local"])
        assert exit_.value.code == 2
        assert message in capsys.readouterr().err


def test_bad_numbers_are_refused(capsys):
    for args, what in [(["--steps", "0"], "--steps"), (["--batch_size", "0"], "--batch_size"),
                       (["--learning_rate", "-1"], "--learning_rate"),
                       (["--batch_size", "5000"], "--batch_size")]:
        with pytest.raises(SystemExit) as exit_:
            main(["train", "--model", "mnist_dnn", *args])
        assert exit_.value.code == 2, args
        assert what in capsys.readouterr().err


def test_no_command_prints_help(capsys):
    assert main([]) == 2
    assert "train" in capsys.readouterr().out


def test_version_says_dflow_and_the_tf_api_level(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"dflow {tf.DFLOW_VERSION} (TF 1.x API: tf.__version__ is 1.15.0)\n"


@pytest.mark.parametrize("command, says", [
    ("train", "with asynchronous updates unless --sync or --local"),
    ("bench", "(synchronous updates unless --async)")])
def test_help_says_which_update_mode_is_the_default(command, says, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert says in " ".join(capsys.readouterr().out.split())  # argparse wraps the lines


@pytest.mark.parametrize("flags, said", [
    ([], "mnist_dnn, parameter_server, synchronous updates (the default; --async for asynchronous)"),
    (["--async"], "mnist_dnn, parameter_server, asynchronous updates (--async)"),
    (["--sync", "--variable_update", "allreduce", "--num_ps", "0"], "mnist_dnn, allreduce, synchronous "
                                                                     "updates (--sync)")])
def test_bench_says_its_update_mode_first(flags, said, capsys, monkeypatch):
    """The line comes before the cluster starts; the benchmark itself is tests/test_bench_harness.py's."""
    from dflow.bench import harness

    started = []
    monkeypatch.setattr(harness, "run_benchmark", lambda settings, **_: started.append(settings) or {})
    assert main(["bench", "--model", "mnist_dnn", *flags]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"dflow bench: {said}"
    assert len(started) == 1


def test_linear_regression_learns_the_weight(capsys):
    assert main(["train", "--model", "linear_regression", "--log_every", "100", "--local"]) == 0
    out = capsys.readouterr().out
    weight = float(re.search(r"learned weight (-?\d+\.\d+)", out).group(1))
    assert weight == pytest.approx(3.0, abs=0.1)
    assert re.search(r"^test mse: \d+\.\d{4} \(200 examples\)$", out, re.M)


def test_epochs_set_the_number_of_steps(capsys):
    assert main(["train", "--model", "mnist_dnn", "--epochs", "0.5", "--batch_size", "100",
                 "--log_every", "1000", "--local"]) == 0
    out = capsys.readouterr().out
    # 1437 // 100 = 14 full batches per epoch; half an epoch is 7 steps
    assert "step 7/7 " in out and "trained 7 steps" in out


def test_training_resumes_from_the_latest_checkpoint(tmp_path, capsys):
    args = ["train", "--model", "mnist_dnn", "--checkpoint_dir", str(tmp_path), "--log_every", "5",
            "--checkpoint_every", "5", "--batch_size", "16", "--local"]
    assert main([*args, "--steps", "10"]) == 0
    capsys.readouterr()
    assert main([*args, "--steps", "15"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^restored .*model\.ckpt-10 \(step 10\)$", out, re.M)
    assert "step 5/15" not in out and "step 15/15" in out and "trained 5 steps" in out


@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "adam"])
def test_each_optimizer_trains_in_nchw(optimizer, capsys):
    assert main(["train", "--model", "deep_mnist", "--optimizer", optimizer, "--steps", "2",
                 "--batch_size", "8", "--data_format", "NCHW", "--learning_rate", "0.01", "--local"]) == 0
    out = capsys.readouterr().out
    assert f"{optimizer} lr 0.01, batch 8, 2 steps, NCHW" in out
    assert ACCURACY.search(out.splitlines()[-1])


@pytest.mark.parametrize("where", [["--local"], ["--workers", "1"]])
def test_ctrl_c_stops_training_cleanly(tmp_path, where):
    proc = subprocess.Popen(
        [sys.executable, "-m", "dflow", "train", "--model", "mnist_dnn", "--dataset", "digits",
         "--steps", "100000", "--log_every", "1", "--checkpoint_dir", str(tmp_path), *where],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().startswith("training mnist_dnn")
    line = proc.stdout.readline()
    if where != ["--local"]:
        assert line.startswith("cluster: 1 PS + 1 workers")
        line = proc.stdout.readline()
    assert line.startswith("step 1/"), line
    children = _children(proc.pid)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-3000:]
    assert "interrupted" in err and "Traceback" not in err
    time.sleep(1.0)
    assert [pid for pid in children if os.path.exists(f"/proc/{pid}")] == []  # the cluster is gone


def _children(pid: int) -> list[int]:
    """The worker processes ``pid`` started (and theirs): a cluster's nannies and workers."""
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            for child in map(int, f.read().split()):
                with open(f"/proc/{child}/cmdline") as cmdline:
                    if "spawn_main" in cmdline.read():  # not multiprocessing's resource tracker
                        found += [child, *_children(child)]
    return found


# ---- on a cluster (the default) ------------------------------------------------------------------
WORKER_LINE = re.compile(r"^worker (\d): (\d+) steps, last loss \d+\.\d{4}, "
                         r"staleness mean \d+\.\d\d max \d+$")


@pytest.mark.parametrize("mode, ps, sync", [
    ("parameter_server", 1, False), ("parameter_server", 1, True), ("allreduce", 0, True)])
def test_train_on_the_embedded_cluster(mode, ps, sync, capsys):
    args = ["train", "--model", "mnist_dnn", "--steps", "20", "--log_every", "10", "--batch_size", "32",
            "--variable_update", mode, "--ps", str(ps)]
    assert main(args + (["--sync"] if sync and mode == "parameter_server" else [])) == 0
    lines = capsys.readouterr().out.splitlines()
    mode_said = {(1, False): "asynchronous updates (the default; --sync for synchronous, parameter_server)",
                 (1, True): "synchronous updates (--sync, parameter_server)",
                 (0, True): "synchronous updates (allreduce always is)"}[ps, sync]
    assert lines[0].startswith("training mnist_dnn on digits") and lines[0].endswith(f"; {mode_said}")
    roles = "['ps/0', 'worker/0', 'worker/1']" if ps else "['worker/0', 'worker/1']"
    assert lines[1].startswith(f"cluster: {ps} PS + 2 workers, {mode}, "
                               f"{'synchronous' if sync else 'asynchronous'} updates; roles {roles}; "
                               "dashboard http")
    progress = [PROGRESS.match(line) for line in lines if line.startswith("step ")]
    assert all(progress) and progress[-1].group(1, 2) == ("20", "20")
    workers = [WORKER_LINE.match(line) for line in lines if line.startswith("worker ")]
    assert [m.group(1) for m in workers] == ["0", "1"]
    steps = [int(m.group(2)) for m in workers]
    assert steps == [20, 20] if sync else sum(steps) >= 20
    accuracy = ACCURACY.match(lines[-1])
    assert accuracy and float(accuracy.group(1)) > 0.3


def test_a_variable_update_the_cluster_cannot_hold_is_refused_before_it_starts(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--model", "mnist_dnn", "--variable_update", "parameter_server", "--ps", "0"])
    assert "keeps variables on PS tasks, but the cluster has none" in capsys.readouterr().err


def test_cluster_training_resumes_from_the_chiefs_checkpoint(tmp_path, capsys):
    args = ["train", "--model", "mnist_dnn", "--checkpoint_dir", str(tmp_path / "new"), "--log_every", "2",
            "--checkpoint_every", "2", "--batch_size", "16", "--workers", "1"]
    assert main([*args, "--steps", "6"]) == 0  # the chief makes the directory, as TF's hook does
    capsys.readouterr()
    assert main([*args, "--steps", "10"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^restored .*model\.ckpt-6 \(step 6\)$", out, re.M)
    assert "step 2/10" not in out and "step 10/10" in out
    assert re.search(r"^worker 0: 4 steps", out, re.M)


def test_local_takes_no_cluster_options(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--model", "mnist_dnn", "--local", "--sync"])
    assert exit_.value.code == 2
    assert "--local trains in this process" in capsys.readouterr().err


@pytest.mark.slow
def test_workers_started_by_hand_join_a_scheduler(tmp_path):
    """`dflow worker` gives each process its role; `dflow train --cluster` trains on them."""
    scheduler_file = tmp_path / "scheduler.json"
    processes = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--port", "0",
                                   "--no-dashboard", "--scheduler-file", str(scheduler_file)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        deadline = time.monotonic() + 30
        while not scheduler_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        address = json.loads(scheduler_file.read_text())["address"]
        for job, task in [("ps", 0), ("worker", 0)]:
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "dflow", "worker", "--scheduler", address, "--job", job,
                 "--task", str(task)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        with tf.cluster.connect(address, roles=["ps/0", "worker/0"], timeout=60) as cluster:
            assert cluster.spec.as_dict() == {"ps": [cluster.spec.task_address("ps", 0)],
                                              "worker": [cluster.spec.task_address("worker", 0)]}
        taken = dflow("worker", "--scheduler", address, "--job", "worker", "--task", "0")
        assert taken.returncode == 1
        assert "role worker/0 is already held by the worker at tcp://" in taken.stderr
        assert "the cluster's roles are ps/0, worker/0: choose a free --task" in taken.stderr
        result = dflow("train", "--model", "mnist_dnn", "--steps", "10", "--log_every", "5",
                       "--cluster", address)
        assert result.returncode == 0, result.stderr
        assert "cluster: 1 PS + 1 workers" in result.stdout and ACCURACY.match(result.stdout.splitlines()[-1])
        with tf.cluster.connect(address) as cluster:  # the workers outlive the training client
            assert cluster.spec.roles() == ["ps/0", "worker/0"]
    finally:
        for process in reversed(processes):
            process.terminate()
            process.wait(timeout=30)
