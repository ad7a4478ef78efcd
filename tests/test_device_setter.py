"""replica_device_setter with TF 1.x's semantics, the load-balancing strategies, colocation
of a variable's state ops, and the placements of Figure 4 / Listings 4-5 of the seed
``001_6a0a67d604a7cdb5.txt``."""

import numpy as np
import pytest

import dflow as tf

SEED_VARIABLES = {"weights_1": [784, 100], "biases_1": [100], "weights_2": [100, 10], "biases_2": [10]}


def _seed_model(device_function):
    """Listings 4 and 5: the four variables of a 784-100-10 MNIST network, then the model."""
    with tf.device(device_function):
        params = {name: tf.get_variable(name, shape) for name, shape in SEED_VARIABLES.items()}
        x = tf.placeholder(tf.float32, [None, 784], name="x")
        labels = tf.placeholder(tf.float32, [None, 10], name="labels")
        hidden = tf.nn.relu(tf.matmul(x, params["weights_1"]) + params["biases_1"])
        logits = tf.matmul(hidden, params["weights_2"]) + params["biases_2"]
        loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=labels, logits=logits))
        train = tf.train.GradientDescentOptimizer(0.1).minimize(
            loss, global_step=tf.train.get_or_create_global_step())
    return params, (x, labels, loss, train)


def _tasks(params):
    return {name: v.device for name, v in params.items()}


# ---- Figure 4 and the text around it -----------------------------------------------
def test_listing_4_round_robin_over_three_ps():
    # "weights_1 would go to the first Parameter Server, biases_1 ... to the second ...,
    # weights_2 ... on the third ... and biases_2 back on the first"
    params, _ = _seed_model(tf.train.replica_device_setter(ps_tasks=3))
    assert _tasks(params) == {"weights_1": "/job:ps/task:0", "biases_1": "/job:ps/task:1",
                              "weights_2": "/job:ps/task:2", "biases_2": "/job:ps/task:0"}


def test_round_robin_over_two_ps_puts_all_weights_on_one_and_all_biases_on_the_other():
    # "if only two Parameter Servers were used here ... all the weights would go on the
    # first Parameter Server and all the biases on the second one"
    params, _ = _seed_model(tf.train.replica_device_setter(ps_tasks=2))
    assert _tasks(params) == {"weights_1": "/job:ps/task:0", "biases_1": "/job:ps/task:1",
                              "weights_2": "/job:ps/task:0", "biases_2": "/job:ps/task:1"}


def _ps_bytes(params, num_ps):
    loads = [0] * num_ps
    for v in params.values():
        loads[tf.DeviceSpec.from_string(v.device).task] += v.shape.num_elements() * 4
    return loads


@pytest.mark.parametrize("num_ps, expected", [
    # argmin of the bytes so far: weights_1 (313,600 B) fills task 0 and nothing joins it
    (3, {"weights_1": 0, "biases_1": 1, "weights_2": 2, "biases_2": 1}),
    (2, {"weights_1": 0, "biases_1": 1, "weights_2": 1, "biases_2": 1}),
])
def test_listing_5_greedy_load_balancing(num_ps, expected):
    greedy = tf.train.GreedyLoadBalancingStrategy(num_ps, tf.train.byte_size_load_fn)
    params, _ = _seed_model(tf.train.replica_device_setter(ps_tasks=num_ps, ps_strategy=greedy))
    assert _tasks(params) == {name: f"/job:ps/task:{task}" for name, task in expected.items()}
    # "a more balanced outcome": the largest PS holds weights_1 only, less than round-robin
    round_robin = tf.Graph()
    with round_robin.as_default():
        rr_params, _ = _seed_model(tf.train.replica_device_setter(ps_tasks=num_ps))
    assert max(_ps_bytes(params, num_ps)) == 784 * 100 * 4 < max(_ps_bytes(rr_params, num_ps))


def test_the_seed_model_computes_on_the_worker_and_updates_on_the_ps():
    params, (x, labels, loss, train) = _seed_model(tf.train.replica_device_setter(ps_tasks=3))
    graph = tf.get_default_graph()
    by_var = {v.op.name: v.device for v in params.values()}
    for op in graph.get_operations():
        owner = op.name.split("/")[0]
        if op.type in ("Assign", "ReadVariable", "RandomUniform") and owner in by_var:
            assert op.device == by_var[owner], op.name
        elif op.type == "ApplyGradientDescent":
            assert op.device == by_var[op.inputs[0].op.name], op.name
    assert x.op.device == loss.op.device == "/job:worker"
    assert {op.device for op in graph.get_operations() if op.type in ("MatMul", "Relu")} == {"/job:worker"}
    step = tf.train.get_global_step()
    assert step.device == "/job:ps/task:1" and train.device == step.device
    with tf.Session() as sess:  # as in TF, a local session has no job ps: it refuses the placed graph
        with pytest.raises(tf.errors.InvalidArgumentError, match="explicitly assigned to /job:ps/task:"):
            sess.run(tf.global_variables_initializer())
    with tf.Session(config=tf.ConfigProto(allow_soft_placement=True)) as sess:  # ... unless asked to
        sess.run(tf.global_variables_initializer())
        feed = {x: np.full((4, 784), 0.01, np.float32), labels: np.eye(10, dtype=np.float32)[:4]}
        before = sess.run(loss, feed)
        sess.run(train, feed)
        assert sess.run(loss, feed) < before and sess.run(step) == 1


