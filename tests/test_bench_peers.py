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


def test_peers_need_a_fixed_benchmark(capsys):
    from dflow.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["bench", "--peers"])
    assert exit_.value.code == 2
    assert "--peers compares frameworks in the fixed benchmarks: add --local or --distributed" \
        in capsys.readouterr().err


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


@pytest.mark.parametrize("model", ["deep_mnist", "mnist_dnn"])
def test_the_mnist_peer_steps_train_the_models_of_dflow_models(model):
    """The graph the frameworks race on is dflow.models' model (the same variables) and trains:
    its loss on the synthetic batch falls within a few steps."""
    import dflow as tf
    from dflow.models import MODELS

    session, train_op, feeds = peers.graph_session(tf, 8, model=model)
    with session.graph.as_default():
        raced = {v.op.name: v.shape.as_list() for v in tf.trainable_variables()}
    with tf.Graph().as_default():
        MODELS[model](tf.placeholder(tf.float32, [8, *MODELS[model].input_shape]))
        defined = {v.op.name: v.shape.as_list() for v in tf.trainable_variables()}
    assert raced == defined
    loss = session.graph.get_tensor_by_name("cross_entropy:0")
    first = session.run(loss, feeds)
    for _ in range(8):
        session.run(train_op, feeds)
    assert session.run(loss, feeds) < 0.8 * first


def _has_gpu() -> bool:
    from dflow.runtime.devices import gpu_namespace

    return gpu_namespace() is not None


def test_peers_refuse_a_model_they_do_not_race_and_lrn_without_lrn_layers(capsys):
    from dflow.cli import main

    with pytest.raises(ValueError, match="unknown model 'resnet50' for --peers; choose one of: cifar10"):
        peers.run([2], model="resnet50")
    with pytest.raises(ValueError, match="deep_mnist has none"):
        peers.run([2], model="deep_mnist", lrn=True)
    for argv, said in [(["--local", "--peers", "--model", "mnist_dnn", "--no-lrn"], "mnist_dnn has none"),
                       (["--local", "--memory"], "--memory belongs to --local --peers"),
                       (["--local", "--model", "mnist_dnn"], "--model set one run of the harness"),
                       (["--local", "--device", "gpu"], "--device belongs to --local --peers"),
                       (["--local", "--peers", "--device", "gpu", "--memory"] if _has_gpu() else
                        ["--local", "--peers", "--device", "gpu"],
                        "not the GPU's" if _has_gpu() else "dflow finds no GPU here")]:
        with pytest.raises(SystemExit) as exit_:
            main(["bench", *argv])
        assert exit_.value.code == 2
        assert said in capsys.readouterr().err


def test_step_memory_grows_with_the_batch():  # two fresh interpreters: 3 s at load 3
    """Each measurement in a process of its own: the larger batch's peak is not hidden by, nor
    hides, the smaller one's."""
    small = peers.measure_step_memory("dflow", 2, lrn=False)
    large = peers.measure_step_memory("dflow", 64, lrn=False)
    assert small["step_memory_bytes"] > 0
    assert large["step_memory_bytes"] > small["step_memory_bytes"] + 8 * 2**20
    assert small["peak_rss_bytes"] >= small["rss_before_bytes"]
