"""``tf.feature_column``: how a ``model_fn`` turns a dict of raw features into one dense input
(``input_layer``), as TF 1.x's Estimator tutorials (census "wide and deep") write it.

Numeric features pass through (or are cut into buckets); categorical ones are looked up in a
vocabulary list or file (a lookup table, initialized with the others by ``tf.tables_initializer``
and the training sessions) or taken as ids, then either one-hot encoded (``indicator_column``) or
embedded (``embedding_column``: a trainable ``[buckets, dimension]`` variable). Each column's
dense part is ``[batch, width]``; ``input_layer`` concatenates them in the columns' name order,
as TF does.

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     features = {"age": tf.constant([[23.0], [61.0]]), "color": tf.constant([["red"], ["blue"]])}
...     color = tf.feature_column.categorical_column_with_vocabulary_list("color", ["red", "green", "blue"])
...     dense = tf.feature_column.input_layer(features, [
...         tf.feature_column.numeric_column("age"),
...         tf.feature_column.bucketized_column(tf.feature_column.numeric_column("age"), [30, 50]),
...         tf.feature_column.indicator_column(color)])
...     with tf.Session() as sess:
...         sess.run(tf.tables_initializer())
...         sess.run(dense).tolist()
[[23.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0], [61.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0]]
"""

from __future__ import annotations

import math
from typing import NamedTuple

from . import dtypes
from .graph import Tensor, convert_to_tensor
from .ops import array_ops, math_ops
from .ops.embedding_ops import embedding_lookup
from .ops.lookup_ops import index_table_from_file, index_table_from_tensor
from .variables import get_variable, truncated_normal_initializer, variable_scope

__all__ = ["numeric_column", "bucketized_column", "categorical_column_with_vocabulary_list",
           "categorical_column_with_vocabulary_file", "categorical_column_with_identity", "indicator_column",
           "embedding_column", "input_layer"]


class _Numeric(NamedTuple):
    key: str
    shape: tuple
    default_value: object
    dtype: object
    normalizer_fn: object

    @property
    def name(self) -> str:
        return self.key

    def dense(self, features: dict) -> Tensor:
        value = math_ops.cast(_feature(features, self.key), dtypes.float32)
        if self.normalizer_fn is not None:
            value = self.normalizer_fn(value)
        return array_ops.reshape(value, [-1, math.prod(self.shape)])


class _Bucketized(NamedTuple):
    source_column: _Numeric
    boundaries: tuple

    @property
    def name(self) -> str:
        return f"{self.source_column.name}_bucketized"

    @property
    def num_buckets(self) -> int:
        return (len(self.boundaries) + 1) * math.prod(self.source_column.shape)

    def ids(self, features: dict, cache: dict) -> Tensor:
        """Each value's bucket: how many boundaries it reaches (``value >= boundary``)."""
        value = self.source_column.dense(features)
        buckets = math_ops.add_n([math_ops.cast(value >= b, dtypes.int64) for b in self.boundaries]) \
            if self.boundaries else math_ops.cast(value * 0, dtypes.int64)
        first = array_ops.range_(math.prod(self.source_column.shape)) * (len(self.boundaries) + 1)
        return buckets + math_ops.cast(first, dtypes.int64)  # each element's buckets after the one before's

    def dense(self, features: dict) -> Tensor:
        return _one_hot_sum(self.ids(features, {}), self.num_buckets)


class _Categorical(NamedTuple):
    key: str
    vocabulary: object  # a list of keys, a file name, or None (the values are the ids)
    num_buckets: int
    default_value: int

    @property
    def name(self) -> str:
        return self.key

    def ids(self, features: dict, cache: dict) -> Tensor:
        """Each value's id (``default_value`` where it is not in the vocabulary), [batch, n]."""
        value = _feature(features, self.key)
        if self.vocabulary is None:
            ids = math_ops.cast(value, dtypes.int64)
        else:
            vocabulary = (self.key, repr(self.vocabulary), self.default_value)  # one table per vocabulary
            table = cache.get(vocabulary)
            if table is None:
                make = index_table_from_file if isinstance(self.vocabulary, str) else index_table_from_tensor
                table = cache[vocabulary] = make(self.vocabulary, default_value=self.default_value)
            ids = table.lookup(value if value.dtype == dtypes.string else math_ops.cast(value, dtypes.int64))
        return array_ops.reshape(ids, [array_ops.shape(ids)[0], -1])


class _Indicator(NamedTuple):
    categorical_column: object

    @property
    def name(self) -> str:
        return f"{self.categorical_column.name}_indicator"

    def dense(self, features: dict, cache: dict) -> Tensor:
        return _one_hot_sum(self.categorical_column.ids(features, cache), self.categorical_column.num_buckets)


class _Embedding(NamedTuple):
    categorical_column: object
    dimension: int
    combiner: str
    initializer: object

    @property
    def name(self) -> str:
        return f"{self.categorical_column.name}_embedding"

    def dense(self, features: dict, cache: dict) -> Tensor:
        initializer = self.initializer or truncated_normal_initializer(stddev=1 / math.sqrt(self.dimension))
        weights = get_variable(f"{self.name}/embedding_weights",
                               [self.categorical_column.num_buckets, self.dimension], initializer=initializer)
        ids = self.categorical_column.ids(features, cache)
        known = math_ops.cast(ids >= 0, dtypes.float32)  # out-of-vocabulary ids (-1) count for nothing
        rows = embedding_lookup(weights, math_ops.maximum(ids, 0)) * array_ops.expand_dims(known, -1)
        total = math_ops.reduce_sum(rows, axis=1)
        if self.combiner == "sum":
            return total
        count = math_ops.reduce_sum(known, axis=1, keepdims=True)
        if self.combiner == "mean":
            return total / math_ops.maximum(count, 1.0)
        return total / math_ops.maximum(math_ops.sqrt(math_ops.reduce_sum(known * known, axis=1,
                                                                           keepdims=True)), 1.0)


