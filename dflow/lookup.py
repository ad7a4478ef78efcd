"""``tf.lookup`` / ``tf.contrib.lookup``: lookup tables (:mod:`dflow.ops.lookup_ops`)."""

from .ops.lookup_ops import (
    FastHashSpec,
    HasherSpec,
    HashTable,
    KeyValueTensorInitializer,
    StaticHashTable,
    StrongHashSpec,
    TextFileIndex,
    TextFileInitializer,
    index_table_from_file,
    index_table_from_tensor,
    index_to_string_table_from_file,
    index_to_string_table_from_tensor,
)

__all__ = ["FastHashSpec", "HasherSpec", "StrongHashSpec", "HashTable", "StaticHashTable",
           "KeyValueTensorInitializer", "TextFileInitializer",
           "TextFileIndex", "index_table_from_file", "index_table_from_tensor",
           "index_to_string_table_from_file", "index_to_string_table_from_tensor"]
