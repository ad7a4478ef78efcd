"""A step's arrays between processes of one host, through shared memory instead of TCP.

Two tasks on one host (a PS and a worker of ``tf.cluster.local``, or the GPUs of one box)
passed a step's variables and gradients through the loopback interface as Dask messages.
Measured inside a CIFAR-10 training step on a 2-core machine, the 4.3 MB of gradients took
2.9-3.6 ms from the worker's send to the PS's handler that way; through a segment, 0.5 ms to
copy them in, 0.7 ms for the message saying where they are, 0.5 ms to copy them out
(docs/measured.md); the receiver now reads them where they are.

The sender (:class:`Outbox`) copies the arrays of one message into a segment of its own, a
file in ``/dev/shm`` readable by its user only, and sends their places in it instead
(:func:`Outbox.pack`). The receiver (:class:`Inbox`) takes them as read-only arrays in the
segment, without a copy: the segment is *lent* to it (a flag in its first bytes) until the
last of those arrays is freed, and its sender writes it again only after that (the next
step's message, usually; a receiver that keeps a value longer, as a variable assigned from a
fed array does, makes its sender use another segment meanwhile). A receiver that cannot open the
segment (another user, another ``/dev/shm``: a container on the same address) answers so,
and the values go by TCP from then on. Segments are unlinked when their process ends (and
those of a process that was killed, by the next process of the same user and PID namespace
to start an Outbox).

A parameter server's variables live in a segment of their own once it has sent them (the
*resident* segment, :meth:`Outbox.pack` with ``variables``): a payload of variables is copied
there once, the variables become views of it, and later steps send their places without a copy
(4.3 MB of CIFAR-10 weights: 0.7-0.9 ms a step, cache-cold). Each receiver of a resident segment
holds a flag byte of its header of its own, so several may read it at once; an update writes a
variable in place only while no receiver holds the segment (:func:`lent_in_place`, asked by
``SessionState.held_only_here``), else it makes a new array, as it does for a value another
step still reads, and the next send copies the variables again into a segment no one reads.

A process's segments are kept for the next step's message, up to a budget (a quarter of
``/dev/shm`` by default): a message that would need more first unlinks segments no message
is using, then goes by TCP. A segment that ``/dev/shm`` cannot hold (a container's 64 MB)
sends that message by TCP and makes the budget what the process holds then, so later
messages do not try again. ``DFLOW_SHARED_MEMORY=0`` in a process's environment turns the
path off there; a size (``DFLOW_SHARED_MEMORY="2 GiB"``) sets its budget.
"""

from __future__ import annotations

import atexit
import math
import mmap
import os
import re
import secrets
import threading
import weakref
from collections import OrderedDict
from typing import NamedTuple

import numpy
from dask.utils import parse_bytes

from ..ops.fused import VARIABLE_ARENAS
from ..processes import left_by_dead_processes, pid_namespace

__all__ = ["Outbox", "Inbox", "SharedMemoryError", "lent_in_place"]

DIRECTORY = "/dev/shm"
ALIGN = 64  # each array starts on a cache line
# a segment's first cache line: byte 0 is 1 while the receiver of its message holds its arrays; in
# a resident segment, byte k (1..63) is 1 while the k-th of its current receivers does
HEADER = ALIGN
GRAIN = 1 << 20  # segments are made in whole MiB, so that a message a little bigger reuses one
BUDGET_SHARE = 4  # by default a process's segments hold at most this fraction of /dev/shm
MAPPED_SEGMENTS = 32  # segments a receiver keeps open (a few per sender it hears from)
_NAME = re.compile(r"dflow-(\d+)-(\d+)-[0-9a-f]{16}")  # dflow-<pid namespace>-<pid>-<random>
_KINDS = "biuf"  # dtypes a segment may carry: numbers and booleans, never objects
RESIDENT = ""  # Outbox._take's destination for a segment that variables live in


class SharedMemoryError(OSError):
    """A segment this process cannot open: its sender sends the values by TCP instead."""


_LIVE: set[_Segment] = set()  # this process's segments, unlinked at its exit
_CLEAR = bytes(HEADER)
# resident segments by id of the array over the whole of each, which the variables' arrays view:
# when no variable is left in one, that array is freed and its segment goes back to the free ones
# (the compiled updates read it too: a variable there may be written in place)
_RESIDENT: dict[int, _Segment] = VARIABLE_ARENAS


