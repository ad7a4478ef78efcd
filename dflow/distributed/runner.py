"""The direct path of a distributed step: plan on the cluster's tasks, then run.

``tf.Session(target)`` with a Dask scheduler address runs its steps with a
:class:`DirectRunner` (the default; ``ConfigProto(runner="dask")`` picks
:class:`~dflow.distributed.dask_runner.DaskRunner`, which shares its planning).
Planning runs the passes of :mod:`~dflow.runtime.passes` over the cluster's tasks
and registers each task's stages on its worker, once per (fetches, feeds)
signature. A step is then one ``dflow_run`` call per task, all sent at once,
straight to the workers: the tasks pass values to each other directly, and only
the fed values go out and the fetched ones come back. The scheduler is not on
this path; where every task is on this host, the event loop is not either: the
calls go on the tasks' Unix sockets (:mod:`.local_channel`).

The same runner drives between-graph replicas: inside a Dask worker (a
program started by :func:`dflow.replicate`), its own task's stages run in
its process without a round trip.
"""

from __future__ import annotations

import asyncio
import logging
import selectors
import socket
import time
import uuid
from collections.abc import Collection

import distributed
from distributed.comm import get_address_host
from distributed.comm.core import CommClosedError
from distributed.core import send_recv
from distributed.utils import get_ip, sync

from ..cluster.spec import ClusterSpec, role_of
from ..errors import UnavailableError
from ..runtime.executor import RunStats
from ..runtime.passes import Devices, MissingTaskError, Plan, PlanCache, make_plan
from . import local_channel
from .partition import stages_to_json
from .shared_memory import Outbox
from .worker import (
    CONNECT_TIMEOUT_S,
    PLUGIN_NAME,
    DflowWorker,
    PlanNotFoundError,
    deserialized,
    error_from_plain,
    nbytes,
    serialized,
)

__all__ = ["DirectRunner", "install", "cluster_tasks", "count_sent"]

log = logging.getLogger("dflow")
DEFAULT_TIMEOUT_S = 600.0  # a step waiting longer than this for another task's value fails
UNREGISTER_TIMEOUT_S = 5.0  # a closing session tells the tasks to forget its plans, or gives up
TASK_WAIT_S = 120.0  # as TF's session waits for the cluster's tasks: how long for one not started yet


def cluster_tasks(client: distributed.Client) -> dict[str, dict]:
    """Each task of the cluster as a device: its worker's address and GPU count."""
    return ClusterSpec.from_client(client).devices()


def install(client: distributed.Client) -> None:
    """Give every worker (present and future) the dflow runtime, once."""
    client.register_plugin(DflowWorker(), name=PLUGIN_NAME)


