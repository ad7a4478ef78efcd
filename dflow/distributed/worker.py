"""What every worker of a dflow cluster runs: its variables and a stage runner.

:class:`DflowWorker` is a ``distributed`` WorkerPlugin. It adds RPC handlers to
the worker, so a step's messages go straight from worker to worker (about 1 ms
a call on loopback) and never through the scheduler (about 11 ms; docs/measured.md):

- ``dflow_register(plan_id, stages, addresses)``: keep this task's stages of a plan;
- ``dflow_unregister(plan_ids)``: forget plans (their session closed);
- ``dflow_run(plan_id, run_id, feeds, timeout, shared)``: run them in level order, each
  after what it receives from other tasks has arrived; send what other tasks
  need; reply with the fetched values and the bytes sent per link;
- ``dflow_deliver(run_id, values, shared)``: values another task sends to this one (``shared``:
  where the arrays of a sender on this host are in its shared memory, :mod:`.shared_memory`);
- ``dflow_abort(run_id, reason)``: wake this task's stages of a failed step;
- ``dflow_collective(kind, key, ...)``: a piece of a collective (allreduce, broadcast) that
  a peer sends to this task's :class:`~dflow.distributed.collective.Communicator`;
- ``dflow_ping(instance)``: how many runs of collective ``instance`` this task has started,
  for peers waiting in it (an answer at all says the task is alive);
- ``dflow_reset()`` / ``dflow_variables()``: forget / list the variables held here;
- ``dflow_channel()``: the path of this worker's Unix socket, where peers on its host send
  ``run`` and ``deliver`` instead (:mod:`.local_channel`: from the thread that has the message
  to one that waits for it, without the event loops).

Every message is plain data: names, numbers, dicts and lists, arrays as Dask's array frames,
and a plan's stages as JSON text (:func:`~dflow.distributed.partition.stages_to_json`);
a failed step's error comes back as its type, message and op. Nothing dflow sends is a
pickle. (Dask itself runs the code its clients send a worker: who may connect is decided by
where the cluster listens and by TLS, see :mod:`dflow.cluster`.)

The variables live in one :class:`~dflow.runtime.state.SessionState` per worker
process, keyed by shared name, for as long as the worker lives: every client
and every between-graph replica that places ``weights`` on this task shares
it, as variables on a TF server do. Stages run on a thread pool of their own,
so a stage waiting for a value never holds the worker's event loop or its
Dask task threads.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections import OrderedDict, defaultdict, deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import distributed
from distributed import WorkerPlugin
from distributed.comm import get_address_host
from distributed.core import send_recv
from distributed.protocol.serialize import to_serialize

from .. import errors
from ..errors import AbortedError, DeadlineExceededError, FailedPreconditionError, OpError, UnavailableError
from ..ops.parallel import set_blas_threads
from ..runtime.devices import gpu_namespace, numpy_namespace, to_namespace
from ..runtime.executor import LATE, RunStats, execute
from ..runtime.memory import keep_freed_memory_for_reuse
from ..runtime.state import SessionState
from . import local_channel
from .collective import Communicator
from .partition import stages_from_json
from .shared_memory import Inbox, Outbox, SharedMemoryError, lent_in_place

__all__ = ["DflowWorker", "PLUGIN_NAME", "STAGE_STATS", "PlanNotFoundError", "serialized", "deserialized",
           "nbytes", "error_to_plain", "error_from_plain", "run_stage",
           "select"]

log = logging.getLogger("dflow")
PLUGIN_NAME = "dflow"
STAGE_THREADS = 32  # stages of concurrent steps (between-graph replicas) waiting at once
CONNECT_TIMEOUT_S = 5.0  # a live peer on any network answers a connect well within this
KEPT_STEPS = 1000  # steps whose kept values a worker holds at most (only failed steps leave any)
SEND_FROM_BYTES = 1 << 20  # a destination's pending values go out from this size, before the stage ends
# the key of a Dask-run stage's result that holds its stats and those of the stages before it,
# {(task, index): {"start", "end", "sent", "staleness"}} (no tensor is named so: names have a ":")
STAGE_STATS = "stage stats"


class PlanNotFoundError(FailedPreconditionError):
    """This worker does not hold the plan a step names (it restarted, or the plan was unregistered):
    the session registers it again and reruns the step."""


class Mailbox:
    """Values sent to this task, per step, until the stage that needs them takes them."""

    def __init__(self):
        self._changed = threading.Condition()
        self._values: dict[str, dict] = defaultdict(dict)
        self._aborted: dict[str, str] = {}
        self._finished: deque[str] = deque(maxlen=10_000)  # late arrivals for these are dropped

    def put(self, run_id: str, values: dict) -> None:
        with self._changed:
            if run_id in self._finished:
                return
            self._values[run_id].update(values)
            self._changed.notify_all()

    def abort(self, run_id: str, reason: str) -> None:
        with self._changed:
            self._aborted[run_id] = reason
            self._changed.notify_all()

    def take(self, run_id: str, names, timeout: float, task: str, senders: dict) -> dict:
        """Wait for ``names`` of step ``run_id``; ``senders`` names who owes each, for errors."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                if run_id in self._aborted:
                    raise AbortedError(f"{task}: step aborted: {self._aborted[run_id]}")
                box = self._values.get(run_id, {})
                missing = [n for n in names if n not in box]
                if not missing:
                    return {n: box.pop(n) for n in names}
                left = deadline - time.monotonic()
                if left <= 0:
                    owed = sorted({senders.get(n, "?") for n in missing})
                    raise DeadlineExceededError(
                        f"{task} waited {timeout:g} s for {', '.join(missing[:5])} from "
                        f"{', '.join(owed)}: is that task alive? (ConfigProto.operation_timeout_in_ms "
                        "sets this limit)")
                self._changed.wait(left)

    def finish(self, run_id: str) -> None:
        with self._changed:
            self._values.pop(run_id, None)
            self._aborted.pop(run_id, None)
            self._finished.append(run_id)


