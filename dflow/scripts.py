"""Run a TF 1.x script unchanged: ``import tensorflow as tf`` gets dflow.

    $ dflow run mnist_deep.py --data_dir MNIST_data

:func:`alias_tensorflow` makes every ``tensorflow`` module name (``tensorflow``,
``tensorflow.compat.v1``, ``tensorflow.examples.tutorials.mnist``, ...) import the dflow module
of the same path, the same module object, so a script written for TF 1.x (or for TF 2's
``compat.v1``) runs on dflow without an edit. :func:`run_script` runs a file as ``python
SCRIPT ARGS`` would: ``__main__``, its arguments in ``sys.argv``, its folder first on
``sys.path``. A name dflow does not have fails as a missing module, naming the dflow module
that was looked for.

>>> alias_tensorflow()
>>> import tensorflow.compat.v1 as tf
>>> import dflow
>>> tf is dflow
True
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import os
import runpy
import sys

__all__ = ["alias_tensorflow", "run_script", "TENSORFLOW"]

TENSORFLOW = "tensorflow"


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports ``{alias}.X`` as the already importable ``{target}.X``."""

    def __init__(self, alias: str, target: str):
        self.alias, self.target = alias, target
        self.specs: dict[str, object] = {}  # each shared module's own spec, while it is imported

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.alias and not fullname.startswith(self.alias + "."):
            return None
        target_name = self.target + fullname[len(self.alias):]
        try:
            module = importlib.import_module(target_name)
        except ModuleNotFoundError as error:
            if error.name is not None and target_name.startswith(error.name):  # the alias's own part
                raise ModuleNotFoundError(f"No module named {fullname!r} (dflow has no {target_name!r}: "
                                          f"this TF name is not part of dflow)", name=fullname) from None
            raise
        self.mirror()  # names a module puts in sys.modules itself (dflow.compat.v1) resolve too
        return importlib.util.spec_from_loader(fullname, self, origin=getattr(module, "__file__", None),
                                               is_package=hasattr(module, "__path__"))

    def mirror(self) -> None:
        """Every imported ``{target}.X`` importable as ``{alias}.X`` straight from sys.modules."""
        for name, module in list(sys.modules.items()):
            if name == self.target or name.startswith(self.target + "."):
                sys.modules.setdefault(self.alias + name[len(self.target):], module)

    def create_module(self, spec):
        module = sys.modules[self.target + spec.name[len(self.alias):]]
        self.specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module):
        # the import system set the alias's spec on the shared module: give it its own back
        module.__spec__ = self.specs.pop(module.__spec__.name)


def alias_tensorflow(target: str = "dflow") -> None:
    """From now on, ``import tensorflow[.X]`` imports ``target[.X]`` (already imported
    ``tensorflow`` modules are left as they are)."""
    if not any(isinstance(finder, _Alias) and finder.alias == TENSORFLOW for finder in sys.meta_path):
        alias = _Alias(TENSORFLOW, target)
        sys.meta_path.insert(0, alias)
        alias.mirror()


def run_script(path: str, argv: list[str] | None = None) -> None:
    """Run the Python file ``path`` as ``python path *argv`` would (as ``__main__``, with
    ``sys.argv`` and ``sys.path[0]`` set for it; both restored afterwards)."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such script")
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [path, *(argv or [])]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        runpy.run_path(path, run_name="__main__")
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
