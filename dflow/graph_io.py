"""Graphs as plain data (a JSON-ready dict, no pickle) and as Graphviz DOT.

>>> import dflow as tf, json
>>> g = tf.Graph()
>>> with g.as_default():
...     y = tf.constant(2.0) * 3.0
>>> g2 = import_graph_def(json.loads(json.dumps(g.as_graph_def())))
>>> [op.name for op in g2.get_operations()] == [op.name for op in g.get_operations()]
True
"""

from __future__ import annotations

import json

from .graph import GRAPH_FORMAT_VERSION, Graph
from .plain_values import decode

__all__ = ["graph_to_dict", "import_graph_def", "scope_prefix", "graph_to_dot", "write_graph", "read_graph",
           "meta_graph_def", "read_meta_graph"]



def import_graph_def(graph_def: dict, graph: Graph | None = None, import_scope: str | None = None,
                     clear_devices: bool = False) -> Graph:
    """Rebuild a graph written by :func:`graph_to_dict` (shapes are inferred again) into ``graph``
    (a new one by default), every name under ``import_scope`` where one is given, and every op on
    no device with ``clear_devices``."""
    if graph_def.get("format") != "dflow.graph" or graph_def.get("version") != GRAPH_FORMAT_VERSION:
        raise ValueError(
            f"not a dflow graph of format version {GRAPH_FORMAT_VERSION}: "
            f"format={graph_def.get('format')!r} version={graph_def.get('version')!r}")
    graph = graph or Graph()
    prefix = scope_prefix(import_scope)
    present = {op.name for op in graph.get_operations()}
    if prefix:
        taken = [prefix + entry["name"] for entry in graph_def["ops"] if prefix + entry["name"] in present]
        if taken:
            raise ValueError(f"the graph already has ops named {', '.join(taken[:5])}"
                             f"{' and more' if len(taken) > 5 else ''}: give another import_scope")
    names = _imported_names([entry["name"] for entry in graph_def["ops"]], prefix, present)

    def tensor_name(name: str) -> str:
        op_name, _, index = name.rpartition(":")
        return f"{names[op_name]}:{index}"

    with graph.as_default():
        for entry in graph_def["ops"]:
            if entry["type"] == "DatasetNext":
                _check_input_op(entry)
            inputs = [graph.get_tensor_by_name(tensor_name(name)) for name in entry["inputs"]]
            controls = [graph.get_operation_by_name(names[name]) for name in entry["control_inputs"]]
            attrs = decode(entry["attrs"])
            name = names[entry["name"]]
            if entry["type"] == "VariableV2" and name != entry["name"]:  # a copy, not the original
                attrs["shared_name"] = prefix + attrs["shared_name"] if prefix else name
            with graph.control_dependencies(controls), graph.device(None):
                op = graph.create_op(entry["type"], inputs, attrs, name=name + "/")
            op._set_device("" if clear_devices else entry["device"])
        for key, items in graph_def["collections"].items():
            for item in items:  # (its names: a variable's, a tensor's or an op's)
                renamed = {k: (tensor_name(v) if ":" in v else names[v]) if isinstance(v, str) else v
                           for k, v in item.items()}
                graph.add_to_collection(key, _restore_item(graph, renamed))
    return graph


def scope_prefix(import_scope: str | None) -> str:
    """What ``import_scope`` puts before an imported graph's names: ``"scope/"``, or nothing."""
    return f"{import_scope.rstrip('/')}/" if import_scope else ""


def _imported_names(names: list[str], prefix: str, present: set[str]) -> dict[str, str]:
    """Each imported op's name in the graph: under ``prefix``; without one, as TF does, an op
    whose name the graph has already is renamed ``name_1`` (or ``_2``, ...: the first free)."""
    if prefix:
        return {name: prefix + name for name in names}
    used = present | set(names)
    renamed = {}
    for name in names:
        if name in present:
            suffix = 1
            while f"{name}_{suffix}" in used:
                suffix += 1
            renamed[name] = f"{name}_{suffix}"
            used.add(renamed[name])
        else:
            renamed[name] = name
    return renamed


