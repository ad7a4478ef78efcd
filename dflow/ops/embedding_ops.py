"""Gathers, their scatter-add gradients, candidate samplers and sampled losses (TF's
``array_ops.gather``, ``embedding_ops``, ``candidate_sampling_ops`` and ``nn_impl``'s
``nce_loss``/``sampled_softmax_loss``).

TF's gradient of a gather is an ``IndexedSlices``; dflow's is dense: an
``UnsortedSegmentSum`` of the gathered rows' gradients into a tensor shaped like
the params, so every optimizer (and a parameter server's update op) takes it
unchanged. Rows not looked up get zeros, which plain SGD leaves as they are;
Adam and Adagrad apply their dense rules to every row (TF's sparse rules only
touch the rows looked up).

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     table = tf.constant([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]])
...     rows = tf.nn.embedding_lookup(table, tf.constant([2, 0, 2]))
...     with tf.Session() as sess:
...         sess.run(rows).tolist()
[[4.0, 5.0], [0.0, 1.0], [4.0, 5.0]]
"""

from __future__ import annotations

import math

import numpy as np  # the candidate samplers draw on the host, as TF's CPU kernels do

from .. import dtypes
from ..graph import Tensor, colocate_with, convert_to_tensor, get_default_graph
from ..runtime.devices import numpy_namespace, to_namespace
from . import math_ops
from .array_ops import (
    concat,
    constant,
    expand_dims,
    ones_like,
    reshape,
    shape,
    stop_gradient,
    transpose,
    zeros_like,
)
from .registry import ShapeError, Spec, defop
from .rows import add_rows, check_range, set_rows, table_to_write
from .shape_rules import fmt, normalize_axis
from .state_ops import op_seed

__all__ = [
    "gather", "gather_nd", "boolean_mask", "unsorted_segment_sum", "embedding_lookup", "reverse_sequence",
    "scatter_add", "scatter_sub", "scatter_update", "IndexedSlices", "log_uniform_candidate_sampler",
    "uniform_candidate_sampler", "nce_loss", "sampled_softmax_loss",
]


def _op(op_type, inputs, attrs=None, name=None):
    return get_default_graph().create_op(op_type, inputs, attrs, name=name)


def _out(op_type, inputs, attrs=None, name=None) -> Tensor:
    return _op(op_type, inputs, attrs, name).outputs[0]


def static_dim(tensor, axis):
    """The size of ``tensor``'s dimension ``axis`` known at build time (an int), or None: an int
    whether the shape gives ints or TF's ``Dimension`` objects."""
    shape_ = convert_to_tensor(tensor).shape
    if shape_.ndims is None:
        return None
    dim = shape_[axis]
    return getattr(dim, "value", dim)


def _integer(spec, what):
    if not spec.dtype.is_integer:
        raise ShapeError(f"{what} must be int32 or int64, got {spec.dtype.name}; use tf.cast")


# ---- gather ---------------------------------------------------------------------------------
def _gather_infer(inputs, axis):
    params, indices = inputs
    _integer(indices, "gather indices")
    if params.shape is None or indices.shape is None:
        return [Spec(None, params.dtype)]
    (ax,) = normalize_axis(axis, len(params.shape))
    return [Spec(params.shape[:ax] + indices.shape + params.shape[ax + 1:], params.dtype)]


def _gather_kernel(xp, params, indices, axis):
    axis = axis % params.ndim
    flat = xp.reshape(indices, (-1,))
    check_range(xp, flat, params.shape[axis], "gather index")
    rows = xp.take(params, flat, axis=axis)
    return xp.reshape(rows, params.shape[:axis] + tuple(indices.shape) + params.shape[axis + 1:])


def _gather_grad(op, g):
    """The rows' gradients summed into a dense tensor shaped like the params."""
    params, indices = op.inputs
    axis, rank, index_rank = op.attrs["axis"], params.shape.ndims, indices.shape.ndims
    if rank is None or index_rank is None:
        raise ValueError(f"the gradient of {op.name} needs the ranks of params and indices at build time")
    axis %= rank
    # move the index dims of g to the front: (indices..., params[:axis], params[axis+1:])
    perm = [*range(axis, axis + index_rank), *range(axis), *range(axis + index_rank, rank + index_rank - 1)]
    moved = g if axis == 0 else transpose(g, perm)
    # beside the params (on a parameter server: the variable's task), so only the rows'
    # gradients cross the network, not a dense table
    with colocate_with(params.op):
        rows = static_dim(params, axis)
        rows = shape(params)[axis] if rows is None else rows
        summed = unsorted_segment_sum(moved, indices, rows)
    if axis == 0:
        return [summed, None]
    back = [*range(1, axis + 1), 0, *range(axis + 1, rank)]
    return [transpose(summed, back), None]


