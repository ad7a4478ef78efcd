"""``tf.data`` as TF 1.x scripts use it: datasets described in Python, read by graph ops.

A :class:`DatasetV1` is a description (a source, then transformations such as
``map``, ``shuffle``, ``batch``, ``repeat``) that builds nothing until an iterator
is made from it. ``make_one_shot_iterator()`` and ``make_initializable_iterator()``
add ops to the graph (:mod:`dflow.ops.iterator_ops`) whose every run of
``get_next()`` yields the next element inside ``Session.run``, and raises
``tf.errors.OutOfRangeError`` after the last one. ``map`` and ``filter`` functions
are traced once into graph ops (as TF does) and run by dflow's executor on
each element, so ``tf.decode_raw``, ``tf.cast``, ``tf.reshape``... work in them.

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     data = tf.data.Dataset.from_tensor_slices(([1, 2, 3, 4, 5], [10, 20, 30, 40, 50]))
...     data = data.map(lambda x, y: x + y).batch(2)
...     next_batch = data.make_one_shot_iterator().get_next()
...     with tf.Session() as sess:
...         batches = []
...         try:
...             while True:
...                 batches.append(sess.run(next_batch).tolist())
...         except tf.errors.OutOfRangeError:
...             pass
>>> batches
[[11, 22], [33, 44], [55]]

Iterators run in local sessions and on a Dask cluster's workers (the iterator's
stream lives in the session state of the task its ops are placed on); files are
read with fsspec (local paths, ``memory://``, ``s3://``...). Not supported (each
raises an error that says so): ``padded_batch``, ``flat_map``/``interleave``,
TFRecord files and eager iteration; ``from_generator`` runs only where the graph was built (as in TF).
"""

from __future__ import annotations

from typing import Any

import numpy
import numpy as np

from .. import dtypes
from ..graph import Tensor, TensorShape, convert_to_tensor, get_default_graph, name_scope
from ..ops.sparse_ops import SparseTensor
from .structure import flatten, pack

__all__ = ["DatasetV1", "DatasetConstructors", "FixedLengthRecordDataset", "TextLineDataset",
           "TFRecordDataset", "Iterator", "ITERATORS", "make_one_shot_iterator",
           "make_initializable_iterator", "get_output_types", "get_output_shapes"]

# the graph collection of iterators (an Estimator runs until their OutOfRangeError)
ITERATORS = "dflow_dataset_iterators"


# ---- nested elements: tuples and dicts of tensors, flattened for the ops ---------------------------
def _as_tensors(value, name: str) -> tuple[Any, list[Tensor]]:
    """A nested element of tensors; a list (like a NumPy array) is one tensor, as in TF."""
    structure, leaves = flatten(value)
    return structure, [convert_to_tensor(v, name=name) for v in leaves]


# ---- datasets ---------------------------------------------------------------------------------------
class _ElementSpec:
    """What an element of a dataset or iterator is: ``_structure`` (nested) of flat ``_specs``
    (dtype, shape), as TF's ``output_types``, ``output_shapes`` and ``output_classes``."""

    @property
    def output_types(self):
        return pack(self._structure, [dtype for dtype, _ in self._specs])

    @property
    def output_shapes(self):
        return pack(self._structure, [TensorShape(shape) for _, shape in self._specs])

    @property
    def output_classes(self):
        return pack(self._structure, [Tensor for _ in self._specs])


