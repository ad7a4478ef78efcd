"""``tf.contrib.predictor``: a SavedModel (or an Estimator's latest checkpoint) as a function
from a dict of inputs to a dict of outputs, keyed as its serving signature keys them.

>>> import os, tempfile, dflow as tf
>>> export_dir = os.path.join(tempfile.mkdtemp(), "model")
>>> with tf.Graph().as_default(), tf.Session() as sess:
...     x = tf.placeholder(tf.float32, [None, 1], name="number")
...     tf.saved_model.simple_save(sess, export_dir, {"number": x}, {"output": 2.0 * x})
>>> predict_fn = from_saved_model(export_dir)
>>> predict_fn({"number": [[21.0]]})["output"].tolist()
[[42.0]]
"""

from __future__ import annotations

import shutil
import tempfile

from ..graph import Graph
from ..runtime.session import Session
from ..saved_model import loader, signature_constants, tag_constants

__all__ = ["Predictor", "from_saved_model", "from_estimator"]


class Predictor:
    """A session over a loaded SavedModel and one of its signatures: call it with a dict of the
    signature's inputs (by key; one left out is not fed) for a dict of all its outputs."""

    def __init__(self, export_dir: str, signature_def_key: str | None = None, tags=None,
                 graph: Graph | None = None, config=None):
        self.graph = graph or Graph()
        self.session = Session(graph=self.graph, config=config)
        with self.graph.as_default():
            meta_graph = loader.load(self.session, tags or [tag_constants.SERVING], export_dir)
        key = signature_def_key or signature_constants.DEFAULT_SERVING_SIGNATURE_DEF_KEY
        if key not in meta_graph.signature_def:
            self.session.close()
            raise ValueError(f'Got signature_def_key "{key}". Available signatures are '
                             f"{sorted(meta_graph.signature_def)}: pass one as signature_def_key")
        signature = meta_graph.signature_def[key]
        self.feed_tensors = {name: self.graph.get_tensor_by_name(info.name)
                             for name, info in signature.inputs.items()}
        self.fetch_tensors = {name: self.graph.get_tensor_by_name(info.name)
                              for name, info in signature.outputs.items()}

    def __call__(self, input_dict: dict) -> dict:
        unexpected = set(input_dict) - set(self.feed_tensors)
        if unexpected:
            raise ValueError(f"Got unexpected keys in input_dict: {sorted(unexpected)}\n"
                             f"expected: {sorted(self.feed_tensors)}")
        feeds = {self.feed_tensors[key]: value for key, value in input_dict.items() if value is not None}
        return self.session.run(self.fetch_tensors, feeds)

    def close(self) -> None:
        self.session.close()


def from_saved_model(export_dir: str, signature_def_key: str | None = None, signature_def=None,
                     tags=None, graph: Graph | None = None, config=None) -> Predictor:
    """A :class:`Predictor` of the SavedModel in ``export_dir`` (the meta graph tagged ``tags``,
    ``serve`` by default) and its signature ``signature_def_key`` (``serving_default``)."""
    if signature_def is not None:
        raise ValueError("from_saved_model(signature_def=) is not supported by dflow: name the "
                         "signature by its signature_def_key")
    return Predictor(export_dir, signature_def_key, tags, graph, config)


def from_estimator(estimator, serving_input_receiver_fn, output_key: str | None = None,
                   graph: Graph | None = None, config=None) -> Predictor:
    """A :class:`Predictor` of ``estimator``'s latest checkpoint, served through
    ``serving_input_receiver_fn`` (its export, written to a temporary directory and loaded),
    answering with the export output ``output_key`` (the default one)."""
    base = tempfile.mkdtemp(prefix="dflow-predictor-")
    try:
        export_dir = estimator.export_savedmodel(base, serving_input_receiver_fn)
        return Predictor(export_dir, output_key, None, graph, config)
    finally:  # (the session holds the restored values: the files are not needed after the load)
        shutil.rmtree(base, ignore_errors=True)
