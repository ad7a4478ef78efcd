"""``tensorflow.python.util.nest``: nested structures (tuples, lists, namedtuples, dicts in the
order of their sorted keys) as flat lists and back, as TF 1.x's RNN code handles states.

>>> from dflow.python.util import nest
>>> nest.flatten(({"b": 2, "a": 1}, [3]))
[1, 2, 3]
>>> nest.pack_sequence_as(((0, 0), 0), ["x", "y", "z"])
(('x', 'y'), 'z')
>>> nest.map_structure(lambda a, b: a + b, (1, [2]), (10, [20]))
(11, [22])
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["is_sequence", "is_nested", "flatten", "pack_sequence_as", "map_structure",
           "assert_same_structure"]


def is_sequence(value) -> bool:
    """Whether ``value`` nests others: a tuple, list or dict (a string is a leaf)."""
    return isinstance(value, (tuple, list, dict))


is_nested = is_sequence


def flatten(structure) -> list:
    """The leaves of ``structure``, depth first (a leaf alone: a list of it)."""
    if not is_sequence(structure):
        return [structure]
    return [leaf for child in _children(structure) for leaf in flatten(child)]


def pack_sequence_as(structure, flat_sequence):
    """``structure``'s shape with ``flat_sequence``'s items as its leaves."""
    flat_sequence = list(flat_sequence)
    needed = len(flatten(structure))
    if needed != len(flat_sequence):
        raise ValueError(f"the structure has {needed} leaves but flat_sequence has {len(flat_sequence)} "
                         f"items (structure: {structure!r})")
    leaves = iter(flat_sequence)

    def build(like):
        if not is_sequence(like):
            return next(leaves)
        return _rebuild(like, [build(child) for child in _children(like)])

    return build(structure)


def map_structure(func: Callable, *structures, check_types: bool = True):
    """``func`` over the leaves of equally nested ``structures``, in the first one's shape."""
    if not structures:
        raise ValueError("map_structure needs at least one structure")
    for other in structures[1:]:
        assert_same_structure(structures[0], other, check_types)
    return pack_sequence_as(structures[0], [func(*leaves) for leaves in zip(*map(flatten, structures))])


def assert_same_structure(nest1, nest2, check_types: bool = True) -> None:
    """ValueError where the two nest differently; with ``check_types``, TypeError where their
    sequence types differ (a list against a tuple, two namedtuple types)."""
    if is_sequence(nest1) != is_sequence(nest2):
        raise ValueError(f"the two structures do not nest alike: {nest1!r} and {nest2!r}")
    if not is_sequence(nest1):
        return
    if check_types and type(nest1) is not type(nest2):
        raise TypeError(f"the two structures nest {type(nest1).__name__} against {type(nest2).__name__}: "
                        f"{nest1!r} and {nest2!r}")
    if isinstance(nest1, dict) and isinstance(nest2, dict) and sorted(nest1) != sorted(nest2):
        raise ValueError(f"the two dicts have different keys: {sorted(nest1)} and {sorted(nest2)}")
    first, second = _children(nest1), _children(nest2)
    if len(first) != len(second):
        raise ValueError(f"the two structures nest {len(first)} against {len(second)} items: "
                         f"{nest1!r} and {nest2!r}")
    for a, b in zip(first, second):
        assert_same_structure(a, b, check_types)


def _children(sequence) -> list:
    return [sequence[key] for key in sorted(sequence)] if isinstance(sequence, dict) else list(sequence)


def _rebuild(like, children: list):
    if isinstance(like, dict):
        return type(like)(zip(sorted(like), children))
    if hasattr(like, "_fields"):  # a namedtuple (an LSTMStateTuple)
        return type(like)(*children)
    return type(like)(children)
