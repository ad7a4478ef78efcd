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

__all__ = ["graph_to_dict", "import_graph_def", "graph_to_dot", "write_graph", "read_graph"]



def import_graph_def(graph_def: dict, graph: Graph | None = None) -> Graph:
    """Rebuild a graph written by :func:`graph_to_dict` (shapes are inferred again)."""
    if graph_def.get("format") != "dflow.graph" or graph_def.get("version") != GRAPH_FORMAT_VERSION:
        raise ValueError(
            f"not a dflow graph of format version {GRAPH_FORMAT_VERSION}: "
            f"format={graph_def.get('format')!r} version={graph_def.get('version')!r}")
    graph = graph or Graph()
    with graph.as_default():
        for entry in graph_def["ops"]:
            if entry["type"] == "DatasetNext":
                _check_input_op(entry)
            inputs = [graph.get_tensor_by_name(name) for name in entry["inputs"]]
            controls = [graph.get_operation_by_name(name) for name in entry["control_inputs"]]
            with graph.control_dependencies(controls), graph.device(None):
                op = graph.create_op(entry["type"], inputs, decode(entry["attrs"]),
                                     name=entry["name"] + "/")
            op._set_device(entry["device"])
        for key, items in graph_def["collections"].items():
            for item in items:
                graph.add_to_collection(key, _restore_item(graph, key, item))
    return graph


def _check_input_op(entry: dict) -> None:
    """An input op names its transform from the registry: a graph file never makes this
    process import a module (a ``"package.module:function"`` would)."""
    from .data.transforms import check_transform_name

    spec = entry.get("attrs", {}).get("spec")
    try:
        check_transform_name(spec.get("transform") if isinstance(spec, dict) else None)
    except ValueError as error:
        raise ValueError(f"graph op {entry['name']!r} (DatasetNext): {error}") from None


def _restore_item(graph: Graph, key: str, item: dict):
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

