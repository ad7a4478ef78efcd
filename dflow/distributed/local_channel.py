"""A step's messages between processes of one host, on Unix sockets instead of Dask's comms.

A Dask message between two processes of one host costs more in Python than in the kernel: a
round trip took 248 us on an idle 2-core machine where one on a Unix socket took 5, and inside
a CIFAR-10 step, where a message also went from a stage's thread to the event loop and from
the receiver's loop to its stage's thread, a hop took 1-2 ms (docs/measured.md). So tasks on
one host send a step's messages (a client's run and its reply, a stage's values for another
task) on a Unix socket, from the thread that has them to a thread that waits for them:

- every worker listens (:class:`Listener`) on a socket in a directory of its own that only
  its user may enter (0700): who may connect is who may read its shared memory
  (:mod:`.shared_memory`). A peer asks for its path once, by Dask (``dflow_channel``);
- a message is its length (4 bytes) and msgpack of plain data: names, numbers, lists and
  dicts. Arrays of numbers go in the sender's shared memory and the message says where;
  others travel in it as bytes (:func:`encode`). Nothing is a pickle;
- each connection has a thread of the listener's that answers its requests in order, and a
  caller takes an idle connection of its own (:class:`Connections`), so concurrent steps never
  share one. A process that dies closes its sockets: its peers hear it at once.

A socket that cannot be reached (another mount namespace: a container on the same address)
or made (its path over 107 bytes under a long ``TMPDIR``) sends that peer's messages by Dask.
A worker's directory goes when it exits, and a killed worker's when the next one starts.
``DFLOW_UNIX_SOCKETS=0`` in a process's environment turns the path off there.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import shutil
import socket
import struct
import tempfile
import threading
from collections import defaultdict
from collections.abc import Callable

import msgpack
import numpy

from ..processes import left_by_dead_processes, pid_namespace

__all__ = ["Listener", "Connections", "send", "receive", "encode", "decode", "enabled", "ChannelClosedError"]

log = logging.getLogger("dflow")
_LENGTH = struct.Struct("<I")
MAX_MESSAGE = (1 << 32) - 1  # bytes a message's length field can say
_DIRECTORY = re.compile(r"dflow-socket-(\d+)-(\d+)-\w+")  # dflow-socket-<pid namespace>-<pid>-<random>


class ChannelClosedError(ConnectionError):
    """The process at the other end closed the socket (it ended or died) before answering."""


def enabled() -> bool:
    """Whether this process sends to tasks of its host on Unix sockets (``DFLOW_UNIX_SOCKETS``)."""
    return os.environ.get("DFLOW_UNIX_SOCKETS", "1").strip().lower() not in ("0", "false", "no", "off")


# ---- messages ------------------------------------------------------------------------------------
def send(sock: socket.socket, message: dict) -> None:
    sock.sendall(_packed(message))


def _packed(message) -> bytes:
    data = msgpack.packb(message, use_bin_type=True, default=_number)
    if len(data) > MAX_MESSAGE:
        raise ValueError(f"a message of {len(data):,} bytes is over a Unix-socket message's "
                         f"{MAX_MESSAGE:,}: its arrays belong in shared memory")
    return _LENGTH.pack(len(data)) + data


def _number(value):
    """A NumPy scalar in a message (a count or a time a kernel computed) as Python's number."""
    if isinstance(value, numpy.generic) and value.dtype.kind in "biuf":
        return value.item()
    raise TypeError(f"a {type(value).__name__} is not plain data, which is all a message carries")


def receive(sock: socket.socket) -> dict:
    """The next message on ``sock``; ChannelClosedError when its peer closed it first."""
    (length,) = _LENGTH.unpack(_read(sock, _LENGTH.size))
    return msgpack.unpackb(_read(sock, length), raw=False)