defop("GatherV2", _gather_infer, _gather_kernel, _gather_grad)


def gather(params, indices, validate_indices=None, name=None, axis=0) -> Tensor:
    """Slices of ``params`` along ``axis`` at ``indices``: ``tf.gather(table, [2, 0])``.

    Out-of-range indices fail at run time, as on TF's CPU. The gradient with
    respect to ``params`` is dense (see the module docstring).
    """
    params = convert_to_tensor(params)
    indices = convert_to_tensor(indices)
    return _out("GatherV2", [params, indices], {"axis": int(axis)}, name)


# ---- boolean_mask ---------------------------------------------------------------------------------
def _boolean_mask_infer(inputs):
    tensor, mask = inputs
    if mask.dtype != dtypes.bool:
        raise ShapeError(f"boolean_mask's mask must be bool, got {mask.dtype.name}")
    if tensor.shape is None or mask.shape is None:
        return [Spec(None, tensor.dtype)]
    k = len(mask.shape)
    if k == 0 or k > len(tensor.shape) or any(m is not None and t is not None and m != t
                                                for m, t in zip(mask.shape, tensor.shape)):
        raise ShapeError(f"boolean_mask's mask of shape {list(mask.shape)} must match the first dims of the "
                         f"tensor's shape {list(tensor.shape)}")
    return [Spec((None, *tensor.shape[k:]), tensor.dtype)]


def _boolean_mask_grad_kernel(xp, grad, mask, like):
    full = xp.zeros(like.shape, dtype=grad.dtype)
    full[mask] = grad
    return full


defop("BooleanMask", _boolean_mask_infer, lambda xp, tensor, mask: tensor[mask],
      lambda op, g: [_out("BooleanMaskGrad", [g, op.inputs[1], op.inputs[0]]), None])
defop("BooleanMaskGrad", lambda inputs: [Spec(inputs[2].shape, inputs[0].dtype)], _boolean_mask_grad_kernel)


def boolean_mask(tensor, mask, name="boolean_mask", axis=None) -> Tensor:
    """The entries of ``tensor`` where ``mask`` (a bool tensor over its first dims, or over the
    dims from ``axis``) is true, in order: ``tf.boolean_mask(losses, lengths_mask)``."""
    tensor, mask = convert_to_tensor(tensor), convert_to_tensor(mask)
    axis = 0 if axis is None else int(axis)
    if axis == 0:
        return _out("BooleanMask", [tensor, mask], name=name)
    rank = tensor.shape.ndims
    if rank is None or mask.shape.ndims is None:
        raise ValueError("boolean_mask along an axis other than 0 needs the ranks of tensor and mask")
    moved = [*range(axis, axis + mask.shape.ndims), *range(axis), *range(axis + mask.shape.ndims, rank)]
    picked = _out("BooleanMask", [transpose(tensor, moved), mask], name=name)
    back = [*range(1, axis + 1), 0, *range(axis + 1, rank - mask.shape.ndims + 1)]
    return transpose(picked, back)


# ---- gather_nd ------------------------------------------------------------------------------------
def _gather_nd_infer(inputs):
    params, indices = inputs
    _integer(indices, "gather_nd indices")
    if params.shape is None or indices.shape is None or indices.shape[-1] is None:
        return [Spec(None, params.dtype)]
    depth = indices.shape[-1]
    if depth > len(params.shape):
        raise ShapeError(f"indices of shape {fmt(indices.shape)} index {depth} dims of params of shape "
                         f"{fmt(params.shape)}, which has only {len(params.shape)}")
    return [Spec(indices.shape[:-1] + params.shape[depth:], params.dtype)]


def _gather_nd_kernel(xp, params, indices):
    depth = indices.shape[-1]
    outer, inner = params.shape[:depth], params.shape[depth:]
    linear = xp.zeros(indices.shape[:-1], dtype=indices.dtype)
    for k in range(depth):  # row-major position of each index tuple among the outer dims
        check_range(xp, xp.reshape(indices[..., k], (-1,)), outer[k], f"gather_nd index (dim {k})")
        linear = linear * outer[k] + indices[..., k]
    rows = xp.reshape(params, (-1,) + tuple(inner))
    return xp.reshape(xp.take(rows, xp.reshape(linear, (-1,)), axis=0), tuple(indices.shape[:-1]) + inner)


