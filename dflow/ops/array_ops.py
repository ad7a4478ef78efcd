"""Ops that create, reshape and rearrange tensors (TF's ``array_ops``)."""

from __future__ import annotations

import numpy as np

from .. import dtypes
from ..errors import InvalidArgumentError
from ..graph import Tensor, TensorShape, as_shape, convert_to_tensor, get_default_graph, register_op_builders
from . import parallel
from .registry import ShapeError, Spec, defop
from .shape_rules import fmt, normalize_axis, num_elements, same_as_input

__all__ = [
    "constant", "placeholder", "placeholder_with_default", "identity", "identity_n", "stop_gradient", "no_op",
    "shape", "rank", "cast", "sum_to_shape",
    "reshape", "transpose", "concat", "split", "stack", "unstack", "squeeze", "expand_dims",
    "tile", "pad", "one_hot", "strided_slice", "broadcast_to", "zeros", "ones", "zeros_like",
    "ones_like", "fill", "range_", "shape_tensor", "static_shape", "slice_", "linspace",
    "reverse", "space_to_depth", "depth_to_space",
]


def _op(op_type, inputs, attrs=None, name=None):
    return get_default_graph().create_op(op_type, inputs, attrs, name=name)


def _out(op_type, inputs, attrs=None, name=None) -> Tensor:
    return _op(op_type, inputs, attrs, name).outputs[0]


def shape_value(spec: Spec):
    """The static value of a shape-like input: a list of ints (None where a dim is only
    known at run time), or None when not even its length is known."""
    if spec.value is None:
        return None
    values = spec.value if isinstance(spec.value, tuple) else np.ravel(spec.value)
    return [None if v is None else int(v) for v in values]


def is_symbolic(value) -> bool:
    """A tensor or something that stands for one (a variable): not a value known at build time."""
    return isinstance(value, Tensor) or hasattr(value, "_as_graph_element")


def static_axis(axis, what="axis"):
    """An axis argument (an int, a list of ints, a constant tensor, or None) as None or a list."""
    if axis is None:
        return None
    if isinstance(axis, Tensor) or hasattr(axis, "_as_graph_element"):
        value = convert_to_tensor(axis).spec.value
        if value is None or (isinstance(value, tuple) and None in value):
            raise ValueError(f"dflow needs the {what} when the graph is built (an int, a list of ints or "
                             f"a constant), got {axis!r}, whose value is known only at run time")
        axis = list(value) if isinstance(value, tuple) else value.tolist()
    if hasattr(axis, "tolist"):
        axis = axis.tolist()
    return [int(a) for a in ((axis,) if isinstance(axis, int) else axis)]


def static_shape(shape, what="shape") -> list | None:
    """A shape argument given as TF 1.x takes it (a list or tuple of ints/None/Dimensions, a
    TensorShape, an int for a vector of that length, a NumPy array) as a list of ints and None;
    None for an unknown rank."""
    if is_symbolic(shape):
        raise TypeError(f"{what} must be static here, got the tensor {shape!r}")
    if isinstance(shape, np.ndarray):
        shape = shape.tolist()
    dims = as_shape(shape).dims
    return None if dims is None else list(dims)


def shape_tensor(shape, name=None) -> Tensor:
    """A shape argument as an int vector tensor: a tensor (``tf.shape(x)``) passes through; a
    list may mix ints and scalar tensors (``[tf.shape(x)[0], -1]``: stacked); a TensorShape, an
    int or a NumPy array becomes a constant."""
    if is_symbolic(shape):
        return convert_to_tensor(shape)
    if isinstance(shape, (list, tuple)) and any(is_symbolic(d) for d in shape):
        dims = [_as_int32(d) for d in shape]
        return stack(dims, name=name or "stack")
    dims = static_shape(shape)
    if dims is None or None in dims:
        raise ValueError(f"a shape for a value needs every dim, got {TensorShape(dims)}; "
                         "use tf.shape(x) for dims known only at run time")
    return constant(np.asarray(dims, np.int32).reshape(len(dims)), dtypes.int32, name=name or "Const")


def _as_int32(dim) -> Tensor:
    if not is_symbolic(dim):
        return constant(int(dim), dtypes.int32)
    dim = convert_to_tensor(dim)
    return dim if dim.dtype == dtypes.int32 else cast(dim, dtypes.int32)




# ---- Const / Placeholder ----------------------------------------------------
def _const_infer(inputs, value, dtype):
    return [Spec(tuple(value.shape), dtype, value)]


defop("Const", _const_infer, lambda xp, value, dtype: xp.asarray(value))


def constant(value, dtype=None, shape=None, name="Const") -> Tensor:
    """A constant tensor. ``tf.constant([[1., 2.]])``; Python floats become float32."""
    dtype = dtypes.as_dtype(dtype) if dtype is not None else _infer_dtype(value)
    array = _string_array(value) if dtype == dtypes.string else np.asarray(value, dtype=dtype.as_numpy_dtype)
    if shape is not None:
        shape = tuple(static_shape(shape))
        array = np.broadcast_to(array, shape).copy() if array.size == 1 else array.reshape(shape)
    return _out("Const", [], {"value": array, "dtype": dtype}, name)


def _string_array(value) -> np.ndarray:
    """Strings as TF holds them: bytes (``str`` encoded as UTF-8), so a fetch gives ``b'Hello'``."""
    array = np.asarray(value)
    if array.dtype.kind == "U":
        return np.char.encode(array, "utf-8")
    if array.dtype.kind == "O":
        return np.asarray([v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in array.ravel()]
                          ).reshape(array.shape)
    return array


def _infer_dtype(value) -> dtypes.DType:
    array = np.asarray(value)
    if array.dtype.kind in "USO":
        return dtypes.string
    if array.dtype == np.float64 and not isinstance(value, np.ndarray | np.generic):
        return dtypes.float32  # Python floats default to float32, as in TF
    if array.dtype == np.int64 and not isinstance(value, np.ndarray | np.generic):
        return dtypes.int32
    return dtypes.as_dtype(array.dtype)


def _placeholder_kernel(xp, *, dtype, shape):
    raise AssertionError("placeholders are fed, never computed")  # the session checks feeds first


