"""``tf.nn``: activations, convolution, pooling, normalization and losses."""

from .ops.embedding_ops import (
    embedding_lookup,
    log_uniform_candidate_sampler,
    nce_loss,
    sampled_softmax_loss,
    uniform_candidate_sampler,
)
from .ops.math_ops import sigmoid, tanh
from .ops.nn_ops import *  # noqa: F403 - the op module's __all__ is this namespace
from .ops.nn_ops import __all__ as _nn_all

__all__ = ["sigmoid", "tanh", *_nn_all]
__all__ += ["embedding_lookup", "log_uniform_candidate_sampler", "nce_loss", "sampled_softmax_loss",
            "uniform_candidate_sampler"]
