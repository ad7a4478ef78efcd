"""Lookup tables (``tf.contrib.lookup``, TF 1.13's ``tf.lookup``): a vocabulary file or tensor
mapped to ids (``index_table_from_file``), ids back to words (``index_to_string_table_*``),
any key-value pairs (``HashTable``).

A table is a resource of the session, filled by its initializer op, which is in the
``TABLE_INITIALIZERS`` collection: ``tf.tables_initializer()`` runs them (so do the
MonitoredTrainingSession's and the Supervisor's local initialization, as in TF). A lookup
before it is a ``FailedPreconditionError``, as TF's "Table not initialized".

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     table = tf.contrib.lookup.index_table_from_tensor(tf.constant(["the", "cat", "sat"]))
...     ids = table.lookup(tf.constant(["cat", "dog", "the"]))
...     with tf.Session() as sess:
...         sess.run(tf.tables_initializer())
...         sess.run(ids).tolist()
[1, -1, 0]
"""

from __future__ import annotations

from typing import NamedTuple

import numpy

from .. import dtypes
from ..errors import FailedPreconditionError, InvalidArgumentError
from ..graph import GraphKeys, Tensor, convert_to_tensor, get_default_graph
from ..runtime.devices import numpy_namespace, to_namespace
from .registry import ShapeError, Spec, defop

__all__ = ["HasherSpec", "FastHashSpec", "StrongHashSpec", "HashTable", "StaticHashTable",
           "KeyValueTensorInitializer", "TextFileInitializer",
           "TextFileIndex", "index_table_from_file", "index_table_from_tensor",
           "index_to_string_table_from_file", "index_to_string_table_from_tensor", "tables_initializer",
           "TABLE_INITIALIZERS"]

TABLE_INITIALIZERS = GraphKeys.TABLE_INITIALIZERS


class HasherSpec(NamedTuple):
    """Which hash puts unknown words in out-of-vocabulary buckets (accepted: dflow has no buckets)."""

    hasher: str
    key: tuple | None


FastHashSpec = HasherSpec("fasthash", None)


class StrongHashSpec(HasherSpec):
    def __new__(cls, key):
        return super().__new__(cls, "stronghash", tuple(key))


class TextFileIndex:
    """Which part of a vocabulary file's line is a key or value: a column, or these."""

    WHOLE_LINE = -2
    LINE_NUMBER = -1


# ---- the tables, in the session -------------------------------------------------------------------
class _Table:
    def __init__(self):
        self.entries: dict | None = None  # None until the initializer has run


def _host(value) -> numpy.ndarray:
    value = to_namespace(value, numpy_namespace)
    return numpy.asarray(value, dtype=object if isinstance(value, numpy.ndarray) and value.dtype == object
                         else None)


def _key(value):
    return value.item() if hasattr(value, "item") else value


def _table(state, handle) -> _Table:
    return state.resources[str(numpy.asarray(handle, dtype=object).item())]


def _create_kernel(state, xp, shared_name, key_dtype, value_dtype):
    key = f"Table:{shared_name}"
    state.resource(key, _Table)
    return numpy.array(key, dtype=object)


def _fill(table: _Table, keys, values) -> None:
    if table.entries is not None:  # TF's initializers run once: a second run leaves the table as is
        return
    if len(keys) != len(values):
        raise InvalidArgumentError(f"a table's initializer has {len(keys)} keys but {len(values)} values")
    table.entries = {_key(k): _key(v) for k, v in zip(keys, values)}


def _init_kernel(state, xp, handle, keys, values):
    _fill(_table(state, handle), _host(keys).reshape(-1), _host(values).reshape(-1))
    return ()


def _init_from_file_kernel(state, xp, handle, filename, key_index, value_index, vocab_size, delimiter,
                           key_dtype, value_dtype):
    import fsspec

    name = numpy.asarray(filename, dtype=object).item()
    name = name.decode() if isinstance(name, bytes) else str(name)
    keys, values = [], []
    with fsspec.open(name, "rb") as file:
        for number, line in enumerate(file):
            if vocab_size is not None and number >= vocab_size:
                break
            line = line.rstrip(b"\r\n")
            keys.append(_column(line, number, key_index, key_dtype, delimiter))
            values.append(_column(line, number, value_index, value_dtype, delimiter))
    if vocab_size is not None and len(keys) < vocab_size:
        raise InvalidArgumentError(f"{name} has {len(keys)} lines, fewer than vocab_size={vocab_size}")
    _fill(_table(state, handle), keys, values)
    return ()