class DatasetConstructors:
    """The static constructors of ``tf.data.Dataset`` (also on dflow's Zarr :class:`~dflow.data.Dataset`,
    which ``tf.data.Dataset`` names)."""

    @staticmethod
    def from_tensors(tensors) -> DatasetV1:
        """One element: ``tensors`` (a tensor, or a tuple/dict of them)."""
        structure, leaves = _as_tensors(tensors, "tensors")
        return DatasetV1("tensors", structure, [(t.dtype, t.shape.dims) for t in leaves], captured=leaves)

    @staticmethod
    def from_tensor_slices(tensors) -> DatasetV1:
        """One element per row of ``tensors`` (all components share their first dimension).

        >>> import numpy as np, dflow as tf
        >>> data = tf.data.Dataset.from_tensor_slices({"x": np.ones((4, 2)), "y": np.arange(4)})
        >>> data.output_shapes["x"].as_list()
        [2]
        """
        structure, leaves = _as_tensors(tensors, "tensors")
        firsts = {t.shape.dims[0] for t in leaves if t.shape.dims}
        if any(t.shape.dims == () for t in leaves) or len(firsts - {None}) > 1:
            raise ValueError("from_tensor_slices: every component must have the same first dimension, got "
                             f"shapes {[t.shape for t in leaves]}")
        specs = [(t.dtype, None if t.shape.dims is None else t.shape.dims[1:]) for t in leaves]
        return DatasetV1("tensor_slices", structure, specs, captured=leaves)

    @staticmethod
    def list_files(file_pattern, shuffle=None, seed=None) -> DatasetV1:
        """The names of the files matching ``file_pattern`` (a glob, or a list of them; local or
        fsspec URLs), matched when the graph is built, in a new random order every epoch unless
        ``shuffle=False`` (then sorted), as scalar strings."""
        from ..gfile import Glob

        patterns = [file_pattern] if isinstance(file_pattern, (str, bytes)) else list(file_pattern)
        names = sorted({name for p in patterns for name in Glob(p.decode() if isinstance(p, bytes) else p)})
        if not names:
            raise ValueError(f"list_files: no files match {file_pattern!r}")
        files = DatasetConstructors.from_tensor_slices(numpy.asarray(names, dtype=object))
        return files.shuffle(len(names), seed=seed) if shuffle is None or shuffle else files

    @staticmethod
    def range(*args, output_type=dtypes.int64) -> DatasetV1:
        """``range(stop)``, ``range(start, stop)`` or ``range(start, stop, step)``, as Python's."""
        bounds = [int(a) for a in args]
        range(*bounds)  # Python's checks (count and zero step)
        return DatasetV1("range", None, [(dtypes.as_dtype(output_type), ())],
                         params={"args": bounds, "dtype": dtypes.as_dtype(output_type)})

    @staticmethod
    def zip(datasets) -> DatasetV1:
        """Elements of ``datasets`` (a tuple or dict of datasets, nested) side by side, until the
        shortest ends."""
        structure, parts = flatten(datasets)
        for part in parts:
            if not isinstance(part, DatasetV1):
                raise TypeError(f"Dataset.zip takes a tuple or dict of datasets, got a {type(part).__name__}")
        element = pack(structure, [d._structure for d in parts], sequence=list)
        return DatasetV1("zip", element, [spec for d in parts for spec in d._specs], inputs=parts)

    @staticmethod
    def from_generator(generator, output_types, output_shapes=None, args=None) -> DatasetV1:
        """The elements ``generator(*args)`` yields (converted to ``output_types``; checked against
        ``output_shapes``). As in TF, the generator runs in the process that built the graph: the
        graph holds only a token for it, so a Dask worker cannot run this dataset.

        >>> import dflow as tf
        >>> data = tf.data.Dataset.from_generator(lambda: iter([[1, 2], [3]]), tf.int64, [None])
        >>> data.output_shapes.as_list()
        [None]
        """
        from ..ops.iterator_ops import register_generator

        if not callable(generator):
            raise TypeError(f"from_generator needs a function that returns an iterator, got {generator!r}")
        structure, types = flatten(output_types)
        specs = _specs_of(structure, types, output_shapes)
        token = register_generator(generator, tuple(args or ()))
        return DatasetV1("generator", structure, specs, params={
            "token": token, "structure": structure, "types": [d for d, _ in specs],
            "shapes": [s for _, s in specs]})