def _gather_nd_grad(op, g):
    """The picked slices' gradients summed into the params' shape, by their row-major position."""
    params, indices = op.inputs
    depth = static_dim(indices, -1)
    outer = [static_dim(params, k) for k in range(depth or 0)]
    if depth is None or None in outer or params.shape.ndims is None:
        raise ValueError(f"the gradient of {op.name} needs the indexed dims of params at build time")
    strides = [math.prod(outer[k + 1:]) for k in range(depth)]
    linear = math_ops.reduce_sum(indices * constant(strides, indices.dtype), -1)
    with colocate_with(params.op):
        summed = unsorted_segment_sum(g, linear, math.prod(outer))
        return [reshape(summed, shape(params)), None]


defop("GatherNd", _gather_nd_infer, _gather_nd_kernel, _gather_nd_grad)


def gather_nd(params, indices, name=None) -> Tensor:
    """Slices of ``params`` at index tuples: ``indices[..., k]`` indexes dim ``k``.

    >>> import dflow as tf
    >>> with tf.Graph().as_default():
    ...     outputs = tf.reshape(tf.cast(tf.range(12), tf.float32), [2, 3, 2])  # [batch, time, depth]
    ...     last = tf.gather_nd(outputs, tf.stack([[0, 1], [2, 1]], axis=1))  # example 0 step 2, 1 step 1
    ...     tf.Session().run(last).tolist()
    [[4.0, 5.0], [8.0, 9.0]]
    """
    return _out("GatherNd", [convert_to_tensor(params), convert_to_tensor(indices)], name=name)


# ---- unsorted_segment_sum -----------------------------------------------------------------------
def _segment_infer(inputs):
    data, ids, num = inputs
    _integer(ids, "segment_ids")
    count = None if num.value is None else int(num.value)
    if data.shape is None or ids.shape is None:
        return [Spec(None, data.dtype)]
    prefix = data.shape[:len(ids.shape)]
    if len(data.shape) < len(ids.shape) or any(
            a is not None and b is not None and a != b for a, b in zip(prefix, ids.shape)):
        raise ShapeError(f"segment_ids of shape {fmt(ids.shape)} must be a prefix of the data's "
                         f"shape {fmt(data.shape)}")
    return [Spec((count,) + data.shape[len(ids.shape):], data.dtype)]


def _segment_sum_kernel(xp, data, ids, num_segments):
    count = int(num_segments)
    flat_ids = xp.reshape(ids, (-1,))
    rest = data.shape[ids.ndim:]
    rows = xp.reshape(data, (flat_ids.shape[0], -1))
    if flat_ids.shape[0] and bool(xp.any(flat_ids >= count)):
        raise ValueError(f"segment id {int(xp.max(flat_ids))} is not below num_segments = {count}")
    keep = flat_ids >= 0  # TF drops the rows of negative ids
    out = xp.zeros((count, rows.shape[1]), dtype=data.dtype)
    scatter_add = getattr(getattr(xp, "add", None), "at", None)  # NumPy's and CuPy's ufunc.at
    if scatter_add is not None:
        # (not the compiled row add of the scatters: in word2vec's Adam step, into a fresh 50,000-row
        # table, the step ran 1.25x slower with it, for reasons not found; standalone they are even)
        scatter_add(out, flat_ids[keep], rows[keep])
    else:  # the array API has no scatter: a one-hot matmul gives the same sums
        onehot = xp.astype(flat_ids[:, None] == xp.arange(count, dtype=flat_ids.dtype)[None, :], data.dtype)
        out = xp.matmul(xp.matrix_transpose(onehot), rows)
    return xp.reshape(out, (count,) + tuple(rest))


def _segment_sum_grad(op, g):
    data, ids, _ = op.inputs
    safe_ids = math_ops.maximum(ids, 0)
    rows = gather(g, safe_ids)
    kept = math_ops.cast(ids >= 0, g.dtype)
    trailing = data.shape.ndims - ids.shape.ndims if data.shape.ndims is not None else None
    if trailing is None:
        raise ValueError(f"the gradient of {op.name} needs the rank of its data at build time")
    for _ in range(trailing):
        kept = expand_dims(kept, -1)
    return [rows * kept, None, None]


defop("UnsortedSegmentSum", _segment_infer, _segment_sum_kernel, _segment_sum_grad)


