"""``dflow bench sweep tiny`` end to end on the real harness (a real 1 PS + 1..2 workers cluster),
then ``dflow bench advise --sweep`` on what it wrote: the CI's run of the whole path (~10-20 s)."""

import json
from xml.etree import ElementTree

import pytest

from dflow.bench.advise import compare
from dflow.bench.harness import RECORD_KEYS
from dflow.cli import main

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def tiny_sweep(tmp_path_factory):
    """The tiny preset's files, written once by ``dflow bench sweep tiny`` for every test here."""
    out = tmp_path_factory.mktemp("sweep")
    status = main(["bench", "sweep", "tiny", "--output_dir", str(out)])
    return out, status


@pytest.mark.slow
def test_the_sweep_writes_a_record_per_point_with_every_key(tiny_sweep):
    out, status = tiny_sweep
    assert status == 0
    records = [json.loads(line) for line in (out / "tiny.jsonl").read_text().splitlines()]
    assert [r["settings"]["num_workers"] for r in records] == [1, 2]
    for r in records:
        assert set(RECORD_KEYS) <= set(r)
        assert r["preset"] == "tiny" and r["settings"]["model"] == "mnist_dnn"
        assert r["images_per_sec_mean"] > 0 and len(r["step_times_s"][0]) == 5
        assert r["param_bytes"] == 4 * (784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10)


@pytest.mark.slow
def test_the_table_has_a_row_per_worker_count(tiny_sweep):
    out, _ = tiny_sweep
    table = (out / "tiny.md").read_text()
    assert table.startswith("# tiny:")
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) == 3  # the header and one row per worker count
    assert "Machine:" in table


@pytest.mark.slow
def test_the_plots_open(tiny_sweep):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.image

    out, _ = tiny_sweep
    png = out / "tiny.png"
    assert png.read_bytes()[:8] == PNG_SIGNATURE
    pixels = matplotlib.image.imread(png)
    assert pixels.ndim == 3 and pixels.shape[0] > 100 and pixels.shape[1] > 100
    svg = ElementTree.parse(out / "tiny.svg").getroot()
    assert svg.tag.endswith("svg")


@pytest.mark.slow
def test_advise_puts_predicted_beside_measured(tiny_sweep, capsys):
    out, _ = tiny_sweep
    capsys.readouterr()
    assert main(["bench", "advise", "--sweep", str(out / "tiny.jsonl")]) == 0
    printed = capsys.readouterr().out
    lines = printed.splitlines()
    header = next(line for line in lines if "predicted" in line)
    assert "measured images/sec" in header and "error %" in header
    rows = [line for line in lines if line.startswith("| mnist_dnn ")]
    assert len(rows) == 2  # one per point, predicted beside measured
    assert "mean absolute error" in printed and "over 2 points" in printed


def test_advise_predicts_one_device_and_in_graph_sweeps_from_their_fewest_devices():
    def record(ips, update, devices, compute, **extra):
        settings = {"model": "cifar10", "batch_size": 100, "num_workers": 1, "num_ps": 0,
                    "devices_per_node": devices, "variable_update": update, "network": "none"}
        return {"settings": settings, "images_per_sec_mean": ips, "param_bytes": 4_000_000,
                "compute_s_per_step": compute, **extra}

    alone = compare([record(500.0, "independent", 1, 0.2)])  # no PS, no traffic: compute alone
    assert alone[0]["predicted"] == pytest.approx(500.0)
    two = {"worker/0->worker/1": 4_000_000, "worker/1->worker/0": 4_000_000}
    rows = compare([record(500.0, "replicated", 1, 0.2),
                    record(800.0, "replicated", 2, 0.2, bytes_per_step=two, communication_s_per_step=0.04)])
    # the 2-device point: the 1-device compute, a ring of 2 moving 4 MB at 8 MB / 40 ms, 2 messages
    assert rows[1]["predicted"] == pytest.approx(200 / (0.2 + 0.02 + 0.002))


def test_io_overhead_compares_the_best_on_real_data_with_the_best_on_synthetic():
    from dflow.bench import report, sweeps

    def record(ips, update, data_dir=None):
        settings = {**sweeps.DEFAULT_SETTINGS, "variable_update": update, "data_dir": data_dir}
        return {"settings": settings, "images_per_sec": [ips], "images_per_sec_mean": ips,
                "images_per_sec_std": 0.0}

    records = [record(500.0, "parameter_server"), record(400.0, "distributed_replicated"),
               record(300.0, "parameter_server", "store.zarr"),
               record(450.0, "distributed_replicated", "store.zarr")]
    figure = sweeps.PRESETS["bugliarello2017-ps-sweep"].figure
    real = next(r for r in report.rows(records, figure) if r["data"] == "real")
    assert real["variable_update"] == "distributed_replicated"  # each data's best, not the same setup
    assert real["io_overhead_percent"] == pytest.approx((500 - 450) / 500 * 100)
