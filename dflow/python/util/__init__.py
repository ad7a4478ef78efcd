"""``tensorflow.python.util``: ``nest``."""
