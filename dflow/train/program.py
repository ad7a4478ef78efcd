"""The training program that ``dflow train`` and ``dflow bench`` run: its graph, data, evaluation,
its between-graph replica, and how a client stops replicas and itself.

:func:`build_training_graph` builds a model of :mod:`dflow.models` with its loss, optimizer
(:func:`make_optimizer`) and per-batch metric; :func:`load_data` reads the dataset it trains
on (the test split fixed whatever the seed) and :func:`evaluate` sums the metric over that
split. :func:`train_replica` is one worker task's training loop on a cluster; the client
asks replicas to stop with :func:`stop_replicas` (run on the workers), and turns Ctrl-C and
SIGTERM into exceptions only between its own calls (:func:`interrupt_at_safe_points`).

>>> import dflow as tf
>>> from dflow.models import get_model
>>> model = get_model("linear_regression")
>>> data = load_data("line", model)
>>> with tf.Graph().as_default():
...     g = build_training_graph(model, model.train_defaults)  # sgd, learning rate 0.01
...     with tf.Session() as sess:
...         sess.run(tf.global_variables_initializer())
...         for x, y in itertools.islice(data.train_batches(64, seed=0), 300):
...             _ = sess.run(g.train_op, {g.inputs: x, g.targets: y})
...         total, count, (weight, bias) = evaluate(sess, g, data, regression=True)
>>> round(weight), round(bias), count
(3, 0, 200)
"""

from __future__ import annotations

import contextlib
import itertools  # noqa: F401 - the module example's
import logging
import os
import signal
import threading
import time
from typing import NamedTuple

import numpy as np

from ..cli_data import ArrayData, StoreData, store_path
from ..errors import OpError

__all__ = ["OPTIMIZERS", "TrainingGraph", "make_optimizer", "build_training_graph", "load_data", "evaluate",
           "log_scalars", "train_replica", "STOP", "stop_replicas", "cancel_waits", "Terminated",
           "SYNCHRONOUS_UPDATES", "ROLE_LOSS_GRACE_S",
           "interrupt_at_safe_points"]

OPTIMIZERS = ("sgd", "momentum", "adam")
LINE_EXAMPLES, LINE_TEST = 1000, 200  # the 'line' dataset: examples, of which the first are the test split

log = logging.getLogger("dflow")


def make_optimizer(name: str, learning_rate: float, momentum: float = 0.9):
    """The optimizer ``name`` (one of :data:`OPTIMIZERS`) runs with."""
    from .optimizers import AdamOptimizer, GradientDescentOptimizer, MomentumOptimizer

    if name == "sgd":
        return GradientDescentOptimizer(learning_rate)
    if name == "momentum":
        return MomentumOptimizer(learning_rate, momentum)
    if name == "adam":
        return AdamOptimizer(learning_rate)
    raise ValueError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")


class TrainingGraph(NamedTuple):
    """The tensors a training loop feeds and fetches."""

    inputs: object
    targets: object
    keep_prob: object
    outputs: object
    loss: object
    train_op: object
    global_step: object
    optimizer: object
    metric: object  # per batch: correct predictions (classifiers) or summed squared error


def build_training_graph(model, settings: dict, data_format: str = "NHWC", momentum: float = 0.9,
                         optimizer_wrapper=None) -> TrainingGraph:
    """``model``'s training graph in the default graph; ``settings`` names its ``optimizer`` and
    ``learning_rate``. ``optimizer_wrapper`` (a ``VariableUpdate.optimizer``) wraps the optimizer as
    the replicas' variable update needs."""
    import dflow as tf

    classifier = model.num_classes is not None
    inputs = tf.placeholder(tf.float32, [None, *model.input_shape], name="inputs")
    targets = tf.placeholder(tf.int64 if classifier else tf.float32, [None], name="targets")
    keep_prob = tf.placeholder(tf.float32, [], name="keep_prob") if model.dropout else None
    outputs = model(inputs, data_format=data_format, keep_prob=keep_prob)
    loss = model.loss(outputs, targets)
    global_step = tf.train.get_or_create_global_step()
    optimizer = make_optimizer(settings["optimizer"], settings["learning_rate"], momentum)
    if optimizer_wrapper is not None:
        optimizer = optimizer_wrapper(optimizer)
    train_op = optimizer.minimize(loss, global_step=global_step)
    update_ops = tf.get_collection(tf.GraphKeys.UPDATE_OPS)  # batch norm's moving averages
    if update_ops:
        train_op = tf.group(train_op, *update_ops)
    if classifier:
        metric = tf.reduce_sum(tf.cast(tf.nn.in_top_k(outputs, targets, 1), tf.int32))
    else:
        metric = tf.reduce_sum(tf.square(outputs - targets))
    return TrainingGraph(inputs, targets, keep_prob, outputs, loss, train_op, global_step, optimizer, metric)


