"""``tf.train``: optimizers, learning-rate decay, the global step, checkpoints.

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     step = tf.train.get_or_create_global_step()
...     w = tf.Variable(2.0, name="w")
...     train = tf.train.MomentumOptimizer(0.1, 0.9).minimize(w * w, global_step=step)
...     with tf.Session() as sess:
...         _ = sess.run(tf.global_variables_initializer())
...         _ = sess.run(train)
...         int(sess.run(step))
1
"""

from ..cluster import ClusterSpec, Server
from .allreduce import AllReduceOptimizer, BroadcastGlobalVariablesHook
from .basic_session_run_hooks import (
    LoggingTensorHook,
    NanLossDuringTrainingError,
    NanTensorHook,
    StepCounterHook,
)
from .device_setter import GreedyLoadBalancingStrategy, byte_size_load_fn, replica_device_setter
from .monitored_session import (
    CheckpointSaverHook,
    MonitoredTrainingSession,
    SessionRunArgs,
    SessionRunContext,
    SessionRunHook,
    SessionRunValues,
    StopAtStepHook,
)
from .optimizers import (
    AdamOptimizer,
    GradientDescentOptimizer,
    MomentumOptimizer,
    Optimizer,
    exponential_decay,
)
from .saver import CheckpointState, Saver, checkpoint_exists, get_checkpoint_state, latest_checkpoint
from .supervisor import Supervisor
from .sync_replicas import SyncReplicasOptimizer
from .training_util import create_global_step, get_global_step, get_or_create_global_step, global_step
from .variable_update import VARIABLE_UPDATES, DistributedReplicatedOptimizer, VariableUpdate

__all__ = [
    "Optimizer", "GradientDescentOptimizer", "MomentumOptimizer", "AdamOptimizer",
    "exponential_decay", "get_global_step", "create_global_step", "get_or_create_global_step",
    "global_step", "Saver", "latest_checkpoint", "get_checkpoint_state", "checkpoint_exists",
    "CheckpointState", "MonitoredTrainingSession", "SessionRunHook", "SessionRunArgs",
    "SessionRunContext", "SessionRunValues", "StopAtStepHook", "CheckpointSaverHook",
    "replica_device_setter", "GreedyLoadBalancingStrategy", "byte_size_load_fn",
    "SyncReplicasOptimizer", "ClusterSpec", "Server", "AllReduceOptimizer", "BroadcastGlobalVariablesHook",
    "VariableUpdate", "VARIABLE_UPDATES", "DistributedReplicatedOptimizer",
]
__all__ += ["Supervisor", "NanTensorHook", "NanLossDuringTrainingError", "LoggingTensorHook",
            "StepCounterHook"]
