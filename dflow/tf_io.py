"""``tf.io``: ``tf.io.gfile`` (:mod:`dflow.gfile`, whose snake_case names TF 1.13+ reads there),
TFRecord files and ``tf.train.Example`` parsing under their TF 1.13+ names.

>>> import dflow as tf
>>> tf.io.gfile.exists("memory://nowhere/at/all")
False
"""

from . import gfile
from .ops.io_ops import decode_csv, decode_raw, read_file
from .ops.parsing_ops import (
    FixedLenFeature,
    FixedLenSequenceFeature,
    VarLenFeature,
    parse_example,
    parse_single_example,
    parse_single_sequence_example,
)
from .tf_record import TFRecordCompressionType, TFRecordOptions, TFRecordWriter, tf_record_iterator

__all__ = ["gfile", "TFRecordWriter", "TFRecordOptions", "TFRecordCompressionType", "tf_record_iterator",
           "FixedLenFeature", "VarLenFeature", "FixedLenSequenceFeature", "parse_example",
           "parse_single_example", "parse_single_sequence_example", "decode_raw", "decode_csv", "read_file"]
