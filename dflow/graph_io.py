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

import base64
import json

import numpy

from . import dtypes
from .graph import Graph, Operation, Tensor

__all__ = ["graph_to_dict", "import_graph_def", "graph_to_dot", "write_graph", "read_graph"]

FORMAT_VERSION = 1


def _encode(value):
    if isinstance(value, dtypes.DType):
        return {"__dtype__": value.name}
    if isinstance(value, numpy.ndarray):
        data = numpy.ascontiguousarray(value)
        return {"__ndarray__": base64.b64encode(data.tobytes()).decode("ascii"),
                "dtype": data.dtype.str, "shape": list(value.shape)}  # (ascontiguousarray makes 0-d 1-d)
    if isinstance(value, numpy.generic):
        return value.item()
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(v) for v in value]}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    return value


def _decode(value):
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "__dtype__" in value:
        return dtypes.as_dtype(value["__dtype__"])
    if "__ndarray__" in value:
        raw = base64.b64decode(value["__ndarray__"])
        return numpy.frombuffer(raw, dtype=numpy.dtype(value["dtype"])).reshape(value["shape"]).copy()
    if "__tuple__" in value:
        return tuple(_decode(v) for v in value["__tuple__"])
    return {k: _decode(v) for k, v in value.items()}


def graph_to_dict(graph: Graph) -> dict:
    """Every op (name, type, inputs, control inputs, attrs, device) and the collections."""
    ops = [
        {"name": op.name, "type": op.type, "inputs": [t.name for t in op.inputs],
         "control_inputs": [c.name for c in op.control_inputs],
         "attrs": _encode(op.attrs), "device": op.device}
        for op in graph.get_operations()
    ]
    collections = {}
    for key in graph.get_all_collection_keys():
        items = [_collection_item(v) for v in graph.get_collection(key)]
        collections[key] = [i for i in items if i is not None]
    return {"format": "dflow.graph", "version": FORMAT_VERSION, "ops": ops,
            "collections": collections}


def _collection_item(value):
    from .variables import Variable

    if isinstance(value, Variable):
        return {"variable": value.op.name, "initializer": value.initializer.name,
                "initial_value": value.initial_value.name, "trainable": value.trainable}
    if isinstance(value, Tensor):
        return {"tensor": value.name}
    if isinstance(value, Operation):
        return {"operation": value.name}
    return None  # other Python objects do not survive a plain-data round trip


def import_graph_def(graph_def: dict, graph: Graph | None = None) -> Graph:
    """Rebuild a graph written by :func:`graph_to_dict` (shapes are inferred again)."""
    if graph_def.get("format") != "dflow.graph" or graph_def.get("version") != FORMAT_VERSION:
        raise ValueError(
            f"not a dflow graph of format version {FORMAT_VERSION}: "
            f"format={graph_def.get('format')!r} version={graph_def.get('version')!r}")
    graph = graph or Graph()
    with graph.as_default():
        for entry in graph_def["ops"]:
            if entry["type"] == "DatasetNext":
                _check_input_op(entry)
            inputs = [graph.get_tensor_by_name(name) for name in entry["inputs"]]
            controls = [graph.get_operation_by_name(name) for name in entry["control_inputs"]]
            with graph.control_dependencies(controls), graph.device(None):
                op = graph.create_op(entry["type"], inputs, _decode(entry["attrs"]),
                                     name=entry["name"] + "/")
            op._set_device(entry["device"])
        for key, items in graph_def["collections"].items():
            for item in items:
                graph.add_to_collection(key, _restore_item(graph, key, item))
    return graph


def _check_input_op(entry: dict) -> None:
    """An input op names its transform from the registry: a graph file never makes this
    process import a module (a ``"package.module:function"`` would)."""
    from .data import ops as _input_ops  # noqa: F401  (registers DatasetNext)
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
        var._snapshot = next(c.outputs[0] for c in graph._consumers[item["variable"]]
                             if c.type == "ReadVariable")
        var.trainable = item["trainable"]
        graph._variables_by_name[item["variable"]] = var
        return var
    if "tensor" in item:
        return graph.get_tensor_by_name(item["tensor"])
    return graph.get_operation_by_name(item["operation"])


def graph_to_dot(graph: Graph) -> str:
    """Graphviz DOT text: ops as boxes labelled with their type, tensors as edges."""
    lines = ["digraph dflow {", "  rankdir=TB;"]
    for op in graph.get_operations():
        label = f"{op.name}\n{op.type}"  # json.dumps writes the newline as DOT's \n
        lines.append(f"  {json.dumps(op.name)} [shape=box, label={json.dumps(label)}];")
    for src, dst, key, data in graph.nx.edges(keys=True, data=True):
        style = "style=dashed" if key == "control" else f"label={json.dumps(str(data['tensor'].shape))}"
        lines.append(f"  {json.dumps(src)} -> {json.dumps(dst)} [{style}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_graph(graph: Graph, path: str) -> None:
    """``tf.train.write_graph``-like: ``.json`` writes the plain-data form, ``.dot`` the DOT."""
    text = graph_to_dot(graph) if str(path).endswith(".dot") else json.dumps(graph_to_dict(graph))
    with open(path, "w") as f:
        f.write(text)


def read_graph(path: str) -> Graph:
    with open(path) as f:
        return import_graph_def(json.load(f))

