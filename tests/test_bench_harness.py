"""``dflow bench --model ...`` (dflow.bench.harness): tf_cnn_benchmarks' numbers, the record, the
trace, the flags; the slow tests run the harness on a real 1 PS + 2 workers cluster, tiny."""

import json
import math
import re

import numpy as np
import pytest

from dflow.bench import harness
from dflow.bench.harness import (
    RECORD_KEYS,
    SettingsError,
    images_per_sec_stats,
    resolve_settings,
    run_benchmark,
    speed_stats,
)
from dflow.bench.trace import TraceEvent, check_chrome_trace, chrome_trace, role, timeline_events
from dflow.cli import main

# mnist_dnn: 784-512-512-10, float32
MNIST_DNN_PARAM_BYTES = 4 * (784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10)
TINY = {"model": "mnist_dnn", "batch_size": 8, "num_ps": 1, "num_workers": 2, "num_warmup_batches": 2,
        "num_batches": 5, "repeats": 2}
PERF_LINE = re.compile(r"^(\d+)\timages/sec: (\d+\.\d) \+/- (\d+\.\d) \(jitter = (\d+\.\d)\)\t")


# ---- tf_cnn_benchmarks' numbers ----------------------------------------------------------------------
def test_speed_stats_is_tf_cnn_benchmarks_get_perf_timing():
    times = [0.10, 0.12, 0.11, 0.20, 0.10]
    speeds = 64 / np.array(times)
    mean, uncertainty, jitter = speed_stats(64, times)
    assert mean == pytest.approx(64 / np.mean(times))  # images over the mean time, not the mean speed
    assert uncertainty == pytest.approx(np.std(speeds) / math.sqrt(5))
    assert jitter == pytest.approx(1.4826 * np.median(np.abs(speeds - np.median(speeds))))


def test_synchronous_rate_is_worker_0s_global_images_asynchronous_rates_add_up():
    sync = {0: (16, [0.1, 0.1]), 1: (16, [0.5, 0.5])}  # worker 1's times do not count
    assert images_per_sec_stats(sync, batch_size=8, devices=2)[0] == pytest.approx(160)
    independent = {0: (8, [0.1, 0.1]), 1: (8, [0.2, 0.2])}
    assert images_per_sec_stats(independent, batch_size=8, devices=2)[0] == pytest.approx(80 + 40)


# ---- settings --------------------------------------------------------------------------------------
def test_settings_are_completed_with_the_defaults_and_the_models_batch():
    settings = resolve_settings({"model": "deep_mnist"})
    assert set(settings) == set(harness.DEFAULT_SETTINGS)
    assert settings["batch_size"] == 50 and settings["repeats"] == 5 and settings["num_batches"] == 100


@pytest.mark.parametrize("settings, message", [
    ({"model": "resnet"}, "unknown model 'resnet'; choose one of cifar10, .*, resnet50"),
    ({"model": "vgg16"}, "unknown model 'vgg16'; choose one of cifar10, deep_mnist, mnist_dnn"),
    ({"variable_update": "allreduce", "sync": False, "num_ps": 0}, "allreduce is synchronous.*drop --async"),
    ({"variable_update": "replicated", "sync": False, "num_ps": 0}, "replicated is synchronous"),
    ({"num_ps": 0}, "parameter_server keeps variables on PS tasks"),
    ({"num_workers": 0}, "num_workers must be an integer of at least 1, got 0"),
    ({"cluster": "kubernetes"}, "cluster must be local, cuda, slurm or a Dask scheduler's address"),
    ({"network": "1gbit", "cluster": "slurm"}, "needs cluster local"),
    ({"data_dir": "/no/such/store"}, "is not a store: prepare one with `dflow data prepare"),
    ({"batch": 8}, "unknown setting.*batch;"),
])
def test_settings_that_cannot_run_say_why(settings, message):
    with pytest.raises(SettingsError, match=message):
        resolve_settings(settings)


