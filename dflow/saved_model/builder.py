"""``tf.saved_model.builder``: :class:`SavedModelBuilder` writes a SavedModel, one or more meta
graphs sharing one set of variables, and :func:`simple_save` writes one for serving.

As TF does, the builder writes the variables when the first meta graph is added, copies assets
as each meta graph is added, and writes ``saved_model.json`` at :meth:`SavedModelBuilder.save`:
that file, written last and whole (a temp file renamed into place), is what makes the directory
a SavedModel, so an export interrupted midway is never loaded.

>>> import os, tempfile, dflow as tf
>>> export_dir = os.path.join(tempfile.mkdtemp(), "model")
>>> with tf.Graph().as_default(), tf.Session() as sess:
...     x = tf.placeholder(tf.float32, [None], name="x")
...     y = tf.multiply(tf.Variable(2.0, name="w"), x, name="y")
...     sess.run(tf.global_variables_initializer())
...     builder = SavedModelBuilder(export_dir)
...     builder.add_meta_graph_and_variables(sess, ["serve"])
...     path = builder.save()
>>> os.path.basename(path), sorted(os.listdir(export_dir))
('saved_model.json', ['saved_model.json', 'variables'])
"""

from __future__ import annotations

import json
import os
import shutil

from ..graph import Graph, GraphKeys, Operation, get_default_graph
from ..train.saver import Saver, export_meta_graph, write_text_atomically
from . import constants, signature_constants, tag_constants
from .meta_graph import AssetFileDef, MetaGraphDef, MetaInfoDef, SignatureDef, TensorInfo
from .signature_def_utils import predict_signature_def
from .utils import build_tensor_info, missing_tensors

__all__ = ["SavedModelBuilder", "simple_save"]


class SavedModelBuilder:
    """Builds a SavedModel in ``export_dir``, which must be missing or empty.

    The first meta graph comes with the variables (:meth:`add_meta_graph_and_variables`), any
    more without (:meth:`add_meta_graph`): they restore the first one's variables. Each is named
    by its set of tags, which :func:`dflow.saved_model.loader.load` picks it by.

    ``strip_default_attrs`` is accepted for TF's scripts and has no effect (a dflow graph keeps
    each op's attributes as they were given). The files are JSON and a dflow checkpoint, not
    TF's protobuf: TensorFlow cannot load them, and dflow cannot load TensorFlow's.

    Example
    -------
    >>> import os, tempfile, dflow as tf
    >>> export_dir = os.path.join(tempfile.mkdtemp(), "model")
    >>> with tf.Graph().as_default(), tf.Session() as sess:
    ...     w = tf.Variable(1.0, name="w")
    ...     sess.run(tf.global_variables_initializer())
    ...     builder = SavedModelBuilder(export_dir)
    ...     builder.add_meta_graph_and_variables(sess, [tf.saved_model.tag_constants.TRAINING])
    ...     builder.add_meta_graph([tf.saved_model.tag_constants.SERVING])
    ...     _ = builder.save()
    >>> tf.saved_model.loader.maybe_saved_model_directory(export_dir)
    True
    """

    def __init__(self, export_dir: str):
        self._export_dir = os.fsdecode(export_dir)
        if os.path.exists(self._export_dir) and os.listdir(self._export_dir):
            raise AssertionError(
                "Export directory already exists, and isn't empty. Please choose a different export "
                f"directory, or delete all the contents of the specified directory: {self._export_dir}")
        os.makedirs(self._export_dir, exist_ok=True)
        self._meta_graphs: list[MetaGraphDef] = []
        self._has_saved_variables = False

    def add_meta_graph_and_variables(self, sess, tags, signature_def_map: dict | None = None,
                                     assets_collection=None, legacy_init_op: Operation | None = None,
                                     clear_devices: bool = False, main_op: Operation | None = None,
                                     strip_default_attrs: bool = False, saver: Saver | None = None) -> None:
        """Save the variables of ``sess`` (under ``variables/``) and add its graph as the first
        meta graph, named by ``tags``. ``main_op`` (or else ``legacy_init_op``) runs at load, after
        the variables are restored."""
        if self._has_saved_variables:
            raise AssertionError("Graph state including variables and assets has already been saved. "
                                 "Please invoke `add_meta_graph()` instead.")
        with sess.graph.as_default():
            if saver is None:
                saver = Saver(allow_empty=True)  # (a model without variables is a model too)
            meta_graph = self._meta_graph(sess.graph, tags, signature_def_map, assets_collection,
                                          main_op, legacy_init_op, clear_devices, saver)
            saver.save(sess, os.path.join(self._variables_dir, constants.VARIABLES_FILENAME),
                       write_meta_graph=False, write_state=False)
        self._meta_graphs.append(meta_graph)
        self._has_saved_variables = True

    def add_meta_graph(self, tags, signature_def_map: dict | None = None, assets_collection=None,
                       legacy_init_op: Operation | None = None, clear_devices: bool = False,
                       main_op: Operation | None = None, strip_default_attrs: bool = False,
                       saver: Saver | None = None) -> None:
        """Add the default graph as one more meta graph, named by ``tags``; it restores the
        variables :meth:`add_meta_graph_and_variables` saved, by their names."""
        if not self._has_saved_variables:
            raise AssertionError("Graph state including variables and assets has not been saved yet. "
                                 "Please invoke `add_meta_graph_and_variables()` first.")
        graph = get_default_graph()
        if saver is None:
            saver = Saver(allow_empty=True)
        self._meta_graphs.append(self._meta_graph(graph, tags, signature_def_map, assets_collection,
                                                  main_op, legacy_init_op, clear_devices, saver))

    def save(self, as_text: bool = False) -> str:
        """Write ``saved_model.json`` (indented with ``as_text``) and return its path."""
        plain = {"format": constants.SAVED_MODEL_FORMAT,
                 "saved_model_schema_version": constants.SAVED_MODEL_SCHEMA_VERSION,
                 "meta_graphs": [meta_graph.to_plain() for meta_graph in self._meta_graphs]}
        path = os.path.join(self._export_dir, constants.SAVED_MODEL_FILENAME_JSON)
        write_text_atomically(path, json.dumps(plain, indent=1 if as_text else None))
        return path

    @property
    def _variables_dir(self) -> str:
        return os.path.join(self._export_dir, constants.VARIABLES_DIRECTORY)

    def _meta_graph(self, graph: Graph, tags, signature_def_map, assets_collection, main_op,
                    legacy_init_op, clear_devices: bool, saver: Saver) -> MetaGraphDef:
        """The meta graph of ``graph``, its assets copied into ``assets/``."""
        signatures = dict(signature_def_map or {})
        _check_signatures(signatures, graph)
        assets = [self._copy_asset(tensor) for tensor in assets_collection or ()]
        meta = export_meta_graph(graph=graph, saver_def=saver.saver_def, clear_devices=clear_devices)
        _add_main_op(meta, main_op, legacy_init_op)
        return MetaGraphDef(MetaInfoDef(_tag_list(tags)), signatures, assets, meta)

    def _copy_asset(self, tensor) -> AssetFileDef:
        """Copy the file a string constant names into ``assets/`` (the first one of each name
        only, as TF: meta graphs share their assets)."""
        if getattr(tensor, "op", None) is None or tensor.op.type != "Const":
            raise ValueError(f"an asset is a string constant holding a file's path; {tensor!r} is not one")
        source = os.fsdecode(tensor.op.get_attr("value").item())
        filename = os.path.basename(source)
        target = os.path.join(self._export_dir, constants.ASSETS_DIRECTORY, filename)
        if not os.path.exists(target):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(source, target)
        return AssetFileDef(build_tensor_info(tensor), filename)