class DflowWorker(WorkerPlugin):
    """The dflow runtime inside one Dask worker (installed by :func:`dflow.distributed.install`)."""

    name = PLUGIN_NAME
    idempotent = True  # a second client installing it must not wipe the variables held here

    def setup(self, worker) -> None:
        self.worker = worker
        self.addresses: dict[str, str] = {}  # task -> worker address, from the plans registered here
        self._remote: dict[str, bool] = {}  # address -> on another host (_on_another_host)
        self.state = self._fresh_state()
        self.plans: dict[str, tuple[list, dict]] = {}
        self.mailbox = Mailbox()
        # values a Dask-run stage keeps for a later stage of this task in the same step (by run
        # id): they stay here instead of travelling in the stage's result (DaskRunner)
        self.kept: OrderedDict[str, dict] = OrderedDict()
        self.clock_at_start: OrderedDict[str, int] = OrderedDict()  # run id -> updates_applied at stage 0
        self.updates_applied = 0  # steps whose updates ran here: the clock staleness is read on
        self._updates_lock = threading.Lock()
        self.pool = ThreadPoolExecutor(STAGE_THREADS, thread_name_prefix="dflow-stage")
        self.outbox, self.inbox = Outbox(), Inbox()  # arrays to and from tasks on this host
        self.listener = self._listen()  # a step's messages from processes on this host
        self.connections = local_channel.Connections(CONNECT_TIMEOUT_S)
        _apply_thread_env()
        keep_freed_memory_for_reuse()
        self.namespaces = {"CPU": numpy_namespace}
        if gpu_namespace() is not None:
            self.namespaces["GPU"] = gpu_namespace()
        logging.getLogger("distributed.worker").addFilter(_quiet_replica_failures)
        worker.handlers.update({
            "dflow_register": self.register, "dflow_unregister": self.unregister, "dflow_run": self.run,
            "dflow_deliver": self.deliver, "dflow_abort": self.abort, "dflow_reset": self.reset,
            "dflow_variables": self.variables, "dflow_collective": self.collective,
            "dflow_ping": self.ping, "dflow_channel": self.channel,
        })

    def _listen(self) -> local_channel.Listener | None:
        if not local_channel.enabled():
            return None
        try:
            return local_channel.Listener({"run": self.run_here, "deliver": self.deliver_here})
        except OSError as error:  # (a socket's path is at most 107 bytes: a long TMPDIR)
            log.info("no Unix socket for this worker (%s): its peers on this host send by Dask", error)
            return None

    def teardown(self, worker) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.state.communicator.close()
        self.outbox.close()
        self.connections.close()
        if self.listener is not None:
            self.listener.close()

    def _fresh_state(self) -> SessionState:
        """Variables and collectives start over (a new worker, or ``tf.Session.reset``)."""
        from ..cluster.spec import role_of

        state = SessionState()
        state.lent_elsewhere = lent_in_place  # its variables, lent to this host's workers
        state.communicator = Communicator(role_of(self.worker.name) or str(self.worker.name),
                                          self.addresses, self.worker.loop.asyncio_loop,
                                          send=self._send_collective, runs_started=self._runs_started)
        return state

    async def _call(self, address: str, op: str, **message):
        """Dask's RPC ``op`` to the worker at ``address``, connecting with a deadline of our own
        (distributed retries a refused connection for 30 s)."""
        comm = await self.worker.rpc.connect(address, timeout=CONNECT_TIMEOUT_S)
        try:
            return await send_recv(comm=comm, op=op, **message)
        finally:
            self.worker.rpc.reuse(address, comm)

    async def _send_collective(self, address: str, **message) -> str:
        if "value" in message:
            message["value"] = to_serialize(message["value"])
        return await self._call(address, "dflow_collective", **message)

    def _deliver(self, address: str, run_id: str, values: dict, loop,
                 variables: dict | None = None) -> Future:
        """Send ``values`` of step ``run_id`` to the task at ``address``: the future of its answer.
        To a task on this host, the arrays go through shared memory (copied into it here, on the
        stage's thread, but for ``variables``: see ``Outbox.pack``) and the message on its Unix
        socket, from this thread; else as a Dask message, from the event loop ``loop``."""
        path = self._channel(address, loop)
        if path is not None:
            done = Future()
            try:
                done.set_result(self._deliver_by_channel(address, path, run_id, values, variables))
            except OSError as error:  # it died, or restarted with another socket: ask again next time
                self.connections.forget(address)
                done.set_exception(error)
            return done
        inline, shared, segment = (self.outbox.pack(address, values, variables)
                                   if not self._on_another_host(address) else (values, None, None))

        async def send() -> str:
            try:
                reply = await self._send_deliver(address, run_id, inline, shared)
            finally:
                self.outbox.release(address, segment)
            if reply != "OK" and shared is not None:  # it cannot read this host's segments
                log.info("%s cannot read shared memory (%s): values go to it by TCP", address, reply)
                self.outbox.refuse(address, segment)
                reply = await self._send_deliver(address, run_id, values, None)
            return reply

        return asyncio.run_coroutine_threadsafe(send(), loop)

    def _deliver_by_channel(self, address: str, path: str, run_id: str, values: dict,
                            variables: dict | None = None) -> str:
        plain, shared, segment = local_channel.encode(values, self.outbox, address, variables)
        try:
            reply = self.connections.call(path, {"op": "deliver", "run_id": run_id, "values": plain,
                                                 "shared": shared})
        finally:
            self.outbox.release(address, segment)
        if reply != "OK" and shared is not None:  # it cannot read this host's segments
            log.info("%s cannot read shared memory (%s): values go to it in the message", address, reply)
            self.outbox.refuse(address, segment)
            plain, _, _ = local_channel.encode(values, None, address)
            reply = self.connections.call(path, {"op": "deliver", "run_id": run_id, "values": plain,
                                                 "shared": None})
        return reply

    def _channel(self, address: str, loop) -> str | None:
        """The Unix socket of the task at ``address`` where it is on this host (asked once, on
        the event loop ``loop``, from a stage's thread); None: send by Dask."""
        if not local_channel.enabled() or self._on_another_host(address):
            return None
        return self.connections.path_of(address, lambda: asyncio.run_coroutine_threadsafe(
            self._call(address, "dflow_channel"), loop).result(2 * CONNECT_TIMEOUT_S))

    async def _send_deliver(self, address: str, run_id: str, values: dict, shared: dict | None) -> str:
        return await self._call(address, "dflow_deliver", run_id=run_id, values=serialized(values),
                                shared=shared)

    async def _runs_started(self, address: str, instance: str) -> int:
        return await self._call(address, "dflow_ping", instance=instance)

    # ---- handlers (on the worker's event loop) ---------------------------------------
    def register(self, plan_id: str, stages: str, addresses: dict) -> str:
        _require_plain("dflow_register", plan_id=(plan_id, str), addresses=(addresses, dict))
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in addresses.items()):
            raise TypeError("dflow_register: addresses maps task names to worker addresses (text)")
        stages = stages_from_json(stages)
        self.plans[plan_id] = (stages, addresses)
        self.addresses.update(addresses)  # the communicator's view of the cluster (shared dict)
        return "OK"

    def cancel_waits(self, reason: str = "a role of the run was lost") -> None:
        """End every wait of this task's steps (barriers, accumulators, queues, collectives in
        flight): they raise CancelledError. The replicas of a run that lost a role stop at once
        instead of waiting for the dead one (the chief then saves a checkpoint as it stops)."""
        self.state.cancel_waits()
        self.state.communicator.cancel(reason)

    def unregister(self, plan_ids: list) -> int:
        """Forget ``plan_ids``; how many this worker held."""
        return sum(self.plans.pop(plan_id, None) is not None for plan_id in plan_ids)

    async def run(self, plan_id: str, run_id: str, feeds: dict, timeout: float, shared=None,
                  traced: bool = False) -> dict:
        _check_run(plan_id, run_id, feeds, timeout, traced)
        try:
            feeds = {**deserialized(feeds), **(self.inbox.unpack(shared) if shared is not None else {})}
        except SharedMemoryError as error:  # the client sends them again, by TCP
            return {"refused": str(error)}
        loop = asyncio.get_running_loop()
        step = loop.run_in_executor(self.pool, self.run_stages, plan_id, run_id, feeds, timeout, loop, traced)
        # a client that gave the step up (it is recovering from a lost task) leaves no one to await
        # it: its error, which the client has already had from the liveness check, is not logged
        # again as "Future exception was never retrieved" with a traceback
        step.add_done_callback(lambda done: done.cancelled() or done.exception())
        try:
            reply = await step
        except OpError as error:
            # the step's own failure (a value that never came, a cancelled barrier): the client
            # raises it; raised here, distributed would also log it as a crashed handler
            return {"error": error_to_plain(error)}
        return {**reply, "fetches": serialized(reply["fetches"])}

    def channel(self) -> str | None:
        """The path of this worker's Unix socket (None: it has none)."""
        return None if self.listener is None else self.listener.path

    def run_here(self, plan_id: str, run_id: str, feeds: dict, timeout: float, shared=None,
                 traced: bool = False) -> dict:
        """``run``, asked on this worker's Unix socket (on that connection's thread)."""
        _check_run(plan_id, run_id, feeds, timeout, traced)
        try:
            feeds = local_channel.decode(feeds)
            feeds.update(self.inbox.unpack(shared) if shared is not None else {})
        except SharedMemoryError as error:  # the client sends them again, in the message
            return {"refused": str(error)}
        try:
            reply = self.run_stages(plan_id, run_id, feeds, timeout, self.worker.loop.asyncio_loop, traced)
        except OpError as error:
            return {"error": error_to_plain(error)}
        fetches = {name: None if v is None else on_host(v) for name, v in reply["fetches"].items()}
        return {**reply, "fetches": local_channel.encode(fetches, None, "")[0]}  # (a GPU's: copied back)

    def deliver_here(self, run_id: str, values: dict, shared=None) -> str:
        """``deliver``, asked on this worker's Unix socket."""
        return self.deliver(run_id, local_channel.decode(values), shared)

    def deliver(self, run_id: str, values: dict, shared=None) -> str:
        _require_plain("dflow_deliver", run_id=(run_id, str), values=(values, dict))
        try:
            arrays = self.inbox.unpack(shared) if shared is not None else {}
        except SharedMemoryError as error:  # the sender sends them again, by TCP
            return f"refused: {error}"
        self.mailbox.put(run_id, {**deserialized(values), **arrays})
        return "OK"

    def abort(self, run_id: str, reason: str) -> str:
        _require_plain("dflow_abort", run_id=(run_id, str), reason=(reason, str))
        self.mailbox.abort(run_id, reason)
        return "OK"

    def reset(self) -> str:
        self.state.cancel_waits()  # a step blocked at a barrier of the old state ends (CancelledError)
        self.state.communicator.close()
        self.state = self._fresh_state()  # plans stay: open sessions keep running, on fresh variables
        return "OK"

    def ping(self, instance: str = "") -> int:
        _require_plain("dflow_ping", instance=(instance, str))
        return self.state.communicator.runs_started(instance)

    def collective(self, kind: str, key, reason: str = "", **message) -> str:
        _require_plain("dflow_collective", kind=(kind, str), reason=(reason, str))
        if kind == "fail":
            self.state.communicator.fail(key, reason)
        else:
            self.state.communicator.deliver(key, **message)
        return "OK"

    def variables(self) -> dict:
        return {name: {"shape": list(getattr(v, "shape", ())), "dtype": str(getattr(v, "dtype", "?"))}
                for name, v in self.state.variables.items()}

    def _plan(self, plan_id: str) -> tuple[list, dict]:
        try:
            return self.plans[plan_id]
        except KeyError:
            raise PlanNotFoundError(
                f"worker {self.worker.name} does not know plan {plan_id}: it restarted since the "
                "session planned this step, or the plan's session closed") from None

    # ---- one stage of a step, as a Dask task (DaskRunner) -------------------------------
    def run_stage(self, plan_id: str, indices: tuple, final: bool, run_id: str, feeds: dict,
                  upstream: tuple) -> dict:
        """Run stages ``indices`` of this task's stages of ``plan_id``, one after the other (``final``:
        no later stage of this task runs in this step); return what they send to other tasks and
        what the client fetches (what later stages here use stays here)."""
        stages, _ = self._plan(plan_id)
        if any(stages[i].waits for i in indices):  # for other steps' stages, maybe on this worker:
            distributed.secede()  # give its thread back meanwhile
        inputs = {}
        reports = {}  # the stats of every stage this one follows, carried on to the client
        for values in upstream:
            reports.update(values[STAGE_STATS])
            inputs.update((name, value) for name, value in values.items() if name != STAGE_STATS)
        out = {}
        for index in indices:
            out.update(self._run_one_stage(stages[index], index, final and index == indices[-1], run_id,
                                           feeds, inputs, reports))
        out[STAGE_STATS] = reports
        return out

    def _run_one_stage(self, stage, index: int, last: bool, run_id: str, feeds: dict, received: dict,
                       reports: dict) -> dict:
        started = time.time()
        inputs = {name: feeds[name] for name in stage.from_client}
        inputs.update(received)
        inputs.update(self.kept.pop(run_id, {}) if last else self.kept.get(run_id, {}))
        clock = self.clock_at_start.pop(run_id, None) if last else self.clock_at_start.get(run_id)
        staleness = None
        with self._updates_lock:
            if index == 0 and not last:
                self.clock_at_start[run_id] = self.updates_applied
                while len(self.clock_at_start) > KEPT_STEPS:
                    self.clock_at_start.popitem(last=False)
            if stage.applies_updates:
                staleness = self.updates_applied - (self.updates_applied if clock is None else clock)
                self.updates_applied += 1
        values = execute(stage.schedule, inputs, self.state, self.namespaces)
        if stage.keeps and not last:
            self.kept.setdefault(run_id, {}).update({n: values[n] for n in stage.keeps})
            while len(self.kept) > KEPT_STEPS:  # steps that failed before their last stage here
                self.kept.popitem(last=False)
        out = {n: None if n.startswith("^") else on_host(values[n])
               for names in stage.sends.values() for n in names}
        out.update({n: on_host(values[n]) for n in stage.fetches})
        sent = {dest: sum(nbytes(values[n]) for n in names if not n.startswith("^"))
                for dest, names in stage.sends.items()}
        reports[(stage.task, index)] = {"start": started, "end": time.time(), "sent": sent,
                                        "staleness": staleness}
        return out

    def _on_another_host(self, address: str) -> bool:
        """Whether the task at ``address`` runs on another host. Values for it leave as they are
        made: to another host the NIC moves them while the stage computes (at 1 Gbit/s 1.1-1.3x
        the images/sec), where a task on this host, sharing its cores, would take one from the
        compute (on 2 cores the CIFAR-10 step's 0.89 of local became 0.79)."""
        remote = self._remote.get(address)
        if remote is None:
            here = get_address_host(self.worker.address)
            remote = self._remote[address] = get_address_host(address) != here
        return remote

    # ---- one step of one plan (on a stage thread) -------------------------------------
    def run_stages(self, plan_id: str, run_id: str, feeds: dict, timeout: float, loop,
                   traced: bool = False) -> dict:
        """Run this task's stages of ``plan_id``: the fetched values and the bytes sent per task.
        ``traced`` (a ``RunOptions`` trace): each op's span joins the timeline, as ``name = Type()``."""
        stages, addresses = self._plan(plan_id)
        kept, received, fetched, sent = {}, {}, {}, defaultdict(int)
        deliveries, timeline = [], []
        staleness = None  # updates other steps applied here between this step's reads and its own
        updates_at_start = self.updates_applied
        communicator = self.state.communicator
        communicator.timeout_s = timeout  # ConfigProto.operation_timeout_in_ms bounds collectives too
        collective_bytes = dict(communicator.bytes_sent)
        step_start = time.time()
        compute_s = waited_s = collective_s = 0.0

        def take(stage, names: list) -> dict:  # a value arrives once per task, for all its stages
            start = time.time()
            taken = self.mailbox.take(run_id, names, timeout, stage.task, stage.receives)
            received.update(taken)
            timeline.append(("wait", start, time.time()))
            nonlocal waited_s
            waited_s += timeline[-1][2] - start
            return taken

        def early(dest: str) -> bool:
            return self._on_another_host(addresses[dest])

        def deliver(dest: str, payload: dict) -> None:
            payload = {n: None if v is None else on_host(v) for n, v in payload.items()}
            sent[dest] += sum(nbytes(v) for v in payload.values())
            # variables are lent in place only to a task on this host (the others get copies)
            variables = None if early(dest) else _variables_in(payload, self.state)
            deliveries.append((dest, self._deliver(addresses[dest], run_id, payload, loop, variables)))

        # what each stage still needs of the values received: the rest is let go of as the stage
        # ends, before it sends (a PS's variables lent in place are then free for its update)
        needed_later = [set().union(*(later.receives for later in stages[i + 1:]))
                        for i in range(len(stages))]
        try:
            for index, stage in enumerate(stages):
                inputs = {name: feeds[name] for name in stage.from_client}
                inputs.update(kept)
                ordering = [n for n in stage.receives if n.startswith("^") and n not in received]
                if ordering:  # control edges order the whole stage: they come first
                    take(stage, ordering)
                # values still on their way are taken when the first op that reads them is next
                inputs.update({n: received.get(n, LATE) for n in stage.receives if not n.startswith("^")})
                if stage.applies_updates:
                    with self._updates_lock:
                        staleness = self.updates_applied - updates_at_start
                        self.updates_applied += 1
                outgoing = _Outgoing(stage.sends, deliver, early)
                start, waited_before = time.time(), waited_s
                stage_stats = RunStats(op_spans=[] if traced else None)
                values = execute(stage.schedule, inputs, self.state, self.namespaces, stats=stage_stats,
                                 arriving=lambda name, stage=stage: take(stage, [name])[name],
                                 produced=outgoing.add)
                timeline.append(("compute", start, time.time()))
                compute_s += timeline[-1][2] - start - (waited_s - waited_before)  # less its waits
                timeline += [(f"{name} = {op_type}()", began, ended)
                             for name, op_type, began, ended in stage_stats.op_spans or ()]
                collective_s += stage_stats.async_wait_s
                inputs = None
                for name in [name for name in received if name not in needed_later[index]]:
                    del received[name]
                outgoing.flush(values)
                kept.update({n: values[n] for n in stage.keeps})
                fetched.update({n: values[n] for n in stage.fetches})
                # the next stage's updates may write in place the variables this one read and sent
                values = outgoing = None
            for dest, delivery in deliveries:
                try:
                    delivery.result(timeout)
                except OSError as error:  # (CommClosedError too) the receiving task died
                    raise UnavailableError(f"{stages[0].task} could not send a step's values to {dest} "
                                           f"at {addresses[dest]}: it left or died ({error})") from None
        finally:
            self.mailbox.finish(run_id)
            # the fed arrays may lie in the client's shared memory, lent to this step: let go of
            # them before the reply, so its next feed finds the segment free (the thread pool's
            # work item holds this dict until after the reply is sent)
            feeds.clear()
        for peer, count in communicator.bytes_sent.items():  # this step's collectives' messages
            if count > collective_bytes.get(peer, 0):
                sent[peer] += count - collective_bytes.get(peer, 0)
        timeline += [(f"collective {name}", start, end)
                     for name, start, end in communicator.events_since(step_start)]
        return {"fetches": fetched, "sent": dict(sent), "staleness": staleness, "compute_s": compute_s,
                "waited_s": waited_s, "collective_s": collective_s,
                "timeline": timeline}