def _read(sock: socket.socket, count: int) -> bytearray:
    data = bytearray(count)
    view, got = memoryview(data), 0
    while got < count:
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ChannelClosedError("the other end closed the socket")
        got += n
    return data


def encode(values: dict, outbox, dest: str,
           variables: dict | None = None) -> tuple[dict, dict | None, object]:
    """``values`` (name -> array or None) as a message's plain data: the arrays of numbers in a
    segment of ``outbox`` for ``dest`` where they fit (``variables``: as ``Outbox.pack``'s), the
    rest as bytes, arrays of objects (``tf.string``) as lists. Returns (plain values, where the
    segment's are, the segment)."""
    inline, shared, segment = (outbox.pack(dest, values, variables) if outbox is not None
                               else (values, None, None))
    return {name: _plain(value) for name, value in inline.items()}, shared, segment


def decode(plain: dict) -> dict:
    """The values :func:`encode` left in the message (the segment's are the receiver's ``Inbox``'s)."""
    if not isinstance(plain, dict):
        raise TypeError(f"a message's values are a map of names, got {type(plain).__name__}")
    return {name: _from_plain(value) for name, value in plain.items()}


def _plain(value):
    if value is None:
        return None
    array = numpy.asarray(value)
    if array.dtype.kind == "O":
        return {"objects": array.ravel().tolist(), "shape": list(array.shape)}
    return {"dtype": array.dtype.str, "shape": list(array.shape), "data": array.tobytes()}


def _from_plain(plain):
    if plain is None:
        return None
    if "objects" in plain:
        array = numpy.empty(len(plain["objects"]), dtype=object)
        array[:] = plain["objects"]
        return array.reshape(plain["shape"])
    dtype = numpy.dtype(plain["dtype"])
    if dtype.kind == "O":
        raise ValueError("an array of objects travels as a list, not as bytes")
    # a copy the receiver may write (the message's bytes are read-only)
    return numpy.frombuffer(plain["data"], dtype).reshape(plain["shape"]).copy()


