"""Collective ops: the members of a group of worker tasks reduce or share tensors.

As TF's ``collective_ops``: every member's graph holds the same op (same
``instance_key``, same ``group``) on its own task, and each run of it meets the
matching run on the other members. The kernels pack their inputs into one flat
buffer (so one op is one fused message stream, whatever the number of tensors),
hand it to the worker's :class:`~dflow.distributed.collective.Communicator` and
return at once with a future: the executor runs other ops (the rest of the
backward pass) while the buffer travels.

>>> import dflow as tf
>>> from dflow.ops import collective_ops
>>> with tf.Graph().as_default():
...     g = tf.constant([1.0, 2.0])
...     (total,) = collective_ops.all_reduce([g], group=("/job:worker/task:0",), instance_key="g")
...     with tf.Session() as sess:
...         sess.run(total).tolist()   # a group of one: nothing to exchange
[1.0, 2.0]
"""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np

from ..errors import FailedPreconditionError
from ..graph import convert_to_tensor, get_default_graph
from .registry import Spec, defop

__all__ = ["all_reduce", "broadcast"]


def _same_as_inputs(inputs, **attrs):
    return [Spec(spec.shape, spec.dtype) for spec in inputs]


def _start(state, xp, kind: str, tensors, group, instance_key: str, names, scale=None,
           **options) -> Future:
    """Pack ``tensors``, run the collective, and unpack its result (times ``scale``) into a
    future of outputs."""
    shapes = [tuple(t.shape) for t in tensors]
    host = [np.asarray(t.get() if hasattr(t, "get") else t, dtype=np.float32).ravel() for t in tensors]
    buffer = np.concatenate(host) if host else np.zeros(0, np.float32)
    communicator = getattr(state, "communicator", None)
    if communicator is None:
        if len(group) > 1:
            raise FailedPreconditionError(
                f"collective {instance_key} has a group of {len(group)} tasks but runs outside a dflow "
                "cluster: open the Session on cluster.target")
        done: Future = Future()
        done.set_result(buffer)
        reduced = done
    else:
        signature = tuple(f"{name} {list(shape)}" for name, shape in zip(names, shapes))
        reduced = communicator.start(kind, buffer, group=tuple(group), instance_key=instance_key,
                                     signature=signature, **options)
    outputs: Future = Future()

    def unpack(finished: Future) -> None:
        if finished.exception() is not None:
            outputs.set_exception(finished.exception())
            return
        flat, offset, values = finished.result(), 0, []
        if scale is not None:
            flat = flat * np.float32(scale)
        for tensor, shape in zip(tensors, shapes):
            size = int(np.prod(shape, dtype=np.int64))
            values.append(xp.asarray(flat[offset:offset + size].reshape(shape).astype(tensor.dtype)))
            offset += size
        outputs.set_result(tuple(values))

    reduced.add_done_callback(unpack)
    return outputs


def _all_reduce_kernel(state, xp, *tensors, group, instance_key, names, average=False,
                       algorithm="auto", compression=None):
    return _start(state, xp, "all_reduce", tensors, group, instance_key, names,
                  scale=1.0 / len(group) if average else None, algorithm=algorithm,
                  compression=compression)


def _broadcast_kernel(state, xp, *tensors, group, instance_key, names, root=0):
    return _start(state, xp, "broadcast", tensors, group, instance_key, names, root=root)


# not differentiable: they sit between the gradients and the updates, as in TF
defop("CollectiveAllReduce", _same_as_inputs, _all_reduce_kernel, stateful=True, num_outputs=None,
      asynchronous=True, gpu=False)
defop("CollectiveBroadcast", _same_as_inputs, _broadcast_kernel, stateful=True, num_outputs=None,
      asynchronous=True, gpu=False)


def all_reduce(tensors, group, instance_key: str, average: bool = False, algorithm: str = "auto",
               compression: str | None = None, names=None, name: str | None = None) -> list:
    """The sum (``average=True``: the mean) over ``group``'s members of each of ``tensors``.

    Parameters
    ----------
    tensors : list of Tensor
        Reduced as one fused buffer (float32 on the wire, or float16 with
        ``compression="fp16"``).
    group : sequence of str
        The member tasks, e.g. ``["/job:worker/task:0", "/job:worker/task:1"]``; every
        member runs this op on its own task.
    instance_key : str
        Names this collective; the members' ops must share it.
    algorithm : str
        ``"ring"``, ``"tree"`` (recursive doubling) or ``"auto"`` (tree below 1 MiB).
    names : list of str, optional
        What each tensor is (e.g. its variable's name), compared across members so that
        replicas of different models are named in the error instead of summed.
    """
    tensors = [convert_to_tensor(t) for t in tensors]
    names = tuple(names or (t.name for t in tensors))
    op = get_default_graph().create_op(
        "CollectiveAllReduce", tensors,
        dict(group=tuple(group), instance_key=instance_key, names=names, average=average,
             algorithm=algorithm, compression=compression), name=name or "CollectiveAllReduce")
    return list(op.outputs)


def broadcast(tensors, group, instance_key: str, root: int = 0, names=None, name: str | None = None) -> list:
    """``group[root]``'s values of ``tensors`` on every member (the others' inputs give only
    the shapes)."""
    tensors = [convert_to_tensor(t) for t in tensors]
    names = tuple(names or (t.name for t in tensors))
    op = get_default_graph().create_op(
        "CollectiveBroadcast", tensors,
        dict(group=tuple(group), instance_key=instance_key, names=names, root=root),
        name=name or "CollectiveBroadcast")
    return list(op.outputs)
