"""tf.contrib.factorization.KMeans as TF 1.x scripts use it (issue 13: TensorFlow-Examples' kmeans.py),
checked on scikit-learn's handwritten digits against scikit-learn's KMeans and a NumPy reference."""

import numpy as np
import pytest
from sklearn.cluster import KMeans as SklearnKMeans
from sklearn.datasets import load_digits

import dflow as tf
from dflow.contrib.factorization import KMeans


@pytest.fixture(scope="module")
def digits():
    data = load_digits()
    return data.data.astype(np.float32), data.target


def _trained(points, steps, feed_batches=None, **kwargs):
    """Build, initialize and train as the TF 1.x examples do; returns (session results, graph parts)."""
    X = tf.placeholder(tf.float32, shape=[None, points.shape[1]])
    kmeans = KMeans(inputs=X, **kwargs)
    (all_scores, cluster_idx, scores, cluster_centers_initialized, init_op,
     train_op) = kmeans.training_graph()
    avg_distance = tf.reduce_mean(scores)
    sess = tf.Session()
    sess.run(tf.global_variables_initializer(), feed_dict={X: points})
    sess.run(init_op, feed_dict={X: points})
    distances = [sess.run([train_op, avg_distance], feed_dict={X: feed})[1]
                 for feed in (feed_batches or [points] * steps)]
    return sess, X, (all_scores, cluster_idx, scores, cluster_centers_initialized), distances


def test_full_batch_kmeans_plus_plus_reaches_sklearns_inertia(digits):
    points, _ = digits
    sess, X, (_, _, scores, initialized), distances = _trained(
        points, 40, num_clusters=10, initial_clusters="kmeans_plus_plus")
    inertia = sess.run(tf.reduce_sum(scores), {X: points})
    best = SklearnKMeans(10, n_init=10, random_state=0).fit(points).inertia_
    assert sess.run(initialized)
    assert inertia <= 1.05 * best, (inertia, best)  # one seeding against sklearn's best of 10
    assert all(b <= a + 1e-3 for a, b in zip(distances, distances[1:]))  # Lloyd never gets worse
    sess.close()


def test_the_tensorflow_examples_kmeans_script_on_digits(digits):
    """aymericdamien's kmeans.py: mini-batch cosine k-means, clusters labelled by majority vote."""
    points, labels = digits
    train_x, test_x, train_y, test_y = points[:1400], points[1400:], labels[:1400], labels[1400:]
    k = 25
    sess, X, (_, cluster_idx, _, _), distances = _trained(
        train_x, 30, num_clusters=k, distance_metric="cosine", use_mini_batch=True)
    assert distances[-1] < 0.8 * distances[0]
    cluster_idx = cluster_idx[0]  # fix for cluster_idx being a tuple
    idx = sess.run(cluster_idx, feed_dict={X: train_x})
    assert idx.dtype == np.int64 and idx.shape == (1400,)
    counts = np.zeros((k, 10))
    np.add.at(counts, (idx, train_y), 1)
    labels_map = tf.convert_to_tensor([np.argmax(c) for c in counts])
    Y = tf.placeholder(tf.int64, [None])
    cluster_label = tf.nn.embedding_lookup(labels_map, cluster_idx)
    accuracy = tf.reduce_mean(tf.cast(tf.equal(cluster_label, Y), tf.float32))
    assert sess.run(accuracy, feed_dict={X: test_x, Y: test_y}) > 0.75
    sess.close()


def _numpy_scores(points, centers, metric):
    if metric == "cosine":
        p = points / np.linalg.norm(points, axis=1, keepdims=True)
        c = centers / np.linalg.norm(centers, axis=1, keepdims=True)
        return p, 1 - p @ c.T
    return points, ((points[:, None, :] - centers[None]) ** 2).sum(-1)


