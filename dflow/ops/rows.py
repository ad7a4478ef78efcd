"""A table's rows, as the ops that gather, scatter and sparsely update them read and write them:
``table[ids] += rows`` (repeated ids adding up), ``table[ids] = rows``, the ids' range checked,
and whether an update may write into the table it was given. NumPy and CuPy write in place;
``array_api_strict``, which has no assignment through an index array, gets new arrays from a
one-hot product.

>>> import array_api_compat.numpy as xp
>>> table = xp.zeros((3, 2), dtype=xp.float32)
>>> add_rows(xp, table, xp.asarray([2, 0, 2]), xp.ones((3, 2), dtype=xp.float32)).tolist()
[[1.0, 1.0], [0.0, 0.0], [2.0, 2.0]]
"""

from __future__ import annotations

import array_api_compat

from . import fused

__all__ = ["add_rows", "check_range", "set_rows", "table_to_write"]


def check_range(xp, flat_ids, limit, what):
    """A ValueError naming the first id of ``flat_ids`` outside ``[0, limit)`` and ``what`` it is."""
    if flat_ids.shape[0] and bool(xp.any((flat_ids < 0) | (flat_ids >= limit))):
        bad = int(xp.min(flat_ids)) if bool(xp.any(flat_ids < 0)) else int(xp.max(flat_ids))
        raise ValueError(f"{what} = {bad} is not in [0, {limit})")


def add_rows(xp, table, ids, rows, scale=1):
    """``table[ids[i]] += rows[i] * scale``, repeated ids adding up: into ``table`` itself where
    the namespace can write (NumPy, CuPy), else a new array."""
    if fused.compiled_for(xp, table, rows) and fused.add_rows(table, ids, rows, scale):
        return table
    if scale != 1:
        rows = rows * scale
    at = getattr(getattr(xp, "add", None), "at", None)  # NumPy's and CuPy's ufunc.at
    if at is not None:
        at(table, ids, rows)
        return table
    onehot = xp.astype(ids[:, None] == xp.arange(table.shape[0], dtype=ids.dtype)[None, :], table.dtype)
    return table + xp.reshape(xp.matmul(xp.matrix_transpose(onehot), xp.reshape(rows, (ids.shape[0], -1))),
                              table.shape)


def set_rows(xp, table, ids, rows):
    """``table[ids] = rows``: into ``table`` itself where the namespace can write, else a new array."""
    if array_api_compat.is_numpy_namespace(xp) or array_api_compat.is_cupy_namespace(xp):
        table[ids] = rows
        return table
    # the standard has no assignment through an index array: the rows picked by a one-hot
    # product (ids that repeat add up; TF leaves their order unspecified anyway)
    onehot = xp.astype(ids[:, None] == xp.arange(table.shape[0], dtype=ids.dtype)[None, :], table.dtype)
    picked = xp.matmul(xp.matrix_transpose(onehot), xp.reshape(rows, (ids.shape[0], -1)))
    hit = xp.reshape(xp.sum(onehot, axis=0) > 0, (-1,) + (1,) * (table.ndim - 1))
    return xp.where(hit, xp.reshape(picked, table.shape), table)


def table_to_write(xp, table, in_place: bool):
    """``table`` itself where an update may write into it (nothing else holds it: an embedding's
    128 rows written, not a copy of its 50,000 made; and its memory is writable), else a copy:
    readers of the old value keep theirs."""
    if in_place and getattr(getattr(table, "flags", None), "writeable", True):
        return table
    return xp.asarray(table, copy=True)