def _column(line: bytes, number: int, index: int, dtype, delimiter: str):
    """A vocabulary line's key or value: its number, the whole line, or a column as ``dtype``."""
    if index == TextFileIndex.LINE_NUMBER:
        return number
    text = line if index == TextFileIndex.WHOLE_LINE else line.split(delimiter.encode())[index]
    return text if dtype == dtypes.string else (float(text) if dtype.is_floating else int(text))


def _find_kernel(state, xp, handle, keys, default):
    table = _table(state, handle)
    if table.entries is None:
        raise FailedPreconditionError("Table not initialized: run tf.tables_initializer() (or the "
                                      "table's initializer) first")
    default = _host(default)
    found, fallback, queries = table.entries, _key(default), _host(keys)
    strings = isinstance(fallback, bytes) or default.dtype == object
    out = numpy.asarray([found.get(_key(k), fallback) for k in queries.reshape(-1)],  # the default's dtype
                        dtype=object if strings else default.dtype).reshape(queries.shape)
    return out if out.dtype == object else xp.asarray(out)


def _size_kernel(state, xp, handle):
    table = _table(state, handle)
    return xp.asarray(0 if table.entries is None else len(table.entries), dtype=xp.int64)


defop("HashTableV2", lambda inputs, **_: [Spec((), dtypes.string)], _create_kernel, stateful=True, gpu=False)
defop("InitializeTableV2", lambda inputs: [], _init_kernel, stateful=True, num_outputs=0, gpu=False)
defop("InitializeTableFromTextFileV2", lambda inputs, **_: [], _init_from_file_kernel, stateful=True,
      num_outputs=0, gpu=False)
defop("LookupTableFindV2", lambda inputs: [Spec(inputs[1].shape, inputs[2].dtype)], _find_kernel,
      lambda op, grad: [None, None, None], stateful=True, gpu=False)
defop("LookupTableSizeV2", lambda inputs: [Spec((), dtypes.int64)], _size_kernel, stateful=True, gpu=False)


# ---- initializers ---------------------------------------------------------------------------------
class KeyValueTensorInitializer:
    """The table's entries: ``keys[i] -> values[i]``."""

    def __init__(self, keys, values, key_dtype=None, value_dtype=None, name=None):
        self.keys = convert_to_tensor(keys, dtype=key_dtype)
        self.values = convert_to_tensor(values, dtype=value_dtype)
        self.key_dtype, self.value_dtype = self.keys.dtype, self.values.dtype

    def initialize(self, handle: Tensor):
        return get_default_graph().create_op("InitializeTableV2", [handle, self.keys, self.values],
                                             name="table_init")


class TextFileInitializer:
    """The table's entries from a text file's lines: the key and the value each a column (split at
    ``delimiter``), the whole line (``TextFileIndex.WHOLE_LINE``) or the line's number
    (``TextFileIndex.LINE_NUMBER``)."""

    def __init__(self, filename, key_dtype, key_index, value_dtype, value_index, vocab_size=None,
                 delimiter="\t", name=None):
        self.filename = convert_to_tensor(filename, dtype=dtypes.string)
        self.key_dtype, self.value_dtype = dtypes.as_dtype(key_dtype), dtypes.as_dtype(value_dtype)
        self.key_index, self.value_index = int(key_index), int(value_index)
        self.vocab_size = None if vocab_size is None else int(vocab_size)
        self.delimiter = delimiter

    def initialize(self, handle: Tensor):
        return get_default_graph().create_op(
            "InitializeTableFromTextFileV2", [handle, self.filename],
            {"key_index": self.key_index, "value_index": self.value_index, "vocab_size": self.vocab_size,
             "delimiter": self.delimiter, "key_dtype": self.key_dtype, "value_dtype": self.value_dtype},
            name="table_init")


