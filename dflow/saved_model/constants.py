"""``tf.saved_model.constants``: where a SavedModel keeps its parts, and the collections that name
its main op and assets. TF's protobuf file names are kept to recognise TF's own exports.

>>> from dflow.saved_model import constants
>>> constants.SAVED_MODEL_FILENAME_JSON, constants.VARIABLES_DIRECTORY, constants.VARIABLES_FILENAME
('saved_model.json', 'variables', 'variables')
"""

__all__ = ["SAVED_MODEL_FILENAME_JSON", "SAVED_MODEL_FORMAT", "SAVED_MODEL_SCHEMA_VERSION",
           "SAVED_MODEL_FILENAME_PB", "SAVED_MODEL_FILENAME_PBTXT", "VARIABLES_DIRECTORY",
           "VARIABLES_FILENAME", "ASSETS_DIRECTORY", "ASSETS_KEY", "MAIN_OP_KEY",
           "LEGACY_INIT_OP_KEY", "TRAIN_OP_KEY"]

#: dflow's SavedModel file (JSON, written last by ``SavedModelBuilder.save``) and its format marker
SAVED_MODEL_FILENAME_JSON = "saved_model.json"
SAVED_MODEL_FORMAT = "dflow.saved_model"
SAVED_MODEL_SCHEMA_VERSION = 1

#: TensorFlow's own SavedModel files, which dflow recognises (to say it cannot read them)
SAVED_MODEL_FILENAME_PB = "saved_model.pb"
SAVED_MODEL_FILENAME_PBTXT = "saved_model.pbtxt"

VARIABLES_DIRECTORY = "variables"
VARIABLES_FILENAME = "variables"  # the checkpoint: <export_dir>/variables/variables
ASSETS_DIRECTORY = "assets"

ASSETS_KEY = "saved_model_assets"
MAIN_OP_KEY = "saved_model_main_op"
LEGACY_INIT_OP_KEY = "legacy_init_op"
TRAIN_OP_KEY = "saved_model_train_op"
