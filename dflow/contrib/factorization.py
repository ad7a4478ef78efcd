"""``tf.contrib.factorization``: k-means clustering as TF 1.x's ``KMeans`` graph builder.

``KMeans(inputs, num_clusters, ...).training_graph()`` returns TF r1.15's six values
``(all_scores, cluster_idx, scores, cluster_centers_initialized, init_op, training_op)``; the
first three are tuples with one tensor per input. Run ``init_op`` (fed a batch) until
``cluster_centers_initialized`` is true, then ``training_op`` per batch:

- ``use_mini_batch=True``: each center moves to the running mean of every point ever assigned
  to it (``c += (sum(points) - n_batch * c) / (n_seen + n_batch)``, counts starting at 1);
  with ``mini_batch_steps_per_iteration=m > 1`` the updates go to a copy that is copied back
  (and its counts reset) every ``m`` steps;
- ``use_mini_batch=False``: one Lloyd iteration on the batch (each center becomes the mean of
  its points; a center with none becomes 0, as in TF).

``distance_metric="cosine"`` normalizes the points and compares them with normalized centers:
a score is ``1 - cos``; ``"squared_euclidean"`` scores the squared distance.

>>> import numpy as np
>>> import dflow as tf
>>> from dflow.contrib.factorization import KMeans
>>> with tf.Graph().as_default():
...     x = tf.placeholder(tf.float32, [None, 2])
...     kmeans = KMeans(inputs=x, num_clusters=2, initial_clusters=np.float32([[0, 0], [9, 9]]))
...     (all_scores, cluster_idx, scores, initialized, init_op, train_op) = kmeans.training_graph()
...     points = np.float32([[0, 1], [1, 0], [8, 9], [9, 8]])
...     with tf.Session() as sess:
...         sess.run(tf.global_variables_initializer())
...         _ = sess.run(init_op, {x: points})
...         _ = sess.run(train_op, {x: points})
...         sess.run(cluster_idx[0], {x: points}).tolist(), sess.run(scores[0], {x: points}).tolist()
([0, 0, 1, 1], [0.5, 0.5, 0.5, 0.5])
"""

from __future__ import annotations

from collections.abc import Sequence

from .. import dtypes
from ..graph import Operation, Tensor, control_dependencies, convert_to_tensor, name_scope
from ..ops import array_ops, math_ops, nn_ops, state_ops
from ..ops.clustering_ops import kmeans_add_centers, nearest_neighbors
from ..ops.embedding_ops import unsorted_segment_sum
from ..ops.state_ops import op_seed
from ..variables import Variable, group

__all__ = ["KMeans", "SQUARED_EUCLIDEAN_DISTANCE", "COSINE_DISTANCE", "RANDOM_INIT",
           "KMEANS_PLUS_PLUS_INIT", "KMC2_INIT", "CLUSTERS_VAR_NAME"]

SQUARED_EUCLIDEAN_DISTANCE = "squared_euclidean"
COSINE_DISTANCE = "cosine"
RANDOM_INIT = "random"
KMEANS_PLUS_PLUS_INIT = "kmeans_plus_plus"
KMC2_INIT = "kmc2"
CLUSTERS_VAR_NAME = "clusters"