@pytest.mark.parametrize("metric", ["squared_euclidean", "cosine"])
@pytest.mark.parametrize("use_mini_batch", [True, False])
def test_one_step_matches_the_documented_update(digits, metric, use_mini_batch):
    points = digits[0][:300]
    start = digits[0][[0, 1, 2, 3, 4]]
    sess, X, (all_scores, cluster_idx, scores, _), _ = _trained(
        points, 1, num_clusters=5, initial_clusters=start, distance_metric=metric,
        use_mini_batch=use_mini_batch)
    seen, expected_scores = _numpy_scores(points, start, metric)
    nearest = expected_scores.argmin(1)
    centers = start / np.linalg.norm(start, axis=1, keepdims=True) if metric == "cosine" else start
    new = np.empty_like(centers)
    for c in range(5):
        mine = seen[nearest == c]
        if use_mini_batch:  # running mean, counts starting at 1: c += (sum - n c) / (1 + n)
            new[c] = centers[c] + (mine.sum(0) - len(mine) * centers[c]) / (1 + len(mine))
        else:
            new[c] = mine.sum(0) / (len(mine) + 1e-6)
    if metric == "cosine" and not use_mini_batch:
        new /= np.linalg.norm(new, axis=1, keepdims=True)
    centers_var = [v for v in tf.global_variables() if v.op.name.endswith("clusters")][-1]
    np.testing.assert_allclose(sess.run(centers_var), new, rtol=1e-4, atol=1e-4)
    got = sess.run([all_scores[0], cluster_idx[0], scores[0]], {X: points})
    _, after = _numpy_scores(points, new, metric)
    np.testing.assert_allclose(got[0], after, rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(got[1], after.argmin(1))
    np.testing.assert_allclose(got[2], after.min(1), rtol=1e-4, atol=1e-3)
    sess.close()


def test_mini_batch_steps_per_iteration_copies_back_every_m_steps(digits):
    points = digits[0][:200]
    X = tf.placeholder(tf.float32, [None, 64])
    kmeans = KMeans(X, 4, initial_clusters=points[:4], use_mini_batch=True, mini_batch_steps_per_iteration=3)
    _, _, _, _, init_op, train_op = kmeans.training_graph()
    centers = [v for v in tf.global_variables() if v.op.name == "clusters"][0]
    updated = [v for v in tf.global_variables() if v.op.name == "clusters_updated"][0]
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(init_op, {X: points})
        seen, copies = [sess.run(centers)], []
        for _ in range(4):
            sess.run(train_op, {X: points})
            seen.append(sess.run(centers))
            copies.append(sess.run(updated))
        # steps 1-3 update the copy only (counts start at 0: it becomes the mean of each cluster's
        # points); the 4th step starts by copying it back
        for i in (1, 2, 3):
            np.testing.assert_array_equal(seen[i], seen[0])
        assert not np.allclose(copies[0], seen[0])
        np.testing.assert_array_equal(seen[4], copies[2])


def test_initialization_takes_batches_until_there_are_enough_centers(digits):
    points = digits[0]
    X = tf.placeholder(tf.float32, [None, 64])
    _, _, _, initialized, init_op, _ = KMeans(X, 10, random_seed=3).training_graph()
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(init_op, {X: points[:6]})  # fewer points than clusters: all of them are taken
        assert not sess.run(initialized)
        sess.run(init_op, {X: points[6:100]})
        assert sess.run(initialized)
        centers = sess.run([v for v in tf.global_variables() if v.op.name == "clusters"][0])
        np.testing.assert_array_equal(centers[:6], points[:6])
        assert centers.shape == (10, 64) and all((points[6:100] == c).all(1).any() for c in centers[6:])
        sess.run(init_op, {X: points[200:300]})  # initialized: the centers stay
        np.testing.assert_array_equal(sess.run(tf.global_variables()[0]), centers)


def test_kmeans_plus_plus_spreads_its_centers_and_is_seeded(digits):
    points = digits[0]

    def seeded(seed):
        with tf.Graph().as_default():
            X = tf.placeholder(tf.float32, [None, 64])
            init_op = KMeans(X, 10, initial_clusters="kmeans_plus_plus", random_seed=seed).training_graph()[4]
            with tf.Session() as sess:
                sess.run(tf.global_variables_initializer())
                sess.run(init_op, {X: points})
                return sess.run(tf.global_variables()[0])

    first, again, other = seeded(0), seeded(0), seeded(1)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    # k-means++ starts nearer the optimum than uniformly chosen points do, on average
    rng = np.random.RandomState(0)

    def cost(centers):
        return ((points[:, None] - centers[None]) ** 2).sum(-1).min(1).sum()

    uniform = np.mean([cost(points[rng.choice(len(points), 10, replace=False)]) for _ in range(20)])
    assert np.mean([cost(first), cost(other)]) < uniform


def test_bad_arguments_say_what_to_do():
    X = tf.placeholder(tf.float32, [None, 4])
    with pytest.raises(ValueError, match="distance_metric must be 'squared_euclidean' or 'cosine'"):
        KMeans(X, 3, distance_metric="manhattan")
    with pytest.raises(ValueError, match="kmc2' is not supported by dflow; use 'kmeans_plus_plus'"):
        KMeans(X, 3, initial_clusters="kmc2")
    _, _, _, _, init_op, train_op = KMeans(X, 5, initial_clusters="kmeans_plus_plus").training_graph()
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        with pytest.raises(tf.errors.InvalidArgumentError, match="run the k-means init_op first"):
            sess.run(train_op, {X: np.ones((8, 4))})
        with pytest.raises(tf.errors.InvalidArgumentError, match="at least 5 points"):
            sess.run(init_op, {X: np.ones((3, 4))})


def test_reached_as_tf_contrib_factorization():
    assert tf.contrib.factorization.KMeans is KMeans
    assert tf.contrib.factorization.COSINE_DISTANCE == "cosine"
    with pytest.raises(AttributeError, match=r"factorization.KMeansClustering is not supported by dflow; "
                                             r"use tf.contrib.factorization.KMeans\(...\).training_graph"):
        _ = tf.contrib.factorization.KMeansClustering
    with pytest.raises(AttributeError, match=r"factorization.WALSModel is not supported by dflow"):
        _ = tf.contrib.factorization.WALSModel


def test_a_kmeans_graph_survives_the_json_round_trip(digits):
    import json

    points = digits[0][:300]
    graph = tf.Graph()
    with graph.as_default():
        X = tf.placeholder(tf.float32, [None, 64], name="x")
        (_, cluster_idx, scores, initialized, init_op, train_op) = KMeans(
            X, 8, initial_clusters="kmeans_plus_plus", distance_metric="cosine", use_mini_batch=True,
            mini_batch_steps_per_iteration=2).training_graph()
        avg_distance = tf.reduce_mean(scores, name="avg_distance")
    restored = tf.import_graph_def(json.loads(json.dumps(graph.as_graph_def())))
    with restored.as_default(), tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(init_op.name, {"x:0": points})
        assert sess.run(initialized.name)
        first = sess.run(avg_distance.name, {"x:0": points})
        for _ in range(6):
            sess.run(train_op.name, {"x:0": points})
        assert sess.run(avg_distance.name, {"x:0": points}) < first
        assert sess.run(cluster_idx[0].name, {"x:0": points}).max() < 8


def test_a_function_gives_the_initial_centers(digits):
    """``initial_clusters=f(inputs, k)``: called with the input list and the number still missing."""
    points = digits[0][:100]
    asked = []

    def first_rows(inputs, k):
        asked.append(k)
        return tf.concat(inputs, 0)[:3]

    X = tf.placeholder(tf.float32, [None, 64])
    kmeans = KMeans(X, 6, initial_clusters=first_rows)
    _, cluster_idx, _, initialized, init_op, train_op = kmeans.training_graph()
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(init_op, {X: points})
        assert not sess.run(initialized)  # 3 of 6 so far
        sess.run(init_op, {X: points[50:]})
        assert sess.run(initialized)
        centers = sess.run(tf.global_variables()[0])
        np.testing.assert_array_equal(centers, np.concatenate([points[:3], points[50:53]]))
        sess.run(train_op, {X: points})
        assert set(sess.run(cluster_idx[0], {X: points}).tolist()) <= set(range(6))
    assert len(asked) == 1  # built once, into the graph