class _Segment:
    def __init__(self, size: int):
        self.pid = os.getpid()
        self.name = f"dflow-{pid_namespace()}-{self.pid}-{secrets.token_hex(8)}"
        self.size = size
        self.resident_views = False  # variables live in it (views of it are theirs)
        path = os.path.join(DIRECTORY, self.name)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            # reserved now: a full /dev/shm is an error here, not a SIGBUS when the copy writes
            os.posix_fallocate(fd, 0, size)
            self.buffer = mmap.mmap(fd, size)
        except OSError:
            os.unlink(path)
            raise
        finally:
            os.close(fd)
        _LIVE.add(self)

    @property
    def lent(self) -> bool:
        """Whether a receiver may still read this segment (the arrays it took are alive)."""
        return self.buffer[:HEADER] != _CLEAR

    def take_flag(self) -> int | None:
        """A flag byte of the header for one more receiver of this resident segment, set; None
        when every one is taken (the caller holds the outbox's lock)."""
        flag = self.buffer.find(b"\0", 1, HEADER)
        if flag < 0:
            return None
        self.buffer[flag] = 1
        return flag

    def unlink(self) -> None:
        _LIVE.discard(self)
        if os.getpid() != self.pid:  # a forked child's copy: the segment is its parent's
            return
        try:
            os.unlink(os.path.join(DIRECTORY, self.name))
        except FileNotFoundError:
            pass


@atexit.register
def _unlink_all() -> None:
    for segment in list(_LIVE):
        segment.unlink()


