"""``dflow bench simulate``: the event simulation against closed forms, its placement against
training's, the paper reproduction's fields, and a committed sweep point (docs/results)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import dflow as tf
from dflow.bench import advise, report
from dflow.bench.hardware import LOOPBACK, PRESETS
from dflow.bench.reproduce import reproduce
from dflow.bench.simulate import ModelPlan, model_plan, place_variables, simulate

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results"
# a link slow enough to dominate, a PS CPU fast enough not to, 1 ms per message
NODE = dataclasses.replace(LOOPBACK, nic_bytes_per_sec=1e8, ps_apply_bytes_per_sec=1e11, latency_s=1e-3,
                           bus_bytes_per_sec=1e12)


def test_one_ps_on_its_own_link_takes_the_closed_form():
    """N workers, one PS on a node of its own, one variable of B bytes, dflow's stages (no
    overlap), a PS whose CPU costs nothing: the PS link carries the N reads together, each at
    1/N of its rate (TCP's fair share), so all arrive after N read-times; the workers compute
    together and their N gradients come in together, N read-times later."""
    size, compute, n = 4_000_000, 0.1, 4
    node = dataclasses.replace(NODE, ps_apply_bytes_per_sec=1e18)
    plan = ModelPlan.uniform("one", [size], [1.0])
    result = simulate(plan, node, compute, 32, n, 1, colocate_ps=False, overlap=False)
    link = size / NODE.nic_bytes_per_sec
    # N reads, compute, N gradients; a latency per message and the barrier
    expected = n * link + compute + n * link + 3 * NODE.latency_s
    assert result.step_s == pytest.approx(expected, rel=1e-9)
    assert result.images_per_sec == pytest.approx(n * 32 / expected)
    assert result.busiest_nic_bytes_per_step == pytest.approx(n * size)
    assert result.bottleneck.startswith("node 4 NIC")  # the PS's node, after the 4 workers'


def test_messages_share_a_nic_as_tcp_flows_do():
    """A message entering a busy link slows the one already there to half its rate; the
    shorter leaves first and the other then has the link to itself."""
    from dflow.bench.simulate import _Events, _Network

    events = _Events()
    net = _Network(3, dataclasses.replace(NODE, latency_s=0.0), events)
    link = 1_000_000 / NODE.nic_bytes_per_sec
    arrivals = {}
    net.send(0.0, 0, 1, 2_000_000, lambda t: arrivals.setdefault("long", t))
    net.send(link, 0, 2, 500_000, lambda t: arrivals.setdefault("short", t))  # same NIC out, another node
    events.run()
    # alone for one read-time (half of "long" through), then half each: "short" needs one more
    # read-time, "long" has half a read-time left, alone again
    assert arrivals == pytest.approx({"long": 2.5 * link, "short": 2 * link})


def test_allreduce_is_the_ring_formula_after_the_backward_pass():
    size, compute, n = 8_000_000, 0.2, 4
    plan = ModelPlan.uniform("one", [size], [1.0])
    result = simulate(plan, NODE, compute, 32, n, 0, "allreduce", fusion_bytes=size)
    ring = 2 * (n - 1) / n * size / NODE.nic_bytes_per_sec + 2 * (n - 1) * NODE.latency_s
    assert result.step_s == pytest.approx(compute + ring, rel=1e-9)
    assert result.num_ps == 0 and result.bottleneck == "ring allreduce (NIC)"


def test_gradients_overlap_the_backward_pass_of_earlier_layers():
    # two equal layers: the last layer's gradient goes out while the first layer computes
    plan = ModelPlan.uniform("two", [2_000_000, 2_000_000], [1.0, 1.0])
    staged = simulate(plan, NODE, 0.3, 32, 2, 1, colocate_ps=False, overlap=False)
    overlapped = simulate(plan, NODE, 0.3, 32, 2, 1, colocate_ps=False, overlap=True)
    assert overlapped.step_s < staged.step_s - 0.02


def test_variables_go_where_replica_device_setter_puts_them_in_training():
    plan = model_plan("cifar10")
    for strategy in ("round_robin", "greedy"):
        graph = tf.Graph()
        with graph.as_default():
            chooser = (tf.train.GreedyLoadBalancingStrategy(3, tf.train.byte_size_load_fn)
                       if strategy == "greedy" else None)
            with tf.device(tf.train.replica_device_setter(ps_tasks=3, ps_strategy=chooser)):
                from dflow.models import get_model

                spec = get_model("cifar10")
                spec(tf.placeholder(tf.float32, [1, *spec.input_shape]))
        trained = [int(op.device.split("task:")[1][0])
                   for op in graph.get_operations() if op.type == "VariableV2"]
        assert place_variables(plan, 3, strategy) == trained


def test_reproduce_rows_carry_the_paper_beside_the_simulation():
    rows = reproduce(systems=["p2.8xlarge"], max_gpus=2)
    assert [r["gpus"] for r in rows] == [1, 2]
    for row in rows:
        for key in ("system", "gpus", "num_ps", "variable_update", "paper_images_per_sec", "images_per_sec",
                    "error_percent", "allreduce_images_per_sec", "bottleneck"):
            assert key in row
        assert row["system"] == "p2.8xlarge"
        assert row["error_percent"] == pytest.approx(
            (row["images_per_sec"] - row["paper_images_per_sec"]) / row["paper_images_per_sec"] * 100)
    assert rows[0]["images_per_sec"] == pytest.approx(30.55, rel=1e-3)  # calibrated on the first row
    assert 0.9 < rows[1]["images_per_sec"] / (2 * 30.55) <= 1.0


def test_p2_xlarge_collapses_at_64_gpus_where_p2_8xlarge_does_not():
    """The shapes of seed 001's figures 9-10: single-GPU nodes on ~2 Gbit/s run out of network
    at 64 GPUs (the PS holding the 8 MB logits layer serves every worker), 8-GPU nodes that
    sum locally do not."""
    plan = model_plan("inception3")
    single, multi = PRESETS["p2.xlarge"], PRESETS["p2.8xlarge"]
    step = 64 / 30.55
    at_64 = simulate(plan, single, step, 64, 64, 64, "parameter_server", "greedy")
    at_128 = simulate(plan, multi, step, 64, 16, 16, "distributed_replicated", "greedy")
    assert at_64.scaling_efficiency < 0.7 and "NIC" in at_64.bottleneck
    assert at_128.scaling_efficiency > 0.85


def test_a_committed_sweep_point_is_predicted_within_15_percent():
    """wang2017-multinode: 2 workers, 1 PS, 1 Gbit/s links, batch 100 (async), predicted from the
    1-worker run of the same sweep (its step time and link) by the simulator on dflow's stages."""
    records = [json.loads(line) for line in (RESULTS / "wang2017-multinode.jsonl").read_text().splitlines()]
    rows = advise.compare(records, variable_bytes={"cifar10": advise.model_variable_bytes("cifar10")},
                          own_compute=True)
    point = next(r for r in rows if (r["num_workers"], r["num_ps"], r["batch_size"], r["network"])
                 == (2, 1, 100, "1gbit"))
    assert abs(point["error_percent"]) <= 15
    assert "mean absolute error" in advise.format_compare(rows)
    assert report.markdown_table(rows, ["predicted"])


def test_the_reproduction_reports_each_row_on_stderr_as_it_goes(capsys):
    from dflow.cli import main

    assert main(["bench", "simulate", "--reproduce", "bugliarello2017", "--systems", "p2.8xlarge",
                 "--max_gpus", "2", "--format", "json"]) == 0
    out, err = capsys.readouterr()
    assert [row["gpus"] for row in json.loads(out)] == [1, 2]  # stdout stays the JSON alone
    assert err.splitlines()[1].startswith("[2/2, ") and "p2.8xlarge 2 GPUs: paper 58.4, simulated" in err


def test_simulate_command_prints_json_rows_with_the_setup(capsys):
    from dflow.cli import main

    assert main(["bench", "simulate", "--hardware", "p2.8xlarge", "--model", "mnist_dnn",
                 "--step_time", "0.01", "--gpus", "1,16", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["gpus"] for r in rows] == [1, 16]
    for row in rows:
        assert {"workers", "num_ps", "variable_update", "devices_per_node", "images_per_sec",
                "bottleneck"} <= set(row)
    assert rows[1]["workers"] == 2 and rows[1]["devices_per_node"] == 8
    assert main(["bench", "simulate", "--hardware", "p2.xlarge", "--gpus", "2", "--batch_size", "32"]) == 2
    assert "give --step_time" in capsys.readouterr().out


def _scaling_rows() -> list[dict]:
    """Two systems' rows as ``reproduce`` gives them (no simulation: the plot is what is tested)."""
    rows = []
    for system, one in (("piz_daint", 138.0), ("p2.xlarge", 30.5)):
        for gpus, efficiency in ((1, 1.0), (2, 0.95), (4, 0.9)):
            rows.append({"system": system, "gpus": gpus, "images_per_sec": one * gpus * efficiency,
                         "paper_images_per_sec": one * gpus * (efficiency - 0.02),
                         "allreduce_images_per_sec": one * gpus})
    return rows


def test_the_scaling_plot_has_each_systems_simulated_paper_and_allreduce_series():
    pytest.importorskip("matplotlib")
    from dflow.bench.reproduce import scaling_figure

    figure = scaling_figure(_scaling_rows(), "title")
    speed, efficiency = figure.axes
    lines = {line.get_label(): line for line in speed.get_lines()}
    assert set(lines) == {f"{system}: {series}" for system in ("piz_daint", "p2.xlarge")
                          for series in ("dflow simulate", "paper", "allreduce (simulated)")}
    simulated = lines["p2.xlarge: dflow simulate"]
    assert list(simulated.get_xdata()) == [1, 2, 4]
    assert list(simulated.get_ydata()) == pytest.approx([30.5, 57.95, 109.8])
    paper = lines["piz_daint: paper"]
    assert paper.get_marker() == "x" and paper.get_linestyle() == "None"  # points, not a line
    assert speed.get_xscale() == "log" and speed.get_ylabel() == "images/sec"
    assert efficiency.get_ylabel() == "scaling efficiency"
    # per system: the simulator's efficiency line and the paper's points, the first at 1.0
    assert len(efficiency.get_lines()) == 4
    assert all(line.get_ydata()[0] == pytest.approx(1.0) for line in efficiency.get_lines())


def test_the_scaling_plot_writes_a_png_and_an_svg(tmp_path):
    pytest.importorskip("matplotlib")
    import xml.etree.ElementTree as ElementTree

    from dflow.bench.reproduce import plot_scaling

    png, svg = tmp_path / "scaling.png", tmp_path / "scaling.svg"
    assert plot_scaling(_scaling_rows(), [str(png), str(svg)]) == [str(png), str(svg)]
    header = png.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n" and header[12:16] == b"IHDR"
    width, height = int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")
    assert (width, height) == (1200, 456)  # 10 x 3.8 inches at 120 dpi
    root = ElementTree.parse(svg).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert "piz_daint: dflow simulate" in svg.read_text()


def test_an_incast_burst_ends_one_tcp_timeout_late_and_one_flow_never_times_out():
    """Drop-tail ports: a message queued while the receiver's port holds messages from
    ``incast_senders`` senders (itself included) arrives TCP's least timeout late; the port's
    time is unchanged. No buffer at all still lets one flow through untouched."""
    from dflow.bench.hardware import TCP_MIN_RTO_S
    from dflow.bench.simulate import _Events, _Network

    ethernet = dataclasses.replace(NODE, port_buffer_bytes=0.0, latency_s=0.0)
    assert ethernet.incast_senders == 2 and NODE.incast_senders is None
    link = 1_000_000 / ethernet.nic_bytes_per_sec

    def arrivals(senders: list[int], receiver: int) -> list[float]:
        events, times = _Events(), []
        net = _Network(receiver + 1, ethernet, events)
        for src in senders:
            net.send(0.0, src, receiver, 1_000_000, times.append)
        events.run()
        return times

    # four senders share the port: all through after four read-times, the first on time
    assert arrivals([0, 1, 2, 3], 4) == pytest.approx([4 * link] + [4 * link + TCP_MIN_RTO_S] * 3)
    assert arrivals([0, 0, 0], 1) == pytest.approx([3 * link] * 3)  # one sender: no incast
    plan = ModelPlan.uniform("one", [4_000_000], [1.0])
    one_flow = [simulate(plan, node, 0.1, 32, 1, 1, colocate_ps=False, overlap=False).step_s
                for node in (NODE, dataclasses.replace(NODE, port_buffer_bytes=0.0))]
    assert one_flow[0] == pytest.approx(one_flow[1], rel=1e-12)


def test_incast_onsets_follow_from_the_presets_links_and_the_cited_switch_buffer():
    # (4 MB / 48 + one round trip's bytes) / 10 segments' initial window, + 1
    assert PRESETS["p2.xlarge"].incast_senders == 10
    assert PRESETS["p2.8xlarge"].incast_senders == 22  # more than its 16 nodes at 128 GPUs send
    assert PRESETS["piz_daint"].incast_senders is None  # Aries is lossless
    plan, step = model_plan("inception3"), 64 / 30.55
    ethernet, aries = (simulate(plan, PRESETS[name], step, 64, 16, 16) for name in ("p2.xlarge", "piz_daint"))
    assert ethernet.incast_timeouts_per_step > 0 and aries.incast_timeouts_per_step == 0
    assert "TCP incast" in advise._remedy(ethernet.as_dict())


def test_dflow_runtime_setups_play_dflows_staged_step_with_each_ps_a_process_of_its_own():
    """What ``advise --cluster`` searches: ``simulate(overlap=False, colocate_ps=False)``."""
    from dflow.bench.simulate import best_setup

    plan = ModelPlan.uniform("two", [2_000_000, 2_000_000], [1.0, 1.0])
    best, tried = best_setup(plan, NODE, 0.3, 32, 2, ("parameter_server",), dflow_runtime=True)
    staged = simulate(plan, NODE, 0.3, 32, 2, best.num_ps, colocate_ps=False, overlap=False)
    overlapped, _ = best_setup(plan, NODE, 0.3, 32, 2, ("parameter_server",))
    assert best.step_s == pytest.approx(staged.step_s, rel=1e-12)
    assert overlapped.step_s < best.step_s  # TensorFlow's overlap, PS on the worker nodes: faster
