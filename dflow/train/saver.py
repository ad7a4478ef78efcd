"""Checkpoints: :class:`Saver` writes variables to a Zarr v3 group, atomically.

A checkpoint ``model.ckpt-100`` is a directory holding one Zarr group::

    model.ckpt-100/zarr.json      attrs: {"dflow_checkpoint": 1, "global_step": 100,
                                          "variables": {"w/Adam": "w%2FAdam", ...}}
    model.ckpt-100/w%2FAdam/...   one array per variable

Each array is keyed by the variable's shared name with ``/`` percent-escaped
(``urllib.parse.quote(name, safe="")``). Nested groups cannot work: TF names a
variable ``w`` and its slot ``w/Adam``, so ``w`` would be an array and a group.
The ``variables`` attribute maps names to keys, so readers need not unescape.

Writes are atomic. The group is written into a sibling
``<path>.tmp-<pid>@<host>-<random>`` directory, flushed, completed by the marker
``dflow_checkpoint.json`` (written last: the variables and the size of every
chunk file), and renamed into place. The JSON file ``checkpoint`` beside the
checkpoints names the latest and the kept ones (also written to a temp file,
then ``os.replace``). A save killed midway leaves only a temp-named directory:
never listed, never chosen, and removed by the next save into that directory
(unless its writer is still alive).

Every chunk is checked (:mod:`dflow.checked_arrays`: CRC-32C codec, every chunk
stored, per-chunk digests): :meth:`Saver.restore` fails on a flipped, truncated,
missing or swapped chunk with a ``DataLossError`` naming the checkpoint, the
variable and the chunk file, and :func:`latest_checkpoint` returns the newest
kept checkpoint that is complete and verified, warning about each damaged one it
passes over. A checkpoint written before dflow checked chunks still restores,
with a warning.

``max_to_keep`` counts the checkpoints already in the directory too: at its first
save there, a Saver adopts the complete checkpoints of its prefix (those the
``checkpoint`` file lists, and ``<prefix>-<step>`` ones it lost track of; TF's
``recover_last_checkpoints``), oldest first, so a rerun of a training job keeps
``max_to_keep`` in all. Other prefixes' checkpoints are left alone.

>>> import os, tempfile, dflow as tf
>>> run = tempfile.mkdtemp()
>>> with tf.Graph().as_default():
...     w = tf.Variable([1.0, 2.0], name="w")
...     saver = tf.train.Saver()
...     with tf.Session() as sess:
...         _ = sess.run(tf.global_variables_initializer())
...         path = saver.save(sess, os.path.join(run, "model.ckpt"), global_step=100)
...         _ = sess.run(tf.assign(w, [0.0, 0.0]))
...         saver.restore(sess, tf.train.latest_checkpoint(run))
...         sess.run(w).tolist(), os.path.basename(path)
([1.0, 2.0], 'model.ckpt-100')
"""

from __future__ import annotations

import contextlib
import json
import logging
import numbers
import os
import re
import secrets
import shutil
import socket
import time
from typing import NamedTuple
from urllib.parse import quote

import numpy as np
import zarr

from ..checked_arrays import ChunkReader, write_checked_group
from ..errors import DataLossError, InvalidArgumentError, NotFoundError
from ..graph import get_default_graph
from ..graph_io import import_graph_def, meta_graph_def, read_meta_graph, scope_prefix
from ..ops import array_ops, state_ops
from ..processes import alive as process_alive
from ..variables import Variable, global_variables, group, local_variables
from . import training_util

__all__ = ["Saver", "latest_checkpoint", "get_checkpoint_state", "checkpoint_exists", "write_text_atomically",
           "CheckpointState", "export_meta_graph", "import_meta_graph"]

log = logging.getLogger("dflow")

