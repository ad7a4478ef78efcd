"""``tf.train.Server``: one role of a cluster, started by the script that plays it.

TF 1.x scripts such as ``mnist_replica.py`` run once per task, each told its
``--job_name``/``--task_index`` and every task's ``host:port``::

    cluster = tf.train.ClusterSpec({"ps": ["localhost:2222"],
                                    "worker": ["localhost:2223", "localhost:2224"]})
    server = tf.train.Server(cluster, job_name="worker", task_index=1)
    with tf.train.MonitoredTrainingSession(master=server.target, is_chief=False) as sess: ...

In dflow every such process joins ONE Dask cluster, and nothing else has to be started:

- **the scheduler** listens on the address of the cluster's first task (the first PS's
  ``host:port``; without a ``ps`` job, the first task of ``chief``, ``master`` or
  ``worker``). The process playing that role runs it, in a thread of its own process,
  so it ends with the process. That role's Dask worker listens on a free port of the
  same host;
- **each role's Dask worker** is a ``dask worker --no-nanny`` process named after the
  role (``worker/1``) with the role's resource (``worker=1``), listening on the role's
  own ``host:port``: a subprocess of the script (it never re-imports the script, and it
  ends when the script ends or dies);
- ``server.target`` is the scheduler's address, for ``tf.Session(server.target)``,
  ``Supervisor.managed_session`` and ``MonitoredTrainingSession(master=...)``. Ops left
  without a job run on the server's own task when it is a worker.

Processes may start in any order: a Server waits for the scheduler, and a session for the
tasks its graph is placed on, each up to ``timeout`` seconds, saying what it waits for.
TF's ``server.join()`` never returns; dflow's returns once every task of the other jobs
has started and ended (or the scheduler closed), then ends the process with status 0
(``SystemExit``: ``finally`` blocks and atexit handlers run), because scripts put the
workers' code after a PS's ``join()``.

**TLS, with the script unchanged.** A Dask worker runs whatever code a peer that reaches
it sends, so a cluster whose ports others can reach should speak TLS. Give every task's
process Dask's TLS configuration (a Dask config file, or these environment variables;
a self-signed certificate may serve as its own CA, see the README's "Security")::

    DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION=True
    DASK_DISTRIBUTED__COMM__TLS__CA_FILE=ca.pem
    DASK_DISTRIBUTED__COMM__TLS__SCHEDULER__CERT=dflow.pem   (and ...__SCHEDULER__KEY)
    DASK_DISTRIBUTED__COMM__TLS__WORKER__CERT=dflow.pem      (and ...__WORKER__KEY)
    DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT=dflow.pem      (and ...__CLIENT__KEY)

or pass ``security=tf.cluster.tls_security(ca_file, cert, key)`` to the Server. Then the
scheduler, every role's worker and the sessions' client listen and connect at ``tls://``
addresses only, ``server.target`` is ``tls://host:port``, and a peer without a certificate
that the CA signed is refused.
"""

from __future__ import annotations

import atexit
import logging
import os
import subprocess
import threading
import time

from .spec import ClusterSpec, role_name, worker_infos

__all__ = ["Server", "scheduler_role", "resolve_target", "server_security", "SCHEDULER_JOBS"]

log = logging.getLogger("dflow")

START_TIMEOUT_S = 120.0
CLOSE_TIMEOUT_S = 10.0  # a closing client or worker that does not answer in this time is left
SCHEDULER_JOBS = ("ps", "chief", "master", "worker")  # whose first task hosts the scheduler
_STATE_KEY = "dflow-server"  # scheduler metadata: role -> "running" | "done"
_POLL_S = 0.1
_GONE_AFTER_S = 5.0  # a scheduler unreachable this long has closed (not merely busy)

_servers: dict[str, Server] = {}  # target -> the Server of this process (its role runs unplaced ops)


def scheduler_role(spec: ClusterSpec) -> tuple[str, int]:
    """The task whose ``host:port`` the scheduler takes: the first task of the first of
    ``ps``, ``chief``, ``master``, ``worker`` the spec has (else of its first job)."""
    job = next((j for j in SCHEDULER_JOBS if j in spec.jobs), spec.jobs[0] if spec.jobs else None)
    if job is None:
        raise ValueError("a ClusterSpec for tf.train.Server needs at least one job with a task, "
                         'e.g. {"ps": ["localhost:2222"], "worker": ["localhost:2223"]}')
    return job, spec.task_indices(job)[0]


