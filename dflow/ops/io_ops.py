"""Readers (TF 1.x's ``tf.FixedLengthRecordReader``, ``tf.TextLineReader``, ``tf.WholeFileReader``),
``tf.decode_raw``, ``tf.decode_csv`` and ``tf.read_file``.

A reader is a resource of the session, like a queue (:mod:`dflow.ops.queue_ops`).
``reader.read(filename_queue)`` builds one op; each run of it returns the next
record ``(key, value)`` as scalar strings, taking the next filename from the
queue when the current file is done, and raises ``tf.errors.OutOfRangeError``
once that queue is closed and empty (the epochs of ``string_input_producer``
are over). Files are opened with fsspec, so ``s3://`` and ``memory://`` names
work as well as local paths. Several queue-runner threads may share one
reader: its reads take turns, as in TF.

>>> import os, tempfile, dflow as tf
>>> path = os.path.join(tempfile.mkdtemp(), "records.bin")
>>> _ = open(path, "wb").write(bytes(range(6)))
>>> with tf.Graph().as_default():
...     files = tf.train.string_input_producer([path], num_epochs=1, shuffle=False)
...     key, value = tf.FixedLengthRecordReader(record_bytes=3).read(files)
...     numbers = tf.decode_raw(value, tf.uint8)
...     with tf.Session() as sess:
...         _ = sess.run(tf.local_variables_initializer())
...         coord = tf.train.Coordinator()
...         threads = tf.train.start_queue_runners(sess, coord)
...         first, second = sess.run(numbers).tolist(), sess.run(numbers).tolist()
...         coord.request_stop(); coord.join(threads)
>>> first, second
([0, 1, 2], [3, 4, 5])
"""

from __future__ import annotations

import threading

from .. import dtypes
from ..errors import DataLossError, InvalidArgumentError
from ..graph import Tensor, get_default_graph
from .registry import ShapeError, Spec, defop
from .state_ops import op_seed

__all__ = ["ReaderBase", "FixedLengthRecordReader", "TextLineReader", "TFRecordReader", "WholeFileReader",
           "decode_raw",
           "shuffle_together", "count_up_to", "read_file", "decode_csv"]


# ---- the readers' state in a session ---------------------------------------------------------
class FileRecords:
    """Records of the files a filename queue hands out, one file after another. Subclasses
    say how a file splits into records (:meth:`_records`, an iterator of ``(key, value)``)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._current = None  # the open file's record iterator
        self.records_produced = 0
        self.files_done = 0

    def read(self, filenames) -> tuple[bytes, bytes]:
        """The next record; a finished file is replaced by the queue's next filename."""
        with self._lock:
            while True:
                if self._current is None:
                    (name,), = filenames.dequeue_many(1)  # OutOfRangeError: no files left
                    self._current = self._records(_as_str(name))
                record = next(self._current, None)
                if record is not None:
                    self.records_produced += 1
                    return record
                self._current = None
                self.files_done += 1

    def _records(self, name: str):
        raise NotImplementedError


def _as_str(name) -> str:
    name = name.item() if hasattr(name, "item") else name
    return name.decode() if isinstance(name, bytes) else str(name)


def _open(name: str):
    import fsspec

    try:
        return fsspec.open(name, "rb").open()
    except FileNotFoundError:
        from ..errors import NotFoundError

        raise NotFoundError(f"{name}: no such file (from the reader's filename queue)") from None


class FixedLengthRecords(FileRecords):
    """``header_bytes``, then records of ``record_bytes`` (starting every ``hop_bytes`` when set),
    then ``footer_bytes``: CIFAR-10's binary batches are 10000 records of 3073 bytes."""

    def __init__(self, record_bytes, header_bytes=0, footer_bytes=0, hop_bytes=0):
        super().__init__()
        self.record_bytes, self.header_bytes = record_bytes, header_bytes
        self.footer_bytes, self.hop_bytes = footer_bytes, hop_bytes

    def _records(self, name: str):
        with _open(name) as file:
            size = file.seek(0, 2)
            body = size - self.header_bytes - self.footer_bytes
            step = self.hop_bytes or self.record_bytes
            count = 0 if body < self.record_bytes else (body - self.record_bytes) // step + 1
            if not self.hop_bytes and body != count * self.record_bytes:
                raise DataLossError(
                    f"{name}: {size} bytes is not header_bytes={self.header_bytes} + a whole number of "
                    f"records of record_bytes={self.record_bytes} + footer_bytes={self.footer_bytes} "
                    f"({body % self.record_bytes} bytes left over): is it the file the reader expects?")
            for index in range(count):
                file.seek(self.header_bytes + index * step)
                yield f"{name}:{index}".encode(), file.read(self.record_bytes)


