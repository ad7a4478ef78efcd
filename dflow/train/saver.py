"""Checkpoints: :class:`Saver` writes variables to a Zarr v3 group, atomically.

A checkpoint ``model.ckpt-100`` is a directory holding one Zarr group::

    model.ckpt-100/zarr.json      attrs: {"dflow_checkpoint": 1, "global_step": 100,
                                          "variables": {"w/Adam": "w%2FAdam", ...}}
    model.ckpt-100/w%2FAdam/...   one array per variable

Each array is keyed by the variable's shared name with ``/`` percent-escaped
(``urllib.parse.quote(name, safe="")``). Nested groups cannot work: TF names a
variable ``w`` and its slot ``w/Adam``, so ``w`` would be an array and a group.
The ``variables`` attribute maps names to keys, so readers need not unescape.

Writes are atomic. The group is written into a sibling ``<path>.tmp-<random>``
directory, and renamed into place only when complete; the ``variables``
attribute is written last, so even a temp directory is recognizably unfinished.
The JSON file ``checkpoint`` beside the checkpoints names the latest and the
kept ones (also written to a temp file, then ``os.replace``). Temp directories
are never listed there, so :func:`latest_checkpoint` never returns one.

>>> import dflow as tf
>>> with tf.Graph().as_default():  # doctest: +SKIP
...     w = tf.Variable([1.0, 2.0], name="w")
...     saver = tf.train.Saver()
...     with tf.Session() as sess:
...         sess.run(tf.global_variables_initializer())
...         path = saver.save(sess, "/tmp/run/model.ckpt", global_step=100)
...         saver.restore(sess, tf.train.latest_checkpoint("/tmp/run"))
"""

from __future__ import annotations

import json
import logging
import numbers
import os
import secrets
import shutil
from typing import NamedTuple
from urllib.parse import quote

import numpy as np
import zarr

from ..errors import InvalidArgumentError, NotFoundError
from ..ops import array_ops, state_ops
from ..variables import Variable, global_variables, group
from . import training_util

__all__ = ["Saver", "latest_checkpoint", "get_checkpoint_state", "checkpoint_exists",
           "CheckpointState"]

log = logging.getLogger("dflow")