_STATE_FILE = "checkpoint"
_TEMP_MARK = ".tmp-"  # in every name this module writes before renaming into place
_MARKER = "dflow_checkpoint.json"  # the completion marker: written last, inside the checkpoint
_FORMAT = 2  # 1: before checked chunks and the marker (read with a warning)
# a temp name's end: `.tmp-<pid>@<host>-<hex>` while written (`.tmp-<hex>` by older dflows), or
# `.tmp-old-<hex>` / `.tmp-deleted-<hex>` once renamed aside to be removed
_WRITTEN = re.compile(r"\.tmp-(?:(?P<pid>\d+)@(?P<host>[\w.-]*)-)?[0-9a-f]{8}$")
_ASIDE = re.compile(r"\.tmp-(?:old|deleted)-[0-9a-f]{8}$")
_FOREIGN_STALE_SECONDS = 24 * 3600  # another machine's temp dir: whether its writer lives is unknown
_writing: set = set()  # temp paths this process is writing now
_verified: dict = {}  # checkpoint path -> its marker's (inode, mtime) when its content was verified
_warned_unchecked: set = set()


class CheckpointState(NamedTuple):
    """What the ``checkpoint`` file says: the latest checkpoint and all kept ones."""

    model_checkpoint_path: str
    all_model_checkpoint_paths: list[str]


