"""``tf.train.Example`` and its parts: TensorFlow's ``example.proto`` and ``feature.proto`` messages.

The messages are real protobuf classes, built here from the two files' message
definitions (field names, numbers and types as TensorFlow declares them), so
their bytes are TensorFlow's: a record TensorFlow wrote parses here and the other
way round. They live in a descriptor pool of their own, so that TensorFlow's
generated classes can be imported into the same process.

>>> from dflow.core.example.example_pb2 import Example
>>> from dflow.core.example.feature_pb2 import Feature, Features, Int64List
>>> example = Example(features=Features(feature={"label": Feature(int64_list=Int64List(value=[7]))}))
>>> example.SerializeToString()
b'\\n\\x10\\n\\x0e\\n\\x05label\\x12\\x05\\x1a\\x03\\n\\x01\\x07'
>>> Example.FromString(example.SerializeToString()).features.feature["label"].int64_list.value[0]
7
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

__all__ = ["Example", "SequenceExample", "BytesList", "FloatList", "Int64List", "Feature", "Features",
           "FeatureList", "FeatureLists"]

_FIELD = descriptor_pb2.FieldDescriptorProto


def _message(file: descriptor_pb2.FileDescriptorProto, name: str, *fields, oneof: str | None = None):
    """Adds message ``name`` with ``fields`` = (name, number, type, label, type_name) to ``file``."""
    message = file.message_type.add(name=name)
    if oneof:
        message.oneof_decl.add(name=oneof)
    for field_name, number, kind, label, type_name in fields:
        field = message.field.add(name=field_name, number=number, type=kind, label=label,
                                  json_name=field_name)
        if type_name:
            field.type_name = type_name
        if oneof:
            field.oneof_index = 0
    return message


def _map_entry(message, name: str, value_type: str) -> None:
    """``map<string, value_type> name = 1``: protobuf's nested ``...Entry`` message with map_entry set."""
    entry = message.nested_type.add(name="".join(part.title() for part in name.split("_")) + "Entry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=_FIELD.TYPE_STRING, label=_FIELD.LABEL_OPTIONAL,
                    json_name="key")
    entry.field.add(name="value", number=2, type=_FIELD.TYPE_MESSAGE, label=_FIELD.LABEL_OPTIONAL,
                    type_name=value_type, json_name="value")
    message.field.add(name=name, number=1, type=_FIELD.TYPE_MESSAGE, label=_FIELD.LABEL_REPEATED,
                      type_name=f".tensorflow.{message.name}.{entry.name}", json_name=name)


def _build_pool() -> descriptor_pool.DescriptorPool:
    # tensorflow/core/example/feature.proto and example.proto (proto3, package tensorflow)
    repeated, optional = _FIELD.LABEL_REPEATED, _FIELD.LABEL_OPTIONAL
    feature = descriptor_pb2.FileDescriptorProto(name="tensorflow/core/example/feature.proto",
                                                 package="tensorflow", syntax="proto3")
    _message(feature, "BytesList", ("value", 1, _FIELD.TYPE_BYTES, repeated, None))
    # repeated numbers are packed: proto3's default, and TF's [packed = true]
    _message(feature, "FloatList", ("value", 1, _FIELD.TYPE_FLOAT, repeated, None))
    _message(feature, "Int64List", ("value", 1, _FIELD.TYPE_INT64, repeated, None))
    _message(feature, "Feature", ("bytes_list", 1, _FIELD.TYPE_MESSAGE, optional, ".tensorflow.BytesList"),
             ("float_list", 2, _FIELD.TYPE_MESSAGE, optional, ".tensorflow.FloatList"),
             ("int64_list", 3, _FIELD.TYPE_MESSAGE, optional, ".tensorflow.Int64List"), oneof="kind")
    _map_entry(_message(feature, "Features"), "feature", ".tensorflow.Feature")
    _message(feature, "FeatureList", ("feature", 1, _FIELD.TYPE_MESSAGE, repeated, ".tensorflow.Feature"))
    _map_entry(_message(feature, "FeatureLists"), "feature_list", ".tensorflow.FeatureList")

    example = descriptor_pb2.FileDescriptorProto(name="tensorflow/core/example/example.proto",
                                                 package="tensorflow", syntax="proto3",
                                                 dependency=[feature.name])
    _message(example, "Example", ("features", 1, _FIELD.TYPE_MESSAGE, optional, ".tensorflow.Features"))
    _message(example, "SequenceExample",
             ("context", 1, _FIELD.TYPE_MESSAGE, optional, ".tensorflow.Features"),
             ("feature_lists", 2, _FIELD.TYPE_MESSAGE, optional, ".tensorflow.FeatureLists"))

    pool = descriptor_pool.DescriptorPool()
    pool.Add(feature)
    pool.Add(example)
    return pool


_POOL = _build_pool()


def _class(name: str):
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"tensorflow.{name}"))


BytesList, FloatList, Int64List = _class("BytesList"), _class("FloatList"), _class("Int64List")
Feature, Features = _class("Feature"), _class("Features")
FeatureList, FeatureLists = _class("FeatureList"), _class("FeatureLists")
Example, SequenceExample = _class("Example"), _class("SequenceExample")