def unsorted_segment_sum(data, segment_ids, num_segments, name=None) -> Tensor:
    """``out[k] = sum of data[i] where segment_ids[i] == k``, for ``k < num_segments``;
    rows whose id is negative are dropped.

    >>> import dflow as tf
    >>> with tf.Graph().as_default():
    ...     tf.Session().run(tf.unsorted_segment_sum([[1.0], [2.0], [3.0]], [1, 0, 1], 2)).tolist()
    [[2.0], [4.0]]
    """
    data = convert_to_tensor(data)
    segment_ids = convert_to_tensor(segment_ids)
    num_segments = convert_to_tensor(num_segments, dtype=None if isinstance(num_segments, Tensor)
                                     else segment_ids.dtype)
    return _out("UnsortedSegmentSum", [data, segment_ids, num_segments], name=name)


class IndexedSlices:
    """TF's sparse form of a tensor: ``values`` (rows) at ``indices`` of a tensor of
    ``dense_shape``, repeated indices adding up. dflow's gradients are dense tensors (a lookup's
    is a scatter of its rows, which the optimizers and ``clip_by_global_norm`` treat as TF treats
    its ``IndexedSlices``), so ``isinstance(grad, tf.IndexedSlices)`` in a script is False and its
    dense branch runs; one made by a script converts to its dense tensor wherever a tensor goes.

    >>> import dflow as tf
    >>> with tf.Graph().as_default():
    ...     rows = tf.IndexedSlices(tf.constant([[1.0], [2.0]]), tf.constant([2, 0]), tf.constant([3, 1]))
    ...     tf.Session().run(tf.convert_to_tensor(rows)).tolist()
    [[2.0], [0.0], [1.0]]
    """

    def __init__(self, values, indices, dense_shape=None):
        self.values, self.indices, self.dense_shape = values, indices, dense_shape
        self._dense = None

    @property
    def dtype(self):
        return self.values.dtype

    @property
    def name(self) -> str:
        return self.values.name

    def _as_graph_element(self) -> Tensor:
        if self._dense is None:
            if self.dense_shape is None:
                raise ValueError("an IndexedSlices without a dense_shape has no dense form: give it one")
            dense_shape = convert_to_tensor(self.dense_shape)
            rows = unsorted_segment_sum(self.values, self.indices, dense_shape[0])
            self._dense = reshape(rows, dense_shape)
        return self._dense


# ---- scatter updates of a variable's rows ---------------------------------------------------------
def _scatter_infer(inputs, var):
    ref, indices, updates = inputs
    _integer(indices, "scatter indices")
    if updates.dtype != ref.dtype:
        raise ShapeError(f"updates are {updates.dtype.name}, variable {var} is {ref.dtype.name}")
    if None not in (ref.shape, indices.shape, updates.shape) and \
            len(updates.shape) != len(indices.shape) + len(ref.shape) - 1:
        raise ShapeError(f"updates of shape {fmt(updates.shape)} must be indices' shape "
                         f"{fmt(indices.shape)} + the rows' shape {fmt(ref.shape[1:])} of variable {var}")
    return [Spec(ref.shape, ref.dtype)]


def _scatter_kernel(combine):
    def kernel(state, xp, ref, indices, updates, var):
        with state.updating(ref):
            in_place = state.held_only_here(ref)
            old = state.read_variable(ref)
            ids = xp.reshape(indices, (-1,))
            check_range(xp, ids, old.shape[0], f"scatter index into {var}")
            rows = xp.reshape(updates, (ids.shape[0],) + tuple(old.shape[1:]))
            new = combine(xp, table_to_write(xp, old, in_place), ids, xp.astype(rows, old.dtype))
            state.write_variable(ref, new)
            return new

    return kernel


# (updates=True: a step runs them after its ops that read the variable, as the optimizers' updates)
defop("ScatterAdd", _scatter_infer, _scatter_kernel(add_rows), stateful=True, updates=True)
defop("ScatterSub", _scatter_infer, _scatter_kernel(lambda xp, t, ids, rows: add_rows(xp, t, ids, rows, -1)),
      stateful=True, updates=True)
defop("ScatterUpdate", _scatter_infer, _scatter_kernel(set_rows), stateful=True, updates=True)


def _scatter(op_type, ref, indices, updates, name):
    from .state_ops import ref_of

    tensor, var = ref_of(ref)
    updates = convert_to_tensor(updates, dtype=None if isinstance(updates, Tensor) else tensor.dtype)
    return _out(op_type, [tensor, convert_to_tensor(indices), updates], {"var": var}, name)


