"""The ops behind ``tf.data`` iterators, and the element streams their kernels pull from.

A ``tf.data`` pipeline reaches the graph as plain data: a *plan*, nested dicts
with one ``kind`` per stage (``"fixed_length_records"``, ``"map"``, ``"batch"``,
...), where a ``map``'s function is the list of ops it traced (each an
:class:`~dflow.runtime.executor.OpNode` as a dict: ``graph_to_dict`` writes a pipeline
as JSON). Tensors a pipeline takes from the graph (``from_tensor_slices``'s
arrays) are inputs of the op that starts the iterator, named in the plan by
position. The kernel of ``MakeIterator`` (or of ``OneShotIterator``, on its first
run) turns the plan into a :class:`Stream` (stage by stage: each stage is a
function that returns a fresh pass over its elements), kept in the session's
resources under the iterator's shared name; each run of ``IteratorGetNext`` takes
the next element of that pass and raises ``tf.errors.OutOfRangeError`` after
the last, as TF's does. An element travels as a flat tuple of arrays; the Python
side packs it back into the dataset's tuples and dicts.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable, Iterator

import array_api_compat

from .. import dtypes
from ..data.structure import flatten
from ..errors import FailedPreconditionError, InvalidArgumentError, OutOfRangeError
from .registry import Spec, defop

__all__ = ["Stream", "compile_plan", "register_generator"]

Pass = Callable[[], Iterator[tuple]]  # each call: a fresh pass over a stage's elements


class _Context:
    """What a plan's stages need from the running op: captured values, session state, ``xp``."""

    def __init__(self, captured, state, xp):
        self.captured, self.state, self.xp = list(captured), state, xp

    def rng(self, seed):
        return self.state.random_generator(seed)


def compile_plan(plan: dict, ctx: _Context) -> Pass:
    """The stage ``plan`` names, over the stages it reads from."""
    upstream = [compile_plan(child, ctx) for child in plan.get("inputs", ())]
    plan = {key: _captured_count(key, value["captured_count"], ctx) if isinstance(value, dict)
            and "captured_count" in value else value for key, value in plan.items()}
    return _STAGES[plan["kind"]](plan, upstream, ctx)


def _captured_count(what: str, position: int, ctx: _Context) -> int:
    """A count the dataset was given as a tensor (``batch(batch_size_placeholder)``), its value
    now that the iterator starts."""
    count = int(ctx.captured[position])
    smallest = -1 if what == "count" else 1  # (take, skip, repeat: -1 is all)
    if count < smallest:
        raise InvalidArgumentError(f"the dataset's {what} must be at least {smallest}, got {count}")
    return count


# ---- sources ------------------------------------------------------------------------------------
def _tensors(plan, upstream, ctx) -> Pass:
    element = tuple(ctx.captured[i] for i in plan["captured"])
    return lambda: iter([element])


def _tensor_slices(plan, upstream, ctx) -> Pass:
    values = [ctx.captured[i] for i in plan["captured"]]
    count = int(values[0].shape[0])
    return lambda: (tuple(v[i] for v in values) for i in range(count))


def _range(plan, upstream, ctx) -> Pass:
    xp, dtype = ctx.xp, getattr(ctx.xp, plan["dtype"].name)
    return lambda: ((xp.asarray(i, dtype=dtype),) for i in range(*plan["args"]))


def _file_names(plan, ctx) -> list[str]:
    """A file source's names: in the plan, or a string tensor's value when the step runs."""
    if plan["filenames"] is not None:
        return plan["filenames"]
    import numpy

    names = numpy.asarray(ctx.captured[plan["captured"][0]], dtype=object).reshape(-1).tolist()
    return [n.decode() if isinstance(n, bytes) else str(n) for n in names]


def _fixed_length_records(plan, upstream, ctx) -> Pass:
    def records():
        for name in _file_names(plan, ctx):
            yield from _file_records(name, plan["record_bytes"], plan["header_bytes"], plan["footer_bytes"])
    return records