class Saver:
    """Saves and restores variables; builds its restore ops once, at construction.

    Parameters
    ----------
    var_list : list of Variable or dict of name -> Variable, optional
        What to save; defaults to all global variables. A list saves each
        variable under its shared name.
    reshape : bool
        Restore a saved array of another shape with as many elements (TF's ``reshape``).
    max_to_keep : int, optional
        Checkpoints kept by :meth:`save`; older ones are deleted. ``None`` or 0 keeps all.
    keep_checkpoint_every_n_hours : float
        Beside ``max_to_keep``'s: keep one checkpoint of each such span for good.
    name : str, optional
        Name scope of the restore ops (default ``save``).
    saver_def : dict, optional
        :attr:`saver_def` of a saver in this graph (a meta graph's): restores through its ops.
    allow_empty : bool
        With no variables, save and restore nothing, instead of raising.
    pad_step_number : bool
        Name checkpoints ``<path>-00000100``, the step in 8 digits.

    ``sharded``, ``restore_sequentially``, ``builder`` (None), ``defer_build``,
    ``write_version``, ``save_relative_paths`` and ``filename`` are TF's, accepted for its
    scripts: a checkpoint is a Zarr group whatever they say, and the ``checkpoint`` file
    names checkpoints relative to its directory already.

    :meth:`save` writes ``<checkpoint>.meta`` beside each checkpoint, the graph to run again
    (:func:`import_meta_graph`).

    Example
    -------
    >>> import os, tempfile, dflow as tf
    >>> ckpt = tempfile.mkdtemp()
    >>> with tf.Graph().as_default(), tf.Session() as sess:
    ...     step = tf.train.get_or_create_global_step()
    ...     saver = tf.train.Saver(max_to_keep=3)
    ...     sess.run(tf.global_variables_initializer())
    ...     path = saver.save(sess, os.path.join(ckpt, "model"), global_step=sess.run(tf.assign(step, 1000)))
    >>> os.path.basename(path), sorted(os.listdir(ckpt))
    ('model-1000', ['checkpoint', 'model-1000', 'model-1000.meta'])
    """

    def __init__(self, var_list=None, reshape: bool = False, sharded: bool = False,
                 max_to_keep: int | None = 5, keep_checkpoint_every_n_hours: float = 10000.0,
                 name: str | None = None, restore_sequentially: bool = False, saver_def: dict | None = None,
                 builder=None, defer_build: bool = False, allow_empty: bool = False, write_version=None,
                 pad_step_number: bool = False, save_relative_paths: bool = False, filename=None):
        if builder is not None:
            raise ValueError("tf.train.Saver(builder=...): dflow's checkpoints have one writer; "
                             "leave it None")
        self._reshape, self._pad_step_number = reshape, pad_step_number
        self._max_to_keep = max_to_keep
        self._keep_every = keep_checkpoint_every_n_hours * 3600.0
        self._next_kept_for_good = time.time() + self._keep_every
        self._last_checkpoints: list[str] = []
        self._adopted: set = set()  # directories whose existing checkpoints this saver counts
        self._meta_graph: tuple | None = None  # (the graph's version, its meta graph's text) of the last save
        self._placeholders: dict = {}
        self._restore_op = None
        if saver_def is not None:
            self._bind(saver_def)
            return
        self._variables = _by_name(global_variables() if var_list is None else var_list)
        if not self._variables:
            if allow_empty:
                return
            raise ValueError("No variables to save")
        graph = self._graph
        with graph.as_default(), graph.name_scope(name or "save"):
            assigns = []
            for var_name, var in self._variables.items():
                feed = array_ops.placeholder(var.dtype, var.shape.dims, name="restore_value")
                self._placeholders[var_name] = feed
                assigns.append(state_ops.assign(var, feed))
            self._restore_op = group(*assigns, name="restore_all")

    @property
    def _graph(self):
        return next(iter(self._variables.values())).graph

    @property
    def saver_def(self) -> dict:
        """What a meta graph keeps of this saver: each saved name's variable, restore value (a
        placeholder) and the op that assigns them all, by name in the graph."""
        return {"variables": {name: var.op.name for name, var in self._variables.items()},
                "restore_values": {name: feed.name for name, feed in self._placeholders.items()},
                "restore_op": None if self._restore_op is None else self._restore_op.name,
                "max_to_keep": self._max_to_keep}

    def _bind(self, saver_def: dict) -> None:
        """Restore through the ops :attr:`saver_def` names, in the default graph."""
        graph = get_default_graph()
        with graph.as_default():
            by_op = {v.op.name: v for v in (*global_variables(), *local_variables())}
        missing = sorted(set(saver_def["variables"].values()) - by_op.keys())
        if missing:
            raise ValueError(f"the saver's variables {_listing(missing, 5)} are not variables of this graph "
                             "(a meta graph's collections list them: was it exported with collection_list?)")
        self._variables = {name: by_op[op] for name, op in saver_def["variables"].items()}
        self._placeholders = {name: graph.get_tensor_by_name(tensor)
                              for name, tensor in saver_def["restore_values"].items()}
        if saver_def["restore_op"] is not None:
            self._restore_op = graph.get_operation_by_name(saver_def["restore_op"])

    @property
    def last_checkpoints(self) -> list[str]:
        """The kept checkpoints this saver wrote, oldest first."""
        return list(self._last_checkpoints)

    def recover_last_checkpoints(self, checkpoint_paths) -> None:
        """Adopt existing checkpoints (e.g. after a restart) so ``max_to_keep`` counts them."""
        self._last_checkpoints = [p for p in checkpoint_paths if checkpoint_exists(p)]

    def save(self, sess, save_path: str, global_step=None, latest_filename: str | None = None,
             meta_graph_suffix: str = "meta", write_meta_graph: bool = True, write_state: bool = True,
             strip_default_attrs: bool = False, save_debug_info: bool = False) -> str | None:
        """Write the variables' values to ``save_path[-global_step]`` (its directory made where
        missing), and the graph to that path ``.meta`` (with ``write_meta_graph``); return the
        checkpoint's path (None for an empty saver).

        ``global_step`` is an int or a tensor/variable read in ``sess``.
        """
        if not self._variables:
            return None
        path = save_path
        step = None
        if global_step is not None:
            step = (int(global_step) if isinstance(global_step, numbers.Integral)
                    else training_util.global_step(sess, global_step))
            path = f"{save_path}-{step:08d}" if self._pad_step_number else f"{save_path}-{step}"
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)  # as TF's save op makes it
        _remove_leftovers(directory)
        if write_state:
            self._adopt_existing(save_path, latest_filename)
        names = list(self._variables)
        values = sess.run([self._variables[n] for n in names])
        _write_checkpoint(path, dict(zip(names, values)), global_step=step)
        if write_meta_graph:
            self._write_meta_graph(f"{path}.{meta_graph_suffix}")
        if write_state:
            expired = self._record(path)
            _write_state(directory, self._last_checkpoints, latest_filename)
            for old in expired:  # only once the state file no longer names them
                _remove(old)
                _remove(f"{old}.{meta_graph_suffix}")
        return path

    def _write_meta_graph(self, path: str) -> None:
        """The graph as :meth:`export_meta_graph` writes it; its text made again only when the
        graph has grown (a saver saving every step)."""
        graph = self._graph
        version = (graph.version,  # (new ops; collections may grow without one)
                   tuple((key, len(graph.get_collection(key))) for key in graph.get_all_collection_keys()))
        if self._meta_graph is None or self._meta_graph[0] != version:
            self._meta_graph = (version, json.dumps(meta_graph_def(graph, self.saver_def)))
        write_text_atomically(path, self._meta_graph[1])

    def export_meta_graph(self, filename: str | None = None, collection_list=None, as_text: bool = False,
                          export_scope: str | None = None, clear_devices: bool = False,
                          clear_extraneous_savers: bool = False, strip_default_attrs: bool = False,
                          save_debug_info: bool = False) -> dict:
        """This saver's graph, collections and :attr:`saver_def` (:func:`export_meta_graph`)."""
        return export_meta_graph(filename, saver_def=self.saver_def, collection_list=collection_list,
                                 graph=self._graph, export_scope=export_scope, clear_devices=clear_devices)

    def restore(self, sess, save_path: str) -> None:
        """Load every saved variable from checkpoint ``save_path`` (checked before any is set)."""
        if save_path is None:
            raise ValueError("Can't load save_path when it is None.")
        if not self._variables:
            return
        root = _open_checkpoint(save_path)
        keys = root.attrs["variables"]
        feeds = {}
        for name, var in self._variables.items():
            if name not in keys:
                raise NotFoundError(f"Key {name} not found in checkpoint {save_path}; "
                                    f"it holds: {_listing(keys)}")
            _check_fits(root[keys[name]], var, name, save_path, self._reshape)
        for name, var in self._variables.items():  # every variable checked before any is set
            value = _chunk_reader(root, save_path, name, keys[name]).read()
            feeds[self._placeholders[name]] = value.reshape(var.shape.as_list()) if self._reshape else value
        sess.run(self._restore_op, feeds)

    def _adopt_existing(self, save_path: str, latest_filename: str | None) -> None:
        """At the first save into a directory: count its complete checkpoints of this prefix (those
        its state file lists, and ``<prefix>-<step>`` ones it lost track of) among the kept ones,
        oldest first."""
        directory = os.path.dirname(os.path.abspath(save_path))
        if (directory, latest_filename) in self._adopted:
            return
        self._adopted.add((directory, latest_filename))
        state = get_checkpoint_state(directory, latest_filename)
        ours = re.compile(re.escape(os.path.basename(save_path)) + r"(-\d+)?")  # not other savers' prefixes
        names = [os.path.basename(p) for p in (state.all_model_checkpoint_paths if state else [])
                 if os.path.dirname(os.path.abspath(p)) == directory]
        names += sorted(n for n in os.listdir(directory) if ours.fullmatch(n))
        names = [n for n in names if ours.fullmatch(n)]
        kept = {os.path.abspath(p) for p in self._last_checkpoints}
        found = [os.path.join(os.path.dirname(save_path), n) for n in dict.fromkeys(names)]
        found = [p for p in found if os.path.abspath(p) not in kept and checkpoint_exists(p)]
        self._last_checkpoints = sorted(found, key=_completed_at) + self._last_checkpoints

    def _record(self, path: str) -> list[str]:
        """Append ``path`` to the kept checkpoints; return those beyond ``max_to_keep``."""
        self._last_checkpoints = [p for p in self._last_checkpoints
                                  if os.path.abspath(p) != os.path.abspath(path)]
        self._last_checkpoints.append(path)
        excess = max(0, len(self._last_checkpoints) - (self._max_to_keep or len(self._last_checkpoints)))
        expired, self._last_checkpoints = (self._last_checkpoints[:excess],
                                           self._last_checkpoints[excess:])
        for old in list(expired):  # (keep_checkpoint_every_n_hours: one of each span stays for good)
            if _completed_at(old) >= self._next_kept_for_good:
                expired.remove(old)
                self._next_kept_for_good += self._keep_every
        return expired


