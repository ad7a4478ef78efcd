"""Lookup tables as TF 1.x text pipelines use them: TensorFlow 2.21's (compat.v1) results for the
same vocabulary files and tensors; initialized by tf.tables_initializer() and by the training
sessions' own initialization; a lookup before it refused as TF's."""

import numpy as np
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


def test_a_text_classifier_trains_from_lines_to_padded_batches_through_a_dynamic_rnn(tmp_path):
    """TF 1.x's text pipeline end to end: lines of "label<TAB>words", split, words looked up in a
    vocabulary file, padded_batch to the batch's longest sentence, embedded, a GRU over the unknown
    number of steps with the sentence lengths, trained in a MonitoredTrainingSession."""
    rng = np.random.default_rng(0)
    vocab = ["<unknown>", "good", "great", "fine", "bad", "awful", "poor", "the", "movie", "was", "very"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    lines = []
    for i in range(200):
        opinion = rng.choice(["good", "great", "fine"] if i % 2 else ["bad", "awful", "poor"])
        lines.append(f"{i % 2}\tthe movie was {'very ' if rng.random() < 0.5 else ''}{opinion}")
    (tmp_path / "train.tsv").write_text("\n".join(lines) + "\n")
    table = tf.contrib.lookup.index_table_from_file(str(tmp_path / "vocab.txt"), default_value=0)

    def parse(line):
        label, text = tf.unstack(tf.string_split([line], delimiter="\t").values, 2)
        words = tf.string_split([text]).values
        return table.lookup(words), tf.size(words), tf.string_to_number(label, out_type=tf.int32)

    data = tf.data.TextLineDataset(str(tmp_path / "train.tsv")).map(parse).shuffle(200, seed=1).repeat()
    batches = data.padded_batch(16, padded_shapes=([None], [], []))
    ids, lengths, labels = batches.make_one_shot_iterator().get_next()
    embedded = tf.nn.embedding_lookup(tf.get_variable("embedding", [len(vocab), 8]), ids)
    _, state = tf.nn.dynamic_rnn(tf.nn.rnn_cell.GRUCell(16), embedded, sequence_length=lengths,
                                 dtype=tf.float32)
    logits = tf.layers.dense(state, 2)
    loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
    predicted = tf.argmax(logits, 1, output_type=tf.int32)
    correct = tf.reduce_mean(tf.cast(tf.equal(predicted, labels), tf.float32))
    train = tf.train.AdamOptimizer(0.05).minimize(loss)
    assert ids.shape.as_list() == [None, None]
    with tf.train.MonitoredTrainingSession() as sess:
        for _ in range(60):
            sess.run(train)
        accuracy = np.mean([sess.run(correct) for _ in range(5)])
    assert accuracy >= 0.9
