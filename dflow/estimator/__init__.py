"""``tf.estimator``: ``Estimator`` with a ``model_fn``, ``EstimatorSpec``, ``ModeKeys``,
``RunConfig``, ``train_and_evaluate``, ``inputs.numpy_input_fn`` and ``export`` (serving
inputs and outputs for ``Estimator.export_savedmodel``). TF's canned
estimators (``DNNClassifier``...) are not supported: the error says what to write instead."""

from ..train import (
    CheckpointSaverHook,
    FeedFnHook,
    LoggingTensorHook,
    NanTensorHook,
    SessionRunArgs,
    SessionRunContext,
    SessionRunHook,
    SessionRunValues,
    StopAtStepHook,
    SummarySaverHook,
)
from . import export, inputs
from .estimator import (
    Estimator,
    EstimatorSpec,
    EvalSpec,
    ModeKeys,
    RunConfig,
    TrainSpec,
    train_and_evaluate,
)

__all__ = ["Estimator", "EstimatorSpec", "ModeKeys", "RunConfig", "TrainSpec", "EvalSpec",
           "train_and_evaluate", "inputs", "export",
           # the session hooks, which TF 1.x also exports here
           "SessionRunHook", "SessionRunArgs", "SessionRunContext", "SessionRunValues", "StopAtStepHook",
           "CheckpointSaverHook", "LoggingTensorHook", "NanTensorHook", "SummarySaverHook", "FeedFnHook"]

_CANNED = {"DNNClassifier", "DNNRegressor", "LinearClassifier", "LinearRegressor",
           "DNNLinearCombinedClassifier", "DNNLinearCombinedRegressor", "BaselineClassifier",
           "BaselineRegressor", "BoostedTreesClassifier", "BoostedTreesRegressor"}


def __getattr__(name: str):
    if name in _CANNED:
        raise AttributeError(f"tf.estimator.{name} is not supported by dflow: write a model_fn "
                             "(tf.layers or tf.nn ops returning a tf.estimator.EstimatorSpec) and use "
                             "tf.estimator.Estimator(model_fn)")
    raise AttributeError(f"module 'dflow.estimator' has no attribute {name!r}")
