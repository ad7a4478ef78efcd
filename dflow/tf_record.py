"""TFRecord files (``tf.python_io``): TensorFlow's record framing, written and read with checksums.

A TFRecord file is a sequence of records, each::

    uint64 length | uint32 masked CRC-32C of length | length bytes of data | uint32 masked CRC-32C of data

(little-endian; the mask rotates the CRC right by 15 bits and adds 0xa282ead8),
optionally inside a ZLIB or GZIP stream. Every record read is checked against
both checksums: a damaged file raises ``tf.errors.DataLossError`` naming the
record's offset, rather than training on damaged bytes. ``tf.data.TFRecordDataset``
and ``tf.TFRecordReader`` read through :func:`read_records`; files are opened
with fsspec (local paths, ``memory://``, ``s3://``...).

>>> import os, tempfile, dflow as tf
>>> path = os.path.join(tempfile.mkdtemp(), "data.tfrecord")
>>> with tf.python_io.TFRecordWriter(path) as writer:
...     writer.write(b"first")
...     writer.write(b"second")
>>> list(tf.python_io.tf_record_iterator(path))
[b'first', b'second']
"""

from __future__ import annotations

import gzip
import struct
import zlib
from collections.abc import Iterator

import google_crc32c

from .errors import DataLossError

__all__ = ["TFRecordCompressionType", "TFRecordOptions", "TFRecordWriter", "tf_record_iterator",
           "read_records", "read_record_at", "record_offsets", "compression_of"]

_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")
_MASK_DELTA = 0xA282EAD8
_GZIP_MAGIC = b"\x1f\x8b"


def masked_crc(data: bytes) -> int:
    """TFRecord's checksum: CRC-32C, rotated right by 15 bits, plus a constant (mod 2^32)."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


class TFRecordCompressionType:
    """The compression of a TFRecord file: ``NONE``, ``ZLIB`` or ``GZIP``."""

    NONE = 0
    ZLIB = 1
    GZIP = 2


_NAMES = {TFRecordCompressionType.NONE: "", TFRecordCompressionType.ZLIB: "ZLIB",
          TFRecordCompressionType.GZIP: "GZIP"}


class TFRecordOptions:
    """How a TFRecord file is compressed: ``TFRecordOptions(TFRecordCompressionType.GZIP)`` or ``"GZIP"``.

    dflow writes ZLIB and GZIP at zlib's ``compression_level`` (default 6, TF's too); TF's
    buffer-size and window options change only how the stream is made, not what it holds,
    and are accepted and not used.
    """

    def __init__(self, compression_type=None, flush_mode=None, input_buffer_size=None,
                 output_buffer_size=None, window_bits=None, compression_level=None,
                 compression_method=None, mem_level=None, compression_strategy=None):
        self.compression_type = compression_of(compression_type)
        self.compression_level = 6 if compression_level is None or compression_level < 0 \
            else compression_level

    @classmethod
    def get_compression_type_string(cls, options) -> str:
        """``""``, ``"ZLIB"`` or ``"GZIP"`` for options, a compression type or its name."""
        return compression_of(options)


def compression_of(options) -> str:
    """The compression name (``""``, ``"ZLIB"``, ``"GZIP"``) of TFRecordOptions, a type or a name."""
    if options is None:
        return ""
    if isinstance(options, TFRecordOptions):
        return options.compression_type
    if isinstance(options, bytes):
        options = options.decode()
    if isinstance(options, str) and options.upper() in ("", "ZLIB", "GZIP"):
        return options.upper()
    if isinstance(options, int) and options in _NAMES:
        return _NAMES[options]
    raise ValueError(f"compression_type must be None, '', 'ZLIB' or 'GZIP' (or a TFRecordCompressionType), "
                     f"got {options!r}")


class TFRecordWriter:
    """Writes records (``bytes``, e.g. ``example.SerializeToString()``) to a TFRecord file.

    ``tf.python_io.TFRecordWriter(path, options=None)``; a context manager that closes the
    file. A record is in the file once the writer is flushed or closed.
    """

    def __init__(self, path, options=None):
        import fsspec

        self.path = str(path)
        compression = compression_of(options)
        level = options.compression_level if isinstance(options, TFRecordOptions) else 6
        self._file = fsspec.open(self.path, "wb").open()
        self._zlib = zlib.compressobj(level) if compression == "ZLIB" else None
        self._stream = gzip.GzipFile(fileobj=self._file, mode="wb", compresslevel=level) \
            if compression == "GZIP" else self._file

    def write(self, record) -> None:
        """Appends one record."""
        if self._file is None:
            raise ValueError(f"TFRecordWriter for {self.path} is closed: this record was not written")
        data = bytes(record.encode() if isinstance(record, str) else record)
        length = _LENGTH.pack(len(data))
        framed = b"".join((length, _CRC.pack(masked_crc(length)), data, _CRC.pack(masked_crc(data))))
        self._stream.write(self._zlib.compress(framed) if self._zlib else framed)

    def flush(self) -> None:
        if self._zlib:
            self._stream.write(self._zlib.flush(zlib.Z_SYNC_FLUSH))
        self._stream.flush()

    def close(self) -> None:
        if self._file is None:
            return
        if self._zlib:
            self._stream.write(self._zlib.flush())
        if self._stream is not self._file:
            self._stream.close()
        self._file.close()
        self._file = None

    def __enter__(self) -> TFRecordWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _ZlibReader:
    """A readable stream of a zlib stream's decompressed bytes."""

    def __init__(self, file):
        self._file, self._inflate, self._buffer = file, zlib.decompressobj(), b""

    def read(self, size: int) -> bytes:
        while len(self._buffer) < size and not self._inflate.eof:
            chunk = self._file.read(1 << 16)
            if not chunk:
                break
            self._buffer += self._inflate.decompress(chunk)
        data, self._buffer = self._buffer[:size], self._buffer[size:]
        return data


