"""``tensorflow.python.framework.dtypes``: :mod:`dflow.dtypes` under TF's module path."""

from ...dtypes import *  # noqa: F403  (the same names, by dflow.dtypes.__all__)
from ...dtypes import __all__  # noqa: F401
