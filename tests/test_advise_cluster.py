"""``dflow bench advise --cluster ADDRESS`` against a real cluster of worker processes on this
machine: the measurements are plausible for loopback, and the advice names a setup."""

from __future__ import annotations

import pytest

import dflow as tf
from dflow.bench.measured_cluster import measure_cluster


@pytest.fixture(scope="module")
def cluster():
    with tf.cluster.local(ps=1, workers=1) as c:
        yield c


def test_a_live_clusters_links_apply_rate_and_step_are_measured(cluster):
    measured = measure_cluster(cluster.client, "mnist_dnn", 32, link_bytes=20_000_000)
    assert measured.workers == 2 and measured.address == cluster.target
    # loopback between two processes: far above a 100 Mbit/s NIC, below memory's ~100 GB/s
    assert 100e6 / 8 < measured.link_bytes_per_sec < 100e9
    assert 1e-5 < measured.message_latency_s < 0.5  # a Dask hop: the scheduler's round trip
    assert 1e8 < measured.apply_bytes_per_sec < 1e12
    assert 0 < measured.step_time_s < 5  # mnist_dnn at batch 32 on one of 2 cores
    node = measured.hardware()
    assert (node.devices_per_node, node.nic_bytes_per_sec) == (1, measured.link_bytes_per_sec)
    assert node.incast_senders is None  # the switch is unknown: no incast modelled


def test_advise_cluster_prints_the_measurements_and_names_a_setup(cluster, capsys):
    from dflow.cli import main

    assert main(["bench", "advise", "--cluster", cluster.target, "--model", "mnist_dnn", "--batch_size", "32",
                 "--workers", "1,4"]) == 0
    out = capsys.readouterr().out
    assert f"measured {cluster.target} (2 workers): link" in out and "Gbit/s" in out
    best = [line for line in out.splitlines() if "<- best" in line]
    assert len(best) == 2  # one recommended setup per GPU count
    for line in best:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        assert cells[1] in ("parameter_server", "distributed_replicated", "allreduce")
        assert cells[2].isdigit()  # the PS count (0 for allreduce)
