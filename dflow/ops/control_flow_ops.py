"""``tf.cond``: one of two branches, chosen when the step runs.

Each branch function is called once, when the graph is built, in the default graph (so it
reads the tensors and variables around it as any TF 1.x code does); the ops it makes, and
only those its results need, become a traced function (``{"nodes", "args", "outputs"}``, plain
data, as a dataset's ``map`` function). One ``Cond`` op takes the predicate and every tensor
the branches read from outside; when it runs, it runs the chosen branch's function alone, so
an update inside a branch (batch norm's moving averages under ``is_training``) happens only
when that branch is taken.

A ``Cond`` also outputs every tensor its branches make (``None`` for the branch not taken):
its gradient is another ``Cond`` whose branches differentiate the forward ones, reading the
forward values from those outputs rather than computing them again (a dropout mask in a
branch is the one the forward pass drew).

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     x = tf.constant(3.0)
...     training = tf.placeholder(tf.bool, [])
...     y = tf.cond(training, lambda: x * x, lambda: x + 1.0)
...     (dy,) = tf.gradients(y, [x])
...     with tf.Session() as sess:
...         [[float(v) for v in sess.run([y, dy], {training: t})] for t in (True, False)]
[[9.0, 6.0], [4.0, 1.0]]
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy

from .. import dtypes
from ..graph import Tensor, convert_to_tensor, get_default_graph
from ..runtime.executor import run_nested
from . import math_ops
from .array_ops import identity, placeholder, zeros_like
from .registry import Spec, defop
from .tensor_array_ops import TensorArray

__all__ = ["cond", "case", "map_fn", "while_loop"]


def cond(pred, true_fn: Callable | None = None, false_fn: Callable | None = None, strict: bool = False,
         name: str | None = None, fn1: Callable | None = None, fn2: Callable | None = None):
    """``true_fn()`` where the boolean scalar ``pred`` is true when the step runs, else
    ``false_fn()``; both return the same structure (a tensor, or nested lists and tuples of
    them) of the same dtypes. A one-element list comes back as its element unless ``strict``.
    (``fn1``/``fn2``: TF 1.x's older names.)"""
    true_fn = fn1 if true_fn is None else true_fn
    false_fn = fn2 if false_fn is None else false_fn
    if not callable(true_fn) or not callable(false_fn):
        raise TypeError("cond needs two callables, true_fn and false_fn (e.g. lambda: x * 2)")
    if isinstance(pred, bool):
        raise TypeError("cond's pred must be a tensor, not a Python bool: choose the branch in Python "
                        "instead")
    return _cond(convert_to_tensor(pred), true_fn, false_fn, strict, name)


def _cond(pred: Tensor, true_fn: Callable, false_fn: Callable, strict: bool, name: str | None,
          forward_values: dict[str, Tensor] | None = None):
    """``cond``; ``forward_values`` maps tensors made inside another ``Cond``'s branches to that
    ``Cond``'s outputs of them (a gradient ``Cond`` reads the forward values through them)."""
    if pred.dtype != dtypes.bool or pred.shape.ndims not in (None, 0):
        raise ValueError(f"cond's pred must be a boolean scalar, got {pred.dtype.name} of shape {pred.shape}")
    graph = get_default_graph()
    with graph.name_scope(name or "cond") as scope:
        branches = [_trace(graph, true_fn, f"{scope}true/"), _trace(graph, false_fn, f"{scope}false/")]
        (structure, then_results), (other, else_results) = [(b.structure, b.results) for b in branches]
        if structure != other:
            raise ValueError(f"cond's branches return different structures: true_fn {_describe(structure)}, "
                             f"false_fn {_describe(other)}")
        for i, (a, b) in enumerate(zip(then_results, else_results)):
            if a.dtype != b.dtype:
                raise TypeError(f"cond's branches return different dtypes at output {i}: "
                                f"true_fn {a.dtype.name}, false_fn {b.dtype.name}")
        captured = list(dict.fromkeys(arg for b in branches for arg in b.function["args"]))
        forward_values = forward_values or {}
        outer = [forward_values[name] if name in forward_values else graph.get_tensor_by_name(name)
                 for name in captured]
        specs = [_merged_spec(a, b) for a, b in zip(then_results, else_results)]
        specs += [_spec(t) for b in branches for t in b.internal]
        attrs = {"branches": [b.function for b in branches], "captured": captured,
                 "num_results": len(then_results), "output_specs": specs}
        with graph.control_dependencies([c for b in branches for c in b.control_captures]):
            op = graph.create_op("Cond", [pred, *outer], attrs, name="Cond")
    results = op.outputs[:len(then_results)]
    packed = _pack(structure, iter(results))
    if not strict and isinstance(packed, list) and len(packed) == 1:
        return packed[0]
    return packed


def case(pred_fn_pairs, default: Callable | None = None, exclusive: bool = False, strict: bool = False,
         name: str = "case"):
    """The first ``fn`` whose ``pred`` is true when the step runs, else ``default()`` (without a
    default, the last pair's ``fn``): a chain of :func:`cond`, each later test inside the one
    before's false branch, so only the chosen ``fn`` runs. ``exclusive``: more than one true
    predicate fails the step. A dict of pairs is tested in its keys' name order."""
    if isinstance(pred_fn_pairs, dict):
        pairs = sorted(pred_fn_pairs.items(), key=lambda pair: convert_to_tensor(pair[0]).name)
    elif isinstance(pred_fn_pairs, (list, tuple)):
        pairs = list(pred_fn_pairs)
    else:
        raise TypeError(f"case takes a list of (pred, fn) pairs or a dict, got "
                        f"{type(pred_fn_pairs).__name__}")
    if not pairs or not all(isinstance(p, tuple) and len(p) == 2 and callable(p[1]) for p in pairs):
        raise TypeError("case takes (pred, fn) pairs: a boolean scalar tensor and a callable, e.g. "
                        "[(x < y, lambda: tf.constant(17))]")
    if default is not None and not callable(default):
        raise TypeError(f"case's default must be a callable, got {type(default).__name__}")
    graph = get_default_graph()
    with graph.name_scope(name):
        checks = []
        if exclusive and len(pairs) > 1:
            preds = [math_ops.cast(convert_to_tensor(p), dtypes.int32) for p, _ in pairs]
            checks = [math_ops.Assert(math_ops.add_n(preds) <= 1, ["case: more than one predicate is true, "
                                                                   "and exclusive=True"])]
        if default is None:
            pairs, default = pairs[:-1], pairs[-1][1]
        with graph.control_dependencies(checks):
            return _chain(pairs, default, strict)


def _chain(pairs: list, default: Callable, strict: bool):
    if not pairs:
        return default()
    (pred, fn), rest = pairs[0], pairs[1:]
    return cond(pred, fn, lambda: _chain(rest, default, strict), strict=strict)


class _Branch:
    """One branch, traced: its function (plain data), results, the tensors it makes (the ``Cond``
    outputs them after its results), the outside ops it must wait for, and its results' nesting."""

    def __init__(self, function: dict, results: list, internal: list, control_captures: list, structure):
        self.function, self.results, self.internal = function, results, internal
        self.control_captures, self.structure = control_captures, structure


def _trace(graph, fn: Callable, scope: str, made_before: frozenset = frozenset()) -> _Branch:
    """``fn()`` traced in ``scope``: the ops it makes that its results need (and ``made_before``'s,
    which it may read too: they are computed again inside the function)."""
    first = len(graph.get_operations())
    with graph.name_scope(scope):
        returned = fn()
        structure, leaves = _flatten(returned)
        if not leaves:
            raise ValueError(f"{fn} returned no tensor: a traced function (a cond branch, a map_fn or "
                             "while_loop function) must return at least one")
        # an identity made here per result: each result is the branch's own op's, even one that
        # returns a tensor from outside
        results = [identity(convert_to_tensor(leaf)) for leaf in leaves]
    made = set(graph.get_operations()[first:]) | made_before
    needed, stack, args, control_captures = set(), [t.op for t in results], {}, {}
    while stack:  # the ops made here that the results need; what they read from outside
        op = stack.pop()
        if op in needed:
            continue
        needed.add(op)
        for tensor in op.inputs:
            if tensor.op in made:
                stack.append(tensor.op)
            else:
                args[tensor.name] = None
        for control in op.control_inputs:
            if control in made:
                stack.append(control)
            else:
                control_captures[control] = None
    ops = sorted(needed, key=lambda op: op._id)  # creation order is topological
    result_names = [t.name for t in results]
    internal = [t for op in ops for t in op.outputs if t.name not in result_names]
    nodes = [{"name": op.name, "type": op.type, "attrs": op.attrs, "inputs": [t.name for t in op.inputs],
              "control_inputs": [c.name for c in op.control_inputs if c in made],
              "num_outputs": len(op.outputs)} for op in ops]
    function = {"nodes": nodes, "args": list(args), "outputs": result_names + [t.name for t in internal]}
    return _Branch(function, results, internal, list(control_captures), structure)


def _flatten(value) -> tuple:
    if isinstance(value, (list, tuple)):
        parts = [_flatten(v) for v in value]
        return (type(value), [s for s, _ in parts]), [leaf for _, leaves in parts for leaf in leaves]
    if isinstance(value, TensorArray):  # its flow is the leaf; the handle stays the same array's
        return (TensorArray, value.handle.name), [value.flow]
    return None, [value]


def _pack(structure, leaves):
    if structure is None:
        return next(leaves)
    kind, parts = structure
    if kind is TensorArray:
        return TensorArray.from_handle(get_default_graph().get_tensor_by_name(parts), next(leaves))
    items = [_pack(part, leaves) for part in parts]
    return tuple(items) if kind is tuple else list(items) if kind is list else kind(*items)


def _describe(structure) -> str:
    if structure is None:
        return "a tensor"
    kind, parts = structure
    return f"a {kind.__name__} of {len(parts)}"


def _spec(tensor: Tensor) -> list:
    return [tensor.shape.as_list() if tensor.shape.ndims is not None else None, tensor.dtype.name]


def _merged_spec(a: Tensor, b: Tensor) -> list:
    """The shape both branches' results have (a dim they disagree on unknown), and their dtype."""
    first, second = _spec(a)[0], _spec(b)[0]
    if first is None or second is None or len(first) != len(second):
        return [None, a.dtype.name]
    return [[x if x == y else None for x, y in zip(first, second)], a.dtype.name]


def _cond_infer(inputs, branches, captured, num_results, output_specs):
    return [Spec(None if shape is None else tuple(shape), dtypes.as_dtype(dtype))
            for shape, dtype in output_specs]


def _cond_kernel(state, xp, pred, *outer, branches, captured, num_results, output_specs):
    taken = 0 if bool(pred) else 1
    function = branches[taken]
    values = dict(zip(captured, outer))
    fetched = run_nested(_schedule(function), {name: values[name] for name in function["args"]}, state, xp)
    made = [fetched[name] for name in function["outputs"]]
    untaken = [None] * (len(branches[1 - taken]["outputs"]) - num_results)
    return tuple(made + untaken if taken == 0 else made[:num_results] + untaken + made[num_results:])


def _cond_grad(op, *grads):
    """A ``Cond`` of the branches' gradients: each differentiates its forward branch's results
    with respect to every tensor the ``Cond`` read (as independent inputs), reading the forward
    branch's values from the forward ``Cond``'s outputs."""
    from ..autodiff import gradients

    graph = op.graph
    branches, captured = op.attrs["branches"], op.attrs["captured"]
    num_results = op.attrs["num_results"]
    outer = op.inputs[1:]
    differentiable = [i for i, t in enumerate(outer) if t.dtype.is_floating]
    if not differentiable or all(g is None for g in grads[:num_results]):
        return [None] * len(op.inputs)
    # each tensor a branch made, by name -> the forward Cond's output of it
    internal_names = [name for b in branches for name in b["outputs"][num_results:]]
    forward_values = dict(zip(internal_names, op.outputs[num_results:]))

    def branch_gradient(function: dict) -> Callable:
        def build():
            results = [graph.get_tensor_by_name(name) for name in function["outputs"][:num_results]]
            output_grads = [g if g is not None else zeros_like(r) for g, r in zip(grads, results)]
            inputs = [graph.get_tensor_by_name(captured[i]) for i in differentiable]
            found = gradients(results, inputs, grad_ys=output_grads, stop_gradients=inputs)
            return [g if g is not None else zeros_like(x) for g, x in zip(found, inputs)]
        return build

    input_grads = _cond(op.inputs[0], branch_gradient(branches[0]), branch_gradient(branches[1]), strict=True,
                        name="cond_grad", forward_values=forward_values)
    by_index = dict(zip(differentiable, input_grads))
    return [None] + [by_index.get(i) for i in range(len(outer))]


defop("Cond", _cond_infer, _cond_kernel, _cond_grad, stateful=True, num_outputs=None)


# ---- map_fn ------------------------------------------------------------------------------------
def map_fn(fn: Callable, elems, dtype=None, parallel_iterations=None, back_prop: bool = True,
           swap_memory: bool = False, infer_shape: bool = True, name: str | None = None):
    """``fn`` over the slices of ``elems`` (a tensor, or nested tuples and lists of tensors of one
    length) along dimension 0, its results stacked: ``tf.map_fn(tf.image.per_image_standardization,
    images)``. ``fn`` is traced once on one slice; a ``MapFn`` op runs it for each when the step
    runs, however many there are. Its gradient runs ``fn``'s ops again per slice (a random op
    in ``fn`` draws anew there). (``dtype``, ``parallel_iterations``, ``swap_memory`` and
    ``infer_shape`` are taken: the results' dtypes and shapes come from the trace.)

    >>> import dflow as tf
    >>> with tf.Graph().as_default():
    ...     squares = tf.map_fn(lambda row: tf.reduce_sum(row * row), tf.constant([[1.0, 2.0], [3.0, 4.0]]))
    ...     tf.Session().run(squares).tolist()
    [5.0, 25.0]
    """
    graph = get_default_graph()
    structure, leaves = _flatten(elems)
    leaves = [convert_to_tensor(leaf) for leaf in leaves]
    for leaf in leaves:
        if leaf.shape.ndims == 0:
            raise ValueError(f"map_fn slices its elems along dimension 0, but {leaf.name} is a scalar")
    with graph.name_scope(name or "map") as scope:
        slices = [placeholder(leaf.dtype, leaf.shape.as_list()[1:] if leaf.shape.ndims else None,
                              name="slice") for leaf in leaves]
        traced = _trace(graph, lambda: fn(_pack(structure, iter(slices))), f"{scope}fn/")
        op = _map_op(graph, traced, slices, leaves, back_prop)
    return _pack(traced.structure, iter(op.outputs))


def _map_op(graph, traced: _Branch, slices: list, elems: list, back_prop: bool = True):
    slice_names = [t.name for t in slices]
    captured = [name for name in traced.function["args"] if name not in slice_names]
    length = elems[0].shape.as_list()[0] if elems[0].shape.ndims else None
    specs = [[None if t.shape.ndims is None else [length, *t.shape.as_list()], t.dtype.name]
             for t in traced.results]
    attrs = {"function": traced.function, "slices": slice_names, "captured": captured, "output_specs": specs,
             "back_prop": back_prop}
    outer = [graph.get_tensor_by_name(name) for name in captured]
    with graph.control_dependencies(traced.control_captures):
        return graph.create_op("MapFn", [*elems, *outer], attrs, name="MapFn")


def _map_infer(inputs, function, slices, captured, output_specs, back_prop):
    return _cond_infer(inputs, None, None, None, output_specs)


def _map_kernel(state, xp, *inputs, function, slices, captured, output_specs, back_prop):
    from ..errors import InvalidArgumentError

    elems, outer = inputs[:len(slices)], dict(zip(captured, inputs[len(slices):]))
    count = len(elems[0])
    if any(len(e) != count for e in elems):
        raise InvalidArgumentError(f"map_fn's elems differ in length: {[len(e) for e in elems]}")
    plan = _schedule(function)
    results = []
    for i in range(count):
        feeds = {**outer, **{name: e[i] for name, e in zip(slices, elems)}}
        fetched = run_nested(plan, feeds, state, xp)
        results.append([fetched[name] for name in function["outputs"][:len(output_specs)]])
    if not count:
        if any(shape is None or None in shape[1:] for shape, _ in output_specs):
            raise InvalidArgumentError("map_fn over no elements cannot tell the shape of its results")
        return tuple(xp.zeros([0, *shape[1:]], dtype=dtypes.as_dtype(dtype).of(xp))
                     for shape, dtype in output_specs)
    return tuple(xp.stack([row[k] for row in results]) for k in range(len(output_specs)))


def _map_grad(op, *grads):
    """A ``MapFn`` over the slices and the results' gradients: per slice, ``fn``'s ops again and
    their gradient with respect to the slice and to every tensor ``fn`` read; the latter summed."""
    from ..autodiff import gradients

    if not op.attrs["back_prop"] or all(g is None for g in grads):
        return [None] * len(op.inputs)
    graph, function = op.graph, op.attrs["function"]
    results = [graph.get_tensor_by_name(name) for name in function["outputs"][:len(op.outputs)]]
    slices = [graph.get_tensor_by_name(name) for name in op.attrs["slices"]]
    captured = [graph.get_tensor_by_name(name) for name in op.attrs["captured"]]
    wrt = [t for t in [*slices, *captured] if t.dtype.is_floating]
    if not wrt:
        return [None] * len(op.inputs)
    forward_ops = frozenset(graph.get_operation_by_name(n["name"]) for n in function["nodes"])
    with graph.name_scope("map_grad") as scope:
        dys = [placeholder(r.dtype, r.shape, name="grad_slice") for r in results]

        def per_slice():
            found = gradients(results, wrt, grad_ys=dys, stop_gradients=wrt)
            return [g if g is not None else zeros_like(x) for g, x in zip(found, wrt)]

        backward = _trace(graph, per_slice, f"{scope}fn/", made_before=forward_ops)
        output_grads = [g if g is not None else zeros_like(y) for g, y in zip(grads, op.outputs)]
        grad_op = _map_op(graph, backward, [*slices, *dys], [*op.inputs[:len(slices)], *output_grads])
        per_input = dict(zip([t.name for t in wrt], grad_op.outputs))
        slice_grads = [per_input.get(t.name) for t in slices]
        captured_grads = [None if t.name not in per_input else math_ops.reduce_sum(per_input[t.name], axis=0)
                          for t in captured]
    return slice_grads + captured_grads


_SCHEDULES: dict[int, tuple] = {}  # id(function) -> (function, its schedule): built once a process


def _schedule(function: dict):
    """The executor's schedule of a traced function, built once per function a process."""
    from ..runtime.executor import OpNode, schedule

    cached = _SCHEDULES.get(id(function))
    if cached is None or cached[0] is not function:
        nodes = [OpNode(n["name"], n["type"], n["attrs"], tuple(n["inputs"]), tuple(n["control_inputs"]),
                        n["num_outputs"]) for n in function["nodes"]]
        plan = schedule(nodes, set(function["args"]), function["outputs"])
        if len(_SCHEDULES) >= 256:  # (it holds the functions: graphs long gone would stay)
            _SCHEDULES.clear()
        cached = _SCHEDULES[id(function)] = (function, plan)
    return cached[1]


defop("MapFn", _map_infer, _map_kernel, _map_grad, stateful=True, num_outputs=None)


# ---- while_loop --------------------------------------------------------------------------------
def while_loop(cond: Callable, body: Callable, loop_vars, shape_invariants=None, parallel_iterations=10,
               back_prop: bool = True, swap_memory: bool = False, maximum_iterations=None, name=None,
               return_same_structure: bool = False):
    """``loop_vars = body(*loop_vars)`` while ``cond(*loop_vars)`` is true when the step runs (at
    most ``maximum_iterations`` times); the loop variables after the loop, a tensor where there
    is one (unless ``return_same_structure``). ``cond`` and ``body`` are traced once; a ``While``
    op runs them. A variable whose shape changes between iterations needs its
    ``shape_invariants`` entry (``tf.TensorShape([None, 2])``). With ``back_prop=True`` (the
    default) the loop keeps each iteration's loop values in the session (the last run's only), and
    its gradient runs the body's gradient on them from the last iteration to the first (a random
    op in ``body`` draws anew there, as in ``map_fn``'s); where the gradient runs on another task,
    it runs the loop again to have them.

    >>> import dflow as tf
    >>> with tf.Graph().as_default():
    ...     i, total = tf.while_loop(lambda i, total: i < 5, lambda i, total: (i + 1, total + i), [0, 0])
    ...     [int(v) for v in tf.Session().run([i, total])]
    [5, 10]
    """
    if not callable(cond) or not callable(body):
        raise TypeError("while_loop needs two callables, cond and body (e.g. lambda i: i < 10, "
                        "lambda i: i + 1)")
    if not isinstance(loop_vars, (list, tuple)) or not loop_vars:
        raise TypeError("while_loop's loop_vars must be a non-empty list or tuple, e.g. [i] or (i, total)")
    if isinstance(maximum_iterations, Tensor):
        value = maximum_iterations.spec.value
        if value is None:
            raise ValueError("dflow needs while_loop's maximum_iterations when the graph is built (an int or "
                             "a constant)")
        maximum_iterations = value
    graph = get_default_graph()
    structure, leaves = _flatten(list(loop_vars))
    leaves = [convert_to_tensor(v) for v in leaves]
    invariants = ([t.shape for t in leaves] if shape_invariants is None
                  else _flatten(list(shape_invariants))[1])
    with graph.name_scope(name or "while") as scope:
        loop = [placeholder(t.dtype, shape, name="loop_var") for t, shape in zip(leaves, invariants)]
        test = _trace(graph, lambda: cond(*_pack(structure, iter(loop))), f"{scope}cond/")
        step = _trace(graph, lambda: _as_list(body(*_pack(structure, iter(loop)))), f"{scope}body/")
        _check_loop(test, step, structure, loop)
        step.function["outputs"] = step.function["outputs"][:len(loop)]  # only the next values: no more kept
        loop_names = [t.name for t in loop]
        captured = list(dict.fromkeys(name for f in (test, step) for name in f.function["args"]
                                      if name not in loop_names))
        attrs = {"test": test.function, "step": step.function, "loop": loop_names, "captured": captured,
                 "maximum_iterations": None if maximum_iterations is None else int(maximum_iterations),
                 "output_specs": [_spec(t) for t in loop], "back_prop": back_prop,
                 # where a differentiable loop keeps its iterations' values for its gradient
                 "history": f"WhileHistory:{scope}" if back_prop else None}
        with graph.control_dependencies(test.control_captures + step.control_captures):
            op = graph.create_op("While", [*leaves, *(graph.get_tensor_by_name(n) for n in captured)], attrs,
                                 name="While")
    results = _pack(structure, iter(op.outputs))
    return results[0] if len(leaves) == 1 and not return_same_structure else results


# ---- scan, foldl, foldr: while_loops over TensorArrays ------------------------------------------------
def scan(fn: Callable, elems, initializer=None, parallel_iterations=10, back_prop: bool = True,
         swap_memory: bool = False, infer_shape: bool = True, reverse: bool = False, name=None):
    """``fn(accumulated, element)`` over the slices of ``elems`` along dimension 0, every
    accumulated value stacked: ``tf.scan(lambda a, x: a + x, [1, 2, 3])`` is ``[1, 3, 6]``.
    Without ``initializer`` the first slice starts the accumulation; ``reverse`` goes from the
    last slice. ``elems`` and ``initializer`` may be nested tuples and lists. A ``while_loop``
    over ``TensorArray`` s, as TF builds it: gradients flow through it.

    >>> import dflow as tf
    >>> with tf.Graph().as_default():
    ...     tf.Session().run(tf.scan(lambda total, x: total + x, tf.constant([1.0, 2.0, 3.0]))).tolist()
    [1.0, 3.0, 6.0]
    """
    with get_default_graph().name_scope(name or "scan"):
        return _accumulate(fn, elems, initializer, reverse, back_prop, stacked=True)


def foldl(fn: Callable, elems, initializer=None, parallel_iterations=10, back_prop: bool = True,
          swap_memory: bool = False, name=None):
    """``fn(accumulated, element)`` over the slices of ``elems`` from the first: the last value
    (``tf.foldl(lambda a, x: a * x, [1, 2, 3, 4])`` is 24)."""
    with get_default_graph().name_scope(name or "foldl"):
        return _accumulate(fn, elems, initializer, False, back_prop, stacked=False)


def foldr(fn: Callable, elems, initializer=None, parallel_iterations=10, back_prop: bool = True,
          swap_memory: bool = False, name=None):
    """As :func:`foldl`, from the last slice to the first."""
    with get_default_graph().name_scope(name or "foldr"):
        return _accumulate(fn, elems, initializer, True, back_prop, stacked=False)


def _accumulate(fn: Callable, elems, initializer, reverse: bool, back_prop: bool, stacked: bool):
    from .array_ops import shape

    structure, leaves = _flatten(elems)
    leaves = [convert_to_tensor(leaf) for leaf in leaves]
    known = leaves[0].shape.as_list()[0] if leaves[0].shape.ndims else None
    count = known if known is not None else shape(leaves[0])[0]
    slices = [TensorArray(leaf.dtype, size=count, element_shape=leaf.shape[1:] if leaf.shape.ndims else None)
              .unstack(leaf) for leaf in leaves]

    def position(i):
        return count - 1 - i if reverse else i

    def element(i):
        return _pack(structure, iter([array.read(position(i)) for array in slices]))

    start = 0 if initializer is not None else 1
    first = initializer if initializer is not None else element(0)
    state, values = _flatten(first)
    values = [convert_to_tensor(v) for v in values]
    kept = [TensorArray(v.dtype, size=count, element_shape=v.shape) for v in values]
    if initializer is None:  # the first slice is the first accumulated value
        kept = [array.write(position(0), v) for array, v in zip(kept, values)]

    def body(i, current, arrays):
        result = fn(_pack(state, iter(current)), element(i))
        result_state, new = _flatten(result)
        if result_state != state:
            raise ValueError(f"the function returns {_describe(result_state)}, but the accumulated value is "
                             f"{_describe(state)}: it must return a value of the same nesting")
        return i + 1, new, [array.write(position(i), v) for array, v in zip(arrays, new)]

    _, final, kept = while_loop(lambda i, current, arrays: i < count, body, [start, values, kept],
                                back_prop=back_prop)
    return _pack(state, iter([array.stack() for array in kept] if stacked else final))


def _as_list(returned):
    """A body's result as the loop's list: TF 1.x takes a lone tensor for a lone loop variable."""
    return list(returned) if isinstance(returned, (list, tuple)) else [returned]


def _check_loop(test: _Branch, step: _Branch, structure, loop: list) -> None:
    (verdict, *more) = test.results
    if more or verdict.dtype != dtypes.bool or verdict.shape.ndims not in (None, 0):
        raise ValueError("while_loop's cond must return one boolean scalar, got "
                         f"{[f'{t.dtype.name} {t.shape}' for t in test.results]}")
    if step.structure != structure:
        raise ValueError(f"while_loop's body returns {_describe(step.structure)}, but loop_vars are "
                         f"{_describe(structure)}: it must return the loop variables' next values")
    for index, (new, var) in enumerate(zip(step.results, loop)):
        if new.dtype != var.dtype:
            raise TypeError(f"while_loop's body changes loop variable {index}'s dtype: {var.dtype.name} -> "
                            f"{new.dtype.name}")
        if not new.shape.is_compatible_with(var.shape):
            raise ValueError(f"while_loop's body changes loop variable {index}'s shape: {var.shape} -> "
                             f"{new.shape}; give shape_invariants with None where it may change")


def _while_infer(inputs, test, step, loop, captured, maximum_iterations, output_specs, back_prop, history):
    token = [Spec((), dtypes.string)] if history else []  # the kept iterations' name, for WhileGrad
    return _cond_infer(inputs, None, None, None, output_specs) + token


_RUNS = itertools.count()


def _while_kernel(state, xp, *inputs, test, step, loop, captured, maximum_iterations, output_specs,
                  back_prop, history):
    """The loop; a differentiable one keeps each iteration's starting values in the session (the
    last run's only) for its gradient, under a token the gradient takes as an input."""
    outer = dict(zip(captured, inputs[len(loop):]))
    started, final = _iterations(state, xp, inputs[:len(loop)], outer, test, step, loop, maximum_iterations,
                                 keep=bool(history))
    if not history:
        return tuple(final)
    token = f"{history}#{next(_RUNS)}"
    state.resources[history] = (token, started)
    return (*final, numpy.array(token, dtype=object))


def _iterations(state, xp, initial, outer: dict, test: dict, step: dict, loop: list, maximum_iterations,
                keep: bool = False) -> tuple[list, list]:
    """Runs the loop: (the loop values each iteration started from, kept only with ``keep``;
    the final loop values)."""
    values, started, count = list(initial), [], 0
    plans = _schedule(test), _schedule(step)
    while maximum_iterations is None or count < maximum_iterations:
        current = {**outer, **dict(zip(loop, values))}
        go = run_nested(plans[0], {name: current[name] for name in test["args"]}, state, xp)
        if not bool(go[test["outputs"][0]]):
            break
        made = run_nested(plans[1], {name: current[name] for name in step["args"]}, state, xp)
        if keep:
            started.append(values)
        values = [made[name] for name in step["outputs"]]
        count += 1
    return started, values


def _while_grad(op, *grads):
    """A ``WhileGrad`` op: the loop again (its iterations' loop values kept), then, from the
    last iteration to the first, the body's ops again and their gradient with respect to that
    iteration's loop values and to every tensor the body reads; the latter summed."""
    from ..autodiff import gradients

    attrs, count = op.attrs, len(op.attrs["loop"])
    if not attrs["back_prop"] or all(g is None for g in grads):
        return [None] * len(op.inputs)
    graph, step = op.graph, attrs["step"]
    loop = [graph.get_tensor_by_name(name) for name in attrs["loop"]]
    captured = [graph.get_tensor_by_name(name) for name in attrs["captured"]]
    results = [graph.get_tensor_by_name(name) for name in step["outputs"]]
    carried = [k for k, t in enumerate(loop) if t.dtype.is_floating]  # the loop values gradients flow in
    wrt = [loop[k] for k in carried] + [t for t in captured if t.dtype.is_floating]
    if not carried:
        return [None] * len(op.inputs)
    forward_ops = frozenset(graph.get_operation_by_name(n["name"]) for n in step["nodes"])
    with graph.name_scope("while_grad") as scope:
        dys = [placeholder(loop[k].dtype, loop[k].shape, name="grad_loop_var") for k in carried]

        def per_iteration():
            found = gradients([results[k] for k in carried], wrt, grad_ys=dys, stop_gradients=wrt)
            return [g if g is not None else zeros_like(x) for g, x in zip(found, wrt)]

        backward = _trace(graph, per_iteration, f"{scope}body/", made_before=forward_ops)
        output_grads = [grads[k] if grads[k] is not None else zeros_like(op.outputs[k]) for k in carried]
        names = {t.name for t in [*loop, *dys, *captured]}
        reads = [graph.get_tensor_by_name(n) for n in backward.function["args"] if n not in names]
        attrs = {**{key: attrs[key] for key in ("test", "step", "loop", "captured", "maximum_iterations",
                                                "history")},
                 "backward": backward.function, "carried": carried, "grad_loop": [t.name for t in dys],
                 "backward_reads": [t.name for t in reads],
                 "wrt_captured": [t.name for t in wrt[len(carried):]],
                 "output_specs": [_spec(t) for t in wrt]}
        with graph.control_dependencies(backward.control_captures):
            token = op.outputs[count:]  # the forward run's kept iterations, where it has them
            grad_op = graph.create_op("WhileGrad", [*op.inputs, *output_grads, *reads, *token], attrs,
                                      name="WhileGrad")
    per_input = dict(zip([t.name for t in wrt], grad_op.outputs))
    loop_grads = [grad_op.outputs[carried.index(k)] if k in carried else None for k in range(count)]
    return loop_grads + [per_input.get(t.name) for t in captured]


def _while_grad_infer(inputs, output_specs, **_):
    return _cond_infer(inputs, None, None, None, output_specs)


def _while_grad_kernel(state, xp, *inputs, test, step, loop, captured, maximum_iterations, history, backward,
                       carried, grad_loop, backward_reads, wrt_captured, output_specs):
    token = str(numpy.asarray(inputs[-1], dtype=object).item()) if history else None
    inputs = inputs[:-1] if history else inputs
    initial = inputs[:len(loop)]
    outer = dict(zip(captured, inputs[len(loop):len(loop) + len(captured)]))
    rest = inputs[len(loop) + len(captured):]
    dys, reads = list(rest[:len(carried)]), dict(zip(backward_reads, rest[len(carried):]))
    kept = state.resources.get(history) if history else None
    if kept is not None and kept[0] == token:  # this step's forward run kept them (same task)
        del state.resources[history]
        started = kept[1]
    else:  # run the loop again to have them (another task ran the forward loop)
        started, _ = _iterations(state, xp, initial, outer, test, step, loop, maximum_iterations, keep=True)
    plan = _schedule(backward)
    grads_captured = None
    for values in reversed(started):
        feeds = {**outer, **reads, **dict(zip(loop, values)), **dict(zip(grad_loop, dys))}
        made = run_nested(plan, {name: feeds[name] for name in backward["args"]}, state, xp)
        found = [made[name] for name in backward["outputs"][:len(carried) + len(wrt_captured)]]
        dys = found[:len(carried)]
        per_captured = found[len(carried):]
        grads_captured = per_captured if grads_captured is None else \
            [total + g for total, g in zip(grads_captured, per_captured)]
    if grads_captured is None:  # no iteration ran: nothing the body read had any effect
        grads_captured = [xp.zeros_like(outer[name]) for name in wrt_captured]
    return (*dys, *grads_captured)


defop("While", _while_infer, _while_kernel, _while_grad, stateful=True, num_outputs=None)
defop("WhileGrad", _while_grad_infer, _while_grad_kernel, stateful=True, num_outputs=None)
