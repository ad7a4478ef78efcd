"""``tf.contrib.slim``: its layers (``tf.contrib.layers``' own, as in TF), ``arg_scope``,
``prefetch_queue`` (a queue, as the multi-GPU CIFAR-10 tutorial uses it) and
``learning.create_train_op``.

The rest of slim (``learning.train``, its losses, datasets and nets) is not supported; each name
says so and what to use instead.

>>> import dflow as tf
>>> tf.contrib.slim.fully_connected is tf.contrib.layers.fully_connected
True
>>> tf.contrib.slim.losses
Traceback (most recent call last):
...
AttributeError: tf.contrib.slim.losses is not supported by dflow; use tf.losses instead
"""

from .. import layers
from ..framework import add_arg_scope, arg_scope, current_arg_scope
from . import learning, prefetch_queue

__all__ = ["learning", "prefetch_queue", "arg_scope", "add_arg_scope", "current_arg_scope"]

# slim's layers: tf.contrib.layers' own functions, under the same names
_FROM_CONTRIB_LAYERS = {
    "conv2d", "convolution2d", "conv2d_transpose", "fully_connected", "flatten", "max_pool2d", "avg_pool2d",
    "dropout", "batch_norm", "layer_norm", "one_hot_encoding", "l2_regularizer", "l1_regularizer",
    "xavier_initializer", "variance_scaling_initializer",
}
_INSTEAD = {
    "losses": "tf.losses",
    "metrics": "tf.metrics",
    "evaluation": "a tf.train.MonitoredTrainingSession loop over tf.metrics",
    "variables": "tf.get_variable, tf.global_variables and tf.train.Saver",
    "model_variable": "tf.get_variable",
    "get_variables_to_restore": "tf.global_variables (and tf.train.Saver(var_list=...))",
    "get_model_variables": "tf.global_variables",
    "dataset": "tf.data or the queue input pipeline (tf.train.batch, tf.train.shuffle_batch)",
    "dataset_data_provider": "tf.data or the queue input pipeline (tf.train.batch, tf.train.shuffle_batch)",
    "queues": "tf.train.QueueRunner and tf.train.start_queue_runners",
    "nets": "the models of dflow.models (dflow train --model NAME)",
    "repeat": "a Python loop over tf.contrib.layers calls",
    "stack": "a Python loop over tf.contrib.layers calls",
}


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    if name in _FROM_CONTRIB_LAYERS:
        return getattr(layers, name)
    instead = _INSTEAD.get(name, "tf.layers and tf.contrib.layers for layers, tf.losses, tf.metrics, "
                                 "tf.train for training loops")
    raise AttributeError(f"tf.contrib.slim.{name} is not supported by dflow; use {instead} instead")
