"""``tensorflow.python.ops``: the op modules TF 1.x scripts import by path
(``from tensorflow.python.ops import math_ops, rnn_cell_impl``, ``gen_nn_ops.relu_grad`` in a
registered gradient). Each module is a view of dflow's public names: an attribute is looked up in
the dflow namespaces :data:`MODULES` lists for it, in order; a name none of them has is an
AttributeError that says where dflow looked.

>>> from dflow.python.ops import array_ops, nn_ops
>>> import dflow
>>> array_ops.reshape is dflow.reshape, nn_ops.relu is dflow.nn.relu
(True, True)
"""

from __future__ import annotations

import importlib.machinery
import sys
import types

import dflow
from dflow.ops.math_ops import sigmoid_grad, tanh_grad
from dflow.rnn_cell import zero_state_tensors

__all__ = ["MODULES"]

#: each module of ``tensorflow.python.ops`` that dflow has, and the dflow namespaces (attribute
#: paths of ``dflow``, "" for ``dflow`` itself) its names come from
MODULES: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(["array_ops", "gen_array_ops", "state_ops", "control_flow_ops", "random_ops",
                     "clip_ops", "check_ops", "data_flow_ops", "logging_ops", "sparse_ops",
                     "string_ops", "standard_ops", "variables", "variable_scope", "init_ops",
                     "functional_ops", "summary_ops", "tensor_array_ops", "parsing_ops",
                     "special_math_ops", "sort_ops"], ("",)),
    "lookup_ops": ("lookup", ""),
    "linalg_ops": ("linalg", ""),
    "image_ops": ("image", ""),
    "ctc_ops": ("nn", ""),
    **dict.fromkeys(["math_ops", "gen_math_ops"], ("", "math")),
    **dict.fromkeys(["nn", "nn_ops", "nn_impl", "gen_nn_ops", "embedding_ops"], ("nn", "")),
    **dict.fromkeys(["rnn", "rnn_cell", "rnn_cell_impl"], ("nn.rnn_cell", "nn", "")),
}


def _relu_grad(gradients, features, name=None):
    """ReLU's gradient op (``gen_nn_ops.relu_grad``; ``_relu_grad`` before TF 1.5)."""
    graph = dflow.get_default_graph()
    return graph.create_op("ReluGrad", [gradients, features], name=name or "ReluGrad").outputs[0]


def _with_dependencies(dependencies, output_tensor, name=None):
    """``output_tensor``'s value, read once ``dependencies`` have run (``control_flow_ops``')."""
    with dflow.name_scope(name, "control_dependency", [*dependencies, output_tensor]) as scope:
        with dflow.control_dependencies(dependencies):
            return dflow.identity(output_tensor, name=scope)


# names a module has under TF's spelling only: init_ops' initializer classes, the generated activation
# gradients
_OWN = {
    "init_ops": {"Zeros": dflow.zeros_initializer, "Ones": dflow.ones_initializer,
                 "Constant": dflow.constant_initializer, "RandomNormal": dflow.random_normal_initializer,
                 "RandomUniform": dflow.random_uniform_initializer,
                 "TruncatedNormal": dflow.truncated_normal_initializer,
                 "GlorotUniform": dflow.glorot_uniform_initializer,
                 "GlorotNormal": dflow.glorot_normal_initializer,
                 "VarianceScaling": dflow.variance_scaling_initializer,
                 "Orthogonal": dflow.orthogonal_initializer},
    "gen_nn_ops": {"relu_grad": _relu_grad, "_relu_grad": _relu_grad},
    "gen_math_ops": {"sigmoid_grad": sigmoid_grad, "tanh_grad": tanh_grad},
    "control_flow_ops": {"with_dependencies": _with_dependencies},
    "rnn_cell_impl": {"_zero_state_tensors": zero_state_tensors},
}


class _OpsModule(types.ModuleType):
    def __init__(self, short: str, namespaces: tuple[str, ...]):
        self._short, self._namespaces = short, namespaces
        self._looked = ", ".join("dflow." + path if path else "dflow" for path in namespaces)
        super().__init__(f"{__name__}.{short}", f"tensorflow.python.ops.{short}, from {self._looked}")
        self.__spec__ = importlib.machinery.ModuleSpec(self.__name__, None)

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        own = _OWN.get(self._short, {})
        if attr in own:
            return own[attr]
        for path in self._namespaces:
            namespace = dflow
            for part in filter(None, path.split(".")):
                namespace = getattr(namespace, part)
            if hasattr(namespace, attr):
                return getattr(namespace, attr)
        raise AttributeError(f"module 'tensorflow.python.ops.{self._short}' has no attribute {attr!r} in "
                             f"dflow (looked in {self._looked})")


for _short, _namespaces in MODULES.items():
    globals()[_short] = sys.modules[f"{__name__}.{_short}"] = _OpsModule(_short, _namespaces)
