"""``tf.estimator.Estimator`` over dflow sessions and checkpoints.

Each of ``train``, ``evaluate`` and ``predict`` builds a fresh graph (the input
function, then the model function in the matching :class:`ModeKeys` mode), and
the model lives between calls only in ``model_dir``'s checkpoints, as in TF:
``train`` restores the latest one (or initializes) and saves at the end,
``evaluate`` and ``predict`` restore it.

>>> import numpy as np, dflow as tf
>>> def model_fn(features, labels, mode):
...     w = tf.get_variable("w", [], initializer=tf.zeros_initializer())
...     prediction = features["x"] * w
...     if mode == tf.estimator.ModeKeys.PREDICT:
...         return tf.estimator.EstimatorSpec(mode, predictions=prediction)
...     loss = tf.reduce_mean(tf.square(prediction - labels))
...     step = tf.train.get_global_step()
...     train_op = tf.train.GradientDescentOptimizer(1.0).minimize(loss, global_step=step)
...     return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)
>>> x = np.linspace(-1, 1, 50, dtype=np.float32)
>>> input_fn = tf.estimator.inputs.numpy_input_fn({"x": x}, 3 * x, batch_size=10, num_epochs=None,
...                                               shuffle=True)
>>> model = tf.estimator.Estimator(model_fn).train(input_fn, steps=40)
>>> round(float(model.get_variable_value("w")), 3)
3.0
"""

from __future__ import annotations

import inspect
import itertools
import logging
import math
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np

from ..errors import OutOfRangeError
from ..graph import Graph, GraphKeys, Tensor, set_random_seed
from ..ops.lookup_ops import tables_initializer
from ..runtime.session import Session
from ..saved_model import tag_constants
from ..saved_model.builder import SavedModelBuilder
from ..train.monitored_session import (
    MonitoredTrainingSession,
    SessionRunArgs,
    SessionRunContext,
    SessionRunHook,
    SessionRunValues,
    StopAtStepHook,
)
from ..train.saver import Saver, latest_checkpoint
from ..train.training_util import get_or_create_global_step
from ..variables import group, local_variables_initializer
from .export import ServingInputReceiver, TensorServingInputReceiver, signature_defs
from .inputs import feeders

__all__ = ["Estimator", "EstimatorSpec", "ModeKeys", "RunConfig", "TrainSpec", "EvalSpec",
           "train_and_evaluate"]

log = logging.getLogger("dflow")


class ModeKeys:
    """The mode a model function builds for."""

    TRAIN = "train"
    EVAL = "eval"
    PREDICT = "infer"


class EstimatorSpec(NamedTuple):
    """What a model function returns: ``train`` needs ``loss`` and ``train_op``, ``evaluate``
    needs ``loss`` (``eval_metric_ops``: name -> ``(value, update_op)``), ``predict`` needs
    ``predictions`` (a tensor, or a dict of them)."""

    mode: str
    predictions: Any = None
    loss: Any = None
    train_op: Any = None
    eval_metric_ops: Any = None
    export_outputs: Any = None
    training_chief_hooks: Any = None
    training_hooks: Any = None
    scaffold: Any = None
    evaluation_hooks: Any = None
    prediction_hooks: Any = None

    def check(self, mode: str) -> EstimatorSpec:
        missing = {ModeKeys.TRAIN: ("loss", "train_op"), ModeKeys.EVAL: ("loss",),
                   ModeKeys.PREDICT: ("predictions",)}[mode]
        for field in missing:
            if getattr(self, field) is None:
                raise ValueError(f"Missing {field} in the EstimatorSpec the model_fn returned in mode "
                                 f"{mode!r}: pass EstimatorSpec(mode, {field}=...)")
        for name, pair in (self.eval_metric_ops or {}).items():
            if not (isinstance(pair, tuple) and len(pair) == 2):
                raise TypeError(f"eval_metric_ops[{name!r}] must be a (value, update_op) pair, "
                                f"as tf.metrics.* return, got {pair!r}")
        return self