def _file_records(name: str, size: int, header: int, footer: int) -> Iterator[tuple]:
    import fsspec
    import numpy  # strings are NumPy object arrays: the array API has none

    with fsspec.open(name, "rb") as f:
        total = f.seek(0, 2)
        body = total - header - footer
        if body < 0 or body % size:
            raise InvalidArgumentError(
                f"FixedLengthRecordDataset: {name} has {total} bytes, which is not header_bytes={header} + "
                f"a whole number of record_bytes={size} records + footer_bytes={footer}")
        f.seek(header)
        for _ in range(body // size):
            yield (numpy.asarray(f.read(size), dtype=object),)


# from_generator's Python generators, by token: the graph carries the token (as TF's py_func registry)
_GENERATORS: dict[str, tuple[Callable, tuple]] = {}
_generator_tokens = itertools.count()


def register_generator(generator: Callable, args: tuple) -> str:
    token = f"{os.getpid()}-{next(_generator_tokens)}"
    _GENERATORS[token] = (generator, args)
    return token


def _generator(plan, upstream, ctx) -> Pass:
    if plan["token"] not in _GENERATORS:
        raise InvalidArgumentError(
            "a Dataset.from_generator runs its Python generator in the process that built the graph, and "
            f"this is another process (pid {os.getpid()}): run its iterator in a local tf.Session, or build "
            "the arrays first and use Dataset.from_tensor_slices")
    generator, args = _GENERATORS[plan["token"]]

    def elements():
        for value in generator(*args):
            is_tuple = isinstance(value, list) and plan["structure"] is not None  # TF reads a list as a tuple
            structure, leaves = flatten(tuple(value) if is_tuple else value)
            if structure != plan["structure"] or len(leaves) != len(plan["types"]):
                raise InvalidArgumentError(f"from_generator: the generator yielded {value!r}, which does not "
                                           "have the structure of output_types")
            yield tuple(_generated_array(ctx.xp, leaf, dtype, shape)
                        for leaf, dtype, shape in zip(leaves, plan["types"], plan["shapes"]))
    return elements


def _generated_array(xp, value, dtype, shape):
    import numpy

    if dtype == dtypes.string:
        array = numpy.vectorize(lambda v: v.encode() if isinstance(v, str) else v, otypes=[object])(
            numpy.asarray(value, dtype=object))
    else:
        array = numpy.asarray(value, dtype=dtype.as_numpy_dtype)
    fits = shape is None or (len(shape) == array.ndim and all(d in (None, n)
                                                              for d, n in zip(shape, array.shape)))
    if not fits:
        raise InvalidArgumentError(f"from_generator: the generator yielded an element of shape "
                                   f"{array.shape}, but output_shapes says {list(shape)}")
    return array if dtype == dtypes.string else xp.asarray(array)


def _text_lines(plan, upstream, ctx) -> Pass:
    def lines():
        import fsspec
        import numpy

        for name in _file_names(plan, ctx):
            with fsspec.open(name, "rb") as f:
                for line in f:
                    yield (numpy.asarray(line.rstrip(b"\r\n"), dtype=object),)
    return lines


def _tf_records(plan, upstream, ctx) -> Pass:
    def records():
        import fsspec
        import numpy

        from ..tf_record import read_records

        for name in _file_names(plan, ctx):
            with fsspec.open(name, "rb") as f:
                for _, record in read_records(f, name, plan["compression_type"]):
                    yield (numpy.asarray(record, dtype=object),)
    return records


# ---- transformations ---------------------------------------------------------------------------
class _Function:
    """A traced function (``map``'s, ``filter``'s) run on one element by the executor."""

    def __init__(self, function: dict, ctx: _Context):
        from ..runtime.executor import OpNode, schedule

        self._args, self._ctx = function["args"], ctx
        nodes = [OpNode(n["name"], n["type"], n["attrs"], tuple(n["inputs"]), tuple(n["control_inputs"]),
                        n["num_outputs"]) for n in function["nodes"]]
        self._plan = schedule(nodes, set(self._args), function["outputs"])
        self._namespaces = {"CPU": ctx.xp, "GPU": ctx.xp}

    def __call__(self, element: tuple) -> tuple:
        from ..runtime.executor import execute

        values = execute(self._plan, dict(zip(self._args, element)), self._ctx.state, self._namespaces)
        return tuple(values[name] for name in self._plan.fetches)


def _map(plan, upstream, ctx) -> Pass:
    function, (source,) = _Function(plan["function"], ctx), upstream
    return lambda: map(function, source())


def _filter(plan, upstream, ctx) -> Pass:
    predicate, (source,) = _Function(plan["function"], ctx), upstream
    return lambda: (element for element in source() if bool(predicate(element)[0]))


def _groups(elements, size: int, drop: bool):
    """Consecutive elements in lists of ``size`` (the last one shorter, or dropped with ``drop``)."""
    elements = iter(elements)
    while rows := list(itertools.islice(elements, size)):
        if len(rows) < size and drop:
            return
        yield rows


def _batch(plan, upstream, ctx) -> Pass:
    (source,), size, drop = upstream, plan["batch_size"], plan["drop_remainder"]
    return lambda: (tuple(_stack(ctx.xp, [row[i] for row in rows]) for i in range(len(rows[0])))
                    for rows in _groups(source(), size, drop))


def _interleave(plan, upstream, ctx) -> Pass:
    """TF's interleave order: ``cycle_length`` places visited in turn, ``block_length`` elements
    from each; an empty place takes the next input element's dataset, an ended one is emptied."""
    function, (source,) = _Function(plan["function"], ctx), upstream
    cycle, block = plan["cycle_length"], plan["block_length"]

    def elements():
        inputs, places, position, taken = iter(source()), [None] * cycle, 0, 0
        inputs_left = True
        while inputs_left or any(p is not None for p in places):
            if places[position] is None and inputs_left:
                element = next(inputs, None)
                if element is None:
                    inputs_left = False
                else:
                    inner = _Context(function(element), ctx.state, ctx.xp)
                    places[position] = iter(compile_plan(plan["dataset"], inner)())
                continue
            item = None if places[position] is None else next(places[position], None)
            if item is not None:
                yield item
                taken += 1
                if taken < block:
                    continue
            elif places[position] is not None:
                places[position] = None
            position, taken = (position + 1) % cycle, 0
    return elements


def _padded_batch(plan, upstream, ctx) -> Pass:
    (source,), size, drop = upstream, plan["batch_size"], plan["drop_remainder"]
    padding = list(zip(plan["padded_shapes"], plan["padding_values"]))
    return lambda: (tuple(_pad(ctx.xp, [row[i] for row in rows], want, fill)
                          for i, (want, fill) in enumerate(padding))
                    for rows in _groups(source(), size, drop))


def _pad(xp, parts, want: list, fill):
    """``parts`` stacked, each padded with ``fill`` at the end of every dim to ``want`` (None: the
    longest part's)."""
    import numpy

    shapes = [tuple(part.shape) for part in parts]
    if any(len(shape) != len(want) for shape in shapes):
        raise InvalidArgumentError(f"padded_batch: elements of shapes {sorted(set(shapes))} do not have the "
                                   f"rank of padded_shapes {want}")
    target = [w if w is not None else max(shape[k] for shape in shapes) for k, w in enumerate(want)]
    too_big = [shape for shape in shapes if any(d > t for d, t in zip(shape, target))]
    if too_big:
        raise InvalidArgumentError(f"padded_batch: an element of shape {too_big[0]} is larger than the "
                                   f"padded shape {target}")
    strings = isinstance(parts[0], numpy.ndarray) and parts[0].dtype == object
    if strings:
        out = numpy.full((len(parts), *target), fill.encode("latin-1") if isinstance(fill, str) else fill,
                         dtype=object)
    else:
        out = xp.full((len(parts), *target), fill, dtype=xp.asarray(parts[0]).dtype)
    for index, part in enumerate(parts):
        out[(index, *(slice(0, d) for d in part.shape))] = part
    return out


def _stack(xp, parts):
    import numpy

    if isinstance(parts[0], numpy.ndarray) and parts[0].dtype == object:  # strings
        return numpy.stack(parts)
    try:
        if array_api_compat.is_numpy_namespace(xp) and all(isinstance(part, numpy.ndarray) for part in parts):
            return numpy.stack(parts)  # (each part through xp.asarray: 3 us an element)
        return xp.stack([xp.asarray(part) for part in parts])
    except ValueError as e:
        shapes = sorted({tuple(getattr(p, "shape", ())) for p in parts})
        raise InvalidArgumentError(f"batch: cannot stack elements of different shapes {shapes}; make them "
                                   "one shape in a map() first, or use padded_batch") from e


def _shuffle(plan, upstream, ctx) -> Pass:
    """TF's buffer shuffle: fill ``buffer_size`` elements, hand out a random one and put the
    next element in its place; at the end, hand out what is left in random order."""
    (source,), size = upstream, plan["buffer_size"]
    seed = plan["seed"]
    rng = ctx.rng(seed)
    if not plan["reshuffle_each_iteration"] and seed is None:
        seed = int(rng.integers(2**31))  # one fixed order for every pass

    def shuffled():
        draw = rng if plan["reshuffle_each_iteration"] else _fresh_rng(seed)
        buffer: list = []
        indices: list = []  # the full buffer's next draws, drawn a block at a time (1.5 us a call)
        for element in source():
            if len(buffer) < size:
                buffer.append(element)
                continue
            if not indices:
                indices = draw.integers(size, size=_DRAWS_AT_ONCE).tolist()[::-1]
            index = indices.pop()
            yield buffer[index]
            buffer[index] = element
        for index in draw.permutation(len(buffer)).tolist():  # what is left, in random order
            yield buffer[index]
    return shuffled


_DRAWS_AT_ONCE = 256


def _fresh_rng(seed):
    import numpy

    return numpy.random.default_rng(seed)


def _repeat(plan, upstream, ctx) -> Pass:
    (source,), count = upstream, plan["count"]

    def repeated():
        for _ in itertools.count() if count < 0 else range(count):
            produced = False
            for element in source():
                produced = True
                yield element
            if not produced:  # an empty dataset repeated forever is still empty, as in TF
                return
    return repeated


def _take(plan, upstream, ctx) -> Pass:
    (source,), count = upstream, plan["count"]
    return lambda: source() if count < 0 else itertools.islice(source(), count)


def _skip(plan, upstream, ctx) -> Pass:
    (source,), count = upstream, plan["count"]
    return lambda: iter(()) if count < 0 else itertools.islice(source(), count, None)


def _cache(plan, upstream, ctx) -> Pass:
    """The first complete pass is kept in memory; later passes replay it."""
    (source,), kept = upstream, {}

    def cached():
        if "elements" in kept:
            yield from kept["elements"]
            return
        elements = []
        for element in source():
            elements.append(element)
            yield element
        kept["elements"] = elements
    return cached


def _zip(plan, upstream, ctx) -> Pass:
    return lambda: (sum(parts, ()) for parts in zip(*(source() for source in upstream)))


def _concatenate(plan, upstream, ctx) -> Pass:
    return lambda: itertools.chain.from_iterable(source() for source in upstream)


def _prefetch(plan, upstream, ctx) -> Pass:
    return upstream[0]  # elements are made when asked for; the order and values are TF's


_STAGES: dict[str, Callable[..., Pass]] = {
    "tensors": _tensors, "tensor_slices": _tensor_slices, "range": _range,
    "fixed_length_records": _fixed_length_records, "text_lines": _text_lines, "tf_records": _tf_records,
    "generator": _generator,
    "map": _map, "filter": _filter, "interleave": _interleave, "batch": _batch, "padded_batch": _padded_batch,
    "shuffle": _shuffle,
    "repeat": _repeat,
    "take": _take, "skip": _skip, "cache": _cache, "zip": _zip, "concatenate": _concatenate,
    "prefetch": _prefetch,
}


# ---- the iterator's state in a session ----------------------------------------------------------------
class Stream:
    """An iterator's position in its dataset: started (again) by its initializer, advanced by
    each ``get_next`` run; runs from several threads take turns."""

    def __init__(self, name: str):
        self.name = name
        self._elements: Iterator[tuple] | None = None
        self._lock = threading.Lock()

    def start(self, stage: Pass) -> None:
        with self._lock:
            self._elements = iter(stage())

    def start_once(self, make_stage: Callable[[], Pass]) -> None:
        """A one-shot iterator's first run starts the pass; later runs find it started."""
        with self._lock:
            if self._elements is None:
                self._elements = iter(make_stage()())

    def next(self) -> tuple:
        with self._lock:
            if self._elements is None:
                raise FailedPreconditionError(
                    f"GetNext() failed because the iterator '{self.name}' has not been initialized. Ensure "
                    "that you have run the initializer operation (sess.run(iterator.initializer)) first.")
            try:
                return next(self._elements)
            except StopIteration:
                raise OutOfRangeError(f"End of sequence of iterator '{self.name}'") from None


def _stream_of(state, handle) -> Stream:
    """The stream a handle names: the handle op's key, or the bytes ``string_handle()`` gave."""
    key = getattr(handle, "item", lambda: handle)()  # a fed string handle: a 0-d NumPy object array
    key = key.decode() if isinstance(key, bytes) else str(key)
    stream = state.resources.get(key)
    if not isinstance(stream, Stream):
        raise InvalidArgumentError(f"{key!r} is not the string handle of an iterator of this session: feed "
                                   "the value sess.run(iterator.string_handle()) gave")
    return stream


def _handle_kernel(state, xp, shared_name, **_):
    key = f"Iterator:{shared_name}"
    state.resource(key, lambda: Stream(shared_name))
    return key


def _one_shot_kernel(state, xp, *captured, plan, shared_name, **_):
    key = f"Iterator:{shared_name}"
    stream = state.resource(key, lambda: Stream(shared_name))
    stream.start_once(lambda: compile_plan(plan, _Context(captured, state, xp)))
    return key


def _make_iterator_kernel(state, xp, handle, *captured, plan):
    _stream_of(state, handle).start(compile_plan(plan, _Context(captured, state, xp)))
    return ()


def _get_next_infer(inputs, output_types, output_shapes):
    return [Spec(shape, dtype) for dtype, shape in zip(output_types, output_shapes)]


def _get_next_kernel(state, xp, handle, output_types, output_shapes):
    return tuple(_stream_of(state, handle).next())


def _handle_infer(inputs, **_):
    return [Spec((), dtypes.string)]


def _to_string_handle_kernel(xp, handle):
    import numpy

    return numpy.asarray(str(handle).encode(), dtype=object)  # TF hands string handles out as bytes


defop("IteratorV2", _handle_infer, _handle_kernel, stateful=True, gpu=False)
defop("OneShotIterator", _handle_infer, _one_shot_kernel, stateful=True, gpu=False)
defop("MakeIterator", lambda inputs, plan: [], _make_iterator_kernel, stateful=True, num_outputs=0, gpu=False)
defop("IteratorToStringHandle", _handle_infer, _to_string_handle_kernel, gpu=False)
defop("IteratorGetNext", _get_next_infer, _get_next_kernel, stateful=True, num_outputs=None, gpu=False)
