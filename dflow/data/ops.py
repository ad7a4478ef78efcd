"""``DatasetNext``: an input op that pulls the next batch inside ``Session.run``.

The op carries the dataset's spec as plain data (path, split, shard, seed, ...);
its kernel finds the reader in the running session's resources
(:meth:`~dflow.runtime.state.SessionState.resource`), building it on first use
from the spec, on the device the op runs on. So a worker that runs the op
reads its own shard from the store and never waits for the client to send a
batch. At the end of the last epoch the op raises ``tf.errors.OutOfRangeError``,
as a TF 1.x iterator does.

>>> import os, tempfile, dflow as tf
>>> from dflow.data import Dataset, prepare
>>> store = prepare("synthetic", out=os.path.join(tempfile.mkdtemp(), "s.zarr"), echo=None,
...                 image_shape=(8, 8, 3), train_count=64, test_count=0)
>>> with tf.Graph().as_default():
...     images, labels = Dataset(store, "train", batch_size=16, transform=None).get_next()
...     with tf.Session() as sess:
...         batch, _ = sess.run([images, labels])
>>> batch.shape, images.shape.as_list()
((16, 8, 8, 3), [None, 8, 8, 3])
"""

from __future__ import annotations

from .. import dtypes
from ..errors import OutOfRangeError
from ..graph import get_default_graph
from ..ops.registry import Spec, defop

__all__ = ["dataset_next"]


def _next_infer(inputs, spec, shared_name, image_shape, image_dtype):
    batch = spec["batch_size"] if spec["drop_remainder"] else None
    return [Spec((batch, *image_shape), image_dtype), Spec((batch,), dtypes.int64)]


def _next_kernel(state, xp, spec, shared_name, image_shape, image_dtype):
    from .dataset import Dataset

    reader = state.resource(f"DatasetNext:{shared_name}", lambda: Dataset(**spec, xp=xp))
    try:
        return next(reader)
    except StopIteration:
        raise OutOfRangeError(f"End of sequence: {reader!r} has served its {spec['num_epochs']} "
                              "epoch(s)") from None


defop("DatasetNext", _next_infer, _next_kernel, stateful=True, num_outputs=2)


def dataset_next(dataset, name: str = "DatasetNext"):
    """``(images, labels)`` tensors whose every run pulls ``dataset``'s next batch.

    ``dataset`` is a :class:`~dflow.data.Dataset`: its settings (not the object) go into
    the graph, and each session running the op makes its own reader from them.
    """
    image_shape, image_dtype = dataset.output_spec
    attrs = {"spec": dataset.spec, "shared_name": dataset.shared_name, "image_shape": list(image_shape),
             "image_dtype": dtypes.as_dtype(image_dtype.name)}
    op = get_default_graph().create_op("DatasetNext", [], attrs, name=name)
    return op.outputs[0], op.outputs[1]
