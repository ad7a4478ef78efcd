"""tf.data as TF 1.x scripts use it: datasets read by iterator ops inside Session.run, over real
files (MNIST IDX files written from scikit-learn's digits, read as official/mnist's dataset.py
reads them), ending with tf.errors.OutOfRangeError; and an Estimator whose input_fn returns one."""

import json
import logging
import struct

import numpy as np
import pytest
from conftest import digits_in_mnist_frames, local_cluster_fixture

import dflow as tf

cluster = local_cluster_fixture(ps=1, workers=1)


def run_all(sess, fetch):
    """Every value of ``fetch`` until the iterator behind it runs out."""
    values = []
    try:
        while True:
            values.append(sess.run(fetch))
    except tf.errors.OutOfRangeError:
        return values


@pytest.fixture(scope="module")
def idx_files(tmp_path_factory):
    """The digits as MNIST IDX files (28x28 uint8 images, a 16-byte header; labels after 8 bytes)."""
    images, labels = digits_in_mnist_frames()
    folder = tmp_path_factory.mktemp("mnist")
    with open(folder / "images-idx3-ubyte", "wb") as f:
        f.write(struct.pack(">IIII", 2051, len(images), 28, 28) + images.tobytes())
    with open(folder / "labels-idx1-ubyte", "wb") as f:
        f.write(struct.pack(">II", 2049, len(labels)) + labels.tobytes())
    return str(folder / "images-idx3-ubyte"), str(folder / "labels-idx1-ubyte"), images, labels


def mnist_dataset(images_file, labels_file):
    """official/mnist's dataset.dataset(), verbatim in what it calls."""
    def decode_image(image):
        image = tf.decode_raw(image, tf.uint8)
        image = tf.cast(image, tf.float32)
        image = tf.reshape(image, [784])
        return image / 255.0

    def decode_label(label):
        label = tf.decode_raw(label, tf.uint8)
        return tf.to_int32(label)

    images = tf.data.FixedLengthRecordDataset(images_file, 28 * 28, header_bytes=16).map(decode_image)
    labels = tf.data.FixedLengthRecordDataset(labels_file, 1, header_bytes=8).map(decode_label)
    return tf.data.Dataset.zip((images, labels))


def test_slices_map_batch_one_shot_ends_with_out_of_range():
    with tf.Graph().as_default():
        data = tf.data.Dataset.from_tensor_slices(([1, 2, 3, 4, 5], [10, 20, 30, 40, 50]))
        data = data.map(lambda x, y: x + y).batch(2)
        assert data.output_types == tf.int32 and data.output_shapes.as_list() == [None]
        next_batch = data.make_one_shot_iterator().get_next()
        with tf.Session() as sess:
            assert [b.tolist() for b in run_all(sess, next_batch)] == [[11, 22], [33, 44], [55]]
            with pytest.raises(tf.errors.OutOfRangeError):
                sess.run(next_batch)


