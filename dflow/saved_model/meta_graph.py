"""A SavedModel's parts as TF's protos name them (``TensorInfo``, ``SignatureDef``,
``MetaGraphDef``), as small dataclasses that turn into plain data and back: dflow keeps them
as JSON, not protobuf.

>>> info = TensorInfo(name="x:0", dtype=1, tensor_shape=TensorShapeProto.from_dims([None, 2]))
>>> [d.size for d in info.tensor_shape.dim], TensorInfo.from_plain(info.to_plain()) == info
([-1, 2], True)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..dtypes import as_dtype

__all__ = ["Dim", "TensorShapeProto", "CooSparse", "TensorInfo", "SignatureDef", "MetaInfoDef",
           "AssetFileDef", "MetaGraphDef"]


@dataclass(frozen=True)
class Dim:
    """One dim of a :class:`TensorShapeProto`; ``size`` -1 where it is unknown, as in TF."""

    size: int


@dataclass(frozen=True)
class TensorShapeProto:
    """TF's ``TensorShapeProto``: ``dim`` (each with ``.size``) or ``unknown_rank``."""

    dim: tuple[Dim, ...] = ()
    unknown_rank: bool = False

    @classmethod
    def from_dims(cls, dims) -> TensorShapeProto:
        """From a list of ints and None (a ``TensorShape``'s ``dims``), or None for an unknown rank."""
        if dims is None:
            return cls(unknown_rank=True)
        return cls(tuple(Dim(-1 if d is None else int(d)) for d in dims))

    def to_plain(self) -> list | None:
        return None if self.unknown_rank else [None if d.size < 0 else d.size for d in self.dim]


@dataclass(frozen=True)
class CooSparse:
    """A SparseTensor's three tensors, by name (TF's ``TensorInfo.coo_sparse``)."""

    values_tensor_name: str
    indices_tensor_name: str
    dense_shape_tensor_name: str


@dataclass(frozen=True)
class TensorInfo:
    """A tensor of a signature: its ``name`` (or ``coo_sparse`` for a SparseTensor), ``dtype``
    (TF's DataType number, as TF's proto: ``tf.as_dtype(info.dtype)`` gives the DType) and
    ``tensor_shape``."""

    name: str = ""
    dtype: int = 0  # DT_INVALID: not set
    tensor_shape: TensorShapeProto = TensorShapeProto()
    coo_sparse: CooSparse | None = None

    @property
    def tensor_names(self) -> list[str]:
        """The names of the tensors this describes (a SparseTensor's three)."""
        sparse = self.coo_sparse
        if sparse is None:
            return [self.name]
        return [sparse.values_tensor_name, sparse.indices_tensor_name, sparse.dense_shape_tensor_name]

    def to_plain(self) -> dict:
        plain = {"dtype": as_dtype(self.dtype).name if self.dtype else None,
                 "tensor_shape": self.tensor_shape.to_plain()}
        if self.coo_sparse is not None:
            return {**plain, "coo_sparse": vars(self.coo_sparse)}
        return {**plain, "name": self.name}

    @classmethod
    def from_plain(cls, plain: dict) -> TensorInfo:
        sparse = plain.get("coo_sparse")
        return cls(name=plain.get("name", ""),
                   dtype=as_dtype(plain["dtype"]).as_datatype_enum if plain["dtype"] else 0,
                   tensor_shape=TensorShapeProto.from_dims(plain["tensor_shape"]),
                   coo_sparse=None if sparse is None else CooSparse(**sparse))


@dataclass
class SignatureDef:
    """A signature: named input and output tensors, and the ``method_name`` that says how a
    server calls it (``signature_constants.PREDICT_METHOD_NAME``, ...)."""

    inputs: dict[str, TensorInfo] = field(default_factory=dict)
    outputs: dict[str, TensorInfo] = field(default_factory=dict)
    method_name: str = ""

    def to_plain(self) -> dict:
        return {"inputs": {key: info.to_plain() for key, info in self.inputs.items()},
                "outputs": {key: info.to_plain() for key, info in self.outputs.items()},
                "method_name": self.method_name}

    @classmethod
    def from_plain(cls, plain: dict) -> SignatureDef:
        return cls({key: TensorInfo.from_plain(info) for key, info in plain["inputs"].items()},
                   {key: TensorInfo.from_plain(info) for key, info in plain["outputs"].items()},
                   plain["method_name"])


@dataclass
class MetaInfoDef:
    """The part of TF's ``MetaInfoDef`` a SavedModel uses: the meta graph's ``tags``."""

    tags: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class AssetFileDef:
    """An asset: the string tensor that holds its path, and its file's name under ``assets/``."""

    tensor_info: TensorInfo
    filename: str


@dataclass
class MetaGraphDef:
    """One meta graph of a SavedModel: its tags, signatures and assets, and the meta graph of
    :func:`dflow.train.export_meta_graph` (``graph_def``, ``saver_def``) that holds the graph.

    ``collection_def`` is the graph's collections (key -> items as plain data), among them
    ``constants.MAIN_OP_KEY``'s op where the model has a main op.
    """

    meta_info_def: MetaInfoDef
    signature_def: dict[str, SignatureDef]
    asset_file_def: list[AssetFileDef]
    meta_graph: dict  # graph_io.meta_graph_def's plain data

    @property
    def graph_def(self) -> dict:
        return self.meta_graph["graph_def"]

    @property
    def saver_def(self) -> dict | None:
        return self.meta_graph.get("saver_def")

    @property
    def collection_def(self) -> dict[str, list]:
        return self.graph_def["collections"]

    def to_plain(self) -> dict:
        return {"tags": list(self.meta_info_def.tags),
                "signature_def": {key: sig.to_plain() for key, sig in self.signature_def.items()},
                "asset_file_def": [{"tensor_info": asset.tensor_info.to_plain(), "filename": asset.filename}
                                   for asset in self.asset_file_def],
                "meta_graph": self.meta_graph}

    @classmethod
    def from_plain(cls, plain: dict) -> MetaGraphDef:
        assets = [AssetFileDef(TensorInfo.from_plain(asset["tensor_info"]), asset["filename"])
                  for asset in plain["asset_file_def"]]
        signatures = {key: SignatureDef.from_plain(sig) for key, sig in plain["signature_def"].items()}
        return cls(MetaInfoDef(list(plain["tags"])), signatures, assets, plain["meta_graph"])