class DatasetV1(DatasetConstructors, _ElementSpec):
    """A TF 1.x dataset: a stage of a pipeline (``kind`` with plain ``params``) over the datasets it
    reads (``inputs``) and the graph tensors it takes (``captured``). Its elements have the
    nested ``structure`` of flat ``specs`` (dtype, shape)."""

    def __init__(self, kind: str, structure, specs, *, inputs=(), captured=(), params=None):
        self._kind, self._structure, self._specs = kind, structure, list(specs)
        self._inputs, self._captured, self._params = list(inputs), list(captured), dict(params or {})

    def _then(self, kind: str, structure=None, specs=None, **params) -> DatasetV1:
        return DatasetV1(kind, self._structure if specs is None else structure,
                         self._specs if specs is None else specs, inputs=[self], params=params)

    # ---- transformations ----
    def map(self, map_func, num_parallel_calls=None) -> DatasetV1:
        """``map_func`` on every element (its tuple's parts as arguments); ``num_parallel_calls``
        is accepted and elements are made one at a time, in order."""
        function, structure, specs = _trace(map_func, self, "map")
        return DatasetV1("map", structure, specs, inputs=[self], params={"function": function})

    def filter(self, predicate) -> DatasetV1:
        """The elements for which ``predicate`` gives a scalar ``True``."""
        function, _, specs = _trace(predicate, self, "filter")
        if len(specs) != 1 or specs[0][0] != dtypes.bool or specs[0][1] not in ((), None):
            raise TypeError(f"filter's predicate must return a scalar tf.bool tensor, got {specs}")
        return self._then("filter", function=function)

    def batch(self, batch_size, drop_remainder=False) -> DatasetV1:
        """``batch_size`` consecutive elements stacked; the last batch may be smaller unless
        ``drop_remainder``."""
        size = _positive(batch_size, "batch_size")
        batch = size if drop_remainder and isinstance(size, int) else None
        specs = [(dtype, None if shape is None else (batch, *shape)) for dtype, shape in self._specs]
        return self._then("batch", self._structure, specs, batch_size=size,
                          drop_remainder=bool(drop_remainder))

    def shuffle(self, buffer_size, seed=None, reshuffle_each_iteration=True) -> DatasetV1:
        """Elements drawn at random from a buffer of ``buffer_size`` (TF's shuffle: a buffer at
        least as big as the dataset shuffles uniformly)."""
        from ..ops.state_ops import op_seed

        return self._then("shuffle", buffer_size=_positive(buffer_size, "buffer_size"), seed=op_seed(seed),
                          reshuffle_each_iteration=bool(reshuffle_each_iteration))

    def repeat(self, count=None) -> DatasetV1:
        """The dataset ``count`` times (forever when None or -1)."""
        return self._then("repeat", count=-1 if count is None else _count(count, "count"))

    def take(self, count) -> DatasetV1:
        """The first ``count`` elements (all when -1)."""
        return self._then("take", count=_count(count, "count"))

    def skip(self, count) -> DatasetV1:
        """All but the first ``count`` elements (none when -1)."""
        return self._then("skip", count=_count(count, "count"))

    def cache(self, filename="") -> DatasetV1:
        """The first complete pass kept in memory and replayed by the next ones (a ``filename``
        is not written: dflow caches in memory)."""
        return self._then("cache")

    def prefetch(self, buffer_size) -> DatasetV1:
        """The same elements (dflow makes each when it is asked for)."""
        return self._then("prefetch")

    def concatenate(self, dataset) -> DatasetV1:
        """This dataset's elements, then ``dataset``'s (of the same types)."""
        if [d for d, _ in dataset._specs] != [d for d, _ in self._specs]:
            raise TypeError(f"concatenate: the datasets' types differ: {self.output_types} and "
                            f"{dataset.output_types}")
        specs = [(d, _merged_shape(a, b)) for (d, a), (_, b) in zip(self._specs, dataset._specs)]
        return DatasetV1("concatenate", self._structure, specs, inputs=[self, dataset])

    def apply(self, transformation_func) -> DatasetV1:
        """``transformation_func(self)``."""
        return transformation_func(self)

    def padded_batch(self, batch_size, padded_shapes=None, padding_values=None,
                     drop_remainder=False) -> DatasetV1:
        """``batch_size`` consecutive elements, each padded at the end of every dimension to
        ``padded_shapes`` (nested as the elements; a ``None`` or -1 dim, or no ``padded_shapes``:
        to the longest in the batch) with ``padding_values`` (default 0, ``b""`` for strings).

        >>> import dflow as tf
        >>> with tf.Graph().as_default():
        ...     rows = tf.data.Dataset.range(1, 4).map(lambda n: tf.fill([n], n))
        ...     batch = rows.padded_batch(3, padded_shapes=[None]).make_one_shot_iterator().get_next()
        ...     tf.Session().run(batch).tolist()
        [[1, 0, 0], [2, 2, 0], [3, 3, 3]]
        """
        size = _positive(batch_size, "batch_size")
        count = len(self._specs)
        shapes = _along(self._structure, padded_shapes, count, "padded_shapes")
        values = _along(self._structure, padding_values, count, "padding_values")
        padded = []
        for (_, shape), want in zip(self._specs, shapes):
            if want is None:
                if shape is None:
                    raise ValueError("padded_batch needs padded_shapes for an element of unknown rank")
                want = [None] * len(shape)
            want = [None if d is None or int(d) < 0 else int(d)
                    for d in (want.as_list() if isinstance(want, TensorShape) else want)]
            if shape is not None and (len(want) != len(shape) or any(
                    w is not None and d is not None and d > w for w, d in zip(want, shape))):
                raise ValueError(f"padded_batch: padded shape {want} does not fit elements of shape "
                                 f"{list(shape)}")
            padded.append(want)
        fills = [_padding(value, dtype) for (dtype, _), value in zip(self._specs, values)]
        batch = size if drop_remainder and isinstance(size, int) else None
        specs = [(dtype, (batch, *want)) for (dtype, _), want in zip(self._specs, padded)]
        return self._then("padded_batch", self._structure, specs, batch_size=size,
                          drop_remainder=bool(drop_remainder), padded_shapes=padded, padding_values=fills)

    def flat_map(self, map_func) -> DatasetV1:
        """The elements of ``map_func(element)`` (a dataset) for each element, one dataset after
        another: ``files.flat_map(tf.data.TFRecordDataset)``."""
        return self.interleave(map_func, cycle_length=1)

    def interleave(self, map_func, cycle_length=None, block_length=1, num_parallel_calls=None) -> DatasetV1:
        """``map_func(element)`` (a dataset) for ``cycle_length`` elements at a time, taking
        ``block_length`` elements from each in turn, as TF's interleave orders them (an ended
        dataset's place goes to the next element's): ``files.interleave(tf.data.TFRecordDataset,
        cycle_length=4)`` reads four shards at once. ``cycle_length`` defaults to 1; the datasets
        are read in this order on one thread (``num_parallel_calls`` is accepted).

        >>> import dflow as tf
        >>> with tf.Graph().as_default():
        ...     data = tf.data.Dataset.range(1, 4).interleave(  # n, n times
        ...         lambda n: tf.data.Dataset.from_tensor_slices(tf.fill(tf.stack([n]), n)), cycle_length=2)
        ...     element = data.make_one_shot_iterator().get_next()
        ...     with tf.Session() as sess:
        ...         [int(sess.run(element)) for _ in range(6)]
        [1, 2, 2, 3, 3, 3]
        """
        made = {}

        def captured_of(*element):  # traced: what the element's dataset takes from the element
            dataset = map_func(*element)
            if not isinstance(dataset, DatasetV1):
                raise TypeError("the function passed to Dataset.interleave / flat_map must return a "
                                f"dataset, got {dataset!r}")
            captured = []
            made["plan"], made["dataset"] = dataset._plan(captured), dataset
            return tuple(captured)

        function, _, _ = _trace(captured_of, self, "interleave")
        inner = made["dataset"]
        return DatasetV1("interleave", inner._structure, inner._specs, inputs=[self], params={
            "function": function, "dataset": made["plan"],
            "cycle_length": _positive(cycle_length or 1, "cycle_length"),
            "block_length": _positive(block_length, "block_length")})

    def __iter__(self):
        raise RuntimeError("iterating over a tf.data.Dataset in Python needs eager execution, which dflow "
                           "does not have: make an iterator (dataset.make_one_shot_iterator()) and "
                           "sess.run(iterator.get_next())")

    # ---- iterators ----
    def make_one_shot_iterator(self) -> Iterator:
        """An iterator that starts at the first run of its ``get_next()``; no initializer."""
        graph = get_default_graph()
        captured: list[Tensor] = []
        plan = self._plan(captured)
        with name_scope(None):
            name = graph.unique_name("OneShotIterator", mark_as_used=False)
            op = graph.create_op("OneShotIterator", captured, {"plan": plan, "shared_name": name}, name=name)
        return Iterator(op.outputs[0], None, self._structure, self._specs)

    def make_initializable_iterator(self, shared_name=None) -> Iterator:
        """An iterator whose ``initializer`` (re)starts it from this dataset's first element."""
        iterator = Iterator.from_structure(self.output_types, self.output_shapes, shared_name)
        iterator._initializer = iterator.make_initializer(self)
        return iterator

    def _plan(self, captured: list) -> dict:
        """This pipeline as plain data; the tensors it takes are appended to ``captured`` (a
        count given as a tensor: ``{"captured_count": its position}``, read when it starts)."""
        positions = []
        for tensor in self._captured:
            positions.append(len(captured))
            captured.append(tensor)
        params = {}
        for key, value in self._params.items():
            if isinstance(value, Tensor):
                captured.append(value)
                value = {"captured_count": len(captured) - 1}
            params[key] = value
        return {"kind": self._kind, **params, "captured": positions,
                "inputs": [d._plan(captured) for d in self._inputs]}

    def __repr__(self) -> str:
        return f"<DatasetV1 {self._kind}: types {self.output_types}, shapes {self.output_shapes}>"