@pytest.mark.parametrize("argv, message", [
    (["--model", "nope"], "unknown model 'nope'"),
    (["--model", "mnist_dnn", "--variable_update", "allreduce", "--async", "--num_ps", "0"],
     "allreduce is synchronous"),
    (["--local", "--model", "cifar10"], "--local and --distributed are fixed benchmarks; --model"),
    (["--variable_update", "ring"], "invalid choice: 'ring'"),
])
def test_bad_flags_are_one_clear_error(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", *argv])
    assert exit_.value.code == 2
    assert re.search(message, capsys.readouterr().err)


def test_the_fixed_benchmarks_and_the_sub_commands_still_parse():
    from dflow.cli import _parser

    parser = _parser()
    local = parser.parse_args(["bench", "--local", "--batch_sizes", "1,10", "--no_torch"])
    assert local.local and local.batch_sizes == [1, 10] and local.bench_command is None
    assert parser.parse_args(["bench", "--distributed", "--input", "dataset"]).distributed
    sweep = parser.parse_args(["bench", "sweep", "tiny", "--output_dir", "out"])
    assert sweep.bench_command == "sweep" and sweep.preset == "tiny"
    assert parser.parse_args(["bench", "advise", "--step_time", "0.1"]).bench_command == "advise"


# ---- the trace -------------------------------------------------------------------------------------
def test_trace_has_a_process_per_task_a_thread_per_activity_and_overlaps_in_lanes():
    timeline = [("/job:worker/task:0", "compute", 1.0, 1.2), ("/job:worker/task:0", "wait", 1.2, 1.3),
                ("/job:ps/task:0", "compute", 1.25, 1.26),
                ("/job:worker/task:0", "collective a", 1.1, 1.3),
                ("/job:worker/task:0", "collective b", 1.15, 1.2)]
    events = [TraceEvent("worker/0", "waiting for data", "data", 0.9, 1.0),
              *timeline_events(timeline, "worker/0", has_ps=True)]
    trace = json.loads(json.dumps(chrome_trace(events)))
    check_chrome_trace(trace)
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M"
             and e["name"] in ("process_name", "thread_name")}
    threads = {(names[(e["pid"], 0)], names[(e["pid"], e["tid"])]) for e in trace["traceEvents"]
               if e["ph"] == "X"}
    worker_threads = {"waiting for data", "compute", "waiting for PS", "send/recv", "send/recv #2"}
    assert threads == {("worker/0", t) for t in worker_threads} | {("ps/0", "compute (for worker/0)")}
    assert min(e["ts"] for e in trace["traceEvents"] if e["ph"] == "X") == 0
    assert role("/job:worker/task:12") == "worker/12"


def test_check_chrome_trace_names_what_is_wrong():
    with pytest.raises(ValueError, match="'traceEvents' list"):
        check_chrome_trace({"events": []})
    with pytest.raises(ValueError, match="negative time"):
        check_chrome_trace({"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 0,
                                             "dur": -1}]})


# ---- a real cluster ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def async_run(tmp_path_factory):
    """One asynchronous parameter_server run: its record, its printed lines, its trace."""
    trace = tmp_path_factory.mktemp("trace") / "trace.json"
    lines = []
    record = run_benchmark({**TINY, "sync": False}, echo=lines.append, trace=str(trace), progress=None)
    return record, lines, json.loads(trace.read_text())


@pytest.mark.slow
def test_the_record_has_every_key_and_sane_values(async_run):
    record, _, _ = async_run
    assert set(RECORD_KEYS) <= set(record)
    settings = record["settings"]
    assert {k: settings[k] for k in TINY} == TINY and settings["sync"] is False
    assert len(record["images_per_sec"]) == 2 and all(x > 0 for x in record["images_per_sec"])
    assert record["images_per_sec_mean"] == pytest.approx(np.mean(record["images_per_sec"]))
    assert record["images_per_sec_std"] >= 0
    assert [len(times) for times in record["step_times_s"]] == [5, 5]
    assert record["data_wait_s_per_step"] >= 0 and record["compute_s_per_step"] > 0
    assert record["communication_s_per_step"] >= 0
    # the timed steps' wall time, averaged over the repeats: their step times and the gaps between
    assert record["time_to_steps_s"] >= 0.99 * np.mean([sum(times) for times in record["step_times_s"]])
    assert record["accuracy"] is None and record["scaled_down"] is None and record["preset"] is None
    for key in ("cpu", "cores", "python", "dflow", "numpy", "dask", "distributed", "zarr"):
        assert record["machine"][key]
    json.dumps(record)  # one JSON line


@pytest.mark.slow
def test_each_worker_reads_and_sends_exactly_the_parameters(async_run):
    record, _, _ = async_run
    assert record["param_bytes"] == MNIST_DNN_PARAM_BYTES
    for worker in ("worker/0", "worker/1"):
        assert record["bytes_per_step"][f"{worker}->ps/0"] == MNIST_DNN_PARAM_BYTES  # the gradients
        # the variable reads, and the global step that MonitoredTrainingSession fetches with each step
        assert record["bytes_per_step"][f"ps/0->{worker}"] == MNIST_DNN_PARAM_BYTES + 8


@pytest.mark.slow
def test_it_prints_the_header_tf_cnn_benchmarks_lines_and_totals(async_run):
    _, lines, _ = async_run
    text = "\n".join(lines)
    assert "Model:       mnist_dnn" in text and "Dataset:     synthetic" in text
    assert "Batch size:  8 global" in text and "parameter_server (async)" in text
    steps = [int(m.group(1)) for m in map(PERF_LINE.match, lines) if m]
    assert steps == [5, 5]  # the last step of each repeat (every 10 steps otherwise)
    assert len([line for line in lines if line.startswith("total images/sec: ")]) == 1


