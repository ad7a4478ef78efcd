"""Checked Zarr arrays: every chunk stored, and every chunk verified when it is read.

Datasets and checkpoints are Zarr v3 arrays. Three checks, one for each way a
chunk goes bad on disk:

- **A flipped byte or a truncated file**: the chunk's bytes end with their
  CRC-32C (the Zarr v3 spec's ``crc32c`` codec, last in the codec chain), so
  decoding fails before the decompressor sees damaged input.
- **A missing chunk**: every chunk is stored, all-zero ones too
  (``array.write_empty_chunks``), so a missing chunk file is damage, never a
  hole that reads as the fill value.
- **A chunk file in the wrong place** (two swapped, one copied over another, a
  stale one from an earlier write): each chunk's decoded content has a digest
  in the array's attributes (``dflow_chunk_crc32c``, one per chunk in C order of
  the chunk grid); a chunk whose content does not match its place's digest is
  damage. A missing chunk reads as the fill value and fails this check too.

The digests are the CRC-32C of the chunk's decoded C-order bytes, computed by
the library zarr's own ``crc32c`` codec needs (google-crc32c since zarr 3.1,
crc32c before it: the same values), ~30 GB/s on one core where ``zlib.crc32``
does 6: checking then costs a few percent of Zstd's decoding rather than ~20%
(``python -m dflow.bench.checked_reads`` measures it side by side).

:func:`write_checked_group` writes such arrays, :class:`ChunkReader` reads them.
"""

from __future__ import annotations

import asyncio
import contextlib

import numpy as np
import zarr

from .errors import DataLossError

__all__ = ["DIGESTS_ATTR", "checked_array_options", "writing_every_chunk", "content_digest", "chunk_digests",
           "write_checked_group", "ChunkReader"]

DIGESTS_ATTR = "dflow_chunk_crc32c"


def checked_array_options(dtype=np.uint8) -> dict:
    """``create_array`` arguments: Zstd level 3 (see :mod:`dflow.data.store`), then CRC-32C, and
    every chunk stored."""
    from zarr.codecs import BytesCodec, Crc32cCodec, ZstdCodec

    options = {"compressors": [ZstdCodec(level=3), Crc32cCodec()], "config": {"write_empty_chunks": True}}
    if np.dtype(dtype).kind in "biufc":  # else (strings) zarr's own serializer for them
        options["serializer"] = BytesCodec()
    return options


def writing_every_chunk():
    """Arrays opened inside store all-fill chunks too (the setting is read at opening; it is
    zarr's global configuration: open arrays for writing from one thread)."""
    return zarr.config.set({"array.write_empty_chunks": True})


def _crc32c_function():
    try:
        import google_crc32c

        return google_crc32c.value
    except ImportError:  # zarr before 3.1 brings crc32c instead (through numcodecs[crc32c])
        from crc32c import crc32c

        return crc32c


_crc32c = _crc32c_function()


def content_digest(block) -> int:
    """The digest of one chunk's decoded content: CRC-32C of its C-order bytes."""
    block = np.asarray(block)
    if block.dtype.hasobject:
        return int(_crc32c(b"\x00".join(str(item).encode() for item in block.ravel())))
    return int(_crc32c(np.ascontiguousarray(block).reshape(-1).view(np.uint8)))


