"""tf.summary and tf.summary.FileWriter as TF 1.x scripts use them, read back with tbparse and
TensorBoard's own event reader."""

from __future__ import annotations

import io
import os
import re
import wave

import numpy as np
import pytest
from PIL import Image
from sklearn.datasets import load_digits
from tbparse import SummaryReader
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import dflow as tf
from dflow.cli import main


def events(logdir) -> EventAccumulator:
    """TensorBoard's reader over ``logdir``, keeping every event (no sampling)."""
    accumulator = EventAccumulator(str(logdir), size_guidance={"images": 0, "histograms": 0,
                                                               "tensors": 0, "audio": 0, "scalars": 0})
    return accumulator.Reload()


def scalars(logdir) -> dict[str, list[tuple[int, float]]]:
    """tbparse's reading of the scalars: tag -> [(step, value), ...] in step order."""
    frame = SummaryReader(str(logdir)).scalars
    return {tag: [(int(s), float(v)) for s, v in zip(rows.step, rows.value)]
            for tag, rows in frame.sort_values("step").groupby("tag")}


# ---- mnist_with_summaries, the TF 1.x tutorial's pattern ----------------------------------
def variable_summaries(var):
    """Mean, stddev, max, min and a histogram of ``var``, as the tutorial attaches to each weight."""
    with tf.name_scope("summaries"):
        mean = tf.reduce_mean(var)
        tf.summary.scalar("mean", mean)
        with tf.name_scope("stddev"):
            stddev = tf.sqrt(tf.reduce_mean(tf.square(var - mean)))
        tf.summary.scalar("stddev", stddev)
        tf.summary.scalar("max", tf.reduce_max(var))
        tf.summary.scalar("min", tf.reduce_min(var))
        tf.summary.histogram("histogram", var)


def nn_layer(input_tensor, input_dim, output_dim, layer_name, act=tf.nn.relu):
    with tf.name_scope(layer_name):
        with tf.name_scope("weights"):
            weights = tf.Variable(tf.truncated_normal([input_dim, output_dim], stddev=0.1))
            variable_summaries(weights)
        with tf.name_scope("biases"):
            biases = tf.Variable(tf.constant(0.1, shape=[output_dim]))
            variable_summaries(biases)
        with tf.name_scope("Wx_plus_b"):
            preactivate = tf.matmul(input_tensor, weights) + biases
            tf.summary.histogram("pre_activations", preactivate)
        activations = act(preactivate, name="activation")
        tf.summary.histogram("activations", activations)
        return activations


def digits():
    data = load_digits()
    images = (data.images.reshape(-1, 64) / 16.0).astype(np.float32)
    labels = np.eye(10, dtype=np.float32)[data.target]
    return images[:1500], labels[:1500], images[1500:], labels[1500:]


def train_with_summaries(log_dir: str, steps: int = 20):
    """The tutorial's train(): summaries every step, a test summary every 5 steps. Returns what
    sess.run fetched: {(run, step): accuracy} and {step: cross_entropy} of the training steps."""
    train_x, train_y, test_x, test_y = digits()
    with tf.name_scope("input"):
        x = tf.placeholder(tf.float32, [None, 64], name="x-input")
        y_ = tf.placeholder(tf.float32, [None, 10], name="y-input")
    with tf.name_scope("input_reshape"):
        image_shaped_input = tf.reshape(x, [-1, 8, 8, 1])
        tf.summary.image("input", image_shaped_input, 10)
    hidden1 = nn_layer(x, 64, 32, "layer1")
    y = nn_layer(hidden1, 32, 10, "layer2", act=tf.identity)
    with tf.name_scope("cross_entropy"):
        cross_entropy = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=y_, logits=y))
    tf.summary.scalar("cross_entropy", cross_entropy)
    with tf.name_scope("train"):
        train_step = tf.train.AdamOptimizer(0.01).minimize(cross_entropy)
    with tf.name_scope("accuracy"):
        with tf.name_scope("correct_prediction"):
            correct_prediction = tf.equal(tf.argmax(y, 1), tf.argmax(y_, 1))
        with tf.name_scope("accuracy"):
            accuracy = tf.reduce_mean(tf.cast(correct_prediction, tf.float32))
    tf.summary.scalar("accuracy", accuracy)

    merged = tf.summary.merge_all()
    fetched_accuracy, fetched_loss = {}, {}
    with tf.Session() as sess:
        train_writer = tf.summary.FileWriter(log_dir + "/train", sess.graph)
        test_writer = tf.summary.FileWriter(log_dir + "/test")
        sess.run(tf.global_variables_initializer())
        for i in range(steps):
            if i % 5 == 0:
                summary, acc = sess.run([merged, accuracy], feed_dict={x: test_x, y_: test_y})
                test_writer.add_summary(summary, i)
                fetched_accuracy["test", i] = float(acc)
            batch = slice(i * 64 % 1400, i * 64 % 1400 + 64)
            summary, _, acc, loss = sess.run([merged, train_step, accuracy, cross_entropy],
                                             feed_dict={x: train_x[batch], y_: train_y[batch]})
            train_writer.add_summary(summary, i)
            fetched_accuracy["train", i] = float(acc)
            fetched_loss[i] = float(loss)
        train_writer.close()
        test_writer.close()
    return fetched_accuracy, fetched_loss