def _padding(value, dtype) -> object:
    """A padding value as plain data (the plan travels as JSON): bytes as a latin-1 str."""
    if value is None:
        return "" if dtype == dtypes.string else 0
    if isinstance(value, Tensor):
        value = value.op.attrs.get("value") if value.op.type == "Const" else None
        if value is None:
            raise TypeError("padded_batch's padding_values must be constants (Python values or tf.constant)")
    value = value.item() if hasattr(value, "item") else value
    return value.decode("latin-1") if isinstance(value, bytes) else value


def _along(structure, value, count: int, what: str) -> list:
    """``value``'s parts, one per component of elements nested as ``structure`` (a part that is
    itself a list or tuple, a shape, stays whole); ``None``: None for each."""
    if value is None:
        return [None] * count
    if structure is None:
        return [value]
    if isinstance(structure, dict):
        if not isinstance(value, dict) or set(value) != set(structure):
            raise ValueError(f"{what} must be nested as the elements: a dict of {sorted(structure)}")
        return [part for key in structure for part in _along(structure[key], value[key], count, what)]
    if not isinstance(value, (tuple, list)) or len(value) != len(structure):
        raise ValueError(f"{what} must be nested as the elements: a tuple of {len(structure)}")
    return [part for sub, item in zip(structure, value) for part in _along(sub, item, count, what)]