def scatter_add(ref, indices, updates, use_locking=False, name=None) -> Tensor:
    """``ref[indices[i]] += updates[i]`` (repeated indices add up); the result is the new value."""
    return _scatter("ScatterAdd", ref, indices, updates, name)


def scatter_sub(ref, indices, updates, use_locking=False, name=None) -> Tensor:
    """``ref[indices[i]] -= updates[i]`` (repeated indices add up); the result is the new value."""
    return _scatter("ScatterSub", ref, indices, updates, name)


def scatter_update(ref, indices, updates, use_locking=False, name=None) -> Tensor:
    """``ref[indices[i]] = updates[i]``; the result is the new value."""
    return _scatter("ScatterUpdate", ref, indices, updates, name)


# ---- embedding_lookup -------------------------------------------------------------------------
def embedding_lookup(params, ids, partition_strategy="mod", name=None, validate_indices=True,
                     max_norm=None) -> Tensor:
    """Rows of an embedding table: ``tf.nn.embedding_lookup(embeddings, train_inputs)``.

    ``params`` is one tensor/variable or a list of shards; with a list, id ``i``
    lives in shard ``i % n`` at row ``i // n`` (``partition_strategy='mod'``) or in
    contiguous blocks (``'div'``). ``max_norm`` clips each looked-up row's L2 norm.
    """
    shards = list(params) if isinstance(params, list | tuple) else [params]
    if not shards:
        raise ValueError("embedding_lookup needs at least one params tensor")
    if partition_strategy not in ("mod", "div"):
        raise ValueError(f"partition_strategy must be 'mod' or 'div', got {partition_strategy!r}")
    with get_default_graph().name_scope(name or "embedding_lookup"):
        ids = convert_to_tensor(ids)
        if len(shards) == 1:
            table = convert_to_tensor(shards[0])
            with colocate_with(table):  # as TF: on a parameter server only the rows travel
                rows = gather(table, ids)
        else:
            rows = _sharded_lookup(shards, ids, partition_strategy)
        return rows if max_norm is None else _clip_rows(rows, ids, max_norm)