def _by_name(var_list) -> dict[str, Variable]:
    if isinstance(var_list, dict):
        items = list(var_list.items())
    else:
        items = [(v.shared_name, v) for v in var_list]
    named: dict[str, Variable] = {}
    for name, var in items:
        if not isinstance(var, Variable):
            raise TypeError(f"Saver saves tf.Variables, got {var!r} for {name!r}")
        if name in named:
            raise ValueError(f"At least two variables have the same name: {name}")
        named[name] = var
    return named


def _check_fits(array, var: Variable, name: str, save_path: str, reshape: bool = False) -> None:
    shape, dtype = tuple(array.shape), np.dtype(array.dtype)
    fits = var.shape.is_compatible_with(shape) or (
        reshape and var.shape.is_fully_defined() and var.shape.num_elements() == int(np.prod(shape)))
    if not fits or dtype != np.dtype(var.dtype.as_numpy_dtype):
        raise InvalidArgumentError(
            f"cannot restore {name} from {save_path}: the checkpoint holds {dtype.name} of "
            f"shape {shape}, the variable is {var.dtype.name} of shape {var.shape}")


def _listing(names, limit: int = 30) -> str:
    names = sorted(names)
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


# ---- meta graphs ---------------------------------------------------------------------------------
def export_meta_graph(filename: str | None = None, meta_info_def=None, graph_def=None,
                      saver_def: dict | None = None, collection_list=None, as_text: bool = False, graph=None,
                      export_scope: str | None = None, clear_devices: bool = False,
                      clear_extraneous_savers: bool = False,
                      strip_default_attrs: bool = False, save_debug_info: bool = False, **kwargs) -> dict:
    """The graph (the default one), its collections (those of ``collection_list``) and a saver's
    :attr:`~Saver.saver_def`, as plain data; written to ``filename`` as JSON where one is given.
    dflow's form of TF's MetaGraphDef: :func:`import_meta_graph` reads it back (it is text
    whatever ``as_text`` says; a TensorFlow ``.meta`` protobuf is not read).

    >>> import dflow as tf
    >>> with tf.Graph().as_default():
    ...     w = tf.Variable([1.0, 2.0], name="w")
    ...     meta = tf.train.export_meta_graph(saver_def=tf.train.Saver().saver_def)
    >>> with tf.Graph().as_default():
    ...     saver = tf.train.import_meta_graph(meta)
    ...     sorted(saver.saver_def["variables"]), tf.global_variables()[0].name
    (['w'], 'w:0')
    """
    if export_scope:
        raise ValueError(f"export_meta_graph(export_scope={export_scope!r}): dflow exports the whole graph; "
                         "import it with import_scope to put it under a scope")
    if graph_def is not None:
        raise ValueError("export_meta_graph(graph_def=...): give the graph itself (graph=)")
    meta = meta_graph_def(graph or get_default_graph(), saver_def, collection_list, clear_devices)
    if filename is not None:
        write_text_atomically(filename, json.dumps(meta))
    return meta


