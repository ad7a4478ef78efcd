"""Connectionist temporal classification: ``tf.nn.ctc_loss``, ``tf.nn.ctc_greedy_decoder``,
``tf.nn.ctc_beam_search_decoder`` and ``tf.edit_distance``, as TF 1.x's speech-recognition
scripts use them.

``ctc_loss`` runs the forward-backward recursion of Graves et al. (2006) on the host, in log
space and float64, for each sequence: its first output is ``-log p(labels | logits)``, its
second (kept for the gradient, as TF's ``CTCLoss`` op does) the loss's gradient with respect
to the logits, ``softmax - occupancy``. The blank is the last class; repeated labels need a
blank between them (``ctc_merge_repeated=True``, TF's default).

>>> import dflow as tf
>>> with tf.Graph().as_default():
...     logits = tf.zeros([2, 1, 3])  # two steps, one sequence, classes a, b and the blank
...     labels = tf.SparseTensor(indices=[[0, 0]], values=[0], dense_shape=[1, 1])
...     loss = tf.nn.ctc_loss(labels, logits, sequence_length=[2])
...     round(float(tf.Session().run(loss)[0]), 4)  # -log(3/9): "a-", "-a", "aa" of 9 paths
1.0986
"""

from __future__ import annotations

import numpy

from .. import dtypes
from ..errors import InvalidArgumentError
from ..graph import Tensor, convert_to_tensor, get_default_graph
from ..runtime.devices import numpy_namespace, to_namespace
from .array_ops import expand_dims, transpose
from .registry import ShapeError, Spec, defop
from .sparse_ops import SparseTensor

__all__ = ["ctc_loss", "ctc_greedy_decoder", "ctc_beam_search_decoder", "edit_distance"]


def _host(value) -> numpy.ndarray:
    return numpy.asarray(to_namespace(value, numpy_namespace))


# ---- the loss ------------------------------------------------------------------------------------
def _log_softmax(logits: numpy.ndarray) -> numpy.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - numpy.log(numpy.exp(shifted).sum(axis=-1, keepdims=True))


def _sequence_loss(log_probs: numpy.ndarray, labels: list, blank: int) -> tuple[float, numpy.ndarray]:
    """(-log p(labels), its gradient with respect to the logits) of one sequence's ``[T, C]``
    log-probabilities."""
    steps, classes = log_probs.shape
    extended = numpy.full(2 * len(labels) + 1, blank)
    extended[1::2] = labels
    size = len(extended)
    # s may come from s - 2 when it is a label that differs from the label two back
    skip = numpy.zeros(size, bool)
    skip[2:] = (extended[2:] != blank) & (extended[2:] != extended[:-2])
    emit = log_probs[:, extended]  # [T, S]
    alpha = numpy.full((steps, size), -numpy.inf)
    beta = numpy.full((steps, size), -numpy.inf)
    alpha[0, :2] = emit[0, :2]
    beta[-1, -2:] = emit[-1, -2:]
    for t in range(1, steps):
        previous = alpha[t - 1]
        step = numpy.logaddexp(previous, numpy.concatenate([[-numpy.inf], previous[:-1]]))
        step[skip] = numpy.logaddexp(step[skip], previous[:-2][skip[2:]])
        alpha[t] = step + emit[t]
    for t in range(steps - 2, -1, -1):
        following = beta[t + 1]
        step = numpy.logaddexp(following, numpy.concatenate([following[1:], [-numpy.inf]]))
        from_skip = numpy.zeros(size, bool)
        from_skip[:-2] = skip[2:]
        step[from_skip] = numpy.logaddexp(step[from_skip], following[2:][skip[2:]])
        beta[t] = step + emit[t]
    log_likelihood = numpy.logaddexp(alpha[-1, -1], alpha[-1, -2] if size > 1 else -numpy.inf)
    if not numpy.isfinite(log_likelihood):
        raise InvalidArgumentError(f"ctc_loss: no path fits {len(labels)} labels (with the blanks repeats "
                                   f"need) into {steps} steps: the sequence is too short for its labels (or "
                                   "pass ignore_longer_outputs_than_inputs=True)")
    through = numpy.exp(alpha + beta - emit - log_likelihood)  # [T, S]: occupancy of each position
    occupancy = numpy.zeros((steps, classes))
    for s in range(size):
        occupancy[:, extended[s]] += through[:, s]
    return -log_likelihood, numpy.exp(log_probs) - occupancy


