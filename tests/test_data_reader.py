"""Streaming stores: shards, shuffling, prefetch, transforms, graphs, remote stores, damage."""

from __future__ import annotations

import json
import os
import shutil
import zipfile

import array_api_compat.numpy as xp
import numpy as np
import pytest

import dflow as tf
from dflow.data import Dataset, open_store, prepare, transforms
from dflow.errors import DataLossError, FailedPreconditionError, NotFoundError, OutOfRangeError


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    """1,000 examples of 6x6x3, 10 classes, in 40 chunks of 25."""
    out = str(tmp_path_factory.mktemp("data") / "s.zarr")
    return prepare("synthetic", out=out, chunk_examples=25, echo=None, image_shape=(6, 6, 3),
                   train_count=1000, test_count=50, seed=7)


def _ids(images) -> list[bytes]:
    return [image.tobytes() for image in np.asarray(images)]


def _epoch(store, **kwargs) -> list:
    with Dataset(store, "train", num_epochs=1, **kwargs) as data:
        return list(data)


@pytest.mark.parametrize("count", [1, 3, 7])
def test_shards_cover_every_example_once_per_epoch(store, count):
    everything = _ids(open_store(store)["train/images"][...])
    seen = []
    for index in range(count):
        batches = _epoch(store, batch_size=16, shard=(index, count), seed=3)
        shard = [i for images, _ in batches for i in _ids(images)]
        data = Dataset(store, "train", 16, shard=(index, count))
        assert len(shard) == data.examples_per_epoch and len(batches) == data.steps_per_epoch
        seen += shard
    assert sorted(seen) == sorted(everything)  # every example once, no overlap


def test_shards_are_strided_chunks(store):
    data = Dataset(store, "train", 10, shard=(1, 3))
    assert data.chunk_ids == list(range(1, 40, 3))
    assert data.examples_per_epoch == 13 * 25


def test_labels_travel_with_their_images(store):
    root = open_store(store)
    label_of = dict(zip(_ids(root["train/images"][...]), root["train/labels"][...].tolist()))
    for images, labels in _epoch(store, batch_size=64, seed=1, shuffle_buffer=100):
        assert [label_of[i] for i in _ids(images)] == labels.tolist()


def test_same_seed_same_batches_with_or_without_prefetch(store):
    a = _epoch(store, batch_size=32, seed=5, prefetch=0)
    b = _epoch(store, batch_size=32, seed=5, prefetch=3)
    c = _epoch(store, batch_size=32, seed=6)
    assert all(np.array_equal(x[0], y[0]) for x, y in zip(a, b)) and len(a) == len(b)
    assert not np.array_equal(a[0][0], c[0][0])


def test_epochs_reshuffle_deterministically(store):
    with Dataset(store, "train", 1000, seed=2, num_epochs=3) as data:
        epochs = [_ids(images) for images, _ in data]
    assert len(epochs) == 3 and sorted(epochs[0]) == sorted(epochs[1])
    assert epochs[0] != epochs[1] != epochs[2]
    with Dataset(store, "train", 1000, seed=2, num_epochs=3) as again:
        assert [_ids(images) for images, _ in again] == epochs


def test_unshuffled_reads_in_stored_order(store):
    batches = _epoch(store, batch_size=300, shuffle=False)
    assert [len(labels) for _, labels in batches] == [300, 300, 300, 100]
    stored = open_store(store)["train/images"][...]
    np.testing.assert_array_equal(np.concatenate([b[0] for b in batches]), stored)


def test_drop_remainder_and_the_end_of_data(store):
    with Dataset(store, "train", 300, num_epochs=2, drop_remainder=True) as data:
        assert data.steps_per_epoch == 3
        assert [len(labels) for _, labels in data] == [300] * 6
        with pytest.raises(StopIteration):
            next(data)


def test_prefetch_reports_waiting(store):
    with Dataset(store, "train", 50, num_epochs=1, prefetch=2) as data:
        list(data)
    assert data.batches_served == 21  # 20 batches and the end
    assert 0 < data.wait_seconds < 5


def test_synthetic_flag_serves_one_batch_without_reading(store):
    with Dataset(store, "train", 40, synthetic=True, num_epochs=1) as data:
        first = next(data)
        assert all(next(data)[0] is first[0] for _ in range(100))  # past the epoch: no reading


def test_cifar10_transforms_shapes_and_statistics():
    rng = np.random.default_rng(0)
    batch = rng.integers(0, 256, (8, 32, 32, 3), dtype=np.uint8)
    train = transforms.cifar10_train(xp, batch, np.random.default_rng(1))
    again = transforms.cifar10_train(xp, batch, np.random.default_rng(1))
    evaluation = transforms.cifar10_eval(xp, batch)
    assert train.shape == evaluation.shape == (8, 24, 24, 3) and train.dtype == np.float32
    np.testing.assert_array_equal(train, again)
    np.testing.assert_allclose(evaluation.mean(axis=(1, 2, 3)), 0, atol=1e-5)
    np.testing.assert_allclose(evaluation.std(axis=(1, 2, 3)), 1, atol=1e-4)
    center = batch[:, 4:28, 4:28].astype(np.float32)
    axes = (1, 2, 3)
    expected = (center - center.mean(axis=axes, keepdims=True)) / center.std(axis=axes, keepdims=True)
    np.testing.assert_allclose(evaluation, expected, atol=1e-5)