@pytest.fixture(scope="module")
def tutorial_run(tmp_path_factory):
    tf.reset_default_graph()
    log_dir = str(tmp_path_factory.mktemp("mnist_with_summaries"))
    fetched = train_with_summaries(log_dir)
    tf.reset_default_graph()
    return log_dir, *fetched


def test_tutorial_scalars_read_back_with_their_tags_steps_and_values(tutorial_run):
    log_dir, fetched_accuracy, fetched_loss = tutorial_run
    train, test = scalars(f"{log_dir}/train"), scalars(f"{log_dir}/test")
    stats = {f"{layer}/{var}/summaries/{s}" for layer in ("layer1", "layer2")
             for var in ("weights", "biases") for s in ("mean_1", "stddev_1", "max_1", "min_1")}
    # TF's tags: the summary's scoped name, made unique against the ops named alike, ignoring case
    # (reduce_mean's op is summaries/Mean, so scalar("mean") gets summaries/mean_1)
    assert set(train) == stats | {"cross_entropy_1", "accuracy_1"} == set(test)
    assert [s for s, _ in train["cross_entropy_1"]] == list(range(20))
    assert [s for s, _ in test["accuracy_1"]] == [0, 5, 10, 15]
    # the values are what sess.run computed in the same step, to float32 precision
    assert [v for _, v in train["cross_entropy_1"]] == pytest.approx(list(fetched_loss.values()), rel=1e-6)
    assert [v for _, v in test["accuracy_1"]] == pytest.approx(
        [fetched_accuracy["test", i] for i in (0, 5, 10, 15)], rel=1e-6)
    assert test["accuracy_1"][-1][1] > test["accuracy_1"][0][1] + 0.3  # it learned


def test_tutorial_histograms_count_every_value_in_tf_buckets(tutorial_run):
    log_dir = tutorial_run[0]
    frame = SummaryReader(f"{log_dir}/train").histograms
    assert set(frame.tag) == {"layer1/weights/summaries/histogram", "layer1/biases/summaries/histogram",
                              "layer2/weights/summaries/histogram", "layer2/biases/summaries/histogram",
                              "layer1/Wx_plus_b/pre_activations", "layer2/Wx_plus_b/pre_activations",
                              "layer1/activations", "layer2/activations"}
    weights = frame[frame.tag == "layer1/weights/summaries/histogram"].sort_values("step")
    assert list(weights.step) == list(range(20))
    assert all(counts.sum() == 64 * 32 for counts in weights.counts)
    histogram = events(f"{log_dir}/train").Histograms("layer1/weights/summaries/histogram")[0].histogram_value
    # truncated_normal(stddev=0.1): within two standard deviations, and TF's 10%-growing edges
    assert -0.2 <= histogram.min < histogram.max <= 0.2 and histogram.num == 64 * 32
    limits = [b for b in histogram.bucket_limit if 0.01 < b < 0.2]
    assert np.allclose(np.diff(np.log(limits)), np.log(1.1))


