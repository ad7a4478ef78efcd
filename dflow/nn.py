"""``tf.nn``: activations, convolution, pooling, normalization and losses."""

from . import rnn_cell
from .ops.array_extras import atrous_conv2d, crelu, swish
from .ops.array_ops import depth_to_space, space_to_depth
from .ops.batch_norm_ops import fused_batch_norm
from .ops.ctc_ops import ctc_beam_search_decoder, ctc_greedy_decoder, ctc_loss
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
from .rnn import bidirectional_dynamic_rnn, dynamic_rnn, static_bidirectional_rnn, static_rnn

__all__ = ["sigmoid", "tanh", "space_to_depth", "depth_to_space", "ctc_loss", "ctc_greedy_decoder",
           "ctc_beam_search_decoder", "swish", "crelu", "atrous_conv2d", *_nn_all]
__all__ += ["embedding_lookup", "log_uniform_candidate_sampler", "nce_loss", "sampled_softmax_loss",
            "uniform_candidate_sampler"]
__all__ += ["rnn_cell", "static_rnn", "dynamic_rnn", "bidirectional_dynamic_rnn", "static_bidirectional_rnn"]