class RunConfig:
    """Where and how often an Estimator checkpoints and logs."""

    def __init__(self, model_dir=None, tf_random_seed=None, save_summary_steps=100,
                 save_checkpoints_steps=None, save_checkpoints_secs=None, session_config=None,
                 keep_checkpoint_max=5, keep_checkpoint_every_n_hours=10000, log_step_count_steps=100,
                 **_ignored):
        if save_checkpoints_steps is not None and save_checkpoints_secs is not None:
            raise ValueError("RunConfig: give save_checkpoints_steps or save_checkpoints_secs, not both")
        self.model_dir = model_dir
        self.tf_random_seed = tf_random_seed
        self.save_summary_steps = save_summary_steps
        self.save_checkpoints_steps = save_checkpoints_steps
        self.save_checkpoints_secs = (600 if save_checkpoints_secs is None and save_checkpoints_steps is None
                                      else save_checkpoints_secs)
        self.session_config = session_config
        self.keep_checkpoint_max = keep_checkpoint_max
        self.log_step_count_steps = log_step_count_steps

    def replace(self, **changes) -> RunConfig:
        fields = dict(vars(self)) | changes
        if "save_checkpoints_steps" in changes and "save_checkpoints_secs" not in changes:
            fields["save_checkpoints_secs"] = None
        return RunConfig(**fields)


class _LossHook(SessionRunHook):
    """Logs the loss every ``every`` steps and stops a diverged run, as TF's Estimator does."""

    def __init__(self, loss: Tensor, step, every: int):
        self._loss, self._step, self._every = loss, step, max(1, int(every or 100))
        self._count = 0

    def before_run(self, run_context):
        return SessionRunArgs([self._loss, self._step])

    def after_run(self, run_context, run_values):
        loss, step = run_values.results
        if not math.isfinite(float(loss)):
            raise RuntimeError(f"Model diverged with loss = {float(loss)} at step {int(step)}.")
        if self._count % self._every == 0:
            log.info("loss = %g, step = %d", float(loss), int(step) + 1)
        self._count += 1


