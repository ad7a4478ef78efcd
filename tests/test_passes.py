"""The planning passes as pure functions over networkx graphs (no cluster needed)."""

import networkx as nx
import numpy as np
import pytest

import dflow as tf
from dflow.runtime.passes import (
    LOCAL_TASK,
    Devices,
    MissingTaskError,
    PlanCache,
    build_stages,
    make_plan,
    partition,
    place,
    prune,
)

PS0, W0 = "/job:ps/task:0", "/job:worker/task:0"
CLUSTER = Devices(W0, {PS0: {}, W0: {}})


def _ps_step():
    x = tf.placeholder(tf.float32, [None, 2], name="x")
    with tf.device(PS0):
        w = tf.Variable(tf.ones([2, 1]), name="w")
    loss = tf.reduce_sum(tf.matmul(x, w), name="loss")
    train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
    unused = tf.constant(3.0, name="unused")
    return x, w, loss, train, unused


def test_each_pass_returns_a_new_graph_and_leaves_its_input_alone():
    x, w, loss, train, unused = _ps_step()
    graph = tf.get_default_graph().nx
    before = nx.to_dict_of_dicts(graph)
    pruned = prune(graph, [train.name, loss.name], {x.name})
    assert "unused" not in pruned and "x" not in pruned  # not needed; fed, so its producer is cut
    placed = place(pruned, CLUSTER)
    staged = partition(placed)
    assert "device" not in pruned.nodes["w"] and "stage" not in placed.nodes["w"]
    assert staged.nodes["w"]["device"] == f"{PS0}/device:CPU:0"
    assert staged.nodes[loss.op.name]["stage"] == (W0, 1)
    update = next(n for n, op in staged.nodes(data="op") if op.type == "ApplyGradientDescent")
    assert staged.nodes[update]["stage"] == (PS0, 2)  # beside its variable, after the gradients
    assert nx.to_dict_of_dicts(graph) == before
    assert list(pruned) == sorted(pruned, key=lambda n: graph.nodes[n]["op"]._id)  # topological


def test_a_plan_draws_any_stage_and_is_cached_per_signature():
    x, w, loss, train, _ = _ps_step()
    made = []
    cache = PlanCache(lambda fetches, fed: made.append(1) or make_plan(tf.get_default_graph(), fetches, fed,
                                                                        CLUSTER))
    plan = cache.get([train, loss], {x.name})
    assert cache.get([train, loss], {x.name}) is plan and len(made) == 1
    assert [s.name for s in plan.stages[PS0]] == ["read-variables", "apply-updates"]
    assert "forward-backward" in {s.name for s in plan.stages[W0]}
    dot = plan.to_dot(PS0, 2)
    assert dot.startswith("digraph dflow {") and "ApplyGradientDescent" in dot and "MatMul" not in dot
    assert f"cluster {PS0} stage 2" in dot


def test_a_last_stage_that_only_waits_for_the_updates_is_dropped_with_its_tokens():
    x, w, loss, train, _ = _ps_step()
    staged = partition(place(prune(tf.get_default_graph().nx, [train.name, loss.name], {x.name}), CLUSTER))
    built = build_stages(staged, [loss.name])
    # the train op's NoOp on the worker waits for the PS's update: a stage of its own
    # (level 0: the gradients' seed, ones of the loss's known shape, needs nothing from the PS)
    assert [s.level for s in built[W0]] == [0, 1, 3] and built[W0][-1].schedule.nodes.keys() == {train.name}
    assert any(name.startswith("^") for name in built[PS0][-1].sends[W0])
    plan = make_plan(tf.get_default_graph(), [train, loss], {x.name}, CLUSTER)
    assert [s.level for s in plan.stages[W0]] == [0, 1]
    assert W0 not in plan.stages[PS0][-1].sends  # the update's token went only to that stage
    assert [s.level for s in plan.stages[PS0]] == [0, 2]
    # a task's only stage stays, waiting or not
    with tf.device(W0):
        only = tf.group(w.assign_add([[1.0], [1.0]]), name="only")
    assert plan.stages[W0] and make_plan(tf.get_default_graph(), [only], set(), CLUSTER).stages[W0]


def test_one_soft_placement_rule_for_a_process_and_for_a_cluster():
    with tf.device("/job:worker/task:0/gpu:0"):
        y = tf.constant(1.0, name="c") * 2.0
    graph = tf.get_default_graph()
    with pytest.raises(tf.errors.InvalidArgumentError, match="Task /job:worker/task:0 has 0 GPU"):
        make_plan(graph, [y], set(), CLUSTER)
    soft = make_plan(graph, [y], set(), CLUSTER, allow_soft_placement=True)
    assert soft.placement[y.op.name] == f"{W0}/device:CPU:0"
    here = make_plan(graph, [y], set(), Devices.this_process(gpus=0), allow_soft_placement=True)
    assert set(here.placement.values()) == {f"{LOCAL_TASK}/device:CPU:0"}
    with pytest.raises(MissingTaskError, match="ps/task:3.*which this cluster lacks"):
        with tf.device("/job:ps/task:3"):
            z = y + 1.0
        make_plan(graph, [z], set(), CLUSTER, allow_soft_placement=True)


def test_a_local_session_plans_one_stage_and_the_runner_can_be_chosen():
    x = tf.placeholder(tf.float32, [2])
    y = x * 2.0
    with tf.Session(config=tf.ConfigProto(runner="local")) as sess:
        assert list(sess.run(y, {x: [1.0, 2.0]})) == [2.0, 4.0]
        plan = sess.runner.plans.values()[-1]
        assert list(plan.stages) == [LOCAL_TASK] and len(plan.stages[LOCAL_TASK]) == 1
    with pytest.raises(ValueError, match="runs on a cluster: give tf.Session its target"):
        tf.Session(config=tf.ConfigProto(runner="dask"))
    with pytest.raises(ValueError, match="choose one of local, direct, dask"):
        tf.Session(config=tf.ConfigProto(runner="grpc"))
    np.testing.assert_array_equal(plan.schedule.fetches, (y.name,))


def test_a_shape_known_when_the_graph_is_built_is_a_constant_that_reads_nothing():
    """As Grappler folds it: the gradients' reads of their forwards' shapes run as constants, and
    an op needed only for its known shape does not run; a shape known only at run time is read."""
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    w = tf.Variable(tf.ones([3, 2]), name="w")
    only_shaped = tf.matmul(tf.ones([4, 3]), w, name="only_shaped")
    known, dynamic = tf.shape(only_shaped, out_type=tf.int64), tf.shape(x)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        got_known, got_dynamic = sess.run([known, dynamic], {x: np.zeros((5, 3), np.float32)})
        nodes = sess.runner.plans.values()[-1].schedule.nodes
    assert got_known.tolist() == [4, 2] and got_known.dtype == np.int64 and got_dynamic.tolist() == [5, 3]
    assert nodes[known.op.name].type == "Const" and nodes[known.op.name].inputs == ()
    assert "only_shaped" not in nodes and nodes[dynamic.op.name].type == "Shape"
