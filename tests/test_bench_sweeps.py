"""Sweeps, tables, plots and advice over hand-written records (no cluster runs here).

The driver tests run sweeps through ``deterministic_run``, a stand-in for the harness
that computes each record from the analytic model in ``dflow.bench.advise``: they test
the driver's bookkeeping (resume, scale-down, failures, reports), not dflow's speed.
"""

from __future__ import annotations

import argparse
import json
import sys

import pytest

from dflow.bench import advise, report, sweeps
from dflow.bench.report import Figure

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
VARIABLE_UPDATES = {"parameter_server", "replicated", "distributed_replicated", "allreduce", "independent"}


def record(ips: float, std: float = 0.0, **settings) -> dict:
    """A harness record with only what the report reads, on top of the default settings."""
    return {"settings": {**sweeps.DEFAULT_SETTINGS, **settings}, "images_per_sec": [ips],
            "images_per_sec_mean": ips, "images_per_sec_std": std, "param_bytes": 1_000_000}


def deterministic_run(settings: dict, echo=None) -> dict:
    """Records from the analytic model: 0.1 ms per image of compute, 1 MB of variables."""
    bandwidth = advise.NETWORK_BYTES_PER_SEC.get(settings["network"], 1e9)
    update = settings["variable_update"]
    workers = settings["num_workers"] * settings["devices_per_node"]
    if update in ("parameter_server", "distributed_replicated", "allreduce"):
        ips = advise.predict(1e-4 * settings["batch_size"], 1_000_000, bandwidth, settings["batch_size"],
                             settings["num_workers"], max(1, settings["num_ps"]), update,
                             devices_per_node=settings["devices_per_node"]).images_per_sec
    else:  # one device alone, or in-graph replicas that never wait
        ips = 1e4 * workers
    result = record(ips, **settings)
    result.update(compute_s_per_step=1e-4 * settings["batch_size"], accuracy=None, time_to_steps_s=None)
    return result


def quiet(_line: str) -> None:
    pass


# ---- derived numbers and tables ----------------------------------------------------------------
def test_scaling_and_io_overhead_follow_the_papers_formulas():
    assert report.scaling_efficiency(1018.18, 8, 138.23) == pytest.approx(0.9207, abs=1e-4)
    assert report.io_overhead_percent(1018.18, 911.84) == pytest.approx(10.444, abs=1e-3)
    assert report.speedup(300.0, 100.0) == 3.0


def test_rows_keep_the_best_ps_count_and_derive_efficiency_and_io_overhead():
    records = [record(100, num_workers=1, num_ps=1),
               record(150, num_workers=2, num_ps=1), record(180, num_workers=2, num_ps=2),
               record(90, num_workers=1, num_ps=1, data_dir="cifar.zarr"),
               record(171, num_workers=2, num_ps=2, data_dir="cifar.zarr")]
    figure = Figure(x="num_workers", series=("data",), best_of=("num_ps",),
                    derived=("speedup", "scaling_efficiency", "io_overhead_percent"))
    table = report.rows(records, figure)
    best = {(r["data"], r["num_workers"]): r for r in table}
    assert len(table) == 4
    assert best[("synthetic", 2)]["num_ps"] == 2 and best[("synthetic", 2)]["ps_tried"] == "1, 2"
    assert best[("synthetic", 2)]["scaling_efficiency"] == pytest.approx(180 / (2 * 100))
    assert best[("real", 2)]["speedup"] == pytest.approx(171 / 90)
    assert best[("real", 2)]["io_overhead_percent"] == pytest.approx((180 - 171) / 180 * 100)
    assert best[("synthetic", 1)]["io_overhead_percent"] is None


def test_markdown_table_has_the_papers_columns():
    table = report.rows([record(100.0, num_workers=1), record(190.0, num_workers=2)],
                        Figure(x="num_workers", derived=("speedup", "scaling_efficiency")))
    text = report.markdown_table(table, ["num_workers", "images_per_sec", "speedup", "scaling_efficiency"])
    lines = text.splitlines()
    assert lines[0] == "| workers | images/sec | speedup | scaling efficiency |"
    assert lines[-1] == "| 2 | 190.0 | 1.90 | 95.0% |"