defop("Placeholder", lambda inputs, dtype, shape: [Spec(shape, dtype)], _placeholder_kernel)


def placeholder(dtype, shape=None, name=None) -> Tensor:
    """A tensor fed at run time: ``x = tf.placeholder(tf.float32, [None, 784])``; the dtype may
    be ``"float"``, ``float``, ``np.float32``..., the shape a TensorShape or an int (a vector)."""
    shape = _placeholder_shape(shape)
    return _out("Placeholder", [], {"dtype": dtypes.as_dtype(dtype), "shape": shape}, name)


def _placeholder_shape(shape):
    dims = static_shape(shape)
    return None if dims is None else tuple(None if d is None or d == -1 else d for d in dims)


def _with_default_infer(inputs, shape):
    return [Spec(inputs[0].shape if shape is None else shape, inputs[0].dtype)]


defop("PlaceholderWithDefault", _with_default_infer, lambda xp, x, shape: x, lambda op, g: [g])


def placeholder_with_default(input, shape, name=None) -> Tensor:
    """``input`` unless fed: ``keep_prob = tf.placeholder_with_default(1.0, [])``."""
    shape = _placeholder_shape(shape)
    return _out("PlaceholderWithDefault", [input], {"shape": shape}, name)


# ---- identity, no_op, stop_gradient ------------------------------------------
defop("Identity", same_as_input, lambda xp, x: x, lambda op, g: [g])
defop("IdentityN", lambda inputs: list(inputs), lambda xp, *xs: xs, lambda op, *gs: list(gs),
      num_outputs=None)
defop("StopGradient", same_as_input, lambda xp, x: x, lambda op, g: [None])
defop("NoOp", lambda inputs: [], lambda xp: (), num_outputs=0)


def identity(input, name=None) -> Tensor:
    """``input`` unchanged (a new name, a place to hang control dependencies)."""
    return _out("Identity", [input], name=name)


def identity_n(input, name=None) -> list[Tensor]:
    """Each of the tensors ``input`` unchanged, from one op (where a gradient override maps one op)."""
    return list(_op("IdentityN", [convert_to_tensor(t) for t in input], name=name).outputs)


def stop_gradient(input, name=None) -> Tensor:
    """``input``, but ``tf.gradients`` treats it as a constant."""
    return _out("StopGradient", [input], name=name)


def no_op(name=None):
    """An op that does nothing; with control inputs it groups other ops."""
    return _op("NoOp", [], name=name)


# ---- shape, reshape, transpose ---------------------------------------------
def _shape_infer(inputs, out_type):
    # The value is the static shape: an array when fully known, a tuple with None
    # for unknown dims otherwise (only shape rules read that partial form).
    s = inputs[0].shape
    value = s if s is None or None in s else np.asarray(s, dtype=out_type.as_numpy_dtype)
    return [Spec((None if s is None else len(s),), out_type, value)]


defop("Shape", _shape_infer, lambda xp, x, out_type: xp.asarray(x.shape, dtype=out_type.of(xp)))


def shape(input, name=None, out_type=dtypes.int32) -> Tensor:
    """The run-time shape of ``input`` as an int32 vector."""
    return _out("Shape", [input], {"out_type": dtypes.as_dtype(out_type)}, name)


def rank(input, name=None):
    s = convert_to_tensor(input).shape
    if s.ndims is None:
        raise ValueError("tf.rank of a tensor whose rank is unknown at graph-build time")
    return constant(s.ndims, dtypes.int32, name=name or "Rank")