class Outbox:
    """The sending side: segments per destination, each reused once its message was answered,
    all of them together within ``budget`` bytes (:func:`budget_from_environment`)."""

    def __init__(self, budget: int | None = None):
        # (reentrant: a resident segment's last variable may be freed, and its finalizer take the
        # lock, on a thread that holds it)
        self._lock = threading.RLock()
        # (destination, segment), oldest given back first; RESIDENT's: no variable lives in it now
        self._free: list[tuple[str, _Segment]] = []
        self._all: list[_Segment] = []
        self.budget = budget_from_environment() if budget is None else budget
        self.refused: set[str] = set()  # destinations that could not read a segment: TCP only
        if self.budget:
            _remove_segments_of_dead_processes()

    def pack(self, dest: str, values: dict,
             variables: dict | None = None) -> tuple[dict, dict | None, object]:
        """``values`` split into those that go in the message (tokens, strings) and, for the
        arrays of numbers, where they are in a segment (``None`` when there are none, or ``dest``
        cannot take them, or they do not fit in the budget); give the segment back with
        :meth:`release` once ``dest`` has answered; it is written again once the receiver has
        also let go of the arrays (:meth:`Inbox.unpack`). (Small arrays go in the segment too: in
        the message each is a frame of its own, which costs more to write and read than the copy.)

        ``variables``: for values that are a variable's array itself, by name, a function that
        makes a given array of the same values that variable's. Where every array is one, they
        are lent from a resident segment (see the module's docstring), copied there first unless
        they already are in one."""
        arrays = {} if dest in self.refused or not self.budget else {
            name: value for name, value in values.items()
            if isinstance(value, numpy.ndarray) and value.dtype.kind in _KINDS}
        if not arrays:
            return values, None, None
        inline = {name: value for name, value in values.items() if name not in arrays}
        if variables and arrays.keys() <= variables.keys():
            lent = self._lend_resident(arrays, variables)
            if lent is not None:
                return inline, *lent
        places, size = _places(arrays)
        segment = self._take(dest, size)
        if segment is None:  # over the budget, or /dev/shm full or missing: this message goes by TCP
            return values, None, None
        segment.buffer[0] = 1  # lent from now: the receiver gives it back when it frees the arrays
        for name, value in arrays.items():
            start = places[name][0]
            numpy.copyto(numpy.ndarray(value.shape, value.dtype, segment.buffer, start), value,
                         casting="no")
        return inline, {"segment": segment.name, "arrays": places}, segment

    def _lend_resident(self, arrays: dict, variables: dict) -> tuple[dict, _Lend] | None:
        """The arrays (variables' own) lent from the resident segment they are in, or copied into a
        resident segment no one reads and made the variables' arrays; None when neither can be."""
        with self._lock:
            bases = {id(value.base) for value in arrays.values()}
            segment = _RESIDENT.get(bases.pop()) if len(bases) == 1 else None
            if segment is not None:  # each of them where it is
                start = _address(next(iter(arrays.values())).base)
                places = {name: [_address(value) - start, value.dtype.str, list(value.shape)]
                          for name, value in arrays.items()}
            else:
                places, size = _places(arrays)
                segment = self._take(RESIDENT, size)
                if segment is None:
                    return None
            flag = segment.take_flag()
            if flag is None:  # every flag held: the copy path
                return None
        if not segment.resident_views:
            whole = numpy.frombuffer(segment.buffer, numpy.uint8)
            # known as resident before any variable is a view of it: from then on, an update asks
            # lent_in_place before it writes one
            _RESIDENT[id(whole)] = segment
            weakref.finalize(whole, self._resident_freed, id(whole), segment).atexit = False
            segment.resident_views = True
            for name, value in arrays.items():
                offset, nbytes = places[name][0], value.nbytes
                view = whole[offset:offset + nbytes].view(value.dtype).reshape(value.shape)
                numpy.copyto(view, value, casting="no")
                variables[name](view)
        return {"segment": segment.name, "arrays": places, "flag": flag}, _Lend(segment, flag)

    def _resident_freed(self, key: int, segment: _Segment) -> None:
        """No variable lives in ``segment`` any more: it may take another payload of them."""
        _RESIDENT.pop(key, None)
        segment.resident_views = False
        with self._lock:
            if segment in self._all:
                self._free.append((RESIDENT, segment))

    def release(self, dest: str, segment) -> None:
        if isinstance(segment, _Segment):  # (a resident segment's lend ends when the receiver frees it)
            with self._lock:
                self._free.append((dest, segment))

    def refuse(self, dest: str, segment) -> None:
        """``dest`` answered that it cannot open the segments (another user, another /dev/shm):
        its messages go by TCP from now on, and ``segment``'s arrays were not lent to it."""
        self.refused.add(dest)
        if isinstance(segment, _Lend):
            segment.segment.buffer[segment.flag] = 0
        elif segment is not None:
            segment.buffer[0] = 0

    @property
    def held_bytes(self) -> int:
        """The bytes of /dev/shm this process's segments hold."""
        with self._lock:
            return sum(segment.size for segment in self._all)

    def _take(self, dest: str, size: int) -> _Segment | None:
        """A segment of at least ``size`` bytes for messages to ``dest`` (:data:`RESIDENT`: for
        variables to live in): one given back that no receiver reads, else a new one."""
        size = -(-size // GRAIN) * GRAIN
        with self._lock:
            fitting = [entry for entry in self._free
                       if entry[0] == dest and entry[1].size >= size and not entry[1].lent]
            if fitting:
                entry = min(fitting, key=lambda entry: entry[1].size)
                self._free.remove(entry)
                return entry[1]
            held = sum(segment.size for segment in self._all)
            if held - sum(unused.size for _, unused in self._free) + size > self.budget:
                return None  # not even without the segments no message is using
            # make room: the longest unused first (a receiver still reading one keeps its pages
            # until it frees the arrays: its mapping outlives the name)
            while held + size > self.budget:
                _, unused = self._free.pop(0)
                self._all.remove(unused)
                unused.unlink()
                held -= unused.size
            try:
                segment = _Segment(size)
            except OSError:  # /dev/shm holds no more (or is missing): ask it for nothing bigger again
                self.budget = held
                return None
            self._all.append(segment)
            return segment

    def close(self) -> None:
        """Unlink every segment (receivers keep what they mapped until they close it)."""
        with self._lock:
            segments, self._all = self._all, []
            self._free.clear()
        for segment in segments:
            segment.unlink()


class _Lend(NamedTuple):
    """A resident segment lent to one receiver, which clears ``flag`` when it frees the arrays."""
    segment: _Segment
    flag: int


def _places(arrays: dict) -> tuple[dict, int]:
    """Each array's [offset, dtype, shape] in a segment of them, one after another on cache lines,
    and the bytes they take."""
    places, offset = {}, HEADER
    for name, value in arrays.items():
        places[name] = [offset, value.dtype.str, list(value.shape)]
        offset += -(-value.nbytes // ALIGN) * ALIGN
    return places, offset


def _address(array: numpy.ndarray) -> int:
    """Where ``array``'s data starts in this process's memory."""
    return array.__array_interface__["data"][0]


def lent_in_place(value) -> bool:
    """Whether ``value`` (a variable's array) lies in a resident segment that a receiver still
    reads: an update must not write it in place (``SessionState.held_only_here`` asks)."""
    segment = _RESIDENT.get(id(getattr(value, "base", None)))
    return segment is not None and segment.lent


def budget_from_environment() -> int:
    """The bytes of /dev/shm a process's segments may hold: ``DFLOW_SHARED_MEMORY`` where it is
    set (``0`` or ``off``: none, shared memory off; a size such as ``512MiB``), else a quarter of
    /dev/shm's size (0 where there is none)."""
    setting = os.environ.get("DFLOW_SHARED_MEMORY", "").strip()
    if setting.lower() in ("0", "off", "false", "no"):
        return 0
    if setting:
        try:
            return parse_bytes(setting)
        except ValueError:
            raise ValueError(f"DFLOW_SHARED_MEMORY={setting!r} is neither 0 (shared memory off) nor a size "
                             "such as '512MiB': set one of those, or unset it for a quarter of "
                             f"{DIRECTORY}") from None
    try:
        stat = os.statvfs(DIRECTORY)
    except OSError:
        return 0
    return stat.f_blocks * stat.f_frsize // BUDGET_SHARE


class Inbox:
    """The receiving side: the segments senders named, mapped once."""

    def __init__(self):
        self._lock = threading.Lock()
        self._mapped: OrderedDict[str, mmap.mmap] = OrderedDict()

    def unpack(self, shared: dict) -> dict:
        """The arrays ``shared`` (:meth:`Outbox.pack`'s description) places in a segment, read-only
        and where they are: the segment is given back to its sender when the last of them (and
        of the views of them) is freed. :class:`SharedMemoryError` when this process cannot
        read it, ValueError for a description that is not one."""
        if not isinstance(shared, dict) or not isinstance(shared.get("arrays"), dict):
            raise ValueError("a shared-memory delivery names a segment and its arrays")
        flag = shared.get("flag", 0)
        if not isinstance(flag, int) or not 0 <= flag < HEADER:
            raise ValueError(f"a shared-memory delivery's flag is a byte of the header, got {flag!r}")
        with self._lock:
            buffer = self._map(shared.get("segment"))
        try:
            return _borrow(buffer, shared["arrays"], flag)
        except ValueError:
            buffer[flag] = 0  # nothing of it is read: the sender may write it again
            raise

    def _map(self, name) -> mmap.mmap:
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a dflow shared-memory segment")
        buffer = self._mapped.get(name)
        if buffer is not None:
            self._mapped.move_to_end(name)
            return buffer
        try:  # (read and write: the receiver gives the segment back in its first byte)
            fd = os.open(os.path.join(DIRECTORY, name), os.O_RDWR)
        except OSError as error:
            raise SharedMemoryError(f"cannot open segment {name}: {error}") from None
        try:
            buffer = mmap.mmap(fd, 0)
        finally:
            os.close(fd)
        # a segment its sender unlinked (to stay in its budget) lives on while it is mapped here;
        # forgotten ones are unmapped when the last array in them is freed (not closed here)
        for gone in [other for other in self._mapped if not os.path.exists(os.path.join(DIRECTORY, other))]:
            del self._mapped[gone]
        self._mapped[name] = buffer
        while len(self._mapped) > MAPPED_SEGMENTS:
            self._mapped.popitem(last=False)
        return buffer


def _borrow(buffer: mmap.mmap, arrays: dict, flag: int = 0) -> dict:
    """The arrays at ``arrays``' places in ``buffer``, as read-only views of it; header byte
    ``flag`` is cleared when the last of them is freed."""
    values = {}
    for name, place in arrays.items():
        try:
            offset, dtype, shape = int(place[0]), numpy.dtype(place[1]), tuple(int(n) for n in place[2])
        except (TypeError, ValueError, IndexError):
            raise ValueError(f"a shared-memory delivery's place of {name!r} is not [offset, dtype, "
                             f"shape]: {place!r}") from None
        if dtype.kind not in _KINDS or offset < HEADER or min(shape, default=1) < 0:
            raise ValueError(f"a shared-memory delivery's {name!r} is not an array of numbers: {place!r}")
        nbytes = math.prod(shape) * dtype.itemsize
        if offset + nbytes > len(buffer):
            raise ValueError(f"a shared-memory delivery's {name!r} ({nbytes} bytes at {offset}) lies "
                             f"beyond its segment ({len(buffer)} bytes)")
        values[name] = (offset, nbytes, dtype, shape)
    if not values:
        buffer[flag] = 0
        return {}
    # one array over the segment, whose views the values are: when it is freed, so are they
    segment = numpy.frombuffer(buffer, numpy.uint8)
    segment.flags.writeable = False  # the sender's bytes: no kernel writes into them
    weakref.finalize(segment, _give_back, buffer, flag).atexit = False
    return {name: segment[offset:offset + nbytes].view(dtype).reshape(shape)
            for name, (offset, nbytes, dtype, shape) in values.items()}


def _give_back(buffer: mmap.mmap, flag: int) -> None:
    """The receiver freed the arrays of the message in ``buffer``: its sender may write them again."""
    buffer[flag] = 0


def _remove_segments_of_dead_processes() -> None:
    """Unlink this user's segments whose process is gone (it was killed before it could)."""
    for path in left_by_dead_processes(DIRECTORY, _NAME):
        try:
            os.unlink(path)
        except OSError:
            pass
