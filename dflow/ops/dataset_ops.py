"""``DatasetNext`` (:func:`dflow.data.dataset_next`): an input op pulling the next batch in ``Session.run``.

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
from .registry import Spec, defop


def _next_infer(inputs, spec, shared_name, image_shape, image_dtype):
    batch = spec["batch_size"] if spec["drop_remainder"] else None
    return [Spec((batch, *image_shape), image_dtype), Spec((batch,), dtypes.int64)]


def _next_kernel(state, xp, spec, shared_name, image_shape, image_dtype):
    from ..data.dataset import Dataset  # the reader (the data layer builds on the ops)

    reader = state.resource(f"DatasetNext:{shared_name}", lambda: Dataset(**spec, xp=xp))
    try:
        return next(reader)
    except StopIteration:
        raise OutOfRangeError(f"End of sequence: {reader!r} has served its {spec['num_epochs']} "
                              "epoch(s)") from None


defop("DatasetNext", _next_infer, _next_kernel, stateful=True, num_outputs=2, gpu=False)
