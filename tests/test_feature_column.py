"""tf.feature_column: input_layer over numeric, bucketized, indicator and embedding columns gives
TensorFlow 2.21's (compat.v1) dense input for the same features, vocabularies and initial weights."""

import numpy as np
import pytest

import dflow as tf

fc = tf.feature_column

# TensorFlow 2.21's input_layer of the columns below, in their name order
TENSORFLOW = [
    [23, 1, 0, 0, 1, 0, 0, 3, 4, 5, 0, 1, 0, 0, 1, 0, 0, 0, 1, 0, 0.5, 1, 0, 0, 0],
    [61, 0, 0, 1, 0, 0, 1, 9, 10, 11, 0, 0, 0, 1, 0, 1, 0, 0, 1, 0, 2, 2.5, 0, 0, 0],
    [45, 0, 1, 0, 0, 0, 0, 0, 1, 2, 1, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 1.5, 0, 0, 0],
]


def test_input_layer_is_tensorflows(tmp_path):
    (tmp_path / "colors.txt").write_text("red\ngreen\nblue\n")
    with tf.Graph().as_default():
        features = {"age": tf.constant([[23.0], [61.0], [45.0]]),
                    "pos": tf.constant([[1.0, 2.0], [3.0, 4.0], [0.5, 9.0]]),
                    "color": tf.constant([["red"], ["blue"], ["pink"]]),
                    "tags": tf.constant([["a", "b"], ["c", "c"], ["b", "zz"]]),
                    "n": tf.constant([[1], [3], [0]])}
        age, pos = fc.numeric_column("age"), fc.numeric_column("pos", shape=[2])
        tags = fc.categorical_column_with_vocabulary_list("tags", ["a", "b", "c"])
        ids = fc.categorical_column_with_identity("n", 4)
        colors = fc.categorical_column_with_vocabulary_list("color", ["red", "green", "blue"])
        tags_from_file = fc.categorical_column_with_vocabulary_file("tags", str(tmp_path / "colors.txt"))
        tags_weights = tf.constant_initializer(np.arange(6).reshape(3, 2) * 0.5)
        ids_weights = tf.constant_initializer(np.arange(12).reshape(4, 3) * 1.0)
        columns = [age, fc.bucketized_column(age, [30, 50]), fc.bucketized_column(pos, [2.0, 5.0]),
                   fc.indicator_column(colors), fc.indicator_column(tags_from_file), fc.indicator_column(ids),
                   fc.embedding_column(tags, 2, initializer=tags_weights),
                   fc.embedding_column(ids, 3, combiner="sum", initializer=ids_weights)]
        dense = fc.input_layer(features, columns)
        (tags_embedding,) = [v for v in tf.trainable_variables()
                             if v.name == "input_layer/tags_embedding/embedding_weights:0"]
        (grad,) = tf.gradients(tf.reduce_sum(dense), [tags_embedding])
        with tf.Session() as sess:
            sess.run([tf.global_variables_initializer(), tf.tables_initializer()])
            got, got_grad = sess.run([dense, grad])
        with pytest.raises(ValueError, match="wrap the categorical column 'n' in indicator_column"):
            fc.input_layer(features, [ids])
    np.testing.assert_allclose(got, TENSORFLOW, rtol=1e-6)
    assert got_grad.tolist() == [[0.5, 0.5], [1.5, 1.5], [1.0, 1.0]]  # mean: each example's words share it
