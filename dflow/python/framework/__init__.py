"""``tensorflow.python.framework``: the modules scripts import from it by name (``ops`` for
``ops.reset_default_graph()``, ``dtypes``, ``tensor_shape``), each the public dflow names of
TF's module of that name."""
