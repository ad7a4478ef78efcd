"""``dflow bench --local --peers``: each framework in its own process, interleaved rounds,
ratios per round; and the engine figures of ``dflow bench --local``."""

from __future__ import annotations

import pytest

from dflow.bench import engine, peers


@pytest.mark.slow  # two fresh interpreters import dflow: 10-50 s on a busy 2-core machine
def test_peers_time_dflow_and_a_baseline_checkout_in_their_processes():
    """The protocol end to end, on dflow alone and the same tree as its baseline (so the test
    needs neither PyTorch nor TensorFlow): per round one images/sec each, ratios per round."""
    import dflow

    tree = str(__import__("pathlib").Path(dflow.__file__).parents[1])
    lines = []
    result = peers.run([2], warmup=0, steps=1, rounds=2, lrn=False, frameworks=("dflow",),
                       baseline=tree, echo=lines.append)
    (row,) = result["batches"]
    assert set(row["images_per_sec"]) == {"dflow", "dflow@baseline"}
    assert all(len(v) == 2 and min(v) > 0 for v in row["images_per_sec"].values())
    assert len(row["ratios"]["dflow@baseline"]) == 2
    assert any(line.startswith("batch    2: images/sec dflow ") for line in lines)
    assert "load average" in lines[-1]


def test_peers_refuse_what_they_cannot_run(tmp_path):
    with pytest.raises(ValueError, match="not a dflow source tree"):
        peers.run([2], baseline=str(tmp_path))
    with pytest.raises(ValueError, match="keep 'dflow'"):
        peers.run([2], frameworks=("pytorch",))
    with pytest.raises(ValueError, match="rounds and steps must be >= 1"):
        peers.run([2], rounds=0)


def test_peers_need_local(capsys):
    from dflow.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["bench", "--peers"])
    assert exit_.value.code == 2
    assert "--peers compares frameworks in the local benchmark: add --local" in capsys.readouterr().err


def test_steps_per_round_grow_for_small_batches():
    assert peers.steps_for(100, 5) == 5
    assert peers.steps_for(10, 5) == 50
    assert peers.steps_for(1, 5) == 100


def test_the_engine_figures_cover_every_way_to_run_the_chain():
    result = engine.tiny_chain_overhead(ops=30, rounds=2, steps=2)
    assert result["ops"] == 31  # the adds and their constant (the placeholder is fed)
    assert set(result["overhead_us_per_op"]) == {"session_run", "compiled_stage", "counting_executor",
                                                 "by_hand"}
    assert all(us > 0 for us in result["us_per_op"].values())