def test_tutorial_images_and_graph(tutorial_run):
    log_dir = tutorial_run[0]
    reader = events(f"{log_dir}/test")
    assert sorted(reader.Tags()["images"]) == sorted(f"input_reshape/input/image/{i}" for i in range(10))
    first = reader.Images("input_reshape/input/image/0")
    assert [e.step for e in first] == [0, 5, 10, 15]
    pixels = np.asarray(Image.open(io.BytesIO(first[0].encoded_image_string)))
    expected = digits()[2][0].reshape(8, 8)
    assert pixels.shape == (8, 8) and (first[0].width, first[0].height) == (8, 8)
    assert np.abs(pixels - (expected * (255.0 / expected.max())).astype(np.uint8)).max() <= 1
    graph = events(f"{log_dir}/train").Graph()  # written by FileWriter(logdir, sess.graph)
    nodes = {node.name: node for node in graph.node}
    assert nodes["layer1/Wx_plus_b/MatMul"].op == "MatMul"
    assert "input/x-input" in nodes["layer1/Wx_plus_b/MatMul"].input
    assert not reader.Tags()["graph"]  # FileWriter(logdir) without a graph writes none


# ---- values, tags and bytes ---------------------------------------------------------------
def test_a_summary_op_fetches_as_the_bytes_of_a_summary_protobuf():
    loss = tf.placeholder(tf.float32, [])
    summary = tf.summary.scalar("loss", loss)
    assert summary.dtype == tf.string and summary.shape.as_list() == []
    with tf.Session() as sess:
        zero = sess.run(summary, {loss: 0.0})
    assert type(zero) is bytes and zero.endswith(b"\x00")  # a float 0.0 ends in NUL bytes
    value = tf.Summary.FromString(zero).value[0]
    assert (value.tag, value.simple_value) == ("loss", 0.0)


def test_hand_built_summaries_and_serialized_ones_are_written(tmp_path):
    with tf.summary.FileWriter(str(tmp_path)) as writer:
        for step in range(3):
            summary = tf.Summary(value=[tf.Summary.Value(tag="reward", simple_value=10.0 * step)])
            writer.add_summary(summary, step)
        writer.add_summary(tf.Summary(value=[tf.Summary.Value(tag="lr", simple_value=0.5)])
                           .SerializeToString(), global_step=np.int64(7))
    assert scalars(tmp_path) == {"reward": [(0, 0.0), (1, 10.0), (2, 20.0)], "lr": [(7, 0.5)]}


def test_a_fetched_summary_parsed_extended_and_written_as_cifar10_eval_does(tmp_path):
    tf.summary.scalar("loss", tf.constant(0.25))
    summary_op = tf.summary.merge_all()
    with tf.Session() as sess:
        summary = tf.Summary()
        summary.ParseFromString(sess.run(summary_op))
    summary.value.add(tag="Precision @ 1", simple_value=0.75)
    writer = tf.summary.FileWriter(str(tmp_path), graph_def=tf.get_default_graph().as_graph_def())
    writer.add_summary(summary, 100)
    writer.close()
    assert scalars(tmp_path) == {"loss": [(100, 0.25)], "Precision @ 1": [(100, 0.75)]}
    assert [node.op for node in events(tmp_path).Graph().node] == ["Const", "ScalarSummary", "MergeSummary"]


def test_flush_makes_events_readable_before_close(tmp_path):
    writer = tf.summary.FileWriter(str(tmp_path), flush_secs=3600)
    writer.add_summary(tf.Summary(value=[tf.Summary.Value(tag="x", simple_value=1.5)]), 1)
    writer.flush()
    assert scalars(tmp_path) == {"x": [(1, 1.5)]}
    writer.close()
    writer.add_summary(tf.Summary(value=[tf.Summary.Value(tag="x", simple_value=9.0)]), 2)  # dropped
    writer.reopen()
    writer.add_summary(tf.Summary(value=[tf.Summary.Value(tag="x", simple_value=2.5)]), 3)
    writer.close()
    assert scalars(tmp_path) == {"x": [(1, 1.5), (3, 2.5)]}
    assert len(os.listdir(tmp_path)) == 2  # reopen starts a new event file