class TextLines(FileRecords):
    """One record per line, without its line ending; keys ``name:line`` count from 1."""

    def __init__(self, skip_header_lines=0):
        super().__init__()
        self.skip_header_lines = skip_header_lines

    def _records(self, name: str):
        with _open(name) as file:
            for number, line in enumerate(file, start=1):
                if number > self.skip_header_lines:
                    yield f"{name}:{number}".encode(), line.rstrip(b"\n").rstrip(b"\r")


class WholeFiles(FileRecords):
    """One record per file: the key is its name, the value its bytes."""

    def _records(self, name: str):
        with _open(name) as file:
            yield name.encode(), file.read()


class TFRecords(FileRecords):
    """The records of TFRecord files, checked against their checksums; keys ``name:offset``."""

    def __init__(self, compression_type=""):
        super().__init__()
        self.compression_type = compression_type

    def _records(self, name: str):
        from ..tf_record import read_records

        with _open(name) as file:
            for offset, record in read_records(file, name, self.compression_type):
                yield f"{name}:{offset}".encode(), record


_RECORD_KINDS = {"FixedLengthRecordReaderV2": FixedLengthRecords, "TextLineReaderV2": TextLines,
                 "WholeFileReaderV2": WholeFiles, "TFRecordReaderV2": TFRecords}


def _reader_kernel(kind):
    def kernel(state, xp, shared_name, **options):
        key = f"Reader:{shared_name}"
        state.resource(key, lambda: _RECORD_KINDS[kind](**options))
        return key

    return kernel


def _scalar_string(inputs, **_):
    return [Spec((), dtypes.string)]


for _kind in _RECORD_KINDS:
    defop(_kind, _scalar_string, _reader_kernel(_kind), stateful=True, gpu=False)


def _read_kernel(state, xp, reader, queue):
    import numpy  # strings are bytes in NumPy object arrays: the array API has no string dtype

    key, value = state.resources[str(reader)].read(state.resources[str(queue)])
    return numpy.array(key, dtype=object), numpy.array(value, dtype=object)


defop("ReaderReadV2", lambda inputs: [Spec((), dtypes.string)] * 2, _read_kernel, stateful=True,
      num_outputs=2, gpu=False)
defop("ReaderNumRecordsProducedV2", lambda inputs: [Spec((), dtypes.int64)],
      lambda state, xp, reader: xp.asarray(state.resources[str(reader)].records_produced, dtype=xp.int64),
      stateful=True, gpu=False)


class ReaderBase:
    """What every reader has: ``read(queue) -> (key, value)`` and ``num_records_produced()``."""

    _op_type = ""

    def __init__(self, name=None, **options):
        graph = get_default_graph()
        shared_name = graph.unique_name(name or self._op_type.removesuffix("V2"), mark_as_used=False)
        self.reader_ref = graph.create_op(self._op_type, [], {"shared_name": shared_name, **options},
                                          name=name or self._op_type.removesuffix("V2")).outputs[0]

    def read(self, queue, name=None) -> tuple[Tensor, Tensor]:
        """The next record of the files ``queue`` (a queue of filenames) hands out."""
        queue_ref = getattr(queue, "queue_ref", queue)
        if not isinstance(queue_ref, Tensor) or queue_ref.dtype != dtypes.string:
            raise TypeError(f"reader.read takes a queue of filenames (tf.train.string_input_producer), "
                            f"got {queue!r}")
        op = get_default_graph().create_op("ReaderReadV2", [self.reader_ref, queue_ref],
                                           name=name or "ReaderReadV2")
        return op.outputs[0], op.outputs[1]

    def num_records_produced(self, name=None) -> Tensor:
        return get_default_graph().create_op("ReaderNumRecordsProducedV2", [self.reader_ref],
                                             name=name).outputs[0]

    @property
    def supports_serialize(self) -> bool:
        return False