def load_data(dataset: str, model) -> ArrayData | StoreData:
    """The dataset ``model`` trains on: ``line``, ``digits`` or a store's path (its test split
    fixed, seed 0, whatever the training seed)."""
    if dataset == "line":
        from ..models.linear_regression import make_line_data

        x, y = make_line_data(LINE_EXAMPLES, seed=0)
        return ArrayData(x[LINE_TEST:], y[LINE_TEST:], x[:LINE_TEST], y[:LINE_TEST])
    if dataset == "digits":
        from ..data import load_digits

        return ArrayData(*load_digits(model.input_shape, seed=0))
    path = store_path(dataset)
    if path is None:
        raise ValueError(f"dataset {dataset!r} is not a prepared store: prepare it with `dflow data prepare "
                         "NAME --source FILE`, or pass the store's path")
    return StoreData(path, model.input_shape, model.name)


def evaluate(sess, g: TrainingGraph, data, regression: bool) -> tuple[float, int, list[float]]:
    """The test metric summed over the test split, its size, and (regression) weight and bias."""
    from ..models.layers import IS_TRAINING

    total, count = 0.0, 0
    for x, y in data.test_batches():
        feed = {g.inputs: x, g.targets: y}
        if g.keep_prob is not None:
            feed[g.keep_prob] = 1.0
        for training in sess.graph.get_collection(IS_TRAINING):  # batch norm: the moving averages
            feed[training] = False
        total += float(sess.run(g.metric, feed))
        count += len(y)
    trainable = sess.graph.get_collection("trainable_variables") if regression else []
    weights = [float(sess.run(v)) for v in trainable]
    return total, count, weights


def log_scalars(logdir: str | None, step: int, **values: float) -> None:
    """Append ``values`` at ``step`` to the event file in ``logdir`` for TensorBoard (one writer per
    directory); nothing without a ``logdir``."""
    if logdir:
        import dflow as tf

        writer = tf.summary.FileWriterCache.get(logdir)
        writer.add_summary(tf.Summary(value=[tf.Summary.Value(tag=tag, simple_value=float(value))
                                             for tag, value in values.items()]), step)
        writer.flush()  # TensorBoard shows each progress line as it is printed


# ---- stopping replicas (in their worker processes) ------------------------------------------------
SYNCHRONOUS_UPDATES = ("replicated", "allreduce")  # every replica applies the same summed update
ROLE_LOSS_GRACE_S = 8.0  # a failed step waits this long for the scheduler to notice a dead role
STOP = threading.Event()  # set in a worker process by the client on Ctrl-C: its bench replica stops
# the training runs whose replicas must stop, in a worker process, and which replica of each saves
# a checkpoint as it stops in the chief's place (the chief died; None: the chief saves, or no one can)
_stopped_runs: dict[str, int | None] = {}


def stop_replicas(run: str | None = None, saver: int | None = None) -> None:
    """Run on a worker (``client.run``): its replicas of ``run`` stop after their step, replica
    ``saver`` saving a checkpoint in the chief's place; without ``run``, its benchmark replica."""
    if run is None:
        STOP.set()
    else:
        _stopped_runs[run] = saver


def _stopped_soon(run: str) -> bool:
    """Whether the client asks the replicas of ``run`` to stop within ROLE_LOSS_GRACE_S (a replica
    that found a dead peer itself may be before the client's notice)."""
    deadline = time.monotonic() + ROLE_LOSS_GRACE_S
    while run not in _stopped_runs and time.monotonic() < deadline:
        time.sleep(0.1)
    return run in _stopped_runs


def cancel_waits(dask_worker) -> None:
    """Run on a worker (``client.run``): steps there waiting at a barrier for a dead peer end now."""
    from ..distributed.worker import PLUGIN_NAME

    plugin = dask_worker.plugins.get(PLUGIN_NAME)
    if plugin is not None:
        plugin.cancel_waits()


class Terminated(KeyboardInterrupt):
    """SIGTERM (Slurm's preemption, ``kill``): stop as Ctrl-C does, then exit with 143."""