class Estimator:
    """Trains, evaluates and predicts with a ``model_fn(features, labels, mode, params, config)``
    that returns an :class:`EstimatorSpec` (it may take any subset of those arguments but
    ``features``).

    ``model_dir`` holds the checkpoints (a new temporary directory when None, as in TF).
    """

    def __init__(self, model_fn, model_dir=None, config=None, params=None, warm_start_from=None):
        if not callable(model_fn):
            raise TypeError(f"model_fn must be a function, got {model_fn!r}")
        if warm_start_from is not None:
            raise ValueError("Estimator(warm_start_from=) is not supported by dflow: copy the checkpoint "
                             "into model_dir instead (train restores the latest one there)")
        self._model_fn = model_fn
        self._config = config or RunConfig()
        model_dir = model_dir or self._config.model_dir
        if model_dir is None:
            model_dir = tempfile.mkdtemp()
            log.warning("Using temporary folder as model directory: %s", model_dir)
        self._model_dir = str(model_dir)
        self._config = self._config.replace(model_dir=self._model_dir)
        self._params = dict(params or {})

    @property
    def model_dir(self) -> str:
        return self._model_dir

    @property
    def config(self) -> RunConfig:
        return self._config

    @property
    def params(self) -> dict:
        return dict(self._params)

    def latest_checkpoint(self) -> str | None:
        return latest_checkpoint(self._model_dir)

    # ---- building a graph -------------------------------------------------------------------
    def _build(self, input_fn, mode):
        """A new graph with the global step, the input and the model: ``(graph, spec, feeds)``."""
        graph, step = self._new_graph()
        with graph.as_default():
            features, labels = self._call_input_fn(input_fn, mode)
            spec = self._call_model_fn(features, labels, mode)
        return graph, step, spec, _batches(graph)

    def _new_graph(self):
        """A new graph with the config's seed and the global step: ``(graph, step)``."""
        graph = Graph()
        with graph.as_default():
            if self._config.tf_random_seed is not None:
                set_random_seed(self._config.tf_random_seed)
            return graph, get_or_create_global_step()

    def _call_input_fn(self, input_fn, mode):
        accepted = inspect.signature(input_fn).parameters
        kwargs = {k: v for k, v in (("mode", mode), ("params", self._params), ("config", self._config))
                  if k in accepted}
        result = input_fn(**kwargs)
        from ..data.tf_data import DatasetV1  # dflow.data imports dflow's version: after dflow is set up

        if isinstance(result, tuple | list):
            if len(result) != 2:
                raise ValueError(f"input_fn must return features or (features, labels), got {len(result)} "
                                 "values")
            return result
        if isinstance(result, DatasetV1):  # as TF's: its elements are features or (features, labels)
            result = result.make_one_shot_iterator().get_next()
            return tuple(result) if isinstance(result, tuple) and len(result) == 2 else (result, None)
        if hasattr(result, "__iter__") and not isinstance(result, Tensor | dict):
            raise ValueError(f"input_fn must return a tf.data.Dataset, features or (features, labels), got "
                             f"a {type(result).__name__}")
        return result, None

    def _call_model_fn(self, features, labels, mode) -> EstimatorSpec:
        accepted = inspect.signature(self._model_fn).parameters
        kwargs = {}
        if "labels" in accepted:
            kwargs["labels"] = labels
        elif labels is not None:
            raise ValueError("model_fn does not take labels, but input_fn returns labels.")
        for name, value in (("mode", mode), ("params", self._params), ("config", self._config)):
            if name in accepted:
                kwargs[name] = value
        spec = self._model_fn(features=features, **kwargs)
        if not isinstance(spec, EstimatorSpec):
            raise ValueError(f"model_fn should return an EstimatorSpec, got {type(spec).__name__}")
        return spec.check(mode)

    def _restore(self, graph, checkpoint_path):
        checkpoint = checkpoint_path or self.latest_checkpoint()
        if checkpoint is None:
            raise ValueError(f"Could not find trained model in model_dir: {self._model_dir}. "
                             "Train it first (estimator.train).")
        with graph.as_default():
            saver, init_local = Saver(), local_variables_initializer()
        session = Session(graph=graph, config=self._config.session_config)
        saver.restore(session, checkpoint)
        session.run(init_local)
        return session

    # ---- the three modes ----------------------------------------------------------------------
    def train(self, input_fn, hooks=None, steps=None, max_steps=None, saving_listeners=None) -> Estimator:
        """Train for ``steps`` more steps (or up to global step ``max_steps``, or until the input
        runs out), starting from the latest checkpoint; save one at the end. Returns self."""
        if steps is not None and max_steps is not None:
            raise ValueError("Can not provide both steps and max_steps.")
        if saving_listeners:
            raise ValueError("Estimator.train(saving_listeners=) is not supported by dflow: pass a "
                             "tf.train.SessionRunHook in hooks= instead (its end() sees the final session)")
        for name, value in (("steps", steps), ("max_steps", max_steps)):
            if value is not None and value <= 0:
                raise ValueError(f"Must specify {name} > 0, given: {value}")
        if max_steps is not None and _checkpoint_step(self.latest_checkpoint()) >= max_steps:
            log.info("Skipping training since max_steps has already saved.")
            return self
        graph, step, spec, batches = self._build(input_fn, ModeKeys.TRAIN)
        if not _runs_out(graph) and steps is None and max_steps is None:
            raise ValueError("train: the input_fn feeds no batches that run out, so give steps= or "
                             "max_steps=")
        with graph.as_default():
            all_hooks = [_LossHook(spec.loss, step, self._config.log_step_count_steps),
                         *(spec.training_hooks or []), *(hooks or [])]
            if steps is not None or max_steps is not None:
                all_hooks.append(StopAtStepHook(num_steps=steps, last_step=max_steps))
            with MonitoredTrainingSession(
                    checkpoint_dir=self._model_dir, hooks=all_hooks,
                    chief_only_hooks=spec.training_chief_hooks,
                    save_checkpoint_steps=self._config.save_checkpoints_steps,
                    save_checkpoint_secs=self._config.save_checkpoints_secs,
                    config=self._config.session_config) as session:
                for feed in batches:
                    if session.should_stop():
                        break
                    session.run(spec.train_op, feed)
        return self

    def evaluate(self, input_fn, steps=None, hooks=None, checkpoint_path=None, name=None) -> dict:
        """The metrics of ``eval_metric_ops`` over the input (or ``steps`` batches), with
        ``'loss'`` (the mean of the batches' losses) and ``'global_step'``."""
        graph, step, spec, batches = self._build(input_fn, ModeKeys.EVAL)
        metrics = dict(spec.eval_metric_ops or {})
        session = _HookedSession(graph, [*(spec.evaluation_hooks or []), *(hooks or [])],
                                 lambda: self._restore(graph, checkpoint_path))
        try:
            updates = [update for _, update in metrics.values()]
            losses = []
            for feed in itertools.islice(_one_pass(batches, graph), steps):
                try:
                    losses.append(session.run([spec.loss, updates], feed)[0])
                except OutOfRangeError:  # a tf.data input's end
                    break
                if session.stop_requested:
                    break
            if not losses:
                raise ValueError("evaluate: the input_fn gave no batches")
            results = dict(zip(metrics, session.session.run([value for value, _ in metrics.values()])))
            results["loss"] = np.float32(np.mean(losses))
            results["global_step"] = int(session.session.run(step))
        finally:
            session.close()
        log.info("Saving dict for global step %d: %s", results["global_step"], results)
        return results

    def predict(self, input_fn, predict_keys=None, hooks=None, checkpoint_path=None,
                yield_single_examples=True) -> Iterator:
        """Yield the model's predictions: one per example (a dict when ``predictions`` is one,
        restricted to ``predict_keys``), or one per batch with ``yield_single_examples=False``."""
        graph, _, spec, batches = self._build(input_fn, ModeKeys.PREDICT)
        predictions = spec.predictions
        if isinstance(predictions, dict) and predict_keys is not None:
            keys = [predict_keys] if isinstance(predict_keys, str) else list(predict_keys)
            unknown = set(keys) - set(predictions)
            if unknown:
                raise ValueError(f"predict_keys {sorted(unknown)} are not among the predictions "
                                 f"{sorted(predictions)}")
            predictions = {k: predictions[k] for k in keys}
        session = _HookedSession(graph, [*(spec.prediction_hooks or []), *(hooks or [])],
                                 lambda: self._restore(graph, checkpoint_path))
        try:
            for feed in _one_pass(batches, graph):
                if session.stop_requested:
                    break
                try:
                    values = session.run(predictions, feed)
                except OutOfRangeError:  # a tf.data input's end
                    break
                if not yield_single_examples:
                    yield values
                    continue
                yield from _examples(values)
        finally:
            session.close()

    def export_savedmodel(self, export_dir_base, serving_input_receiver_fn, assets_extra: dict | None = None,
                          as_text: bool = False, checkpoint_path=None,
                          strip_default_attrs: bool = False) -> bytes:
        """Write the model for serving: the model_fn in ``PREDICT`` mode over the features of
        ``serving_input_receiver_fn()``, its variables restored from the latest checkpoint (or
        ``checkpoint_path``), as a SavedModel tagged ``serve`` in a new directory under
        ``export_dir_base`` named by the time; return that directory's path (bytes, as TF).

        Its signatures come from the EstimatorSpec's ``export_outputs`` (a predict signature
        ``serving_default`` of its ``predictions`` when it has none). ``assets_extra`` maps paths
        under the export's ``assets.extra/`` to files to copy there. The export is written in a
        ``temp-`` directory and renamed into place whole.

        >>> import os, tempfile, numpy as np, dflow as tf
        >>> def model_fn(features, mode):
        ...     w = tf.get_variable("w", [], initializer=tf.constant_initializer(3.0))
        ...     step = tf.assign_add(tf.train.get_global_step(), 1)
        ...     return tf.estimator.EstimatorSpec(mode, predictions={"y": features["x"] * w},
        ...                                       loss=tf.constant(0.0), train_op=step)
        >>> model = tf.estimator.Estimator(model_fn).train(lambda: {"x": tf.zeros([1])}, steps=1)
        >>> serving_fn = tf.estimator.export.build_raw_serving_input_receiver_fn(
        ...     {"x": tf.placeholder(tf.float32, [None])})
        >>> export_dir = model.export_savedmodel(tempfile.mkdtemp(), serving_fn)
        >>> with tf.Graph().as_default(), tf.Session() as sess:
        ...     signature = tf.saved_model.loader.load(sess, ["serve"], export_dir).signature_def
        ...     sess.run(signature["serving_default"].outputs["y"].name, {"x:0": [1.0, 2.0]}).tolist()
        [3.0, 6.0]
        """
        checkpoint = checkpoint_path or self.latest_checkpoint()
        if checkpoint is None:
            raise ValueError(f"Couldn't find trained model at {self._model_dir}: train it first "
                             "(estimator.train), or pass checkpoint_path=")
        graph, _ = self._new_graph()
        with graph.as_default():
            receiver = serving_input_receiver_fn()
            if not isinstance(receiver, ServingInputReceiver | TensorServingInputReceiver):
                raise TypeError("serving_input_receiver_fn must return a "
                                f"tf.estimator.export.ServingInputReceiver, got {receiver!r}")
            spec = self._call_model_fn(receiver.features, None, ModeKeys.PREDICT)
            signatures = signature_defs(receiver, spec.export_outputs, spec.predictions)
            # what TF's Scaffold runs after a restore: local variables and lookup tables
            main_op = group(local_variables_initializer(), tables_initializer())
        export_dir = _timestamped_directory(os.fsdecode(export_dir_base))
        temp_dir = os.path.join(os.path.dirname(export_dir), f"temp-{os.path.basename(export_dir)}")
        try:
            with self._restore(graph, checkpoint) as session:
                builder = SavedModelBuilder(temp_dir)
                builder.add_meta_graph_and_variables(
                    session, [tag_constants.SERVING], signatures, main_op=main_op,
                    assets_collection=graph.get_collection(GraphKeys.ASSET_FILEPATHS))
                builder.save(as_text)
            for destination, source in (assets_extra or {}).items():
                target = os.path.join(temp_dir, "assets.extra", destination)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                shutil.copyfile(source, target)
            os.rename(temp_dir, export_dir)
        except BaseException:
            shutil.rmtree(temp_dir, ignore_errors=True)
            raise
        log.info("SavedModel written to: %s", export_dir)
        return os.fsencode(export_dir)

    export_saved_model = export_savedmodel

    # ---- reading the checkpoint -------------------------------------------------------------------
    def get_variable_names(self) -> list[str]:
        return sorted(self._checkpoint_values())

    def get_variable_value(self, name: str):
        values = self._checkpoint_values()
        if name not in values:
            raise ValueError(f"{name!r} is not a variable of the latest checkpoint in {self._model_dir}; "
                             f"it holds {sorted(values)}")
        return values[name]

    def _checkpoint_values(self) -> dict:
        checkpoint = self.latest_checkpoint()
        if checkpoint is None:
            raise ValueError(f"Could not find trained model in model_dir: {self._model_dir}.")
        from ..train.saver import read_values  # the Saver's checked reader (no public one yet)

        return read_values(checkpoint)