def read_records(file, name: str, compression: str = "") -> Iterator[tuple[int, bytes]]:
    """Each record of the open binary ``file`` (called ``name`` in errors) with its offset in the
    uncompressed stream; a checksum that does not match or a cut-off record is a DataLossError."""
    stream = gzip.GzipFile(fileobj=file) if compression == "GZIP" else \
        _ZlibReader(file) if compression == "ZLIB" else file
    offset = 0
    try:
        while (record := _next_record(stream, file, name, compression, offset)) is not None:
            yield offset, record
            offset += 16 + len(record)
    except (OSError, EOFError, zlib.error) as error:  # a damaged or cut-off GZIP or ZLIB stream
        raise DataLossError(f"{name}: the {compression} stream is damaged near record offset {offset} "
                            f"({error}): is the file complete, and is it {compression}-compressed?") from None


def read_record_at(file, name: str, offset: int) -> bytes:
    """The record at byte ``offset`` of the open, uncompressed TFRecord ``file``, checked."""
    file.seek(offset)
    record = _next_record(file, file, name, "", offset)
    if record is None:
        raise DataLossError(f"{name}: no record at offset {offset} (the file ends there): has it "
                            "changed since it was indexed?")
    return record


def record_offsets(file, name: str) -> list[int]:
    """The offset of every record of the open, uncompressed TFRecord ``file``, from the records'
    headers alone (their data is skipped, not read or checked: :func:`read_record_at` checks it)."""
    size = file.seek(0, 2)
    offsets, offset = [], 0
    while offset < size:
        file.seek(offset)
        header = file.read(12)
        if len(header) < 12 or masked_crc(header[:8]) != _CRC.unpack(header[8:])[0]:
            raise _damaged(file, name, "", offset, "cut off in its header" if len(header) < 12 else
                           "its length's checksum does not match")
        end = offset + 16 + _LENGTH.unpack(header[:8])[0]
        if end > size:
            raise _damaged(file, name, "", offset, "cut off")
        offsets.append(offset)
        offset = end
    return offsets


def _next_record(stream, file, name: str, compression: str, offset: int) -> bytes | None:
    """The record ``stream`` is at (``offset`` in it), checked; None at its end."""
    header = stream.read(12)
    if not header:
        return None
    if len(header) < 12:
        raise _damaged(file, name, compression, offset, "cut off in its header")
    length_bytes, length_crc = header[:8], _CRC.unpack(header[8:])[0]
    if masked_crc(length_bytes) != length_crc:
        raise _damaged(file, name, compression, offset, "its length's checksum does not match")
    (length,) = _LENGTH.unpack(length_bytes)
    data = stream.read(length)
    data_crc = stream.read(4)
    if len(data) < length or len(data_crc) < 4:
        raise _damaged(file, name, compression, offset, "cut off")
    if masked_crc(data) != _CRC.unpack(data_crc)[0]:
        raise _damaged(file, name, compression, offset, "its data's checksum does not match")
    return data


def _damaged(file, name: str, compression: str, offset: int, what: str) -> DataLossError:
    hint = "the file is damaged or not a TFRecord file"
    if not compression and offset == 0:
        file.seek(0)
        if file.read(2) == _GZIP_MAGIC:
            hint = "the file is GZIP-compressed: pass compression_type='GZIP'"
    return DataLossError(f"{name}: corrupted record at offset {offset} ({what}): {hint}; no record from "
                         "there on is read")


def tf_record_iterator(path, options=None) -> Iterator[bytes]:
    """Each record of the TFRecord file at ``path``, as ``bytes``, checked against its checksums."""
    import fsspec

    with fsspec.open(str(path), "rb") as file:
        for _, record in read_records(file, str(path), compression_of(options)):
            yield record