def _grid(shape, chunks) -> tuple:
    return tuple(-(-size // chunk) for size, chunk in zip(shape, chunks))


def _region(index: int, shape, chunks) -> tuple:
    """The slices of chunk ``index`` (C order of the chunk grid), clipped to the array."""
    coords = np.unravel_index(index, _grid(shape, chunks)) if shape else ()
    return tuple(slice(c * chunk, min(size, (c + 1) * chunk))
                 for c, chunk, size in zip(coords, chunks, shape))


def chunk_digests(value, chunks) -> list[int]:
    """The digest of every chunk of ``value`` cut into ``chunks``, in C order of the chunk grid."""
    value = np.asarray(value)
    count = int(np.prod(_grid(value.shape, chunks)))
    return [content_digest(value[_region(i, value.shape, chunks)]) for i in range(count)]


# a chunk of a checked group's array: the whole array up to this size (a model's variables are
# one chunk each, read and written in one piece), rows of about this size past it
_GROUP_CHUNK_BYTES = 64 << 20


def write_checked_group(path: str, arrays: dict, attributes: dict) -> None:
    """A new Zarr group at ``path`` with ``attributes``, holding each of ``arrays`` (name ->
    value) as a checked array (:func:`checked_array_options`, every chunk's digest given when
    it is created): every array is written at once on zarr's event loop (a checkpoint of 30
    variables in half the time of one after the other, which waits for each array's files in
    turn).

    >>> import numpy as np, tempfile, zarr
    >>> path = tempfile.mkdtemp()
    >>> write_checked_group(path, {"w": np.ones((2, 3)), "step": np.int64(7)}, {"kind": "example"})
    >>> group = zarr.open_group(path, mode="r")
    >>> group.attrs["kind"], ChunkReader(group["step"], path, "step", "write it again").read().tolist()
    ('example', 7)
    """
    from zarr.api.asynchronous import open_group

    async def write_all():
        group = await open_group(path, mode="w", attributes=attributes)

        async def write_one(name, value):
            chunks = _group_chunks(value)
            array = await group.create_array(name, shape=value.shape, dtype=value.dtype, chunks=chunks,
                                             attributes={DIGESTS_ATTR: chunk_digests(value, chunks)},
                                             **checked_array_options(value.dtype))
            await array.setitem(..., value)

        await asyncio.gather(*(write_one(name, np.asarray(value)) for name, value in arrays.items()))

    _run_to_the_end(write_all())


_INTERRUPTED_WRITES_S = 60.0  # how long Ctrl-C waits for a group's writes before cancelling them


def _run_to_the_end(coroutine) -> None:
    """``coroutine`` on zarr's event loop, ended before this returns or raises, also when Ctrl-C
    (or SIGTERM's :class:`~dflow.train.program.Terminated`) stops the wait: the writes then
    finish first (a second Ctrl-C, or the deadline, cancels them). zarr's ``sync`` raises at
    once and leaves them running: they wrote into the directory the caller was removing, and
    went on at the interpreter's exit ("cannot schedule new futures after shutdown")."""
    from zarr.core.sync import _get_loop  # the loop zarr's sync runs on (zarr 3.0 to 3.1 name it so)

    future = asyncio.run_coroutine_threadsafe(coroutine, _get_loop())
    try:
        future.result()
    except BaseException:
        if not future.done():
            try:
                future.result(timeout=_INTERRUPTED_WRITES_S)
            except BaseException:
                future.cancel()
        raise


def _group_chunks(value: np.ndarray) -> tuple:
    if value.ndim == 0:
        return ()
    row_bytes = max(1, value.itemsize * int(np.prod(value.shape[1:])))
    rows = max(1, min(value.shape[0], _GROUP_CHUNK_BYTES // row_bytes))
    return (rows, *(max(1, size) for size in value.shape[1:]))


class ChunkReader:
    """Reads an array chunk by chunk or whole, each chunk checked (see the module doc).

    ``where`` names the store (its path), ``name`` the array in it (a ``noun``: an array, a
    variable) and ``remedy`` what to do about damage; they make up the error. An array without
    digests (written before dflow checked its chunks) is read unchecked: ``checked`` is False.
    """

    def __init__(self, array: zarr.Array, where: str, name: str, remedy: str, noun: str = "array"):
        self.array, self.where, self.name, self.remedy, self.noun = array, where, name, remedy, noun
        digests = array.attrs.get(DIGESTS_ATTR)
        self.digests = None if digests is None else list(digests)
        self.shape, self.chunks = tuple(array.shape), tuple(array.chunks)
        self.num_chunks = int(np.prod(_grid(self.shape, self.chunks)))
        self._fill_digests: dict = {}
        if self.digests is not None and len(self.digests) != self.num_chunks:
            raise DataLossError(f"{noun} {name} in {where} has {self.num_chunks} chunks but digests for "
                                f"{len(self.digests)}: its metadata was changed after it was written; "
                                f"{remedy}")

    @property
    def checked(self) -> bool:
        return self.digests is not None

    def read_chunk(self, index: int) -> np.ndarray:
        """Chunk ``index`` (C order of the chunk grid; along axis 0, the chunk number), checked."""
        region = _region(index, self.shape, self.chunks)
        try:
            block = self.array[region]
        except Exception as error:
            if "checksum" in str(error):  # the crc32c codec's words
                raise self._damage(index, "is corrupt: its bytes do not match their CRC-32C (a byte "
                                          "changed, or the file cut short)") from error
            raise self._damage(index, "is corrupt or unreadable", error) from error
        self._verify(index, block)
        return block

    def read(self) -> np.ndarray:
        """The whole array, every chunk checked."""
        try:
            value = np.asarray(self.array[...])
        except Exception:  # find which chunk: read them one by one
            for index in range(self.num_chunks):
                self.read_chunk(index)
            raise
        for index in range(self.num_chunks if self.checked else 0):
            self._verify(index, value[_region(index, self.shape, self.chunks)])
        return value

    def _verify(self, index: int, block: np.ndarray) -> None:
        if self.digests is None:
            return
        digest = content_digest(block)
        if digest != self.digests[index]:
            problem = ("is missing" if not self._chunk_exists(index) else
                       "is corrupt: it holds other data than was written there (a chunk file swapped, "
                       "copied over or left from an earlier write)")
            raise self._damage(index, problem)
        if digest == self._fill_digest(block.shape) and not self._chunk_exists(index):
            raise self._damage(index, "is missing")  # an all-fill chunk reads the same without its file

    def _fill_digest(self, shape) -> int:
        if shape not in self._fill_digests:
            fill = np.full(shape, self.array.fill_value, dtype=self.array.dtype)
            self._fill_digests[shape] = content_digest(fill)
        return self._fill_digests[shape]

    def _chunk_key(self, index: int) -> str:
        coords = np.unravel_index(index, _grid(self.shape, self.chunks)) if self.shape else ()
        key = self.array.metadata.encode_chunk_key(tuple(int(c) for c in coords))
        return f"{self.array.store_path.path}/{key}".lstrip("/")

    def _chunk_exists(self, index: int) -> bool:
        from zarr.core.sync import sync

        with contextlib.suppress(Exception):  # a store that cannot say: assume it is there
            return bool(sync(self.array.store_path.store.exists(self._chunk_key(index))))
        return True

    def _damage(self, index: int, problem: str, cause: Exception | None = None) -> DataLossError:
        because = f" ({type(cause).__name__}: {cause})" if cause is not None else ""
        return DataLossError(f"chunk {index} of {self.noun} {self.name} in {self.where} (file "
                             f"{self._chunk_key(index)}) {problem}{because}; {self.remedy}")