class _HookedSession:
    """A session restored from a checkpoint whose runs ``evaluate``'s and ``predict``'s hooks see
    (``begin`` while the graph may still grow, then ``after_create_session``, each run's
    ``before_run``/``after_run``, and ``end``)."""

    def __init__(self, graph, hooks, make_session):
        self._hooks = list(hooks)
        with graph.as_default():
            for hook in self._hooks:
                hook.begin()
        self.session = make_session()
        for hook in self._hooks:
            hook.after_create_session(self.session, None)
        self.stop_requested = False

    def run(self, fetches, feed):
        context = SessionRunContext(SessionRunArgs(fetches, feed), self.session)
        requests = [hook.before_run(context) for hook in self._hooks]
        feeds = dict(feed)
        for request in requests:
            feeds.update((request.feed_dict or {}) if request is not None else {})
        extra = [r.fetches for r in requests if r is not None]
        results, extra_results = self.session.run([fetches, extra], feeds)
        answers = iter(extra_results)
        for hook, request in zip(self._hooks, requests):
            hook.after_run(context, SessionRunValues(None if request is None else next(answers)))
        self.stop_requested = self.stop_requested or context.stop_requested
        return results

    def close(self):
        try:
            for hook in self._hooks:
                hook.end(self.session)
        finally:
            self.session.close()