def test_time_to_steps_comes_from_steps_per_sec_when_a_target_is_named():
    table = report.rows([record(500.0, batch_size=50, num_workers=1)],
                        Figure(x="num_workers", target_steps=10_000))
    assert table[0]["steps_per_sec"] == 10.0 and table[0]["time_to_steps_s"] == 1000.0


def test_load_records_skips_a_torn_last_line_only(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps(record(1.0)) + "\n" + '{"settings": {"mo')
    assert len(report.load_records(str(path))) == 1
    path.write_text('{"torn\n' + json.dumps(record(1.0)) + "\n")
    with pytest.raises(ValueError, match="s.jsonl:1"):
        report.load_records(str(path))
    assert report.load_records(str(tmp_path / "missing.jsonl")) == []


# ---- plots -------------------------------------------------------------------------------------
def test_plot_writes_png_and_svg_that_open(tmp_path):
    image = pytest.importorskip("matplotlib.image")
    records = [record(100.0 * n * (0.9 if b == 200 else 1), num_workers=n, batch_size=b, network=net)
               for n in (1, 2, 4) for b in (100, 200) for net in ("1gbit", "10gbit")]
    figure = Figure(x="num_workers", ys=("images_per_sec", "speedup"), series=("batch_size",),
                    panels=("network",), ideal=True)
    files = [str(tmp_path / "f.png"), str(tmp_path / "f.svg")]
    paths = report.plot(report.rows(records, figure), figure, files)
    assert (tmp_path / "f.png").read_bytes()[:8] == PNG_SIGNATURE
    pixels = image.imread(paths[0])
    assert pixels.ndim == 3 and pixels.shape[0] > 200 and pixels.shape[1] > 400
    assert (tmp_path / "f.svg").read_text().lstrip().startswith("<?xml")


def test_plot_without_matplotlib_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    with pytest.raises(ImportError, match=r"pip install dflow\[plot\]"):
        report.plot([], Figure(x="num_workers"), [str(tmp_path / "f.png")])


# ---- presets and the scale-down rule ------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(sweeps.PRESETS))
def test_every_preset_grid_is_well_formed(name):
    preset = sweeps.PRESETS[name]
    points = sweeps.grid_points(preset, {"data_dir": "store.zarr"})
    keys = [json.dumps(p, sort_keys=True) for p in points]
    assert points and len(set(keys)) == len(keys), "grid points must be distinct"
    for point in points:
        assert set(sweeps.DEFAULT_SETTINGS) <= set(point)
        assert point["variable_update"] in VARIABLE_UPDATES
        assert point["num_workers"] >= 1 and point["batch_size"] >= 1 and point["devices_per_node"] >= 1
        needs_ps = point["variable_update"] in ("parameter_server", "distributed_replicated")
        assert (point["num_ps"] >= 1) == needs_ps, point
        assert point["network"] in ("none", "1gbit", "10gbit")
    figure = preset.figure
    table = report.rows([deterministic_run(p) for p in points], figure)
    for key in (figure.x, *figure.series, *figure.panels):
        assert all(key in row for row in table), f"{name}: {key} is not a table column"
    assert preset.paper and preset.description


def test_ps_sweep_tries_every_ps_count_up_to_the_workers():
    points = sweeps.grid_points(sweeps.PRESETS["bugliarello2017-ps-sweep"])
    for workers in (1, 2, 4, 8):
        tried = {p["num_ps"] for p in points if p["num_workers"] == workers}
        assert tried == set(range(1, workers + 1))


def test_small_machine_caps_workers_steps_and_repeats_and_says_so():
    preset = sweeps.PRESETS["wang2017-multinode"]
    points, note = sweeps.scale_down(preset, cores=2, gpus=0)
    assert {p["num_workers"] for p in points} == {1, 2}
    assert all(p["num_batches"] <= 20 and p["num_warmup_batches"] <= 3 and p["repeats"] <= 2 for p in points)
    assert "2 cores" in note and "left out: 3, 4, 8" in note and "--full" in note


