"""``python -m dflow``: the ``dflow`` command line."""

import sys

from .cli import main

sys.exit(main())