def _batches(graph) -> Iterator[dict]:
    """Each step's feeds from the graph's feeders, until the first runs out (empty feeds forever
    when there are none: constant inputs)."""
    streams = [feeder.batches() for feeder in feeders(graph)]
    if not streams:
        return itertools.repeat({})
    return (dict(item for part in parts for item in part.items()) for parts in zip(*streams))


def _runs_out(graph) -> bool:
    """The input ends by itself: numpy_input_fn's feeders, or a tf.data iterator (OutOfRangeError)."""
    from ..data.tf_data import ITERATORS

    return bool(feeders(graph) or graph.get_collection(ITERATORS))


def _one_pass(batches, graph) -> Iterator[dict]:
    """A graph whose input does not run out evaluates or predicts its constant inputs once."""
    return batches if _runs_out(graph) else itertools.islice(batches, 1)


def _examples(values) -> Iterator:
    if isinstance(values, dict):
        count = len(next(iter(values.values())))
        for i in range(count):
            yield {k: v[i] for k, v in values.items()}
    else:
        yield from values


def _timestamped_directory(base: str) -> str:
    """``base/<seconds since the epoch>``, one past the newest export there when that is not
    later (TF waits for the next second instead)."""
    os.makedirs(base, exist_ok=True)
    taken = [int(name.removeprefix("temp-")) for name in os.listdir(base)
             if name.removeprefix("temp-").isdigit()]
    return os.path.join(base, str(max(int(time.time()), max(taken, default=-1) + 1)))


def _checkpoint_step(path: str | None) -> int:
    match = re.search(r"-(\d+)$", path or "")
    return int(match.group(1)) if match else -1


class TrainSpec(NamedTuple):
    input_fn: Any
    max_steps: int | None = None
    hooks: Any = ()


class EvalSpec(NamedTuple):
    input_fn: Any
    steps: int | None = 100
    name: str | None = None
    hooks: Any = ()
    exporters: Any = None
    start_delay_secs: int = 120
    throttle_secs: int = 600


def train_and_evaluate(estimator: Estimator, train_spec: TrainSpec, eval_spec: EvalSpec):
    """Train to ``train_spec.max_steps``, then evaluate: ``(metrics, export_results)``. (TF's
    distributed form, evaluation beside training, is not supported by dflow: this runs both
    in this process, one after the other.)"""
    estimator.train(train_spec.input_fn, hooks=list(train_spec.hooks or ()), max_steps=train_spec.max_steps)
    metrics = estimator.evaluate(eval_spec.input_fn, steps=eval_spec.steps, hooks=list(eval_spec.hooks or ()),
                                 name=eval_spec.name)
    return metrics, []