def test_full_grid_runs_unchanged_on_a_big_machine_or_with_full():
    preset = sweeps.PRESETS["wang2017-multinode"]
    assert sweeps.scale_down(preset, cores=64, gpus=0) == (sweeps.grid_points(preset), None)
    assert sweeps.scale_down(preset, cores=2, gpus=0, full=True) == (sweeps.grid_points(preset), None)


def test_a_small_machine_runs_the_stand_in_model_and_says_so():
    preset = sweeps.PRESETS["bugliarello2017-ps-sweep"]
    assert {p["model"] for p in sweeps.grid_points(preset)} == {"inception3"}  # the paper's
    points, note = sweeps.scale_down(preset, cores=2, gpus=0)
    assert {p["model"] for p in points} == {"cifar10"} and "model cifar10 instead of inception3" in note
    points, note = sweeps.scale_down(preset, cores=2, gpus=0, settings={"model": "resnet50"})
    assert {p["model"] for p in points} == {"resnet50"} and "instead of" not in note  # the user's choice
    assert {p["model"] for p in sweeps.scale_down(preset, cores=2, gpus=0, full=True)[0]} == {"inception3"}


def test_cuda_sweeps_count_gpus_not_cores():
    preset = sweeps.PRESETS["wang2017-ingraph"]
    points, note = sweeps.scale_down(preset, cores=64, gpus=2, settings={"cluster": "cuda"})
    assert {p["devices_per_node"] for p in points} == {1, 2} and "2 GPUs" in note
    assert sweeps.scale_down(preset, cores=2, gpus=4, settings={"cluster": "cuda"})[1] is None


# ---- the driver --------------------------------------------------------------------------------
def test_sweep_writes_records_table_and_plots(tmp_path):
    pytest.importorskip("matplotlib")
    result = sweeps.run_sweep("wang2017-multinode", str(tmp_path), run=deterministic_run, echo=quiet,
                              machine=(2, 0))
    assert len(result.records) == 24 and not result.failures
    stored = report.load_records(str(tmp_path / "wang2017-multinode.jsonl"))
    assert [r["settings"] for r in stored] == [r["settings"] for r in result.records]
    assert all(r["preset"] == "wang2017-multinode" and r["scaled_down"] == result.scaled_down for r in stored)
    text = (tmp_path / "wang2017-multinode.md").read_text()
    assert "| network | batch/device | PS | workers | images/sec |" in text
    assert "Note: scaled down" in text
    assert (tmp_path / "wang2017-multinode.png").read_bytes()[:8] == PNG_SIGNATURE
    assert (tmp_path / "wang2017-multinode.svg").exists()


def test_sweep_resumes_after_an_interruption(tmp_path):
    calls = []

    def interrupted_at_third(settings, echo=None):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(settings)
        return deterministic_run(settings)

    with pytest.raises(KeyboardInterrupt):
        sweeps.run_sweep("gagliano2018-cpu", str(tmp_path), run=interrupted_at_third, echo=quiet,
                         machine=(8, 0))
    assert len(report.load_records(str(tmp_path / "gagliano2018-cpu.jsonl"))) == 2
    assert (tmp_path / "gagliano2018-cpu.md").exists()  # the report of what ran so far

    resumed = []

    def counting(settings, echo=None):
        resumed.append(settings["num_workers"])
        return deterministic_run(settings)

    result = sweeps.run_sweep("gagliano2018-cpu", str(tmp_path), run=counting, echo=quiet, machine=(8, 0))
    assert resumed == [3, 4, 5] and len(result.records) == 5
    again = sweeps.run_sweep("gagliano2018-cpu", str(tmp_path), run=counting, echo=quiet, machine=(8, 0))
    assert resumed == [3, 4, 5] and len(again.records) == 5