class FixedLengthRecordReader(ReaderBase):
    """Records of a fixed number of bytes (``tf.FixedLengthRecordReader``)."""

    _op_type = "FixedLengthRecordReaderV2"

    def __init__(self, record_bytes, header_bytes=None, footer_bytes=None, hop_bytes=None, name=None,
                 encoding=None):
        if encoding:
            raise ValueError("FixedLengthRecordReader(encoding=...) (compressed files) is not supported "
                             "by dflow: decompress the files first")
        if int(record_bytes) <= 0:
            raise ValueError(f"record_bytes must be positive, got {record_bytes}")
        super().__init__(name, record_bytes=int(record_bytes), header_bytes=int(header_bytes or 0),
                         footer_bytes=int(footer_bytes or 0), hop_bytes=int(hop_bytes or 0))


class TextLineReader(ReaderBase):
    """The lines of text files (``tf.TextLineReader``)."""

    _op_type = "TextLineReaderV2"

    def __init__(self, skip_header_lines=None, name=None):
        super().__init__(name, skip_header_lines=int(skip_header_lines or 0))


class TFRecordReader(ReaderBase):
    """The records of TFRecord files (``tf.TFRecordReader``), each checked against its checksums.

    >>> import os, tempfile, dflow as tf
    >>> path = os.path.join(tempfile.mkdtemp(), "records.tfrecord")
    >>> with tf.python_io.TFRecordWriter(path) as writer:
    ...     writer.write(b"one")
    >>> with tf.Graph().as_default():
    ...     files = tf.train.string_input_producer([path], num_epochs=1)
    ...     key, value = tf.TFRecordReader().read(files)
    ...     with tf.Session() as sess:
    ...         _ = sess.run(tf.local_variables_initializer())
    ...         coord = tf.train.Coordinator()
    ...         threads = tf.train.start_queue_runners(sess, coord)
    ...         record = sess.run(value)
    ...         coord.request_stop(); coord.join(threads)
    >>> record
    b'one'
    """

    _op_type = "TFRecordReaderV2"

    def __init__(self, name=None, options=None):
        from ..tf_record import compression_of

        super().__init__(name, compression_type=compression_of(options))


class WholeFileReader(ReaderBase):
    """Whole files as records (``tf.WholeFileReader``)."""

    _op_type = "WholeFileReaderV2"

    def __init__(self, name=None):
        super().__init__(name)


# ---- decode_raw --------------------------------------------------------------------------------
def _decode_raw_infer(inputs, out_type, little_endian):
    if inputs[0].dtype != dtypes.string:
        raise ShapeError(f"decode_raw decodes strings, got a {inputs[0].dtype.name} tensor")
    shape = inputs[0].shape
    return [Spec(None if shape is None else (*shape, None), out_type)]


def _decode_raw_kernel(xp, data, out_type, little_endian):
    import numpy  # the bytes are a NumPy object array; frombuffer is NumPy's

    kind = numpy.dtype(out_type.name).newbyteorder("<" if little_endian else ">")
    items = numpy.asarray(data, dtype=object)
    rows = [numpy.frombuffer(item, dtype=kind) for item in items.reshape(-1)]
    lengths = {len(row) for row in rows}
    if len(lengths) > 1:
        raise InvalidArgumentError(f"decode_raw: the strings decode to different lengths {sorted(lengths)}; "
                                   "every element must have the same number of bytes")
    decoded = numpy.stack(rows) if rows else numpy.empty((0, 0), kind)
    native = decoded.astype(numpy.dtype(out_type.name), copy=False)
    return xp.asarray(native.reshape(*items.shape, -1))


defop("DecodeRaw", _decode_raw_infer, _decode_raw_kernel, gpu=False)


def decode_raw(bytes, out_type, little_endian=True, name=None) -> Tensor:  # noqa: A002 - TF's name
    """Reinterpret the bytes of each string as a vector of ``out_type`` (a new last dimension).

    >>> import dflow as tf
    >>> with tf.Graph().as_default():
    ...     tf.Session().run(tf.decode_raw(tf.constant([b"\x01\x02", b"\x03\x04"]), tf.uint8)).tolist()
    [[1, 2], [3, 4]]
    """
    return get_default_graph().create_op(
        "DecodeRaw", [bytes], {"out_type": dtypes.as_dtype(out_type), "little_endian": bool(little_endian)},
        name=name).outputs[0]


