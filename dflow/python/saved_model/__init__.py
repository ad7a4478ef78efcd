"""``tensorflow.python.saved_model``: its modules as TF 1.x code imports them (``from
tensorflow.python.saved_model import builder as saved_model_builder``, ``signature_def_utils_impl``,
``tag_constants``, ...), each dflow's ``tf.saved_model`` module of that name; TF's ``*_impl``
modules are the modules they implement.

>>> from dflow.python.saved_model import builder, signature_def_utils_impl
>>> import dflow
>>> builder.SavedModelBuilder is dflow.saved_model.SavedModelBuilder
True
>>> signature_def_utils_impl.predict_signature_def is dflow.saved_model.predict_signature_def
True
"""

import sys

from ...saved_model import (
    builder,
    constants,
    loader,
    main_op,
    signature_constants,
    signature_def_utils,
    tag_constants,
    utils,
)

__all__ = ["builder", "builder_impl", "constants", "loader", "loader_impl", "main_op", "main_op_impl",
           "signature_constants", "signature_def_utils", "signature_def_utils_impl", "simple_save",
           "tag_constants", "utils", "utils_impl"]

# TF splits these modules into a public name and an _impl one; scripts import either
builder_impl, loader_impl, main_op_impl = builder, loader, main_op
signature_def_utils_impl, utils_impl, simple_save = signature_def_utils, utils, builder

for _name in __all__:  # `import tensorflow.python.saved_model.X` finds each by its full name
    sys.modules[f"{__name__}.{_name}"] = globals()[_name]