def import_meta_graph(meta_graph_or_file, clear_devices: bool = False, import_scope: str | None = None,
                      **kwargs) -> Saver | None:
    """Rebuild a meta graph (:func:`export_meta_graph`'s, or the ``.meta`` file :meth:`Saver.save`
    writes) into the default graph, with its collections; return the saver that restores its
    variables (one over them all where it kept none; None where it has no variables).

    >>> import os, tempfile, dflow as tf
    >>> run = tempfile.mkdtemp()
    >>> with tf.Graph().as_default(), tf.Session() as sess:
    ...     w = tf.Variable([1.0, 2.0], name="w")
    ...     doubled = tf.multiply(w, 2.0, name="doubled")
    ...     _ = sess.run(tf.global_variables_initializer())
    ...     path = tf.train.Saver().save(sess, os.path.join(run, "model"))
    >>> with tf.Graph().as_default() as graph, tf.Session() as sess:
    ...     saver = tf.train.import_meta_graph(path + ".meta")
    ...     saver.restore(sess, path)
    ...     sess.run(graph.get_tensor_by_name("doubled:0")).tolist()
    [2.0, 4.0]
    """
    meta = meta_graph_or_file if isinstance(meta_graph_or_file, dict) else read_meta_graph(meta_graph_or_file)
    graph = get_default_graph()
    import_graph_def(meta["graph_def"], graph, import_scope=import_scope, clear_devices=clear_devices)
    saver_def = meta.get("saver_def")
    if saver_def and saver_def["variables"]:
        prefix = scope_prefix(import_scope)
        scoped = {**saver_def, "restore_op": prefix + saver_def["restore_op"],
                  **{part: {key: prefix + name for key, name in saver_def[part].items()}
                     for part in ("variables", "restore_values")}}
        return Saver(saver_def=scoped, max_to_keep=saver_def["max_to_keep"])
    with graph.as_default():
        return Saver() if global_variables() else None