def _positive(value, what: str) -> int | Tensor:
    """A positive count; a tensor (TF 1.x's ``batch(batch_size_placeholder)``) is read when the
    iterator starts, and checked then."""
    if isinstance(value, Tensor):
        return _count_tensor(value, what)
    if int(value) <= 0:
        raise ValueError(f"{what} must be positive, got {value}")
    return int(value)


def _count(value, what: str) -> int | Tensor:
    """A count where -1 means all; a tensor is read when the iterator starts."""
    return _count_tensor(value, what) if isinstance(value, Tensor) else int(value)


def _count_tensor(value: Tensor, what: str) -> Tensor:
    if not value.dtype.is_integer or value.shape.ndims not in (None, 0):
        raise TypeError(f"{what} must be a scalar integer tensor, got {value.name} of {value.dtype.name} "
                        f"and shape {value.shape}")
    return value


def _merged_shape(a, b):
    if a is None or b is None or len(a) != len(b):
        return None
    return tuple(x if x == y else None for x, y in zip(a, b))


def _trace(function, dataset: DatasetV1, what: str) -> tuple[dict, Any, list]:
    """``function`` applied to placeholders of ``dataset``'s element, as ops in the default graph;
    the ops its result needs become the traced function ``{"nodes", "args", "outputs"}``."""
    from ..ops.array_ops import placeholder
    from ..runtime.passes import prune, to_node

    graph = get_default_graph()
    name = getattr(function, "__name__", "fn").strip("<>")
    with name_scope(f"Dataset_{what}_{name}"):
        args = [placeholder(dtype, shape, name="arg") for dtype, shape in dataset._specs]
        element = pack(dataset._structure, args)
        result = function(*element) if isinstance(element, tuple) else function(element)
        if isinstance(result, list):
            result = tuple(result)  # TF 1.x reads a returned list as a tuple
        structure, leaves = flatten(result)
        if any(isinstance(v, SparseTensor) for v in leaves):
            raise TypeError(f"the function passed to Dataset.{what} returns a tf.SparseTensor (a "
                            "VarLenFeature's), which a dflow dataset cannot hold: make it dense in the "
                            "function (tf.sparse_tensor_to_dense), or parse the feature with "
                            "tf.FixedLenFeature or tf.FixedLenSequenceFeature(allow_missing=True)")
        outputs = [convert_to_tensor(v) for v in leaves]
    fed = {a.name for a in args}
    with graph._lock:
        ops = [op for _, op in prune(graph.nx, [t.name for t in outputs], fed).nodes(data="op")]
    for op in ops:
        if op.type in ("Placeholder",) and op.outputs[0].name not in fed:
            raise ValueError(f"the function passed to Dataset.{what} uses the placeholder {op.name}, which "
                             "dflow cannot feed inside a dataset: pass its value through "
                             "from_tensor_slices and an initializable iterator instead")
    nodes = [{"name": n.name, "type": n.type, "attrs": n.attrs, "inputs": list(n.inputs),
              "control_inputs": list(n.control_inputs), "num_outputs": n.num_outputs}
             for n in map(to_node, ops)]  # plain data: graph_to_dict writes it
    function_plan = {"nodes": nodes, "args": [a.name for a in args], "outputs": [t.name for t in outputs]}
    return function_plan, structure, [(t.dtype, t.shape.dims) for t in outputs]


