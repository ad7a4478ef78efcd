"""``dflow bench --network 1gbit|10gbit|none``: a cluster on one machine whose links are shaped.

The seeds compare training over 1 Gbit/s and 10 Gbit/s Ethernet. On one machine the
roles would talk over loopback (several GB/s), so here each role runs in a network
namespace of its own, plugged into a bridge by a veth pair whose two ends are limited
with a ``tc`` token bucket (tbf): every byte a role sends or receives crosses its own
link, as through a NIC. The Dask scheduler has its own namespace, and the driver (this
process, in the root namespace) one link of its own; both are unshaped, so the roles'
links are the only bottleneck::

      driver (root ns)      scheduler ns       ps-0 ns         worker-0 ns     worker-1 ns
      dfl<pid>-<tag>          eth0 .2          eth0 .3 [tbf]   eth0 .4 [tbf]   eth0 .5 [tbf]
      10.77.N.1                 |                |               |               |
          |                     |              [tbf]           [tbf]           [tbf]
      +---+---------------------+----------------+---------------+---------------+---+
      |                        br0 (in the hub namespace)                            |
      +------------------------------------------------------------------------------+

``none`` builds the same namespaces without the token buckets (a baseline that differs
only in the shaping). Every name starts with ``dflow-<pid>-<tag>-`` (namespaces) or
``dfl<pid>-<tag>`` (the driver's link), so concurrent runs do not collide and the
leftovers of a run that was killed are recognised by their dead owner and removed by
:func:`remove_stale_namespaces` (which the next run calls).

>>> from dflow.bench.network import measure_link, shaped_cluster
>>> with shaped_cluster(ps=1, workers=2, network="1gbit") as cluster:  # doctest: +SKIP
...     print(cluster.spec.roles(), measure_link(cluster, "worker/0", "ps/0") / 1e9)
['ps/0', 'worker/0', 'worker/1'] 0.95

Needs Linux, root (namespaces and qdiscs need CAP_NET_ADMIN) and iproute2's ``ip``
and ``tc``; :func:`check_network_shaping` says which is missing.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

from ..cluster import Cluster, connect, role_name, worker_command, worker_infos
from ..cluster.launch import role_list
from ..processes import alive as process_alive

__all__ = ["RATES", "NetworkError", "check_network_shaping", "shaped_cluster", "measure_link",
           "measure_link_between",
           "remove_stale_namespaces", "dflow_namespaces"]

RATES: dict[str, float | None] = {"1gbit": 1e9, "10gbit": 1e10, "none": None}  # bits per second
"""The ``--network`` choices: each role's link rate in bits per second; ``none`` is unshaped."""

SCHEDULER_PORT = 8786  # the scheduler's namespace is ours alone, so the usual port is free
SUBNETS = "10.77"  # each run takes one free 10.77.N.0/24
_NAMESPACE = re.compile(r"^dflow-(\d+)-[0-9a-f]{4}-")
_STOP_TIMEOUT_S = 10.0


class NetworkError(RuntimeError):
    """Network shaping cannot run here; the message says why and what to do."""


# ---- checks and commands ------------------------------------------------------------------------
def _tool(name: str) -> str | None:
    """The path of ``ip``/``tc``: root's PATH may lack the sbin directories where they live."""
    return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))


def check_network_shaping() -> None:
    """Raise :class:`NetworkError` saying what is missing for shaped links on this machine.

    >>> check_network_shaping()  # as root on Linux with iproute2: nothing  # doctest: +SKIP
    """
    if not sys.platform.startswith("linux"):
        raise NetworkError(f"network shaping needs Linux network namespaces and tc, and this is "
                           f"{sys.platform}: run on Linux, or leave out --network")
    if os.geteuid() != 0:
        raise NetworkError("network shaping needs root (it creates network namespaces and tc qdiscs): "
                           "run it as root (sudo), or leave out --network")
    missing = [name for name in ("ip", "tc") if _tool(name) is None]
    if missing:
        raise NetworkError(f"network shaping needs the {' and '.join(missing)} command"
                           f"{'s' if len(missing) > 1 else ''} of iproute2: apt-get install iproute2")