def test_fixed_length_records_read_the_idx_files_as_official_mnist(idx_files):
    images_file, labels_file, images, labels = idx_files
    with tf.Graph().as_default():
        data = mnist_dataset(images_file, labels_file).batch(500)
        assert data.output_types == (tf.float32, tf.int32)
        assert [s.as_list() for s in data.output_shapes] == [[None, 784], [None, None]]
        image_batch, label_batch = data.make_one_shot_iterator().get_next()
        with tf.Session() as sess:
            batches = run_all(sess, [image_batch, label_batch])
    assert [len(b[0]) for b in batches] == [500, 500, 500, 297]
    read_images = np.concatenate([b[0] for b in batches])
    np.testing.assert_allclose(read_images, images.reshape(-1, 784) / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(np.concatenate([b[1] for b in batches])[:, 0], labels)


def test_a_file_that_is_not_whole_records_says_so(tmp_path):
    path = tmp_path / "odd.bin"
    path.write_bytes(bytes(10))
    with tf.Graph().as_default():
        record = tf.data.FixedLengthRecordDataset(str(path), 4, header_bytes=1).make_one_shot_iterator()
        with tf.Session() as sess, pytest.raises(tf.errors.InvalidArgumentError, match="header_bytes=1"):
            sess.run(record.get_next())


def test_shuffle_permutes_each_epoch_differently_and_a_graph_seed_repeats_it():
    def epochs(seed):
        with tf.Graph().as_default():
            tf.set_random_seed(seed)
            data = tf.data.Dataset.range(20).shuffle(buffer_size=20).repeat(3)
            element = data.make_one_shot_iterator().get_next()
            with tf.Session() as sess:
                values = [int(v) for v in run_all(sess, element)]
        return [values[i:i + 20] for i in (0, 20, 40)]

    first = epochs(7)
    assert all(sorted(epoch) == list(range(20)) for epoch in first)
    assert first[0] != first[1] and first[0] != list(range(20))
    assert epochs(7) == first and epochs(8) != first


def test_shuffle_buffer_mixes_only_nearby_elements():
    # (1,000 elements: the full buffer's draws come in blocks of 256, several of them)
    with tf.Graph().as_default():
        data = tf.data.Dataset.range(1000).shuffle(buffer_size=2, seed=1)
        element = data.make_one_shot_iterator().get_next()
        with tf.Session() as sess:
            values = [int(v) for v in run_all(sess, element)]
    assert sorted(values) == list(range(1000)) and values != list(range(1000))
    assert all(v <= i + 1 for i, v in enumerate(values))  # a buffer of 2 holds at most one element back
    assert 300 < sum(v == i + 1 for i, v in enumerate(values)) < 700  # the newer one, half the time


def test_repeat_take_skip_filter_concatenate_cache():
    with tf.Graph().as_default():
        evens = tf.data.Dataset.range(10).filter(lambda x: tf.equal(x % 2, 0))
        data = evens.skip(1).take(3).concatenate(tf.data.Dataset.range(100, 102)).repeat(2)
        element = data.make_one_shot_iterator().get_next()
        counter = tf.Variable(0, dtype=tf.int64)
        counted = tf.data.Dataset.range(3).map(lambda x: x + counter).cache().repeat(2)
        counted_element = counted.make_one_shot_iterator().get_next()
        with tf.Session() as sess:
            assert [int(v) for v in run_all(sess, element)] == [2, 4, 6, 100, 101] * 2
            sess.run(counter.initializer)
            first_pass = [int(sess.run(counted_element)) for _ in range(3)]
            sess.run(counter.assign(10))  # the map ran in the first pass only: the cache replays it
            assert first_pass + [int(v) for v in run_all(sess, counted_element)] == [0, 1, 2] * 2


def test_initializable_iterator_over_fed_arrays_restarts():
    with tf.Graph().as_default():
        features = tf.placeholder(tf.float32, [None, 2])
        labels = tf.placeholder(tf.int64, [None])
        data = tf.data.Dataset.from_tensor_slices({"x": features, "y": labels}).batch(2)
        iterator = data.make_initializable_iterator()
        batch = iterator.get_next()
        assert sorted(batch) == ["x", "y"] and batch["x"].shape.as_list() == [None, 2]
        with tf.Session() as sess:
            with pytest.raises(tf.errors.FailedPreconditionError, match="initializer"):
                sess.run(batch)
            for n in (3, 4):
                sess.run(iterator.initializer, {features: np.ones((n, 2)) * np.arange(n)[:, None],
                                                labels: np.arange(n)})
                got = run_all(sess, batch)
                assert [b["y"].tolist() for b in got] == [list(range(n))[i:i + 2] for i in range(0, n, 2)]
                assert got[0]["x"].dtype == np.float32


def test_reinitializable_iterator_switches_between_datasets():
    with tf.Graph().as_default():
        train = tf.data.Dataset.range(5).map(lambda x: tf.cast(x, tf.float32) * 2.0)
        test = tf.data.Dataset.from_tensors(-1.0)
        iterator = tf.data.Iterator.from_structure(train.output_types, train.output_shapes)
        value = iterator.get_next()
        start_train, start_test = iterator.make_initializer(train), iterator.make_initializer(test)
        with tf.Session() as sess:
            sess.run(start_train)
            assert float(sess.run(value)) == 0.0 and float(sess.run(value)) == 2.0
            sess.run(start_test)
            assert run_all(sess, value) == [-1.0]
        with pytest.raises(TypeError, match="do not match"):
            iterator.make_initializer(tf.data.Dataset.range(3))


def test_feedable_iterator_reads_the_iterator_whose_handle_is_fed():
    with tf.Graph().as_default():
        train = tf.data.Dataset.range(100).repeat()
        validation = tf.data.Dataset.range(1000, 1003)
        handle = tf.placeholder(tf.string, shape=[])
        iterator = tf.data.Iterator.from_string_handle(handle, train.output_types, train.output_shapes)
        element = iterator.get_next()
        train_iterator = train.make_one_shot_iterator()
        validation_iterator = tf.data.make_initializable_iterator(validation)
        with tf.Session() as sess:
            train_handle, validation_handle = sess.run([train_iterator.string_handle(),
                                                        validation_iterator.string_handle()])
            assert isinstance(train_handle, bytes)
            assert [int(sess.run(element, {handle: train_handle})) for _ in range(3)] == [0, 1, 2]
            sess.run(validation_iterator.initializer)
            validation_values = run_all_fed(sess, element, {handle: validation_handle})
            assert [int(v) for v in validation_values] == [1000, 1001, 1002]
            assert int(sess.run(element, {handle: train_handle})) == 3  # the training position is kept
            with pytest.raises(tf.errors.InvalidArgumentError, match="not the string handle"):
                sess.run(element, {handle: b"no such iterator"})


def run_all_fed(sess, fetch, feed):
    values = []
    try:
        while True:
            values.append(sess.run(fetch, feed))
    except tf.errors.OutOfRangeError:
        return values


def test_from_generator_checks_what_it_yields():
    def pairs(n):
        for i in range(n):
            yield np.full(i + 1, i, np.float64), f"item {i}"

    with tf.Graph().as_default():
        data = tf.data.Dataset.from_generator(pairs, (tf.float32, tf.string), ([None], []), args=(3,))
        vector, text = tf.data.make_one_shot_iterator(data).get_next()
        assert vector.shape.as_list() == [None] and tf.data.get_output_types(data) == (tf.float32, tf.string)
        bad = tf.data.Dataset.from_generator(lambda: iter([[1, 2]]), tf.int32, []).make_one_shot_iterator()
        with tf.Session() as sess:
            got = run_all(sess, [vector, text])
            with pytest.raises(tf.errors.InvalidArgumentError, match=r"\(2,\), but output_shapes says \[\]"):
                sess.run(bad.get_next())
    assert [(v.tolist(), t) for v, t in got] == [([0.0], b"item 0"), ([1.0, 1.0], b"item 1"),
                                                ([2.0] * 3, b"item 2")]
    assert got[0][0].dtype == np.float32


def test_experimental_transformations():
    with tf.Graph().as_default():
        data = tf.data.Dataset.range(6).apply(tf.data.experimental.shuffle_and_repeat(6, count=2, seed=3))
        data = data.apply(tf.data.experimental.map_and_batch(lambda x: x * 10, 4, drop_remainder=True))
        data = data.prefetch(tf.data.experimental.AUTOTUNE)
        assert data.output_shapes.as_list() == [4]
        batch = data.make_one_shot_iterator().get_next()
        with tf.Session() as sess:
            batches = run_all(sess, batch)
    values = np.concatenate(batches)
    assert len(batches) == 3 and sorted(values.tolist()) == sorted(list(range(0, 60, 10)) * 2)


def test_unsupported_parts_name_themselves():
    with tf.Graph().as_default():
        data = tf.data.Dataset.range(3)
        with pytest.raises(TypeError, match="interleave / flat_map must return a dataset"):
            data.flat_map(lambda x: x)
        with pytest.raises(RuntimeError, match="make_one_shot_iterator"):
            iter(data)
        with pytest.raises(ValueError, match="no initializer"):
            _ = data.make_one_shot_iterator().initializer


def test_iterators_on_a_dask_worker_keep_their_position_there(idx_files, target):
    images_file, labels_file, _, labels = idx_files
    with tf.Graph().as_default():
        with tf.device("/job:worker/task:0"):
            iterator = mnist_dataset(images_file, labels_file).batch(1000).make_initializable_iterator()
            _, label_batch = iterator.get_next()
            count = tf.data.Dataset.range(2).make_one_shot_iterator().get_next()
            generated = tf.data.Dataset.from_generator(lambda: iter([1]), tf.int64).make_one_shot_iterator()
        with tf.Session(target) as sess:
            for _ in range(2):  # the initializer starts the worker's stream again
                sess.run(iterator.initializer)
                read = run_all(sess, label_batch)
                assert [len(b) for b in read] == [1000, 797]
                np.testing.assert_array_equal(np.concatenate(read)[:, 0], labels)
            assert run_all(sess, count) == [0, 1]
            with pytest.raises(tf.errors.InvalidArgumentError, match="in the process that built the graph"):
                sess.run(generated.get_next())


def test_a_pipeline_survives_the_graph_as_plain_data(idx_files):
    images_file, labels_file, _, labels = idx_files
    with tf.Graph().as_default() as graph:
        data = mnist_dataset(images_file, labels_file).filter(lambda image, label: label[0] > 4).batch(50)
        _, label_batch = data.make_one_shot_iterator().get_next(name="next_labels")
        graph_def = json.loads(json.dumps(graph.as_graph_def()))  # JSON: no pickled functions
    with tf.Graph().as_default() as copy:
        tf.import_graph_def(graph_def, copy)
        with tf.Session() as sess:
            read = run_all(sess, copy.get_tensor_by_name("next_labels:1"))
    np.testing.assert_array_equal(np.concatenate(read)[:, 0], labels[labels > 4])


def test_text_lines(tmp_path):
    path = tmp_path / "lines.txt"
    path.write_text("first line\nsecond\r\n\nlast")
    with tf.Graph().as_default():
        line = tf.data.TextLineDataset([str(path)]).make_one_shot_iterator().get_next()
        with tf.Session() as sess:
            assert run_all(sess, line) == [b"first line", b"second", b"", b"last"]


def test_tf_test_and_device_lib_describe_this_machine():
    from dflow.python.client import device_lib

    devices = device_lib.list_local_devices()
    assert devices[0].device_type == "CPU" and devices[0].memory_limit > 0
    gpus = [d for d in devices if d.device_type == "GPU"]
    assert tf.test.is_gpu_available() == bool(gpus)
    assert tf.test.gpu_device_name() == ("/device:GPU:0" if gpus else "")
    assert isinstance(tf.test.is_built_with_cuda(), bool)


class SquareTest(tf.test.TestCase):
    def test_square(self):
        with self.session() as sess:
            self.assertAllClose(sess.run(tf.square([2.0, 3.0])), [4.0, 9.0])


def mnist_model_fn(features, labels, mode):
    """official/mnist's model_fn, smaller: a hidden layer instead of the convolutions."""
    hidden = tf.layers.dense(features, 64, activation=tf.nn.relu)
    logits = tf.layers.dense(hidden, 10)
    if mode == tf.estimator.ModeKeys.PREDICT:
        predictions = {"classes": tf.argmax(logits, axis=1)}
        return tf.estimator.EstimatorSpec(mode, predictions=predictions, export_outputs={
            "classify": tf.estimator.export.PredictOutput(predictions)})
    loss = tf.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)  # labels are (n, 1)
    accuracy = tf.metrics.accuracy(labels=labels, predictions=tf.argmax(logits, axis=1))
    if mode == tf.estimator.ModeKeys.EVAL:
        return tf.estimator.EstimatorSpec(mode, loss=loss, eval_metric_ops={"accuracy": accuracy})
    tf.identity(accuracy[1], name="train_accuracy")
    train_op = tf.train.AdamOptimizer(3e-3).minimize(loss, tf.train.get_or_create_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)