def server_for(target: str) -> Server | None:
    """The live Server of this process whose cluster is at ``target`` (a session's default task)."""
    return _servers.get(target)


def resolve_target(target: str) -> tuple[str, str | None]:
    """A session target as (scheduler address, id of the Dask worker it names or None).

    ``grpc://host:port`` names a TF task (``mnist_replica.py --existing_servers`` passes its
    worker's): in dflow that task's Dask worker listens there, and knows its scheduler
    (the scheduler's own task: the scheduler itself answers)."""
    if target.startswith("tls://"):
        _check_tls_credentials(target)
    if not target.startswith("grpc://"):
        return target, None
    security = _tls_of_this_process()
    address = ("tls://" if security else "tcp://") + target.removeprefix("grpc://")
    try:
        identity = _identity_of(address, security)
    except OSError as error:
        raise OSError(f"no dflow task answers at {target} ({error}): start that task's process (its "
                      "tf.train.Server), or pass server.target to the session") from None
    if identity.get("type") == "Scheduler":
        return address, None
    return identity["scheduler"], identity.get("id")


def _check_tls_credentials(target: str) -> None:
    """A session to a TLS scheduler uses this process's connection to it (``tf.cluster.connect``)
    or Dask's TLS configuration; without either, say so (Dask would fail on a missing context)."""
    import distributed

    from .launch import configured_security

    clients = list(distributed.Client._instances)
    if any(c.status == "running" and c.scheduler.address == target for c in clients):
        return
    try:
        configured_security(target)
    except ValueError:
        raise ValueError(f"the scheduler at {target} speaks TLS: open it first with tf.cluster.connect("
                         f"{target!r}, security=tf.cluster.tls_security(ca_file, cert, key)) and keep it "
                         "open (sessions use its connection), or set Dask's distributed.comm.tls "
                         "configuration") from None


def server_security(security, hosts_scheduler: bool):
    """The TLS a Server's task speaks: ``security`` when given, else Dask's configured TLS
    (``distributed.comm.tls``) when it asks for TLS, else None (plain TCP).

    A task needs a certificate as a worker and as a client, and as the scheduler when it hosts
    it; a configuration that lacks one fails here, naming it, rather than deep in Dask."""
    if security is not None:
        return security
    from distributed.security import Security

    configured = Security()
    if not (configured.tls_ca_file or configured.require_encryption):
        return None
    roles = ("scheduler", "worker", "client") if hosts_scheduler else ("worker", "client")
    missing = [f"distributed.comm.tls.{role}.cert" for role in roles
               if not getattr(configured, f"tls_{role}_cert")]
    if not configured.tls_ca_file:
        missing.insert(0, "distributed.comm.tls.ca-file")
    if missing:
        variables = ", ".join("DASK_" + name.upper().replace(".", "__").replace("-", "_") for name in missing)
        raise ValueError(f"tf.train.Server: Dask's configuration asks for TLS but sets no "
                         f"{', '.join(missing)} (environment: {variables}); set them, or pass "
                         "security=tf.cluster.tls_security(ca_file, cert, key)")
    return configured


def _tls_of_this_process():
    """The TLS this process's tasks speak (a Server's, else Dask's configured one), or None:
    a ``grpc://host:port`` target names a task of such a cluster."""
    from distributed.security import Security

    own = next((server._security for server in _servers.values() if server._security), None)
    configured = Security()
    return own or (configured if configured.tls_ca_file and configured.tls_client_cert else None)


def _identity_of(address: str, security=None, timeout: float = 10.0) -> dict:
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from distributed.core import rpc

    connection_args = security.get_connection_args("client") if security else {}

    async def ask():
        async with rpc(address, timeout=timeout, connection_args=connection_args) as remote:
            return await remote.identity()

    with ThreadPoolExecutor(1) as pool:  # a loop of its own: the caller's thread may run one
        return pool.submit(asyncio.run, ask()).result()


def _split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition("://")[2].rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"a task's address must be host:port (e.g. localhost:2222), got {address!r}")
    return host, int(port)


