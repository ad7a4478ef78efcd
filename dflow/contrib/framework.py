"""``tf.contrib.framework``: ``arg_scope`` and the global step.

``arg_scope(ops, **kwargs)`` makes ``kwargs`` the defaults of each op in ``ops`` (functions
decorated with :func:`add_arg_scope`: ``tf.contrib.layers``' layers) inside its ``with`` block;
an argument the call gives itself wins, and an inner scope adds to and overrides an outer one,
as in TF 1.x (the Hands-On ML book's and slim's networks are written so).

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     with tf.contrib.framework.arg_scope([tf.contrib.layers.fully_connected], num_outputs=3,
...                                          activation_fn=tf.nn.elu):
...         hidden = tf.contrib.layers.fully_connected(tf.zeros([2, 4]))
...         wide = tf.contrib.layers.fully_connected(hidden, num_outputs=5)
...     hidden.shape.as_list(), hidden.op.type, wide.shape.as_list()
([2, 3], 'Elu', [2, 5])
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator

from ..train.training_util import get_global_step, get_or_create_global_step

__all__ = ["arg_scope", "add_arg_scope", "has_arg_scope", "arg_scoped_arguments", "current_arg_scope",
           "get_global_step", "get_or_create_global_step"]

# the scopes entered, innermost last; each maps an op's key to its defaults (one stack, as TF's:
# a graph is built on one thread)
_SCOPES: list[dict[str, dict]] = [{}]


def current_arg_scope() -> dict[str, dict]:
    """The innermost scope's defaults, by op: ``arg_scope(current_arg_scope())`` enters it again."""
    return _SCOPES[-1]


def add_arg_scope(func: Callable) -> Callable:
    """``func`` taking its defaults from the :func:`arg_scope` it is called in."""

    @functools.wraps(func)
    def scoped(*args, **kwargs):
        defaults = _SCOPES[-1].get(scoped._arg_scope_key)
        return func(*args, **{**defaults, **kwargs}) if defaults else func(*args, **kwargs)

    scoped._arg_scope_key = f"{func.__module__}.{func.__qualname__}"
    return scoped


def has_arg_scope(func: Callable) -> bool:
    """Whether ``func`` takes defaults from an :func:`arg_scope`."""
    return hasattr(func, "_arg_scope_key")


def arg_scoped_arguments(func: Callable) -> list[str]:
    """The arguments of ``func`` an :func:`arg_scope` may set."""
    return list(inspect.signature(func).parameters)


@contextlib.contextmanager
def arg_scope(list_ops_or_scope, **kwargs) -> Iterator[dict[str, dict]]:
    """``kwargs`` as the defaults of each op of ``list_ops_or_scope`` (a list or tuple of functions
    decorated with :func:`add_arg_scope`) inside the block, on top of the enclosing scope's; or,
    given a scope :func:`current_arg_scope` returned and no ``kwargs``, that scope again. Yields the
    scope it enters."""
    if isinstance(list_ops_or_scope, dict):
        if kwargs:
            raise ValueError("arg_scope of a saved scope takes no keyword arguments; "
                             "open another arg_scope inside it for those")
        scope = list_ops_or_scope
    else:
        if not isinstance(list_ops_or_scope, (list, tuple)):
            raise TypeError(f"arg_scope takes a list or tuple of ops (or a saved scope), got "
                            f"{type(list_ops_or_scope).__name__}")
        scope = dict(_SCOPES[-1])
        for op in list_ops_or_scope:
            if not has_arg_scope(op):
                raise ValueError(f"{getattr(op, '__name__', op)} is not decorated with @add_arg_scope: "
                                 f"arg_scope sets the defaults of tf.contrib.layers' layers")
            unknown = set(kwargs) - set(arg_scoped_arguments(op))
            if unknown:  # said here, not at a call deep in a network
                raise TypeError(f"{op.__name__} has no argument {', '.join(sorted(unknown))}")
            scope[op._arg_scope_key] = {**scope.get(op._arg_scope_key, {}), **kwargs}
    _SCOPES.append(scope)
    try:
        yield scope
    finally:
        _SCOPES.pop()


_INSTEAD = {
    "get_variables": "tf.global_variables (or tf.get_collection with a scope)",
    "get_model_variables": "tf.global_variables",
    "get_variables_to_restore": "tf.global_variables (and tf.train.Saver(var_list=...))",
    "assign_from_checkpoint_fn": "tf.train.Saver(var_list=...).restore",
    "model_variable": "tf.get_variable",
    "variable": "tf.get_variable",
}


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    hint = f"; use {_INSTEAD[name]} instead" if name in _INSTEAD else ""
    raise AttributeError(f"tf.contrib.framework.{name} is not supported by dflow (it has "
                         f"{', '.join(__all__)}){hint}")
