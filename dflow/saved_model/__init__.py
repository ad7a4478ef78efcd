"""``tf.saved_model`` (TF 1.x): a model saved for serving, or for training on, as a directory
that a later process loads into a new graph without the code that built it.

A SavedModel holds one or more meta graphs, each named by a set of tags (``serve``, ``train``)
and carrying signatures (named input and output tensors), and one set of variables they share::

    export_dir/saved_model.json       {"format": "dflow.saved_model", "saved_model_schema_version": 1,
                                       "meta_graphs": [{"tags", "signature_def", "asset_file_def",
                                                        "meta_graph": tf.train.export_meta_graph's}]}
    export_dir/variables/variables    a dflow checkpoint (tf.train.Saver's Zarr group)
    export_dir/assets/                the asset files, where a meta graph has some

The layout is TF's, the files are dflow's (JSON and a dflow checkpoint, not protobuf):
TensorFlow's SavedModels do not load here, nor dflow's in TensorFlow.

>>> import os, tempfile, dflow as tf
>>> export_dir = os.path.join(tempfile.mkdtemp(), "model")
>>> with tf.Graph().as_default(), tf.Session() as sess:
...     x = tf.placeholder(tf.float32, [None, 2], name="x")
...     y = tf.matmul(x, tf.Variable([[1.0], [2.0]], name="w"), name="y")
...     sess.run(tf.global_variables_initializer())
...     tf.saved_model.simple_save(sess, export_dir, inputs={"x": x}, outputs={"y": y})
>>> with tf.Graph().as_default(), tf.Session() as sess:
...     meta_graph = tf.saved_model.loader.load(sess, [tf.saved_model.tag_constants.SERVING], export_dir)
...     signature = meta_graph.signature_def[tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY]
...     sess.run(signature.outputs["y"].name, {signature.inputs["x"].name: [[1.0, 1.0]]}).tolist()
[[3.0]]
"""

from . import (
    builder,
    constants,
    loader,
    main_op,
    signature_constants,
    signature_def_utils,
    tag_constants,
    utils,
)
from .builder import SavedModelBuilder, simple_save
from .constants import (
    ASSETS_DIRECTORY,
    ASSETS_KEY,
    LEGACY_INIT_OP_KEY,
    MAIN_OP_KEY,
    SAVED_MODEL_FILENAME_JSON,
    SAVED_MODEL_FILENAME_PB,
    SAVED_MODEL_FILENAME_PBTXT,
    SAVED_MODEL_SCHEMA_VERSION,
    TRAIN_OP_KEY,
    VARIABLES_DIRECTORY,
    VARIABLES_FILENAME,
)
from .loader import load, maybe_saved_model_directory
from .main_op import main_op_with_restore
from .meta_graph import MetaGraphDef, SignatureDef, TensorInfo
from .signature_constants import (
    CLASSIFY_INPUTS,
    CLASSIFY_METHOD_NAME,
    CLASSIFY_OUTPUT_CLASSES,
    CLASSIFY_OUTPUT_SCORES,
    DEFAULT_SERVING_SIGNATURE_DEF_KEY,
    PREDICT_INPUTS,
    PREDICT_METHOD_NAME,
    PREDICT_OUTPUTS,
    REGRESS_INPUTS,
    REGRESS_METHOD_NAME,
    REGRESS_OUTPUTS,
)
from .signature_def_utils import (
    build_signature_def,
    classification_signature_def,
    is_valid_signature,
    predict_signature_def,
    regression_signature_def,
)
from .tag_constants import GPU, SERVING, TPU, TRAINING
from .utils import build_tensor_info, get_tensor_from_tensor_info

# TF 1.13+'s short names
Builder = SavedModelBuilder
contains_saved_model = maybe_saved_model_directory

__all__ = [
    "builder", "constants", "loader", "main_op", "signature_constants", "signature_def_utils",
    "tag_constants", "utils", "SavedModelBuilder", "Builder", "simple_save", "load",
    "maybe_saved_model_directory", "contains_saved_model", "main_op_with_restore", "MetaGraphDef",
    "SignatureDef", "TensorInfo", "build_signature_def", "classification_signature_def",
    "is_valid_signature", "predict_signature_def", "regression_signature_def", "build_tensor_info",
    "get_tensor_from_tensor_info",
    "ASSETS_DIRECTORY", "ASSETS_KEY", "LEGACY_INIT_OP_KEY", "MAIN_OP_KEY", "SAVED_MODEL_FILENAME_JSON",
    "SAVED_MODEL_FILENAME_PB", "SAVED_MODEL_FILENAME_PBTXT", "SAVED_MODEL_SCHEMA_VERSION", "TRAIN_OP_KEY",
    "VARIABLES_DIRECTORY", "VARIABLES_FILENAME",
    "CLASSIFY_INPUTS", "CLASSIFY_METHOD_NAME", "CLASSIFY_OUTPUT_CLASSES", "CLASSIFY_OUTPUT_SCORES",
    "DEFAULT_SERVING_SIGNATURE_DEF_KEY", "PREDICT_INPUTS", "PREDICT_METHOD_NAME", "PREDICT_OUTPUTS",
    "REGRESS_INPUTS", "REGRESS_METHOD_NAME", "REGRESS_OUTPUTS", "GPU", "SERVING", "TPU", "TRAINING",
]
