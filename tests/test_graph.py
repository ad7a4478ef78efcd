"""Graph building: names, scopes, collections, shape inference and its errors,
devices, and the plain-data (JSON) and DOT forms."""

import json

import numpy as np
import pytest

import dflow as tf
from dflow.graph_io import import_graph_def


def test_tensor_attributes_and_default_graph():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 784], name="x")
        assert tf.get_default_graph() is g
    assert x.name == "x:0" and x.op.type == "Placeholder" and x.graph is g
    assert x.shape.as_list() == [None, 784] and x.dtype == tf.float32
    assert tf.get_default_graph() is not g


def test_names_are_unique_and_scoped():
    a = tf.constant(1.0, name="a")
    a2 = tf.constant(1.0, name="a")
    with tf.name_scope("layer"):
        b = tf.add(a, a2)
        with tf.name_scope("inner"):
            c = tf.identity(b, name="out")
    with tf.name_scope("layer"):
        d = tf.identity(c)
    assert [a.name, a2.name, b.name, c.name] == ["a:0", "a_1:0", "layer/Add:0", "layer/inner/out:0"]
    assert d.name == "layer_1/Identity:0"


def test_operator_overloads_build_the_expected_ops():
    x = tf.placeholder(tf.float32, [2, 2])
    exprs = {"Add": x + 1.0, "Sub": 1.0 - x, "Mul": x * x, "RealDiv": x / 2.0, "MatMul": x @ x,
             "Pow": x ** 2.0, "Neg": -x, "Less": x < 0.0, "GreaterEqual": x >= 1.0,
             "StridedSlice": x[0, ::2]}
    for op_type, t in exprs.items():
        assert t.op.type == op_type
    # named as TF 1.x names them (scripts look tensors up by these names), not by their op types
    assert [t.op.name for t in exprs.values()] == ["add", "sub", "mul", "truediv", "matmul", "pow", "Neg",
                                                    "Less", "GreaterEqual", "strided_slice"]
    assert tf.add(x, x).name == "Add_1:0"  # TF's unique names ignore case: add, then Add_1
    assert exprs["StridedSlice"].shape == (1,)
    assert exprs["Less"].dtype == tf.bool
    with pytest.raises(TypeError, match="truth value"):
        bool(x)


def test_shape_inference_and_broadcasting():
    a = tf.placeholder(tf.float32, [None, 1, 5])
    b = tf.placeholder(tf.float32, [3, 1])
    assert (a + b).shape.as_list() == [None, 3, 5]
    assert tf.reduce_sum(a, axis=2, keepdims=True).shape == (None, 1, 1)
    assert tf.reshape(tf.zeros([4, 6]), [-1, 3]).shape == (8, 3)
    assert tf.concat([tf.zeros([2, 3]), tf.zeros([2, 5])], 1).shape == (2, 8)
    assert tf.one_hot(tf.constant([1, 2]), 10).shape == (2, 10)
    assert tf.transpose(tf.zeros([2, 3, 4]), [1, 2, 0]).shape == (3, 4, 2)


@pytest.mark.parametrize("build, pattern", [
    (lambda: tf.matmul(tf.zeros([2, 3]), tf.zeros([4, 5]), name="dense"),
     r"MatMul op 'dense'.*\(2, 3\).*\(4, 5\)"),
    (lambda: tf.add(tf.zeros([2, 3]), tf.zeros([4, 3]), name="sum"),
     r"Add op 'sum'.*\(2, 3\).*\(4, 3\)"),
    (lambda: tf.reshape(tf.zeros([2, 3]), [4, 2], name="flat"), r"Reshape op 'flat'.*\(2, 3\)"),
    (lambda: tf.concat([tf.zeros([2, 3]), tf.zeros([3, 3])], 1, name="cat"),
     r"ConcatV2 op 'cat'.*\(2, 3\).*\(3, 3\)"),
])
def test_shape_errors_name_the_op_and_both_shapes(build, pattern):
    with pytest.raises(ValueError, match=pattern):
        build()


def test_mixed_dtypes_are_an_error_and_python_numbers_adapt():
    x = tf.placeholder(tf.float64, [2])
    assert (x * 2).dtype == tf.float64
    with pytest.raises(TypeError, match="tf.cast"):
        tf.add(x, tf.constant([1.0, 2.0], tf.float32))


def test_collections_and_variables():
    w = tf.Variable(tf.zeros([2]), name="w")
    counter = tf.Variable(0, trainable=False, name="counter")
    assert tf.global_variables() == [w, counter]
    assert tf.trainable_variables() == [w]
    assert tf.get_collection(tf.GraphKeys.GLOBAL_VARIABLES, scope="cou") == [counter]
    assert w.name == "w:0" and w.initializer.name == "w/Assign"


def test_variable_scope_and_get_variable_reuse():
    with tf.variable_scope("conv1"):
        k = tf.get_variable("weights", [3, 3], initializer=tf.zeros_initializer())
    with tf.variable_scope("conv1", reuse=True):
        assert tf.get_variable("weights", [3, 3]) is k
    with pytest.raises(ValueError, match="conv1/weights already exists"):
        with tf.variable_scope("conv1"):
            tf.get_variable("weights", [3, 3])
    with tf.variable_scope("conv1", reuse=tf.AUTO_REUSE):
        assert tf.get_variable("weights", [3, 3]) is k
        tf.get_variable("biases", [3], initializer=tf.constant_initializer(0.1))
    assert k.name == "conv1/weights:0"
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        np.testing.assert_allclose(sess.run("conv1/biases:0"), [0.1] * 3, rtol=1e-6)


