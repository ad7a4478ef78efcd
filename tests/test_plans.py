"""Plans on the cluster's workers: forgotten when their session closes, registered again when a
worker lost them."""

import numpy as np
from conftest import local_cluster_fixture

import dflow as tf

cluster = local_cluster_fixture(ps=1, workers=1)


def _plans_held(cluster) -> dict[str, int]:
    def count(dask_worker):
        plugin = dask_worker.plugins.get("dflow")  # (installed by the first session)
        return len(plugin.plans) if plugin is not None else 0

    held = cluster.client.run(count)
    names = {address: info["name"] for address, info in tf.cluster.worker_infos(cluster.client).items()}
    return {names[address]: n for address, n in held.items()}


def _model():
    x = tf.placeholder(tf.float32, [None], name="x")
    with tf.device("/job:ps/task:0"):
        w = tf.Variable(1.0, name="w")
    with tf.device("/job:worker/task:0"):
        y = x * w
    return x, w, y


def test_closing_a_session_unregisters_its_plans(cluster, target):
    x, w, y = _model()
    before = _plans_held(cluster)
    for _ in range(20):
        with tf.Session(target) as sess:
            sess.run(w.initializer)
            sess.run(y, {x: np.ones(3, np.float32)})
            assert sum(_plans_held(cluster).values()) > sum(before.values())
    assert _plans_held(cluster) == before  # 20 sessions, 40 plans: none left behind


def test_a_worker_that_lost_its_plans_gets_them_again(cluster, target):
    x, w, y = _model()

    def forget(dask_worker):
        dask_worker.plugins["dflow"].plans.clear()

    with tf.Session(target) as sess:
        sess.run(w.initializer)
        assert sess.run(y, {x: np.ones(2, np.float32)}).tolist() == [1.0, 1.0]
        cluster.client.run(forget)  # as a worker that restarted at its address would have
        assert sess.run(y, {x: np.full(2, 2.0, np.float32)}).tolist() == [2.0, 2.0]