class Server:
    """An in-process handle on one task of a cluster (TF's ``tf.train.Server``).

    Parameters
    ----------
    server_or_cluster_def : ClusterSpec, dict, Cluster or str
        TF's form: a ClusterSpec (or its dict) of ``host:port`` lists; this process
        starts its role there (see the module docstring for where the scheduler runs).
        dflow's forms: a :class:`~dflow.cluster.Cluster` or a running scheduler's address,
        where a worker for the role is started unless one holds it already.
    job_name, task_index : this process's role (``"worker"``, ``1``).
    protocol, config : accepted for TF's signature; Dask's TCP (or TLS) carries everything.
    start : start the role now (else call :meth:`start`).
    timeout : seconds to wait for the scheduler and for this role's worker.
    security : a ``distributed.security.Security`` (:func:`~dflow.cluster.tls_security`)
        that makes the scheduler, this role's worker and its client speak TLS. Without it,
        Dask's configured TLS (``distributed.comm.tls``) is used when there is one, so that
        TF scripts run unchanged (see the module docstring).

    >>> import dflow as tf
    >>> cluster = tf.train.ClusterSpec({"ps": ["localhost:2222"], "worker": ["localhost:2223"]})
    >>> server = tf.train.Server(cluster, job_name="ps", task_index=0)  # doctest: +SKIP
    >>> server.join()  # returns when the workers are done, and ends the process  # doctest: +SKIP
    """

    def __init__(self, server_or_cluster_def, job_name: str | None = None, task_index: int | None = None,
                 protocol: str | None = None, config=None, start: bool = True,
                 timeout: float = START_TIMEOUT_S, security=None):
        from .launch import Cluster, connect

        self.job_name, self.task_index = self._role_of(server_or_cluster_def, job_name, task_index)
        self.process: subprocess.Popen | None = None
        self._timeout = timeout
        self._security = security  # or Dask's configured TLS, read when the role starts
        self._scheduler = None  # the scheduler this process runs, when its role hosts it
        self._closed = False
        if isinstance(server_or_cluster_def, (ClusterSpec, dict)):
            self.server_def = ClusterSpec(server_or_cluster_def)
            self.server_def.task_address(self.job_name, self.task_index)  # names the roles if absent
            self.cluster = None
        else:
            self.server_def = None
            self.cluster = (server_or_cluster_def if isinstance(server_or_cluster_def, Cluster)
                            else connect(str(server_or_cluster_def), timeout=timeout, security=security))
        if start:
            self.start()

    @staticmethod
    def _role_of(definition, job_name, task_index) -> tuple[str, int]:
        if job_name is None:
            spec = ClusterSpec(definition) if isinstance(definition, (ClusterSpec, dict)) else None
            if spec is None or len(spec.roles()) != 1:
                raise ValueError("tf.train.Server needs job_name= (and task_index=) to know which task "
                                 "this process is, e.g. Server(cluster, job_name='worker', task_index=0)")
            job_name, task_index = spec.jobs[0], spec.task_indices(spec.jobs[0])[0]
        if task_index is None:
            task_index = 0
        return str(job_name), int(task_index)

    # ---- what scripts read -------------------------------------------------------
    @property
    def target(self) -> str:
        """The address sessions connect to (``tf.Session(server.target)``)."""
        return self.cluster.target

    @property
    def role(self) -> str:
        return role_name(self.job_name, self.task_index)

    # ---- starting -------------------------------------------------------------------
    def start(self) -> None:
        """Start this task's worker (and the scheduler, when this task hosts it); wait until
        the worker has joined."""
        if self.server_def is None:
            self._start_in_cluster()
            return
        from .launch import connect

        spec = self.server_def
        sched_job, sched_task = scheduler_role(spec)
        sched_host, sched_port = _split_address(spec.task_address(sched_job, sched_task))
        own_host, own_port = _split_address(spec.task_address(self.job_name, self.task_index))
        hosts_scheduler = (self.job_name, self.task_index) == (sched_job, sched_task)
        self._security = server_security(self._security, hosts_scheduler)
        if hosts_scheduler:
            self._scheduler = _start_scheduler(sched_host, sched_port, self._security)
            own_port = 0  # the scheduler has the task's port; its worker takes a free one
        address = f"{'tls' if self._security else 'tcp'}://{sched_host}:{sched_port}"
        atexit.register(self.stop)  # even when the script fails: never hang in Client.__del__
        try:
            self.process = self._start_worker(address, own_host, own_port)
            try:
                self.cluster = connect(address, timeout=self._timeout, security=self._security)
            except OSError as error:
                raise TimeoutError(
                    f"{self.role}: no scheduler answered at {address} within {self._timeout:.0f} s "
                    f"({error}); task {role_name(sched_job, sched_task)} hosts it: start that task's process "
                    f"(--job_name={sched_job} --task_index={sched_task})") from None
            self._wait_for_own_worker()
            self.cluster.client.set_metadata([_STATE_KEY, self.role], "running")
        except BaseException:
            self.stop()
            raise
        _servers[self.target] = self

    def _start_worker(self, scheduler: str, host: str, port: int) -> subprocess.Popen:
        from .launch import job_blas_env, tls_env, worker_command
        from .worker_process import QUIET_DASK, die_with_parent, import_path_env

        workers_here = sum(1 for a in self.server_def.job_tasks("worker") if _split_address(a)[0] == host) \
            if "worker" in self.server_def.jobs else 1
        argv, env = worker_command(scheduler, self.job_name, self.task_index, extra=[
            "--no-nanny", "--host", host, "--worker-port", str(port), "--no-dashboard",
            "--dashboard-address", f"{host}:0",  # its HTTP server (/health) where the task listens
            "--death-timeout", str(int(self._timeout))])
        env.update({**job_blas_env(self.job_name, max(1, workers_here), None), **import_path_env(),
                    **tls_env(self._security)})
        for name, value in QUIET_DASK.items():  # unless the user asked for Dask's logs
            env.setdefault(name, value)
        return subprocess.Popen(argv, env=env, preexec_fn=die_with_parent if os.name == "posix" else None)

    def _wait_for_own_worker(self) -> None:
        deadline = time.monotonic() + self._timeout
        while self.role not in {i.get("name") for i in worker_infos(self.cluster.client).values()}:
            if self.process.poll() is not None:
                raise RuntimeError(f"the Dask worker for {self.role} exited with status "
                                   f"{self.process.returncode} before joining {self.target}; is its "
                                   f"address {self.server_def.task_address(self.job_name, self.task_index)} "
                                   "free, and the role held by no other process?")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.role}: its worker did not join {self.target} within "
                                   f"{self._timeout:.0f} s")
            time.sleep(_POLL_S)

    def _start_in_cluster(self) -> None:
        from .launch import tls_env, worker_command

        present = {info.get("name") for info in worker_infos(self.cluster.client).values()}
        if self.role not in present:
            argv, env = worker_command(self.target, self.job_name, self.task_index)
            if self.target.startswith("tls://"):  # the worker shows the certificate its client showed
                env.update(tls_env(self._security or self.cluster.client.security))
            self.process = subprocess.Popen(argv, env=env)
        self.cluster.wait_for([self.role], self._timeout)

    # ---- serving and stopping ---------------------------------------------------------
    def join(self, timeout: float | None = None) -> None:
        """Serve until the cluster's work is done (a PS's last line in TF's scripts).

        With a ClusterSpec: wait until every task of the other jobs (the workers, for a PS)
        has started and ended, or the scheduler closed; then stop this task and end the
        process with status 0, as TF's never-returning ``join()`` keeps a PS from running
        the workers' code below it. Else: block while this role's worker lives.
        """
        if self.server_def is None:
            if self.process is not None:
                self.process.wait(timeout)
                return
            while self.role in {i.get("name") for i in worker_infos(self.cluster.client).values()}:
                time.sleep(1.0)
            return
        others = [r for r in self.server_def.roles() if not r.startswith(f"{self.job_name}/")]
        self._wait_until_finished(others, timeout)
        if self._scheduler is not None:
            self._scheduler.wait_for_clients_to_leave({self.cluster.client.id}, CLOSE_TIMEOUT_S)
        self.stop()
        raise SystemExit(0)

    def _wait_until_finished(self, roles: list[str], timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        waiting_for, unreachable_since = None, None
        while True:
            try:
                states = self.cluster.client.get_metadata([_STATE_KEY], default={})
                present = {i.get("name") for i in worker_infos(self.cluster.client).values()}
                unreachable_since = None
            except OSError:  # the scheduler closed (its task ended): nothing left to serve
                unreachable_since = unreachable_since or time.monotonic()
                if time.monotonic() - unreachable_since > _GONE_AFTER_S:
                    return
                time.sleep(_POLL_S * 5)
                continue
            unfinished = [r for r in roles if not (states.get(r) == "done" or
                                                   (states.get(r) == "running" and r not in present))]
            if not unfinished:
                return
            if unfinished != waiting_for:
                log.info("%s: serving until %s end", self.role, ", ".join(unfinished))
                waiting_for = unfinished
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"{self.role}.join: after {timeout:g} s these tasks have not ended: "
                                   f"{', '.join(unfinished)}")
            time.sleep(_POLL_S * 5)

    def stop(self) -> None:
        """Stop what this Server started (a role it found running is left alone); close its
        client with a timeout. Run at exit too."""
        if self._closed:
            return
        self._closed = True
        for target in [t for t, server in _servers.items() if server is self]:
            del _servers[target]
        client = self.cluster.client if self.server_def is not None and self.cluster is not None else None
        if client is not None and client.status == "running":
            try:  # (with a timeout: a scheduler that is gone would be retried for 30 s)
                client.sync(client.scheduler.set_metadata, keys=[_STATE_KEY, self.role], value="done",
                            callback_timeout=CLOSE_TIMEOUT_S / 2)
            except Exception:  # noqa: BLE001 - the scheduler may be gone already; nothing to tell
                pass
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=CLOSE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
        if client is not None:
            try:
                client.close(timeout=CLOSE_TIMEOUT_S)
            except Exception:  # noqa: BLE001 - closing a client whose scheduler left can time out
                pass
        if self._scheduler is not None:
            self._scheduler.close(timeout=CLOSE_TIMEOUT_S)
            self._scheduler = None

    @staticmethod
    def create_local_server(config=None, start: bool = True) -> Server:
        """A one-task cluster on this machine (TF's ``Server.create_local_server``)."""
        import socket

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        return Server(ClusterSpec({"localhost": [f"127.0.0.1:{port}"]}), "localhost", 0, start=start)

    def __repr__(self) -> str:
        return f"<dflow Server {self.role} target={self.cluster.target if self.cluster else None}>"