def test_a_failed_point_is_reported_and_retried_on_the_next_run(tmp_path):
    def no_second_worker(settings, echo=None):
        if settings["num_workers"] == 2:
            raise RuntimeError("no root: cannot shape the network")
        return deterministic_run(settings)

    result = sweeps.run_sweep("tiny", str(tmp_path), run=no_second_worker, echo=quiet, machine=(2, 0))
    assert len(result.records) == 1 and "no root" in result.failures[0][1]
    result = sweeps.run_sweep("tiny", str(tmp_path), run=deterministic_run, echo=quiet, machine=(2, 0))
    assert len(result.records) == 2 and not result.failures


def test_a_sweep_on_a_store_named_by_its_name_resumes(tmp_path, monkeypatch):
    # the harness records data_dir NAME as the store's path, datasets/NAME.zarr
    from dflow.bench.harness import resolve_settings

    monkeypatch.chdir(tmp_path)
    (tmp_path / "datasets" / "mnist.zarr").mkdir(parents=True)
    calls = []

    def as_the_harness_records(settings, echo=None):
        calls.append(settings["num_workers"])
        return {**deterministic_run(settings), "settings": resolve_settings(settings)}

    for _ in range(2):
        sweeps.run_sweep("tiny", "out", run=as_the_harness_records, echo=quiet, machine=(2, 0),
                         settings={"data_dir": "mnist"})
    assert calls == [1, 2]


def test_sweep_command_line_rewrites_the_report(tmp_path):
    sweeps.run_sweep("tiny", str(tmp_path), run=deterministic_run, echo=quiet, machine=(2, 0))
    (tmp_path / "tiny.md").unlink()
    parser = argparse.ArgumentParser()
    sweeps.add_arguments(parser)
    args = parser.parse_args(["tiny", "--output_dir", str(tmp_path), "--report_only"])
    assert sweeps.main(args, echo=quiet) == 0
    assert "| model | workers | images/sec |" in (tmp_path / "tiny.md").read_text()


# ---- advice ------------------------------------------------------------------------------------
def test_predict_ps_distributed_replicated_and_allreduce_traffic():
    common = dict(step_time_s=0.1, variable_bytes=1_000_000, bandwidth=1e6, batch_size=10, latency_s=0.0)
    ps = advise.predict(**common, num_workers=8, num_ps=2, devices_per_node=2)
    assert ps.busiest_link_bytes == 1e6 * 16 / 2  # per device, each way at once, shared by 2 PS
    replicated = advise.predict(**common, num_workers=8, num_ps=2, devices_per_node=2,
                                variable_update="distributed_replicated")
    assert replicated.busiest_link_bytes == 1e6 * 8 / 2  # per node
    ring = advise.predict(**common, num_workers=4, variable_update="allreduce")
    assert ring.busiest_link_bytes == 2 * 3 / 4 * 1e6 and ring.num_ps == 0
    assert ring.images_per_sec == pytest.approx(40 / (0.1 + 1.5))


def test_a_ps_link_carries_reads_and_gradients_at_once_a_worker_link_in_turn():
    common = dict(step_time_s=0.0, variable_bytes=1_000_000, bandwidth=1e6, batch_size=10, latency_s=0.0)
    alone = advise.predict(**common, num_workers=1)
    assert alone.communication_s == pytest.approx(2.0)  # its reads, then its gradients
    two = advise.predict(**common, num_workers=2)
    assert two.communication_s == pytest.approx(2.0)  # the PS: 2 MB out while 2 MB come in
    four = advise.predict(**common, num_workers=4)
    assert four.communication_s == pytest.approx(4.0)  # the PS's link is the busier now


def test_devices_on_one_machine_share_its_cores():
    assert advise.core_sharing(1, cores=2) == 1.0 and advise.core_sharing(2, cores=2) == 2.0
    assert advise.core_sharing(4, cores=2) == 4.0 and advise.core_sharing(3, cores=8) == 4.0
    assert advise.core_sharing(4, cores=None) == 1.0
    common = dict(step_time_s=0.1, variable_bytes=0, bandwidth=1e6, batch_size=10, latency_s=0.0)
    assert advise.predict(**common, num_workers=2, cores=2).compute_s == pytest.approx(0.2)
    assert advise.predict(**common, num_workers=2).compute_s == pytest.approx(0.1)


