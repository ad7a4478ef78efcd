"""``tf.saved_model.utils`` (TF's module name): a tensor described for a signature, and found
again from that description.

>>> import dflow as tf
>>> with tf.Graph().as_default() as graph:
...     x = tf.placeholder(tf.float32, [None, 3], name="x")
...     info = build_tensor_info(x)
...     found = get_tensor_from_tensor_info(info, graph)
>>> info.name, tf.as_dtype(info.dtype), found is x
('x:0', tf.float32, True)
"""

from __future__ import annotations

from ..graph import Graph, Tensor, get_default_graph
from ..graph_io import scope_prefix
from ..ops.sparse_ops import SparseTensor
from .meta_graph import CooSparse, TensorInfo, TensorShapeProto

__all__ = ["build_tensor_info", "get_tensor_from_tensor_info", "missing_tensors"]


def build_tensor_info(tensor: Tensor | SparseTensor) -> TensorInfo:
    """The :class:`TensorInfo` of ``tensor`` (a SparseTensor by its three tensors' names)."""
    if not isinstance(tensor, (Tensor, SparseTensor)):
        raise TypeError(f"build_tensor_info takes a Tensor or SparseTensor, got {tensor!r}")
    shape = TensorShapeProto.from_dims(tensor.get_shape().dims)
    dtype = tensor.dtype.as_datatype_enum
    if isinstance(tensor, SparseTensor):
        sparse = CooSparse(tensor.values.name, tensor.indices.name, tensor.dense_shape.name)
        return TensorInfo(dtype=dtype, tensor_shape=shape, coo_sparse=sparse)
    return TensorInfo(name=tensor.name, dtype=dtype, tensor_shape=shape)


def get_tensor_from_tensor_info(tensor_info: TensorInfo, graph: Graph | None = None,
                                import_scope: str | None = None) -> Tensor | SparseTensor:
    """The tensor (or SparseTensor) ``tensor_info`` names, in ``graph`` (the default one), under
    ``import_scope`` where the model was loaded with one."""
    graph = graph or get_default_graph()
    prefix = scope_prefix(import_scope)

    def find(name: str) -> Tensor:
        return graph.get_tensor_by_name(prefix + name)

    sparse = tensor_info.coo_sparse
    if sparse is not None:
        with graph.as_default():  # (SparseTensor converts its parts in the default graph)
            return SparseTensor(find(sparse.indices_tensor_name), find(sparse.values_tensor_name),
                                find(sparse.dense_shape_tensor_name))
    if not tensor_info.name:
        raise ValueError(f"tensor_info names no tensor (neither name nor coo_sparse is set): {tensor_info}")
    return find(tensor_info.name)


def missing_tensors(signature_def_map: dict, graph: Graph, import_scope: str | None = None) -> list[str]:
    """``"<signature key>: <tensor name>"`` of each tensor the signatures name that ``graph`` lacks."""
    prefix = scope_prefix(import_scope)
    missing = []
    for key, signature in signature_def_map.items():
        for info in (*signature.inputs.values(), *signature.outputs.values()):
            for name in info.tensor_names:
                try:
                    graph.get_tensor_by_name(prefix + name)
                except (KeyError, ValueError):
                    missing.append(f"{key}: {name}")
    return missing
