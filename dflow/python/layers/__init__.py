"""``tensorflow.python.layers``: ``base`` (``Layer``, ``InputSpec``) and ``core`` (``Dense``,
``Dropout``, ``Flatten`` and their functions), as TF 1.x's own cell and layer code imports them."""