def _ctc_loss_kernel(xp, logits, label_indices, label_values, sequence_length, ignore_longer):
    logits = _host(logits).astype(numpy.float64)
    indices, values, lengths = _host(label_indices), _host(label_values), _host(sequence_length)
    steps, batch, classes = logits.shape
    losses, grads = numpy.zeros(batch), numpy.zeros_like(logits)
    for b in range(batch):
        labels = values[indices[:, 0] == b]
        length = int(lengths[b])
        if not 0 <= length <= steps:
            raise InvalidArgumentError(f"ctc_loss: sequence_length[{b}] = {length} is outside 0..{steps}")
        if length == 0 or (ignore_longer and len(labels) > length):
            continue
        if (labels < 0).any() or (labels >= classes - 1).any():
            raise InvalidArgumentError(f"ctc_loss: sequence {b}'s labels {labels.tolist()} must be in "
                                       f"0..{classes - 2} (class {classes - 1} is the blank)")
        try:
            losses[b], grads[:length, b] = _sequence_loss(_log_softmax(logits[:length, b]), labels,
                                                          classes - 1)
        except InvalidArgumentError:
            if not ignore_longer:
                raise
    return xp.asarray(losses.astype(numpy.float32)), xp.asarray(grads.astype(numpy.float32))


def _ctc_loss_infer(inputs, ignore_longer):
    logits = inputs[0]
    if logits.shape is not None and len(logits.shape) != 3:
        raise ShapeError(f"ctc_loss takes [max_time, batch, classes] logits, got shape {logits.shape}")
    batch = logits.shape[1] if logits.shape is not None else None
    return [Spec((batch,), dtypes.float32), Spec(logits.shape, dtypes.float32)]


def _ctc_loss_grad(op, d_loss, _):
    return [expand_dims(expand_dims(d_loss, 0), 2) * op.outputs[1], None, None, None]


defop("CTCLoss", _ctc_loss_infer, _ctc_loss_kernel, _ctc_loss_grad, num_outputs=2, gpu=False)


def ctc_loss(labels: SparseTensor, inputs, sequence_length, preprocess_collapse_repeated: bool = False,
             ctc_merge_repeated: bool = True, ignore_longer_outputs_than_inputs: bool = False,
             time_major: bool = True) -> Tensor:
    """``-log p(labels | inputs)`` per sequence: ``labels`` a SparseTensor of int32 class ids
    (row = sequence), ``inputs`` unscaled logits ``[max_time, batch, classes]`` (``time_major``)
    whose last class is the blank, ``sequence_length`` each sequence's steps."""
    if not isinstance(labels, SparseTensor):
        raise TypeError(f"ctc_loss's labels must be a tf.SparseTensor (tf.sparse_placeholder, or "
                        f"tf.SparseTensor(indices, values, dense_shape)), got {labels!r}")
    if preprocess_collapse_repeated or not ctc_merge_repeated:
        raise ValueError("ctc_loss: dflow takes only preprocess_collapse_repeated=False and "
                         "ctc_merge_repeated=True (TF's defaults: the standard CTC)")
    logits = convert_to_tensor(inputs, dtype=dtypes.float32)
    if not time_major:
        logits = transpose(logits, [1, 0, 2])
    op = get_default_graph().create_op(
        "CTCLoss", [logits, labels.indices, labels.values,
                    convert_to_tensor(sequence_length, dtype=dtypes.int32)],
        {"ignore_longer": bool(ignore_longer_outputs_than_inputs)}, name="CTCLoss")
    return op.outputs[0]


# ---- greedy decoding -----------------------------------------------------------------------------
def _greedy_kernel(xp, logits, sequence_length, merge_repeated):
    logits, lengths = _host(logits), _host(sequence_length)
    steps, batch, classes = logits.shape
    best = logits.argmax(axis=-1)  # [T, B]
    rows, positions, values, log_probability = [], [], [], numpy.zeros((batch, 1), numpy.float32)
    for b in range(batch):
        length = int(lengths[b])
        path = best[:length, b]
        log_probability[b, 0] = -logits[numpy.arange(length), b, path].sum()
        kept = [c for t, c in enumerate(path)
                if c != classes - 1 and not (merge_repeated and t and path[t - 1] == c)]
        rows += [b] * len(kept)
        positions += range(len(kept))
        values += kept
    indices = numpy.stack([rows, positions], axis=1) if rows else numpy.zeros((0, 2))
    longest = max((p + 1 for p in positions), default=0)
    return (xp.asarray(indices.astype(numpy.int64)), xp.asarray(numpy.asarray(values, numpy.int64)),
            xp.asarray(numpy.asarray([batch, longest], numpy.int64)), xp.asarray(log_probability))


