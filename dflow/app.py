"""``tf.app``: ``tf.app.run`` and ``tf.app.flags``, the program shape of every TF 1.x tutorial.

    import dflow as tf

    flags = tf.app.flags
    flags.DEFINE_integer("max_steps", 1000, "Number of steps to run trainer.")
    FLAGS = flags.FLAGS

    def main(argv):
        print(FLAGS.max_steps, argv[1:])  # the arguments that were not flags

    if __name__ == "__main__":
        tf.app.run()

``python train.py --max_steps=20 data.txt`` prints ``20 ['data.txt']``.
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable
from typing import NoReturn

from . import flags
from .flags import FLAGS

__all__ = ["run", "flags"]

_HELP_ARGUMENTS = ("-h", "-help", "--help", "-?", "--helpshort", "--helpfull")


def run(main: Callable | None = None, argv: list[str] | None = None) -> NoReturn:
    """Parse the flags from ``argv`` (default ``sys.argv``), call ``main(argv)`` with the
    arguments that were not flags (``argv[0]`` first), and exit with what it returns.

    ``main`` defaults to the ``main`` function of the ``__main__`` module. ``--help``
    prints the flags and exits 0; a flag given a value it cannot take exits 1, naming it.
    """
    main = main if main is not None else _main_of_the_script()
    argv = list(sys.argv if argv is None else argv)
    program = os.path.basename(argv[0]) if argv else "program"
    if any(arg in _HELP_ARGUMENTS for arg in argv[1:_end_of_flags(argv)]):
        print(_usage(program))
        sys.exit(0)
    sys.exit(_call(main, FLAGS.parse_command_line(argv)))


def _main_of_the_script() -> Callable:
    main = getattr(sys.modules["__main__"], "main", None)
    if main is None:
        raise TypeError("tf.app.run() calls the main(argv) function of the script that was run, and "
                        "this one has none: define main(argv) or pass it, tf.app.run(main=my_main)")
    return main


def _end_of_flags(argv: list[str]) -> int:
    """Where the flags stop: at ``--`` (what follows goes to ``main`` as it is)."""
    return argv.index("--") if "--" in argv else len(argv)


def _call(main: Callable, argv: list[str]):
    """``main(argv)``; a ``main()`` that takes no arguments (TF 1.x would fail it) is called bare."""
    try:
        parameters = inspect.signature(main).parameters.values()
    except (TypeError, ValueError):  # a builtin or an extension: assume TF's shape
        return main(argv)
    takes_argument = any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
                         for p in parameters)
    return main(argv) if takes_argument else main()


def _usage(program: str) -> str:
    doc = (sys.modules["__main__"].__doc__ or "").strip()
    flag_help = FLAGS.get_help() or "  (no flags defined)"
    return "\n\n".join(part for part in (f"usage: {program} [flags] [arguments]", doc,
                                         f"flags:\n{flag_help}") if part)