def write_text_atomically(path: str, text: str) -> None:
    """``text`` into ``path`` whole or not at all (a temp file renamed into place)."""
    temp = _temp_path(path)
    try:
        with open(temp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(temp)
        raise


# ---- writing a checkpoint ---------------------------------------------------------------------
def _temp_path(path: str) -> str:
    """A temp name beside ``path`` that says who writes it, so that a later save can tell a killed
    writer's leftovers from a live writer's work."""
    host = re.sub(r"[^\w.-]", "_", socket.gethostname())
    return f"{path}{_TEMP_MARK}{os.getpid()}@{host}-{secrets.token_hex(4)}"


def _write_checkpoint(path: str, values: dict, **attrs) -> None:
    """Write ``values`` as a Zarr group at ``path``: into a temp sibling, completed by the marker,
    then renamed."""
    temp = _temp_path(path)
    _writing.add(temp)
    try:
        keys = {name: quote(name, safe="") for name in values}
        write_checked_group(temp, {keys[name]: value for name, value in values.items()},
                            {"dflow_checkpoint": _FORMAT, **attrs, "variables": keys})
        _fsync_tree(temp)
        _write_marker(temp, keys, attrs)  # last: its presence marks the checkpoint complete
        _replace_directory(temp, path)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    finally:
        _writing.discard(temp)


def _write_marker(checkpoint: str, keys: dict, attrs: dict) -> None:
    """``dflow_checkpoint.json``: the variables and every chunk file's size, flushed to disk."""
    chunk_files = {key: _chunk_files(os.path.join(checkpoint, key)) for key in keys.values()}
    marker = {"dflow_checkpoint": _FORMAT, **attrs, "variables": keys, "chunk_files": chunk_files}
    with open(os.path.join(checkpoint, _MARKER), "w") as f:
        json.dump(marker, f)
        f.flush()
        os.fsync(f.fileno())
    _fsync_directory(checkpoint)


def _chunk_files(array_dir: str) -> dict:
    """``{chunk file relative to the array: bytes}`` of one array's directory."""
    files = {}
    for directory, _, names in os.walk(array_dir):
        for name in names:
            if name != "zarr.json":
                full = os.path.join(directory, name)
                files[os.path.relpath(full, array_dir).replace(os.sep, "/")] = os.path.getsize(full)
    return files


def _replace_directory(source: str, target: str) -> None:
    # os.replace cannot overwrite a non-empty directory: move the old one aside first
    if os.path.lexists(target):
        aside = f"{target}{_TEMP_MARK}old-{secrets.token_hex(4)}"
        os.replace(target, aside)
        os.replace(source, target)
        _remove(aside)
    else:
        os.replace(source, target)
    _fsync_directory(os.path.dirname(os.path.abspath(target)))


def _remove(path: str) -> None:
    """Delete a checkpoint; renamed first, so a crash midway leaves only a temp-marked name."""
    if not os.path.lexists(path):
        return
    if _TEMP_MARK not in os.path.basename(path):
        doomed = f"{path}{_TEMP_MARK}deleted-{secrets.token_hex(4)}"
        os.replace(path, doomed)
        path = doomed
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        os.remove(path)


def _remove_leftovers(directory: str) -> None:
    """Remove what killed saves left in ``directory``: temp names whose writer is gone."""
    removed, freed = [], 0
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if _is_leftover(path, name):
            freed += _bytes_under(path)
            with contextlib.suppress(FileNotFoundError):
                _remove(path)
            removed.append(name)
    if removed:
        log.warning("removed %d leftovers of interrupted saves from %s (%.1f MB): %s", len(removed),
                    directory, freed / 1e6, _listing(removed, limit=5))


def _is_leftover(path: str, name: str) -> bool:
    if _ASIDE.search(name):
        return True
    written = _WRITTEN.search(name)
    if written is None:
        return False
    if written["pid"] is None:  # named by a dflow before writers were named: no longer written
        return True
    if written["host"] != re.sub(r"[^\w.-]", "_", socket.gethostname()):
        with contextlib.suppress(FileNotFoundError):
            return time.time() - os.lstat(path).st_mtime > _FOREIGN_STALE_SECONDS
        return False
    pid = int(written["pid"])
    return path not in _writing if pid == os.getpid() else not process_alive(pid)


def _bytes_under(path: str) -> int:
    if not os.path.isdir(path):
        with contextlib.suppress(FileNotFoundError):
            return os.lstat(path).st_size
        return 0
    return sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(path) for n in names
               if os.path.exists(os.path.join(d, n)))


