"""``tf.TensorArray``: a list of tensors written and read by index as the step runs, as TF 1.x's
``while_loop`` recurrences collect their outputs.

As in TF, the elements live in the session (a resource made afresh each time the
``TensorArrayV3`` op runs) and each ``TensorArray`` object is a *handle* naming
them plus a *flow*: a scalar that every write returns anew and every read takes,
so that the graph orders the reads after the writes they need, and that a
``while_loop`` carries as a loop variable. Gradients follow TF's scheme: a
*gradient array* beside each array, where the gradient of a read is written
(summed) and from which the gradient of a write is read.

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     squares = tf.TensorArray(tf.float32, size=3)
...     _, squares = tf.while_loop(lambda i, ta: i < 3,
...                                lambda i, ta: (i + 1, ta.write(i, tf.cast(i * i, tf.float32))),
...                                [0, squares])
...     tf.Session().run(squares.stack()).tolist()
[0.0, 1.0, 4.0]
"""

from __future__ import annotations

import weakref

import numpy

from .. import dtypes
from ..errors import InvalidArgumentError
from ..graph import Operation, Tensor, TensorShape, convert_to_tensor, get_default_graph
from ..runtime.devices import numpy_namespace, to_namespace
from .registry import Spec, defop

__all__ = ["TensorArray"]

# what is known of each array's elements' shape, by the op that made its handle: writes inside
# a traced loop body teach it to the arrays the loop returns
_ELEMENT_SHAPES: weakref.WeakKeyDictionary[Operation, TensorShape] = weakref.WeakKeyDictionary()


class TensorArray:
    """``size`` tensors of ``dtype`` (more with ``dynamic_size=True``), each written once by
    ``write(index, value)`` (which returns the array to use from then on) and read by
    ``read(index)``; ``stack()``/``unstack(value)`` and ``gather(indices)``/``scatter(indices,
    value)`` move many at once. The elements must share a shape (``element_shape``, or the
    first written one's)."""

    def __init__(self, dtype, size=None, dynamic_size=None, clear_after_read=None, tensor_array_name=None,
                 handle=None, flow=None, infer_shape=True, element_shape=None,
                 colocate_with_first_write_call=True, name=None):
        self._dtype = dtypes.as_dtype(dtype)
        if handle is not None:  # an array already made: a new flow of it
            self.handle, self.flow = handle, flow
            return
        if size is None:
            raise ValueError("TensorArray needs a size (dynamic_size=True lets it grow past it)")
        graph = get_default_graph()
        name = name or tensor_array_name or "TensorArray"
        op = graph.create_op("TensorArrayV3", [convert_to_tensor(size, dtype=dtypes.int32)],
                             {"dtype": self._dtype, "dynamic_size": bool(dynamic_size),
                              "shared_name": graph.unique_name(name, mark_as_used=False)}, name=name)
        self.handle, self.flow = op.outputs
        _ELEMENT_SHAPES[op] = TensorShape(element_shape) if element_shape is not None else TensorShape(None)

    @classmethod
    def from_handle(cls, handle: Tensor, flow: Tensor) -> TensorArray:
        """The array ``handle`` names, at ``flow`` (a loop's next value of it)."""
        return cls(_creator(handle).attrs["dtype"], handle=handle, flow=flow)

    @property
    def dtype(self) -> dtypes.DType:
        return self._dtype

    @property
    def element_shape(self) -> TensorShape:
        return _ELEMENT_SHAPES.get(self.handle.op, TensorShape(None))

    def _learn(self, shape: TensorShape) -> None:
        try:
            _ELEMENT_SHAPES[self.handle.op] = self.element_shape.merge_with(shape)
        except ValueError:
            raise ValueError(f"TensorArray {self.handle.op.name} holds elements of shape "
                             f"{self.element_shape}; a value of shape {shape} cannot be one") from None

    def _with_flow(self, flow: Tensor) -> TensorArray:
        return TensorArray(self._dtype, handle=self.handle, flow=flow)

    def _op(self, op_type: str, inputs: list, name, **attrs) -> Operation:
        return get_default_graph().create_op(op_type, [self.handle, *inputs, self.flow], attrs,
                                             name=name or op_type)

    def write(self, index, value, name=None) -> TensorArray:
        """The array with ``value`` at ``index``."""
        value = convert_to_tensor(value, dtype=self._dtype)
        self._learn(value.shape)
        op = self._op("TensorArrayWriteV3", [convert_to_tensor(index, dtype=dtypes.int32), value], name)
        return self._with_flow(op.outputs[0])

    def read(self, index, name=None) -> Tensor:
        """The element at ``index`` (written before, in this step)."""
        return self._op("TensorArrayReadV3", [convert_to_tensor(index, dtype=dtypes.int32)], name,
                        **self._element_attrs()).outputs[0]

    def gather(self, indices, name=None) -> Tensor:
        """The elements at ``indices``, stacked."""
        return self._op("TensorArrayGatherV3", [convert_to_tensor(indices, dtype=dtypes.int32)], name,
                        **self._element_attrs()).outputs[0]

    def stack(self, name=None) -> Tensor:
        """Every element, stacked along a new first dimension."""
        from .array_ops import range_

        creator = _creator(self.handle)
        size = None if creator.attrs["dynamic_size"] else creator.inputs[0].spec.value
        count = int(size) if size is not None else self.size()  # a constant size: a static shape
        return self.gather(range_(count), name=name or "TensorArrayStack")

    def scatter(self, indices, value, name=None) -> TensorArray:
        """The array with ``value[k]`` at ``indices[k]``."""
        value = convert_to_tensor(value, dtype=self._dtype)
        if value.shape.ndims is not None:
            self._learn(TensorShape(value.shape.as_list()[1:]))
        op = self._op("TensorArrayScatterV3", [convert_to_tensor(indices, dtype=dtypes.int32), value], name)
        return self._with_flow(op.outputs[0])

    def unstack(self, value, name=None) -> TensorArray:
        """The array with element ``k`` the slice ``value[k]``."""
        from .array_ops import range_, shape

        value = convert_to_tensor(value, dtype=self._dtype)
        return self.scatter(range_(shape(value)[0]), value, name=name or "TensorArrayUnstack")

    def size(self, name=None) -> Tensor:
        """How many elements it has (its size, or the most written where it grows)."""
        return self._op("TensorArraySizeV3", [], name).outputs[0]

    def identity(self) -> TensorArray:
        return self._with_flow(self.flow)

    def close(self, name=None):
        from .array_ops import no_op

        return no_op(name=name)

    def concat(self, name=None):
        raise NotImplementedError("TensorArray.concat is not supported by dflow: stack() the elements and "
                                  "tf.reshape or tf.concat them")

    def split(self, value, lengths, name=None):
        raise NotImplementedError("TensorArray.split is not supported by dflow: tf.split the value and write "
                                  "or unstack the pieces")

    def _element_attrs(self) -> dict:
        shape = self.element_shape
        return {"dtype": self._dtype, "element_shape": None if shape.ndims is None else shape.as_list()}