_STATE_FILE = "checkpoint"
_TEMP_MARK = ".tmp-"  # in every name this module writes before renaming into place


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
    max_to_keep : int, optional
        Checkpoints kept by :meth:`save`; older ones are deleted. ``None`` or 0 keeps all.
    name : str, optional
        Name scope of the restore ops (default ``save``).

    Example
    -------
    >>> saver = tf.train.Saver(max_to_keep=3)  # doctest: +SKIP
    >>> saver.save(sess, "ckpt/model", global_step=step)  # doctest: +SKIP
    'ckpt/model-1000'
    """

    def __init__(self, var_list=None, max_to_keep: int | None = 5, name: str | None = None):
        self._variables = _by_name(global_variables() if var_list is None else var_list)
        if not self._variables:
            raise ValueError("No variables to save")
        graph = next(iter(self._variables.values())).graph
        self._placeholders = {}
        with graph.as_default(), graph.name_scope(name or "save"):
            assigns = []
            for var_name, var in self._variables.items():
                feed = array_ops.placeholder(var.dtype, var.shape.dims, name="restore_value")
                self._placeholders[var_name] = feed
                assigns.append(state_ops.assign(var, feed))
            self._restore_op = group(*assigns, name="restore_all")
        self._max_to_keep = max_to_keep
        self._last_checkpoints: list[str] = []

    @property
    def last_checkpoints(self) -> list[str]:
        """The kept checkpoints this saver wrote, oldest first."""
        return list(self._last_checkpoints)

    def recover_last_checkpoints(self, checkpoint_paths) -> None:
        """Adopt existing checkpoints (e.g. after a restart) so ``max_to_keep`` counts them."""
        self._last_checkpoints = [p for p in checkpoint_paths if checkpoint_exists(p)]

    def save(self, sess, save_path: str, global_step=None, latest_filename: str | None = None,
             write_meta_graph: bool = True, write_state: bool = True) -> str:
        """Write the variables' values to ``save_path[-global_step]``; return that path.

        ``global_step`` is an int or a tensor/variable read in ``sess``. There is
        no meta graph; ``write_meta_graph`` is accepted for TF compatibility.
        """
        path = save_path
        step = None
        if global_step is not None:
            step = (int(global_step) if isinstance(global_step, numbers.Integral)
                    else training_util.global_step(sess, global_step))
            path = f"{save_path}-{step}"
        directory = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(directory):
            raise ValueError(f"Parent directory of {save_path} doesn't exist, can't save.")
        names = list(self._variables)
        values = sess.run([self._variables[n] for n in names])
        _write_checkpoint(path, dict(zip(names, values)), global_step=step)
        if write_state:
            expired = self._record(path)
            _write_state(directory, self._last_checkpoints, latest_filename)
            for old in expired:  # only once the state file no longer names them
                _remove(old)
        return path

    def restore(self, sess, save_path: str) -> None:
        """Load every saved variable from checkpoint ``save_path`` (checked before any is set)."""
        if save_path is None:
            raise ValueError("Can't load save_path when it is None.")
        root = _open_checkpoint(save_path)
        keys = root.attrs["variables"]
        feeds = {}
        for name, var in self._variables.items():
            if name not in keys:
                raise NotFoundError(f"Key {name} not found in checkpoint {save_path}; "
                                    f"it holds: {_listing(keys)}")
            array = root[keys[name]]
            _check_fits(array, var, name, save_path)
            feeds[self._placeholders[name]] = np.asarray(array[...])
        sess.run(self._restore_op, feeds)

    def _record(self, path: str) -> list[str]:
        """Append ``path`` to the kept checkpoints; return those beyond ``max_to_keep``."""
        if path in self._last_checkpoints:
            self._last_checkpoints.remove(path)
        self._last_checkpoints.append(path)
        excess = len(self._last_checkpoints) - (self._max_to_keep or len(self._last_checkpoints))
        expired, self._last_checkpoints = (self._last_checkpoints[:excess],
                                           self._last_checkpoints[excess:])
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


def _check_fits(array, var: Variable, name: str, save_path: str) -> None:
    shape, dtype = tuple(array.shape), np.dtype(array.dtype)
    if not var.shape.is_compatible_with(shape) or dtype != np.dtype(var.dtype.as_numpy_dtype):
        raise InvalidArgumentError(
            f"cannot restore {name} from {save_path}: the checkpoint holds {dtype.name} of "
            f"shape {shape}, the variable is {var.dtype.name} of shape {var.shape}")


def _listing(names, limit: int = 30) -> str:
    names = sorted(names)
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


# ---- the checkpoint directory ---------------------------------------------------------------
def _write_checkpoint(path: str, values: dict, **attrs) -> None:
    """Write ``values`` as a Zarr group at ``path``: into a temp sibling, then renamed."""
    temp = f"{path}{_TEMP_MARK}{secrets.token_hex(4)}"
    try:
        root = zarr.open_group(temp, mode="w")
        keys = {}
        for name, value in values.items():
            value = np.asarray(value)
            keys[name] = quote(name, safe="")
            root.create_array(keys[name], shape=value.shape, dtype=value.dtype)[...] = value
        # last: its presence marks the group complete
        root.attrs.update({"dflow_checkpoint": 1, **attrs, "variables": keys})
        _fsync_tree(temp)
        _replace_directory(temp, path)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise


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


def _open_checkpoint(path: str):
    if not os.path.isdir(path):
        raise NotFoundError(f"Failed to find a checkpoint at {path}: no such directory")
    try:
        root = zarr.open_group(path, mode="r")
    except (FileNotFoundError, ValueError, KeyError) as e:
        raise NotFoundError(f"{path} is not a dflow checkpoint (a Zarr group): {e}") from None
    if "variables" not in root.attrs:
        raise NotFoundError(f"{path} is not a complete dflow checkpoint (no 'variables' attribute); "
                            "it may be a save interrupted midway")
    return root


def checkpoint_exists(checkpoint_prefix: str) -> bool:
    """Whether ``checkpoint_prefix`` is a complete checkpoint."""
    try:
        _open_checkpoint(checkpoint_prefix)
    except NotFoundError:
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
    temp = f"{target}{_TEMP_MARK}{secrets.token_hex(4)}"
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
    """The path of the newest complete checkpoint in ``checkpoint_dir``, or None.

    >>> saver.restore(sess, tf.train.latest_checkpoint("ckpt"))  # doctest: +SKIP
    """
    state = get_checkpoint_state(checkpoint_dir, latest_filename)
    if state is not None and checkpoint_exists(state.model_checkpoint_path):
        return state.model_checkpoint_path
    return None
