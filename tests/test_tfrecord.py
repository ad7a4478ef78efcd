"""TFRecord files and tf.train.Example: files TensorFlow wrote read here, values parsed as TensorFlow
parses them, damaged files refused.

``tests/data/tensorflow_examples.tfrecord{,.gz,.zlib}`` were written by TensorFlow 2.21
(``tf.io.TFRecordWriter`` with no, GZIP and ZLIB compression) from four Examples: record ``i`` has
``label = [i, -i - 1]``, ``pixels = [i / 4, 1.5, -2.0]``, ``name = b"record i"`` and, except record
1, ``tags = range(i)``. The values expected below are what TensorFlow's own ``parse_example``
returned for that file (files dflow writes were read back by TensorFlow too, outside this suite).
"""

import os

import numpy as np
import pytest
from namespaces import OTHER_NAMESPACES, assert_same_on

import dflow as tf
from dflow.errors import DataLossError, InvalidArgumentError

DATA = os.path.join(os.path.dirname(__file__), "data", "tensorflow_examples.tfrecord")
COMPRESSIONS = [("", None), (".gz", "GZIP"), (".zlib", "ZLIB")]
FEATURES = {"label": tf.FixedLenFeature([2], tf.int64), "pixels": tf.FixedLenFeature([3], tf.float32),
            "name": tf.FixedLenFeature([], tf.string), "tags": tf.VarLenFeature(tf.int64),
            "seq": tf.FixedLenSequenceFeature([], tf.int64, allow_missing=True)}
# TensorFlow 2.21's parse_example of the whole file as one batch
TF_TAGS = ([[2, 0], [2, 1], [3, 0], [3, 1], [3, 2]], [0, 1, 0, 1, 2], [4, 3])
TF_LABELS = [[0, -1], [1, -2], [2, -3], [3, -4]]
TF_PIXELS = [[0.0, 1.5, -2.0], [0.25, 1.5, -2.0], [0.5, 1.5, -2.0], [0.75, 1.5, -2.0]]


@pytest.fixture(autouse=True)
def _graph():
    with tf.Graph().as_default():
        yield


def _example(**features) -> tf.train.Example:
    def feature(values):
        if isinstance(values[0], bytes):
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
        if isinstance(values[0], float):
            return tf.train.Feature(float_list=tf.train.FloatList(value=values))
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    return tf.train.Example(features=tf.train.Features(feature={k: feature(v) for k, v in features.items()}))


@pytest.mark.parametrize("suffix, compression", COMPRESSIONS)
def test_tensorflows_files_parse_to_tensorflows_values(suffix, compression):
    records = list(tf.python_io.tf_record_iterator(DATA + suffix, tf.python_io.TFRecordOptions(compression)))
    assert [tf.train.Example.FromString(r).features.feature["name"].bytes_list.value[0] for r in records] == [
        b"record 0", b"record 1", b"record 2", b"record 3"]
    serialized = tf.data.TFRecordDataset(DATA + suffix, compression_type=compression).batch(10)
    records_tensor = serialized.make_one_shot_iterator().get_next()
    parsed = tf.parse_example(records_tensor, FEATURES)
    with tf.Session() as sess:
        values = sess.run(parsed)
    assert values["label"].tolist() == TF_LABELS and values["label"].dtype == np.int64
    np.testing.assert_array_equal(values["pixels"], np.float32(TF_PIXELS))
    assert values["name"].tolist() == [b"record 0", b"record 1", b"record 2", b"record 3"]
    tags = values["tags"]
    assert isinstance(tags, tf.SparseTensorValue)
    assert (tags.indices.tolist(), tags.values.tolist(), tags.dense_shape.tolist()) == TF_TAGS
    assert values["seq"].shape == (4, 0)


def test_the_queue_reader_reads_tensorflows_gzip_file_with_offsets_as_keys():
    files = tf.train.string_input_producer([DATA + ".gz"], num_epochs=1, shuffle=False)
    key, value = tf.TFRecordReader(options=tf.python_io.TFRecordOptions(
        tf.python_io.TFRecordCompressionType.GZIP)).read(files)
    label = tf.parse_single_example(value, {"label": tf.FixedLenFeature([2], tf.int64)})["label"]
    with tf.Session() as sess:
        sess.run(tf.local_variables_initializer())
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess, coord)
        rows = [sess.run([key, label]) for _ in range(4)]
        with pytest.raises(tf.errors.OutOfRangeError):
            sess.run(value)
        coord.request_stop()
        coord.join(threads)
    offsets = [k.decode().rsplit(":", 1)[1] for k, _ in rows]
    assert offsets == ["0", "106", "200", "310"]  # TensorFlow 2.21's reader gives these keys
    assert [v.tolist() for _, v in rows] == TF_LABELS


