"""Collectives between worker tasks: allreduce (ring and recursive doubling) and broadcast.

Every dflow worker has one :class:`Communicator`. A collective op's kernel
(:mod:`dflow.ops.collective_ops`) hands it a flat buffer; the members of the
group exchange pieces of it straight from worker to worker with the
``dflow_collective`` RPC, never through the client or the scheduler.

- ring (bandwidth-optimal): a reduce-scatter then an allgather, N - 1 steps
  each, every member sending 2 (N - 1) / N x the buffer's bytes;
- recursive doubling (latency-optimal, ``log2 N`` rounds of whole-buffer
  exchanges; members beyond the largest power of two fold into a partner
  first): for buffers under ``TREE_MAX_BYTES`` (1 MiB), where the ring's
  2 (N - 1) message hops cost more than its saved bytes;
- broadcast: the root sends the buffer to every other member.

Every member ends with bitwise the same values: a ring chunk is summed once
and then copied, and recursive doubling adds the same two operands on both
sides (float addition commutes). With ``compression="fp16"`` the wire carries
half floats and each member rounds its own operands the same way, so the
replicas still agree.

A collective is matched across members by its ``instance_key`` and a
per-member count of how often that key has run: the n-th run of ``grads_0``
on worker 0 meets the n-th run on worker 1. A member waiting for a peer checks
every few seconds that the peer's worker still answers, so a dead member is
named within seconds instead of a hang; a member that fails tells the others,
who fail with its reason. :meth:`Communicator.cancel` (the client, once it knows a
member died; ``tf.Session.reset``) ends the collectives in flight at once with
``CancelledError``, so the survivors stop between steps (``--elastic`` then goes on
without the dead member) instead of each finding the death on its own.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict, deque
from concurrent.futures import Future, ThreadPoolExecutor

import numpy

from ..errors import CancelledError, DeadlineExceededError, InvalidArgumentError, OpError, UnavailableError

__all__ = ["Communicator", "TREE_MAX_BYTES", "ring_bytes", "choose_algorithm", "ALGORITHMS"]

# below this, recursive doubling's log2(N) rounds beat the ring's 2(N-1) hops: measured with
# `dflow bench modes --algorithms` on 4 workers, the tree won up to 256 KiB (12-14 ms against 19-23
# at 1 Gbit/s, 6-10 against 16-17 on loopback) and the ring from 4 MiB on (59 ms against 88 at 1 Gbit/s)
TREE_MAX_BYTES = 2**20
LIVENESS_CHECK_S = 2.0  # a member waiting this long for a peer asks whether the peer is alive
COLLECTIVE_THREADS = 64  # collectives in flight at once on one worker (one per fused bucket)
ALGORITHMS = ("auto", "ring", "tree")


def ring_bytes(nbytes: int, members: int) -> float:
    """What a ring allreduce sends per member: 2 (N - 1) / N x the buffer."""
    return 2 * (members - 1) / members * nbytes


def choose_algorithm(algorithm: str, nbytes: int) -> str:
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown allreduce algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}")
    if algorithm != "auto":
        return algorithm
    return "tree" if nbytes < TREE_MAX_BYTES else "ring"


class Communicator:
    """This task's side of every collective it takes part in.

    ``send(address, **message)`` delivers a message to a peer's ``dflow_collective``
    handler and ``runs_started(address, instance)`` asks a peer how many runs of a
    collective it has started (raising when it does not answer); both are coroutine
    functions run on ``loop`` (the worker's event loop). ``addresses`` maps tasks to
    worker addresses and is kept current by the worker plugin.
    """

    def __init__(self, task: str, addresses: dict, loop, send, runs_started, timeout_s: float = 600.0):
        self.task = task
        self.addresses = addresses
        self.timeout_s = timeout_s
        self._loop, self._send, self._runs_started = loop, send, runs_started
        self._arrived = threading.Condition()
        self._messages: dict[tuple, tuple] = {}  # (instance, run, phase, sender) -> (value, signature)
        self._failed: dict[tuple, str] = {}  # (instance, run) -> why
        self._cancelled: tuple[float, str] | None = None  # (when, why): collectives begun before end
        self._runs: dict[str, int] = defaultdict(int)  # instance key -> runs started here
        self._runs_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(COLLECTIVE_THREADS, thread_name_prefix="dflow-collective")
        self.bytes_sent: dict[str, int] = defaultdict(int)  # peer task -> bytes, since the start
        self.events: deque[tuple[str, float, float]] = deque(maxlen=10_000)  # (instance, start, end)

    # ---- what the ops call -------------------------------------------------------------
    def start(self, kind: str, buffer, *, group: tuple[str, ...], instance_key: str,
              signature: tuple, **options) -> Future:
        """Run collective ``kind`` ("all_reduce" or "broadcast") on a flat buffer in the
        background; the Future gives this member's result."""
        if self.task not in group:
            raise InvalidArgumentError(f"{self.task} runs collective {instance_key} of group "
                                       f"{', '.join(group)}, which it is not a member of")
        missing = [t for t in group if t not in self.addresses]
        if missing:
            raise UnavailableError(f"collective {instance_key}: no worker holds {', '.join(missing)}; "
                                   f"the cluster's tasks are {', '.join(sorted(self.addresses))}")
        with self._runs_lock:
            run = self._runs[instance_key]
            self._runs[instance_key] += 1
        operation = _Collective(self, (instance_key, run), group, signature)
        method = getattr(operation, kind)
        return self._pool.submit(operation.guarded, method, buffer, **options)

    # ---- what the worker's handlers call ------------------------------------------------
    def deliver(self, key, phase, sender: str, value, signature) -> None:
        # keys come back from msgpack as lists: make them the tuples the receivers look for
        with self._arrived:
            self._messages[(key[0], key[1], tuple(phase), sender)] = (value, tuple(signature))
            self._arrived.notify_all()

    def fail(self, key, reason: str) -> None:
        with self._arrived:
            self._failed.setdefault((key[0], key[1]), reason)
            self._arrived.notify_all()

    def events_since(self, start: float) -> list[tuple[str, float, float]]:
        """(instance key, start, end) of the collectives that began after ``start`` (time.time())."""
        with self._runs_lock:
            return [event for event in self.events if event[1] >= start]

    def cancel(self, reason: str) -> None:
        """End every collective in flight here with ``CancelledError`` (``reason`` says why);
        those started later run as usual."""
        with self._arrived:
            self._cancelled = (time.monotonic(), reason)
            self._arrived.notify_all()

    def close(self) -> None:
        self.cancel("the task's collectives started over (tf.Session.reset)")
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ---- plumbing for _Collective ----------------------------------------------------------
    def _post(self, peer: str, **message) -> Future:
        return asyncio.run_coroutine_threadsafe(self._send(self.addresses[peer], **message), self._loop)

    def runs_started(self, instance: str) -> int:
        """How many runs of collective ``instance`` this task has started (what peers ask)."""
        with self._runs_lock:
            return self._runs.get(instance, 0)

    def peer_alive(self, peer: str) -> bool:
        """Whether the task ``peer`` (``/job:worker/task:1``) answers a ping at its known address."""
        return self._peer_runs_started(peer, "") is not None

    def _peer_runs_started(self, peer: str, instance: str) -> int | None:
        """How many runs of ``instance`` ``peer`` has started; None when it does not answer."""
        try:
            return asyncio.run_coroutine_threadsafe(self._runs_started(self.addresses[peer], instance),
                                                    self._loop).result(LIVENESS_CHECK_S * 5)
        except Exception:  # noqa: BLE001 (whatever the reason, the peer did not answer)
            return None


class _Collective:
    """One run of one collective on this member: the algorithms, over send and receive."""

    def __init__(self, comm: Communicator, key: tuple, group: tuple[str, ...], signature: tuple):
        self.comm, self.key, self.group, self.signature = comm, key, group, signature
        self.rank, self.size = group.index(comm.task), len(group)
        self.sends: list[Future] = []
        self.began = time.monotonic()

    def guarded(self, method, buffer, **options):
        begin = time.time()
        try:
            result = method(buffer, **options)
            for sent in self.sends:
                sent.result(self.comm.timeout_s)
            return result
        except BaseException as error:
            reason = f"{self.comm.task}: {error}"
            for peer in self.group:  # so that no member waits for this one until its timeout
                if peer != self.comm.task:
                    self.comm._post(peer, kind="fail", key=self.key, reason=reason)
            raise
        finally:
            with self.comm._runs_lock:  # (collectives of several buckets finish concurrently)
                self.comm.events.append((self.key[0], begin, time.time()))

    # ---- the algorithms -----------------------------------------------------------------
    def all_reduce(self, buffer, algorithm: str = "auto", compression: str | None = None):
        buffer = numpy.array(buffer, copy=True)
        if self.size == 1:
            return buffer
        algorithm = choose_algorithm(algorithm, buffer.nbytes)
        return (self._ring if algorithm == "ring" else self._recursive_doubling)(buffer, compression)

    def _ring(self, buffer, compression):
        n, rank = self.size, self.rank
        bounds = numpy.linspace(0, buffer.size, n + 1).astype(int)
        chunks = [buffer[bounds[i]:bounds[i + 1]] for i in range(n)]  # views: updates land in buffer
        after, before = self.group[(rank + 1) % n], self.group[(rank - 1) % n]
        for step in range(n - 1):  # reduce-scatter: chunk (rank + 1) ends summed here
            self._send(after, ("scatter", step), chunks[(rank - step) % n], compression)
            chunks[(rank - step - 1) % n] += self._receive(before, ("scatter", step))
        own = chunks[(rank + 1) % n]
        own[...] = _rounded(own, compression)  # what the others will receive of it
        for step in range(n - 1):  # allgather: pass the summed chunks around
            self._send(after, ("gather", step), chunks[(rank + 1 - step) % n], compression)
            chunks[(rank - step) % n][...] = self._receive(before, ("gather", step))
        return buffer

    def _recursive_doubling(self, buffer, compression):
        rank, power = self.rank, 1 << (self.size.bit_length() - 1)
        if rank >= power:  # fold into a partner below the power of two, get the result back
            self._send(self.group[rank - power], ("fold",), buffer, compression)
            return self._receive(self.group[rank - power], ("unfold",)).astype(buffer.dtype)
        if rank + power < self.size:
            buffer = _rounded(buffer, compression) + self._receive(self.group[rank + power], ("fold",))
        mask = 1
        while mask < power:
            partner = self.group[rank ^ mask]
            buffer = _rounded(buffer, compression)  # both sides add the same rounded operands
            self._send(partner, ("double", mask), buffer, compression)
            buffer = buffer + self._receive(partner, ("double", mask))
            mask <<= 1
        if rank + power < self.size:
            self._send(self.group[rank + power], ("unfold",), buffer, None)
        return buffer

    def broadcast(self, buffer, root: int = 0):
        if self.rank == root:
            for peer in self.group:
                if peer != self.comm.task:
                    self._send(peer, ("broadcast",), buffer, None)
            return numpy.array(buffer, copy=True)
        return self._receive(self.group[root], ("broadcast",))

    # ---- one message ----------------------------------------------------------------------
    def _send(self, peer: str, phase: tuple, values, compression) -> None:
        wire = values.astype(numpy.float16) if compression == "fp16" else numpy.array(values, copy=True)
        self.comm.bytes_sent[peer] += wire.nbytes
        self.sends.append(self.comm._post(peer, kind="deliver", key=self.key, phase=phase,
                                          sender=self.comm.task, value=wire, signature=self.signature))

    def _receive(self, peer: str, phase: tuple):
        comm, slot = self.comm, (*self.key, phase, peer)
        deadline = time.monotonic() + comm.timeout_s
        next_check = time.monotonic() + LIVENESS_CHECK_S
        with comm._arrived:
            while slot not in comm._messages:
                if self.key in comm._failed:
                    raise _failure(comm._failed[self.key])
                if comm._cancelled is not None and comm._cancelled[0] >= self.began:
                    raise CancelledError(f"collective {self.key[0]} on {comm.task} cancelled: "
                                         f"{comm._cancelled[1]}")
                now = time.monotonic()
                if now >= deadline:
                    raise DeadlineExceededError(
                        f"collective {self.key[0]} (run {self.key[1]}): {comm.task} waited "
                        f"{comm.timeout_s:g} s for {peer}; does every replica run the same steps? "
                        "(After a failed step the members may count this collective's runs "
                        "differently: tf.Session.reset(target), then restart every replica.)")
                if now >= next_check:
                    comm._arrived.release()  # ask without holding the mailbox
                    try:
                        peer_runs = comm._peer_runs_started(peer, self.key[0])
                    finally:
                        comm._arrived.acquire()
                    self._check_peer(peer, peer_runs)
                    next_check = time.monotonic() + LIVENESS_CHECK_S
                    continue
                comm._arrived.wait(min(next_check, deadline) - now)
            value, signature = comm._messages.pop(slot)
        if signature != self.signature:
            raise InvalidArgumentError(_mismatch(self.key[0], comm.task, self.signature, peer, signature))
        return value.astype(numpy.float32) if value.dtype == numpy.float16 else value

    def _check_peer(self, peer: str, peer_runs: int | None) -> None:
        """Fail the wait for ``peer``'s run when it can never come: the peer is dead, or it has not
        yet started the run before this one (a peer that restarted, with its worker's state gone,
        counts from 0 again: only a member still at this run or past it will send)."""
        instance, run = self.key
        if peer_runs is None:
            raise UnavailableError(
                f"collective {instance}: {peer} at {self.comm.addresses[peer]} does not answer (its worker "
                f"died or left); the group was {', '.join(self.group)}")
        if peer_runs < run:
            raise UnavailableError(
                f"collective {instance} (run {run}): {peer} at {self.comm.addresses[peer]} has started "
                f"only {peer_runs} runs of it, so it will never send this one: it restarted without its "
                "replica (or a failed step left the members counting runs differently); restart every "
                "replica after tf.Session.reset(target)")


def _rounded(values, compression):
    """``values`` as a peer receives them over the wire."""
    return values.astype(numpy.float16).astype(values.dtype) if compression == "fp16" else values


def _failure(reason: str) -> OpError:
    return UnavailableError(f"a member of the collective failed: {reason}")


def _mismatch(instance: str, task: str, mine: tuple, peer: str, theirs: tuple) -> str:
    only_mine = sorted(set(mine) - set(theirs))
    only_theirs = sorted(set(theirs) - set(mine))
    return (f"collective {instance}: the replicas reduce different variables: {task} has "
            f"{', '.join(only_mine) or 'them in another order'}; {peer} has "
            f"{', '.join(only_theirs) or 'them in another order'}. Every replica must build the "
            "same model with the same variables")