def _run(tool: str, *args: str) -> str:
    """Run ``ip``/``tc``; a refusal becomes one line naming the command and the kernel's answer."""
    argv = [_tool(tool) or tool, *args]
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        answer = " ".join(result.stderr.split()) or f"exit status {result.returncode}"
        raise NetworkError(f"the kernel refused `{tool} {' '.join(args)}`: {answer} (network shaping "
                           "needs CAP_NET_ADMIN, veth, bridge and the tbf qdisc; in a container, run it "
                           "privileged)")
    return result.stdout


def _rate_of(network: str) -> float | None:
    if network not in RATES:
        raise ValueError(f"network must be one of {', '.join(RATES)}, got {network!r}")
    return RATES[network]


def _tbf(rate: float) -> list[str]:
    """tbf arguments for ``rate`` bits/s. The bucket holds 2 ms of traffic, at least 1 MiB:
    a larger one lets a transfer's first megabytes pass unshaped (50 MB measured 11.7 Gbit/s
    at 10gbit with 8 ms), a smaller one began to cap the rate (9.6 with 0.5 ms)."""
    burst = max(2**20, int(rate / 8 * 0.002))
    return ["tbf", "rate", f"{int(rate)}bit", "burst", str(burst), "latency", "100ms"]


# ---- the namespaces of one run --------------------------------------------------------------------
def dflow_namespaces() -> dict[str, int]:
    """The network namespaces dflow created on this machine, each with the pid of the run that owns it."""
    owners = {}
    for line in _run("ip", "netns", "list").splitlines():
        name = line.split(" ", 1)[0]
        match = _NAMESPACE.match(name)
        if match:
            owners[name] = int(match.group(1))
    return owners


def _delete_namespace(name: str) -> None:
    """Kill what still runs inside ``name`` (a namespace outlives its name while a process is in
    it), then delete it; its veth ends go with it."""
    for pid in _run("ip", "netns", "pids", name).split():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)
    _run("ip", "netns", "delete", name)


def remove_stale_namespaces() -> list[str]:
    """Delete the namespaces (and processes in them) of dflow runs whose process has died;
    return their names. A live run's namespaces are left alone.

    >>> remove_stale_namespaces()  # after a run was killed with SIGKILL  # doctest: +SKIP
    ['dflow-4242-9f3a-hub', 'dflow-4242-9f3a-ps-0', ...]
    """
    stale = [name for name, owner in dflow_namespaces().items() if not process_alive(owner)]
    for name in stale:
        _delete_namespace(name)
    # the driver's link would go with its hub namespace, but later (the kernel frees it asynchronously)
    links = re.findall(r"^\d+: (dfl(\d+)-[0-9a-f]{4})[@:]", _run("ip", "-o", "link"), re.MULTILINE)
    for link, owner in links:
        if not process_alive(int(owner)):
            with contextlib.suppress(NetworkError):  # already freed meanwhile
                _run("ip", "link", "delete", link)
    return stale


