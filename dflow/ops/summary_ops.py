"""Summary ops (TF's ``summary_ops``): each yields a serialized ``Summary`` protocol buffer.

A summary op is a graph op like any other: its output is a 0-d ``tf.string``
tensor whose value (a NumPy object array holding ``bytes``) is the serialized
``Summary``, so ``sess.run(merged)`` returns ``bytes`` that
``FileWriter.add_summary`` takes, as in TF 1.x. The op is built on the host
CPU of the task that holds its input, so on a cluster a histogram of a
parameter-server variable is computed on that PS and only the bytes travel.

The protobuf classes are tensorboardX's (TensorFlow's ``summary.proto``),
imported by the kernels when a summary first runs: ``import dflow`` stays light.
"""

from __future__ import annotations

import io
import re
import wave

import numpy as np

from .. import dtypes
from ..errors import InvalidArgumentError
from ..graph import GraphKeys, Tensor, convert_to_tensor, get_default_graph
from ..placement import DeviceSpec
from .registry import Spec, defop

__all__ = ["scalar", "histogram", "image", "audio", "text", "tensor_summary", "merge", "merge_all"]

_STRING_SCALAR = [Spec((), dtypes.string)]


def _protos():
    from tensorboardX.proto import summary_pb2

    return summary_pb2


def _as_bytes_tensor(summary) -> np.ndarray:
    """A 0-d object array holding the serialized bytes (a NumPy ``bytes_`` array would drop
    trailing NUL bytes, which a serialized float can end with)."""
    value = np.empty((), dtype=object)
    value[()] = summary.SerializeToString()
    return value


def _as_host_array(value) -> np.ndarray:
    return np.asarray(value.get() if hasattr(value, "get") and not isinstance(value, np.ndarray)
                      else value)


# ---- kernels -----------------------------------------------------------------------------
def _scalar_kernel(xp, value, tag):
    value = _as_host_array(value)
    if value.size != 1:
        raise InvalidArgumentError(f"tf.summary.scalar {tag!r} takes a tensor of one value, got "
                                   f"shape {value.shape}; reduce it first (tf.reduce_mean)")
    pb = _protos()
    return _as_bytes_tensor(pb.Summary(value=[pb.Summary.Value(tag=tag, simple_value=float(value.item()))]))


def _tf_bucket_limits() -> np.ndarray:
    """TF's default histogram buckets: edges growing by 10% from 1e-12 to 1e20, mirrored for
    negative values, around 0, with the largest double at both ends."""
    positive = [1e-12]
    while positive[-1] * 1.1 < 1e20:
        positive.append(positive[-1] * 1.1)
    positive = np.array(positive + [np.finfo(np.float64).max])
    return np.concatenate([-positive[::-1], [0.0], positive])


_BUCKET_LIMITS = _tf_bucket_limits()


def _histogram_kernel(xp, values, tag):
    values = _as_host_array(values).astype(np.float64).ravel()
    if not np.all(np.isfinite(values)):
        raise InvalidArgumentError(f"Nan in summary histogram for: {tag}")
    # bucket i counts limit[i-1] <= v < limit[i]; a run of empty buckets becomes one entry
    counts = np.bincount(np.searchsorted(_BUCKET_LIMITS, values, side="right"),
                         minlength=len(_BUCKET_LIMITS))[:len(_BUCKET_LIMITS)]
    keep = (counts > 0) | np.append(counts[1:] > 0, True)
    limits, counts = _BUCKET_LIMITS[keep], counts[keep]
    pb = _protos()
    histo = pb.HistogramProto(
        min=float(values.min()) if values.size else 0.0, max=float(values.max()) if values.size else 0.0,
        num=float(values.size), sum=float(values.sum()), sum_squares=float(values @ values),
        bucket_limit=limits.tolist(), bucket=counts.astype(np.float64).tolist())
    return _as_bytes_tensor(pb.Summary(value=[pb.Summary.Value(tag=tag, histo=histo)]))


def _numbered_tags(tag: str, kind: str, max_outputs: int, count: int) -> list[str]:
    """TF's tags: ``tag/image`` when one output is allowed, else ``tag/image/0``, ``/1``..."""
    if max_outputs == 1:
        return [f"{tag}/{kind}"][:count]
    return [f"{tag}/{kind}/{i}" for i in range(count)]


