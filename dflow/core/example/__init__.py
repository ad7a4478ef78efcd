"""``tensorflow.core.example``: ``example_pb2`` and ``feature_pb2``."""
