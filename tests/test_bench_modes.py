"""``dflow bench modes``: every variable update in one run, bytes per worker against theory."""

import pytest

from dflow.bench import modes
from dflow.cli import main


def test_expected_bytes_per_worker_follow_each_mode():
    p = 1000
    assert modes.expected_sent_per_worker("parameter_server", p, 4) == p
    assert modes.expected_sent_per_worker("allreduce", p, 4) == 1500  # 2 (N - 1) / N x P
    assert modes.expected_sent_per_worker("replicated", p, 2) == p
    # a node of 2: each sends P/2 x 2 in the ring; the leader P to the PS and P to the other
    assert modes.expected_sent_per_worker("distributed_replicated", p, 4, devices_per_node=2) == 2000
    assert modes.expected_sent_per_worker("independent", p, 4) == 0


@pytest.mark.slow
def test_modes_side_by_side_on_two_workers_send_what_theory_says(capsys):
    args = ["bench", "modes", "--model", "mnist_dnn", "--num_workers", "2", "--num_warmup_batches", "1",
            "--num_batches", "3", "--modes", "parameter_server,allreduce,distributed_replicated,independent"]
    assert main(args) == 0
    out = capsys.readouterr().out
    rows = {line.split("|")[1].strip(): line.split("|")[2:-1] for line in out.splitlines()
            if line.startswith("| ") and "variable update" not in line and "---" not in line}
    assert set(rows) == {"parameter_server", "allreduce", "distributed_replicated", "independent"}
    for mode in ("parameter_server", "allreduce", "distributed_replicated"):
        ratio = float(rows[mode][3])
        assert 1.0 <= ratio <= 1.1, (mode, rows[mode])  # the acceptance: at most 1.1x the theory
        assert float(rows[mode][0]) > 0
    assert rows["independent"][1].strip() == "0"


def test_an_unknown_mode_is_named(capsys):
    assert main(["bench", "modes", "--modes", "allreduce,ring"]) == 2
    assert "unknown mode(s) ring" in capsys.readouterr().err