class DirectRunner:
    """Plans and runs steps of ``graph`` on the Dask cluster at ``target`` for one Session."""

    def __init__(self, target: str, graph, config, timeout_s: float | None = None):
        from ..cluster.server import resolve_target

        self.graph, self.config = graph, config
        self.plans = PlanCache(self._make_plan)
        self.timeout = timeout_s or DEFAULT_TIMEOUT_S
        target, named_worker = resolve_target(target)  # grpc://host:port: a TF task's address
        self.worker = _current_worker(target)
        self._own_client = None
        if self.worker is not None:  # a between-graph replica, running inside a worker
            client = distributed.get_client()
            self._rpc, self._loop = self.worker.rpc, self.worker.loop
        else:
            client = _client_for(target)
            if client is None:
                client = self._own_client = distributed.Client(target, set_as_default=False)
            self._rpc, self._loop = client.rpc, client.loop
        self.client = client
        self._plans: dict[str, Plan] = {}  # registered by this runner, unregistered at close
        self._outbox = Outbox()  # fed arrays to tasks on this host
        self._on_this_host: dict[str, bool] = {}  # address -> whether its task runs on this host
        self._connections = local_channel.Connections(CONNECT_TIMEOUT_S)  # to tasks on this host
        install(client)
        self.tasks = cluster_tasks(client)
        # the task whose stages run in this process (a between-graph replica's), else None
        self.here = role_of(self.worker.name) if self.worker is not None else None
        own = self.here or _server_role(target) or _role_with_id(client, named_worker)
        self.default_task = own or ("/job:worker/task:0" if "/job:worker/task:0" in self.tasks
                                    else sorted(self.tasks)[0])
        # every fed array is copied on its way (into shared memory, a message, a Dask frame) to a
        # task of another process, so the session need not copy it first (a 1.2 MB batch of
        # CIFAR-10 images: 0.2-0.45 ms of a 45 ms step); a replica's own task reads them here
        self.copies_feeds = self.here is None

    def close(self) -> None:
        """Forget this session's plans on every task (best effort: a dead task forgot them already)."""
        try:
            if self._plans:
                sync(self._loop, self._unregister, list(self._plans.values()))
        finally:
            self._plans.clear()
            self.plans.clear()
            self._outbox.close()
            self._connections.close()
            if self._own_client is not None:
                self._own_client.close()

    async def _unregister(self, plans: list[Plan]) -> None:
        by_task: dict[str, list[str]] = {}
        for plan in plans:
            for task in plan.stages:
                by_task.setdefault(task, []).append(plan.plan_id)
        calls = [self._call(task, "dflow_unregister", plan_ids=ids) for task, ids in by_task.items()]
        try:
            await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), UNREGISTER_TIMEOUT_S)
        except asyncio.TimeoutError:  # a dead task's connect outlasted the deadline: it forgot them anyway
            log.info("closing: a task did not answer within %.0f s; its plans die with it",
                     UNREGISTER_TIMEOUT_S)

    # ---- planning ----------------------------------------------------------------
    def plan(self, fetches: list, fed: Collection[str]) -> Plan:
        """The plan of the step fetching ``fetches``, registered on its tasks (once per signature)."""
        return self.plans.get(fetches, fed)

    def _make_plan(self, fetches: list, fed: Collection[str]) -> Plan:
        plan = self._plan_when_tasks_joined(fetches, fed)
        if self.config.log_device_placement:
            log.info("placement:\n%s", plan.describe())
        addresses = {task: info["address"] for task, info in self.tasks.items()}
        sync(self._loop, self._register, plan, addresses)
        self._plans[plan.plan_id] = plan
        return plan

    def _register_again(self, plan: Plan, error: BaseException) -> list[str] | None:
        """After a step failed because a task lost ``plan`` (it restarted, at the same address or at a
        new one under the same role): register the plan again with the tasks' current addresses.
        The tasks that came back at a new address (with none of their state), or None when
        registering again cannot help (a task is not back)."""
        # (a task may be missing from the last view already: an earlier failed step refreshed it)
        before = {task: self.tasks.get(task, {}).get("address") for task in plan.tasks}
        self.tasks = cluster_tasks(self.client)
        self._connections.forget()  # (a task back at its address listens on another socket)
        if any(task not in self.tasks for task in plan.tasks):
            return None
        moved = [task for task, address in before.items() if self.tasks[task]["address"] != address]
        if not (isinstance(error, PlanNotFoundError) or moved):
            return None
        log.info("re-registering plan %s: a task lost it (%s)", plan.plan_id, error)
        addresses = {task: info["address"] for task, info in self.tasks.items()}
        sync(self._loop, self._register, plan, addresses)
        return moved

    def _plan_when_tasks_joined(self, fetches: list, fed: Collection[str]) -> Plan:
        """Plan the step; a task it needs that has not joined yet (its process starting in any
        order, as TF scripts are) is waited for, up to TASK_WAIT_S."""
        deadline, said = time.monotonic() + TASK_WAIT_S, None
        while True:
            try:
                devices = Devices(self.default_task, self.tasks)
                return make_plan(self.graph, fetches, fed, devices, self.config.allow_soft_placement)
            except MissingTaskError as error:
                if time.monotonic() > deadline:
                    raise MissingTaskError(f"{error.message} (waited {TASK_WAIT_S:.0f} s for it to join: "
                                           "is its process running?)", error.op, error.task) from None
                if said != error.task:
                    log.info("waiting for task %s to join the cluster", error.task)
                    said = error.task
                time.sleep(0.2)
                self.tasks = cluster_tasks(self.client)

    async def _register(self, plan: Plan, addresses: dict) -> None:
        async def register_on(task: str, stages) -> None:
            try:
                await self._call(task, "dflow_register", plan_id=plan.plan_id, stages=stages_to_json(stages),
                                 addresses=addresses)
            except (OSError, CommClosedError) as error:
                raise self._explain(task, error) from None

        await asyncio.gather(*(register_on(task, stages) for task, stages in plan.stages.items()))

    # ---- running -------------------------------------------------------------------
    def run(self, plan: Plan, feeds: dict, stats: RunStats | None = None) -> dict:
        """One step: the fetched values by tensor name; ``stats`` gets the bytes sent per
        (from, to) link and the staleness of the step's updates."""
        stats = stats if stats is not None else RunStats()
        try:
            return self._run_once(plan, feeds, stats)
        except (PlanNotFoundError, UnavailableError) as error:
            moved = self._register_again(plan, error)
            if moved is None:
                raise
            if moved:
                # a task that died and came back elsewhere lost its variables, if it held any: say so
                # (as TF's UnavailableError) but have the plan ready there for the next step
                raise UnavailableError(f"{error}. Task {', '.join(moved)} has come back at a new address, "
                                       "with none of its state: the next step runs there (initialize "
                                       "or restore the variables it held first)") from None
        # the task is where it was and only forgot the plan (it was unregistered): transparent
        return self._run_once(plan, feeds, stats)

    def _run_once(self, plan: Plan, feeds: dict, stats: RunStats) -> dict:
        paths = self._channels_of(plan.tasks)
        if paths is not None:
            return self._step_by_channel(plan, uuid.uuid4().hex, feeds, stats, paths)
        return sync(self._loop, self._step, plan, uuid.uuid4().hex, feeds, stats)

    def _channels_of(self, tasks: list[str]) -> dict[str, str] | None:
        """Each other task's Unix socket, where all of them are on this host and have one (the
        step then runs without the event loop: :meth:`_step_by_channel`); else None."""
        if not local_channel.enabled():
            return None
        paths = {}
        for task in tasks:
            if task == self.here:  # (a between-graph replica runs its own task's stages here)
                continue
            address = self.tasks[task]["address"]
            path = self._is_on_this_host(address) and self._connections.path_of(
                address, lambda task=task: sync(self._loop, self._call, task, "dflow_channel"))
            if not path:
                return None
            paths[task] = path
        return paths

    def _step_by_channel(self, plan: Plan, run_id: str, feeds: dict, stats: RunStats, paths: dict) -> dict:
        """:meth:`_step` with every task on this host: the messages go on the tasks' Unix
        sockets, all sent before any answer is read, and the answers are read as they come
        (this process's own task's, in a between-graph replica, when its stages end)."""
        message = {"op": "run", "plan_id": plan.plan_id, "run_id": run_id, "timeout": self.timeout,
                   "traced": stats.op_spans is not None}
        asked: dict = {}  # socket -> (task, the segment its feeds are in)
        values: dict = {}
        task = "the client"  # the task whose message or answer is in hand (the client's: interrupted)
        here = self.here

        def ask(task: str, sock, outbox: Outbox | None) -> None:
            task_feeds = {name: feeds[name] for name in plan.feeds[task]}
            plain, shared, segment = local_channel.encode(task_feeds, outbox, self.tasks[task]["address"])
            asked[sock] = (task, segment)
            local_channel.send(sock, {**message, "feeds": plain, "shared": shared})

        try:
            with selectors.DefaultSelector() as waiting:
                for task in paths:
                    sock = self._connections.open(paths[task])
                    waiting.register(sock, selectors.EVENT_READ)
                    ask(task, sock, self._outbox)
                    if plan.feeds[task]:
                        fed_bytes = sum(nbytes(feeds[name]) for name in plan.feeds[task])
                        count_sent(stats.bytes_sent, here or "client", task, fed_bytes)
                if here in plan.tasks:
                    task = here
                    own, done = self._run_here(plan, run_id, {name: feeds[name] for name in plan.feeds[here]},
                                               message["traced"])
                    waiting.register(done, selectors.EVENT_READ)
                    asked[done] = (here, None)
                while asked:
                    for key, _ in waiting.select():
                        sock = key.fileobj
                        task, segment = asked.pop(sock)
                        waiting.unregister(sock)
                        if task == here:
                            sock.close()
                            self._take_reply(task, own.result(), here, values, stats)
                            continue
                        address = self.tasks[task]["address"]
                        self._outbox.release(address, segment)
                        reply = local_channel.receive(sock)
                        if "refused" in reply:  # it cannot read this host's shared memory: in the message
                            log.info("%s cannot read shared memory (%s): feeds go in the message", task,
                                     reply["refused"])
                            self._outbox.refuse(address, segment)
                            waiting.register(sock, selectors.EVENT_READ)
                            ask(task, sock, None)
                            continue
                        self._connections.give_back(paths[task], sock)
                        if "error" in reply:
                            raise error_from_plain(reply["error"])
                        reply["fetches"] = local_channel.decode(reply["fetches"])
                        self._take_reply(task, reply, here, values, stats)
        except BaseException as error:
            for sock, (other, segment) in asked.items():  # their answers are not read
                sock.close()
                if segment is not None:
                    self._outbox.release(self.tasks[other]["address"], segment)
            if asked:  # wake the other tasks' stages
                sync(self._loop, self._abort_tasks, run_id, [other for other, _ in asked.values()], task)
            if isinstance(error, OSError) and task in self.tasks:
                self._connections.forget(self.tasks[task]["address"])  # (it may come back elsewhere)
                raise self._explain(task, error) from None
            raise
        return values

    def _run_here(self, plan: Plan, run_id: str, feeds: dict, traced: bool):
        """Start this process's own task's stages of a step (a between-graph replica's) on its
        worker's stage threads: their future, and a socket that turns readable when it is done."""
        plugin = self.worker.plugins[PLUGIN_NAME]
        done, signal = socket.socketpair()
        own = plugin.pool.submit(plugin.run_stages, plan.plan_id, run_id, feeds, self.timeout,
                                 self._loop.asyncio_loop, traced)
        own.add_done_callback(lambda _: _wake(signal))
        return own, done

    async def _step(self, plan: Plan, run_id: str, feeds: dict, stats: RunStats) -> dict:
        here = self.here
        calls = {}
        traffic = stats.bytes_sent
        fed_by_task = plan.feeds
        traced = stats.op_spans is not None
        for task in plan.tasks:
            task_feeds = {name: feeds[name] for name in fed_by_task[task]}
            if task == here:
                loop = asyncio.get_running_loop()
                plugin = self.worker.plugins[PLUGIN_NAME]
                call = loop.run_in_executor(plugin.pool, plugin.run_stages, plan.plan_id, run_id,
                                            task_feeds, self.timeout, loop, traced)
            else:
                call = self._run_on(task, plan.plan_id, run_id, task_feeds, traced)
                if task_feeds:
                    count_sent(traffic, here or "client", task, sum(nbytes(v) for v in task_feeds.values()))
            calls[asyncio.ensure_future(call)] = task
        values: dict = {}
        pending = set(calls)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
            for future in done:
                task = calls[future]
                if future.exception() is not None:
                    await self._abort(run_id, pending, calls, task)
                    raise self._explain(task, future.exception())
                reply = future.result()
                reply["fetches"] = deserialized(reply["fetches"])
                self._take_reply(task, reply, here, values, stats)
        return values

    @staticmethod
    def _take_reply(task: str, reply: dict, here: str | None, values: dict, stats: RunStats) -> None:
        """A task's answer to a step: its fetched values into ``values``, its figures into ``stats``."""
        values.update(reply["fetches"])
        stats.compute_s[task] = reply["compute_s"]
        stats.waited_s[task] = reply["waited_s"]
        stats.collective_s[task] = reply["collective_s"]
        stats.timeline.extend((task, *event) for event in reply["timeline"])
        if reply["staleness"] is not None:
            stats.staleness = max(stats.staleness or 0, reply["staleness"])
        for dest, count in reply["sent"].items():
            count_sent(stats.bytes_sent, task, dest, count)
        if task != here and reply["fetches"]:
            # (added up: a client inside a worker's process, as a between-graph replica
            # is, receives its fetches on the link that carried its variable reads)
            fetched_bytes = sum(nbytes(v) for v in reply["fetches"].values())
            count_sent(stats.bytes_sent, task, here or "client", fetched_bytes)

    async def _run_on(self, task: str, plan_id: str, run_id: str, feeds: dict, traced: bool = False) -> dict:
        """Run ``task``'s stages of a step; to a task on this host, the fed arrays go through
        shared memory."""
        address = self.tasks[task]["address"]
        inline, shared, segment = (self._outbox.pack(address, feeds) if self._is_on_this_host(address)
                                   else (feeds, None, None))
        message = {"plan_id": plan_id, "run_id": run_id, "timeout": self.timeout, "traced": traced}
        try:
            reply = await self._call(task, "dflow_run", feeds=serialized(inline), shared=shared, **message)
        finally:
            self._outbox.release(address, segment)
        if "refused" in reply:  # it cannot read this host's shared memory: by TCP, from now on
            log.info("%s cannot read shared memory (%s): feeds go to it by TCP", task, reply["refused"])
            self._outbox.refuse(address, segment)
            reply = await self._call(task, "dflow_run", feeds=serialized(feeds), **message)
        return reply

    def _is_on_this_host(self, address: str) -> bool:
        here = self._on_this_host.get(address)
        if here is None:
            host = get_address_host(address)
            here = self._on_this_host[address] = host in ("127.0.0.1", "localhost", "::1") or host == get_ip()
        return here

    async def _abort(self, run_id: str, pending, calls, failed: str) -> None:
        """Wake the other tasks' stages of a failed step, so that none waits for it."""
        await self._abort_tasks(run_id, [calls[f] for f in pending], failed)
        for future in pending:
            future.cancel()

    async def _abort_tasks(self, run_id: str, others: list[str], failed: str) -> None:
        # return_exceptions: a task that cannot be told is gone already
        await asyncio.gather(*(self._call(t, "dflow_abort", run_id=run_id, reason=f"{failed} failed")
                               for t in others), return_exceptions=True)

    def _explain(self, task: str, error: BaseException) -> BaseException:
        if isinstance(error, (OSError, CommClosedError)):
            address = self.tasks.get(task, {}).get("address")  # (gone from a view refreshed since)
            return UnavailableError(
                f"task {task} at {address} cannot be reached ({error}): its worker left or died. "
                f"The cluster's tasks were: {', '.join(sorted(self.tasks))}")
        return error

    async def _call(self, task: str, op: str, **message):
        # distributed retries a refused connection for 30 s; a task whose worker died must fail
        # the step sooner, so connect with a timeout of our own (then as PooledRPCCall does)
        address = self.tasks[task]["address"]
        comm = await self._rpc.connect(address, timeout=CONNECT_TIMEOUT_S)
        try:
            reply = await send_recv(comm=comm, op=op, **message)
        finally:
            self._rpc.reuse(address, comm)
        if isinstance(reply, dict) and "error" in reply:  # a failed step, returned (worker.run)
            raise error_from_plain(reply["error"])
        return reply

    # ---- whole-cluster operations ----------------------------------------------------
    def reset(self) -> None:
        """Forget every variable and plan on every task (``tf.Session.reset``)."""
        sync(self._loop, lambda: asyncio.gather(*(self._call(t, "dflow_reset") for t in self.tasks)))

    def variables(self) -> dict[str, dict]:
        """Per task: the variables its worker holds (name -> shape, dtype)."""
        async def ask():
            replies = await asyncio.gather(*(self._call(t, "dflow_variables") for t in self.tasks))
            return dict(zip(self.tasks, replies))

        return sync(self._loop, ask)