# ---- the elements, in the session -----------------------------------------------------------------
class _Elements:
    """One array's elements (None: not written). A gradient array adds what is written to an
    index twice, and reads an index never written as zeros shaped like its array's element."""

    def __init__(self, size: int, dynamic: bool, of: _Elements | None = None):
        self.values, self.dynamic, self.of = [None] * size, dynamic, of

    def write(self, index: int, value, xp) -> None:
        if index < 0 or (index >= len(self.values) and not self.dynamic):
            raise InvalidArgumentError(f"TensorArray: index {index} is outside its size {len(self.values)} "
                                       "(make it with dynamic_size=True to let it grow)")
        self.values += [None] * (index + 1 - len(self.values))
        old = self.values[index]
        self.values[index] = value if old is None or self.of is None else old + value

    def read(self, index: int, xp):
        if not 0 <= index < len(self.values):
            raise InvalidArgumentError(f"TensorArray: cannot read index {index} of {len(self.values)} "
                                       "elements")
        value = self.values[index]
        if value is None and self.of is not None and index < len(self.of.values):
            return xp.zeros_like(self.of.read(index, xp))
        if value is None:
            raise InvalidArgumentError(f"TensorArray: index {index} has not been written to in this step")
        return value


def _key(handle) -> str:
    return str(numpy.asarray(handle, dtype=object).item())


def _host_int(value) -> int:
    return int(numpy.asarray(to_namespace(value, numpy_namespace)))


def _flow(xp):
    return xp.asarray(0.0, dtype=xp.float32)


def _create_kernel(state, xp, size, dtype, dynamic_size, shared_name):
    key = f"TensorArray:{shared_name}"
    state.resources[key] = _Elements(_host_int(size), dynamic_size)  # afresh each step
    state.resources.pop(f"{key}:grad", None)
    return numpy.array(key, dtype=object), _flow(xp)


def _grad_kernel(state, xp, handle, flow):
    key = _key(handle)
    forward = state.resources[key]
    state.resource(f"{key}:grad", lambda: _Elements(len(forward.values), True, of=forward))
    return numpy.array(f"{key}:grad", dtype=object), _flow(xp)


