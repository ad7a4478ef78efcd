"""TF 1.x's queue-based input pipeline: producers of filenames, and batching queues.

The CIFAR-10 tutorial's pattern::

    files = tf.train.string_input_producer(filenames)          # a queue of filenames, reshuffled each epoch
    key, value = tf.FixedLengthRecordReader(3073).read(files)   # one record per run
    image = ...decode_raw, slice, reshape, random_crop, per_image_standardization...
    images, labels = tf.train.shuffle_batch([image, label], 128, capacity=..., min_after_dequeue=...)

Each producer and batcher adds a :class:`~dflow.train.queue_runner.QueueRunner`
to the graph; ``tf.train.start_queue_runners`` (or ``MonitoredTrainingSession``)
starts its threads, which run the per-record graph and fill the queue while the
training step dequeues batches. ``num_epochs`` counts in a local variable (run
``tf.local_variables_initializer()``, as in TF); when the epochs are over, the
queues close and the next dequeue raises ``tf.errors.OutOfRangeError``.
"""

from __future__ import annotations

from .. import dtypes
from ..graph import GraphKeys, Tensor, control_dependencies, convert_to_tensor, name_scope
from ..ops.array_ops import constant, identity
from ..ops.io_ops import count_up_to, shuffle_together
from ..ops.queue_ops import FIFOQueue, RandomShuffleQueue
from .queue_runner import QueueRunner, add_queue_runner

__all__ = ["limit_epochs", "input_producer", "string_input_producer", "range_input_producer",
           "slice_input_producer", "batch",
           "shuffle_batch", "batch_join", "shuffle_batch_join"]


def limit_epochs(tensor, num_epochs=None, name=None) -> Tensor:
    """``tensor``, ``num_epochs`` times; then its runs raise ``OutOfRangeError``."""
    return _limit_epochs([tensor], num_epochs, name)[0]


def _limit_epochs(tensors: list, num_epochs, name=None) -> list[Tensor]:
    """The tensors, counted together: one epoch is one run of all of them."""
    tensors = [convert_to_tensor(t) for t in tensors]
    if num_epochs is None:
        return tensors
    if int(num_epochs) <= 0:
        raise ValueError(f"num_epochs must be positive or None, got {num_epochs}")
    from ..variables import Variable

    with name_scope(name or "limit_epochs"):
        epochs = Variable(lambda: constant(0, dtypes.int64), trainable=False, name="epochs",
                          collections=[GraphKeys.LOCAL_VARIABLES], dtype=dtypes.int64)
        counter = count_up_to(epochs, int(num_epochs))
        with control_dependencies([counter]):
            return [identity(t, name="epochs_limited") for t in tensors]


def input_producer(input_tensor, element_shape=None, num_epochs=None, shuffle=True, seed=None, capacity=32,
                   shared_name=None, summary_name=None, name=None, cancel_op=None) -> FIFOQueue:
    """A queue of ``input_tensor``'s rows, refilled (reshuffled when ``shuffle``) once per epoch
    by a queue runner; closed after ``num_epochs`` epochs (None: never)."""
    input_tensor = convert_to_tensor(input_tensor)
    if input_tensor.shape.rank is not None and input_tensor.shape.rank == 0:
        raise ValueError("input_producer takes a tensor of at least one dimension (its rows are produced)")
    if element_shape is None:
        element_shape = input_tensor.shape[1:]
    with name_scope(name or "input_producer"):
        epoch = limit_epochs(input_tensor, num_epochs)
        if shuffle:
            (epoch,) = shuffle_together([epoch], seed=seed)
        queue = FIFOQueue(capacity, [input_tensor.dtype], [element_shape], shared_name=shared_name)
        enqueue = queue.enqueue_many([epoch])
        add_queue_runner(QueueRunner(queue, [enqueue], cancel_op=cancel_op))
    return queue