class _FileDataset(DatasetV1):
    """A dataset of files' records: the names are known when the graph is built, or are a
    string tensor computed when the step runs (an interleave's element: the stage reads them from
    its captured values)."""

    def __init__(self, kind: str, filenames, what: str, params: dict):
        computed = isinstance(filenames, Tensor) and filenames.op.type != "Const"
        if computed and filenames.dtype != dtypes.string:
            raise TypeError(f"{what}: filenames must be strings, got a {filenames.dtype.name} tensor")
        super().__init__(kind, None, [(dtypes.string, ())], captured=[filenames] if computed else [],
                         params={"filenames": None if computed else _filenames(filenames, what), **params})


class FixedLengthRecordDataset(_FileDataset):
    """The records of binary files: ``record_bytes`` each, after ``header_bytes`` and before
    ``footer_bytes``, as scalar ``tf.string`` tensors (decode them with ``tf.decode_raw``).

    >>> import os, tempfile, dflow as tf
    >>> path = os.path.join(tempfile.mkdtemp(), "images.bin")
    >>> _ = open(path, "wb").write(bytes(16) + bytes(range(8)))  # a header, then two 2x2 images
    >>> with tf.Graph().as_default():
    ...     images = tf.data.FixedLengthRecordDataset(path, 2 * 2, header_bytes=16)
    ...     image = tf.decode_raw(images.make_one_shot_iterator().get_next(), tf.uint8)
    ...     with tf.Session() as sess:
    ...         [sess.run(image).tolist() for _ in range(2)]
    [[0, 1, 2, 3], [4, 5, 6, 7]]
    """

    def __init__(self, filenames, record_bytes, header_bytes=None, footer_bytes=None, buffer_size=None):
        super().__init__("fixed_length_records", filenames, "FixedLengthRecordDataset", {
            "record_bytes": _positive(record_bytes, "record_bytes"),
            "header_bytes": int(header_bytes or 0), "footer_bytes": int(footer_bytes or 0)})


class TextLineDataset(_FileDataset):
    """The lines of text files (without their line ends), as scalar ``tf.string`` tensors."""

    def __init__(self, filenames, compression_type=None, buffer_size=None):
        if compression_type:
            raise ValueError("TextLineDataset(compression_type=...) is not supported by dflow: decompress "
                             "the files first")
        super().__init__("text_lines", filenames, "TextLineDataset", {})


class TFRecordDataset(_FileDataset):
    """The records of TFRecord files (``tf.python_io.TFRecordWriter``'s, TensorFlow's), as scalar
    ``tf.string`` tensors, each checked against its checksums (a damaged one is a DataLossError).
    ``compression_type`` is ``None``/``""``, ``"ZLIB"`` or ``"GZIP"``; the files are read one
    after another (``num_parallel_reads`` and ``buffer_size`` are accepted and not used)."""

    def __init__(self, filenames, compression_type=None, buffer_size=None, num_parallel_reads=None):
        from ..tf_record import compression_of

        super().__init__("tf_records", filenames, "TFRecordDataset",
                         {"compression_type": compression_of(compression_type)})


def _filenames(filenames, what: str) -> list[str]:
    if isinstance(filenames, Tensor):
        filenames = filenames.op.attrs["value"]
    if isinstance(filenames, str | bytes):
        filenames = [filenames]
    names = [f.decode() if isinstance(f, bytes) else str(f)
             for f in np.asarray(filenames, dtype=object).reshape(-1).tolist()]
    if not names:
        raise ValueError(f"{what}: no filenames given")
    return names