class _SchedulerThread:
    """A Dask scheduler on an event loop in a thread of this process."""

    def __init__(self, host: str, port: int, security=None):
        import asyncio

        from distributed import Scheduler

        # its connection chatter, one line per client
        for name in ("distributed.scheduler", "distributed.core", "distributed.http.proxy"):
            if logging.getLogger(name).level < logging.WARNING:
                logging.getLogger(name).setLevel(logging.WARNING)
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop = asyncio.new_event_loop()

        async def serve():
            try:
                # its HTTP server (health, metrics) on a free port: the default 8787 may be taken
                self.scheduler = await Scheduler(host=host, port=port, dashboard=False,
                                                 dashboard_address=f"{host}:0", security=security,
                                                 protocol="tls" if security else "tcp")
            except BaseException as error:  # noqa: BLE001 - reported by the caller's thread
                self._error = error
                self._ready.set()
                return
            self._ready.set()
            await self.scheduler.finished()

        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(serve(),),
                                        name="dflow-scheduler", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise OSError(f"cannot start the scheduler at {host}:{port} ({self._error}); is the port "
                          "free (another process of this cluster, or a previous run, may hold it)?")

    def wait_for_clients_to_leave(self, own: set[str], timeout: float) -> None:
        """Wait until only ``own`` clients are connected: closing the scheduler under a task's
        closing client would make it try to reconnect and log a traceback."""
        deadline = time.monotonic() + timeout
        while set(self.scheduler.clients) - own - {"fire-and-forget"} and time.monotonic() < deadline:
            time.sleep(_POLL_S)

    def close(self, timeout: float) -> None:
        import asyncio

        future = asyncio.run_coroutine_threadsafe(self.scheduler.close(), self._loop)
        try:
            future.result(timeout)
        except Exception:  # noqa: BLE001 - a scheduler that does not close in time dies with us
            pass
        self._thread.join(timeout)


def _start_scheduler(host: str, port: int, security=None) -> _SchedulerThread:
    return _SchedulerThread(host, port, security)