class _Bridge:
    """A bridge in a hub namespace and one namespace per node plugged into it by a veth pair.

    ``add_node`` shapes both ends of the node's veth when a rate is given: the node's end
    limits what it sends, the bridge's end what it receives.
    """

    def __init__(self, rate: float | None):
        self.rate = rate
        tag = f"{os.getpid()}-{secrets.token_hex(2)}"
        self.prefix = f"dflow-{tag}-"
        self.driver_link = f"dfl{tag}"  # in the root namespace: at most 15 characters
        self.subnet = _free_subnet()
        self.namespaces: list[str] = []
        self.hub = self.prefix + "hub"

    def create(self) -> None:
        """The hub namespace, its bridge and the driver's link (apart from __init__, so that
        what a failure here leaves is known to :meth:`delete`)."""
        self._add_namespace("hub")
        _run("ip", "-n", self.hub, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", self.hub, "link", "set", "br0", "up")
        # the driver's link: its client reaches the scheduler, and dflow sessions reach the workers
        _run("ip", "link", "add", self.driver_link, "type", "veth", "peer", "name", "driver",
             "netns", self.hub)
        _run("ip", "-n", self.hub, "link", "set", "driver", "master", "br0", "up")
        _run("ip", "addr", "add", f"{self.subnet}.1/24", "dev", self.driver_link)
        _run("ip", "link", "set", self.driver_link, "up")

    def _add_namespace(self, node: str) -> str:
        name = self.prefix + node
        _run("ip", "netns", "add", name)
        self.namespaces.append(name)
        return name

    def add_node(self, node: str, shaped: bool = True) -> tuple[str, str]:
        """A namespace for ``node`` on the bridge: (namespace, its address)."""
        namespace = self._add_namespace(node)
        port = f"port{len(self.namespaces)}"
        address = f"{self.subnet}.{len(self.namespaces)}"  # .1 is the driver's; the hub has none
        _run("ip", "-n", self.hub, "link", "add", port, "type", "veth", "peer", "name", "eth0",
             "netns", namespace)
        _run("ip", "-n", self.hub, "link", "set", port, "master", "br0", "up")
        _run("ip", "-n", namespace, "addr", "add", f"{address}/24", "dev", "eth0")
        for device in ("eth0", "lo"):
            _run("ip", "-n", namespace, "link", "set", device, "up")
        if shaped and self.rate:
            _run("tc", "-n", namespace, "qdisc", "add", "dev", "eth0", "root", *_tbf(self.rate))
            _run("tc", "-n", self.hub, "qdisc", "add", "dev", port, "root", *_tbf(self.rate))
        return namespace, address

    def delete(self) -> None:
        """Remove the driver's link and every namespace; what cannot be removed is warned about
        (an error here would hide the one that ended the run)."""
        # deleting a namespace frees its devices later, asynchronously: the driver's link is
        # deleted by name so that it is gone when this returns
        steps = [lambda: _run("ip", "link", "delete", self.driver_link)]
        steps += [lambda name=name: _delete_namespace(name) for name in reversed(self.namespaces)]
        for step in steps:
            try:
                step()
            except NetworkError as error:
                if "Cannot find device" not in str(error) and "No such file" not in str(error):
                    warnings.warn(f"dflow could not clean up: {error}", RuntimeWarning, stacklevel=2)


def _free_subnet() -> str:
    """A 10.77.N prefix that no address or route of the root namespace uses."""
    used = _run("ip", "-o", "-4", "addr") + _run("ip", "-o", "-4", "route")
    taken = {int(n) for n in re.findall(rf"\b{re.escape(SUBNETS)}\.(\d+)\.", used)}
    free = [n for n in range(256) if n not in taken]
    if not free:
        raise NetworkError(f"every {SUBNETS}.N.0/24 subnet is in use: remove stale runs with "
                           "dflow.bench.network.remove_stale_namespaces()")
    return f"{SUBNETS}.{secrets.choice(free)}"


# ---- processes ----------------------------------------------------------------------------------
def _start_in(namespace: str, argv: list[str], env: dict, log: Path) -> subprocess.Popen:
    """Start ``argv`` inside ``namespace`` in a session of its own: the terminal's Ctrl-C
    reaches only the driver, which then stops the roles in order."""
    with open(log, "wb") as out:
        return subprocess.Popen([_tool("ip") or "ip", "netns", "exec", namespace, *argv], env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _stop(processes: dict[str, subprocess.Popen]) -> None:
    """SIGTERM each process group (a nanny and its worker), SIGKILL what is left after a while."""
    for process in processes.values():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + _STOP_TIMEOUT_S
    for process in processes.values():
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _raise_if_exited(processes: dict[str, subprocess.Popen], logs: Path) -> None:
    for node, process in processes.items():
        if process.poll() is not None:
            lines = (logs / f"{node.replace('/', '-')}.log").read_text(errors="replace").strip().splitlines()
            raise NetworkError(f"{node} exited with status {process.returncode} before the cluster was up; "
                               f"its last output: {lines[-1] if lines else '(none)'}")


def _wait_until_up(address: str, processes: dict[str, subprocess.Popen], logs: Path,
                   roles: list[str], timeout: float) -> Cluster:
    """Connect to the scheduler and wait for every role, failing early when a process exits."""
    deadline = time.monotonic() + timeout
    host = address.removeprefix("tcp://").rsplit(":", 1)[0]
    while True:  # a client would retry a dead scheduler for the whole timeout: probe it first
        _raise_if_exited(processes, logs)
        with contextlib.suppress(OSError), socket.create_connection((host, SCHEDULER_PORT), timeout=1):
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"the scheduler at {address} did not listen within {timeout:.0f} s")
        time.sleep(0.1)
    cluster = connect(address, timeout=max(1.0, deadline - time.monotonic()))
    try:
        while True:
            _raise_if_exited(processes, logs)
            present = {info.get("name") for info in worker_infos(cluster.client).values()}
            missing = [role for role in roles if role not in present]
            if not missing:
                return cluster
            if time.monotonic() > deadline:
                raise TimeoutError(f"after {timeout:.0f} s no worker holds {', '.join(missing)}")
            time.sleep(0.1)
    except BaseException:
        cluster.close()
        raise


# ---- signals --------------------------------------------------------------------------------------
def _exit_on_sigterm(signum, frame):
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def _sigterm_as_exit() -> Iterator[None]:
    """SIGTERM raises SystemExit, so the cleanup of ``finally`` runs as it does for Ctrl-C."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers; its own handler then decides
        return
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM during cleanup (a second Ctrl-C would leave namespaces behind);
    they are delivered when it is done."""
    held = {signal.SIGINT, signal.SIGTERM}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


# ---- the cluster ----------------------------------------------------------------------------------
@contextlib.contextmanager
def shaped_cluster(ps: int, workers: int, network: str = "1gbit", *, threads_per_worker: int = 1,
                   blas_threads: int | None = None, timeout: float = 60.0) -> Iterator[Cluster]:
    """A dflow cluster on this machine whose roles talk over links of ``network``'s rate.

    Starts a Dask scheduler and one ``dask worker`` per role (``ps/0``, ``worker/0``, ...;
    names, resources and BLAS threads as ``tf.cluster.local`` gives them), each in its own
    network namespace behind a shaped veth link (see the module's docstring), and yields
    the :class:`~dflow.cluster.Cluster` joined to it. On leaving the block, also by an
    exception, Ctrl-C or SIGTERM, the client is closed, the processes are stopped and the
    namespaces and links are deleted. Raises :class:`NetworkError` when shaping cannot run here.

    >>> with shaped_cluster(ps=1, workers=2, network="10gbit") as cluster:  # doctest: +SKIP
    ...     with tf.Session(cluster.target) as sess:
    ...         sess.run(train_op)
    """
    rate = _rate_of(network)
    roles = [role_name(job, task) for job, task in role_list(ps, workers)]
    check_network_shaping()
    remove_stale_namespaces()
    processes: dict[str, subprocess.Popen] = {}  # filled as they start, so a failure stops those
    cluster = bridge = None
    with _sigterm_as_exit(), tempfile.TemporaryDirectory(prefix="dflow-network-") as logs:
        try:
            bridge = _Bridge(rate)
            bridge.create()
            address = _start_scheduler(bridge, processes, Path(logs))
            for role in roles:
                job = role.split("/")[0]
                # BLAS threads as tf.cluster.local gives them: 1 for a PS, the cores shared by the workers
                blas = 1 if job == "ps" else blas_threads or max(1, (os.cpu_count() or 1) // workers)
                _start_role(bridge, processes, Path(logs), address, role, threads_per_worker, blas)
            cluster = _wait_until_up(address, processes, Path(logs), roles, timeout)
            yield cluster
        finally:
            with _signals_deferred():
                if cluster is not None:
                    cluster.close()
                _stop(processes)
                if bridge is not None:
                    bridge.delete()


def _start_scheduler(bridge: _Bridge, processes: dict[str, subprocess.Popen], logs: Path) -> str:
    """Start the Dask scheduler in a namespace of its own, its link unshaped; return its address."""
    namespace, host = bridge.add_node("scheduler", shaped=False)
    argv = [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", host,
            "--port", str(SCHEDULER_PORT), "--no-dashboard"]
    processes["scheduler"] = _start_in(namespace, argv, dict(os.environ), logs / "scheduler.log")
    return f"tcp://{host}:{SCHEDULER_PORT}"


def _start_role(bridge: _Bridge, processes: dict[str, subprocess.Popen], logs: Path, scheduler: str,
                role: str, nthreads: int, blas_threads: int) -> None:
    """Start the ``dask worker`` of ``role`` in a namespace of its own behind a shaped link."""
    node = role.replace("/", "-")
    namespace, host = bridge.add_node(node)
    job, task = role.split("/")
    argv, env = worker_command(scheduler, job, int(task), nthreads=nthreads, blas_threads=blas_threads,
                               extra=["--host", host, "--no-dashboard"])
    processes[role] = _start_in(namespace, argv, env, logs / f"{node}.log")


# ---- measuring a link -----------------------------------------------------------------------------
def _serve_bytes(host: str, nbytes: int, timeout: float) -> int:
    """On a worker: send ``nbytes`` to the first connection on a fresh port of ``host``; return the port."""
    listener = socket.create_server((host, 0))
    listener.settimeout(timeout)

    def send() -> None:
        with listener, contextlib.suppress(OSError):
            connection, _ = listener.accept()
            with connection:
                block = memoryview(bytes(1 << 20))
                for start in range(0, nbytes, len(block)):
                    connection.sendall(block[:min(len(block), nbytes - start)])

    threading.Thread(target=send, daemon=True, name="dflow-measure-link").start()
    return listener.getsockname()[1]


def _receive_bytes(host: str, port: int, nbytes: int, timeout: float) -> float:
    """On a worker: receive ``nbytes`` from ``host:port``; return the seconds it took."""
    buffer = bytearray(1 << 20)
    with socket.create_connection((host, port), timeout=timeout) as connection:
        start, received = time.perf_counter(), 0
        while received < nbytes:
            count = connection.recv_into(buffer)
            if count == 0:
                raise ConnectionError(f"the sender at {host}:{port} closed after {received} of "
                                      f"{nbytes} bytes")
            received += count
        return time.perf_counter() - start


def measure_link(cluster: Cluster, source: str = "worker/0", destination: str = "worker/1",
                 nbytes: int = 50_000_000, timeout: float = 60.0) -> float:
    """The rate in bits/s at which role ``source`` sends ``nbytes`` to role ``destination``
    over one TCP connection between their processes (what the links allow, without Dask's
    per-message costs), timed on the receiving worker.

    >>> measure_link(cluster, "worker/0", "ps/0") / 1e9  # on a 1gbit shaped_cluster  # doctest: +SKIP
    0.95
    """
    address = {info.get("name"): address for address, info in worker_infos(cluster.client).items()}
    missing = [role for role in (source, destination) if role not in address]
    if missing:
        raise ValueError(f"no worker holds {', '.join(missing)}; "
                         f"roles: {', '.join(sorted(map(str, address)))}")
    return measure_link_between(cluster.client, address[source], address[destination], nbytes, timeout)


def measure_link_between(client, source: str, destination: str, nbytes: int = 50_000_000,
                         timeout: float = 60.0) -> float:
    """:func:`measure_link` between two Dask workers given by address (any cluster's)."""
    from distributed.comm import get_address_host

    host = get_address_host(source)
    port = client.run(_serve_bytes, host, nbytes, timeout, workers=[source])[source]
    seconds = client.run(_receive_bytes, host, port, nbytes, timeout, workers=[destination])[destination]
    return nbytes * 8 / seconds
