"""``tf.strings``: TF 1.13's names of the string ops (:mod:`dflow.ops.string_ops`)."""

from .ops.string_ops import as_string, length, reduce_join, regex_replace, split, substr
from .ops.string_ops import string_join as join
from .ops.string_ops import string_strip as strip
from .ops.string_ops import string_to_number as to_number

__all__ = ["as_string", "join", "length", "reduce_join", "regex_replace", "split", "strip", "substr",
           "to_number"]
