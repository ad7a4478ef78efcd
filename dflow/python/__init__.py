"""``tensorflow.python``'s few modules that TF 1.x scripts import directly (``client.device_lib``,
``client.timeline``, ``framework.ops``, ``framework.dtypes``, ``framework.tensor_shape``,
``util.nest``, ``platform.tf_logging``, and the op modules of ``ops``: ``math_ops``, ``nn_ops``,
``rnn_cell_impl``, ...)."""
