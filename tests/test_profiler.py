"""``tf.profiler``: FLOPs and parameters counted by TensorFlow's rules. The expected numbers are
TensorFlow 2.21's (``compat.v1`` profiler) for the same graphs, measured op type by op type."""

from __future__ import annotations

import pytest

import dflow as tf

# TensorFlow's count per op type for the graph `_small_net` builds
TENSORFLOW_FORWARD = {"Conv2D": 10800, "AvgPool": 648, "MatMul": 640, "BiasAdd": 200, "MaxPool": 128,
                      "Softmax": 100, "Sum": 89, "Add": 61, "L2Loss": 59, "Sub": 40, "AddN": 40, "Rsqrt": 40,
                      "SquaredDifference": 40, "Square": 20, "Mean": 20, "Maximum": 20, "RealDiv": 20,
                      "Mul": 20, "Log": 20, "Pow": 20, "GreaterEqual": 20, "ArgMax": 18}


def _small_net(batch):
    x = tf.placeholder(tf.float32, [batch, 9, 9, 3], name="x")
    w = tf.Variable(tf.zeros([3, 3, 3, 4]), name="w")
    conv = tf.nn.conv2d(x, w, [1, 2, 2, 1], "SAME")
    hidden = tf.nn.relu(tf.nn.bias_add(conv, tf.Variable(tf.zeros([4]), name="b")))
    pooled = tf.nn.max_pool(hidden, [1, 2, 2, 1], [1, 2, 2, 1], "VALID")
    averaged = tf.nn.avg_pool(hidden, [1, 3, 3, 1], [1, 2, 2, 1], "SAME")
    logits = tf.matmul(tf.reshape(pooled, [-1, 16]), tf.Variable(tf.zeros([16, 10]), name="m"))
    loss = tf.reduce_mean(tf.square(tf.nn.softmax(logits) - 1.0)) + tf.reduce_sum(averaged)
    tf.nn.l2_loss(logits), tf.add_n([logits] * 3), tf.reduce_sum(logits, axis=1), tf.argmax(logits, 1)
    tf.rsqrt(logits + 2.0), tf.squared_difference(logits, 1.0), tf.greater_equal(logits, 0.0)
    tf.maximum(logits, 0.5) / 3.0 * 2.0 - tf.log(logits + 1.0) + tf.pow(logits, 2.0)
    return x, w, loss


def _quiet(options: dict) -> dict:
    return tf.profiler.ProfileOptionBuilder(options).with_empty_output().build()


def test_float_operations_are_tensorflows_op_type_by_op_type():
    with tf.Graph().as_default() as graph:
        _small_net(2)
        by_type = tf.profiler.profile(graph, cmd="op",
                                      options=_quiet(tf.profiler.ProfileOptionBuilder.float_operation()))
        params = tf.profiler.profile(graph, options=_quiet(
            tf.profiler.ProfileOptionBuilder.trainable_variables_parameter()))
    assert {child.name: child.total_float_ops for child in by_type.children} == TENSORFLOW_FORWARD
    assert by_type.total_float_ops == sum(TENSORFLOW_FORWARD.values()) == 13063
    assert [child.name for child in by_type.children][:3] == ["Conv2D", "AvgPool", "MatMul"]  # most first
    assert params.total_parameters == 3 * 3 * 3 * 4 + 4 + 16 * 10
    assert sorted(child.name for child in params.children) == ["b", "m", "w"]


def test_gradients_of_a_strided_convolution_and_pooling_count_as_tensorflow_counts_them():
    with tf.Graph().as_default() as graph:
        x, w, loss = _small_net(2)
        tf.gradients(loss, [x, w])
        by_type = {child.name: child.total_float_ops for child in tf.profiler.profile(
            graph, cmd="op", options=_quiet(tf.profiler.ProfileOptionBuilder.float_operation())).children}
    assert (by_type["Conv2DBackpropInput"], by_type["Conv2DBackpropFilter"]) == (8748, 8748)
    assert (by_type["AvgPoolGrad"], by_type["MaxPoolGrad"]) == (1296, 160)


def test_ops_whose_shapes_are_not_known_count_nothing_and_the_report_prints(capsys):
    with tf.Graph().as_default() as graph:
        _small_net(None)
        unknown_batch = tf.profiler.profile(graph, options=tf.profiler.ProfileOptionBuilder.float_operation())
    # only the sum of the two scalar losses has all its shapes
    assert [(child.name, child.total_float_ops) for child in unknown_batch.children] == [("add", 1)]
    assert "node name | # float_ops" in capsys.readouterr().out
    with pytest.raises(ValueError, match="cmd must be one of scope, graph, op, code"):
        tf.profiler.profile(graph, cmd="ops")


def test_random_initializers_count_the_scaling_tensorflows_graph_does():
    """TF 2.21 counts get_variable's glorot_uniform on [3, 3, 3, 4] as Sub 1 + Mul 108 + AddV2 108,
    and truncated_normal(stddev=0.1) on [5, 5, 1, 32] as Mul 800 + AddV2 800."""
    with tf.Graph().as_default() as graph:
        tf.get_variable("w", [3, 3, 3, 4])
        tf.Variable(tf.truncated_normal([5, 5, 1, 32], stddev=0.1))
        tf.Variable(tf.random_uniform([4], maxval=10, dtype=tf.int32))  # integer draws: nothing
        total = tf.profiler.profile(graph, options=_quiet(tf.profiler.ProfileOptionBuilder.float_operation()))
    assert total.total_float_ops == 217 + 1600