@contextlib.contextmanager
def interrupt_at_safe_points():
    """Ctrl-C and SIGTERM set the event this yields; the client's follow loop turns it into
    KeyboardInterrupt (or :class:`Terminated`) between calls, since one raised inside a Dask client
    call would leave that call half done. ``interrupted.exception()`` is the one to raise."""
    interrupted = _Interrupted()
    handlers = {signum: signal.signal(signum, interrupted.catch)
                for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield interrupted
    finally:
        for signum, previous in handlers.items():
            signal.signal(signum, previous)


class _Interrupted(threading.Event):
    signum = signal.SIGINT

    def catch(self, signum, _frame) -> None:
        if not self.is_set():
            self.signum = signum
        self.set()

    def exception(self) -> KeyboardInterrupt:
        return Terminated() if self.signum == signal.SIGTERM else KeyboardInterrupt()


# ---- one worker task's training loop ---------------------------------------------------------------
def train_replica(task_index: int, target: str, spec_of_cluster, args, settings: dict, steps: int,
                  progress_name: str, run: str = "") -> dict:
    """One worker's training program (``dflow train``'s options ``args``, the model's ``settings``);
    returns its steps, last loss, staleness, global step and (chief) evaluation. The chief puts
    ``("restored", path, step)`` and then ``(step, loss, images/sec)`` on the Dask queue
    ``progress_name`` every ``args.log_every`` global steps."""
    import distributed

    import dflow as tf
    from dflow.models import get_model

    model = get_model(args.model)
    data = load_data(settings["dataset"], model)
    tf.set_random_seed(args.seed)  # the chief's initializers give the weights local training would
    update = tf.train.VariableUpdate(args.variable_update, spec_of_cluster, task_index, sync=args.sync,
                                     devices_per_node=args.devices_per_node,
                                     sync_timeout=getattr(args, "sync_timeout", 300.0))
    chief = update.saves_checkpoints  # task 0, or the first survivor of an elastic ring
    with tf.device(update.device()):
        g = build_training_graph(model, settings, args.data_format, args.momentum, update.optimizer)
    # saves in the chief's place if the chief dies (its own saver is CheckpointSaverHook's)
    stand_in = tf.train.Saver() if args.checkpoint_dir and not update.saves_checkpoints else None
    batches = data.train_batches(settings["batch_size"], seed=args.seed + task_index,
                                 shard=update.shard)  # each worker reads its own examples
    queue = distributed.Queue(progress_name) if chief else None
    checkpoint_dir = args.checkpoint_dir if update.saves_checkpoints else None
    loop = _ReplicaLoop(g, settings, args, steps, queue, update.images_per_step(settings["batch_size"]))
    hooks = [tf.train.StopAtStepHook(last_step=steps), *update.hooks()]
    # a ring that lost a member cannot make a new session with it: the client recovers instead
    ring = args.variable_update in SYNCHRONOUS_UPDATES
    with tf.train.MonitoredTrainingSession(
            target, is_chief=update.is_chief, hooks=hooks, checkpoint_dir=checkpoint_dir,
            save_checkpoint_steps=args.checkpoint_every if checkpoint_dir else None,
            max_recoveries=0 if ring else 3) as sess:
        loop.run(sess, batches, task_index, run, ring)
        if stand_in is not None and _stopped_runs.get(run) == task_index:
            _save_in_chiefs_place(stand_in, sess, g, args.checkpoint_dir)
        evaluation = (evaluate(sess, g, data, model.num_classes is None)
                      if chief and run not in _stopped_runs else None)
    loss = float(np.mean(loop.losses[-20:])) if loop.losses else float("nan")
    return {"task": task_index, "steps": loop.local_steps, "loss": loss,
            "staleness": loop.staleness, "evaluation": evaluation, "global_step": loop.global_step}


class _ReplicaLoop:
    """A replica's steps until its session stops or its run is stopped, and what they did."""

    def __init__(self, g: TrainingGraph, settings: dict, args, steps: int, queue, images_per_step: int):
        self.g, self.settings, self.args, self.steps = g, settings, args, steps
        self.queue, self.images_per_step = queue, images_per_step
        self.losses: list[float] = []
        self.staleness: list[int] = []
        self.local_steps = self.global_step = 0

    def run(self, sess, batches, task_index: int, run: str, ring: bool) -> None:
        import dflow as tf

        g, args = self.g, self.args
        last_step, last_time = int(sess.run(g.global_step)), time.perf_counter()
        self.global_step = last_step
        if self.queue is not None:  # where the chief starts: a checkpoint it restored, or step 0
            restored = tf.train.latest_checkpoint(args.checkpoint_dir) if last_step else None
            self.queue.put(("restored", restored, last_step))
        reported, recent = last_step // args.log_every, []
        while not sess.should_stop() and run not in _stopped_runs:
            x, y = next(batches)
            feed = {g.inputs: x, g.targets: y}
            if g.keep_prob is not None:
                feed[g.keep_prob] = self.settings["keep_prob"]
            try:
                _, loss, step = sess.run([g.train_op, g.loss, g.global_step], feed)
            except tf.errors.CancelledError:
                break  # sync training ended while this replica waited at the barrier (or collective)
            except tf.errors.UnavailableError:
                if not (ring and _stopped_soon(run)):
                    raise
                break  # a member of the ring died: stop with the last whole step, as the client asks
            if not np.isfinite(loss):
                raise FloatingPointError(f"the loss is {loss} on worker {task_index} near step {step}; "
                                         "try a lower --learning_rate")
            self.local_steps += 1
            self.losses.append(float(loss))
            recent.append(float(loss))
            self.staleness.append(sess.last_run_stats.staleness or 0)
            step = self.global_step = int(step) + 1  # the step was read before this run's update
            if self.queue is not None and (step // args.log_every > reported or step >= self.steps):
                now = time.perf_counter()
                self.queue.put((min(step, self.steps), float(np.mean(recent)),
                                (step - last_step) * self.images_per_step / (now - last_time)))
                reported, last_step, last_time, recent = step // args.log_every, step, now, []


def _save_in_chiefs_place(saver, sess, g: TrainingGraph, checkpoint_dir: str) -> None:
    try:
        saver.save(sess._session, os.path.join(checkpoint_dir, "model.ckpt"), global_step=g.global_step)
    except (OpError, OSError) as error:  # the PS went too: the latest checkpoint is what there is
        log.warning("could not save in the chief's place: %s", error)
