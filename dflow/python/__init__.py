"""``tensorflow.python``'s few modules that TF 1.x scripts import directly (``client.device_lib``,
``framework.ops``, ``framework.dtypes``, ``framework.tensor_shape``)."""