def _wake(signal: socket.socket) -> None:
    try:
        signal.send(b".")
    except OSError:  # the step failed meanwhile and stopped listening
        pass
    finally:
        signal.close()


def count_sent(traffic: dict, source: str, dest: str, nbytes_sent: int) -> None:
    """Add ``nbytes_sent`` to the bytes of the ``(source, dest)`` link (RunStats.bytes_sent)."""
    traffic[(source, dest)] = traffic.get((source, dest), 0) + nbytes_sent


def _server_role(target: str) -> str | None:
    """The task of this process's ``tf.train.Server`` at ``target``, when it is not a PS: TF runs
    the ops a script left unplaced on the task whose server the session connects to."""
    from ..cluster.server import server_for

    server = server_for(target)
    return role_of(server.role) if server is not None and server.job_name != "ps" else None


def _role_with_id(client: distributed.Client, worker_id: str | None) -> str | None:
    """The task of the Dask worker ``worker_id`` (a session given that task's ``grpc://`` address
    runs unplaced ops there, as TF's master does)."""
    if worker_id is None:
        return None
    from ..cluster.spec import worker_infos

    names = [info.get("name") for info in worker_infos(client).values() if info.get("id") == worker_id]
    return role_of(names[0]) if names else None


def _current_worker(target: str):
    try:
        worker = distributed.get_worker()
    except ValueError:
        return None
    return worker if worker.scheduler.address == target else None


def _client_for(target: str) -> distributed.Client | None:
    """A live client of this process already connected to ``target`` (a dflow Cluster's),
    so that a Session does not open a connection of its own."""
    try:
        clients = [distributed.default_client()]
    except ValueError:
        clients = []
    clients += list(distributed.Client._instances)
    return next((c for c in clients if c.status == "running" and c.scheduler.address == target), None)
