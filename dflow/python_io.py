"""``tf.python_io``: TFRecord files (:mod:`dflow.tf_record`)."""

from .tf_record import TFRecordCompressionType, TFRecordOptions, TFRecordWriter, tf_record_iterator

__all__ = ["TFRecordWriter", "TFRecordOptions", "TFRecordCompressionType", "tf_record_iterator"]
