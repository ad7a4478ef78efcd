"""``tf.contrib``: the parts of TF 1.x's contrib that real scripts use most.

``tf.contrib.layers`` (with ``tf.contrib.framework``'s ``arg_scope``), ``tf.contrib.rnn``,
``tf.contrib.data``, ``tf.contrib.lookup``, ``tf.contrib.factorization`` (``KMeans``),
``tf.contrib.predictor`` and ``tf.contrib.learn``'s datasets are here; any other
``tf.contrib.X`` raises an AttributeError that names it, says dflow does not support it, and
what to use instead.

>>> import dflow as tf
>>> tf.contrib.summary
Traceback (most recent call last):
...
AttributeError: tf.contrib.summary is not supported by dflow; use tf.summary instead
"""

from .. import lookup
from . import (
    data,
    factorization,
    framework,
    layers,
    learn,
    legacy_seq2seq,
    opt,
    predictor,
    rnn,
    seq2seq,
    slim,
)

__all__ = ["data", "factorization", "framework", "layers", "learn", "legacy_seq2seq", "lookup", "opt",
           "predictor", "rnn", "seq2seq", "slim"]

# what to use instead of each contrib module real TF 1.x scripts reach for
_INSTEAD = {
    "metrics": "tf.metrics",
    "losses": "tf.losses",
    "keras": "tf.layers",
    "training": "tf.train (Supervisor, MonitoredTrainingSession, SyncReplicasOptimizer)",
    "optimizer_v2": "the optimizers of tf.train",
    "distribute": "tf.train.replica_device_setter, SyncReplicasOptimizer or AllReduceOptimizer",
    "summary": "tf.summary",
    "image": "tf.image",
    "cudnn_rnn": "tf.nn.rnn_cell",
}


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    instead = _INSTEAD.get(name)
    hint = f"; use {instead} instead" if instead else " and has no equivalent of it"
    raise AttributeError(f"tf.contrib.{name} is not supported by dflow{hint}")
