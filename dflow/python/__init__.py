"""``tensorflow.python``'s few modules that TF 1.x scripts import directly (``client.device_lib``,
``client.timeline``, ``framework``'s ``ops``, ``dtypes``, ``tensor_shape``, ``constant_op`` and
``tensor_util``, ``layers.base`` and ``layers.core``, ``util.nest``, ``platform.tf_logging``,
``saved_model``'s modules, and the
op modules of ``ops``: ``math_ops``, ``nn_ops``, ``rnn_cell_impl``, ...)."""
