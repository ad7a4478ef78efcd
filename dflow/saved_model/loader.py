"""``tf.saved_model.loader``: :func:`load` rebuilds a SavedModel's meta graph in a session's graph,
restores its variables and runs its main op; :func:`maybe_saved_model_directory` says whether a
directory holds one.

>>> import tempfile
>>> maybe_saved_model_directory(tempfile.mkdtemp())
False
"""

from __future__ import annotations

import json
import os

from ..graph import Graph
from ..graph_io import import_graph_def, scope_prefix
from ..train.saver import import_meta_graph
from . import constants
from .meta_graph import MetaGraphDef
from .utils import missing_tensors

__all__ = ["load", "maybe_saved_model_directory", "read_saved_model"]


def maybe_saved_model_directory(export_dir: str) -> bool:
    """Whether ``export_dir`` holds a SavedModel that dflow can load (its ``saved_model.json``;
    TensorFlow's ``saved_model.pb`` does not count)."""
    return os.path.isfile(os.path.join(os.fsdecode(export_dir), constants.SAVED_MODEL_FILENAME_JSON))


def load(sess, tags, export_dir: str, import_scope: str | None = None, **saver_kwargs) -> MetaGraphDef:
    """Load the meta graph of ``export_dir`` whose tags are ``tags`` (as a set) into
    ``sess.graph``, every name under ``import_scope`` where one is given; restore its variables
    and run its main op (or legacy init op), feeding it the assets' paths in ``assets/``.

    Returns the :class:`~dflow.saved_model.meta_graph.MetaGraphDef`: its ``signature_def``
    names the tensors to feed and fetch (without ``import_scope``:
    :func:`~dflow.saved_model.utils.get_tensor_from_tensor_info` adds it). ``saver_kwargs``
    go to :func:`dflow.train.import_meta_graph` (``clear_devices``).

    >>> import os, tempfile, dflow as tf
    >>> export_dir = os.path.join(tempfile.mkdtemp(), "model")
    >>> with tf.Graph().as_default(), tf.Session() as sess:
    ...     x = tf.placeholder(tf.float32, [None], name="x")
    ...     y = tf.add(tf.Variable(1.0, name="b"), x, name="y")
    ...     sess.run(tf.global_variables_initializer())
    ...     tf.saved_model.simple_save(sess, export_dir, {"x": x}, {"y": y})
    >>> with tf.Graph().as_default() as graph, tf.Session() as sess:
    ...     meta_graph = load(sess, ["serve"], export_dir, import_scope="model")
    ...     signature = meta_graph.signature_def["serving_default"]
    ...     y = tf.saved_model.utils.get_tensor_from_tensor_info(signature.outputs["y"], graph, "model")
    ...     y.name, sess.run(y, {"model/x:0": [1.0]}).tolist()
    ('model/y:0', [2.0])
    """
    export_dir = os.fsdecode(export_dir)  # (TF's exports name themselves in bytes)
    meta_graph = _with_tags(read_saved_model(export_dir), tags, export_dir)
    graph = sess.graph
    with graph.as_default():
        saver = _import(meta_graph, graph, import_scope, saver_kwargs)
        _check_signature_tensors(meta_graph, graph, import_scope, export_dir)
        if saver is not None:
            saver.restore(sess, os.path.join(export_dir, constants.VARIABLES_DIRECTORY,
                                             constants.VARIABLES_FILENAME))
        _run_main_op(sess, meta_graph, export_dir, scope_prefix(import_scope))
    return meta_graph


def read_saved_model(export_dir: str) -> list[MetaGraphDef]:
    """The meta graphs of the SavedModel in ``export_dir``, or an error that says why there is none."""
    export_dir = os.fsdecode(export_dir)
    path = os.path.join(export_dir, constants.SAVED_MODEL_FILENAME_JSON)
    if not os.path.isdir(export_dir):
        raise FileNotFoundError(f"SavedModel file does not exist at: {path} (no directory {export_dir!r}); "
                                "export one with tf.saved_model.simple_save or SavedModelBuilder")
    if not os.path.isfile(path):
        raise _missing_file_error(export_dir, path)
    try:
        with open(path) as f:
            plain = json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} is not a dflow SavedModel: it is not JSON ({error})") from None
    found = plain.get("format") if isinstance(plain, dict) else None
    if found != constants.SAVED_MODEL_FORMAT:
        raise ValueError(f"{path} is not a dflow SavedModel: format {found!r}, "
                         f"expected {constants.SAVED_MODEL_FORMAT!r}")
    return [MetaGraphDef.from_plain(meta_graph) for meta_graph in plain["meta_graphs"]]