# ---- iterators -------------------------------------------------------------------------------------
class Iterator(_ElementSpec):
    """``tf.data.Iterator``: ``get_next()`` gives tensors whose every run reads the next element.

    ``Iterator.from_structure(types, shapes)`` makes one that several datasets of that
    structure can start (``make_initializer(dataset)``), as for a training and a validation set.
    """

    def __init__(self, handle: Tensor, initializer, structure, specs):
        self._handle, self._initializer = handle, initializer
        self._structure, self._specs = structure, list(specs)
        get_default_graph().add_to_collection(ITERATORS, handle)  # a tensor: survives graph_to_dict

    @staticmethod
    def from_structure(output_types, output_shapes=None, shared_name=None, output_classes=None) -> Iterator:
        structure, types = flatten(output_types)
        specs = _specs_of(structure, types, output_shapes)
        graph = get_default_graph()
        name = graph.unique_name("Iterator", mark_as_used=False)
        op = graph.create_op("IteratorV2", [], {"shared_name": shared_name or name}, name=name)
        return Iterator(op.outputs[0], None, structure, specs)

    @staticmethod
    def from_string_handle(string_handle, output_types, output_shapes=None, output_classes=None) -> Iterator:
        """A feedable iterator: its ``get_next()`` reads from the iterator whose
        ``string_handle()`` value is fed to ``string_handle`` (a scalar ``tf.string`` placeholder)."""
        handle = convert_to_tensor(string_handle)
        if handle.dtype != dtypes.string:
            raise TypeError(f"from_string_handle needs a tf.string tensor, got {handle.dtype.name}")
        structure, types = flatten(output_types)
        return Iterator(handle, None, structure, _specs_of(structure, types, output_shapes))

    def string_handle(self, name=None) -> Tensor:
        """A scalar ``tf.string`` naming this iterator, to feed to ``Iterator.from_string_handle``'s."""
        return get_default_graph().create_op("IteratorToStringHandle", [self._handle],
                                             name=name or "IteratorToStringHandle").outputs[0]

    @property
    def initializer(self):
        if self._initializer is None:
            raise ValueError("this iterator has no initializer: a one-shot iterator starts by itself, and "
                             "one from Iterator.from_structure is started by make_initializer(dataset)")
        return self._initializer

    def make_initializer(self, dataset: DatasetV1, name=None):
        """An op that (re)starts this iterator at ``dataset``'s first element."""
        same_types = [d for d, _ in dataset._specs] == [d for d, _ in self._specs]
        if not same_types or dataset._structure != self._structure:
            raise TypeError(f"make_initializer: the dataset's elements ({dataset.output_types}) do not match "
                            f"the iterator's ({self.output_types})")
        captured: list[Tensor] = []
        plan = dataset._plan(captured)
        return get_default_graph().create_op("MakeIterator", [self._handle, *captured], {"plan": plan},
                                             name=name or "MakeIterator")

    def get_next(self, name=None):
        """The next element: a tensor, or the dataset's tuple/dict of tensors."""
        attrs = {"output_types": [d for d, _ in self._specs], "output_shapes": [s for _, s in self._specs]}
        op = get_default_graph().create_op("IteratorGetNext", [self._handle], attrs,
                                           name=name or "IteratorGetNext")
        return pack(self._structure, op.outputs)


def _specs_of(structure, types, output_shapes) -> list:
    shapes = ([None] * len(types) if output_shapes is None else
              [TensorShape(s).dims for s in _flatten_like(structure, output_shapes)])
    return [(dtypes.as_dtype(t), s) for t, s in zip(types, shapes)]


def _flatten_like(structure, value) -> list:
    """``value``'s leaves in ``structure``'s order, where a leaf may itself be a list (a shape)."""
    if structure is None:
        return [value]
    if isinstance(structure, dict):
        return [leaf for key, sub in structure.items() for leaf in _flatten_like(sub, value[key])]
    return [leaf for sub, item in zip(structure, value) for leaf in _flatten_like(sub, item)]


# ---- TF 1.13+'s functional spellings (tf.compat.v1.data.*) ---------------------------------------------
def make_one_shot_iterator(dataset: DatasetV1) -> Iterator:
    """``dataset.make_one_shot_iterator()``."""
    return dataset.make_one_shot_iterator()


def make_initializable_iterator(dataset: DatasetV1, shared_name=None) -> Iterator:
    """``dataset.make_initializable_iterator()``."""
    return dataset.make_initializable_iterator(shared_name)


def get_output_types(dataset_or_iterator):
    return dataset_or_iterator.output_types


def get_output_shapes(dataset_or_iterator):
    return dataset_or_iterator.output_shapes