def _variables_in(payload: dict, state: SessionState) -> dict:
    """For each value of ``payload`` that is a variable's array itself (a PS's read of it), a
    function that makes a given array of the same values the variable's, unless it changed since
    (``Outbox.pack`` moves the variables into shared memory this way, to lend them from there)."""
    by_id = {id(value): name for name, value in state.variables.items()}
    adopters = {}
    for value_name, value in payload.items():
        variable = None if value is None else by_id.get(id(value))
        if variable is None:
            continue

        def adopt(view, variable=variable, value=value) -> None:
            with state.updating(variable):
                if state.variables.get(variable) is value:
                    state.write_variable(variable, view)

        adopters[value_name] = adopt
    return adopters


class _Outgoing:
    """A stage's values for other tasks, sent as they are made to the tasks that ``early`` picks
    (those on other hosts): whenever a destination's pending values reach
    :data:`SEND_FROM_BYTES` (the big gradients leave while the backward pass goes on); the
    rest, and all of them to the others, when the stage ends."""

    def __init__(self, sends: dict, deliver: Callable[[str, dict], None], early: Callable[[str], bool]):
        self.deliver = deliver
        self.destinations = defaultdict(list)  # value -> the tasks it goes to early
        for dest, names in sends.items():
            for name in names if early(dest) else ():
                self.destinations[name].append(dest)
        self.pending = {dest: {} for dest in sends}
        self.pending_bytes = dict.fromkeys(sends, 0)
        self.unsent = {dest: set(names) for dest, names in sends.items()}

    def add(self, name: str, value) -> None:
        for dest in self.destinations.get(name, ()):
            self.pending[dest][name] = value
            self.pending_bytes[dest] += nbytes(value)
            if self.pending_bytes[dest] >= SEND_FROM_BYTES:
                self._send(dest)

    def flush(self, values: dict) -> None:
        """Send what is left (all of it where the stage ran uncompiled: nothing was heard)."""
        for dest, names in self.unsent.items():
            self.pending[dest].update({n: None if n.startswith("^") else values[n] for n in names})
            if self.pending[dest]:
                self._send(dest)

    def _send(self, dest: str) -> None:
        payload, self.pending[dest], self.pending_bytes[dest] = self.pending[dest], {}, 0
        self.unsent[dest] -= payload.keys()
        self.deliver(dest, payload)


