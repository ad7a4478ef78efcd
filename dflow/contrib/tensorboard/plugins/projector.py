"""``tf.contrib.tensorboard.plugins.projector``: configure TensorBoard's embedding projector.

>>> import os, tempfile, dflow as tf
>>> from dflow.contrib.tensorboard.plugins import projector
>>> embeddings = tf.Variable(tf.ones([3, 2]), name="embeddings")
>>> config = projector.ProjectorConfig()
>>> embedding = config.embeddings.add()
>>> embedding.tensor_name = embeddings.name
>>> log_dir = tempfile.mkdtemp()
>>> with tf.Session() as sess:
...     sess.run(tf.global_variables_initializer())
...     projector.visualize_embeddings(log_dir, config)
>>> sorted(os.listdir(log_dir))
['embeddings.tsv', 'projector_config.pbtxt']

``ProjectorConfig`` is TensorBoard's protocol buffer (``projector_config.proto``: the same
message names, fields and numbers), built here from its descriptor so that TensorBoard need
not be installed. TensorBoard's projector reads an embedding's values from a TensorFlow
checkpoint, which dflow's (Zarr) checkpoints are not; so ``visualize_embeddings``, called with a
default session (inside ``with tf.Session() as sess:``), writes each embedding's current value to
``<logdir>/<name>.tsv`` and points ``tensor_path`` at it, which the projector reads instead.
"""

from __future__ import annotations

import logging
import os

__all__ = ["ProjectorConfig", "EmbeddingInfo", "SpriteMetadata", "visualize_embeddings"]

log = logging.getLogger("dflow")

PROJECTOR_FILENAME = "projector_config.pbtxt"  # the file TensorBoard's projector looks for
_PACKAGE = "tensorboard.projector"
# (message, [(field, number, type, repeated, message type)]) of projector_config.proto
_MESSAGES = [
    ("SpriteMetadata", [("image_path", 1, "string", False, None),
                        ("single_image_dim", 2, "uint32", True, None)]),
    ("EmbeddingInfo", [("tensor_name", 1, "string", False, None), ("metadata_path", 2, "string", False, None),
                       ("bookmarks_path", 3, "string", False, None),
                       ("tensor_shape", 4, "uint32", True, None),
                       ("sprite", 5, "message", False, "SpriteMetadata"),
                       ("tensor_path", 6, "string", False, None)]),
    ("ProjectorConfig", [("model_checkpoint_path", 1, "string", False, None),
                         ("embeddings", 2, "message", True, "EmbeddingInfo"),
                         ("model_checkpoint_dir", 3, "string", False, None)]),
]


def _message_classes() -> dict:
    """The three message classes, from a descriptor in their own pool (so they coexist with
    TensorBoard's own copy when that is imported too)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    field = descriptor_pb2.FieldDescriptorProto
    types = {"string": field.TYPE_STRING, "uint32": field.TYPE_UINT32, "message": field.TYPE_MESSAGE}
    file = descriptor_pb2.FileDescriptorProto(name="dflow/projector_config.proto", package=_PACKAGE,
                                              syntax="proto3")
    for name, fields in _MESSAGES:
        message = file.message_type.add(name=name)
        for field_name, number, kind, repeated, message_type in fields:
            message.field.add(name=field_name, number=number, type=types[kind],
                              label=field.LABEL_REPEATED if repeated else field.LABEL_OPTIONAL,
                              type_name=f".{_PACKAGE}.{message_type}" if message_type else None)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}"))
            for name, _ in _MESSAGES}


_CLASSES = _message_classes()
ProjectorConfig, EmbeddingInfo, SpriteMetadata = (_CLASSES[name] for name, _ in reversed(_MESSAGES))


def visualize_embeddings(summary_writer, config) -> None:
    """Write ``config`` to ``projector_config.pbtxt`` in the writer's log directory (or in
    ``summary_writer`` itself when it is a path), with each embedding's values beside it."""
    from google.protobuf import text_format

    logdir = summary_writer.get_logdir() if hasattr(summary_writer, "get_logdir") else summary_writer
    if logdir is None:
        raise ValueError("visualize_embeddings needs a FileWriter with a logdir (or a directory)")
    config = ProjectorConfig.FromString(config.SerializeToString())  # a copy, also of TensorBoard's class
    for embedding in config.embeddings:
        if embedding.tensor_name and not embedding.tensor_path:
            _write_values(embedding, str(logdir))
    os.makedirs(logdir, exist_ok=True)
    with open(os.path.join(logdir, PROJECTOR_FILENAME), "w") as f:
        f.write(text_format.MessageToString(config))


def _write_values(embedding, logdir: str) -> None:
    """Evaluate the embedding in the default session and save it as the projector's TSV."""
    import numpy as np

    from ....context import get_default_session

    session = get_default_session()
    if session is None:
        log.warning("projector: no default session to read %s from, and TensorBoard cannot read "
                    "dflow checkpoints; call visualize_embeddings inside `with tf.Session() as sess:`",
                    embedding.tensor_name)
        return
    name = embedding.tensor_name if ":" in embedding.tensor_name else f"{embedding.tensor_name}:0"
    values = np.asarray(session.run(name), dtype=np.float32)
    values = values.reshape(len(values), -1)
    path = os.path.join(logdir, f"{name.split(':')[0].replace('/', '_')}.tsv")
    np.savetxt(path, values, fmt="%.7g", delimiter="\t")
    embedding.tensor_path = path
    embedding.tensor_shape[:] = list(values.shape)
