"""``tf.saved_model.main_op``: the op a loaded model runs once its variables are restored: what a
checkpoint does not hold (local variables, lookup tables) initialized.

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     op = main_op()
>>> op.type
'NoOp'
"""

from __future__ import annotations

from ..graph import Operation, control_dependencies, get_default_graph
from ..ops.lookup_ops import tables_initializer
from ..variables import group, local_variables_initializer

__all__ = ["main_op", "main_op_with_restore"]


def main_op() -> Operation:
    """The local variables' and the tables' initializers, as one op."""
    return group(local_variables_initializer(), tables_initializer())


def main_op_with_restore(restore_op_name: str) -> Operation:
    """:func:`main_op`, run only after the op (or tensor) named ``restore_op_name``."""
    restore = get_default_graph().as_graph_element(restore_op_name)
    with control_dependencies([restore]):
        return main_op()
