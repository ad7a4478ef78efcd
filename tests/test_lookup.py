"""Lookup tables as TF 1.x text pipelines use them: TensorFlow 2.21's (compat.v1) results for the
same vocabulary files and tensors; initialized by tf.tables_initializer() and by the training
sessions' own initialization; a lookup before it refused as TF's."""

import pytest

import dflow as tf


@pytest.fixture(autouse=True)
def _graph():
    with tf.Graph().as_default():
        yield


def test_tables_from_files_and_tensors_give_tensorflows_results(tmp_path):
    (tmp_path / "vocab.txt").write_text("the\ncat\nsat\non\nmat\n")
    (tmp_path / "pairs.tsv").write_text("a\t10\nb\t20\n")
    lookup = tf.contrib.lookup
    words = lookup.index_table_from_file(str(tmp_path / "vocab.txt"))
    names = lookup.index_to_string_table_from_file(str(tmp_path / "vocab.txt"), default_value="UNK")
    listed = tf.lookup.index_table_from_tensor(tf.constant(["x", "y"]), default_value=7)
    columns = lookup.TextFileInitializer(str(tmp_path / "pairs.tsv"), tf.string, 0, tf.int64, 1,
                                         delimiter="\t")
    pairs = lookup.HashTable(columns, -1)
    back = lookup.index_to_string_table_from_tensor(tf.constant(["x", "y"]))
    numbers = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer([1, 2], [1.5, 2.5], tf.int64,
                                                                            tf.float32), -1.0)
    ids = words.lookup(tf.string_split(["the cat sat on the dog"]).values)
    with tf.Session() as sess:
        with pytest.raises(tf.errors.FailedPreconditionError, match="Table not initialized"):
            sess.run(ids)
        sess.run(tf.tables_initializer())
        got = sess.run([ids, names.lookup(tf.constant([0, 4, 9], tf.int64)),
                        listed.lookup(tf.constant(["y", "z"])), pairs.lookup(tf.constant(["b", "c"])),
                        back.lookup(tf.constant([1, 5], tf.int64)),
                        numbers.lookup(tf.constant([2, 3], tf.int64)), words.size()])
    assert [v.tolist() for v in got] == [[0, 1, 2, 3, 0, -1], [b"the", b"mat", b"UNK"], [1, 7], [20, -1],
                                         [b"y", b"UNK"], [2.5, -1.0], 5]
    assert got[5].dtype.name == "float32"
    with pytest.raises(ValueError, match="num_oov_buckets is not supported by dflow"):
        lookup.index_table_from_file(str(tmp_path / "vocab.txt"), num_oov_buckets=1)


def test_training_sessions_initialize_the_tables():
    table = tf.contrib.lookup.index_table_from_tensor(tf.constant(["a", "b"]))
    ids = table.lookup(tf.constant(["b", "a"]))
    tf.train.get_or_create_global_step()
    with tf.train.MonitoredTrainingSession() as sess:
        assert sess.run(ids).tolist() == [1, 0]
    supervisor = tf.train.Supervisor(logdir=None)
    with supervisor.managed_session() as sess:
        assert sess.run(ids).tolist() == [1, 0]
