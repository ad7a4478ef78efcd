"""``tensorflow.core.example.feature_pb2``: the feature messages (:mod:`.example_pb2` defines them)."""

from .example_pb2 import BytesList, Feature, FeatureList, FeatureLists, Features, FloatList, Int64List

__all__ = ["BytesList", "FloatList", "Int64List", "Feature", "Features", "FeatureList", "FeatureLists"]