def _resolve_reshape(in_shape, target):
    if None in target:
        return _resolve_partial_reshape(in_shape, target)
    known = num_elements(in_shape)
    if target.count(-1) > 1:
        raise ShapeError(f"reshape target {target} has more than one -1")
    if -1 in target:
        rest = num_elements([d for d in target if d != -1])
        if known is None or rest is None:
            return tuple(None if d == -1 else d for d in target)
        if rest == 0 or known % rest:
            raise ShapeError(f"cannot reshape {fmt(in_shape)} ({known} elements) into {target}")
        return tuple(known // rest if d == -1 else d for d in target)
    if known is not None and known != num_elements(target):
        raise ShapeError(f"cannot reshape {fmt(in_shape)} ({known} elements) into {fmt(target)}")
    return tuple(target)


def _resolve_partial_reshape(in_shape, target):
    """Target dims known only at run time: TF's rule infers the -1 when the input has exactly
    one unknown dim and the target one run-time dim (``[tf.shape(x)[0], -1]``: they cancel)."""
    out = [None if d in (None, -1) else d for d in target]
    if in_shape is None or target.count(-1) != 1 or target.count(None) != 1 or in_shape.count(None) != 1:
        return tuple(out)
    known_in = num_elements([d for d in in_shape if d is not None])
    known_out = num_elements([d for d in target if d not in (None, -1)])
    if known_out and known_in % known_out == 0:
        out[target.index(-1)] = known_in // known_out
    return tuple(out)


def _reshape_infer(inputs):
    x, target = inputs
    target_values = shape_value(target)
    if target_values is None:
        return [Spec(None if target.shape is None or target.shape[0] is None
                     else (None,) * target.shape[0], x.dtype)]
    return [Spec(_resolve_reshape(x.shape, target_values), x.dtype)]


def _reshape_kernel(xp, x, target):
    return xp.reshape(x, tuple(int(d) for d in target))


defop("Reshape", _reshape_infer, _reshape_kernel,
      lambda op, g: [reshape(g, shape(op.inputs[0])), None])


def reshape(tensor, shape, name=None) -> Tensor:
    """``tensor`` with a new shape; one dim may be -1. ``tf.reshape(x, [-1, 784])``; dims may be
    scalar tensors: ``tf.reshape(x, [tf.shape(x)[0], -1])``."""
    if not is_symbolic(shape) and not (isinstance(shape, (list, tuple)) and any(map(is_symbolic, shape))):
        dims = static_shape(shape)
        shape = constant(np.asarray(dims, np.int32).reshape(len(dims)), dtypes.int32)
    return _out("Reshape", [tensor, shape_tensor(shape)], name=name)


def _transpose_infer(inputs, perm):
    s = inputs[0].shape
    if s is None:
        return [Spec(None, inputs[0].dtype)]
    perm = tuple(reversed(range(len(s)))) if perm is None else perm
    if sorted(perm) != list(range(len(s))):
        raise ShapeError(f"perm {list(perm)} is not a permutation of the axes of {fmt(s)}")
    return [Spec(tuple(s[p] for p in perm), inputs[0].dtype)]


def _transpose_kernel(xp, x, perm):
    return xp.permute_dims(x, tuple(reversed(range(x.ndim))) if perm is None else tuple(perm))


def _transpose_grad(op, g):
    perm = op.attrs["perm"]
    if perm is None:
        return [transpose(g)]
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return [transpose(g, inverse)]


defop("Transpose", _transpose_infer, _transpose_kernel, _transpose_grad)


def transpose(a, perm=None, name="transpose") -> Tensor:
    """Permute the axes; ``perm=None`` reverses them."""
    return _out("Transpose", [a], {"perm": None if perm is None else [int(p) for p in perm]}, name)


# ---- concat / split / stack / unstack --------------------------------------
def _concat_infer(inputs, axis):
    shapes = [i.shape for i in inputs]
    if any(s is None for s in shapes):
        return [Spec(None, inputs[0].dtype)]
    rank_ = len(shapes[0])
    (ax,) = normalize_axis(axis, rank_)
    out = list(shapes[0])
    for s in shapes[1:]:
        if len(s) != rank_ or any(a != b and None not in (a, b)
                                  for i, (a, b) in enumerate(zip(s, out)) if i != ax):
            raise ShapeError(f"cannot concatenate {fmt(shapes[0])} and {fmt(s)} along axis {axis}")
        out[ax] = None if None in (out[ax], s[ax]) else out[ax] + s[ax]
    if any(i.dtype != inputs[0].dtype for i in inputs):
        raise ShapeError(f"concat inputs have different dtypes: {[i.dtype.name for i in inputs]}")
    return [Spec(tuple(out), inputs[0].dtype)]


def _concat_grad(op, g):
    axis = op.attrs["axis"]
    sizes = [t.shape[axis].value for t in op.inputs]
    if None in sizes:  # pieces as long as the inputs turn out to be when run (an unknown batch dim)
        shapes = [shape(t) for t in op.inputs]
        return list(_op("SplitAtShapes", [g, *shapes], {"axis": axis}, name="concat_grad").outputs)
    return split(g, sizes, axis=axis)


def _split_at_shapes_infer(inputs, axis):
    g, shapes = inputs[0], inputs[1:]
    if g.shape is None:
        return [Spec(None, g.dtype)] * len(shapes)
    (ax,) = normalize_axis(axis, len(g.shape))
    known = [None if s.value is None else s.value[ax] for s in shapes]
    return [Spec(g.shape[:ax] + (None if n is None else int(n),) + g.shape[ax + 1:], g.dtype) for n in known]


def _split_at_shapes_kernel(xp, g, *shapes, axis):
    sizes = [int(s[axis]) for s in shapes]
    if sum(sizes) != g.shape[axis]:
        raise ValueError(f"pieces of sizes {sizes} do not add up to dim {axis} of size {g.shape[axis]}")
    return _split_kernel(xp, g, sizes, axis)


def _split_at_shapes_grad(op, *grads):
    return [concat(_with_zeros(op, grads), op.attrs["axis"])] + [None] * (len(op.inputs) - 1)


defop("ConcatV2", _concat_infer, lambda xp, *xs, axis: xp.concat(xs, axis=axis), _concat_grad)


def concat(values, axis, name="concat") -> Tensor:
    """Join tensors along ``axis``. TF 0.x's order ``tf.concat(1, [a, b])`` is taken too."""
    if isinstance(values, (int, np.integer)) and isinstance(axis, (list, tuple)):
        values, axis = axis, values
    values = [values] if is_symbolic(values) else list(values)  # TF: one tensor is a list of one
    if len(values) == 1:
        return identity(values[0], name=name)
    return _out("ConcatV2", values, {"axis": int(axis)}, name)


def _split_infer(inputs, sizes, axis):
    s = inputs[0].shape
    if s is not None:
        (ax,) = normalize_axis(axis, len(s))
        if s[ax] is not None and sum(sizes) != s[ax]:
            raise ShapeError(f"split sizes {sizes} do not add up to dim {ax} of {fmt(s)}")
    return [Spec(None if s is None else s[:ax] + (n,) + s[ax + 1:], inputs[0].dtype) for n in sizes]


def _split_even_infer(inputs, num_split, axis):
    """TF's Split: ``num_split`` equal pieces; an unknown dim stays unknown and is checked when run."""
    s = inputs[0].shape
    if s is None:
        return [Spec(None, inputs[0].dtype)] * num_split
    (ax,) = normalize_axis(axis, len(s))
    if s[ax] is not None and s[ax] % num_split:
        raise ShapeError(f"cannot split dim {ax} of {fmt(s)} into {num_split} equal pieces")
    piece = None if s[ax] is None else s[ax] // num_split
    return [Spec(s[:ax] + (piece,) + s[ax + 1:], inputs[0].dtype)] * num_split


def _split_kernel(xp, x, sizes, axis):
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    index = [slice(None)] * x.ndim
    pieces = []
    for start, n in zip(starts, sizes):
        index[axis] = slice(start, start + n)
        pieces.append(x[tuple(index)])
    return tuple(pieces)


def _split_even_kernel(xp, x, num_split, axis):
    dim = x.shape[axis]
    if dim % num_split:  # a plain error: the executor names the op and the input shape
        raise ValueError(f"dim {axis} of size {dim} cannot be split into {num_split} equal pieces")
    return _split_kernel(xp, x, [dim // num_split] * num_split, axis)


def _with_zeros(op, grads):
    return [zeros_like(out) if g is None else g for out, g in zip(op.outputs, grads)]


def _split_grad(op, *grads):
    return [concat(_with_zeros(op, grads), op.attrs["axis"])]


# TF's two ops: SplitV takes the sizes, Split a count of equal pieces (the dim may be unknown until run)
defop("SplitV", _split_infer, _split_kernel, _split_grad, num_outputs=None)
defop("Split", _split_even_infer, _split_even_kernel, _split_grad, num_outputs=None)
# the gradient of a concat whose inputs' sizes are known only when run: split at their run-time shapes
defop("SplitAtShapes", _split_at_shapes_infer, _split_at_shapes_kernel, _split_at_shapes_grad,
      num_outputs=None)


def split(value, num_or_size_splits, axis=0, name="split") -> list[Tensor]:
    """Split into ``n`` equal pieces or pieces of the given sizes along ``axis``.

    With a count, the dim may be unknown (``(?, 28)``) as in TF: it must divide when the op runs.
    """
    value = convert_to_tensor(value)
    (axis,) = static_axis(axis)  # an int, or a constant tensor (TF's own cells pass one)
    if isinstance(num_or_size_splits, (int, np.integer)):
        if value.shape.ndims is not None:
            (axis,) = normalize_axis(axis, value.shape.ndims)
        return list(_op("Split", [value], {"num_split": int(num_or_size_splits), "axis": axis}, name).outputs)
    sizes = [int(n) for n in num_or_size_splits]
    return list(_op("SplitV", [value], {"sizes": sizes, "axis": axis}, name).outputs)


def _stack_infer(inputs, axis):
    s = inputs[0].shape
    for other in inputs[1:]:
        if other.shape != s and s is not None and other.shape is not None:
            raise ShapeError(f"stack needs equal shapes, got {fmt(s)} and {fmt(other.shape)}")
    if s is None:
        return [Spec(None, inputs[0].dtype)]
    (ax,) = normalize_axis(axis, len(s) + 1)
    return [Spec(s[:ax] + (len(inputs),) + s[ax:], inputs[0].dtype, _stacked_value(inputs))]


def _stacked_value(inputs):
    """What is known of a stack of int scalars: a tuple with None for run-time entries."""
    if not inputs[0].dtype.is_integer or any(i.shape != () for i in inputs):
        return None
    values = tuple(None if i.value is None or isinstance(i.value, tuple) else int(np.asarray(i.value))
                   for i in inputs)
    return None if all(v is None for v in values) else values


defop("Pack", _stack_infer, lambda xp, *xs, axis: xp.stack(xs, axis=axis),
      lambda op, g: unstack(g, axis=op.attrs["axis"]))


def stack(values, axis=0, name="stack") -> Tensor:
    """Stack tensors of one shape along a new axis."""
    return _out("Pack", list(values), {"axis": int(axis)}, name)


def _unstack_infer(inputs, num, axis):
    s = inputs[0].shape
    (ax,) = normalize_axis(axis, len(s))
    return [Spec(s[:ax] + s[ax + 1:], inputs[0].dtype)] * num


defop("Unpack", _unstack_infer,
      lambda xp, x, num, axis: tuple(xp.squeeze(p, axis=axis) for p in _split_kernel(xp, x, [1] * num, axis)),
      lambda op, *gs: [stack(_with_zeros(op, gs), op.attrs["axis"])], num_outputs=None)


def unstack(value, num=None, axis=0, name="unstack") -> list[Tensor]:
    """Split along ``axis`` into ``num`` tensors of one rank less."""
    value = convert_to_tensor(value)
    num = value.shape[axis].value if num is None else num
    if num is None:
        raise ValueError(f"unstack needs num: dim {axis} of {value.shape} is unknown")
    return list(_op("Unpack", [value], {"num": int(num), "axis": int(axis)}, name).outputs)


# ---- squeeze / expand_dims / tile / pad --------------------------------------
def _squeeze_infer(inputs, axis):
    s = inputs[0].shape
    if s is None:
        return [Spec(None, inputs[0].dtype)]
    axes = [i for i, d in enumerate(s) if d == 1] if axis is None else normalize_axis(axis, len(s))
    for ax in axes:
        if s[ax] not in (1, None):
            raise ShapeError(f"cannot squeeze dim {ax} of {fmt(s)}: its size is not 1")
    return [Spec(tuple(d for i, d in enumerate(s) if i not in axes), inputs[0].dtype)]


def _squeeze_kernel(xp, x, axis):
    axes = tuple(i for i, d in enumerate(x.shape) if d == 1) if axis is None else tuple(axis)
    return xp.squeeze(x, axis=axes) if axes else x


def _reshape_like_input(op, g):
    return [reshape(g, shape(op.inputs[0]))]


defop("Squeeze", _squeeze_infer, _squeeze_kernel, _reshape_like_input)


def squeeze(input, axis=None, name=None, squeeze_dims=None) -> Tensor:
    """Remove dims of size 1 (all of them, or those in ``axis``)."""
    axis = squeeze_dims if axis is None else axis
    axis = None if axis is None else [int(a) for a in ((axis,) if isinstance(axis, int) else axis)]
    return _out("Squeeze", [input], {"axis": axis}, name)


def _expand_infer(inputs, axis):
    s = inputs[0].shape
    if s is None:
        return [Spec(None, inputs[0].dtype)]
    (ax,) = normalize_axis(axis, len(s) + 1)
    return [Spec(s[:ax] + (1,) + s[ax:], inputs[0].dtype)]


defop("ExpandDims", _expand_infer, lambda xp, x, axis: xp.expand_dims(x, axis=axis),
      _reshape_like_input)


def expand_dims(input, axis=None, name=None, dim=None) -> Tensor:
    """Insert a dim of size 1 at ``axis`` (TF 1.x's deprecated ``dim=`` too)."""
    if (axis is None) == (dim is None):
        raise ValueError("expand_dims takes exactly one of axis and dim")
    return _out("ExpandDims", [input], {"axis": int(dim if axis is None else axis)}, name)


def _tile_infer(inputs, multiples):
    s = inputs[0].shape
    if s is None:
        return [Spec(None, inputs[0].dtype)]
    if len(multiples) != len(s):
        raise ShapeError(f"tile multiples {multiples} do not match the rank of {fmt(s)}")
    return [Spec(tuple(None if d is None else d * m for d, m in zip(s, multiples)), inputs[0].dtype)]


def _tile_grad_kernel(xp, g, multiples):
    split_shape = []
    for d, m in zip(g.shape, multiples):
        split_shape += [m, d // m]
    summed = xp.sum(xp.reshape(g, tuple(split_shape)), axis=tuple(range(0, 2 * len(multiples), 2)))
    return summed


def _tile_grad_infer(inputs, multiples):
    s = inputs[0].shape
    return [Spec(None if s is None else tuple(None if d is None else d // m for d, m in zip(s, multiples)),
                 inputs[0].dtype)]


defop("Tile", _tile_infer, lambda xp, x, multiples: xp.tile(x, tuple(multiples)),
      lambda op, g: [_out("TileGrad", [g], {"multiples": op.attrs["multiples"]})])
defop("TileGrad", _tile_grad_infer, _tile_grad_kernel,
      lambda op, g: [tile(g, op.attrs["multiples"])])


def tile(input, multiples, name=None) -> Tensor:
    """Repeat ``input`` ``multiples[i]`` times along axis ``i``."""
    return _out("Tile", [input], {"multiples": [int(m) for m in multiples]}, name)


def _pad_infer(inputs, paddings, constant_values):
    s = inputs[0].shape
    if s is None:
        return [Spec(None, inputs[0].dtype)]
    if len(paddings) != len(s):
        raise ShapeError(f"paddings {paddings} do not match the rank of {fmt(s)}")
    return [Spec(tuple(None if d is None else d + a + b for d, (a, b) in zip(s, paddings)),
                 inputs[0].dtype)]


def _pad_kernel(xp, x, paddings, constant_values):
    out_shape = tuple(d + a + b for d, (a, b) in zip(x.shape, paddings))
    out = xp.full(out_shape, constant_values, dtype=x.dtype)
    out[tuple(slice(a, a + d) for d, (a, _) in zip(x.shape, paddings))] = x
    return out


def _pad_grad(op, g):
    keys = tuple(slice(a, -b if b else None) for a, b in op.attrs["paddings"])
    return [strided_slice(g, keys)]


defop("Pad", _pad_infer, _pad_kernel, _pad_grad)


def pad(tensor, paddings, mode="CONSTANT", name=None, constant_values=0) -> Tensor:
    """Pad with ``constant_values``; ``paddings[i] = [before, after]`` for axis ``i``."""
    if mode.upper() != "CONSTANT":
        raise NotImplementedError(f"pad mode {mode!r}: only 'CONSTANT' is supported")
    if isinstance(paddings, Tensor):  # a constant's value (TF also takes paddings computed at run time)
        if paddings.spec.value is None:
            raise NotImplementedError(f"tf.pad with paddings computed when the step runs ({paddings.name}) "
                                      "is not supported by dflow: give them as a list or a constant")
        paddings = paddings.spec.value
    paddings = [[int(a), int(b)] for a, b in np.asarray(paddings).tolist()]
    return _out("Pad", [tensor], {"paddings": paddings, "constant_values": constant_values}, name)


# ---- one_hot -------------------------------------------------------------------
def _one_hot_infer(inputs, depth, on_value, off_value, axis, dtype):
    s = inputs[0].shape
    if not inputs[0].dtype.is_integer:
        raise ShapeError(f"one_hot indices must be integers, got {inputs[0].dtype.name}")
    if s is None:
        return [Spec(None, dtype)]
    ax = len(s) if axis == -1 else axis
    return [Spec(s[:ax] + (depth,) + s[ax:], dtype)]


def _one_hot_kernel(xp, indices, depth, on_value, off_value, axis, dtype):
    classes = xp.arange(depth, dtype=indices.dtype)
    hot = xp.expand_dims(indices, axis=-1) == classes
    out = xp.where(hot, xp.asarray(on_value, dtype=dtype.of(xp)), xp.asarray(off_value, dtype=dtype.of(xp)))
    if axis != -1:
        out = xp.moveaxis(out, -1, axis)
    return out


defop("OneHot", _one_hot_infer, _one_hot_kernel)


def one_hot(indices, depth, on_value=None, off_value=None, axis=None, dtype=None, name=None) -> Tensor:
    """Rows of a ``depth``-wide identity picked by ``indices`` (-1 / out of range gives zeros)."""
    dtype = dtypes.as_dtype(dtype or dtypes.float32)
    attrs = {"depth": int(depth), "on_value": 1 if on_value is None else on_value,
             "off_value": 0 if off_value is None else off_value,
             "axis": -1 if axis is None else int(axis), "dtype": dtype}
    return _out("OneHot", [indices], attrs, name)


# ---- slicing ---------------------------------------------------------------------
def _encode_key(key) -> list:
    items = key if isinstance(key, tuple) else (key,)
    encoded = []
    for item in items:
        if item is Ellipsis:
            encoded.append(["ellipsis"])
        elif item is None:
            encoded.append(["newaxis"])
        elif isinstance(item, slice):
            encoded.append(["slice", item.start, item.stop, item.step])
        elif isinstance(item, int | np.integer):
            encoded.append(["index", int(item)])
        else:
            raise TypeError(
                f"tensor indexing supports ints, slices, ... and None (basic slicing), got {item!r}; "
                "use tf.gather-style ops for tensor indices"
            )
    return encoded


def _decode_key(spec) -> tuple:
    decode = {"ellipsis": lambda: Ellipsis, "newaxis": lambda: None,
              "slice": lambda a, b, c: slice(a, b, c), "index": lambda i: i}
    key = tuple(decode[kind](*args) for kind, *args in spec)
    # x[0] of a matrix means x[0, ...]: NumPy and CuPy fill in the ellipsis, the standard does not
    return key if Ellipsis in key else (*key, Ellipsis)


def _slice_infer(inputs, spec):
    known = _sliced_value(inputs[0], spec)
    if known is not None:
        return known
    s = inputs[0].shape
    if s is None or None in s:
        if s is not None and not any(k == "newaxis" or k == "ellipsis" for k, *_ in spec):
            return [Spec(_sliced_shape_partial(s, spec), inputs[0].dtype)]
        return [Spec(None, inputs[0].dtype)]
    try:
        out = np.empty(s, dtype=np.bool_)[_decode_key(spec)].shape
    except IndexError as e:
        raise ShapeError(f"cannot index {fmt(s)} with {_decode_key(spec)}: {e}") from None
    return [Spec(tuple(out), inputs[0].dtype)]


def _sliced_value(vector, spec):
    """``tf.shape(x)[1]`` of a partly known shape: the static dim (for reshape, zeros...)."""
    if vector.value is None or vector.shape is None or len(vector.shape) != 1 or len(spec) != 1 \
            or spec[0][0] not in ("index", "slice") or not vector.dtype.is_integer:
        return None
    picked = _decode_key(spec)[0]
    values = tuple(None if v is None else int(v) for v in vector.value)[picked]
    if isinstance(picked, int):
        value = None if values is None else np.asarray(values, vector.dtype.as_numpy_dtype)
        return [Spec((), vector.dtype, value)]
    return [Spec((len(values),), vector.dtype, values)]


def _sliced_shape_partial(s, spec):
    out = []
    for dim, (kind, *args) in zip(s, spec):
        if kind == "slice":
            out.append(None if dim is None else len(range(*slice(*args).indices(dim))))
    out.extend(s[len(spec):])
    return tuple(out)


def _slice_grad(op, g):
    return [_out("StridedSliceGrad", [shape(op.inputs[0]), g], {"spec": op.attrs["spec"]})]


def _slice_grad_infer(inputs, spec):
    value = shape_value(inputs[0])
    return [Spec(None if value is None else tuple(value), inputs[1].dtype)]


def _slice_grad_kernel(xp, in_shape, g, spec):
    out = xp.zeros(tuple(int(d) for d in in_shape), dtype=g.dtype)
    # the array API does not take newaxis in an assignment: drop it, and g's unit axes
    key = tuple(k for k in _decode_key(spec) if k is not None)
    out[key] = xp.reshape(g, out[key].shape)
    return out


defop("StridedSlice", _slice_infer, lambda xp, x, spec: x[_decode_key(spec)], _slice_grad)
defop("StridedSliceGrad", _slice_grad_infer, _slice_grad_kernel,
      lambda op, g: [None, strided_slice(g, _decode_key(op.attrs["spec"]))])


def strided_slice(input, key, end=None, strides=None, name="strided_slice", **masks) -> Tensor:
    """``input[key]`` with NumPy basic slicing (what ``tensor[1:, ::2, None]`` builds), or TF's
    form ``tf.strided_slice(x, begin, end, strides)`` with lists of Python ints."""
    if end is not None:
        if any(masks.values()):
            raise ValueError(f"tf.strided_slice's masks ({', '.join(k for k, v in masks.items() if v)}) are "
                             "not supported by dflow: index the tensor instead (x[1:, ..., None])")
        begin, end = list(key), list(end)
        strides = [1] * len(begin) if strides is None else list(strides)
        if not len(begin) == len(end) == len(strides):
            raise ValueError(f"strided_slice: begin {begin}, end {end} and strides {strides} differ "
                             "in length")
        key = tuple(slice(int(b), int(e), int(s)) for b, e, s in zip(begin, end, strides))
    items = key if isinstance(key, tuple) else (key,)
    if any(is_symbolic(item) for item in items):
        return _index_with_tensors(input, items, name)
    return _out("StridedSlice", [input], {"spec": _encode_key(key)}, name)


def _index_with_tensors(input, items: tuple, name) -> Tensor:
    """``x[i]``, ``x[:, i, 1:]`` with scalar integer tensors among the items (a loop's counter,
    as TF's strided slice takes): the basic slicing with those dims kept, then a gather at each."""
    if any(item is Ellipsis for item in items):
        raise TypeError("dflow indexes with a tensor only without an Ellipsis (...): write the slices out")
    axes, axis = [], 0
    for item in items:
        if is_symbolic(item):
            index = convert_to_tensor(item)
            if not index.dtype.is_integer or index.shape.ndims != 0:
                raise TypeError(f"a tensor index must be a scalar integer, got {index.dtype.name} of shape "
                                f"{index.shape}: use tf.gather for several indices")
            axes.append((axis, index))
        if not isinstance(item, int | np.integer):  # an int index drops its dim; the rest keep one
            axis += 1
    kept = tuple(slice(None) if is_symbolic(item) else item for item in items)
    sliced = _out("StridedSlice", [input], {"spec": _encode_key(kept)}, name)
    for axis, index in reversed(axes):  # the last first: earlier axes keep their numbers
        sliced = _out("GatherV2", [sliced, index], {"axis": axis}, "gather")
    return sliced


# ---- broadcast_to, fills -----------------------------------------------------------
def _broadcast_to_infer(inputs):
    target = shape_value(inputs[1])
    return [Spec(None if target is None else tuple(target), inputs[0].dtype)]


def _broadcast_to_kernel(xp, x, target):
    return xp.broadcast_to(x, tuple(int(d) for d in target))


def _broadcast_to_grad(op, g):
    return [sum_to_shape(g, shape(op.inputs[0])), None]


defop("BroadcastTo", _broadcast_to_infer, _broadcast_to_kernel, _broadcast_to_grad)


def sum_to_shape(g, target_shape) -> Tensor:
    """Sum ``g`` over the axes that broadcasting added, giving ``target_shape``."""
    return _out("SumToShape", [g, target_shape])


def _sum_to_shape_kernel(xp, g, target):
    target = tuple(int(d) for d in target)
    if g.shape == target:
        return g
    lead = g.ndim - len(target)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, d in enumerate(target) if d == 1 and g.shape[lead + i] != 1
    )
    if axes == tuple(range(g.ndim - 1)) and xp.isdtype(g.dtype, "real floating"):
        # a channel bias's gradient (relu(conv + b)'s b), or a per-channel factor's (batch norm's)
        return xp.reshape(parallel.sum_rows(xp, g), target)
    return xp.reshape(xp.sum(g, axis=axes), target)


def _sum_to_shape_infer(inputs):
    target = shape_value(inputs[1])
    return [Spec(None if target is None else tuple(target), inputs[0].dtype)]


def _sum_to_shape_grad(op, g):
    return [broadcast_to(g, shape(op.inputs[0])), None]


defop("SumToShape", _sum_to_shape_infer, _sum_to_shape_kernel, _sum_to_shape_grad)


# ---- cast ------------------------------------------------------------------------------------
def _cast_grad(op, g):
    source = op.inputs[0].dtype
    return [cast(g, source) if source.is_floating and g.dtype.is_floating else None]


defop("Cast", lambda inputs, dtype: [Spec(inputs[0].shape, dtype)],
      lambda xp, x, dtype: xp.astype(x, dtype.of(xp)), _cast_grad)


def cast(x, dtype, name=None) -> Tensor:
    """``x`` converted to ``dtype`` (a SparseTensor: its values)."""
    dtype = dtypes.as_dtype(dtype)
    if hasattr(x, "dense_shape"):  # a SparseTensor: the same one of cast values
        return type(x)(x.indices, cast(x.values, dtype, name), x.dense_shape)
    x = convert_to_tensor(x)
    if dtypes.string in (x.dtype, dtype) and x.dtype != dtype:
        raise TypeError(f"tf.cast between {x.dtype!r} and {dtype!r} is not supported (TF has no such "
                        "cast either); dflow does not compute on strings")
    return x if x.dtype == dtype else _out("Cast", [x], {"dtype": dtype}, name)


def broadcast_to(input, shape, name=None) -> Tensor:
    """Broadcast ``input`` to ``shape`` (NumPy rules)."""
    return _out("BroadcastTo", [input, shape_tensor(shape)], name=name)


def _fill_infer(inputs, value, dtype):
    target = shape_value(inputs[0])
    return [Spec(None if target is None else tuple(target), dtype)]


defop("Fill", _fill_infer,
      lambda xp, target, value, dtype: xp.full(tuple(int(d) for d in target), value, dtype=dtype.of(xp)))


def fill(dims, value, name=None, dtype=None) -> Tensor:
    """A tensor of shape ``dims`` (a list, a TensorShape or a tensor such as ``tf.shape(x)``)
    filled with ``value`` (a number, or a scalar tensor)."""
    if is_symbolic(value):
        return _out("BroadcastTo", [value, shape_tensor(dims)], name=name or "Fill")  # value's gradient too
    dtype = dtypes.as_dtype(dtype) if dtype is not None else _infer_dtype(value)
    return _out("Fill", [shape_tensor(dims)], {"value": np.asarray(value).item(), "dtype": dtype}, name)


def zeros(shape, dtype=dtypes.float32, name=None) -> Tensor:
    """A tensor of zeros: ``tf.zeros([2, 3])``, ``tf.zeros(tf.shape(x))``."""
    return fill(shape, 0, name=name or "zeros", dtype=dtype)


def ones(shape, dtype=dtypes.float32, name=None) -> Tensor:
    """A tensor of ones."""
    return fill(shape, 1, name=name or "ones", dtype=dtype)


defop("ZerosLike", same_as_input, lambda xp, x: xp.zeros_like(x), lambda op, g: [None])
defop("OnesLike", same_as_input, lambda xp, x: xp.ones_like(x), lambda op, g: [None])


def zeros_like(tensor, dtype=None, name=None) -> Tensor:
    out = _out("ZerosLike", [tensor], name=name)
    return out if dtype is None else cast(out, dtype)


def ones_like(tensor, dtype=None, name=None) -> Tensor:
    out = _out("OnesLike", [tensor], name=name)
    return out if dtype is None else cast(out, dtype)


def _range_infer(inputs, start, limit, delta, dtype):
    return [Spec((len(np.arange(start, limit, delta)),), dtype)]  # (float bounds too: range(0, 3.0))


defop("Range", _range_infer,
      lambda xp, start, limit, delta, dtype: xp.arange(start, limit, delta, dtype=dtype.of(xp)))


def range_(start, limit=None, delta=1, dtype=None, name="range") -> Tensor:
    """``tf.range(5)``: 0, 1, 2, 3, 4. Exported as ``tf.range``; the bounds may be scalar tensors
    (``tf.range(0, tf.shape(x)[0])``)."""
    if limit is None:
        start, limit = 0, start
    if any(map(is_symbolic, (start, limit, delta))):
        return _tensor_range(start, limit, delta, dtype, name)
    dtype = dtypes.as_dtype(dtype) if dtype is not None else _infer_dtype(start + limit + delta)
    return _out("Range", [], {"start": start, "limit": limit, "delta": delta, "dtype": dtype}, name)


def _tensor_range_infer(inputs):
    for spec in inputs:
        if spec.shape not in (None, ()):
            raise ShapeError(f"range needs scalar start, limit and delta, got shape {fmt(spec.shape)}")
    values = [None if spec.value is None or isinstance(spec.value, tuple) else spec.value.item()
              for spec in inputs]
    length = None if None in values else len(np.arange(*values))
    return [Spec((length,), inputs[0].dtype)]


def _tensor_range_kernel(xp, start, limit, delta):
    as_python = int if "int" in str(start.dtype) else float
    return xp.arange(as_python(start), as_python(limit), as_python(delta), dtype=start.dtype)


defop("RangeFromTensors", _tensor_range_infer, _tensor_range_kernel)


def _tensor_range(start, limit, delta, dtype, name) -> Tensor:
    symbolic = next(convert_to_tensor(v) for v in (start, limit, delta) if is_symbolic(v))
    dtype = dtypes.as_dtype(dtype) if dtype is not None else symbolic.dtype
    bounds = [cast(convert_to_tensor(v), dtype) if is_symbolic(v) else constant(v, dtype)
              for v in (start, limit, delta)]
    return _out("RangeFromTensors", bounds, name=name)


# ---- slice / reverse / linspace ------------------------------------------------------
def _window(begin, size, shape) -> tuple:
    """The slices of ``tf.slice(x, begin, size)`` for an ``x`` of ``shape`` (host ints)."""
    from ..runtime.devices import numpy_namespace, to_namespace

    begin = np.asarray(to_namespace(begin, numpy_namespace)).astype(int).tolist()
    size = np.asarray(to_namespace(size, numpy_namespace)).astype(int).tolist()
    if len(begin) != len(shape) or len(size) != len(shape):
        raise InvalidArgumentError(f"tf.slice: begin {begin} and size {size} must have one entry per "
                                   f"dimension of the input's shape {list(shape)}")
    stops = [dim if n == -1 else b + n for b, n, dim in zip(begin, size, shape)]
    if any(b < 0 or stop > dim or stop < b for b, stop, dim in zip(begin, stops, shape)):
        raise InvalidArgumentError(f"tf.slice: begin {begin} and size {size} reach outside the input's "
                                   f"shape {list(shape)}")
    return tuple(slice(b, stop) for b, stop in zip(begin, stops))


def _slice_infer(inputs):
    x, begin, _ = inputs
    rank = len(x.shape) if x.shape is not None else begin.shape[0] if begin.shape else None
    return [Spec(None if rank is None else (None,) * rank, x.dtype)]


def _slice_grad_kernel(xp, x, begin, size, grad):
    full = xp.zeros(x.shape, dtype=grad.dtype)
    full[_window(begin, size, x.shape)] = grad
    return full


defop("Slice", _slice_infer, lambda xp, x, begin, size: x[_window(begin, size, x.shape)],
      lambda op, g: [_op("SliceGrad", [*op.inputs, g]).outputs[0], None, None])
defop("SliceGrad", lambda inputs: [Spec(inputs[0].shape, inputs[3].dtype)], _slice_grad_kernel)


def slice_(input_, begin, size, name=None) -> Tensor:
    """Exported as ``tf.slice``: ``size[i]`` elements from ``begin[i]`` along each axis (``-1``:
    to the end). Known when the graph is built, it is a strided slice; tensors (an Inception
    crop's ``sample_distorted_bounding_box``) make a ``Slice`` op of unknown dims."""
    if is_symbolic(begin) or is_symbolic(size):
        return _op("Slice", [input_, convert_to_tensor(begin, dtype=dtypes.int32),
                             convert_to_tensor(size, dtype=dtypes.int32)], name=name or "Slice").outputs[0]
    begin, size = [int(b) for b in begin], [int(n) for n in size]
    if len(begin) != len(size):
        raise ValueError(f"tf.slice: begin {begin} and size {size} differ in length")
    key = tuple(slice(b, None if n == -1 else b + n) for b, n in zip(begin, size))
    return strided_slice(input_, key, name=name or "Slice")


def _reverse_infer(inputs, axis):
    s = inputs[0].shape
    if s is not None:
        normalize_axis(axis, len(s))
    return same_as_input(inputs)


defop("ReverseV2", _reverse_infer, lambda xp, x, axis: xp.flip(x, axis=tuple(axis)),
      lambda op, g: [reverse(g, op.attrs["axis"])])


def reverse(tensor, axis, name=None) -> Tensor:
    """``tensor`` reversed along the axes in ``axis``."""
    axis = [int(a) for a in ((axis,) if isinstance(axis, int) else axis)]
    return _out("ReverseV2", [tensor], {"axis": axis}, name)


def _linspace_infer(inputs, num):
    for spec in inputs:
        if spec.shape not in (None, ()):
            raise ShapeError(f"linspace needs scalar start and stop, got shape {fmt(spec.shape)}")
        if not spec.dtype.is_floating:
            raise ShapeError(f"linspace needs float start and stop, got {spec.dtype.name}")
    return [Spec((num,), inputs[0].dtype)]


def _linspace_kernel(xp, start, stop, num):
    return xp.linspace(float(start), float(stop), num, dtype=start.dtype)


defop("LinSpace", _linspace_infer, _linspace_kernel)


def linspace(start, stop, num, name=None) -> Tensor:
    """``num`` evenly spaced values from ``start`` to ``stop`` inclusive: ``tf.linspace(0., 1., 5)``."""
    start = convert_to_tensor(start)
    stop = convert_to_tensor(stop, dtype=None if is_symbolic(stop) else start.dtype)
    return _out("LinSpace", [start, stop], {"num": int(num)}, name)

def space_to_depth(input, block_size: int, name=None, data_format="NHWC") -> Tensor:  # noqa: A002 - TF's
    """Each ``block_size`` x ``block_size`` block of pixels moved into the channels:
    ``[N, H, W, C] -> [N, H / b, W / b, b * b * C]`` (YOLOv2's reorg layer), TF's order. A
    reshape and a transpose, so its gradient is theirs."""
    block, (n, h, w, c) = _blocks(input, block_size, data_format, "space_to_depth")
    if isinstance(h, int) and h % block or isinstance(w, int) and w % block:
        raise ValueError(f"space_to_depth: height and width ({h}, {w}) must be multiples of block_size "
                         f"{block}")
    with get_default_graph().name_scope(name or "SpaceToDepth"):
        tiles = reshape(input, [n, h // block, block, w // block, block, c])
        return reshape(transpose(tiles, [0, 1, 3, 2, 4, 5]), [n, h // block, w // block, c * block * block])


def depth_to_space(input, block_size: int, name=None, data_format="NHWC") -> Tensor:  # noqa: A002 - TF's
    """The inverse of :func:`space_to_depth`: ``[N, H, W, b * b * C] -> [N, H * b, W * b, C]``
    (sub-pixel upsampling)."""
    block, (n, h, w, c) = _blocks(input, block_size, data_format, "depth_to_space")
    if isinstance(c, int) and c % (block * block):
        raise ValueError(f"depth_to_space: the channels ({c}) must be a multiple of block_size^2 "
                         f"({block * block})")
    with get_default_graph().name_scope(name or "DepthToSpace"):
        tiles = reshape(input, [n, h, w, block, block, c // (block * block)])
        return reshape(transpose(tiles, [0, 1, 3, 2, 4, 5]), [n, h * block, w * block, c // (block * block)])


def _blocks(input, block_size, data_format: str, what: str) -> tuple[int, list]:  # noqa: A002
    if data_format != "NHWC":
        raise ValueError(f"{what}: dflow takes data_format='NHWC' only, got {data_format!r}")
    block = int(block_size)
    if block < 2:
        raise ValueError(f"{what}: block_size must be at least 2, got {block_size}")
    input = convert_to_tensor(input)  # noqa: A001
    if input.shape.ndims != 4:
        raise ValueError(f"{what} takes a 4-d NHWC tensor, got shape {input.shape}")
    dims = [d if d is not None else shape(input)[k] for k, d in enumerate(input.shape.as_list())]
    return block, dims


# what tensor conversion and indexing build (graph.py cannot import this module)
register_op_builders(constant=constant, stack=stack, strided_slice=strided_slice)