defop("CTCGreedyDecoder", lambda inputs, merge_repeated: [
    Spec((None, 2), dtypes.int64), Spec((None,), dtypes.int64), Spec((2,), dtypes.int64),
    Spec((None if inputs[0].shape is None else inputs[0].shape[1], 1), dtypes.float32)],
    _greedy_kernel, num_outputs=4, gpu=False)


def ctc_greedy_decoder(inputs, sequence_length, merge_repeated: bool = True) -> tuple[list, Tensor]:
    """``([decoded], log_probability)``: per step the likeliest class, repeats merged, blanks
    dropped, as an int64 SparseTensor; ``log_probability`` ``[batch, 1]`` is minus the sum of the
    chosen logits, as TF's."""
    logits = convert_to_tensor(inputs, dtype=dtypes.float32)
    op = get_default_graph().create_op(
        "CTCGreedyDecoder", [logits, convert_to_tensor(sequence_length, dtype=dtypes.int32)],
        {"merge_repeated": bool(merge_repeated)}, name="CTCGreedyDecoder")
    return [SparseTensor(*op.outputs[:3])], op.outputs[3]


# ---- beam search ---------------------------------------------------------------------------------
def _prefix_beam_search(log_probs: numpy.ndarray, width: int, top: int) -> list[tuple[tuple, float]]:
    """The ``top`` likeliest label sequences of one sequence's ``[T, C]`` log-probabilities (the
    blank last), each summed over its alignments, keeping ``width`` prefixes a step (Hannun et
    al.'s prefix beam search, as TF's decoder keeps its beams)."""
    blank = log_probs.shape[1] - 1
    beams = {(): (0.0, -numpy.inf)}  # prefix -> (log p ending in a blank, log p ending in its label)
    for step in log_probs:
        grown: dict[tuple, list] = {}
        for prefix, (blank_end, label_end) in beams.items():
            total = numpy.logaddexp(blank_end, label_end)
            _add(grown, prefix, 0, total + step[blank])
            if prefix:  # its last label again, with no blank between: the same prefix
                _add(grown, prefix, 1, label_end + step[prefix[-1]])
            for label in range(blank):  # a repeat of the last label needs a blank before it
                before = blank_end if prefix and label == prefix[-1] else total
                _add(grown, prefix + (label,), 1, before + step[label])
        ranked = sorted(grown.items(), key=lambda item: -numpy.logaddexp(*item[1]))
        beams = dict(ranked[:width])
    ranked = sorted(beams.items(), key=lambda item: -numpy.logaddexp(*item[1]))[:top]
    return [(prefix, float(numpy.logaddexp(*scores))) for prefix, scores in ranked]


def _add(grown: dict, prefix: tuple, ending: int, value: float) -> None:
    scores = grown.setdefault(prefix, [-numpy.inf, -numpy.inf])
    scores[ending] = numpy.logaddexp(scores[ending], value)


def _beam_kernel(xp, logits, sequence_length, beam_width, top_paths, merge_repeated):
    logits, lengths = _host(logits).astype(numpy.float64), _host(sequence_length)
    batch = logits.shape[1]
    paths = [[] for _ in range(top_paths)]
    log_probability = numpy.full((batch, top_paths), -numpy.inf, numpy.float32)
    for b in range(batch):
        found = _prefix_beam_search(_log_softmax(logits[:int(lengths[b]), b]), beam_width, top_paths)
        for k, (prefix, score) in enumerate(found):
            labels = [c for i, c in enumerate(prefix) if not (merge_repeated and i and prefix[i - 1] == c)]
            paths[k].append(labels)
            log_probability[b, k] = score
        for k in range(len(found), top_paths):
            paths[k].append([])
    outputs = []
    for rows in paths:
        indices = [(b, i) for b, labels in enumerate(rows) for i in range(len(labels))]
        outputs += [xp.asarray(numpy.asarray(indices, numpy.int64).reshape(-1, 2)),
                    xp.asarray(numpy.asarray([c for labels in rows for c in labels], numpy.int64)),
                    xp.asarray(numpy.asarray([batch, max(map(len, rows), default=0)], numpy.int64))]
    return (*outputs, xp.asarray(log_probability))