def _to_uint8_image(image: np.ndarray) -> np.ndarray:
    """TF's per-image scaling of a float image: all values >= 0 are scaled so the largest is
    255; otherwise 0 goes to 128 and the largest magnitude to 0 or 255. Non-finite pixels are red."""
    if image.dtype == np.uint8:
        return image
    image = image.astype(np.float32)
    finite = np.isfinite(image)
    bounds = image[finite] if finite.any() else np.zeros(1, np.float32)
    low, high = float(bounds.min()), float(bounds.max())
    if low < 0:
        largest = max(abs(low), abs(high))
        scale, offset = (0.0 if largest < 1e-6 else 127.0 / largest), 128.0
    else:
        scale, offset = (0.0 if high < 1e-6 else 255.0 / high), 0.0
    scaled = np.where(finite, image * scale + offset, 0.0).astype(np.uint8)
    bad = ~finite.all(axis=-1)
    scaled[bad] = np.array([255, 0, 0, 255], np.uint8)[:image.shape[-1]]
    return scaled


def _png(image: np.ndarray) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(image[..., 0] if image.shape[-1] == 1 else image).save(out, format="PNG")
    return out.getvalue()


def _image_kernel(xp, images, tag, max_outputs):
    images = _as_host_array(images)
    if images.ndim != 4 or images.shape[-1] not in (1, 3, 4):
        raise InvalidArgumentError(f"tf.summary.image {tag!r} takes images of shape [batch, height, "
                                   f"width, channels] with 1, 3 or 4 channels, got {images.shape}")
    pb = _protos()
    count = min(max_outputs, images.shape[0])
    values = []
    for name, image in zip(_numbered_tags(tag, "image", max_outputs, count), images[:count]):
        pixels = _to_uint8_image(image)
        encoded = pb.Summary.Image(height=pixels.shape[0], width=pixels.shape[1],
                                   colorspace=pixels.shape[2], encoded_image_string=_png(pixels))
        values.append(pb.Summary.Value(tag=name, image=encoded))
    return _as_bytes_tensor(pb.Summary(value=values))


def _wav(clip: np.ndarray, sample_rate: int) -> bytes:
    """16-bit PCM WAV, as TF's audio summary encodes it: round(x * 2**15), clamped to int16."""
    out = io.BytesIO()
    with wave.open(out, "wb") as wav:
        wav.setnchannels(clip.shape[1])
        wav.setsampwidth(2)
        wav.setframerate(sample_rate)
        wav.writeframes(np.clip(np.round(clip * 32768.0), -32768, 32767).astype("<i2").tobytes())
    return out.getvalue()


def _audio_kernel(xp, clips, sample_rate, tag, max_outputs):
    clips = _as_host_array(clips).astype(np.float32)
    if clips.ndim == 2:
        clips = clips[..., None]  # [batch, frames]: one channel
    if clips.ndim != 3:
        raise InvalidArgumentError(f"tf.summary.audio {tag!r} takes [batch, frames, channels] or "
                                   f"[batch, frames], got shape {clips.shape}")
    rate = int(_as_host_array(sample_rate).item())
    pb = _protos()
    count = min(max_outputs, clips.shape[0])
    values = [pb.Summary.Value(tag=name, audio=pb.Summary.Audio(
        sample_rate=rate, num_channels=clip.shape[1], length_frames=clip.shape[0],
        encoded_audio_string=_wav(clip, rate), content_type="audio/wav"))
        for name, clip in zip(_numbered_tags(tag, "audio", max_outputs, count), clips[:count])]
    return _as_bytes_tensor(pb.Summary(value=values))


def _text_proto(tag: str, strings: np.ndarray, plugin: str | None = "text"):
    from tensorboardX.proto import tensor_pb2, tensor_shape_pb2

    pb = _protos()
    shape = tensor_shape_pb2.TensorShapeProto(
        dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=d) for d in strings.shape])
    as_bytes = [s if isinstance(s, bytes) else str(s).encode("utf-8") for s in strings.ravel()]
    tensor = tensor_pb2.TensorProto(dtype="DT_STRING", string_val=as_bytes, tensor_shape=shape)
    metadata = pb.SummaryMetadata(plugin_data=pb.SummaryMetadata.PluginData(plugin_name=plugin)) \
        if plugin else pb.SummaryMetadata()
    return pb.Summary(value=[pb.Summary.Value(tag=tag, metadata=metadata, tensor=tensor)])