def simple_save(session, export_dir: str, inputs: dict, outputs: dict,
                legacy_init_op: Operation | None = None) -> None:
    """Save ``session``'s graph and variables for serving: one meta graph tagged ``serve`` whose
    predict signature ``serving_default`` takes ``inputs`` and gives ``outputs`` (names ->
    tensors); the graph's ``asset_filepaths`` collection as its assets, devices cleared.

    >>> import os, tempfile, dflow as tf
    >>> export_dir = os.path.join(tempfile.mkdtemp(), "model")
    >>> with tf.Graph().as_default(), tf.Session() as sess:
    ...     x = tf.placeholder(tf.float32, [None], name="x")
    ...     y = tf.multiply(tf.Variable(2.0, name="w"), x, name="y")
    ...     sess.run(tf.global_variables_initializer())
    ...     simple_save(sess, export_dir, {"x": x}, {"y": y})
    >>> with tf.Graph().as_default(), tf.Session() as sess:
    ...     meta_graph = tf.saved_model.loader.load(sess, ["serve"], export_dir)
    ...     signature = meta_graph.signature_def["serving_default"]
    ...     sess.run(signature.outputs["y"].name, {signature.inputs["x"].name: [1.0, 2.0]}).tolist()
    [2.0, 4.0]
    """
    signature_def_map = {signature_constants.DEFAULT_SERVING_SIGNATURE_DEF_KEY:
                         predict_signature_def(inputs, outputs)}
    builder = SavedModelBuilder(export_dir)
    builder.add_meta_graph_and_variables(session, [tag_constants.SERVING], signature_def_map,
                                         assets_collection=session.graph.get_collection(GraphKeys.ASSET_FILEPATHS),
                                         main_op=legacy_init_op, clear_devices=True)
    builder.save()


def _tag_list(tags) -> list[str]:
    # a lone string is one tag (TF would take its letters as the tags)
    return [tags] if isinstance(tags, str) else [str(tag) for tag in tags]


def _check_signatures(signatures: dict, graph: Graph) -> None:
    """Each signature's tensors are described (as TF checks) and are tensors of ``graph``."""
    for key, signature in signatures.items():
        if not isinstance(signature, SignatureDef):
            raise TypeError(f"signature_def_map[{key!r}] is {signature!r}, not a SignatureDef: build it with "
                            "tf.saved_model.signature_def_utils.build_signature_def or predict_signature_def")
        for info in (*signature.inputs.values(), *signature.outputs.values()):
            if not isinstance(info, TensorInfo) or not (info.name or info.coo_sparse) or not info.dtype:
                raise AssertionError("All TensorInfo protos used in the SignatureDefs must have the name and "
                                     f"dtype fields set: signature {key!r} has {info!r} (build_tensor_info "
                                     "makes them)")
    missing = missing_tensors(signatures, graph)
    if missing:
        raise ValueError("the signatures name tensors that are not in the graph being saved "
                         f"({', '.join(missing)}): build the signatures from this graph's tensors")


def _add_main_op(meta: dict, main_op: Operation | None, legacy_init_op: Operation | None) -> None:
    """Name the op the loader runs after the restore in the meta graph's collections, under
    TF's key for it; the saved graph's own collections are left as they are."""
    op, key = (main_op, constants.MAIN_OP_KEY) if main_op is not None else (legacy_init_op,
                                                                             constants.LEGACY_INIT_OP_KEY)
    if op is None:
        return
    if not isinstance(op, Operation):
        raise TypeError(f"{'main_op' if main_op is not None else 'legacy_init_op'} needs to be an "
                        f"Operation: {op!r}")
    meta["graph_def"]["collections"][key] = [{"operation": op.name}]