@pytest.mark.parametrize("suffix, compression", COMPRESSIONS)
def test_written_records_read_back_in_order_across_files(tmp_path, suffix, compression):
    paths = [str(tmp_path / f"part-{i}.tfrecord{suffix}") for i in range(2)]
    for part, path in enumerate(paths):
        with tf.io.TFRecordWriter(path, compression) as writer:
            for i in range(3):
                record = _example(x=[float(part), float(i)], blob=[bytes(range(i * 50))])
                writer.write(record.SerializeToString())
    data = tf.data.TFRecordDataset(paths, compression_type=compression).map(
        lambda r: tf.parse_single_example(r, {"x": tf.FixedLenFeature([2], tf.float32),
                                              "blob": tf.FixedLenFeature([], tf.string)}))
    element = data.make_one_shot_iterator().get_next()
    with tf.Session() as sess:
        got = [sess.run(element) for _ in range(6)]
        with pytest.raises(tf.errors.OutOfRangeError):
            sess.run(element)
    assert [g["x"].tolist() for g in got] == [[p, i] for p in (0.0, 1.0) for i in (0.0, 1.0, 2.0)]
    assert [len(g["blob"]) for g in got] == [0, 50, 100] * 2


def test_a_damaged_record_is_a_data_loss_error_naming_its_offset(tmp_path):
    path = tmp_path / "damaged.tfrecord"
    with tf.python_io.TFRecordWriter(str(path)) as writer:
        for i in range(3):
            writer.write(b"x" * 10 * (i + 1))
    good = path.read_bytes()
    flipped = bytearray(good)
    flipped[26 + 16 + 5] ^= 1  # a byte of the second record's data (the first is 16 + 10 bytes)
    path.write_bytes(bytes(flipped))
    records = tf.python_io.tf_record_iterator(str(path))
    assert next(records) == b"x" * 10
    with pytest.raises(DataLossError, match=r"corrupted record at offset 26 \(its data's checksum"):
        next(records)
    flipped = bytearray(good)
    flipped[3] ^= 1  # the first record's length
    path.write_bytes(bytes(flipped))
    with pytest.raises(DataLossError, match="offset 0 .its length's checksum"):
        list(tf.python_io.tf_record_iterator(str(path)))
    path.write_bytes(good[:-3])  # cut off in the last record
    with pytest.raises(DataLossError, match="offset 62 .cut off"):
        list(tf.python_io.tf_record_iterator(str(path)))
    # in a graph: the step that reaches the record fails, the ones before it ran
    element = tf.data.TFRecordDataset(str(path)).make_one_shot_iterator().get_next()
    with tf.Session() as sess:
        assert [sess.run(element), sess.run(element)] == [b"x" * 10, b"x" * 20]
        with pytest.raises(DataLossError, match="cut off"):
            sess.run(element)


def test_compression_mismatches_say_what_to_pass():
    with pytest.raises(DataLossError, match="GZIP-compressed: pass compression_type='GZIP'"):
        list(tf.python_io.tf_record_iterator(DATA + ".gz"))
    with pytest.raises(DataLossError, match="ZLIB stream is damaged"):
        list(tf.python_io.tf_record_iterator(DATA, "ZLIB"))
    with pytest.raises(ValueError, match="compression_type must be"):
        tf.data.TFRecordDataset(DATA, compression_type="LZ4")