# ---- TF semantics, one row each ------------------------------------------------------
def test_no_ps_tasks_gives_no_device_function():
    assert tf.train.replica_device_setter() is None
    assert tf.train.replica_device_setter(cluster={"worker": ["w0:1", "w1:1"]}) is None


def test_cluster_gives_the_number_of_ps_tasks():
    cluster = {"ps": ["ps0:2222", "ps1:2222"], "worker": ["w0:2222", "w1:2222"]}
    setter = tf.train.replica_device_setter(worker_device="/job:worker/task:1", cluster=cluster,
                                            ps_tasks=7)
    with tf.device(setter):
        a, b, c = (tf.Variable(1.0, name=n) for n in "abc")
        y = a * b
    assert [v.device for v in (a, b, c)] == ["/job:ps/task:0", "/job:ps/task:1", "/job:ps/task:0"]
    assert y.op.device == "/job:worker/task:1"
    with pytest.raises(TypeError, match="job name -> tasks"):
        tf.train.replica_device_setter(cluster=["ps0:2222"])


def test_inner_scopes_fill_fields_first_and_the_setter_only_what_is_left():
    with tf.device(tf.train.replica_device_setter(ps_tasks=2, ps_device="/job:ps/cpu:0",
                                                  worker_device="/job:worker/task:3")):
        with tf.device("/gpu:1"):
            on_gpu = tf.constant(1.0, name="on_gpu")
        v0 = tf.Variable(1.0, name="v0")
        with tf.device("/job:ps/task:5"):
            pinned = tf.Variable(1.0, name="pinned")  # keeps task 5, but uses up task 1's turn
        with tf.device("/job:local"):
            elsewhere = tf.Variable(1.0, name="elsewhere")  # another job: no task chosen
        v_next = tf.Variable(1.0, name="v_next")
    assert on_gpu.op.device == "/job:worker/task:3/device:GPU:1"
    assert v0.device == "/job:ps/task:0/device:CPU:0"
    assert pinned.device == "/job:ps/task:5/device:CPU:0"
    assert elsewhere.device == "/job:local/device:CPU:0"
    assert v_next.device == "/job:ps/task:0/device:CPU:0"


def test_without_merge_devices_an_op_with_a_device_keeps_it():
    with tf.device(tf.train.replica_device_setter(ps_tasks=2, merge_devices=False)):
        with tf.device("/gpu:0"):
            kept = tf.Variable(1.0, name="kept")
        placed = tf.Variable(1.0, name="placed")
    assert kept.device == "/device:GPU:0" and placed.device == "/job:ps/task:0"


def test_ps_ops_and_ps_strategy_choose_what_goes_where():
    with tf.device(tf.train.replica_device_setter(ps_tasks=3, ps_ops=["Const"],
                                                  ps_strategy=lambda op: 2)):
        v = tf.Variable(1.0, name="v")
        c = tf.constant(2.0, name="c")
    assert v.device == "/job:worker" and c.op.device == "/job:ps/task:2"
    with pytest.raises(TypeError, match="ps_strategy must be callable"):
        tf.train.replica_device_setter(ps_tasks=1, ps_strategy=3)


def test_greedy_strategy_and_byte_size_load_fn():
    greedy = tf.train.GreedyLoadBalancingStrategy(2, tf.train.byte_size_load_fn)
    with tf.device(tf.train.replica_device_setter(ps_tasks=2, ps_strategy=greedy)):
        big = tf.Variable(np.zeros((10, 10), np.float64), name="big")  # 800 B -> task 0
        small = [tf.Variable(np.zeros(10, np.float32), name=f"s{i}") for i in range(3)]  # 40 B each
        last = tf.Variable(np.zeros(100, np.float64), name="last")  # loads [800, 120] -> task 1
    assert big.device == "/job:ps/task:0"
    assert [v.device for v in small + [last]] == ["/job:ps/task:1"] * 4
    assert tf.train.byte_size_load_fn(big.op) == 800
    with pytest.raises(ValueError, match="fully defined shape"):
        tf.train.byte_size_load_fn(tf.placeholder(tf.float32, [None, 3]).op)
    with pytest.raises(ValueError, match="single output"):
        tf.train.byte_size_load_fn(tf.no_op())
    with pytest.raises(ValueError, match="num_tasks >= 1"):
        tf.train.GreedyLoadBalancingStrategy(0, tf.train.byte_size_load_fn)


# ---- colocation ----------------------------------------------------------------------
def test_a_variables_state_ops_and_slots_follow_it_to_the_ps():
    with tf.device(tf.train.replica_device_setter(ps_tasks=2, worker_device="/job:worker/task:1")):
        w = tf.get_variable("w", [3, 2])
        b = tf.Variable(tf.zeros([2]), name="b")  # a tensor initial value stays on the worker
        loss = tf.reduce_sum(tf.matmul(tf.ones([1, 3]), w) + b)
        tf.train.AdamOptimizer(0.1).minimize(loss)
    graph = tf.get_default_graph()
    for var in (w, b):
        for suffix in ("Assign", "read"):
            assert graph.get_operation_by_name(f"{var.op.name}/{suffix}").device == var.device
    assert graph.get_operation_by_name("w/Initializer/RandomUniform").device == w.device
    assert b.initial_value.op.device == "/job:worker/task:1"
    assert graph.get_operation_by_name("w/Adam").device == w.device
    assert graph.get_operation_by_name("b/Adam_1").device == b.device
    with tf.device("/job:worker/task:0"), tf.colocate_with(b):
        beside_b = tf.constant(1.0, name="beside_b")
    assert beside_b.op.device == b.device
