"""``tensorflow.core``: the protobuf messages TF 1.x scripts import from there (``example_pb2``)."""