def _beam_infer(inputs, beam_width, top_paths, merge_repeated):
    batch = None if inputs[0].shape is None else inputs[0].shape[1]
    path = [Spec((None, 2), dtypes.int64), Spec((None,), dtypes.int64), Spec((2,), dtypes.int64)]
    return path * top_paths + [Spec((batch, top_paths), dtypes.float32)]


defop("CTCBeamSearchDecoder", _beam_infer, _beam_kernel, num_outputs=None, gpu=False)


def ctc_beam_search_decoder(inputs, sequence_length, beam_width: int = 100, top_paths: int = 1,
                            merge_repeated: bool = True) -> tuple[list, Tensor]:
    """``([decoded per path], log_probability)``: the ``top_paths`` likeliest label sequences per
    sequence, each summed over its alignments, by a prefix beam search keeping ``beam_width``
    prefixes (with ``merge_repeated``, equal labels next to each other in a result are merged, as
    TF 1.x's default does); ``log_probability`` ``[batch, top_paths]``."""
    if top_paths < 1 or beam_width < top_paths:
        raise ValueError(f"ctc_beam_search_decoder needs 1 <= top_paths <= beam_width, got "
                         f"top_paths={top_paths} and beam_width={beam_width}")
    logits = convert_to_tensor(inputs, dtype=dtypes.float32)
    outputs = get_default_graph().create_op(
        "CTCBeamSearchDecoder", [logits, convert_to_tensor(sequence_length, dtype=dtypes.int32)],
        {"beam_width": int(beam_width), "top_paths": int(top_paths), "merge_repeated": bool(merge_repeated)},
        name="CTCBeamSearchDecoder").outputs
    return [SparseTensor(*outputs[3 * k:3 * k + 3]) for k in range(top_paths)], outputs[-1]


# ---- edit distance -------------------------------------------------------------------------------
def _levenshtein(a: list, b: list) -> int:
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


def _sequences(indices, values, shape) -> dict:
    """Each sequence (the leading dims of its index) -> its values in order of the last index."""
    found: dict[tuple, list] = {}
    for index, value in sorted(zip(map(tuple, indices.tolist()), values.tolist()), key=lambda p: p[0]):
        found.setdefault(index[:-1], []).append(value)
    return found


def _edit_distance_kernel(xp, h_indices, h_values, h_shape, t_indices, t_values, t_shape, normalize):
    h_shape, t_shape = _host(h_shape), _host(t_shape)
    out_shape = numpy.maximum(h_shape[:-1], t_shape[:-1]).astype(int)
    hypotheses = _sequences(_host(h_indices), _host(h_values), h_shape)
    truths = _sequences(_host(t_indices), _host(t_values), t_shape)
    distances = numpy.zeros(out_shape, numpy.float32)
    for key in numpy.ndindex(*out_shape):
        hypothesis, truth = hypotheses.get(key, []), truths.get(key, [])
        distance = _levenshtein(hypothesis, truth)
        if normalize:
            distance = distance / len(truth) if truth else (numpy.inf if distance else 0.0)
        distances[key] = distance
    return xp.asarray(distances)


defop("EditDistance", lambda inputs, normalize: [Spec(None, dtypes.float32)], _edit_distance_kernel,
      gpu=False)


def edit_distance(hypothesis: SparseTensor, truth: SparseTensor, normalize: bool = True,
                  name="edit_distance") -> Tensor:
    """The Levenshtein distance between the sequences of ``hypothesis`` and ``truth`` (their last
    dimension; one per leading index), divided by the truth's length when ``normalize``."""
    if not isinstance(hypothesis, SparseTensor) or not isinstance(truth, SparseTensor):
        raise TypeError("edit_distance takes two tf.SparseTensors (hypothesis, truth)")
    inputs = [hypothesis.indices, hypothesis.values, hypothesis.dense_shape, truth.indices, truth.values,
              truth.dense_shape]
    return get_default_graph().create_op("EditDistance", inputs, {"normalize": bool(normalize)},
                                         name=name).outputs[0]