def _shard_ids_kernel(xp, ids, sizes, strategy):
    """Each id's shard and row in it: ``'mod'`` deals ids round-robin, ``'div'`` in contiguous
    blocks, the first ``total % n`` shards holding one extra id (TF's rules)."""
    n, total = len(sizes), sum(sizes)
    if strategy == "mod":
        return ids % n, ids // n
    per, extra = divmod(total, n)
    in_big = ids < extra * (per + 1)
    owner = xp.where(in_big, ids // (per + 1), (ids - extra) // max(per, 1))
    return owner, xp.where(in_big, ids % (per + 1), (ids - extra) % max(per, 1))


defop("EmbeddingShardIds", lambda inputs, sizes, strategy: [inputs[0], inputs[0]], _shard_ids_kernel,
      num_outputs=2, gpu=False)


def _sharded_lookup(shards, ids, strategy):
    """Each shard's rows for every id, kept where the id lives in that shard (one gather per
    shard, so the gradient reaches each shard through its own gather)."""
    shards = [convert_to_tensor(s) for s in shards]
    sizes = [static_dim(s, 0) for s in shards]
    if None in sizes:
        raise ValueError("embedding_lookup over a list of params needs each shard's first dim at build time")
    owner, row = _op("EmbeddingShardIds", [ids], {"sizes": sizes, "strategy": strategy}).outputs
    out = None
    for p, shard in enumerate(shards):
        mine = math_ops.equal(owner, p)
        with colocate_with(shard):
            picked = gather(shard, math_ops.where(mine, row, math_ops.multiply(row, 0)))  # 0: any valid row
        mask = math_ops.cast(mine, picked.dtype)
        for _ in range((shard.shape.ndims or 1) - 1):
            mask = expand_dims(mask, -1)
        out = picked * mask if out is None else out + picked * mask
    return out


def _clip_rows(rows, ids, max_norm):
    axes = list(range(ids.shape.ndims, rows.shape.ndims))
    norm = math_ops.sqrt(math_ops.reduce_sum(math_ops.square(rows), axes, keepdims=True))
    return rows * math_ops.minimum(1.0, max_norm / math_ops.maximum(norm, 1e-12))


# ---- reverse_sequence ---------------------------------------------------------------------------
def _reverse_sequence_infer(inputs, seq_axis, batch_axis):
    _integer(inputs[1], "seq_lengths")
    return [inputs[0]._replace(value=None)]


def _reverse_sequence_kernel(xp, x, lengths, seq_axis, batch_axis):
    """Example ``b``'s first ``lengths[b]`` steps reversed, the rest left in place."""
    steps = x.shape[seq_axis]
    t = xp.arange(steps, dtype=lengths.dtype)[None, :]
    n = lengths[:, None]
    source = xp.where(t < n, n - 1 - t, t)  # (batch, steps): which step each slot takes
    moved = xp.permute_dims(x, _front(x.ndim, batch_axis, seq_axis))
    flat = xp.reshape(moved, (moved.shape[0] * steps, -1))
    offsets = xp.arange(moved.shape[0], dtype=lengths.dtype)[:, None] * steps
    taken = xp.take(flat, xp.reshape(source + offsets, (-1,)), axis=0)
    taken = xp.reshape(taken, moved.shape)
    return xp.permute_dims(taken, _inverse(_front(x.ndim, batch_axis, seq_axis)))


def _front(rank, batch_axis, seq_axis):
    return [batch_axis, seq_axis, *[i for i in range(rank) if i not in (batch_axis, seq_axis)]]


def _inverse(perm):
    out = [0] * len(perm)
    for i, p in enumerate(perm):
        out[p] = i
    return out


defop("ReverseSequence", _reverse_sequence_infer, _reverse_sequence_kernel,
      lambda op, g: [reverse_sequence(g, op.inputs[1], **op.attrs), None])


def reverse_sequence(input, seq_lengths, seq_axis=None, batch_axis=None, name=None,
                     seq_dim=None, batch_dim=None) -> Tensor:
    """Reverse the first ``seq_lengths[b]`` entries along ``seq_axis`` of each example ``b``."""
    seq_axis = seq_dim if seq_axis is None else seq_axis
    batch_axis = (batch_dim or 0) if batch_axis is None else batch_axis
    if seq_axis is None:
        raise ValueError("reverse_sequence needs seq_axis (or the deprecated seq_dim)")
    x = convert_to_tensor(input)
    rank = x.shape.ndims
    if rank is None:
        raise ValueError("reverse_sequence needs the input's rank at build time")
    (seq_axis,), (batch_axis,) = normalize_axis(seq_axis, rank), normalize_axis(batch_axis, rank)
    return _out("ReverseSequence", [x, seq_lengths], {"seq_axis": seq_axis, "batch_axis": batch_axis},
                name)


# ---- candidate samplers ------------------------------------------------------------------------
def _sampler_infer(inputs, num_true, num_sampled, unique, range_max, seed, distribution):
    true_classes = inputs[0]
    _integer(true_classes, "true_classes")
    if true_classes.shape is not None and (len(true_classes.shape) != 2 or
                                           true_classes.shape[1] not in (None, num_true)):
        raise ShapeError(f"true_classes must be [batch_size, num_true={num_true}], "
                         f"got {fmt(true_classes.shape)}")
    if unique and num_sampled > range_max:
        raise ShapeError(f"cannot draw {num_sampled} unique classes out of range_max={range_max}")
    batch = None if true_classes.shape is None else true_classes.shape[0]
    return [Spec((num_sampled,), dtypes.int64), Spec((batch, num_true), dtypes.float32),
            Spec((num_sampled,), dtypes.float32)]


def _probability(classes, range_max, distribution):
    classes = np.asarray(classes, dtype=np.float64)
    if distribution == "log_uniform":  # Zipf: P(k) = log((k + 2) / (k + 1)) / log(range_max + 1)
        return np.log((classes + 2.0) / (classes + 1.0)) / math.log(range_max + 1.0)
    return np.full(classes.shape, 1.0 / range_max)


def _draw(rng, count, range_max, distribution):
    if distribution == "log_uniform":  # inverse CDF of the Zipf law above, as TF's LogUniformSampler
        values = np.exp(rng.random(count) * math.log(range_max + 1.0)) - 1.0
        return values.astype(np.int64) % range_max
    return rng.integers(0, range_max, count)


def _expected_count(p, num_sampled, num_tries):
    """TF's rule: ``p * num_sampled`` when every try was kept, else the chance that a class
    turns up in ``num_tries`` independent tries."""
    if num_tries == num_sampled:
        return p * num_sampled
    return -np.expm1(num_tries * np.log1p(-p))


def _sampler_kernel(state, xp, true_classes, num_true, num_sampled, unique, range_max, seed,
                    distribution):
    rng = state.random_generator(seed)
    if unique:
        picked, tries = [], 0
        seen = set()
        while len(picked) < num_sampled:
            for value in _draw(rng, num_sampled, range_max, distribution).tolist():
                tries += 1
                if value not in seen:
                    seen.add(value)
                    picked.append(value)
                    if len(picked) == num_sampled:
                        break
        sampled = np.asarray(picked, dtype=np.int64)
    else:
        sampled, tries = _draw(rng, num_sampled, range_max, distribution).astype(np.int64), num_sampled
    classes = np.asarray(to_namespace(true_classes, numpy_namespace))  # CuPy's come to the host
    true_expected = _expected_count(_probability(classes, range_max, distribution), num_sampled, tries)
    sampled_expected = _expected_count(_probability(sampled, range_max, distribution), num_sampled, tries)
    return (xp.asarray(sampled), xp.asarray(true_expected.astype(np.float32)),
            xp.asarray(sampled_expected.astype(np.float32)))


defop("CandidateSampler", _sampler_infer, _sampler_kernel, stateful=True, num_outputs=3, gpu=False)


def _candidate_sampler(distribution, true_classes, num_true, num_sampled, unique, range_max, seed,
                       name):
    true_classes = convert_to_tensor(true_classes)
    attrs = {"num_true": int(num_true), "num_sampled": int(num_sampled), "unique": bool(unique),
             "range_max": int(range_max), "seed": op_seed(seed), "distribution": distribution}
    return tuple(_op("CandidateSampler", [true_classes], attrs, name).outputs)


def log_uniform_candidate_sampler(true_classes, num_true, num_sampled, unique, range_max, seed=None,
                                  name=None):
    """``num_sampled`` classes drawn from the Zipfian ``P(k) = log((k+2)/(k+1)) / log(range_max+1)``
    (for vocabularies sorted by decreasing frequency), new on every run.

    Returns ``(sampled_candidates, true_expected_count, sampled_expected_count)``; with
    ``unique=True`` draws repeat until ``num_sampled`` distinct classes are found, and the
    expected counts account for the tries that took, as in TF.
    """
    return _candidate_sampler("log_uniform", true_classes, num_true, num_sampled, unique, range_max,
                              seed, name)


def uniform_candidate_sampler(true_classes, num_true, num_sampled, unique, range_max, seed=None,
                              name=None):
    """Like :func:`log_uniform_candidate_sampler` with every class equally likely."""
    return _candidate_sampler("uniform", true_classes, num_true, num_sampled, unique, range_max,
                              seed, name)


# ---- sampled losses -----------------------------------------------------------------------------
def _sampled_logits(weights, biases, labels, inputs, num_sampled, num_classes, num_true,
                    sampled_values, subtract_log_q, remove_accidental_hits, partition_strategy, seed):
    """``(logits, labels)`` of shape ``[batch, num_true + num_sampled]``: the true classes'
    logits then the sampled ones', each less ``log(expected count)`` (TF's ``_compute_sampled_logits``)."""
    labels = math_ops.cast(labels, dtypes.int64)
    if labels.shape.ndims == 1:
        labels = expand_dims(labels, 1)
    if sampled_values is None:
        sampled_values = log_uniform_candidate_sampler(labels, num_true, num_sampled, True,
                                                       num_classes, seed)
    sampled, true_expected, sampled_expected = (stop_gradient(v) for v in sampled_values)
    sampled = math_ops.cast(sampled, dtypes.int64)
    flat_labels = reshape(labels, [-1])
    # one lookup per table for the true and the sampled classes (sampled last: their count is
    # static), so each table's gradient is one scatter-add, not the sum of two dense tensors
    all_ids = concat([flat_labels, sampled], 0)
    all_w = embedding_lookup(weights, all_ids, partition_strategy)
    all_b = embedding_lookup(biases, all_ids, partition_strategy)
    true_w, sampled_w = all_w[:-num_sampled], all_w[-num_sampled:]  # (batch*num_true, dim), (S, dim)
    true_b, sampled_b = all_b[:-num_sampled], all_b[-num_sampled:]
    dim = static_dim(inputs, -1) or static_dim(true_w, -1)
    true_w = reshape(true_w, [-1, num_true, dim])
    true_logits = math_ops.reduce_sum(expand_dims(inputs, 1) * true_w, 2) + reshape(true_b, [-1, num_true])
    sampled_logits = math_ops.matmul(inputs, sampled_w, transpose_b=True) + sampled_b
    if remove_accidental_hits:
        sampled_logits = sampled_logits + _accidental_hit_penalty(labels, sampled, sampled_logits.dtype)
    if subtract_log_q:
        true_logits = true_logits - math_ops.log(math_ops.cast(true_expected, true_logits.dtype))
        sampled_logits = sampled_logits - math_ops.log(math_ops.cast(sampled_expected, true_logits.dtype))
    logits = concat([true_logits, sampled_logits], 1)
    # (OnesLike and ZerosLike pass no gradient back: the targets are not a path to the weights,
    # and no step computes the loss's gradient with respect to them)
    true_targets = ones_like(true_logits) if num_true == 1 else ones_like(true_logits) / num_true
    return logits, concat([true_targets, zeros_like(sampled_logits)], 1)


def _accidental_hit_penalty(labels, sampled, dtype):
    """``-FLOAT_MAX`` where a sampled class is one of the example's true classes, else 0."""
    hits = math_ops.equal(expand_dims(labels, 2), reshape(sampled, [1, 1, -1]))  # (batch, true, sampled)
    hit = math_ops.reduce_max(math_ops.cast(hits, dtype), axis=1)
    return hit * constant(-3.4028234663852886e38, dtype)


def _check_loss_args(what, weights, labels, inputs, num_sampled, num_classes):
    if weights is None or labels is None or inputs is None:
        raise ValueError(f"{what} needs weights, biases, labels and inputs (call it with keywords)")
    if int(num_sampled) < 1 or int(num_classes) < 1:
        raise ValueError(f"{what}: num_sampled and num_classes must be positive, "
                         f"got {num_sampled} and {num_classes}")


def nce_loss(weights, biases, labels, inputs, num_sampled, num_classes, num_true=1,
             sampled_values=None, remove_accidental_hits=False, partition_strategy="mod",
             name="nce_loss", seed=None) -> Tensor:
    """Noise-contrastive estimation loss per example (shape ``[batch]``): a logistic
    regression of the true classes against ``num_sampled`` classes drawn from the
    log-uniform sampler (or ``sampled_values``).

    >>> import dflow as tf
    >>> with tf.Graph().as_default():
    ...     nce_w, nce_b = tf.Variable(tf.zeros([500, 8])), tf.Variable(tf.zeros([500]))
    ...     embed, y = tf.zeros([4, 8]), tf.constant([[1], [2], [3], [4]], tf.int64)
    ...     loss = tf.reduce_mean(tf.nn.nce_loss(weights=nce_w, biases=nce_b, labels=y, inputs=embed,
    ...                                          num_sampled=16, num_classes=500))
    ...     loss.shape.as_list()
    []
    """
    _check_loss_args("nce_loss", weights, labels, inputs, num_sampled, num_classes)
    with get_default_graph().name_scope(name):
        inputs = convert_to_tensor(inputs)
        logits, targets = _sampled_logits(
            weights, biases, convert_to_tensor(labels), inputs, int(num_sampled), int(num_classes),
            int(num_true), sampled_values, True, remove_accidental_hits, partition_strategy, seed)
        from .nn_ops import sigmoid_cross_entropy_with_logits

        losses = sigmoid_cross_entropy_with_logits(labels=targets, logits=logits)
        return math_ops.reduce_sum(losses, 1)


def sampled_softmax_loss(weights, biases, labels, inputs, num_sampled, num_classes, num_true=1,
                         sampled_values=None, remove_accidental_hits=True, partition_strategy="mod",
                         name="sampled_softmax_loss", seed=None) -> Tensor:
    """Softmax cross-entropy over the true classes and ``num_sampled`` sampled ones, per
    example (shape ``[batch]``); a cheap training-time stand-in for the full softmax."""
    _check_loss_args("sampled_softmax_loss", weights, labels, inputs, num_sampled, num_classes)
    with get_default_graph().name_scope(name):
        inputs = convert_to_tensor(inputs)
        logits, targets = _sampled_logits(
            weights, biases, convert_to_tensor(labels), inputs, int(num_sampled), int(num_classes),
            int(num_true), sampled_values, True, remove_accidental_hits, partition_strategy, seed)
        from .nn_ops import softmax_cross_entropy_with_logits_v2

        return softmax_cross_entropy_with_logits_v2(labels=stop_gradient(targets), logits=logits)