def _feature(features: dict, key: str) -> Tensor:
    if key not in features:
        raise ValueError(f"feature column {key!r} has no feature of that name: the features are "
                         f"{sorted(features)}")
    return convert_to_tensor(features[key])


def _one_hot_sum(ids: Tensor, depth: int) -> Tensor:
    """``[batch, n]`` ids as ``[batch, depth]`` counts (an id out of range counts for nothing)."""
    return math_ops.reduce_sum(array_ops.one_hot(ids, depth, dtype=dtypes.float32), axis=1)


def _no_oov(num_oov_buckets) -> None:
    if num_oov_buckets:
        raise ValueError("num_oov_buckets is not supported by dflow (TF hashes unknown values with "
                         "FarmHash): unknown values get default_value")


# ---- the constructors -------------------------------------------------------------------------------
def numeric_column(key: str, shape=(1,), default_value=None, dtype=dtypes.float32, normalizer_fn=None):
    """A numeric feature of ``shape`` per example, as float32 (``normalizer_fn`` applied)."""
    shape = (int(shape),) if isinstance(shape, int) else tuple(int(d) for d in shape)
    return _Numeric(key, shape, default_value, dtypes.as_dtype(dtype), normalizer_fn)


def bucketized_column(source_column, boundaries):
    """A numeric column cut at the sorted ``boundaries`` into one-hot buckets."""
    boundaries = tuple(float(b) for b in boundaries)
    if list(boundaries) != sorted(boundaries):
        raise ValueError(f"bucketized_column's boundaries must be sorted, got {list(boundaries)}")
    if not isinstance(source_column, _Numeric):
        raise ValueError("bucketized_column takes a numeric_column")
    return _Bucketized(source_column, boundaries)


def categorical_column_with_vocabulary_list(key: str, vocabulary_list, dtype=None, default_value=-1,
                                            num_oov_buckets=0):
    """A categorical feature whose values are looked up in ``vocabulary_list`` (ids: positions)."""
    _no_oov(num_oov_buckets)
    vocabulary = list(vocabulary_list)
    return _Categorical(key, vocabulary, len(vocabulary), int(default_value))


def categorical_column_with_vocabulary_file(key: str, vocabulary_file: str, vocabulary_size=None,
                                            num_oov_buckets=0, default_value=None, dtype=dtypes.string):
    """A categorical feature looked up in a file of one value per line (ids: line numbers)."""
    _no_oov(num_oov_buckets)
    if vocabulary_size is None:
        from .gfile import GFile

        with GFile(vocabulary_file) as f:
            vocabulary_size = sum(1 for _ in f)
    return _Categorical(key, str(vocabulary_file), int(vocabulary_size),
                        -1 if default_value is None else int(default_value))


def categorical_column_with_identity(key: str, num_buckets: int, default_value=None):
    """A categorical feature whose integer values are the ids, in ``[0, num_buckets)``."""
    return _Categorical(key, None, int(num_buckets), -1 if default_value is None else int(default_value))


def indicator_column(categorical_column):
    """A categorical column one-hot encoded (counts, for several values per example)."""
    return _Indicator(categorical_column)


def embedding_column(categorical_column, dimension: int, combiner="mean", initializer=None,
                     ckpt_to_load_from=None, tensor_name_in_ckpt=None, max_norm=None, trainable=True):
    """A categorical column embedded: a trainable ``[buckets, dimension]`` variable's rows,
    combined by ``combiner`` (``mean``, ``sum`` or ``sqrtn``) over an example's values."""
    if combiner not in ("mean", "sum", "sqrtn"):
        raise ValueError(f"embedding_column's combiner must be 'mean', 'sum' or 'sqrtn', got {combiner!r}")
    if ckpt_to_load_from is not None or max_norm is not None or not trainable:
        raise NotImplementedError("embedding_column's ckpt_to_load_from, max_norm and trainable=False "
                                  "are not supported: restore the weights with tf.train.Saver instead")
    return _Embedding(categorical_column, int(dimension), combiner, initializer)


def input_layer(features: dict, feature_columns, weight_collections=None, trainable=True, cols_to_vars=None):
    """The columns' dense parts, concatenated in the columns' name order: ``[batch, total width]``."""
    columns = sorted(feature_columns, key=lambda column: column.name)
    cache: dict = {}  # one lookup table per vocabulary column, however many columns use it
    parts = []
    with variable_scope(None, default_name="input_layer"):  # TF's variable names, for its checkpoints
        for column in columns:
            if isinstance(column, _Categorical):
                raise ValueError(f"input_layer takes dense columns: wrap the categorical column "
                                 f"{column.name!r} in indicator_column or embedding_column")
            dense = column.dense(features) if isinstance(column, (_Numeric, _Bucketized)) \
                else column.dense(features, cache)
            parts.append(dense)
        return parts[0] if len(parts) == 1 else array_ops.concat(parts, 1)
