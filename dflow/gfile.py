"""``tf.gfile`` (and ``tf.io.gfile``'s snake_case names): files on any filesystem fsspec knows.

A path is local (``/data/x``, ``logs/run1``) or an fsspec URL (``memory://``,
``s3://bucket/key``, ``gs://...`` with the matching fsspec package installed).
Errors are TF 1.x's: a missing file raises ``tf.errors.NotFoundError`` (also a
``FileNotFoundError``), a path that would be overwritten ``tf.errors.AlreadyExistsError``.

>>> import dflow as tf
>>> tf.gfile.MakeDirs("memory://gfile-doc/run")
>>> with tf.gfile.GFile("memory://gfile-doc/run/notes.txt", "w") as f:
...     _ = f.write("step 1\\nstep 2\\n")
>>> [line.strip() for line in tf.gfile.GFile("memory://gfile-doc/run/notes.txt")]
['step 1', 'step 2']
>>> tf.gfile.ListDirectory("memory://gfile-doc/run")
['notes.txt']
"""

from __future__ import annotations

import contextlib
import glob as _glob
import os
import posixpath
from collections.abc import Iterator
from typing import NamedTuple

from fsspec.core import url_to_fs

from .errors import AlreadyExistsError, FailedPreconditionError, NotFoundError

__all__ = ["GFile", "FastGFile", "Open", "Exists", "IsDirectory", "MakeDirs", "MkDir", "DeleteRecursively",
           "Remove", "ListDirectory", "Glob", "Copy", "Rename", "Walk", "Stat", "FileStatistics",
           "exists", "isdir", "makedirs", "mkdir", "rmtree", "remove", "listdir", "glob", "copy",
           "rename", "walk", "stat"]


def _filesystem(path) -> tuple:
    """(fsspec filesystem, the path as it knows it) for a str, bytes or os.PathLike path."""
    path = os.fsdecode(os.fspath(path))
    return url_to_fs(path)


def _is_local(path) -> bool:
    path = os.fsdecode(os.fspath(path))
    return "://" not in path or path.startswith("file://")


@contextlib.contextmanager
def _errors_named(path):
    """OS errors as TF's errors, naming the path."""
    try:
        yield
    except FileNotFoundError as error:
        if isinstance(error, NotFoundError):
            raise
        raise NotFoundError(f"{os.fsdecode(path)}: no such file or directory") from error
    except FileExistsError as error:
        raise AlreadyExistsError(f"{os.fsdecode(path)}: already exists") from error
    except (IsADirectoryError, NotADirectoryError) as error:
        raise FailedPreconditionError(f"{os.fsdecode(path)}: {error.strerror or error}") from error


class GFile:
    """A file, read and written as TF 1.x's ``tf.gfile.GFile(name, mode)``.

    Modes ``r``/``w``/``a`` read ``str`` and ``rb``/``wb``/``ab`` read ``bytes``; ``write``
    takes either in any mode (``str`` as UTF-8), as TF's does. Iterating gives lines.
    """

    def __init__(self, name, mode: str = "r"):
        if mode.replace("b", "").replace("+", "") not in ("r", "w", "a") or mode.count("b") > 1:
            raise ValueError(f"GFile mode must be r, rb, w, wb, a or ab, got {mode!r}")
        self.name, self.mode = os.fsdecode(os.fspath(name)), mode
        self._binary = "b" in mode
        filesystem, path = _filesystem(name)
        with _errors_named(self.name):
            if filesystem.isdir(path):
                raise IsADirectoryError(21, "is a directory")
            self._file = filesystem.open(path, mode.replace("b", "") + "b")

    def _text(self, data: bytes):
        return data if self._binary else data.decode("utf-8")

    def read(self, n: int = -1):
        return self._text(self._file.read(n))

    def readline(self):
        return self._text(self._file.readline())

    def readlines(self) -> list:
        return list(self)

    def write(self, data) -> None:
        self._file.write(data.encode("utf-8") if isinstance(data, str) else bytes(data))

    def seek(self, offset: int | None = None, whence: int = 0, position: int | None = None) -> int:
        return self._file.seek(position if offset is None else offset, whence)

    def tell(self) -> int:
        return self._file.tell()

    def size(self) -> int:
        return Stat(self.name).length if "r" in self.mode else self._file.tell()

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __iter__(self) -> Iterator:
        return self

    def __next__(self):
        line = self.readline()
        if not line:
            raise StopIteration
        return line

    next = __next__

    def __enter__(self) -> GFile:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


FastGFile = GFile
Open = GFile


class FileStatistics(NamedTuple):
    length: int
    mtime_nsec: int
    is_directory: bool


def Exists(filename) -> bool:  # noqa: N802 - TF 1.x's names
    filesystem, path = _filesystem(filename)
    return filesystem.exists(path)


def IsDirectory(dirname) -> bool:  # noqa: N802
    filesystem, path = _filesystem(dirname)
    return filesystem.isdir(path)


def MakeDirs(dirname) -> None:  # noqa: N802
    """Create ``dirname`` and its missing parents; nothing if it exists."""
    filesystem, path = _filesystem(dirname)
    with _errors_named(dirname):
        filesystem.makedirs(path, exist_ok=True)


def MkDir(dirname) -> None:  # noqa: N802
    """Create ``dirname``, whose parent must exist; AlreadyExistsError if it exists."""
    filesystem, path = _filesystem(dirname)
    with _errors_named(dirname):
        if filesystem.exists(path):
            raise FileExistsError(dirname)
        parent = filesystem._parent(path)
        if parent and not filesystem.isdir(parent):
            raise FileNotFoundError(parent)
        filesystem.mkdir(path, create_parents=False)