def _fsync_tree(root: str) -> None:
    """Flush a written tree to disk, so the rename never publishes unflushed files."""
    for directory, _, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(directory, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_directory(directory)


def _fsync_directory(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # e.g. platforms that cannot open directories
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ---- reading and verifying a checkpoint -----------------------------------------------------------
def _remedy(path: str) -> str:
    directory = os.path.dirname(os.path.abspath(path))
    return (f"restore an older checkpoint of {directory} (tf.train.get_checkpoint_state lists the kept "
            "ones; tf.train.latest_checkpoint passes over damaged ones), or delete this one")


def _open_checkpoint(path: str):
    """The checkpoint's group, once its completion marker and every chunk file it lists are there
    with their sizes (contents are checked as they are read)."""
    if not os.path.isdir(path):
        raise NotFoundError(f"Failed to find a checkpoint at {path}: no such directory")
    name = os.path.basename(os.path.normpath(path))
    if _WRITTEN.search(name) or _ASIDE.search(name):
        raise NotFoundError(f"{path} is not a complete dflow checkpoint: its name marks a save's "
                            "temporary directory (interrupted midway, or still being written)")
    try:
        root = zarr.open_group(path, mode="r")
    except (FileNotFoundError, ValueError, KeyError) as e:
        raise NotFoundError(f"{path} is not a dflow checkpoint (a Zarr group): {e}") from None
    attrs = dict(root.attrs)
    marker = _read_marker(path)
    if marker is not None:
        _check_chunk_files(path, marker)
    elif "variables" in attrs and attrs.get("dflow_checkpoint", 1) < _FORMAT:
        _warn_unchecked(path)  # written before the marker existed
    else:
        raise NotFoundError(f"{path} is not a complete dflow checkpoint (no {_MARKER}, which a save "
                            "writes last); it may be a save interrupted midway")
    return root


def _read_marker(path: str) -> dict | None:
    try:
        with open(os.path.join(path, _MARKER)) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise DataLossError(f"checkpoint {path} is damaged: its {_MARKER} cannot be read ({e}); "
                            f"{_remedy(path)}") from None


def _check_chunk_files(path: str, marker: dict) -> None:
    names = {key: name for name, key in marker["variables"].items()}
    for key, files in marker["chunk_files"].items():
        for chunk, size in files.items():
            file = os.path.join(path, key, *chunk.split("/"))
            try:
                actual = os.path.getsize(file)
            except FileNotFoundError:
                raise DataLossError(f"chunk file {key}/{chunk} of variable {names.get(key, key)} in "
                                    f"checkpoint {path} is missing; {_remedy(path)}") from None
            if actual != size:
                raise DataLossError(f"chunk file {key}/{chunk} of variable {names.get(key, key)} in "
                                    f"checkpoint {path} has {actual} bytes, {size} were written "
                                    f"(truncated or overwritten); {_remedy(path)}")


def _warn_unchecked(path: str) -> None:
    if path not in _warned_unchecked:
        _warned_unchecked.add(path)
        log.warning("checkpoint %s has no chunk checksums (written before dflow checked checkpoints): "
                    "restored unchecked", path)


def _chunk_reader(root, path: str, name: str, key: str) -> ChunkReader:
    return ChunkReader(root[key], f"checkpoint {path}", name, _remedy(path), noun="variable")


def read_values(path: str) -> dict:
    """``{variable name: value}`` of every variable in checkpoint ``path``, every chunk checked."""
    root = _open_checkpoint(path)
    return {name: _chunk_reader(root, path, name, key).read()
            for name, key in root.attrs["variables"].items()}


def _verify(path: str) -> None:
    """Raise unless ``path`` is complete and every chunk reads back as written (read once per
    version of its marker in this process)."""
    stamp_file = os.path.join(path, _MARKER)
    if not os.path.exists(stamp_file):
        stamp_file = os.path.join(path, "zarr.json")
    try:
        stat = os.stat(stamp_file)
    except FileNotFoundError:
        raise NotFoundError(f"Failed to find a checkpoint at {path}") from None
    stamp = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
    if _verified.get(path) != stamp:
        read_values(path)
        _verified[path] = stamp


def _completed_at(path: str) -> float:
    for name in (_MARKER, "zarr.json"):
        with contextlib.suppress(FileNotFoundError):
            return os.path.getmtime(os.path.join(path, name))
    return 0.0


def checkpoint_exists(checkpoint_prefix: str) -> bool:
    """Whether ``checkpoint_prefix`` is a complete checkpoint (its marker and every chunk file there)."""
    try:
        _open_checkpoint(checkpoint_prefix)
    except (NotFoundError, DataLossError):
        return False
    return True


# ---- the `checkpoint` state file ----------------------------------------------------------------
def _write_state(directory: str, paths: list[str], latest_filename: str | None = None) -> None:
    """Atomically rewrite ``<directory>/checkpoint``; paths are stored relative to it."""
    state = {
        "model_checkpoint_path": _relative(paths[-1], directory),
        "all_model_checkpoint_paths": [_relative(p, directory) for p in paths],
    }
    target = os.path.join(directory, latest_filename or _STATE_FILE)
    temp = _temp_path(target)
    try:
        with open(temp, "w") as f:
            json.dump(state, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, target)
    except BaseException:
        if os.path.exists(temp):
            os.remove(temp)
        raise
    _fsync_directory(directory)


def _relative(path: str, directory: str) -> str:
    absolute = os.path.abspath(path)
    if os.path.dirname(absolute) == os.path.abspath(directory):
        return os.path.basename(absolute)
    return absolute


def get_checkpoint_state(checkpoint_dir: str, latest_filename: str | None = None
                         ) -> CheckpointState | None:
    """The ``checkpoint`` file of ``checkpoint_dir`` with paths joined to it, or None."""
    state_file = os.path.join(checkpoint_dir, latest_filename or _STATE_FILE)
    try:
        with open(state_file) as f:
            state = json.load(f)
        latest = state["model_checkpoint_path"]
        kept = list(state.get("all_model_checkpoint_paths", [latest]))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:  # as TF: warn and ignore
        log.warning("%s: %s: checkpoint state ignored", state_file, e)
        return None
    return CheckpointState(os.path.join(checkpoint_dir, latest),
                           [os.path.join(checkpoint_dir, p) for p in kept])


def latest_checkpoint(checkpoint_dir: str, latest_filename: str | None = None) -> str | None:
    """The path of the newest complete, verified checkpoint in ``checkpoint_dir``, or None.

    The ``checkpoint`` file's latest, else (with a warning for each damaged one) the newest of the
    others it keeps: every chunk of the one returned reads back as it was written.

    >>> import tempfile, dflow as tf
    >>> tf.train.latest_checkpoint(tempfile.mkdtemp()) is None  # none saved there yet
    True
    """
    state = get_checkpoint_state(checkpoint_dir, latest_filename)
    if state is None:
        return None
    latest = state.model_checkpoint_path
    older = [p for p in reversed(state.all_model_checkpoint_paths) if p != latest]
    for path in [latest, *older]:
        try:
            _verify(path)
        except (NotFoundError, DataLossError) as error:
            log.warning("checkpoint %s passed over: %s", path, error)
            continue
        return path
    return None