def run_stage(plan_id: str, indices: tuple, final: bool, run_id: str, feeds: dict, after: list,
              *upstream: dict) -> dict:
    """A Dask task: stages ``indices`` of this worker's stages of ``plan_id`` (registered before),
    given the results of the stages they receive from (:mod:`~dflow.distributed.dask_runner`);
    ``after`` holds the results of an earlier step's stages that this one only follows."""
    from distributed import get_worker

    return get_worker().plugins[PLUGIN_NAME].run_stage(plan_id, indices, final, run_id, feeds, upstream)


def select(values: dict, names: list) -> dict:
    """A Dask task: the fetched values out of a stage's result (and its stats), so that only they
    reach the client."""
    return {STAGE_STATS: values[STAGE_STATS], **{name: values[name] for name in names}}


def _check_run(plan_id, run_id, feeds, timeout, traced) -> None:
    _require_plain("dflow_run", plan_id=(plan_id, str), run_id=(run_id, str), feeds=(feeds, dict),
                   timeout=(timeout, (int, float)))
    if not isinstance(traced, bool):
        raise TypeError(f"dflow_run: traced must be bool, got {type(traced).__name__}")


def _require_plain(handler: str, **arguments) -> None:
    """Refuse a message whose arguments are not of the plain types the handler takes."""
    for name, (value, types) in arguments.items():
        if not isinstance(value, types) or isinstance(value, bool):
            raise TypeError(f"{handler}: {name} must be {getattr(types, '__name__', types)}, "
                            f"got {type(value).__name__}")