# ---- the receiving side --------------------------------------------------------------------------
class Listener:
    """A Unix socket that answers ``{"op": name, ...}`` requests with ``handlers[name](**rest)``,
    each connection on a thread of its own. A handler's exception is answered as
    ``{"error": {"type": ..., "message": ...}}`` (:func:`~dflow.distributed.worker.error_from_plain`)."""

    def __init__(self, handlers: dict[str, Callable[..., object]]):
        self.handlers = handlers
        self._pid = os.getpid()
        _remove_directories_of_dead_processes()
        # 0700: this user's only
        self.directory = tempfile.mkdtemp(prefix=f"dflow-socket-{pid_namespace()}-{os.getpid()}-")
        self.path = os.path.join(self.directory, "socket")
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._socket.bind(self.path)
            self._socket.listen(64)
        except OSError:
            self._socket.close()
            shutil.rmtree(self.directory, ignore_errors=True)
            raise
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        atexit.register(self.close)  # (a process that is killed leaves it to the next one to start)
        threading.Thread(target=self._accept, name="dflow-channel", daemon=True).start()

    def close(self) -> None:
        atexit.unregister(self.close)
        if os.getpid() != self._pid:  # a forked child's copy: the socket is its parent's
            return
        with self._lock:
            self._closed = True
            connections, self._connections = self._connections, set()
        for sock in (self._socket, *connections):
            try:
                sock.shutdown(socket.SHUT_RDWR)  # (wakes the threads blocked on them)
            except OSError:
                pass
            sock.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._socket.accept()
            except OSError:  # closed
                return
            with self._lock:
                if self._closed:
                    sock.close()
                    return
                self._connections.add(sock)
            threading.Thread(target=self._serve, args=(sock,), name="dflow-channel", daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        try:
            while True:
                try:
                    request = receive(sock)
                except OSError:  # closed
                    return
                except Exception as error:  # not a message: the caller reads the connection's end
                    log.info("closing a connection to %s that sent no message (%s)", self.path, error)
                    return
                sock.sendall(self._reply(request))
        except OSError:  # the caller went away before its answer
            pass
        finally:
            with self._lock:
                self._connections.discard(sock)
            sock.close()

    def _reply(self, request) -> bytes:
        answer = self._answer(request)
        try:
            return _packed(answer)
        except (TypeError, ValueError) as error:
            return _packed(_internal_error(f"its answer could not be sent: {error}"))

    def _answer(self, request):
        try:
            if not isinstance(request, dict) or not isinstance(request.get("op"), str):
                raise TypeError("a request is a map with an 'op' naming what to do")
            handler = self.handlers.get(request.pop("op"))
            if handler is None:
                raise ValueError(f"no handler for this request; there are {', '.join(sorted(self.handlers))}")
            return handler(**request)
        except Exception as error:  # answered, as Dask answers a handler's error; the caller raises it
            log.debug("channel request failed", exc_info=True)
            return _internal_error(f"{type(error).__name__}: {error}")


def _internal_error(message: str) -> dict:
    return {"error": {"type": "InternalError", "message": message, "op": None}}


def _remove_directories_of_dead_processes() -> None:
    """Remove this user's socket directories whose process is gone (it was killed before it could)."""
    for path in left_by_dead_processes(tempfile.gettempdir(), _DIRECTORY):
        shutil.rmtree(path, ignore_errors=True)


# ---- the sending side ----------------------------------------------------------------------------
class Connections:
    """Connections to listeners by path: :meth:`open` one that no other caller is using (an idle
    one, or a new one), send on it, read its answer, and :meth:`give_back` it. And the path of
    each peer's listener, by its Dask address (:meth:`path_of`)."""

    def __init__(self, connect_timeout_s: float = 5.0):
        self.connect_timeout_s = connect_timeout_s
        self._idle: dict[str, list[socket.socket]] = defaultdict(list)
        self._lock = threading.Lock()
        self._paths: dict[str, str | None] = {}  # address -> its listener (None: send by Dask)

    def path_of(self, address: str, ask: Callable[[], object]) -> str | None:
        """The path of the listener of the peer at ``address``, asked once (``ask()``, by Dask)
        and kept; None where it has none or this process cannot connect to it (another mount
        namespace: a container's), and then its messages go by Dask."""
        if address not in self._paths:
            try:
                path = ask()
            except Exception as error:  # (gone: its step's messages by Dask say so)
                log.debug("no Unix socket for %s: %s", address, error)
                path = None
            self._paths[address] = self._reachable(path)
        return self._paths[address]

    def forget(self, address: str | None = None) -> None:
        """Ask ``address`` (every peer: None) for its listener again (it died, or came back)."""
        if address is None:
            self._paths.clear()
        else:
            self._paths.pop(address, None)

    def _reachable(self, path) -> str | None:
        if not isinstance(path, str):
            return None
        try:
            self.give_back(path, self.open(path))
        except OSError as error:
            log.info("cannot connect to %s (%s): messages to its task go by Dask", path, error)
            return None
        return path

    def open(self, path: str) -> socket.socket:
        with self._lock:
            if self._idle[path]:
                return self._idle[path].pop()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.connect_timeout_s)
        try:
            sock.connect(path)
        except OSError:
            sock.close()
            raise
        sock.settimeout(None)
        return sock

    def give_back(self, path: str, sock: socket.socket) -> None:
        with self._lock:
            self._idle[path].append(sock)

    def call(self, path: str, message: dict) -> object:
        """Send ``message`` to the listener at ``path`` and return its answer."""
        sock = self.open(path)
        try:
            send(sock, message)
            answer = receive(sock)
        except BaseException:
            sock.close()  # (half a message may be on it)
            raise
        self.give_back(path, sock)
        return answer

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, defaultdict(list)
        for sockets in idle.values():
            for sock in sockets:
                sock.close()