def test_compare_slows_compute_by_the_cores_a_record_shared():
    def run(workers: int, compute: float, ips: float, cluster: str = "local") -> dict:
        result = record(ips, num_workers=workers, variable_update="independent", num_ps=0, cluster=cluster)
        return {**result, "compute_s_per_step": compute, "machine": {"cores": 2}}

    # one worker on both cores: 0.1 s a step; two get a core each and take 0.2 s
    rows = advise.compare([run(1, 0.1, 1000.0), run(2, 0.2, 1000.0)], bandwidth=1e9)
    assert rows[1]["predicted"] == pytest.approx(1000.0)
    # on a GPU cluster each device has its own: no slowdown
    rows = advise.compare([run(1, 0.1, 1000.0, "cuda"), run(2, 0.1, 2000.0, "cuda")], bandwidth=1e9)
    assert rows[1]["predicted"] == pytest.approx(2000.0)


def test_greedy_placement_balances_what_round_robin_does_not():
    sizes = [100, 1, 100, 1]
    assert advise.ps_loads(sizes, 2) == [200, 2]
    assert advise.ps_loads(sizes, 2, "greedy") == [101, 101]
    with pytest.raises(ValueError, match="num_ps"):
        advise.ps_loads(sizes, 0)


def test_a_total_of_variable_bytes_may_be_a_float():
    # what predict's own total accepts; ps_loads used to iterate over a float
    assert advise.ps_loads(4e6, 2) == [2e6, 2e6]
    assert advise.predict(0.1, 4e6, "1gbit", 100, num_workers=4, num_ps=2) == \
        advise.predict(0.1, 4_000_000, "1gbit", 100, num_workers=4, num_ps=2)


def test_advise_recommends_few_ps_when_one_variable_dominates():
    # one variable holds 90% of the bytes: past 2 PS, the one holding it stays the bottleneck
    advice = advise.advise(0.05, [9_000_000, 500_000, 500_000], "1gbit", 100, workers=[8])
    best = advice.recommended_ps[(8, "parameter_server")]
    assert best.num_ps == 2
    assert advice.recommended[8].variable_update == "allreduce"
    assert "<- best" in advise.format_advice(advice)


def test_compare_puts_prediction_beside_measurement():
    records = [deterministic_run({**sweeps.DEFAULT_SETTINGS, "num_workers": n, "network": "1gbit"})
               for n in (1, 2, 4)]
    records[2]["images_per_sec_mean"] *= 0.8  # the cluster did worse than the model says
    rows = advise.compare(records, engine="formula")  # the records were made by the formula
    assert [round(r["error_percent"], 6) for r in rows[:2]] == [0, 0]
    assert rows[2]["error_percent"] == pytest.approx(25.0)
    assert "mean absolute error: 8.3%" in advise.format_compare(rows)


def test_compare_needs_a_bandwidth_for_unshaped_links():
    records = [record(100.0, num_workers=1)]
    with pytest.raises(ValueError, match="--bandwidth"):
        advise.compare(records)
    records[0].update(bytes_per_step={"worker/0->ps/0": 500_000, "ps/0->worker/0": 500_000},
                      communication_s_per_step=0.001)
    assert advise.compare(records)[0]["predicted"] > 0


def test_parse_bandwidth_units():
    assert advise.parse_bandwidth("10gbit") == 1.25e9
    assert advise.parse_bandwidth("800MiB/s") == 800 * 2**20
    with pytest.raises(ValueError, match="1gbit"):
        advise.parse_bandwidth("fast")


def test_advise_command_line(tmp_path):
    lines = []
    parser = argparse.ArgumentParser()
    advise.add_arguments(parser)
    args = parser.parse_args(["--step_time", "0.1", "--param_bytes", "4000000", "--workers", "1,2"])
    assert advise.main(args, echo=lines.append) == 0
    assert "| workers | variable update |" in lines[0]
    assert advise.main(parser.parse_args([]), echo=lines.append) == 2