def test_random_crop_and_flip_take_real_windows():
    batch = np.arange(4 * 8 * 8 * 1, dtype=np.uint8).reshape(4, 8, 8, 1)
    crops = transforms.random_crop(xp, batch, np.random.default_rng(0), 5)
    for image, crop in zip(batch, crops):
        windows = np.lib.stride_tricks.sliding_window_view(image, (5, 5, 1)).reshape(-1, 5, 5, 1)
        assert any(np.array_equal(crop, w) for w in windows)
    flipped = transforms.random_flip_left_right(xp, batch, np.random.default_rng(3))
    for image, out in zip(batch, flipped):
        assert np.array_equal(out, image) or np.array_equal(out, image[:, ::-1])
    with pytest.raises(ValueError, match="cannot crop 9x9 from 8x8"):
        transforms.random_crop(xp, batch, np.random.default_rng(0), 9)


def test_nchw_output(store):
    as_float = lambda xp, x, rng: xp.astype(x, xp.float32)
    with Dataset(store, "train", 10, data_format="NCHW", transform=as_float) as data:
        images, _ = next(data)
    assert images.shape == (10, 3, 6, 6) and images.dtype == np.float32
    assert data.output_spec == ((3, 6, 6), np.dtype("float32"))


def test_placeholder_feed_trains(tmp_path):
    store = prepare("digits", out=str(tmp_path / "digits.zarr"), echo=None, size=8)
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [None, 8, 8, 1])
        y = tf.placeholder(tf.int64, [None])
        logits = tf.matmul(tf.reshape(x / 255.0, [-1, 64]), tf.Variable(tf.zeros([64, 10])))
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        train = tf.train.GradientDescentOptimizer(0.5).minimize(loss)
        with tf.Session() as sess, Dataset(store, "train", 100, num_epochs=5, seed=0) as data:
            sess.run(tf.global_variables_initializer())
            losses = [sess.run([train, loss], {x: images, y: labels})[1] for images, labels in data]
    assert len(losses) == 5 * 15 and np.mean(losses[-10:]) < 0.5 * losses[0]


def test_input_op_pulls_batches_in_the_session(store):
    with tf.Graph().as_default():
        data = Dataset(store, "train", 250, num_epochs=1, seed=9)
        images, labels = data.get_next()
        assert images.shape.as_list() == [None, 6, 6, 3] and labels.dtype == tf.int64
        total = tf.reduce_sum(tf.cast(labels, tf.int32))
        pulled = []
        with tf.Session() as sess:
            for _ in range(4):
                batch, _ = sess.run([images, total])
                pulled += _ids(batch)
            with pytest.raises(OutOfRangeError, match="End of sequence"):
                sess.run(images)
    assert pulled == [i for b, _ in _epoch(store, batch_size=250, seed=9) for i in _ids(b)]


def test_input_op_with_transform_feeds_the_cifar10_model(tmp_path):
    from dflow.models import cifar10

    store = prepare("synthetic", out=str(tmp_path / "c.zarr"), echo=None, image_shape=(32, 32, 3),
                    train_count=64, test_count=0)
    with tf.Graph().as_default():
        data = Dataset(store, "train", 16, transform="cifar10_train", drop_remainder=True)
        images, labels = data.get_next()
        assert images.shape.as_list() == [16, 24, 24, 3]
        loss = cifar10.loss(cifar10.inference(images), labels)
        train = tf.train.GradientDescentOptimizer(0.01).minimize(loss)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            assert all(np.isfinite(sess.run([train, loss])[1]) for _ in range(6))  # past one epoch


def test_input_op_refuses_a_callable_transform(store):
    with tf.Graph().as_default(), pytest.raises(ValueError, match="needs the transform by name"):
        Dataset(store, "train", 10, transform=lambda xp, x, rng: x).get_next()


def test_zip_store(store, tmp_path):
    archive = str(tmp_path / "s.zip")
    with zipfile.ZipFile(archive, "w") as z:
        for directory, _, files in os.walk(store):
            for name in files:
                full = os.path.join(directory, name)
                z.write(full, os.path.relpath(full, store))
    a, b = _epoch(archive, batch_size=100, seed=4), _epoch(store, batch_size=100, seed=4)
    assert all(np.array_equal(x[0], y[0]) for x, y in zip(a, b)) and len(a) == len(b) == 10


