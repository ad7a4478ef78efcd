"""``tf.contrib.slim.prefetch_queue.prefetch_queue``: a FIFO queue that a queue runner keeps filled
with evaluations of ``tensors``, so that the batches of an input pipeline are ready before the
training step asks for them (the multi-GPU CIFAR-10 tutorial dequeues one per tower).

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     images = tf.random_uniform([4, 2]); labels = tf.range(4)
...     queue = tf.contrib.slim.prefetch_queue.prefetch_queue([images, labels], capacity=2)
...     image_batch, label_batch = queue.dequeue()
...     with tf.Session() as sess:
...         coord = tf.train.Coordinator()
...         threads = tf.train.start_queue_runners(sess=sess, coord=coord)
...         sess.run(label_batch).tolist()
...         coord.request_stop(); coord.join(threads)
[0, 1, 2, 3]
"""

from __future__ import annotations

from ... import dtypes
from ...graph import convert_to_tensor, name_scope
from ...ops import math_ops
from ...ops.queue_ops import FIFOQueue
from ...ops.summary_ops import scalar
from ...train.queue_runner import QueueRunner, add_queue_runner

__all__ = ["prefetch_queue"]


def prefetch_queue(tensors, capacity: int = 8, num_threads: int = 1, dynamic_pad: bool = False,
                   shared_name=None, name=None) -> FIFOQueue:
    """A queue holding up to ``capacity`` evaluations of ``tensors`` (a list or a dict of tensors of
    fully defined shapes), filled by ``num_threads`` threads of a queue runner added to the graph's
    ``QUEUE_RUNNERS``; ``queue.dequeue()`` gives tensors of the same types and shapes (a dict by the
    same keys). A summary ``fraction_of_<capacity>_full`` tracks how full it is, as in TF.
    """
    if dynamic_pad:
        raise ValueError("prefetch_queue(dynamic_pad=True) is not supported by dflow: pad the tensors to "
                         "one shape first (tf.pad or tf.image.resize_image_with_crop_or_pad)")
    names = sorted(tensors) if isinstance(tensors, dict) else None
    values = [tensors[n] for n in names] if names else list(tensors)
    values = [convert_to_tensor(t) for t in values]
    for t in values:
        if not t.shape.is_fully_defined():
            raise ValueError(f"prefetch_queue needs tensors of fully defined shapes: {t.name} has shape "
                             f"{t.shape}; give it one with tensor.set_shape([...])")
    with name_scope(name or "prefetch_queue"):
        queue = FIFOQueue(capacity, [t.dtype for t in values], [t.shape for t in values], names=names,
                          shared_name=shared_name, name="fifo_queue")
        enqueue = queue.enqueue(dict(zip(names, values)) if names else values)
        add_queue_runner(QueueRunner(queue, [enqueue] * num_threads))
        scalar(f"fraction_of_{capacity}_full",
               math_ops.cast(queue.size(), dtypes.float32) * (1.0 / capacity))
    return queue