@pytest.mark.slow
def test_the_trace_of_the_last_repeat_opens_in_a_viewer(async_run):
    _, _, trace = async_run
    check_chrome_trace(trace)
    processes = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert processes == {"worker/0", "worker/1", "ps/0"}
    steps = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == "step"]
    assert len(steps) == 2 * 5
    computes = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == "compute"]
    assert computes and all(e["dur"] >= 0 for e in computes)


@pytest.mark.slow
def test_dflow_bench_appends_a_json_line_per_run(tmp_path, capsys):
    output = tmp_path / "results.jsonl"
    output.write_text(json.dumps({"earlier": "run"}) + "\n")
    argv = ["bench", "--model", "mnist_dnn", "--batch_size", "8", "--num_workers", "2", "--num_ps", "1",
            "--num_warmup_batches", "1", "--num_batches", "10", "--repeats", "1", "--output", str(output)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert re.search(r"^10\timages/sec: \d+\.\d \+/- \d+\.\d \(jitter = \d+\.\d\)\t", out, re.M)
    assert re.search(r"^total images/sec: \d+\.\d", out, re.M)
    earlier, record = [json.loads(line) for line in output.read_text().splitlines()]
    assert earlier == {"earlier": "run"} and record["settings"]["sync"] is True
    assert "parameter_server (sync)" in out and "Batch size:  16 global" in out
    # synchronous: the gradients go to the accumulators, with the step they were computed at
    assert 0 <= record["bytes_per_step"]["worker/1->ps/0"] - MNIST_DNN_PARAM_BYTES <= 64


@pytest.mark.slow
def test_allreduce_sends_the_gradients_between_the_workers_and_no_ps():
    lines = []
    record = run_benchmark({**TINY, "num_ps": 0, "variable_update": "allreduce", "repeats": 1},
                           echo=lines.append, progress=None)
    assert "Batch size:  16 global" in lines and record["images_per_sec_mean"] > 0
    # a ring over 2 workers: each sends 2 (n - 1) / n = 1 x the gradients' bytes, to the other
    assert record["bytes_per_step"] == {"worker/0->worker/1": MNIST_DNN_PARAM_BYTES,
                                        "worker/1->worker/0": MNIST_DNN_PARAM_BYTES}


@pytest.mark.slow
def test_real_data_streams_from_a_store_and_the_chief_evaluates(tmp_path):
    from dflow.data import prepare

    store = prepare("synthetic", out=str(tmp_path / "digits.zarr"), echo=None, image_shape=(28, 28, 1),
                    train_count=1000, test_count=100)
    lines = []
    record = run_benchmark({"model": "deep_mnist", "batch_size": 8, "num_workers": 1, "data_dir": store,
                            "num_warmup_batches": 1, "num_batches": 5, "repeats": 1, "eval_accuracy": True},
                           echo=lines.append, progress=None)
    assert f"Dataset:     real: {store}" in lines
    assert record["settings"]["data_dir"] == store and record["data_wait_s_per_step"] >= 0
    assert 0 <= record["accuracy"] <= 1


@pytest.mark.slow
def test_resnet50_runs_at_full_size_with_its_batch_norm_updates():
    record = run_benchmark({"model": "resnet50", "batch_size": 1, "num_workers": 1, "data_format": "NCHW",
                            "num_warmup_batches": 1, "num_batches": 2, "repeats": 1},
                           echo=lambda line: None, progress=None)
    parameters = 4 * 25_557_032  # float32, as tests/test_model_resnet.py counts them
    assert record["param_bytes"] == parameters and record["images_per_sec_mean"] > 0
    # the worker reads every weight and sends every gradient, plus the batch norms' statistics
    # (2 x 26,560 channels: read for the moving averages, sent to update them)
    assert parameters < record["bytes_per_step"]["worker/0->ps/0"] < parameters + 4 * 2 * 26_560 + 4096
    assert parameters < record["bytes_per_step"]["ps/0->worker/0"] < parameters + 4 * 2 * 26_560 + 4096


def test_a_cuda_point_starts_as_many_gpu_workers_as_it_names(monkeypatch):
    """A sweep over worker counts on one GPU box: each point its own number of GPUs, not every
    GPU each time."""
    import dflow as tf

    started = []
    monkeypatch.setattr(tf.cluster, "cuda", lambda **options: started.append(options))
    harness._start_cluster(resolve_settings({"model": "cifar10", "cluster": "cuda", "num_workers": 2,
                                             "devices_per_node": 2, "num_ps": 1}))
    assert started == [{"ps": 1, "workers": 4}]