def _check_input_op(entry: dict) -> None:
    """An input op names its transform from the registry: a graph file never makes this
    process import a module (a ``"package.module:function"`` would)."""
    from .data.transforms import check_transform_name

    spec = entry.get("attrs", {}).get("spec")
    try:
        check_transform_name(spec.get("transform") if isinstance(spec, dict) else None)
    except ValueError as error:
        raise ValueError(f"graph op {entry['name']!r} (DatasetNext): {error}") from None


def _restore_item(graph: Graph, item: dict):
    """The variable, tensor or op of ``graph`` that a collection item of :func:`graph_to_dict`
    names (a variable's ``tf.Variable`` made again, where the graph has none for it yet)."""
    from .variables import Variable

    if "variable" in item:
        existing = graph._variables_by_name.get(item["variable"])
        if existing is not None:
            return existing
        var = Variable.__new__(Variable)
        var._variable = graph.get_operation_by_name(item["variable"]).outputs[0]
        var.initializer = graph.get_operation_by_name(item["initializer"])
        var.initial_value = graph.get_tensor_by_name(item["initial_value"])
        var._snapshot = next(c.outputs[0] for c in var._variable.consumers() if c.type == "ReadVariable")
        var.trainable = item["trainable"]
        graph._variables_by_name[item["variable"]] = var
        return var
    if "tensor" in item:
        return graph.get_tensor_by_name(item["tensor"])
    return graph.get_operation_by_name(item["operation"])


def graph_to_dict(graph: Graph) -> dict:
    """Every op (name, type, inputs, control inputs, attrs, device) and the collections:
    ``graph.as_graph_def()``."""
    return graph.as_graph_def()


def graph_to_dot(graph: Graph) -> str:
    """Graphviz DOT text: ``graph.to_dot()``."""
    return graph.to_dot()


def write_graph(graph: Graph, path: str) -> None:
    """``tf.train.write_graph``-like: ``.json`` writes the plain-data form, ``.dot`` the DOT."""
    text = graph_to_dot(graph) if str(path).endswith(".dot") else json.dumps(graph_to_dict(graph))
    with open(path, "w") as f:
        f.write(text)


def read_graph(path: str) -> Graph:
    with open(path) as f:
        return import_graph_def(json.load(f))


# ---- meta graphs ------------------------------------------------------------------------------------
META_GRAPH_FORMAT = "dflow.meta_graph"


def meta_graph_def(graph: Graph, saver_def: dict | None = None, collection_list=None,
                   clear_devices: bool = False) -> dict:
    """TF's MetaGraphDef as plain data: the graph (:func:`graph_to_dict`), its collections (those
    of ``collection_list`` where given), and the saver that restores its variables (names of its
    variables, restore values and restore op: :attr:`dflow.train.Saver.saver_def`)."""
    graph_def = graph.as_graph_def()
    if collection_list is not None:
        graph_def["collections"] = {key: items for key, items in graph_def["collections"].items()
                                    if key in set(collection_list)}
    if clear_devices:
        for entry in graph_def["ops"]:
            entry["device"] = ""
    return {"format": META_GRAPH_FORMAT, "version": GRAPH_FORMAT_VERSION, "graph_def": graph_def,
            "saver_def": saver_def}


def read_meta_graph(path: str) -> dict:
    """A meta graph file written by dflow (``Saver.save``'s ``<checkpoint>.meta``), checked."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise FileNotFoundError(f"no meta graph file {path!r}: Saver.save writes <checkpoint>.meta beside "
                                "each checkpoint (tf.train.latest_checkpoint(dir) + '.meta')") from None
    try:
        meta = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ValueError(f"{path!r} is not a dflow meta graph (JSON): a .meta written by TensorFlow is a "
                         "MetaGraphDef protobuf, which dflow does not read, and its checkpoints are not "
                         "dflow's either; build the model in dflow and save it with tf.train.Saver") from None
    found = meta.get("format") if isinstance(meta, dict) else None
    if found != META_GRAPH_FORMAT:
        raise ValueError(f"{path!r} is not a dflow meta graph: format {found!r}, "
                         f"expected {META_GRAPH_FORMAT!r}")
    return meta