# ---- tables --------------------------------------------------------------------------------------
class HashTable:
    """A table of ``initializer``'s entries; ``lookup(keys)`` gives each key's value, or
    ``default_value`` for a key it does not hold."""

    def __init__(self, initializer, default_value, shared_name=None, name=None):
        graph = get_default_graph()
        name = name or "hash_table"
        self.key_dtype, self.value_dtype = initializer.key_dtype, initializer.value_dtype
        self.default_value = convert_to_tensor(default_value, dtype=self.value_dtype)
        with graph.name_scope(name):
            self.resource_handle = graph.create_op(
                "HashTableV2", [], {"shared_name": shared_name or graph.unique_name(name, mark_as_used=False),
                                    "key_dtype": self.key_dtype, "value_dtype": self.value_dtype},
                name="hash_table").outputs[0]
            self.initializer = initializer.initialize(self.resource_handle)
        graph.add_to_collection(TABLE_INITIALIZERS, self.initializer)

    @property
    def init(self):
        return self.initializer

    def lookup(self, keys, name=None) -> Tensor:
        keys = convert_to_tensor(keys, dtype=self.key_dtype)
        return get_default_graph().create_op("LookupTableFindV2",
                                             [self.resource_handle, keys, self.default_value],
                                             name=name or "hash_table_Lookup").outputs[0]

    def size(self, name=None) -> Tensor:
        return get_default_graph().create_op("LookupTableSizeV2", [self.resource_handle],
                                             name=name or "hash_table_Size").outputs[0]


StaticHashTable = HashTable  # TF 1.15's name


def _no_oov(num_oov_buckets) -> None:
    if num_oov_buckets:
        raise ValueError("num_oov_buckets is not supported by dflow (TF hashes unknown words into the "
                         "buckets with FarmHash's Fingerprint64): map unknown words to default_value instead")


def index_table_from_file(vocabulary_file, num_oov_buckets=0, vocab_size=None, default_value=-1,
                          hasher_spec=None, key_dtype=dtypes.string, name=None, key_column_index=-2,
                          value_column_index=-1, delimiter="\t") -> HashTable:
    """Each line of ``vocabulary_file`` (a word; or its ``key_column_index`` column) -> its line
    number, int64; a word not in it -> ``default_value``."""
    _no_oov(num_oov_buckets)
    initializer = TextFileInitializer(vocabulary_file, key_dtype, key_column_index, dtypes.int64,
                                      value_column_index, vocab_size, delimiter)
    return HashTable(initializer, default_value, name=name or "string_to_index")


def index_table_from_tensor(vocabulary_list=None, num_oov_buckets=0, default_value=-1, hasher_spec=None,
                            dtype=dtypes.string, name=None, mapping=None) -> HashTable:
    """Each word of the vector ``vocabulary_list`` -> its position, int64 (TF 1.x's ``mapping``
    too); a word not in it -> ``default_value``."""
    _no_oov(num_oov_buckets)
    words = convert_to_tensor(vocabulary_list if vocabulary_list is not None else mapping, dtype=dtype)
    if words.shape.ndims != 1:
        raise ShapeError(f"index_table_from_tensor takes a vector of words, got shape {words.shape}")
    return HashTable(KeyValueTensorInitializer(words, _positions(words)), default_value,
                     name=name or "string_to_index")


def index_to_string_table_from_file(vocabulary_file, vocab_size=None, default_value="UNK", name=None,
                                    key_column_index=-1, value_column_index=-2, delimiter="\t") -> HashTable:
    """Line numbers of ``vocabulary_file`` -> its words (``lookup`` takes int64 ids)."""
    initializer = TextFileInitializer(vocabulary_file, dtypes.int64, key_column_index, dtypes.string,
                                      value_column_index, vocab_size, delimiter)
    return HashTable(initializer, default_value, name=name or "index_to_string")


def index_to_string_table_from_tensor(vocabulary_list=None, default_value="UNK", name=None,
                                      mapping=None) -> HashTable:
    """Positions in ``vocabulary_list`` -> its words (``lookup`` takes int64 ids)."""
    words = convert_to_tensor(vocabulary_list if vocabulary_list is not None else mapping,
                              dtype=dtypes.string)
    return HashTable(KeyValueTensorInitializer(_positions(words), words), default_value,
                     name=name or "index_to_string")


def _positions(words: Tensor) -> Tensor:
    """0, 1, ... as int64, one per word."""
    from .array_ops import range_
    from .math_ops import size

    return range_(size(words, out_type=dtypes.int64), dtype=dtypes.int64)


def tables_initializer(name="init_all_tables"):
    """One op running every table's initializer (``TABLE_INITIALIZERS``)."""
    from ..variables import group
    from .array_ops import no_op

    initializers = get_default_graph().get_collection(TABLE_INITIALIZERS)
    return group(*initializers, name=name) if initializers else no_op(name=name)