def error_to_plain(error: OpError) -> dict:
    """A step's error as plain data (its TF error class by name, message and op)."""
    op = error.op
    if op is not None and not isinstance(op, str):
        op = getattr(op, "name", str(op))
    return {"type": type(error).__name__, "message": str(error.message), "op": op}


def error_from_plain(plain: dict) -> OpError:
    """The error :func:`error_to_plain` describes, as its ``tf.errors`` class (else OpError)."""
    name = str(plain.get("type"))
    cls = PlanNotFoundError if name == "PlanNotFoundError" else getattr(errors, name, None)
    if not (isinstance(cls, type) and issubclass(cls, OpError)) or cls.__init__ is not OpError.__init__:
        cls = OpError
    return cls(str(plain.get("message")), op=plain.get("op"))


def _quiet_replica_failures(record: logging.LogRecord) -> bool:
    """A replica's error goes to the client, which says it in one line: Dask's 'Compute Failed'
    record of it, a traceback on the worker's terminal, would only repeat it."""
    return not (record.getMessage().startswith("Compute Failed") and "dflow-replica-" in record.getMessage())


def _apply_thread_env() -> None:
    """Make BLAS use ``OMP_NUM_THREADS`` threads, as the worker's environment asks.

    A nanny sets its ``env`` after the worker process has imported NumPy, whose BLAS then
    kept the one thread of Dask's default environment: measured, a 2000x2000 matmul took
    0.16 s instead of 0.085 s on 2 cores.
    """
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit():
        set_blas_threads(int(threads))