def test_estimator_trains_on_a_dataset_until_it_ends(idx_files, tmp_path, caplog):
    images_file, labels_file, frames, labels = idx_files

    def train_input_fn():
        return mnist_dataset(images_file, labels_file).take(1400).cache().shuffle(1400).batch(100).repeat(10)

    def eval_input_fn():
        data = mnist_dataset(images_file, labels_file).skip(1400).batch(100)
        return data.make_one_shot_iterator().get_next()

    classifier = tf.estimator.Estimator(mnist_model_fn, model_dir=str(tmp_path),
                                        config=tf.estimator.RunConfig(tf_random_seed=1))
    hook = tf.train.LoggingTensorHook({"train_accuracy": "train_accuracy"}, every_n_iter=20)
    with caplog.at_level(logging.INFO, logger="dflow"):
        classifier.train(train_input_fn, hooks=[hook])
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("train_accuracy = ")]
    assert len(logged) == 7 and float(logged[-1].split(" = ")[1]) > 0.5
    results = classifier.evaluate(eval_input_fn)
    assert results["global_step"] == 10 * 14  # ten epochs of 14 batches, then OutOfRangeError
    # 0.897-0.907 over graph seeds 0-5 (the last 397 digits are the hardest); wrong labels give ~0.1
    assert results["accuracy"] > 0.87, results
    predictions = list(classifier.predict(lambda: mnist_dataset(images_file, labels_file).skip(1790).batch(4)
                                          .map(lambda image, label: image)))
    assert len(predictions) == 7
    assert np.mean([p["classes"] for p in predictions] == labels[1790:]) >= 5 / 7

    def serving_fn():  # official/mnist's receiver of a batch of images
        image = tf.placeholder(tf.float32, [None, 784], name="image")
        return tf.estimator.export.TensorServingInputReceiver(image, {"image": image})

    export_dir = classifier.export_savedmodel(str(tmp_path / "export"), serving_fn)
    with tf.Graph().as_default(), tf.Session() as sess:
        signature = tf.saved_model.loader.load(sess, ["serve"], export_dir).signature_def["classify"]
        images = frames[1790:].reshape(-1, 784).astype(np.float32) / 255.0  # as decode_image makes them
        classes = sess.run(signature.outputs["classes"].name, {signature.inputs["image"].name: images})
    assert classes.tolist() == [p["classes"] for p in predictions]