def test_family_collections_and_merge():
    a = tf.summary.scalar("a", tf.constant(1.0), family="losses")
    b = tf.summary.scalar("b", tf.constant(2.0), collections=["mine"])
    assert tf.get_collection(tf.GraphKeys.SUMMARIES) == [a]
    assert tf.get_collection("mine") == [b]
    merged_all = tf.summary.merge_all()
    merged = tf.summary.merge([a, b])
    with tf.Session() as sess:
        tags = [[v.tag for v in tf.Summary.FromString(s).value] for s in sess.run([merged_all, merged])]
    assert tags == [["losses/losses/a"], ["losses/losses/a", "b"]]  # TF puts the family twice
    assert tf.summary.merge_all("nothing here") is None


def test_a_summary_of_a_gpu_tensor_is_computed_on_that_tasks_cpu():
    with tf.device("/job:worker/task:1/gpu:0"):
        activations = tf.nn.relu(tf.constant([[-1.0, 2.0]]))
        summary = tf.summary.histogram("activations", activations)
    with tf.device("/gpu:0"):
        local = tf.summary.scalar("local", tf.reduce_sum(activations))
    assert summary.op.device == "/job:worker/task:1/device:CPU:0"
    assert local.op.device == "/device:CPU:0"  # its input, reduce_sum, is on /gpu:0 of the default task


def test_a_graph_with_summaries_round_trips_through_its_plain_data_form():
    import json

    tf.summary.scalar("loss", tf.constant(2.0))
    tf.summary.text("note", b"bytes become text")
    tf.summary.merge_all(name="all")
    graph = tf.import_graph_def(json.loads(json.dumps(tf.get_default_graph().as_graph_def())), tf.Graph())
    with tf.Session(graph=graph) as sess:
        values = tf.Summary.FromString(sess.run(graph.get_tensor_by_name("all/all:0"))).value
    assert [v.tag for v in values] == ["loss", "note"]
    assert values[0].simple_value == 2.0 and values[1].tensor.string_val == [b"bytes become text"]
    assert len(graph.get_collection(tf.GraphKeys.SUMMARIES)) == 2


def test_tags_are_cleaned_as_in_tf():
    s = tf.summary.scalar("loss (train)", tf.constant(1.0))
    with tf.Session() as sess:
        assert tf.Summary.FromString(sess.run(s)).value[0].tag == "loss__train_"


def test_merging_two_summaries_with_one_tag_is_an_error():
    value = tf.constant(1.0)
    first = tf.summary.scalar("x", value)
    with tf.name_scope(None):
        second = tf.summary.merge([first, first])
    with tf.Session() as sess, pytest.raises(tf.errors.InvalidArgumentError, match="Duplicate tag x"):
        sess.run(second)


def test_histogram_buckets_match_tensorflow():
    # TF 1.x (tf.compat.v1 of TF 2.21) gave these limits and counts for these five values
    histogram = tf.summary.histogram("h", tf.constant([0.0, 1.0, 1.5, -3.0, 100.0]))
    with tf.Session() as sess:
        histo = tf.Summary.FromString(sess.run(histogram)).value[0].histo
    assert (histo.min, histo.max, histo.num, histo.sum, histo.sum_squares) == (-3, 100, 5, 99.5, 10012.25)
    assert list(histo.bucket_limit) == pytest.approx(
        [-3.1665833053880363, -2.8787120958073054, 0.0, 1e-12, 0.917246389039776, 1.0089710279437536,
         1.47723448201245, 1.624957930213695, 97.88757810018231, 107.67633591020055, 1.7976931348623157e308],
        rel=1e-12)
    assert list(histo.bucket) == [0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0]


