"""The distributed benchmark's code path on a real LocalCluster, tiny: the result's shape and
the bytes each link carries, exactly. No timing is asserted (the timings are the benchmark's)."""

import argparse
import json

import pytest

from dflow.bench import distributed as bench

# the CIFAR-10 tutorial CNN's trainable parameters: conv1, conv2, local3, local4, softmax_linear
CIFAR10_PARAMETERS = (5 * 5 * 3 * 64 + 64) + (5 * 5 * 64 * 64 + 64) + (2304 * 384 + 384) \
    + (384 * 192 + 192) + (192 * 10 + 10)
PS0, W0, W1 = "/job:ps/task:0", "/job:worker/task:0", "/job:worker/task:1"


def _links(result) -> dict:
    return {(row["from"], row["to"]): row for row in result["links"]}


@pytest.mark.parametrize("input_mode", ["feed", "dataset"])
def test_cifar10_comparison_moves_exactly_the_parameters_each_way(input_mode):
    batch = 2
    result = bench.compare_cifar10(batch_size=batch, warmup=1, steps=3, block=2, input_mode=input_mode)

    assert result["parameter_bytes"] == 4 * CIFAR10_PARAMETERS == 4_273_192
    links = _links(result)
    assert links[(PS0, W0)]["bytes"] == result["parameter_bytes"]
    assert links[(PS0, W0)]["carries"] == "variable reads"
    assert links[(W0, PS0)]["bytes"] == result["parameter_bytes"]
    assert links[(W0, PS0)]["carries"] == "gradients" and links[(W0, PS0)]["x_params"] == 1.0
    assert bench.ps_traffic_waste(result["links"], result["parameter_bytes"], workers=1) == 0
    if input_mode == "feed":  # float32 images and int32 labels, nothing fetched back
        assert result["feed_bytes"] == batch * (24 * 24 * 3 * 4 + 4)
        assert set(links) == {(PS0, W0), (W0, PS0), ("client", W0)}
        assert links[("client", W0)]["bytes"] == result["feed_bytes"]
    else:  # the worker pulls its batches itself: the client sends nothing
        assert result["feed_bytes"] == 0 and set(links) == {(PS0, W0), (W0, PS0)}

    assert result["steps"] == 3
    for side in ("local", "distributed", "dask", "dask_pipelined"):
        assert len(result[side]["step_seconds"]) == 3
        assert result[side]["images_per_sec"] == pytest.approx(batch / result[side]["median_step_seconds"])
    assert result["ratio"] == pytest.approx(
        result["local"]["median_step_seconds"] / result["distributed"]["median_step_seconds"])
    # each turn's ratio: 2 steps, then 1 (the median of one step is that step)
    local, direct = result["local"]["step_seconds"], result["distributed"]["step_seconds"]
    assert result["ratio_by_turn"] == pytest.approx(
        [(local[0] + local[1]) / (direct[0] + direct[1]), local[2] / direct[2]])
    assert len(result["dask_ratio_by_turn"]) == 2
    assert result["dask_vs_direct"] == pytest.approx(
        result["distributed"]["median_step_seconds"] / result["dask"]["median_step_seconds"])
    assert result["pipelined_vs_direct"] == pytest.approx(
        result["distributed"]["median_step_seconds"] / result["dask_pipelined"]["median_step_seconds"])
    between = result["between_graph"]  # the same turns, run by a replica inside the worker
    assert len(between["step_seconds"]) == len(between["local"]["step_seconds"]) == 3
    assert between["ratio"] == pytest.approx(
        between["local"]["median_step_seconds"] / between["median_step_seconds"])
    assert len(between["ratio_by_turn"]) == 2
    assert set(result["compute_ms"]) == set(result["waited_ms"]) == {PS0, W0}
    assert result["blas_threads"]["cluster"].keys() == {"ps/0", "worker/0"}
    assert result["blas_threads"]["cluster"]["ps/0"] == 1
    assert "ApplyGradientDescent" in result["placement"]
    assert result["allocator_tuned"] is True  # glibc: the local session got the workers' settings
    json.dumps(result)  # results are written as JSON