def _write_kernel(state, xp, handle, index, value, flow):
    state.resources[_key(handle)].write(_host_int(index), value, xp)
    return _flow(xp)


def _read_kernel(state, xp, handle, index, flow, dtype, element_shape):
    return state.resources[_key(handle)].read(_host_int(index), xp)


def _gather_kernel(state, xp, handle, indices, flow, dtype, element_shape):
    elements = state.resources[_key(handle)]
    positions = numpy.asarray(to_namespace(indices, numpy_namespace)).reshape(-1)
    rows = [elements.read(int(i), xp) for i in positions]
    if rows:
        return xp.stack(rows)
    if element_shape is None or None in element_shape:
        raise InvalidArgumentError("TensorArray: gathering no elements needs the element shape: give "
                                   "TensorArray(element_shape=...)")
    return xp.zeros([0, *element_shape], dtype=dtype.of(xp))


def _scatter_kernel(state, xp, handle, indices, value, flow):
    elements = state.resources[_key(handle)]
    positions = numpy.asarray(to_namespace(indices, numpy_namespace)).reshape(-1)
    if len(positions) != value.shape[0]:
        raise InvalidArgumentError(f"TensorArray.scatter: {len(positions)} indices for {value.shape[0]} "
                                   "values")
    for k, index in enumerate(positions):
        elements.write(int(index), value[k, ...], xp)
    return _flow(xp)


def _size_kernel(state, xp, handle, flow):
    return xp.asarray(len(state.resources[_key(handle)].values), dtype=xp.int32)


def _flow_spec(inputs, **_):
    return [Spec((), dtypes.float32)]


def _element_spec(inputs, dtype, element_shape):
    return [Spec(None if element_shape is None else tuple(element_shape), dtype)]


def _gathered_spec(inputs, dtype, element_shape):
    count = inputs[1].shape[0] if inputs[1].shape else None
    return [Spec(None if element_shape is None else (count, *element_shape), dtype)]


def _grad_array(op: Operation, flow: Tensor) -> TensorArray:
    """The gradient array beside the array ``op`` uses, ordered after ``flow``."""
    handle, grad_flow = get_default_graph().create_op("TensorArrayGradV3", [op.inputs[0], flow],
                                                      name="TensorArrayGrad").outputs
    _ELEMENT_SHAPES[handle.op] = _ELEMENT_SHAPES.get(op.inputs[0].op, TensorShape(None))
    return TensorArray.from_handle(handle, grad_flow)


def _creator(handle: Tensor) -> Operation:
    """The ``TensorArrayV3`` op an array's (or its gradient array's) handle comes from."""
    op = handle.op
    while op.type == "TensorArrayGradV3":
        op = op.inputs[0].op
    return op


def _write_grad(op, d_flow):
    if d_flow is None:
        return [None] * 4
    return [None, None, _grad_array(op, d_flow).read(op.inputs[1]), d_flow]


def _read_grad(op, d_value):
    return [None, None, _grad_array(op, op.inputs[-1]).write(op.inputs[1], d_value).flow]


def _gather_grad(op, d_value):
    return [None, None, _grad_array(op, op.inputs[-1]).scatter(op.inputs[1], d_value).flow]


def _scatter_grad(op, d_flow):
    if d_flow is None:
        return [None] * 4
    return [None, None, _grad_array(op, d_flow).gather(op.inputs[1]), d_flow]


defop("TensorArrayV3", lambda inputs, dtype, dynamic_size, shared_name: [Spec((), dtypes.string),
                                                                          Spec((), dtypes.float32)],
      _create_kernel, lambda op, *grads: [None], stateful=True, num_outputs=2)
defop("TensorArrayGradV3", lambda inputs: [Spec((), dtypes.string), Spec((), dtypes.float32)], _grad_kernel,
      lambda op, *grads: [None, None], stateful=True, num_outputs=2)
defop("TensorArrayWriteV3", _flow_spec, _write_kernel, _write_grad, stateful=True)
defop("TensorArrayReadV3", _element_spec, _read_kernel, _read_grad, stateful=True)
defop("TensorArrayGatherV3", _gathered_spec, _gather_kernel, _gather_grad, stateful=True)
defop("TensorArrayScatterV3", _flow_spec, _scatter_kernel, _scatter_grad, stateful=True)
defop("TensorArraySizeV3", lambda inputs: [Spec((), dtypes.int32)], _size_kernel,
      lambda op, *grads: [None, None], stateful=True)