# ---- shuffling rows together (the input producers' epochs) ---------------------------------------
def _shuffle_rows_kernel(state, xp, *values, seed):
    """One random order of the first dimension, applied to every input (rows stay together)."""
    lengths = {int(v.shape[0]) for v in values if v.ndim > 0}
    if len(lengths) > 1:
        raise InvalidArgumentError(f"the tensors to shuffle together differ in length: {sorted(lengths)}")
    if not lengths:
        return values
    order = state.random_generator(seed).permutation(lengths.pop())
    return tuple(value[order] if value.dtype == object else xp.take(value, xp.asarray(order), axis=0)  # noqa: E721
                 for value in values)


defop("RandomShuffleRows", lambda inputs, seed: [spec._replace(value=None) for spec in inputs],
      _shuffle_rows_kernel, stateful=True, num_outputs=None, gpu=False)


def shuffle_together(values, seed=None, name=None) -> list[Tensor]:
    """``values`` with their first dimension in one random order, new on every run (the epochs of
    ``string_input_producer`` and ``slice_input_producer``; strings too, unlike ``tf.random_shuffle``)."""
    return list(get_default_graph().create_op("RandomShuffleRows", list(values), {"seed": op_seed(seed)},
                                              name=name or "RandomShuffle").outputs)


# ---- count_up_to: the epoch counter of the input producers --------------------------------------
def _count_up_to_kernel(state, xp, ref, limit, var):
    from ..errors import OutOfRangeError

    with state.updating(ref):  # several queue-runner threads count the same epochs
        value = state.read_variable(ref)
        if int(value) >= limit:
            raise OutOfRangeError(f"Reached limit of {limit}: the input's epochs are over")
        state.write_variable(ref, value + 1)
        return value


defop("CountUpTo", lambda inputs, limit, var: [Spec((), inputs[0].dtype)], _count_up_to_kernel,
      stateful=True, gpu=False, takes_refs=True)


def count_up_to(ref, limit, name=None) -> Tensor:
    """Increment the integer variable ``ref`` and return its old value; once it reaches ``limit``,
    raise ``OutOfRangeError`` instead."""
    from .state_ops import ref_of

    tensor, var = ref_of(ref)
    return get_default_graph().create_op("CountUpTo", [tensor], {"limit": int(limit), "var": var},
                                         name=name).outputs[0]


# ---- read_file --------------------------------------------------------------------------------
def _read_file_kernel(xp, filename):
    import numpy  # the result is bytes in a NumPy object array

    with _open(_as_str(filename)) as file:
        return numpy.array(file.read(), dtype=object)


defop("ReadFile", lambda inputs: [Spec((), dtypes.string)], _read_file_kernel, gpu=False)


def read_file(filename, name=None) -> Tensor:
    """The bytes of the file ``filename`` (a scalar string), read on every run.

    >>> import os, tempfile, dflow as tf
    >>> filename = os.path.join(tempfile.mkdtemp(), "hello.txt")
    >>> _ = open(filename, "wb").write(b"hello")
    >>> with tf.Graph().as_default():
    ...     tf.Session().run(tf.read_file(filename))
    b'hello'
    """
    return get_default_graph().create_op("ReadFile", [string_tensor(filename)], name=name).outputs[0]


def string_tensor(value) -> Tensor:
    """``value`` as a string tensor: a tensor passes through, bytes or text become a constant."""
    if isinstance(value, Tensor):
        return value
    import numpy  # a build-time constant of bytes

    from .array_ops import constant

    text = value.encode() if isinstance(value, str) else value
    return constant(numpy.array(text, dtype=object), dtype=dtypes.string)


# ---- decode_csv -------------------------------------------------------------------------------
_CSV_TYPES = (dtypes.float32, dtypes.float64, dtypes.int32, dtypes.int64, dtypes.string)