def string_input_producer(string_tensor, num_epochs=None, shuffle=True, seed=None, capacity=32,
                          shared_name=None, name=None, cancel_op=None) -> FIFOQueue:
    """A queue of filenames for a reader, in a new random order every epoch (``shuffle``).

    >>> import dflow as tf
    >>> with tf.Graph().as_default():
    ...     files = tf.train.string_input_producer(["data_batch_1.bin"], num_epochs=2)
    ...     len(tf.get_collection(tf.GraphKeys.QUEUE_RUNNERS))
    1
    """
    if isinstance(string_tensor, Tensor):
        if string_tensor.dtype != dtypes.string:
            raise TypeError(f"string_input_producer takes strings, got a {string_tensor.dtype.name} tensor")
    else:
        names = [s.encode() if isinstance(s, str) else bytes(s) for s in list(string_tensor)]
        if not names:
            raise ValueError("string_input_producer needs at least one string (the filenames to read); "
                             "is the glob or directory empty?")
        import numpy  # a graph constant of bytes: the only NumPy here, to build the object array

        string_tensor = constant(numpy.array(names, dtype=object), dtype=dtypes.string)
    return input_producer(string_tensor, (), num_epochs, shuffle, seed, capacity, shared_name,
                          name=name or "input_producer", cancel_op=cancel_op)


def range_input_producer(limit, num_epochs=None, shuffle=True, seed=None, capacity=32, shared_name=None,
                         name=None) -> FIFOQueue:
    """A queue of the integers ``0 .. limit - 1``, once per epoch."""
    from ..ops.array_ops import range_

    with name_scope(name or "input_producer"):
        return input_producer(range_(int(limit)), (), num_epochs, shuffle, seed, capacity, shared_name)


def slice_input_producer(tensor_list, num_epochs=None, shuffle=True, seed=None, capacity=32, shared_name=None,
                         name=None) -> list[Tensor]:
    """One row of every tensor of ``tensor_list`` per run (the rows of one example stay together),
    all rows once per epoch, reshuffled each epoch when ``shuffle``.

    >>> import numpy as np, dflow as tf
    >>> with tf.Graph().as_default():
    ...     image, label = tf.train.slice_input_producer([np.zeros((10, 4, 4)), np.arange(10)], num_epochs=5)
    ...     image.shape.as_list(), label.shape.as_list()
    ([4, 4], [])
    """
    tensors = [convert_to_tensor(t) for t in tensor_list]
    if not tensors or any(t.shape.rank == 0 for t in tensors):
        raise ValueError("slice_input_producer takes a non-empty list of tensors of at least one dimension")
    with name_scope(name or "input_producer"):
        epoch = _limit_epochs(tensors, num_epochs)
        if shuffle:
            epoch = shuffle_together(epoch, seed=seed)
        queue = FIFOQueue(capacity, [t.dtype for t in tensors], [t.shape[1:] for t in tensors],
                          shared_name=shared_name)
        add_queue_runner(QueueRunner(queue, [queue.enqueue_many(epoch)]))
        row = queue.dequeue()
    return row if isinstance(row, list) else [row]


# ---- batching --------------------------------------------------------------------------------
def _as_list(tensors) -> tuple[list, list | None]:
    if isinstance(tensors, dict):
        keys = sorted(tensors)
        return [convert_to_tensor(tensors[k]) for k in keys], keys
    if isinstance(tensors, Tensor) or not isinstance(tensors, list | tuple):
        return [convert_to_tensor(tensors)], None
    return [convert_to_tensor(t) for t in tensors], None


def _element_shapes(tensors: list, shapes, enqueue_many: bool) -> list:
    if shapes is not None:
        return [list(s) for s in shapes]
    found = [t.shape[1:] if enqueue_many else t.shape for t in tensors]
    for t, shape in zip(tensors, found):
        if not shape.is_fully_defined():
            raise ValueError(
                f"All shapes must be fully defined: {t.name} has shape {shape}; give it one with "
                "tensor.set_shape([...]) or pass shapes= (dynamic_pad is not supported by dflow)")
    return found


def _as_original(original, keys, dequeued):
    if keys is not None:
        return dict(zip(keys, dequeued if isinstance(dequeued, list) else [dequeued]))
    return dequeued  # TF's quirk, kept: a list of one tensor comes back as that tensor