def test_parse_errors_name_the_record_and_the_feature():
    records = tf.placeholder(tf.string, [None])
    with tf.Session() as sess:
        def parse(features, feed):
            return sess.run(tf.parse_example(records, features), {records: feed})
        ok = _example(a=[1, 2]).SerializeToString()
        with pytest.raises(InvalidArgumentError, match="record 1 has no feature 'b', which is required"):
            parse({"b": tf.FixedLenFeature([], tf.int64)}, [_example(b=[1]).SerializeToString(), ok])
        with pytest.raises(InvalidArgumentError, match="record 0's feature 'a' has 2 values, but .* needs 3"):
            parse({"a": tf.FixedLenFeature([3], tf.int64)}, [ok])
        with pytest.raises(InvalidArgumentError, match="'a' is a int64_list, but the features say float32"):
            parse({"a": tf.FixedLenFeature([2], tf.float32)}, [ok])
        with pytest.raises(InvalidArgumentError, match="record 0 is not a serialized tf.train.Example"):
            parse({"a": tf.FixedLenFeature([2], tf.int64)}, [b"\xff\xff\xff"])
        # defaults fill a missing feature, broadcast to its shape
        got = parse({"b": tf.FixedLenFeature([2], tf.float32, default_value=0.5)}, [ok])
        assert got["b"].tolist() == [[0.5, 0.5]]
    with pytest.raises(ValueError, match="not int32: parse as one of those"):
        tf.parse_example(records, {"a": tf.FixedLenFeature([], tf.int32)})
    with pytest.raises(ValueError, match="allow_missing=True"):
        tf.parse_example(records, {"a": tf.FixedLenSequenceFeature([], tf.int64)})
    with pytest.raises(ValueError, match="does not fit the feature's shape"):
        tf.parse_example(records, {"a": tf.FixedLenFeature([2], tf.int64, default_value=[1, 2, 3])})
    with pytest.raises(ValueError, match="takes a vector of records"):
        tf.parse_example(tf.constant(b"x"), {"a": tf.FixedLenFeature([], tf.int64)})


def test_single_example_sequences_and_sparse_values():
    record = _example(points=[1.0, 2.0, 3.0, 4.0], words=[b"a", b"bc"]).SerializeToString()
    parsed = tf.parse_single_example(record, {
        "points": tf.FixedLenSequenceFeature([2], tf.float32), "words": tf.VarLenFeature(tf.string),
        "missing": tf.VarLenFeature(tf.float32)})
    assert parsed["points"].shape.as_list() == [None, 2]
    words = tf.sparse_tensor_to_dense(parsed["words"], default_value=b"?")
    with tf.Session() as sess:
        points, words, missing, sparse = sess.run([parsed["points"], words, parsed["missing"],
                                                   parsed["words"]])
    assert points.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert words.tolist() == [b"a", b"bc"]
    assert (missing.indices.shape, missing.dense_shape.tolist()) == ((0, 1), [0])
    assert sparse.indices.tolist() == [[0], [1]]


def test_sequence_examples_parse_as_tensorflow_parses_them():
    record = tf.train.SequenceExample()
    record.context.feature["length"].int64_list.value.append(3)
    record.context.feature["name"].bytes_list.value.append(b"abc")
    for i in range(3):
        record.feature_lists.feature_list["tokens"].feature.add().int64_list.value.extend([i, 10 + i])
        record.feature_lists.feature_list["ragged"].feature.add().float_list.value.extend([0.5] * i)
    context, sequences = tf.parse_single_sequence_example(
        record.SerializeToString(),
        {"length": tf.FixedLenFeature([], tf.int64), "name": tf.FixedLenFeature([], tf.string),
         "tag": tf.VarLenFeature(tf.int64)},
        {"tokens": tf.FixedLenSequenceFeature([2], tf.int64), "ragged": tf.VarLenFeature(tf.float32),
         "absent": tf.FixedLenSequenceFeature([3], tf.float32, allow_missing=True)})
    assert sequences["tokens"].shape.as_list() == [None, 2]
    with tf.Session() as sess:
        context, sequences = sess.run([context, sequences])
    # TensorFlow 2.21's parse_single_sequence_example of the same record
    assert (int(context["length"]), context["name"]) == (3, b"abc")
    assert context["tag"].dense_shape.tolist() == [0]
    assert sequences["tokens"].tolist() == [[0, 10], [1, 11], [2, 12]]
    ragged = sequences["ragged"]
    assert (ragged.indices.tolist(), ragged.values.tolist(), ragged.dense_shape.tolist()) == (
        [[1, 0], [2, 0], [2, 1]], [0.5, 0.5, 0.5], [3, 2])
    assert sequences["absent"].shape == (0, 3) and sequences["absent"].dtype == np.float32
    required = tf.parse_single_sequence_example(record.SerializeToString(), sequence_features={
        "absent": tf.FixedLenSequenceFeature([], tf.int64)})[1]["absent"]
    with tf.Session() as sess, pytest.raises(InvalidArgumentError, match="no feature list 'absent'"):
        sess.run(required)