def _csv_default(default, index: int):
    """(dtype, value or None) of one column's ``record_defaults`` entry (``[1.0]``, ``[0]``, ``[""]``,
    ``[]`` for a required column of float32, or a constant tensor)."""
    if isinstance(default, Tensor):
        if default.op.type != "Const":
            raise ValueError(f"decode_csv: record_defaults[{index}] must be a constant, got {default.name}")
        values = list(default.op.attrs["value"].ravel())
        dtype = default.dtype
    else:
        values = list(default) if isinstance(default, list | tuple) else [default]
        sample = values[0] if values else 0.0
        dtype = (dtypes.string if isinstance(sample, str | bytes) else dtypes.int32 if isinstance(sample, int)
                 else dtypes.float32)
    if dtype not in _CSV_TYPES:
        raise ValueError(f"decode_csv: column {index} has dtype {dtype.name}; use one of "
                         f"{[t.name for t in _CSV_TYPES]}")
    value = values[0] if values else None
    if isinstance(value, str):
        value = value.encode()
    return dtype, value


def _decode_csv_kernel(xp, records, defaults, field_delim, use_quote_delim, na_value, select_cols):
    import csv

    import numpy  # the records are bytes in a NumPy object array

    items = numpy.asarray(records, dtype=object)
    columns = [[] for _ in defaults]
    quoting = csv.QUOTE_MINIMAL if use_quote_delim else csv.QUOTE_NONE
    for record in items.reshape(-1):
        text = record.decode() if isinstance(record, bytes) else str(record)
        (fields,) = list(csv.reader([text], delimiter=field_delim, quoting=quoting)) or [[""]]
        if select_cols is not None:
            fields = [fields[c] if c < len(fields) else "" for c in select_cols]
        if len(fields) != len(defaults):
            raise InvalidArgumentError(f"decode_csv: expected {len(defaults)} fields but have {len(fields)} "
                                       f"in record {text!r}")
        for column, field, (dtype, default) in zip(columns, fields, defaults):
            column.append(_csv_field(field, dtype, default, na_value, text))
    return tuple(_csv_column(xp, column, dtype, items.shape) for column, (dtype, _) in zip(columns, defaults))


def _csv_field(field: str, dtype, default, na_value: str, record: str):
    if field == "" or field == na_value:
        if default is None:
            raise InvalidArgumentError(f"decode_csv: a required field is missing in record {record!r} "
                                       "(its record_defaults entry is [])")
        return default
    try:
        if dtype == dtypes.string:
            return field.encode()
        return int(field) if dtype.is_integer else float(field)
    except ValueError:
        raise InvalidArgumentError(f"decode_csv: field {field!r} of record {record!r} is not a "
                                   f"{dtype.name}") from None


def _csv_column(xp, values: list, dtype, shape):
    import numpy

    if dtype == dtypes.string:
        return numpy.array(values, dtype=object).reshape(shape)
    return xp.reshape(xp.asarray(values, dtype=dtype.of(xp)), shape)


def _decode_csv_infer(inputs, defaults, **_):
    return [Spec(inputs[0].shape, dtype) for dtype, _ in defaults]


defop("DecodeCSV", _decode_csv_infer, _decode_csv_kernel, num_outputs=None, gpu=False)


def decode_csv(records, record_defaults, field_delim=",", use_quote_delim=True, name=None, na_value="",
               select_cols=None) -> list[Tensor]:
    """One tensor per CSV column of ``records`` (strings, e.g. TextLineReader's lines), typed by
    ``record_defaults`` (``[[0.0], [0], [""]]``; ``[]`` makes a column required).

    >>> import dflow as tf
    >>> with tf.Graph().as_default():
    ...     sepal_length, label = tf.decode_csv(tf.constant(["5.1,0", "7.0,"]), record_defaults=[[0.0], [2]])
    ...     [column.tolist() for column in tf.Session().run([sepal_length, label])]
    [[5.099999904632568, 7.0], [0, 2]]
    """
    defaults = [_csv_default(d, i) for i, d in enumerate(record_defaults)]
    columns = None if select_cols is None else [int(c) for c in select_cols]
    attrs = {"defaults": defaults, "field_delim": field_delim, "use_quote_delim": bool(use_quote_delim),
             "na_value": na_value, "select_cols": columns}
    return list(get_default_graph().create_op("DecodeCSV", [string_tensor(records)], attrs,
                                              name=name).outputs)
