"""The op table: every op is one :class:`OpDef` registered with :func:`defop`.

An op declares four things and nothing else knows about it:

- ``infer(inputs, **attrs) -> [Spec, ...]``: output shapes/dtypes from input
  :class:`Spec` s (shapes are tuples with ``None`` for unknown dims, or ``None``
  for unknown rank). It raises :class:`ShapeError` naming both shapes when the
  inputs cannot fit; the graph adds the op's name.
- ``kernel(xp, *arrays, **attrs)``: the computation over an array namespace
  ``xp`` (NumPy, CuPy, array_api_strict). Stateful kernels (variables, random
  numbers) take the session's :class:`~dflow.runtime.state.SessionState` first.
- ``grad(op, *output_grads) -> [Tensor | None per input]``: builds graph.
- ``num_outputs`` (default 1); a kernel with several outputs returns a tuple,
  and ``None`` means "as many as ``infer`` returned" (split, unstack).

An ``asynchronous`` kernel (the collectives) returns a ``concurrent.futures.Future``
of its outputs; the executor runs other ops while it is pending. A ``blocking`` kernel may
wait for another step to run (a queue's dequeue, a barrier, an accumulator's take): a
runner must not hold the only thread that step needs while it waits.
An op with ``in_place=i`` has a kernel that takes ``out=``: an array it may write its output
into, input ``i``'s own buffer, which the compiled executor hands over where nothing else can
read that input any more (a dense layer's ReLU over its product, the pooling gradient over
the ReLU's output): one buffer instead of two as big as the layer. A kernel may ignore ``out``.
An op with ``gpu=False`` has no GPU kernel (files, queues, summaries, Python objects):
where a GPU exists, an op placed on no particular device type runs on it, as TF's placer
does, except these (and ops of strings), which stay on the CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

__all__ = ["OpDef", "Spec", "ShapeError", "defop", "OP_DEFS", "get_opdef"]


class ShapeError(ValueError):
    """Inputs of an op cannot fit together; the graph prefixes the op's name."""


class Spec(NamedTuple):
    """What is known of a tensor at graph-build time."""

    shape: tuple | None
    dtype: Any  # dflow.dtypes.DType
    value: Any = None  # a NumPy array when the value is a build-time constant


@dataclass(frozen=True)
class OpDef:
    name: str
    infer: Callable[..., list]
    kernel: Callable[..., Any]
    grad: Callable[..., list] | None = None
    stateful: bool = False
    num_outputs: int | None = 1
    asynchronous: bool = False
    blocking: bool = False
    gpu: bool = True  # its kernel runs on CuPy: a GPU is its default device where there is one
    in_place: int | None = None  # the input whose buffer its kernel may take as ``out``
    updates: bool = False  # it writes the variables it takes by reference (an optimizer's update)
    takes_refs: bool = False  # a variable op's output reaches it as the reference, not the value

    @property
    def waits(self) -> bool:
        """Whether running it may wait for other steps or tasks (a blocking or asynchronous op)."""
        return self.blocking or self.asynchronous


OP_DEFS: dict[str, OpDef] = {}


def defop(name: str, infer, kernel, grad=None, *, stateful=False, num_outputs=1,
          asynchronous=False, blocking=False, gpu=True, in_place=None, updates=False,
          takes_refs=False) -> OpDef:
    """Register an op. Adding an op touches only the module that calls this."""
    if name in OP_DEFS:
        raise ValueError(f"op type {name!r} is registered twice")
    if in_place is not None and (stateful or num_outputs != 1):
        raise ValueError(f"op type {name!r}: only a stateless kernel of one output works in place")
    opdef = OpDef(name, infer, kernel, grad, stateful, num_outputs, asynchronous, blocking, gpu, in_place,
                  updates, takes_refs or updates)
    OP_DEFS[name] = opdef
    return opdef


def get_opdef(name: str) -> OpDef:
    try:
        return OP_DEFS[name]
    except KeyError:
        raise KeyError(f"unknown op type {name!r}; registered: {sorted(OP_DEFS)}") from None