def test_image_scaling_follows_tf_for_signed_and_uint8_images():
    signed = np.array([[-1.0, 0.0], [0.5, 1.0]], np.float32).reshape(1, 2, 2, 1)
    rgb = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(1, 2, 3, 3)
    one = tf.summary.image("signed", tf.constant(signed), max_outputs=1)
    many = tf.summary.image("rgb", tf.constant(rgb))
    with tf.Session() as sess:
        one_value, many_value = (tf.Summary.FromString(s).value for s in sess.run([one, many]))
    assert [v.tag for v in one_value] == ["signed/image"]  # pixels as TF 1.x wrote them:
    assert [v.tag for v in many_value] == ["rgb/image/0"]  # one image in the batch
    pixels = np.asarray(Image.open(io.BytesIO(one_value[0].image.encoded_image_string)))
    assert pixels.tolist() == [[1, 128], [191, 255]]  # 0 -> 128, largest magnitude -> 127 away
    decoded = np.asarray(Image.open(io.BytesIO(many_value[0].image.encoded_image_string)))
    assert np.array_equal(decoded, rgb[0]) and many_value[0].image.colorspace == 3


def test_a_float_rgb_image_with_a_nan_is_scaled_and_marked_red_as_tf_does():
    rgb = np.array([[[0.1, 0.2, 0.3], [np.nan, 0.5, 0.6]], [[0.7, 0.8, 0.9], [1.0, 2.0, 3.0]]], np.float32)
    summary = tf.summary.image("rgb", tf.constant(rgb[None]))
    with tf.Session() as sess:
        image = tf.Summary.FromString(sess.run(summary)).value[0].image
    pixels = np.asarray(Image.open(io.BytesIO(image.encoded_image_string))).tolist()
    # what TF 1.x (tf.compat.v1 of TF 2.21) wrote for the same image
    assert pixels == [[[8, 17, 25], [255, 0, 0]], [[59, 68, 76], [85, 170, 255]]]


def test_audio_and_text_summaries(tmp_path):
    t = np.linspace(0, 1, 800, dtype=np.float32)
    clips = np.stack([np.sin(2 * np.pi * 440 * t), 0.5 * np.sin(2 * np.pi * 220 * t)])[..., None]
    sound = tf.summary.audio("tone", tf.constant(clips), sample_rate=800, max_outputs=2)
    note = tf.summary.text("note", "**dflow** wrote this")
    with tf.Session() as sess, tf.summary.FileWriter(str(tmp_path)) as writer:
        writer.add_summary(sess.run(tf.summary.merge_all()), 4)
    reader = events(tmp_path)
    audio = reader.Audio("tone/audio/1")[0]
    assert (audio.step, audio.sample_rate, audio.length_frames) == (4, 800, 800)
    with wave.open(io.BytesIO(audio.encoded_audio_string)) as wav:
        frames = np.frombuffer(wav.readframes(800), "<i2")
    assert np.array_equal(frames, np.round(clips[1, :, 0] * 32768).astype(np.int16))
    text = reader.Tensors("note")[0].tensor_proto
    assert text.string_val == [b"**dflow** wrote this"] and sound.op.type == "AudioSummary"
    assert note.name == "note:0"


def test_tensor_summary_holds_the_whole_value(tmp_path):
    from tensorboard.util.tensor_util import make_ndarray

    value = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
    tf.summary.tensor_summary("weights", tf.constant(value), summary_description="a 2x3 matrix")
    tf.summary.tensor_summary("steps", tf.constant([1, 2, 3], dtype=tf.int64))
    with tf.Session() as sess, tf.summary.FileWriter(str(tmp_path)) as writer:
        writer.add_summary(sess.run(tf.summary.merge_all()), 3)
    reader = events(tmp_path)
    weights = reader.Tensors("weights")[0]
    assert weights.step == 3 and np.array_equal(make_ndarray(weights.tensor_proto), value)
    assert make_ndarray(reader.Tensors("steps")[0].tensor_proto).tolist() == [1, 2, 3]
    assert reader.SummaryMetadata("weights").summary_description == "a 2x3 matrix"


def test_bad_summaries_are_clear_errors(tmp_path):
    wide = tf.summary.scalar("wide", tf.constant([1.0, 2.0]))
    nan = tf.summary.histogram("nan", tf.constant([1.0, np.nan]))
    with tf.Session() as sess:
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"'wide' takes a tensor of one value"):
            sess.run(wide)
        with pytest.raises(tf.errors.InvalidArgumentError, match="Nan in summary histogram for: nan"):
            sess.run(nan)
    with pytest.raises(TypeError, match="takes a tf.string tensor, got int32"):
        tf.summary.text("t", tf.constant(1))
    with tf.summary.FileWriter(str(tmp_path)) as writer, pytest.raises(TypeError, match="got int"):
        writer.add_summary(3, 1)
    with pytest.raises(AttributeError, match="tf.train.SummaryWriter .* use tf.summary.FileWriter"):
        tf.train.SummaryWriter(str(tmp_path))
    with pytest.raises(AttributeError, match="tf.merge_all_summaries .* use tf.summary.merge_all"):
        tf.merge_all_summaries()


