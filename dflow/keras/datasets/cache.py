"""Keras's datasets folder, where ``load_data()`` finds the files Keras would have downloaded."""

from __future__ import annotations

import os

from ...data.sources import SourceError

__all__ = ["cache_dir", "cached"]


def cache_dir() -> str:
    """Where Keras keeps its datasets: ``$KERAS_HOME/datasets``, else ``~/.keras/datasets``."""
    return os.path.join(os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras"),
                        "datasets")


def cached(name: str, what: str, url: str) -> str:
    """The path of ``name`` in Keras's datasets folder; an error saying what to put there if none."""
    path = os.path.join(cache_dir(), name)
    if not os.path.exists(path):
        raise SourceError(f"{path} does not exist: dflow downloads nothing; put {what} there (from {url}), "
                          "as Keras's load_data() would have downloaded it")
    return path