def _missing_file_error(export_dir: str, path: str) -> Exception:
    """Why ``export_dir`` has no ``saved_model.json``: TensorFlow wrote it, or the export stopped
    before ``save()``."""
    for tf_file in (constants.SAVED_MODEL_FILENAME_PB, constants.SAVED_MODEL_FILENAME_PBTXT):
        if os.path.exists(os.path.join(export_dir, tf_file)):
            return ValueError(
                f"{export_dir} is a SavedModel written by TensorFlow ({tf_file}, a protobuf), which dflow "
                "cannot read (nor TF's checkpoints in its variables/): export the model from dflow, with "
                "tf.saved_model.simple_save or tf.saved_model.builder.SavedModelBuilder")
    return FileNotFoundError(
        f"SavedModel file does not exist at: {path}. {export_dir} holds no SavedModel: "
        "SavedModelBuilder.save() writes that file last, so an export interrupted before save() "
        "leaves none; export the model again into an empty directory")


def _with_tags(meta_graphs: list[MetaGraphDef], tags, export_dir: str) -> MetaGraphDef:
    wanted = {tags} if isinstance(tags, str) else set(tags)  # a lone string is one tag
    for meta_graph in meta_graphs:
        if set(meta_graph.meta_info_def.tags) == wanted:
            return meta_graph
    available = [sorted(meta_graph.meta_info_def.tags) for meta_graph in meta_graphs]
    raise RuntimeError(f"MetaGraphDef associated with tags {sorted(wanted)} could not be found in "
                       f"SavedModel {export_dir}; available tags (one list per meta graph): {available}. "
                       "Pass one of those lists as tags")



def _import(meta_graph: MetaGraphDef, graph: Graph, import_scope: str | None, saver_kwargs: dict):
    """Import the graph; return the saver that restores its variables, None where it has none."""
    saver_def = meta_graph.saver_def
    if saver_def and saver_def["variables"]:
        return import_meta_graph(meta_graph.meta_graph, import_scope=import_scope, **saver_kwargs)
    # (import_meta_graph would make a saver over any other variables the graph holds)
    import_graph_def(meta_graph.graph_def, graph, import_scope=import_scope,
                     clear_devices=saver_kwargs.get("clear_devices", False))
    return None


def _check_signature_tensors(meta_graph: MetaGraphDef, graph: Graph, import_scope: str | None,
                             export_dir: str) -> None:
    missing = missing_tensors(meta_graph.signature_def, graph, import_scope)
    if missing:
        raise ValueError(f"SavedModel {export_dir}: its signatures name tensors its graph does not have "
                         f"({', '.join(missing)}): the file was edited or damaged; export the model again")


def _run_main_op(sess, meta_graph: MetaGraphDef, export_dir: str, prefix: str) -> None:
    """Run the main op (else the legacy init op) the meta graph names, as TF does after the
    restore; the asset tensors fed the paths of the copies in ``assets/``."""
    collections = meta_graph.collection_def
    items = collections.get(constants.MAIN_OP_KEY) or collections.get(constants.LEGACY_INIT_OP_KEY) or []
    if not items:
        return
    if len(items) != 1:
        raise RuntimeError(f"Expected exactly one SavedModel main op. Found: {items}")
    graph = sess.graph
    assets = {graph.get_tensor_by_name(prefix + asset.tensor_info.name):
              os.path.join(export_dir, constants.ASSETS_DIRECTORY, asset.filename)
              for asset in meta_graph.asset_file_def}
    sess.run(graph.get_operation_by_name(prefix + items[0]["operation"]), feed_dict=assets)
