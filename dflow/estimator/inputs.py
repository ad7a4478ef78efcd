"""``tf.estimator.inputs``: input functions that feed NumPy arrays in batches.

An input function builds placeholders for one batch and registers a
:class:`NumpyFeeder` in its graph; the :class:`~dflow.estimator.Estimator` asks the
feeders of its graph for each step's ``feed_dict`` and stops when they run out
(TF's ``numpy_input_fn`` builds a queue instead; the batches are the same).

>>> import numpy as np, dflow as tf
>>> input_fn = tf.estimator.inputs.numpy_input_fn(
...     x={"x": np.arange(5.0)}, y=np.arange(5), batch_size=2, num_epochs=1, shuffle=False)
>>> with tf.Graph().as_default():
...     features, labels = input_fn()
...     [len(feeds[labels]) for feeds in tf.estimator.inputs.feeders()[0].batches()]
[2, 2, 1]
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from .. import dtypes
from ..graph import get_default_graph
from ..ops.array_ops import placeholder

__all__ = ["numpy_input_fn", "NumpyFeeder", "feeders", "FEEDERS"]

FEEDERS = "dflow_input_feeders"  # the graph collection holding a graph's feeders


def feeders(graph=None) -> list:
    """The feeders that the input functions called in ``graph`` registered."""
    return (graph or get_default_graph()).get_collection(FEEDERS)


class NumpyFeeder:
    """Batches of arrays for a set of placeholders: ``num_epochs`` passes (forever when None),
    each reshuffled when ``shuffle``; the last batch of a finite run may be smaller."""

    def __init__(self, placeholders: dict, arrays: dict, batch_size: int, num_epochs, shuffle: bool,
                 seed=None):
        self.placeholders, self.arrays = placeholders, arrays
        self.batch_size, self.num_epochs, self.shuffle = batch_size, num_epochs, shuffle
        self._rng = np.random.default_rng(seed)
        self.size = len(next(iter(arrays.values())))

    def batches(self) -> Iterator[dict]:
        """Each step's ``{placeholder: batch}``."""
        if self.num_epochs is None:
            yield from self._endless()
            return
        for _ in range(int(self.num_epochs)):
            order = self._order()
            for start in range(0, self.size, self.batch_size):
                yield self._feed(order[start:start + self.batch_size])

    def _endless(self) -> Iterator[dict]:
        """Full batches forever, running on across epoch boundaries."""
        pending = np.empty(0, np.int64)
        while True:
            while len(pending) < self.batch_size:
                pending = np.concatenate([pending, self._order()])
            yield self._feed(pending[:self.batch_size])
            pending = pending[self.batch_size:]

    def _order(self):
        return self._rng.permutation(self.size) if self.shuffle else np.arange(self.size)

    def _feed(self, rows) -> dict:
        return {self.placeholders[key]: array[rows] for key, array in self.arrays.items()}


def _as_dict(value, what) -> tuple[dict, bool]:
    if isinstance(value, dict):
        if not value:
            raise ValueError(f"numpy_input_fn: {what} is an empty dict")
        return {k: np.asarray(v) for k, v in value.items()}, True
    return {"__value__": np.asarray(value)}, False


def numpy_input_fn(x, y=None, batch_size=128, num_epochs=1, shuffle=None, queue_capacity=1000,
                   num_threads=1):
    """An input function returning ``(features, labels)`` (``features`` alone when ``y`` is None),
    batches of ``x`` (a dict of arrays, or one array) and ``y`` fed at each step.

    ``shuffle`` must be given (True for training, False to evaluate or predict in order), as
    in TF; ``num_epochs=None`` repeats forever, so ``train`` needs ``steps`` then.
    """
    if not isinstance(shuffle, bool):
        raise ValueError(f"shuffle must be provided explicitly as a bool, got {shuffle!r}")
    features, features_dict = _as_dict(x, "x")
    labels, labels_dict = (None, False) if y is None else _as_dict(y, "y")
    sizes = {len(a) for a in [*features.values(), *(labels or {}).values()]}
    if len(sizes) != 1:
        raise ValueError(f"numpy_input_fn: x and y must have the same number of rows, got {sorted(sizes)}")
    if labels and set(labels) & set(features) - {"__value__"}:
        raise ValueError(f"numpy_input_fn: x and y share keys {sorted(set(labels) & set(features))}")

    def input_fn():
        graph = get_default_graph()
        with graph.name_scope("numpy_input_fn"):
            feature_phs = {k: _placeholder(a, k) for k, a in features.items()}
            label_phs = {k: _placeholder(a, k) for k, a in (labels or {}).items()}
        arrays = {("x", k): a for k, a in features.items()} | {("y", k): a for k, a in (labels or {}).items()}
        holders = {("x", k): p for k, p in feature_phs.items()} | {("y", k): p for k, p in label_phs.items()}
        graph.add_to_collection(FEEDERS, NumpyFeeder(holders, arrays, int(batch_size), num_epochs, shuffle,
                                                     seed=graph.seed))
        out_features = feature_phs if features_dict else feature_phs["__value__"]
        if labels is None:
            return out_features
        return out_features, label_phs if labels_dict else label_phs["__value__"]

    return input_fn


def _placeholder(array, key):
    name = "fed" if key == "__value__" else str(key)
    return placeholder(dtypes.as_dtype(array.dtype), (None, *array.shape[1:]), name=name)