def serialized(values: dict) -> dict:
    """``values`` ready for a ``distributed`` message: arrays travel as frames, not msgpack;
    arrays of Python objects (``tf.string`` values: bytes) as a list, which Dask would pickle."""
    return {k: None if v is None else _as_strings(v) if _is_object_array(v) else to_serialize(on_host(v))
            for k, v in values.items()}


def on_host(value):
    """A value leaving this task, in host memory (a GPU's arrays are copied back, as TF's
    sends do): the task that takes it may have no GPU, and moves it to its own device."""
    return to_namespace(value, numpy_namespace)


def deserialized(values: dict) -> dict:
    """The values :func:`serialized` sent, as arrays again (arrays pass through unchanged)."""
    return {k: _from_strings(v) if isinstance(v, dict) else v for k, v in values.items()}


def _is_object_array(value) -> bool:
    return getattr(getattr(value, "dtype", None), "kind", None) == "O"


def _as_strings(array) -> dict:
    return {"objects": array.ravel().tolist(), "shape": list(array.shape)}


def _from_strings(plain: dict):
    import numpy

    items = plain["objects"]
    array = numpy.empty(len(items), dtype=object)
    array[:] = items
    return array.reshape(plain["shape"])


def nbytes(value) -> int:
    return int(getattr(value, "nbytes", 0))