def test_padded_batch_pads_as_tensorflow_does():
    """TensorFlow 2.21's (compat.v1) batches of the same pipeline: tuples and dicts, None dims padded
    to the batch's longest, fixed dims, padding values, strings."""
    with tf.Graph().as_default():
        words = tf.data.Dataset.from_tensor_slices(np.array([3, 1, 4, 2], np.int64))
        pairs = words.map(lambda n: (tf.fill(tf.stack([n]), tf.cast(n, tf.float32)),
                                     tf.fill(tf.stack([n, 2]), n), n))
        pairs = pairs.padded_batch(2, padded_shapes=([None], [5, None], []),
                                   padding_values=(-1.0, tf.constant(9, tf.int64), tf.constant(0, tf.int64)))
        named = words.map(lambda n: {"ids": tf.fill(tf.stack([n]), n), "name": tf.constant("x")})
        named = named.padded_batch(3, padded_shapes={"ids": [6], "name": []})
        assert named.output_shapes["ids"].as_list() == [None, 6]
        pair, name = pairs.make_one_shot_iterator().get_next(), named.make_one_shot_iterator().get_next()
        with tf.Session() as sess:
            first, second = [[v.tolist() for v in sess.run(pair)] for _ in range(2)]
            named_batches = [sess.run(name) for _ in range(2)]
        with pytest.raises(ValueError, match=r"padded shape \[2\] does not fit elements of shape \[3\]"):
            tf.data.Dataset.from_tensors(tf.zeros([3])).padded_batch(2, [2])
        too_long = tf.data.Dataset.range(1, 5).map(lambda n: tf.fill(tf.stack([n]), n)).padded_batch(4, [3])
        with tf.Session() as sess, pytest.raises(tf.errors.InvalidArgumentError, match="larger than the"):
            sess.run(too_long.make_one_shot_iterator().get_next())
    assert first == [[[3.0, 3.0, 3.0], [1.0, -1.0, -1.0]],
                     [[[3, 3], [3, 3], [3, 3], [9, 9], [9, 9]], [[1, 1], [9, 9], [9, 9], [9, 9], [9, 9]]],
                     [3, 1]]
    assert second[0] == [[4.0, 4.0, 4.0, 4.0], [2.0, 2.0, -1.0, -1.0]]
    assert named_batches[0]["ids"].tolist() == [[3, 3, 3, 0, 0, 0], [1, 0, 0, 0, 0, 0], [4, 4, 4, 4, 0, 0]]
    assert named_batches[1]["ids"].tolist() == [[2, 2, 0, 0, 0, 0]]
    assert named_batches[1]["name"].tolist() == [b"x"]