def test_fsspec_memory_url(store):
    import fsspec

    memory = fsspec.filesystem("memory")
    for directory, _, files in os.walk(store):
        for name in files:
            full = os.path.join(directory, name)
            with open(full, "rb") as f:
                memory.pipe(f"/reader-test.zarr/{os.path.relpath(full, store)}", f.read())
    a, b = _epoch("memory://reader-test.zarr", batch_size=100, seed=4), _epoch(store, batch_size=100, seed=4)
    assert all(np.array_equal(x[0], y[0]) for x, y in zip(a, b)) and len(a) == 10


# ---- damaged stores and bad arguments --------------------------------------------------------------
@pytest.fixture
def copy(store, tmp_path) -> str:
    target = str(tmp_path / "copy.zarr")
    shutil.copytree(store, target)
    return target


def _set_root_attribute(path: str, key: str, value) -> None:
    meta_path = os.path.join(path, "zarr.json")
    with open(meta_path) as f:
        meta = json.load(f)
    meta["attributes"][key] = value
    with open(meta_path, "w") as f:
        json.dump(meta, f)


def test_store_of_another_format(copy):
    _set_root_attribute(copy, "dflow_dataset_format", 2)
    with pytest.raises(FailedPreconditionError, match="store format 2; this dflow .* reads format 1"):
        Dataset(copy, "train", 10)


def test_store_with_a_missing_array(copy):
    shutil.rmtree(os.path.join(copy, "test", "labels"))
    with pytest.raises(NotFoundError, match="has no array test/labels"):
        Dataset(copy, "train", 10)


def test_missing_store_and_split(store, tmp_path):
    with pytest.raises(NotFoundError, match="no dataset store at .*dflow data prepare"):
        Dataset(str(tmp_path / "nothing.zarr"), "train", 10)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"no split 'validation'; it has \['train'"):
        Dataset(store, "validation", 10)


def test_corrupt_chunk_names_store_array_and_chunk(copy):
    chunk_file = os.path.join(copy, "train", "images", "c", "17", "0", "0", "0")
    with open(chunk_file, "r+b") as f:
        f.seek(10)
        f.write(b"\xff" * 40)
    with pytest.raises(DataLossError, match=r"chunk 17 of array train/images in .*copy\.zarr .*corrupt"):
        _epoch(copy, batch_size=10, prefetch=2)


def test_missing_chunk_and_labels_out_of_range_in_an_unchecked_store(store, tmp_path):
    """A store written before dflow checked chunks: damage to its labels is still caught where it
    can be (tests/test_checked_data.py: checked stores)."""
    import zarr

    from dflow.bench.checked_reads import unchecked_copy

    copy = unchecked_copy(store, str(tmp_path / "unchecked.zarr"))
    labels = zarr.open_array(os.path.join(copy, "train", "labels"), mode="r+")
    labels[30:32] = [3, 12]  # chunk 1
    with pytest.raises(DataLossError, match=r"chunk 1 of array train/labels .* out of range \[0, 10\) "
                                            r"\(e\.g\. 12 at example 31"):
        _epoch(copy, batch_size=10, shuffle=False)
    os.remove(os.path.join(copy, "train", "labels", "c", "5"))
    with pytest.raises(DataLossError, match="chunk 5 .* -1 means the chunk is missing"):
        Dataset(copy, "train", 10, shard=(5, 40), num_epochs=1).__next__()


@pytest.mark.parametrize("kwargs, message", [
    ({"shard": (2, 2)}, r"0 <= index < count, got \(2, 2\)"),
    ({"shard": (0, 41)}, "cannot deal 40 chunks out to 41 shards"),
    ({"batch_size": 0}, "batch_size and shuffle_buffer must be at least 1"),
    ({"num_epochs": 0}, "num_epochs must be at least 1"),
    ({"data_format": "NWHC"}, "data_format must be 'NHWC' or 'NCHW'"),
    ({"transform": "no_such_transform"}, "unknown transform 'no_such_transform'"),
])
def test_bad_arguments(store, kwargs, message):
    with pytest.raises(ValueError, match=message):
        Dataset(store, **{"split": "train", "batch_size": 10, **kwargs})


def test_cli_prepare_info_and_errors(tmp_path, capsys):
    from dflow.cli import main

    out = str(tmp_path / "s.zarr")
    assert main(["data", "prepare", "synthetic", "--shape", "4,4,1", "--count", "32", "--test_count", "0",
                 "--out", out]) == 0
    assert "train: images (32, 4, 4, 1) uint8 in chunks of 2" in capsys.readouterr().out
    assert main(["data", "info", out]) == 0
    assert "synthetic (written by dflow" in capsys.readouterr().out
    assert main(["data", "prepare", "mnist"]) == 1
    assert "--source is required" in capsys.readouterr().err
    assert main(["data", "info", str(tmp_path / "none.zarr")]) == 1