def test_file_writer_cache_shares_one_writer_per_directory(tmp_path):
    writer = tf.summary.FileWriterCache.get(str(tmp_path))
    assert tf.summary.FileWriterCache.get(str(tmp_path) + "/.") is writer
    tf.summary.FileWriterCache.clear()
    assert tf.summary.FileWriterCache.get(str(tmp_path)) is not writer
    tf.summary.FileWriterCache.clear()


def test_summary_saver_hook_writes_every_save_steps_in_a_monitored_session(tmp_path):
    x = tf.placeholder(tf.float32, [None])
    w = tf.Variable(1.0)
    loss = tf.reduce_mean(tf.square(x * w - 3.0))
    tf.summary.scalar("loss", loss)
    train_op = tf.train.GradientDescentOptimizer(0.01).minimize(
        loss, global_step=tf.train.get_or_create_global_step())
    hooks = [tf.train.SummarySaverHook(save_steps=5, output_dir=str(tmp_path)),
             tf.train.StopAtStepHook(last_step=12)]
    losses = []
    with tf.train.MonitoredTrainingSession(hooks=hooks) as sess:
        while not sess.should_stop():
            losses.append(sess.run([train_op, loss], {x: [1.0, 2.0]})[1])
    # TF's labels: the first step, then every 5, each the global step after its run
    logged = scalars(tmp_path)["loss"]
    assert [s for s, _ in logged] == [1, 6, 11]
    assert [v for _, v in logged] == pytest.approx([losses[0], losses[5], losses[10]], rel=1e-6)
    status = [e.session_log.status for e in _raw_events(tmp_path) if e.HasField("session_log")]
    assert status == [tf.SessionLog.START]


def test_a_monitored_session_with_a_checkpoint_dir_writes_the_summaries_there(tmp_path):
    loss = tf.Variable(5.0) * 2.0
    tf.summary.scalar("loss", loss)
    train_op = tf.assign_add(tf.train.get_or_create_global_step(), 1)
    with tf.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path), save_summaries_steps=2,
                                           log_step_count_steps=2,
                                           hooks=[tf.train.StopAtStepHook(last_step=5)]) as sess:
        while not sess.should_stop():
            sess.run(train_op)
    logged = scalars(tmp_path)
    assert logged["loss"] == [(1, 10.0), (3, 10.0), (5, 10.0)]
    # the speed from the first step's clock on, as TF's StepCounterHook writes it
    assert [s for s, _ in logged["global_step/sec"]] == [3, 5]
    assert all(rate > 0 for _, rate in logged["global_step/sec"])


def _raw_events(logdir):
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    (path,) = [os.path.join(logdir, f) for f in os.listdir(logdir)]
    return list(EventFileLoader(path).Load())


# ---- on a cluster -------------------------------------------------------------------------
def test_summaries_are_computed_where_their_inputs_live_on_a_cluster(tmp_path):
    with tf.cluster.local(ps=1, workers=1) as cluster:
        with tf.device(tf.train.replica_device_setter(cluster=cluster.spec)):
            x = tf.placeholder(tf.float32, [None, 3])
            w = tf.Variable(tf.ones([3, 2]), name="w")
            loss = tf.reduce_mean(tf.matmul(x, w))
            weights = tf.summary.histogram("weights", w)
            tf.summary.scalar("loss", loss)
            merged = tf.summary.merge_all()
        assert "/job:ps" in weights.op.device and "/job:worker" in merged.op.device
        with tf.Session(cluster.target) as sess, tf.summary.FileWriter(str(tmp_path)) as writer:
            sess.run(tf.global_variables_initializer())
            for step in range(2):
                summary = sess.run(merged, {x: np.full((4, 3), step + 1.0, np.float32)})
                assert type(summary) is bytes
                writer.add_summary(summary, step)
            placement = sess.describe_placement(merged, {x: np.ones((1, 3), np.float32)})
    ps_lines = [line for line in placement.splitlines() if line.startswith("/job:ps/task:0")]
    assert any(weights.op.name in line for line in ps_lines), placement
    assert scalars(tmp_path) == {"loss": [(0, 3.0), (1, 6.0)]}
    histogram = events(tmp_path).Histograms("weights")[1].histogram_value
    assert (histogram.min, histogram.max, histogram.num, histogram.sum) == (1.0, 1.0, 6, 6.0)