def test_contrib_and_experimental_transformations_apply():
    with tf.Graph().as_default():
        numbers = tf.data.Dataset.range(1, 4)
        spread = numbers.apply(tf.contrib.data.parallel_interleave(
            lambda n: tf.data.Dataset.from_tensor_slices(tf.fill(tf.stack([n]), n)), cycle_length=3))
        whole = numbers.apply(tf.data.experimental.batch_and_drop_remainder(2))
        assert whole.output_shapes.as_list() == [2]
        with tf.Session() as sess:
            assert run_all(sess, spread.make_one_shot_iterator().get_next()) == [1, 2, 3, 2, 3, 3]
            assert [b.tolist() for b in run_all(sess, whole.make_one_shot_iterator().get_next())] == [[1, 2]]


def test_counts_given_as_tensors_are_read_when_the_iterator_starts():
    """The train/test switch through one initializable iterator: a batch size (and a shuffle
    buffer, a repeat count) fed at each initialization, as TF 1.x takes them."""
    rows = tf.placeholder(tf.float32, [None, 2])
    batch_size, epochs = tf.placeholder(tf.int64, []), tf.placeholder(tf.int64, [])
    iterator = (tf.data.Dataset.from_tensor_slices(rows).shuffle(batch_size).batch(batch_size)
                .repeat(epochs).make_initializable_iterator())
    batch = iterator.get_next()
    assert batch.shape.as_list() == [None, 2]
    with tf.Session() as sess:
        sess.run(iterator.initializer, {rows: np.ones((10, 2)), batch_size: 4, epochs: 1})
        assert [sess.run(batch).shape[0] for _ in range(3)] == [4, 4, 2]
        with pytest.raises(tf.errors.OutOfRangeError):
            sess.run(batch)
        sess.run(iterator.initializer, {rows: np.ones((6, 2)), batch_size: 6, epochs: 2})
        assert [sess.run(batch).shape[0] for _ in range(2)] == [6, 6]
        with pytest.raises(tf.errors.InvalidArgumentError, match="buffer_size must be at least 1, got 0"):
            sess.run(iterator.initializer, {rows: np.ones((6, 2)), batch_size: 0, epochs: 1})
            sess.run(batch)
    with pytest.raises(TypeError, match="batch_size must be a scalar integer tensor"):
        tf.data.Dataset.range(3).batch(tf.constant(2.0))