def test_overhead_step_on_two_workers_reads_and_updates_once_per_worker():
    result = bench.measure_overhead(workers=2, warmup=1, steps=3)
    params = result["parameter_bytes"]
    assert params == 4 * 4  # one float32 variable of 4 elements
    links = _links(result)
    assert set(links) == {(PS0, W0), (PS0, W1), (W0, PS0), (W1, PS0)}
    assert all(row["bytes"] == params for row in links.values())
    assert bench.ps_traffic_waste(result["links"], params, workers=2) == 0
    assert len(result["step_seconds"]) == len(result["dask_step_seconds"]) == 3
    assert result["median_ms"] > 0 and result["dask_median_ms"] > 0
    json.dumps(result)


def test_the_printed_comparison_names_both_sessions_ratio_and_waste():
    row = {"from": PS0, "to": W0, "bytes": 16, "carries": "variable reads", "x_params": 1.0}
    back = {**row, "from": W0, "to": PS0, "carries": "gradients", "bytes": 20, "x_params": 1.25}
    result = {"input": "feed", "batch_size": 100, "steps": 10, "ratio": 0.9, "dask_ratio": 0.8,
              "ratio_by_turn": [0.87, 0.93], "dask_ratio_by_turn": [0.8],
              "dask_vs_direct": 0.89, "dask": {"median_step_seconds": 0.125, "images_per_sec": 800.0},
              "pipelined_ratio": 0.88, "pipelined_vs_direct": 0.97,
              "dask_pipelined": {"median_step_seconds": 0.114, "images_per_sec": 877.0},
              "blas_threads": {"local": 2, "cluster": {"ps/0": 1, "worker/0": 2}},
              "local": {"median_step_seconds": 0.1, "images_per_sec": 1000.0},
              "distributed": {"median_step_seconds": 0.111, "images_per_sec": 900.0},
              "between_graph": {"median_step_seconds": 0.104, "images_per_sec": 960.0, "ratio": 0.96,
                                "ratio_by_turn": [0.95, 0.97], "local": {"median_step_seconds": 0.1}},
              "compute_ms": {W0: 100.0}, "waited_ms": {W0: 5.0}, "not_computing_ms": 11.0,
              "parameter_bytes": 16, "links": [row, back]}
    lines = []
    bench._print_cifar10(result, warmup=5, block=10, echo=lines.append)
    text = "\n".join(lines)
    assert "local Session" in text and "1 PS + 1 worker, direct" in text and "0.90" in text
    assert "0.90  [0.87-0.93 over 2 turns]" in text and "0.80  [0.80-0.80 over 1 turns]" in text
    assert "1 PS + 1 worker, Dask" in text and "0.89 x the images/sec" in text
    assert "between-graph replica" in text and "0.96  [0.95-0.97 over 2 turns]" in text
    assert "2 steps in flight" in text and "0.97 x with 2 steps in flight" in text
    assert "4 bytes of waste" in text and "worker/0 2" in text


def test_bad_numbers_are_refused_by_name():
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    with pytest.raises(SystemExit, match="--batch_size must be at least 1, got 0"):
        bench.run(parser.parse_args(["--batch_size", "0"]))
    with pytest.raises(ValueError, match="input_mode must be one of"):
        bench.compare_cifar10(input_mode="disk")


@pytest.mark.slow
def test_main_runs_both_measurements_in_fresh_processes_and_writes_json(tmp_path, capsys):
    output = tmp_path / "bench.json"
    assert bench.main(["--batch_size", "2", "--num_warmup_batches", "1", "--num_batches", "2",
                       "--block_steps", "1", "--overhead_steps", "3", "--output", str(output),
                       "--peers"]) == 0
    printed = capsys.readouterr().out
    assert "1 PS + 1 worker" in printed and "per-step overhead, 1 PS + 2 workers" in printed
    written = json.loads(output.read_text())
    assert written.keys() == {"machine", "cifar10", "overhead", "tensorflow"}
    if written["tensorflow"] is None:  # --peers: TensorFlow's own cluster, where it is installed
        assert "TensorFlow is not installed" in printed
    else:
        assert written["tensorflow"]["distributed"]["ps"] == 1 and "1 PS + 1 worker, gRPC" in printed
    assert written["cifar10"]["parameter_bytes"] == 4_273_192