def test_sparse_to_dense_checks_its_indices():
    with tf.Session() as sess:
        dense = tf.sparse_tensor_to_dense(tf.SparseTensor([[1, 2], [0, 0]], [1.0, 2.0], [2, 3]),
                                          validate_indices=False)
        assert sess.run(dense).tolist() == [[2.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
        with pytest.raises(InvalidArgumentError, match="not in row-major order"):
            sess.run(tf.sparse.to_dense(tf.SparseTensor([[1, 2], [0, 0]], [1.0, 2.0], [2, 3])))
        with pytest.raises(InvalidArgumentError, match=r"index \[2, 0\] is outside the dense shape \[2, 3\]"):
            sess.run(tf.sparse_tensor_to_dense(tf.SparseTensor([[2, 0]], [1.0], [2, 3])))
    assert tf.SparseTensor([[0, 1]], [1], [4, 5]).shape.as_list() == [4, 5]


def test_a_sparse_element_in_a_dataset_says_to_make_it_dense():
    data = tf.data.TFRecordDataset(DATA)
    with pytest.raises(TypeError, match="tf.sparse_tensor_to_dense"):
        data.map(lambda r: tf.parse_single_example(r, {"tags": tf.VarLenFeature(tf.int64)}))
    dense = data.map(lambda r: tf.sparse_tensor_to_dense(
        tf.parse_single_example(r, {"tags": tf.VarLenFeature(tf.int64)})["tags"], default_value=-1))
    element = dense.make_one_shot_iterator().get_next()
    with tf.Session() as sess:
        assert [sess.run(element).tolist() for _ in range(4)] == [[], [], [0, 1], [0, 1, 2]]


@pytest.mark.parametrize("xp", OTHER_NAMESPACES)
def test_parsing_runs_on_other_namespaces(xp):
    records = tf.placeholder(tf.string, [None])
    sequence = tf.FixedLenSequenceFeature([], tf.int64, allow_missing=True, default_value=-1)
    missing = tf.FixedLenFeature([2], tf.float32, default_value=[0.5, 1.5])
    parsed = tf.parse_example(records, {"label": tf.FixedLenFeature([2], tf.int64),
                                        "pixels": tf.FixedLenFeature([3], tf.float32),
                                        "tags": tf.VarLenFeature(tf.int64), "seq": sequence, "gone": missing})
    fetches = [parsed["label"], parsed["pixels"], tf.sparse_tensor_to_dense(parsed["tags"]), parsed["seq"],
               parsed["gone"]]
    serialized = np.array(list(tf.python_io.tf_record_iterator(DATA)), dtype=object)
    assert_same_on(xp, fetches, {records: serialized})


def test_a_supervisors_session_starts_the_queue_runners_that_read_records(tmp_path):
    """tf.train.Supervisor's managed_session starts the graph's queue runners, as TF's does (a
    public TFRecord script read its records this way, and hung until it did)."""
    path = str(tmp_path / "numbers.tfrecord")
    with tf.python_io.TFRecordWriter(path) as writer:
        for i in range(5):
            writer.write(_example(n=[i]).SerializeToString())
    files = tf.train.string_input_producer([path], num_epochs=1, shuffle=False)
    _, record = tf.TFRecordReader().read(files)
    number = tf.parse_single_example(record, {"n": tf.FixedLenFeature(1, tf.int64)})["n"]  # an int shape
    supervisor = tf.train.Supervisor(logdir=None, local_init_op=tf.local_variables_initializer())
    seen = []
    with supervisor.managed_session(config=tf.ConfigProto(operation_timeout_in_ms=20000)) as sess:
        while not supervisor.should_stop():
            seen.append(sess.run(number).tolist())  # OutOfRangeError after the last: ends the block
    assert seen == [[0], [1], [2], [3], [4]]


def test_sharded_files_interleave_in_tensorflows_order(tmp_path):
    """list_files -> interleave(TFRecordDataset, cycle_length=2, block_length=2 and 1) and flat_map, as
    TensorFlow 2.21 (compat.v1) orders the same shards' records; the filenames a string tensor."""
    for shard in range(3):
        with tf.python_io.TFRecordWriter(str(tmp_path / f"part-{shard}.tfrecord")) as writer:
            for i in range(shard + 2):
                writer.write(f"{shard}:{i}".encode())
    files = tf.data.Dataset.list_files(str(tmp_path / "part-*.tfrecord"), shuffle=False)
    cycled = files.interleave(tf.data.TFRecordDataset, cycle_length=2, block_length=2)
    alternating = files.interleave(tf.data.TFRecordDataset, cycle_length=2)
    flat = files.flat_map(lambda name: tf.data.TFRecordDataset(name).map(lambda r: tf.identity(r)))
    shuffled = tf.data.Dataset.list_files([str(tmp_path / "part-*")], seed=3)
    with tf.Session() as sess:
        got = []
        for data in (cycled, flat, shuffled, shuffled, alternating):
            element, values = data.make_one_shot_iterator().get_next(), []
            with pytest.raises(tf.errors.OutOfRangeError):
                while True:
                    values.append(sess.run(element))
            got.append(values)
    assert [v.decode() for v in got[0]] == ["0:0", "0:1", "1:0", "1:1", "1:2", "2:0", "2:1", "2:2", "2:3"]
    assert [v.decode() for v in got[1]] == ["0:0", "0:1", "1:0", "1:1", "1:2", "2:0", "2:1", "2:2", "2:3"]
    assert sorted(got[2]) == sorted(got[3]) and len(got[2]) == 3
    assert [v.decode() for v in got[4]] == ["0:0", "1:0", "0:1", "1:1", "1:2", "2:0", "2:1", "2:2", "2:3"]
    with pytest.raises(ValueError, match="no files match"):
        tf.data.Dataset.list_files(str(tmp_path / "nothing-*"))


def test_sparse_matmul_retain_and_scaling_as_graph_convolutions_use_them():
    """A GCN layer's sparse ops (tkipf/gcn's sparse dropout and dot): TensorFlow 2.21's products and
    gradients for the same sparse matrix fed through a sparse_placeholder of a given shape."""
    rng = np.random.default_rng(0)
    dense = rng.standard_normal((4, 5)) * (rng.random((4, 5)) < 0.4)
    indices, values = np.argwhere(dense).astype(np.int64), dense[dense != 0].astype(np.float32)
    sparse = tf.sparse_placeholder(tf.float32, shape=tf.constant([4, 5], dtype=tf.int64))
    b = tf.constant(rng.standard_normal((5, 3)).astype(np.float32))
    b2 = tf.constant(rng.standard_normal((4, 2)).astype(np.float32))
    kept = tf.sparse_retain(sparse, tf.constant(np.arange(len(values)) % 2 == 0)) * (1.0 / 0.5)
    product = tf.sparse_tensor_dense_matmul(kept, b)
    transposed = tf.sparse_tensor_dense_matmul(sparse, b2, adjoint_a=True)
    plain = tf.sparse_tensor_dense_matmul(sparse, b)
    grads = [*tf.gradients(tf.reduce_sum(product * product) + tf.reduce_sum(transposed)
                           + tf.reduce_sum(plain * plain), [b, b2]),
             *tf.gradients(tf.reduce_sum(plain * plain) + tf.reduce_sum(transposed), [sparse.values])]
    with tf.Session() as sess:
        got = sess.run([product, transposed, *grads], {sparse: (indices, values, np.array([4, 5], np.int64))})
    tensorflow = [[-0.31661, 0.38069, 0.33843, -0.91054, 1.09485, 0.97332, -6.77989, -9.11532],
                  [1.15797, -1.64781, -0.07954, -0.07482, 1.53848, 1.01473, 0.0, 0.0],
                  [-3.21469, 2.83128, 5.39336, -0.20842, -0.41686, -0.40296, 78.66708, 105.91621],
                  [-0.00637, -0.00637, 0.3616, 0.3616, -2.2837, -2.2837, 0.31025, 0.31025],
                  [2.5212, 0.36625, 3.62586, -6.1116, -43.85506, -9.29305, 6.00477]]
    for value, want in zip(got, tensorflow):
        np.testing.assert_allclose(np.asarray(value).ravel()[:8], want, rtol=2e-5, atol=2e-5)


def test_a_parsing_serving_receiver_parses_fed_examples():
    spec = {"x": tf.FixedLenFeature([2], tf.float32), "n": tf.FixedLenFeature([], tf.int64, default_value=0)}
    receiver = tf.estimator.export.build_parsing_serving_input_receiver_fn(spec)()
    records = [_example(x=[1.0, 2.0], n=[3]).SerializeToString(), _example(x=[4.0, 5.0]).SerializeToString()]
    with tf.Session() as sess:
        got = sess.run(receiver.features, {receiver.receiver_tensors["examples"]: records})
    assert got["x"].tolist() == [[1.0, 2.0], [4.0, 5.0]] and got["n"].tolist() == [3, 0]