# ---- dflow train --logdir ---------------------------------------------------------------
def test_train_logdir_writes_loss_images_per_sec_and_accuracy(tmp_path, capsys):
    assert main(["train", "--model", "mnist_dnn", "--dataset", "digits", "--steps", "30",
                 "--log_every", "10", "--batch_size", "32", "--local", "--logdir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    logged = scalars(tmp_path)
    assert set(logged) == {"loss", "images_per_sec", "accuracy"}
    assert [s for s, _ in logged["loss"]] == [10, 20, 30] == [s for s, _ in logged["images_per_sec"]]
    printed_loss = [float(v) for v in re.findall(r"loss (\d+\.\d{4})", out)]
    assert [v for _, v in logged["loss"]] == pytest.approx(printed_loss, abs=1e-4)
    accuracy = float(re.search(r"test accuracy: (\d\.\d{4})", out).group(1))
    assert logged["accuracy"] == [(30, pytest.approx(accuracy, abs=5e-5))]
    assert all(v > 0 for _, v in logged["images_per_sec"])


def test_train_logdir_on_a_cluster_writes_the_chiefs_progress(tmp_path, capsys):
    assert main(["train", "--model", "mnist_dnn", "--dataset", "digits", "--steps", "20",
                 "--log_every", "10", "--batch_size", "32", "--ps", "1", "--workers", "1", "--sync",
                 "--logdir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    logged = scalars(tmp_path)
    assert [s for s, _ in logged["loss"]] == [10, 20] == [s for s, _ in logged["images_per_sec"]]
    printed_loss = [float(v) for v in re.findall(r"^step \d+/20  loss (\d+\.\d{4})", out, re.M)]
    assert [v for _, v in logged["loss"]] == pytest.approx(printed_loss, abs=1e-4)
    accuracy = float(re.search(r"test accuracy: (\d\.\d{4})", out).group(1))
    assert logged["accuracy"] == [(20, pytest.approx(accuracy, abs=5e-5))]


# ---- the embedding projector (word2vec_basic's last step) ---------------------------------
def test_projector_config_and_the_embedding_values_are_written_for_tensorboard(tmp_path):
    from google.protobuf import text_format
    from tensorboard.plugins.projector.projector_config_pb2 import ProjectorConfig

    from dflow.contrib.tensorboard.plugins import projector

    log_dir = str(tmp_path)
    embeddings = tf.Variable(tf.random_uniform([6, 4], -1.0, 1.0), name="embeddings")
    with tf.Session() as session:
        writer = tf.summary.FileWriter(log_dir, session.graph)
        session.run(tf.global_variables_initializer())
        values = session.run(embeddings)
        config = projector.ProjectorConfig()
        embedding_conf = config.embeddings.add()
        embedding_conf.tensor_name = embeddings.name
        embedding_conf.metadata_path = os.path.join(log_dir, "metadata.tsv")
        projector.visualize_embeddings(writer, config)
    writer.close()
    with open(os.path.join(log_dir, "projector_config.pbtxt")) as f:
        written = text_format.Parse(f.read(), ProjectorConfig())  # TensorBoard's own message
    (embedding,) = written.embeddings
    assert embedding.tensor_name == "embeddings:0" and list(embedding.tensor_shape) == [6, 4]
    assert embedding.metadata_path == os.path.join(log_dir, "metadata.tsv")
    # the projector reads tensor_path (TSV) since it cannot read dflow's checkpoints
    assert np.allclose(np.loadtxt(embedding.tensor_path, delimiter="\t"), values, atol=1e-6)
