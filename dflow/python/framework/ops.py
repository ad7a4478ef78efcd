"""``tensorflow.python.framework.ops``: the graph's public names, as scripts reach for them
(``from tensorflow.python.framework import ops; ops.reset_default_graph()``,
``@ops.RegisterGradient("Name")``).

>>> from dflow.python.framework import ops
>>> import dflow as tf
>>> ops.get_default_graph() is tf.get_default_graph(), ops.Tensor is tf.Tensor
(True, True)
"""

from ...autodiff import NotDifferentiable, RegisterGradient, no_gradient
from ...graph import (
    Graph,
    GraphKeys,
    Operation,
    Tensor,
    add_to_collection,
    colocate_with,
    control_dependencies,
    convert_to_tensor,
    device,
    get_collection,
    get_default_graph,
    name_scope,
    reset_default_graph,
)

__all__ = ["Graph", "GraphKeys", "NotDifferentiable", "Operation", "RegisterGradient", "Tensor",
           "add_to_collection", "colocate_with", "control_dependencies", "convert_to_tensor", "device",
           "get_collection", "get_default_graph", "name_scope", "no_gradient", "op_scope",
           "reset_default_graph"]


def op_scope(values, name, default_name=None):
    """TF 0.x's spelling of ``name_scope(name, default_name, values)``, which TF 1.x still has.

    >>> with op_scope([], None, "square") as scope:
    ...     print(scope)
    square/
    """
    return name_scope(name, default_name, values)
