"""Nested elements of ``tf.data`` (tuples and dicts of components) as flat lists and back.

>>> structure, leaves = flatten(({"b": 2, "a": 1}, 3))
>>> leaves
[1, 2, 3]
>>> pack(structure, ["x", "y", "z"])
({'a': 'x', 'b': 'y'}, 'z')
"""

from __future__ import annotations

from typing import Any

__all__ = ["flatten", "pack"]


def flatten(value) -> tuple[Any, list]:
    """``(structure, leaves)``: structure is None for a leaf, a list for a tuple, a dict for a dict."""
    if isinstance(value, dict):
        parts = {key: flatten(value[key]) for key in sorted(value)}
        leaves = [leaf for _, part_leaves in parts.values() for leaf in part_leaves]
        return {k: s for k, (s, _) in parts.items()}, leaves
    if isinstance(value, tuple):
        parts = [flatten(item) for item in value]
        return [s for s, _ in parts], [leaf for _, leaves in parts for leaf in leaves]
    return None, [value]


def pack(structure, leaves, sequence=tuple):
    """The inverse of :func:`flatten`; with ``sequence=list``, a structure whose leaves are
    ``leaves`` (each a structure: what ``zip`` makes of its datasets')."""
    leaves = iter(leaves)

    def build(s):
        if s is None:
            return next(leaves)
        if isinstance(s, dict):
            return {key: build(sub) for key, sub in s.items()}
        return sequence(build(sub) for sub in s)
    return build(structure)
