"""The string ops of TF 1.x text pipelines give TensorFlow 2.21's (compat.v1) values for the same
inputs: formats, splits into SparseTensors, joins, substrings, regexes, numbers."""

import pytest

import dflow as tf

# TensorFlow 2.21's results for _fetches() below, in order (a SparseTensor as indices, values, shape)
TENSORFLOW = [
    b'3.500000',
    [b'1', b'22'],
    b'true',
    b'2.00',
    b'0.333333',
    b'0007',
    ([[0, 0], [0, 1], [0, 2], [1, 0]], [b'a', b'b', b'c', b'de'], [2, 3]),
    ([[0, 0], [0, 1], [0, 2]], [b'a', b'b', b'c'], [1, 3]),
    ([[0, 0], [0, 1], [0, 2], [0, 3]], [b'a', b'b', b'', b'c'], [1, 4]),
    ([[0, 0], [0, 1], [0, 2]], [b'a', b'b', b'c'], [2, 3]),
    ([[0, 0], [0, 1], [1, 0], [1, 1], [1, 2]], [b'a', b'b', b'c', b'd', b'e'], [2, 3]),
    ([[0, 0], [0, 1], [0, 2], [1, 0]], [b'a', b'b', b'', b'c'], [2, 3]),
    [b'ell', b'orl'],
    [2, 4],
    [b'a-b', b'c-d'],
    b'abcd',
    [[b'ac', b'bd']],
    [b'x bbb'],
    [b'ba ab'],
    [b'hi'],
    [1.5, -2.0],
    [7],
    [b'a_x', b'b_x'],
    b'pq',
    3,
    [b'1.500000e+00', b'2.250000e+00'],
]


def _fetches():
    table = [["a", "b"], ["c", "d"]]
    return [tf.as_string(3.5), tf.as_string([1, 22]), tf.as_string(True), tf.as_string(2.0, precision=2),
            tf.as_string(1.0 / 3, shortest=True), tf.as_string(7, width=4, fill="0"),
            tf.string_split(["a b  c", "de"], delimiter=" "), tf.string_split(["a,b;c"], delimiter=",;"),
            tf.string_split(["a b  c"], delimiter=" ", skip_empty=False),
            tf.string_split(["abc", ""], delimiter=""),
            tf.strings.split(["a  b", "c d e"]), tf.strings.split(["a--b--", "c"], sep="--"),
            tf.strings.substr(["hello", "world"], 1, 3), tf.strings.length(["ab", "abcd"]),
            tf.reduce_join(table, axis=1, separator="-"), tf.reduce_join(table),
            tf.reduce_join(table, axis=0, keep_dims=True),
            tf.regex_replace(["aaa bbb"], "a+", "x"),
            tf.regex_replace(["ab ab"], "(a)(b)", r"\2\1", replace_global=False),
            tf.string_strip(["  hi "]), tf.string_to_number(["1.5", "-2"]),
            tf.string_to_number(["7"], out_type=tf.int32),
            tf.string_join([["a", "b"], "x"], separator="_"), tf.strings.join(["p", "q"]),
            tf.strings.length("abc"), tf.as_string([1.5, 2.25], scientific=True)]


def _plain(value):
    if hasattr(value, "indices"):
        return (value.indices.tolist(), value.values.tolist(), value.dense_shape.tolist())
    return value.tolist() if hasattr(value, "tolist") else value


def test_string_ops_give_tensorflows_values():
    with tf.Graph().as_default(), tf.Session() as sess:
        got = [_plain(v) for v in sess.run(_fetches())]
    assert got == TENSORFLOW


def test_string_op_errors_name_the_string():
    with tf.Graph().as_default(), tf.Session() as sess:
        with pytest.raises(tf.errors.InvalidArgumentError, match="could not correctly convert string: b'x1'"):
            sess.run(tf.string_to_number(["1", "x1"]))
        with pytest.raises(tf.errors.InvalidArgumentError, match="position 9 is outside b'abc'"):
            sess.run(tf.substr("abc", 9, 1))
    with pytest.raises(ValueError, match="is not a regular expression"):
        tf.regex_replace("abc", "(", "x")