def test_initializers_produce_the_right_statistics():
    shape = [200, 300]
    inits = {"glorot": tf.glorot_uniform_initializer(seed=1)(shape),
             "trunc": tf.truncated_normal_initializer(stddev=0.5, seed=2)(shape),
             "normal": tf.random_normal_initializer(1.0, 2.0, seed=3)(shape)}
    with tf.Session() as sess:
        v = sess.run(inits)
    limit = np.sqrt(6.0 / 500)
    assert np.abs(v["glorot"]).max() <= limit and np.abs(v["glorot"]).max() > 0.9 * limit
    assert np.abs(v["trunc"]).max() <= 1.0
    assert abs(v["normal"].mean() - 1.0) < 0.05 and abs(v["normal"].std() - 2.0) < 0.05


def test_seeded_random_ops_are_reproducible_across_sessions():
    r = tf.random_normal([5], seed=7)
    with tf.Session() as s1, tf.Session() as s2:
        np.testing.assert_array_equal(s1.run(r), s2.run(r))
        assert not np.array_equal(s1.run(r), s1.run(r))  # a new sample every run


def test_device_scopes_merge_like_tensorflow():
    with tf.device("/job:worker/task:1"):
        a = tf.constant(1.0)
        with tf.device("/gpu:0"):
            b = tf.constant(1.0)
        with tf.device("/job:ps"):
            c = tf.constant(1.0)
        with tf.device(None):
            d = tf.constant(1.0)
    with tf.device(lambda op: "/job:ps/task:0" if op.type == "VariableV2" else "/job:worker"):
        v = tf.Variable(1.0)
        e = v * 2.0
    assert a.device == "/job:worker/task:1"
    assert b.device == "/job:worker/task:1/device:GPU:0"
    assert c.device == "/job:ps/task:1"
    assert d.device == ""
    assert v.device == "/job:ps/task:0" and e.device == "/job:worker"
    with pytest.raises(ValueError, match="cannot parse device"):
        with tf.device("/jb:ps"):
            pass


def test_gpu_ops_fall_back_to_cpu_with_a_warning(caplog):
    with tf.device("/gpu:0"):
        y = tf.constant(2.0) * 2.0
    soft = tf.ConfigProto(allow_soft_placement=True)  # (without it, as in TF: an error)
    with tf.Session(config=soft) as sess, caplog.at_level("WARNING", logger="dflow"):
        assert sess.run(y) == 4.0
    assert "soft placement" in caplog.text


def test_networkx_view_and_json_round_trip_runs_the_same():
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    w = tf.Variable(np.arange(6, dtype=np.float32).reshape(3, 2), name="w")
    with tf.device("/cpu:0"):
        y = tf.nn.relu(tf.matmul(x, w) - 4.0, name="y")
    g = tf.get_default_graph()
    assert g.nx.has_edge("x", "MatMul") and g.nx.nodes["y"]["op"] is y.op
    text = json.dumps(g.as_graph_def())
    g2 = import_graph_def(json.loads(text))
    assert [op.name for op in g2.get_operations()] == [op.name for op in g.get_operations()]
    assert g2.get_operation_by_name("y").device == "/device:CPU:0"
    with tf.Session(graph=g2) as sess:
        sess.run(tf.global_variables_initializer())
        out = sess.run("y:0", {"x:0": np.ones((2, 3))})
    np.testing.assert_allclose(out, [[2.0, 5.0]] * 2)
    assert len(g2.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES)) == 1


def test_dot_export_lists_ops_and_edges():
    a = tf.constant(1.0, name="a")
    tf.identity(a, name="b")
    dot = tf.get_default_graph().to_dot()
    assert dot.startswith("digraph dflow {") and '"a" -> "b"' in dot


def test_set_shape_refines_and_refuses_contradictions():
    x = tf.placeholder(tf.float32, [None, 3])
    x.set_shape([8, None])
    assert x.shape == (8, 3)
    with pytest.raises(ValueError, match=r"cannot be set"):
        x.set_shape([8, 4])


def test_placeholder_with_default_and_graph_seed():
    keep = tf.placeholder_with_default(1.0, [], name="keep_prob")
    doubled = keep * 2.0
    tf.set_random_seed(3)
    noise = tf.random_normal([4])
    with tf.Session() as s1, tf.Session() as s2:
        assert s1.run(doubled) == 2.0 and s1.run(doubled, {keep: 0.5}) == 1.0
        np.testing.assert_array_equal(s1.run(noise), s2.run(noise))


def test_report_uninitialized_variables():
    a, b = tf.Variable(1.0, name="a"), tf.Variable(2.0, name="b")
    report = tf.report_uninitialized_variables()
    with tf.Session() as sess:
        assert sess.run(report).tolist() == [b"a", b"b"]
        sess.run(a.initializer)
        assert sess.run(report).tolist() == [b"b"]
    del b


def test_print_of_a_tensor_reads_as_tf_1x():
    """TF 1.x's str(tensor), which tutorials print: the name, the shape where the rank is known,
    the dtype and the device where one is set; repr as TF's."""
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    assert str(x) == 'Tensor("x:0", shape=(?, 3), dtype=float32)'
    assert repr(x) == "<tf.Tensor 'x:0' shape=(?, 3) dtype=float32>"
    assert str(tf.placeholder(tf.int32, name="n")) == 'Tensor("n:0", dtype=int32)'
    with tf.device("/cpu:0"):
        c = tf.constant(1.0, name="c")
    assert str(c) == 'Tensor("c:0", shape=(), dtype=float32, device=/device:CPU:0)'
