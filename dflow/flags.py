"""``tf.flags`` and ``tf.app.flags``: command-line flags as TF 1.x scripts define and read them.

TF 1.5+ built its flags on absl-py, and so does dflow: the ``DEFINE_*`` functions are
absl's (also under TF's old keyword names ``flag_name``, ``default_value``,
``docstring``), and :data:`FLAGS` is absl's global ``FlagValues``, parsed from
``sys.argv`` the first time a flag is read, as TF 1.x's ``FLAGS`` is, so a script
may read flags at module level before :func:`dflow.app.run`. Flags it does not
define are left for ``main``'s ``argv``.

>>> import dflow as tf
>>> flag_values = tf.flags.FlagValues()
>>> _ = tf.flags.DEFINE_integer("steps", 100, "training steps", flag_values=flag_values)
>>> flag_values(["train.py", "--steps=20", "--other"], known_only=True)
['train.py', '--other']
>>> flag_values.steps
20
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable

from absl import flags as _absl
from absl.flags import _helpers

__all__ = ["FLAGS", "FlagValues", "Error", "IllegalFlagValueError", "UnrecognizedFlagError",
           "DEFINE_string", "DEFINE_integer", "DEFINE_float", "DEFINE_boolean", "DEFINE_bool",
           "DEFINE_list", "DEFINE_enum", "DEFINE_multi_string", "DEFINE_multi_integer",
           "DEFINE_multi_float", "DEFINE_multi_enum", "DEFINE_spaceseplist", "DEFINE_alias",
           "mark_flag_as_required", "mark_flags_as_required", "register_validator", "validator"]

# the flags a script defines through this module belong to the script (its --help lists them
# under its name), as they would had it called absl directly
_helpers.disclaim_module_ids.add(id(sys.modules[__name__]))

FlagValues = _absl.FlagValues
Error = _absl.Error
IllegalFlagValueError = _absl.IllegalFlagValueError
UnrecognizedFlagError = _absl.UnrecognizedFlagError
mark_flag_as_required = _absl.mark_flag_as_required
mark_flags_as_required = _absl.mark_flags_as_required
register_validator = _absl.register_validator
validator = _absl.validator

# TF 1.x's first flags module (argparse) named DEFINE_*'s arguments so; TF 1.5+ still accepted them
_TF_ARGUMENT_NAMES = {"flag_name": "name", "default_value": "default", "docstring": "help"}


def _accepting_tf_names(define: Callable) -> Callable:
    @functools.wraps(define)
    def define_flag(*args, **kwargs):
        for tf_name, absl_name in _TF_ARGUMENT_NAMES.items():
            if tf_name in kwargs:
                kwargs[absl_name] = kwargs.pop(tf_name)
        return define(*args, **kwargs)

    return define_flag


DEFINE_string = _accepting_tf_names(_absl.DEFINE_string)
DEFINE_integer = _accepting_tf_names(_absl.DEFINE_integer)
DEFINE_float = _accepting_tf_names(_absl.DEFINE_float)
DEFINE_boolean = _accepting_tf_names(_absl.DEFINE_boolean)
DEFINE_bool = DEFINE_boolean
DEFINE_list = _accepting_tf_names(_absl.DEFINE_list)
DEFINE_spaceseplist = _accepting_tf_names(_absl.DEFINE_spaceseplist)
DEFINE_enum = _accepting_tf_names(_absl.DEFINE_enum)
DEFINE_multi_string = _accepting_tf_names(_absl.DEFINE_multi_string)
DEFINE_multi_integer = _accepting_tf_names(_absl.DEFINE_multi_integer)
DEFINE_multi_float = _accepting_tf_names(_absl.DEFINE_multi_float)
DEFINE_multi_enum = _accepting_tf_names(_absl.DEFINE_multi_enum)
DEFINE_alias = _absl.DEFINE_alias


class _LazyFlagValues:
    """absl's ``FlagValues``, parsed from ``sys.argv`` when a flag is first read (TF 1.x's ``FLAGS``).

    Reading a flag before anything parsed the command line parses it, keeping the flags it
    does not know for ``tf.app.run`` to hand to ``main``. ``FLAGS.__flags`` is the
    ``{name: value}`` dict that TF 1.0-1.4 scripts print; ``FLAGS._parse_flags()`` parses
    as they called it.
    """

    def __init__(self, wrapped: FlagValues):
        self.__dict__["_wrapped"] = wrapped

    def __getattr__(self, name: str):  # not an attribute of this class: a flag or absl's method
        wrapped = self.__dict__["_wrapped"]
        if name == "__flags":
            self._parse_if_unparsed()
            return wrapped.flag_values_dict()
        if name in wrapped:
            self._parse_if_unparsed()
        return getattr(wrapped, name)

    def _parse_if_unparsed(self) -> None:
        if not self.__dict__["_wrapped"].is_parsed():
            self.parse_command_line(sys.argv)

    def parse_command_line(self, argv: list[str]) -> list[str]:
        """Parse the program's command line once (the arguments that are not flags are returned,
        ``argv[0]`` first); a bad value exits 1 with absl's message, which names the flag."""
        wrapped, argv = self.__dict__["_wrapped"], list(argv)
        defined = frozenset(wrapped)
        parsed = self.__dict__.get("_command_line")
        if parsed is not None and parsed[:2] == (argv, defined) and wrapped.is_parsed():
            return list(parsed[2])  # the same flags from the same command line: nothing new to parse
        for flag in wrapped._flags().values():  # parsed again, a DEFINE_multi_* flag would repeat
            if isinstance(flag, _absl.MultiFlag) and flag.present:
                flag.unparse()
        program = os.path.basename(argv[0]) if argv else "program"
        try:
            remaining = self(argv, known_only=True)
        except Error as error:
            print(f"{program}: error: {error}\nPass --help to see the flags {program} defines.",
                  file=sys.stderr)
            sys.exit(1)
        self.__dict__["_command_line"] = (argv, defined, remaining)
        return list(remaining)

    def _parse_flags(self, args: list[str] | None = None) -> list[str]:
        """TF 1.0-1.4's explicit parse: ``args`` (default ``sys.argv[1:]``); returns the rest."""
        argv = sys.argv[:1] + list(sys.argv[1:] if args is None else args)
        return self.parse_command_line(argv)[1:]

    def __call__(self, argv, known_only: bool = False) -> list[str]:
        return self.__dict__["_wrapped"](argv, known_only=known_only)

    def __setattr__(self, name: str, value) -> None:
        setattr(self.__dict__["_wrapped"], name, value)

    def __delattr__(self, name: str) -> None:
        delattr(self.__dict__["_wrapped"], name)

    def __getitem__(self, name: str):
        return self.__dict__["_wrapped"][name]

    def __setitem__(self, name: str, flag) -> None:  # DEFINE_*(..., flag_values=tf.flags.FLAGS)
        self.__dict__["_wrapped"][name] = flag

    def __contains__(self, name: str) -> bool:
        return name in self.__dict__["_wrapped"]

    def __iter__(self):
        return iter(self.__dict__["_wrapped"])

    def __len__(self) -> int:
        return len(self.__dict__["_wrapped"])

    def __dir__(self):
        return dir(self.__dict__["_wrapped"])

    def __str__(self) -> str:
        return str(self.__dict__["_wrapped"])

    def __reduce__(self):
        # a train_fn sent to the cluster's workers (tf.replicate) reads FLAGS there: send the values
        self._parse_if_unparsed()
        return ParsedFlags, (self.__dict__["_wrapped"].flag_values_dict(),)


class ParsedFlags:
    """The flags' values as parsed in the client, read the same way (``FLAGS.name``) in a worker."""

    def __init__(self, values: dict):
        self.__dict__["_values"] = dict(values)

    def __getattr__(self, name: str):
        values = self.__dict__["_values"]
        if name == "__flags":
            return dict(values)
        if name not in values:
            raise AttributeError(f"no flag {name!r} was defined in the client that sent these flags")
        return values[name]

    def __setattr__(self, name: str, value) -> None:
        self.__dict__["_values"][name] = value

    def __contains__(self, name: str) -> bool:
        return name in self.__dict__["_values"]

    def flag_values_dict(self) -> dict:
        return dict(self.__dict__["_values"])


#: the flags of the program, shared with absl (TF 1.x shared them too)
FLAGS = _LazyFlagValues(_absl.FLAGS)