class KMeans:
    """Creates the graph for k-means clustering (TF 1.x's ``tf.contrib.factorization.KMeans``).

    ``initial_clusters``: ``"random"`` (points of the first batches drawn uniformly),
    ``"kmeans_plus_plus"``, an array or tensor of centers, or ``f(inputs, k)`` returning centers.
    ``inputs`` is a tensor or a list of them (shards of one batch).
    """

    def __init__(self, inputs, num_clusters, initial_clusters=RANDOM_INIT,
                 distance_metric=SQUARED_EUCLIDEAN_DISTANCE, use_mini_batch=False,
                 mini_batch_steps_per_iteration=1, random_seed=0, kmeans_plus_plus_num_retries=2,
                 kmc2_chain_length=200):
        if distance_metric not in (SQUARED_EUCLIDEAN_DISTANCE, COSINE_DISTANCE):
            raise ValueError(f"KMeans distance_metric must be {SQUARED_EUCLIDEAN_DISTANCE!r} or "
                             f"{COSINE_DISTANCE!r}, got {distance_metric!r}")
        if isinstance(initial_clusters, str) and initial_clusters == KMC2_INIT:
            raise ValueError("KMeans initial_clusters='kmc2' is not supported by dflow; use "
                             "'kmeans_plus_plus' (the seeding k-MC2 approximates) or 'random'")
        if isinstance(initial_clusters, str) and initial_clusters not in (RANDOM_INIT, KMEANS_PLUS_PLUS_INIT):
            raise ValueError(f"KMeans initial_clusters must be 'random', 'kmeans_plus_plus', centers or a "
                             f"function f(inputs, k), got {initial_clusters!r}")
        if int(mini_batch_steps_per_iteration) < 1:
            raise ValueError(f"mini_batch_steps_per_iteration must be >= 1, got "
                             f"{mini_batch_steps_per_iteration}")
        shards = inputs if isinstance(inputs, (list, tuple)) else [inputs]
        self._inputs = [convert_to_tensor(i) for i in shards]
        self._initial_clusters = initial_clusters
        self._num_clusters = self._count_clusters(num_clusters, initial_clusters)
        self._distance_metric = distance_metric
        self._use_mini_batch = bool(use_mini_batch)
        self._steps_per_iteration = int(mini_batch_steps_per_iteration)
        self._seed = op_seed(random_seed)
        self._num_retries = int(kmeans_plus_plus_num_retries)

    @staticmethod
    def _count_clusters(num_clusters, initial_clusters) -> int:
        if isinstance(initial_clusters, str) or callable(initial_clusters):
            value = getattr(num_clusters, "value", num_clusters)  # TF's Dimension
            if isinstance(value, Tensor):
                raise TypeError("dflow's KMeans needs num_clusters as a Python int (its variables are "
                                "sized at build time), got a tensor")
            return int(value)
        rows = convert_to_tensor(initial_clusters).shape[0].value
        if rows is None:
            raise ValueError("KMeans initial_clusters given as a tensor needs a known number of rows")
        return rows

    # ---- the graph ----------------------------------------------------------------------------
    def training_graph(self):
        """``(all_scores, cluster_idx, scores, cluster_centers_initialized, init_op, training_op)``:
        distances of each input row to every center, its nearest center (int64) and the distance to
        it (one tensor per input in each), a bool variable set once all centers are chosen, the op
        choosing them from the fed batch, and the op running one step of training."""
        centers_var, initialized, counts, updated_var, update_in_steps = self._create_variables()
        init_op = self._init_op(centers_var, updated_var, initialized)
        inputs = self._inputs
        centers = centers_var.value()
        if self._distance_metric == COSINE_DISTANCE:
            inputs = [nn_ops.l2_normalize(i, axis=1) for i in inputs]
            if not self._centers_kept_normalized():
                centers = nn_ops.l2_normalize(centers, axis=1)
        all_scores, scores, cluster_idx = self._infer(inputs, centers)
        if self._use_mini_batch:
            sync = self._sync_op(update_in_steps, centers_var, updated_var, counts)
            training_op = self._mini_batch_op(inputs, cluster_idx, updated_var, counts, sync)
        else:
            training_op = self._full_batch_op(inputs, cluster_idx, centers_var)
        return all_scores, cluster_idx, scores, initialized, init_op, training_op

    def _centers_kept_normalized(self) -> bool:
        """Cosine centers are stored normalized, except under plain mini-batch updates (a running
        mean of unit vectors), which inference normalizes instead."""
        return self._distance_metric == COSINE_DISTANCE and (
            not self._use_mini_batch or self._steps_per_iteration > 1)

    def _create_variables(self):
        features = self._inputs[0].shape[1].value if self._inputs[0].shape.ndims == 2 else None
        empty = array_ops.zeros([0, features or 0], dtype=self._inputs[0].dtype)
        centers = Variable(empty, name=CLUSTERS_VAR_NAME, validate_shape=False, trainable=False)
        initialized = Variable(False, dtype=dtypes.bool, name="initialized", trainable=False)
        k = self._num_clusters
        if not self._use_mini_batch:
            return centers, initialized, None, centers, None
        if self._steps_per_iteration == 1:
            counts = Variable(array_ops.ones([k], dtype=dtypes.int64), trainable=False)
            return centers, initialized, counts, centers, None
        updated = Variable(empty, name="clusters_updated", validate_shape=False, trainable=False)
        steps = Variable(self._steps_per_iteration, dtype=dtypes.int64, name="update_in_steps",
                         trainable=False)
        counts = Variable(array_ops.zeros([k], dtype=dtypes.int64), trainable=False)
        return centers, initialized, counts, updated, steps

    # ---- initialization ------------------------------------------------------------------------
    def _init_op(self, centers_var, updated_var, initialized) -> Operation:
        """Adds centers from the fed batch until there are ``num_clusters``; then sets ``initialized``."""
        with name_scope("initialize_clusters"):
            candidates, method = self._candidates(centers_var)
            if self._distance_metric == COSINE_DISTANCE:
                candidates = nn_ops.l2_normalize(candidates, axis=1)
            chosen = kmeans_add_centers(centers_var.value(), candidates, self._num_clusters, method,
                                        self._seed, self._num_retries)
            assigned = state_ops.assign(centers_var, chosen, validate_shape=False)
            if updated_var is not centers_var:
                assigned = state_ops.assign(updated_var, assigned, validate_shape=False)
            done = math_ops.greater_equal(array_ops.shape(assigned)[0], self._num_clusters)
            return group(state_ops.assign(initialized, done))

    def _candidates(self, centers_var) -> tuple[Tensor, str]:
        init = self._initial_clusters
        if isinstance(init, str):  # random draws from every shard; k-means++ seeds on the first, as TF
            points = self._inputs[0] if init == KMEANS_PLUS_PLUS_INIT else array_ops.concat(self._inputs, 0)
            return points, init
        if callable(init):
            remaining = self._num_clusters - array_ops.shape(centers_var.value())[0]
            return convert_to_tensor(init(self._inputs, remaining)), "given"
        return convert_to_tensor(init, dtype=self._inputs[0].dtype), "given"

    # ---- inference -----------------------------------------------------------------------------
    def _infer(self, inputs: Sequence[Tensor], centers: Tensor):
        all_scores, scores, cluster_idx = [], [], []
        for points in inputs:
            indices, distances = nearest_neighbors(points, centers, 1)
            distances = array_ops.squeeze(distances, [-1])
            if self._distance_metric == COSINE_DISTANCE:  # |a - b|^2 / 2 = 1 - cos for unit vectors
                distances = math_ops.multiply(distances, 0.5)
                all_scores.append(math_ops.subtract(1.0, math_ops.matmul(points, centers, transpose_b=True)))
            else:
                all_scores.append(_squared_euclidean(points, centers))
            scores.append(distances)
            cluster_idx.append(array_ops.squeeze(indices, [-1]))
        return tuple(all_scores), tuple(scores), tuple(cluster_idx)

    # ---- training ------------------------------------------------------------------------------
    def _mini_batch_op(self, inputs, cluster_idx, centers_var, counts, sync) -> Operation:
        updates = []
        k = self._num_clusters
        with control_dependencies([sync]):
            old_centers = array_ops.identity(centers_var.value())
            old_counts = array_ops.identity(counts.value())
        for points, idx in zip(inputs, cluster_idx):
            added = unsorted_segment_sum(array_ops.ones_like(idx, dtype=dtypes.int64), idx, k)
            sums = unsorted_segment_sum(points, idx, k)
            added_f = array_ops.expand_dims(math_ops.cast(added, points.dtype), 1)
            seen_f = array_ops.expand_dims(math_ops.cast(math_ops.add(old_counts, added), points.dtype), 1)
            # c += (sum(points) - n * c) / (seen + n): the running mean of the points assigned to c
            step = math_ops.divide(math_ops.subtract(sums, math_ops.multiply(added_f, old_centers)), seen_f)
            updates += [state_ops.assign_add(counts, added), state_ops.assign_add(centers_var, step)]
        return group(*updates)

    def _sync_op(self, update_in_steps, centers_var, updated_var, counts):
        """Every ``mini_batch_steps_per_iteration`` steps: the updated copy becomes the centers and
        its counts restart (a no-op with one step per iteration)."""
        if update_in_steps is None:
            return array_ops.no_op()
        due = math_ops.less_equal(update_in_steps.value(), 0)
        copy = updated_var.value()
        if self._distance_metric == COSINE_DISTANCE:
            copy = nn_ops.l2_normalize(copy, axis=1)
        counts_now = counts.value()
        return group(
            state_ops.assign(centers_var, math_ops.where(due, copy, centers_var.value()),
                             validate_shape=False),
            state_ops.assign(counts, math_ops.where(due, array_ops.zeros_like(counts_now), counts_now)),
            state_ops.assign(update_in_steps, math_ops.where(
                due, math_ops.cast(self._steps_per_iteration - 1, dtypes.int64),
                math_ops.subtract(update_in_steps.value(), 1))))

    def _full_batch_op(self, inputs, cluster_idx, centers_var) -> Operation:
        k = self._num_clusters
        sums = math_ops.add_n([unsorted_segment_sum(p, i, k) for p, i in zip(inputs, cluster_idx)])
        counts = math_ops.add_n([unsorted_segment_sum(array_ops.ones_like(i, dtype=p.dtype), i, k)
                                 for p, i in zip(inputs, cluster_idx)])
        means = math_ops.divide(sums, array_ops.expand_dims(math_ops.add(counts, 1e-6), 1))
        if self._centers_kept_normalized():
            means = nn_ops.l2_normalize(means, axis=1)
        return group(state_ops.assign(centers_var, means, validate_shape=False))


def _squared_euclidean(points: Tensor, centers: Tensor) -> Tensor:
    point_norms = math_ops.reduce_sum(math_ops.square(points), 1, keepdims=True)
    center_norms = math_ops.reduce_sum(math_ops.square(centers), 1, keepdims=True)
    cross = math_ops.matmul(points, centers, transpose_b=True)
    return math_ops.add(math_ops.subtract(point_norms, math_ops.multiply(cross, 2.0)),
                        array_ops.transpose(center_norms))


_INSTEAD = {
    "KMeansClustering": "tf.contrib.factorization.KMeans(...).training_graph() in a tf.Session loop",
}


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    instead = _INSTEAD.get(name, "tf.contrib.factorization.KMeans, the only part dflow has")
    raise AttributeError(f"tf.contrib.factorization.{name} is not supported by dflow; use {instead} instead")