# TensorFlow's DataType numbers (types.proto) of the dtypes a tensor summary may hold
_TF_DATA_TYPES = {"float32": 1, "float64": 2, "int32": 3, "uint8": 4, "int16": 5, "int8": 6, "int64": 9,
                  "bool": 10, "float16": 19}


def _tensor_kernel(xp, value, tag, description=""):
    from tensorboardX.proto import tensor_pb2, tensor_shape_pb2

    array = _as_host_array(value)
    if array.dtype.kind in "OSU":
        return _as_bytes_tensor(_text_proto(tag, array, plugin=None))
    if array.dtype.name not in _TF_DATA_TYPES:
        raise InvalidArgumentError(f"tf.summary.tensor_summary {tag!r}: dtype {array.dtype} is not one of "
                                   f"{sorted(_TF_DATA_TYPES)}; tf.cast it first")
    shape = tensor_shape_pb2.TensorShapeProto(
        dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=d) for d in array.shape])
    tensor = tensor_pb2.TensorProto(dtype=_TF_DATA_TYPES[array.dtype.name], tensor_shape=shape,
                                    tensor_content=array.astype(array.dtype.newbyteorder("<")).tobytes())
    pb = _protos()
    metadata = pb.SummaryMetadata(summary_description=description)
    return _as_bytes_tensor(pb.Summary(value=[pb.Summary.Value(tag=tag, tensor=tensor, metadata=metadata)]))


def _text_kernel(xp, *strings, tag, text=None):
    values = np.asarray(text, dtype=object) if strings == () else _as_host_array(strings[0])
    return _as_bytes_tensor(_text_proto(tag, values))


def _merge_kernel(xp, *summaries):
    pb = _protos()
    merged, seen = pb.Summary(), set()
    for serialized in summaries:
        part = pb.Summary.FromString(_as_host_array(serialized).item())
        for value in part.value:
            if value.tag in seen:
                raise InvalidArgumentError(f"Duplicate tag {value.tag} found in summary inputs; give "
                                           "each summary its own name")
            seen.add(value.tag)
        merged.value.extend(part.value)
    return _as_bytes_tensor(merged)


defop("ScalarSummary", lambda inputs, tag: _STRING_SCALAR, _scalar_kernel, gpu=False)
defop("HistogramSummary", lambda inputs, tag: _STRING_SCALAR, _histogram_kernel, gpu=False)
defop("ImageSummary", lambda inputs, tag, max_outputs: _STRING_SCALAR, _image_kernel, gpu=False)
defop("AudioSummary", lambda inputs, tag, max_outputs: _STRING_SCALAR, _audio_kernel, gpu=False)
defop("TextSummary", lambda inputs, tag, text=None: _STRING_SCALAR, _text_kernel, gpu=False)
defop("TensorSummary", lambda inputs, tag, description="": _STRING_SCALAR, _tensor_kernel, gpu=False)
defop("MergeSummary", lambda inputs: _STRING_SCALAR, _merge_kernel, gpu=False)


# ---- graph building ----------------------------------------------------------------------
_ILLEGAL_TAG_CHARACTERS = re.compile(r"[^-/\w\.]")


def _clean_tag(name: str | None) -> str | None:
    """TF's tag rules: characters other than ``-/_.`` letters and digits become ``_``, and a
    leading ``/`` is dropped (it would start a name scope at the root)."""
    if name is None:
        return None
    cleaned = _ILLEGAL_TAG_CHARACTERS.sub("_", name).lstrip("/")
    return cleaned


def _host_device(tensor: Tensor) -> str:
    """The CPU of the task that produces ``tensor``: its summary is computed there."""
    spec = DeviceSpec.from_string(tensor.op.device)
    if spec.device_type is None:
        return spec.to_string()
    return spec.make_merged_spec(DeviceSpec(device_type="CPU", device_index=0)).to_string()


def _summary_op(op_type: str, name: str, inputs, attrs: dict, collections, family) -> Tensor:
    """Build one summary op named and tagged as TF does: the tag is the op's scoped name
    (``layer1/weights``), prefixed by ``family`` when given, and unique in the graph."""
    graph = get_default_graph()
    inputs = [convert_to_tensor(t) for t in inputs]
    name, family = _clean_tag(name), _clean_tag(family)
    with graph.name_scope(name if family is None else f"{family}/{name}") as scope:
        tag = scope.rstrip("/") if family is None else f"{family}/{scope.rstrip('/')}"
        device = _host_device(inputs[0]) if inputs else None
        with graph.device(None), graph.device(device):
            out = graph.create_op(op_type, inputs, {"tag": tag, **attrs}, name=scope).outputs[0]
    for key in [GraphKeys.SUMMARIES] if collections is None else collections:
        graph.add_to_collection(key, out)
    return out


