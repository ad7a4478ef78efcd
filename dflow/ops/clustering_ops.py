"""K-means kernels (TF's ``gen_clustering_ops``): the nearest centers of each point, and the choice
of initial centers (uniformly at random, or by k-means++ seeding).

Both are discrete, so neither has a gradient. ``KMeansAddCenters`` draws on the host, as TF's
CPU-only ``KmeansPlusPlusInitialization`` kernel does; it runs once per initialization batch.

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     points = tf.constant([[0.0, 0.0], [0.9, 1.0], [5.0, 5.0]])
...     centers = tf.constant([[1.0, 1.0], [5.0, 4.0]])
...     indices, distances = nearest_neighbors(points, centers, 1)
...     with tf.Session() as sess:
...         sess.run(indices).ravel().tolist(), [round(float(d), 2) for d in sess.run(distances).ravel()]
([0, 0, 1], [2.0, 0.01, 1.0])
"""

from __future__ import annotations

import math

import numpy as np  # the initial centers are drawn on the host, as TF's CPU kernel does

from .. import dtypes
from ..graph import Tensor, convert_to_tensor, get_default_graph
from ..runtime.devices import numpy_namespace, to_namespace
from .registry import ShapeError, Spec, defop
from .shape_rules import fmt

__all__ = ["nearest_neighbors", "kmeans_add_centers", "squared_distances"]


def _rows_of(spec, what):
    if spec.shape is not None and len(spec.shape) != 2:
        raise ShapeError(f"{what} must be a matrix [rows, features], got {fmt(spec.shape)}")
    return (None, None) if spec.shape is None else spec.shape


def _nearest_infer(inputs, k):
    points, centers = inputs
    (n, features), (_, center_features) = _rows_of(points, "points"), _rows_of(centers, "centers")
    if None not in (features, center_features) and features != center_features:
        raise ShapeError(f"points {fmt(points.shape)} and centers {fmt(centers.shape)} differ in features")
    return [Spec((n, k), dtypes.int64), Spec((n, k), points.dtype)]


def squared_distances(xp, points, centers):
    """``|p|^2 - 2 p.c + |c|^2`` for every point and center; rounding below 0 is clipped."""
    cross = xp.matmul(points, xp.matrix_transpose(centers))
    distances = (xp.sum(points * points, axis=1)[:, None] - 2.0 * cross
                 + xp.sum(centers * centers, axis=1)[None, :])
    return xp.maximum(distances, xp.asarray(0.0, dtype=distances.dtype))


def _nearest_kernel(xp, points, centers, k):
    if centers.ndim != 2 or centers.shape[0] < k:
        raise ValueError(f"{k} nearest centers were asked of {tuple(centers.shape)} centers; "
                         "run the k-means init_op first")
    distances = squared_distances(xp, points, centers)
    nearest = xp.argmin(distances, axis=1)[:, None] if k == 1 else xp.argsort(distances, axis=1)[:, :k]
    rows = xp.arange(points.shape[0], dtype=nearest.dtype)[:, None]
    flat = xp.reshape(rows * centers.shape[0] + nearest, (-1,))
    picked = xp.reshape(xp.take(xp.reshape(distances, (-1,)), flat), nearest.shape)
    return xp.astype(nearest, xp.int64), picked


defop("NearestNeighbors", _nearest_infer, _nearest_kernel, num_outputs=2, gpu=False)


def nearest_neighbors(points, centers, k, name=None) -> tuple[Tensor, Tensor]:
    """The ``k`` centers nearest each point: ``(indices [n, k] int64, squared distances [n, k])``,
    nearest first (TF's ``gen_clustering_ops.nearest_neighbors``)."""
    points, centers = convert_to_tensor(points), convert_to_tensor(centers)
    op = get_default_graph().create_op("NearestNeighbors", [points, centers], {"k": int(k)},
                                       name=name or "NearestNeighbors")
    return op.outputs[0], op.outputs[1]


# ---- initial centers ---------------------------------------------------------------------------
def _add_centers_infer(inputs, num_clusters, method, seed, num_retries):
    _, candidates = inputs
    features = _rows_of(candidates, "candidate centers")[1]
    return [Spec((None, features), candidates.dtype)]


def _kmeans_plus_plus(rng, points, count, num_retries):
    """k-means++ seeding: each new center is drawn with probability proportional to its squared
    distance to the centers so far; of ``1 + num_retries`` such draws the one that lowers the total
    distance most is kept (``num_retries < 0``: ``2 + log(count)`` retries)."""
    tries = 1 + (num_retries if num_retries >= 0 else 2 + int(math.log(count)))
    chosen = [int(rng.integers(len(points)))]
    nearest = ((points - points[chosen[0]]) ** 2).sum(1)
    for _ in range(count - 1):
        total = nearest.sum()
        if total > 0:
            draws = np.searchsorted(np.cumsum(nearest), rng.random(tries) * total, side="right")
            draws = np.minimum(draws, len(points) - 1)
        else:  # every point sits on a center: any is as good
            draws = rng.integers(len(points), size=tries)
        after = [np.minimum(nearest, ((points - points[d]) ** 2).sum(1)) for d in draws]
        best = int(np.argmin([a.sum() for a in after]))
        chosen.append(int(draws[best]))
        nearest = after[best]
    return points[chosen]


def _add_centers_kernel(state, xp, centers, candidates, num_clusters, method, seed, num_retries):
    have = centers.shape[0] if centers.ndim == 2 else 0
    remaining = num_clusters - have
    if remaining <= 0:
        return centers
    points = np.asarray(to_namespace(candidates, numpy_namespace))
    rng = state.random_generator(seed)
    if method == "random":  # a batch too small gives all of its points (initialization continues)
        new = points if len(points) <= remaining else points[rng.integers(len(points), size=remaining)]
    elif method == "kmeans_plus_plus":
        if len(points) < remaining:
            raise ValueError(f"kmeans_plus_plus initialization needs a batch of at least {remaining} "
                             f"points to choose the remaining centers from, got {len(points)}")
        new = _kmeans_plus_plus(rng, points.astype(np.float64), remaining, num_retries).astype(points.dtype)
    else:  # given centers (an f(inputs, k) may give fewer: initialization then continues)
        if len(points) > remaining:
            raise ValueError(f"{len(points)} initial centers were given for the {remaining} missing "
                             f"of {num_clusters}")
        new = points
    if have:
        new = np.concatenate([np.asarray(to_namespace(centers, numpy_namespace)), new])
    return xp.asarray(new)


defop("KMeansAddCenters", _add_centers_infer, _add_centers_kernel, stateful=True, gpu=False)


def kmeans_add_centers(centers, candidates, num_clusters, method, seed, num_retries=2,
                       name=None) -> Tensor:
    """``centers`` with up to ``num_clusters - len(centers)`` more rows chosen from ``candidates``
    (``method``: ``"random"``, ``"kmeans_plus_plus"``, or ``"given"`` to take them all); the
    centers unchanged once there are ``num_clusters``."""
    if method not in ("random", "kmeans_plus_plus", "given"):
        raise ValueError(f"unknown initialization method {method!r}")
    attrs = {"num_clusters": int(num_clusters), "method": method, "seed": seed,
             "num_retries": int(num_retries)}
    return get_default_graph().create_op(
        "KMeansAddCenters", [convert_to_tensor(centers), convert_to_tensor(candidates)], attrs,
        name=name or "KMeansAddCenters").outputs[0]