def DeleteRecursively(dirname) -> None:  # noqa: N802
    filesystem, path = _filesystem(dirname)
    with _errors_named(dirname):
        if not filesystem.exists(path):
            raise FileNotFoundError(dirname)
        filesystem.rm(path, recursive=True)


def Remove(filename) -> None:  # noqa: N802
    """Delete one file (a directory: DeleteRecursively)."""
    filesystem, path = _filesystem(filename)
    with _errors_named(filename):
        if filesystem.isdir(path):
            raise IsADirectoryError(21, "is a directory: use tf.gfile.DeleteRecursively")
        filesystem.rm_file(path)


def ListDirectory(dirname) -> list[str]:  # noqa: N802
    """The names (not paths) of the entries of ``dirname``."""
    filesystem, path = _filesystem(dirname)
    with _errors_named(dirname):
        if not filesystem.isdir(path):
            raise FileNotFoundError(dirname)
        entries = filesystem.ls(path, detail=False)
    return [posixpath.basename(entry.rstrip("/")) for entry in entries]


def Glob(filename) -> list[str]:  # noqa: N802
    """The paths matching the pattern, in the pattern's form (relative stays relative)."""
    if _is_local(filename):
        pattern = os.fsdecode(os.fspath(filename)).removeprefix("file://")
        return sorted(_glob.glob(pattern))
    filesystem, path = _filesystem(filename)
    return sorted(_in_the_form_of(filename, path, filesystem, match) for match in filesystem.glob(path))


def _in_the_form_of(url: str, path: str, filesystem, match: str) -> str:
    """``match`` (as fsspec knows it) written as ``url`` is: ``memory://x/a``, not ``memory:///x/a``."""
    protocol, rest = url.split("://", 1)
    if rest.lstrip("/") != path.lstrip("/"):  # the URL holds more than the path (a host): fsspec's form
        return filesystem.unstrip_protocol(match)
    return f"{protocol}://{match if rest.startswith('/') else match.lstrip('/')}"


def Copy(oldpath, newpath, overwrite: bool = False) -> None:  # noqa: N802
    """Copy a file, across filesystems too; AlreadyExistsError if ``newpath`` exists, unless ``overwrite``."""
    if not overwrite and Exists(newpath):
        raise AlreadyExistsError(f"{os.fsdecode(newpath)}: already exists (pass overwrite=True)")
    with GFile(oldpath, "rb") as source, GFile(newpath, "wb") as target:
        while chunk := source.read(1 << 24):
            target.write(chunk)


def Rename(oldname, newname, overwrite: bool = False) -> None:  # noqa: N802
    """Move a file or directory; AlreadyExistsError if ``newname`` exists and not ``overwrite``."""
    if not overwrite and Exists(newname):
        raise AlreadyExistsError(f"{os.fsdecode(newname)}: already exists (pass overwrite=True)")
    old_filesystem, old_path = _filesystem(oldname)
    new_filesystem, new_path = _filesystem(newname)
    with _errors_named(oldname):
        if not old_filesystem.exists(old_path):
            raise FileNotFoundError(oldname)
        if type(old_filesystem) is type(new_filesystem) and not old_filesystem.isdir(old_path):
            if new_filesystem.exists(new_path):
                new_filesystem.rm_file(new_path)
            old_filesystem.mv(old_path, new_path)
        elif type(old_filesystem) is type(new_filesystem):
            old_filesystem.mv(old_path, new_path, recursive=True)
        else:
            Copy(oldname, newname, overwrite=True)
            old_filesystem.rm_file(old_path)


def Stat(filename) -> FileStatistics:  # noqa: N802
    filesystem, path = _filesystem(filename)
    with _errors_named(filename):
        info = filesystem.info(path)
    try:
        mtime_nsec = int(filesystem.modified(path).timestamp() * 1e9)
    except (NotImplementedError, OSError, ValueError, AttributeError):  # stores that keep no time
        mtime_nsec = 0
    return FileStatistics(int(info.get("size") or 0), mtime_nsec, info.get("type") == "directory")


def Walk(top, in_order: bool = True) -> Iterator[tuple[str, list[str], list[str]]]:  # noqa: N802
    """``(directory, subdirectory names, file names)`` for ``top`` and each directory under it,
    parents first (``in_order``) or last; nothing if ``top`` does not exist."""
    top = os.fsdecode(os.fspath(top))
    filesystem, path = _filesystem(top)
    if not filesystem.isdir(path):
        return
    entries = filesystem.ls(path, detail=True)
    names = {"directory": [], "file": []}
    for entry in entries:
        kind = "directory" if entry["type"] == "directory" else "file"
        names[kind].append(posixpath.basename(entry["name"].rstrip("/")))
    subdirectories, files = sorted(names["directory"]), sorted(names["file"])
    if in_order:
        yield top, subdirectories, files
    for name in subdirectories:
        yield from Walk(posixpath.join(top, name), in_order)
    if not in_order:
        yield top, subdirectories, files


# tf.io.gfile's names (TF 1.13+ and TF 2)
exists, isdir, makedirs, mkdir, remove = Exists, IsDirectory, MakeDirs, MkDir, Remove
rmtree, listdir, glob, copy, rename, stat = DeleteRecursively, ListDirectory, Glob, Copy, Rename, Stat


def walk(top, topdown: bool = True, onerror=None) -> Iterator[tuple[str, list[str], list[str]]]:
    """``tf.io.gfile.walk``: :func:`Walk` with ``os.walk``'s argument names."""
    return Walk(top, in_order=topdown)