def _batcher(queue_for, tensor_lists, batch_size, num_threads, enqueue_many, shapes,
             allow_smaller_final_batch, dynamic_pad, name):
    if dynamic_pad:
        raise ValueError("tf.train.batch(dynamic_pad=True) is not supported by dflow: pad the examples to "
                         "one shape first (tf.pad or tf.image.resize_image_with_crop_or_pad)")
    lists = [_as_list(tensors) for tensors in tensor_lists]
    first, keys = lists[0]
    element_shapes = _element_shapes(first, shapes, enqueue_many)
    with name_scope(name):
        queue = queue_for([t.dtype for t in first], element_shapes)
        enqueue_ops = []
        for tensors, _ in lists:
            enqueue = queue.enqueue_many if enqueue_many else queue.enqueue
            enqueue_ops += [enqueue(tensors)] * (num_threads if len(lists) == 1 else 1)
        add_queue_runner(QueueRunner(queue, enqueue_ops))
        take = queue.dequeue_up_to if allow_smaller_final_batch else queue.dequeue_many
        return _as_original(tensor_lists[0], keys, take(batch_size))


def batch(tensors, batch_size, num_threads=1, capacity=32, enqueue_many=False, shapes=None, dynamic_pad=False,
          allow_smaller_final_batch=False, shared_name=None, name=None):
    """Batches of ``batch_size`` examples, in the order ``num_threads`` threads enqueue them.

    >>> import numpy as np, dflow as tf
    >>> with tf.Graph().as_default():
    ...     image, label = tf.train.slice_input_producer([np.zeros((10, 4, 4)), np.arange(10)])
    ...     images, labels = tf.train.batch([image, label], batch_size=8, num_threads=2)
    ...     images.shape.as_list()
    [8, 4, 4]
    """
    return _batcher(lambda types, shapes_: FIFOQueue(capacity, types, shapes_, shared_name=shared_name),
                    [tensors], batch_size, num_threads, enqueue_many, shapes, allow_smaller_final_batch,
                    dynamic_pad, name or "batch")


def shuffle_batch(tensors, batch_size, capacity, min_after_dequeue, num_threads=1, seed=None,
                  enqueue_many=False, shapes=None, allow_smaller_final_batch=False, shared_name=None,
                  name=None):
    """Batches drawn at random from a queue that holds at least ``min_after_dequeue`` examples.

    >>> import numpy as np, dflow as tf
    >>> with tf.Graph().as_default():
    ...     image, label = tf.train.slice_input_producer([np.zeros((10, 4, 4)), np.arange(10)])
    ...     images, labels = tf.train.shuffle_batch([image, label], batch_size=8, num_threads=2,
    ...                                             capacity=40, min_after_dequeue=20)
    ...     labels.shape.as_list()
    [8]
    """
    return _batcher(lambda types, shapes_: RandomShuffleQueue(capacity, min_after_dequeue, types, shapes_,
                                                               seed=seed, shared_name=shared_name),
                    [tensors], batch_size, num_threads, enqueue_many, shapes, allow_smaller_final_batch,
                    False, name or "shuffle_batch")


def batch_join(tensors_list, batch_size, capacity=32, enqueue_many=False, shapes=None, dynamic_pad=False,
               allow_smaller_final_batch=False, shared_name=None, name=None):
    """Like ``batch``, with one enqueuing thread per list of tensors (e.g. one per reader)."""
    return _batcher(lambda types, shapes_: FIFOQueue(capacity, types, shapes_, shared_name=shared_name),
                    list(tensors_list), batch_size, 1, enqueue_many, shapes, allow_smaller_final_batch,
                    dynamic_pad, name or "batch_join")


def shuffle_batch_join(tensors_list, batch_size, capacity, min_after_dequeue, seed=None, enqueue_many=False,
                       shapes=None, allow_smaller_final_batch=False, shared_name=None, name=None):
    """Like ``shuffle_batch``, with one enqueuing thread per list of tensors."""
    return _batcher(lambda types, shapes_: RandomShuffleQueue(capacity, min_after_dequeue, types, shapes_,
                                                               seed=seed, shared_name=shared_name),
                    list(tensors_list), batch_size, 1, enqueue_many, shapes, allow_smaller_final_batch,
                    False, name or "shuffle_batch_join")