def scalar(name: str, tensor, collections=None, family=None) -> Tensor:
    """A summary of one value: ``tf.summary.scalar('loss', loss)``; a 0-d ``tf.string`` tensor
    holding a serialized ``Summary``, added to ``GraphKeys.SUMMARIES`` (or ``collections``)."""
    return _summary_op("ScalarSummary", name, [tensor], {}, collections, family)


def histogram(name: str, values, collections=None, family=None) -> Tensor:
    """A histogram of every value of ``values`` with TF's buckets: ``tf.summary.histogram('w', w)``."""
    return _summary_op("HistogramSummary", name, [values], {}, collections, family)


def image(name: str, tensor, max_outputs: int = 3, collections=None, family=None) -> Tensor:
    """Up to ``max_outputs`` PNG images of a ``[batch, height, width, 1|3|4]`` tensor (floats scaled
    per image as in TF, uint8 as is): ``tf.summary.image('input', tf.reshape(x, [-1, 28, 28, 1]))``."""
    return _summary_op("ImageSummary", name, [tensor], {"max_outputs": int(max_outputs)}, collections, family)


def audio(name: str, tensor, sample_rate, max_outputs: int = 3, collections=None, family=None) -> Tensor:
    """Up to ``max_outputs`` WAV clips of a ``[batch, frames, channels]`` float tensor in [-1, 1]."""
    rate = convert_to_tensor(sample_rate, dtype=None if isinstance(sample_rate, Tensor) else dtypes.float32)
    return _summary_op("AudioSummary", name, [tensor, rate], {"max_outputs": int(max_outputs)},
                       collections, family)


def text(name: str, tensor, collections=None) -> Tensor:
    """A text summary (TensorBoard's Text tab) of a ``tf.string`` tensor or a Python string."""
    if isinstance(tensor, (str, bytes)) or (isinstance(tensor, list) and not _any_symbolic(tensor)):
        # kept as str, so that the graph stays plain JSON-ready data (graph_io)
        text = [_as_str(t) for t in tensor] if isinstance(tensor, list) else _as_str(tensor)
        return _summary_op("TextSummary", name, [], {"text": text}, collections, None)
    tensor = convert_to_tensor(tensor)
    if tensor.dtype != dtypes.string:
        raise TypeError(f"tf.summary.text {name!r} takes a tf.string tensor, got {tensor.dtype.name} "
                        f"({tensor.name}); format it in Python and pass the str")
    return _summary_op("TextSummary", name, [tensor], {}, collections, None)


def tensor_summary(name: str, tensor, summary_description: str | None = None, collections=None,
                   summary_metadata=None, family=None, display_name=None) -> Tensor:
    """A summary holding ``tensor``'s whole value (a TensorProto), for TensorBoard's plugins."""
    if summary_metadata is not None or display_name is not None:
        raise TypeError("tf.summary.tensor_summary(summary_metadata=, display_name=): dflow does not "
                        "support them; pass summary_description")
    return _summary_op("TensorSummary", name, [tensor], {"description": summary_description or ""},
                       collections, family)


def _as_str(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _any_symbolic(values) -> bool:
    return any(isinstance(v, Tensor) for v in values)


def merge(inputs, collections=None, name=None) -> Tensor:
    """One serialized ``Summary`` holding the values of every summary in ``inputs``."""
    inputs = [convert_to_tensor(t) for t in inputs]
    for t in inputs:
        if t.dtype != dtypes.string:
            raise TypeError(f"tf.summary.merge takes summary tensors (tf.string), got {t.name} "
                            f"({t.dtype.name})")
    graph = get_default_graph()
    with graph.name_scope(name or "Merge"):  # TF's names: Merge/MergeSummary, or NAME/NAME
        out = graph.create_op("MergeSummary", inputs, name=name or "MergeSummary").outputs[0]
    for key in collections or ():
        graph.add_to_collection(key, out)
    return out


def merge_all(key: str = GraphKeys.SUMMARIES, scope: str | None = None, name=None) -> Tensor | None:
    """All summaries of collection ``key`` (under ``scope``) merged, or None when there are none."""
    summaries = get_default_graph().get_collection(key, scope=scope)
    return merge(summaries, name=name) if summaries else None
