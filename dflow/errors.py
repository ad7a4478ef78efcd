"""Errors raised while running a graph, named as TF 1.x's ``tf.errors``."""

from __future__ import annotations

__all__ = ["OpError", "InvalidArgumentError", "FailedPreconditionError", "NotFoundError", "AbortedError",
           "DeadlineExceededError", "UnavailableError", "CancelledError", "OutOfRangeError",
           "DataLossError"]


class OpError(RuntimeError):
    """An op failed at run time; ``op`` names it when known."""

    def __init__(self, message: str, op=None):
        super().__init__(message)
        self.op = op
        self.message = message

    def __reduce__(self):  # errors cross processes (a worker's op failed): keep ``op``
        return type(self), (self.message, self.op)


class InvalidArgumentError(OpError, ValueError):
    """A fed value or an op input is not acceptable (wrong shape, out-of-range label)."""


class FailedPreconditionError(OpError):
    """The graph is not ready to run this op: e.g. a variable read before initialization."""


class NotFoundError(OpError, FileNotFoundError):
    """A checkpoint, file or store that was asked for does not exist."""


class AbortedError(OpError):
    """The step was stopped because another part of it failed (another task named in the message)."""


class DeadlineExceededError(OpError):
    """A wait ran past its deadline (``ConfigProto.operation_timeout_in_ms``)."""


class UnavailableError(OpError):
    """A task of the cluster cannot be reached: its worker left or died."""


class CancelledError(OpError):
    """A wait was cancelled, e.g. replicas blocked in a barrier after the chief stopped."""


class OutOfRangeError(OpError):
    """An input is exhausted: a dataset iterator ran past its last epoch."""


class DataLossError(OpError):
    """Stored data is unreadable or corrupt: a damaged chunk of a dataset store."""


class AlreadyExistsError(OpError, FileExistsError):
    """What was to be created exists: the target of ``tf.gfile.Copy``, the directory of ``MkDir``."""


class ResourceExhaustedError(OpError):
    """A task ran out of a resource: its worker paused or was killed for memory."""


__all__ += ["AlreadyExistsError", "ResourceExhaustedError"]
