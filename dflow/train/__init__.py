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
from .allreduce import AllReduceOptimizer, BroadcastGlobalVariablesHook, ElasticGroup
from .basic_session_run_hooks import (
    FeedFnHook,
    LoggingTensorHook,
    NanLossDuringTrainingError,
    NanTensorHook,
)
from .coordinator import Coordinator, LooperThread
from .device_setter import GreedyLoadBalancingStrategy, byte_size_load_fn, replica_device_setter
from .input import (
    batch,
    batch_join,
    input_producer,
    limit_epochs,
    range_input_producer,
    shuffle_batch,
    shuffle_batch_join,
    slice_input_producer,
    string_input_producer,
)
from .learning_rate_decay import (
    cosine_decay,
    cosine_decay_restarts,
    inverse_time_decay,
    natural_exp_decay,
    piecewise_constant,
    polynomial_decay,
)
from .monitored_session import (
    CheckpointSaverHook,
    ChiefSessionCreator,
    MonitoredSession,
    MonitoredTrainingSession,
    Scaffold,
    SessionRunArgs,
    SessionRunContext,
    SessionRunHook,
    SessionRunValues,
    SingularMonitoredSession,
    StopAtStepHook,
    WorkerSessionCreator,
)
from .moving_averages import ExponentialMovingAverage
from .optimizers import (
    AdadeltaOptimizer,
    AdagradOptimizer,
    AdamOptimizer,
    FtrlOptimizer,
    GradientDescentOptimizer,
    MomentumOptimizer,
    Optimizer,
    RMSPropOptimizer,
    exponential_decay,
)
from .queue_runner import QueueRunner, add_queue_runner, start_queue_runners
from .saver import (
    CheckpointState,
    Saver,
    checkpoint_exists,
    export_meta_graph,
    get_checkpoint_state,
    import_meta_graph,
    latest_checkpoint,
)
from .supervisor import Supervisor
from .sync_replicas import SyncReplicasOptimizer
from .training_util import create_global_step, get_global_step, get_or_create_global_step, global_step
from .variable_update import VARIABLE_UPDATES, DistributedReplicatedOptimizer, VariableUpdate

__all__ = [
    "Optimizer", "GradientDescentOptimizer", "MomentumOptimizer", "AdamOptimizer",
    "exponential_decay", "polynomial_decay", "piecewise_constant", "natural_exp_decay", "inverse_time_decay",
    "cosine_decay", "cosine_decay_restarts", "get_global_step", "create_global_step",
    "get_or_create_global_step",
    "global_step", "Saver", "latest_checkpoint", "get_checkpoint_state", "checkpoint_exists",
    "export_meta_graph", "import_meta_graph",
    "CheckpointState", "MonitoredTrainingSession", "MonitoredSession", "SingularMonitoredSession", "Scaffold",
    "ChiefSessionCreator", "WorkerSessionCreator", "SessionRunHook", "SessionRunArgs",
    "SessionRunContext", "SessionRunValues", "StopAtStepHook", "CheckpointSaverHook",
    "replica_device_setter", "GreedyLoadBalancingStrategy", "byte_size_load_fn",
    "SyncReplicasOptimizer", "ClusterSpec", "Server", "AllReduceOptimizer", "BroadcastGlobalVariablesHook",
    "ElasticGroup", "VariableUpdate", "VARIABLE_UPDATES", "DistributedReplicatedOptimizer",
    "AdagradOptimizer", "RMSPropOptimizer", "AdadeltaOptimizer", "FtrlOptimizer", "ExponentialMovingAverage",
    "Supervisor",
    "Coordinator", "LooperThread", "QueueRunner", "add_queue_runner", "start_queue_runners", "batch",
    "batch_join", "shuffle_batch", "shuffle_batch_join", "input_producer", "string_input_producer",
    "range_input_producer", "limit_epochs", "slice_input_producer",
]


# tf.train.Example and its parts: protobuf classes, imported when a script first uses one
EXAMPLE_CLASSES = ("Example", "SequenceExample", "Features", "Feature", "FeatureList", "FeatureLists",
                   "BytesList", "FloatList", "Int64List")


def __getattr__(name: str):
    from ..summary import REMOVED_TRAIN_NAMES, removed_name_error

    if name in EXAMPLE_CLASSES:
        from ..core.example import example_pb2

        return getattr(example_pb2, name)
    if name in REMOVED_TRAIN_NAMES:  # tf.train.SummaryWriter: TF 0.x
        raise removed_name_error(name, "tf.train")
    raise AttributeError(f"module 'dflow.train' has no attribute {name!r}")


from .summary_saver import StepCounterHook, SummarySaverHook  # noqa: E402 - after the hooks it builds on

__all__ += ["SummarySaverHook", "StepCounterHook", "NanTensorHook", "NanLossDuringTrainingError",
            "LoggingTensorHook", "FeedFnHook"]
