"""What a session keeps between runs: variable values and random streams.

A plain class, so the local session holds it in-process and a parameter-server
worker can hold one remotely (STYLE: remote state is an ordinary class).
"""

from __future__ import annotations

import numpy

from ..errors import FailedPreconditionError

__all__ = ["SessionState"]


class SessionState:
    """Variable values by shared name, plus per-seed random generators.

    >>> state = SessionState()
    >>> state.write_variable("w", 3.0); state.read_variable("w")
    3.0
    """

    def __init__(self, seed: int | None = None):
        self.variables: dict[str, object] = {}
        self._generators: dict[object, numpy.random.Generator] = {}
        self._default_generator = numpy.random.default_rng(seed)

    def read_variable(self, name: str):
        try:
            return self.variables[name]
        except KeyError:
            raise FailedPreconditionError(
                f"Attempting to use uninitialized value {name}: run "
                "tf.global_variables_initializer() (or restore a checkpoint) first"
            ) from None

    def write_variable(self, name: str, value) -> None:
        self.variables[name] = value

    def is_initialized(self, name: str) -> bool:
        return name in self.variables

    def random_generator(self, seed) -> numpy.random.Generator:
        """The stream for an op seed: reproducible when seeded, shared entropy when not."""
        if seed is None:
            return self._default_generator
        key = tuple(seed) if isinstance(seed, list) else seed
        if key not in self._generators:
            self._generators[key] = numpy.random.default_rng(key)
        return self._generators[key]
