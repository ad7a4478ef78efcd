"""The launchers of :mod:`dflow.cluster` (``local``, ``cuda``, ``connect``), the :class:`Cluster` they
return, and the worker command line and environment that give a Dask worker its role."""


from __future__ import annotations

import logging
import os
import sys
import threading
import time

from .spec import ClusterSpec, role_name, role_resources, worker_infos
from .worker_preload import WORKER_PRELOAD

__all__ = ["Cluster", "local", "cuda", "connect", "worker_command", "blas_env", "job_blas_env", "role_list",
           "tls_security", "tls_env", "launch_security", "configured_security", "LOOPBACK", "START_TIMEOUT_S"]

START_TIMEOUT_S = 120.0  # how long a launcher waits for all its workers
LOOPBACK = "127.0.0.1"  # where clusters listen unless told otherwise: no other machine reaches it


class Cluster:
    """A running dflow cluster: ``client``, ``spec``, ``target``, ``dashboard_link``.

    Used as a context manager it closes the client and, if this process started the
    workers, shuts them down (also when the block ends by an exception or Ctrl-C).
    """

    def __init__(self, client, dask_cluster=None):
        self.client = client
        self.dask_cluster = dask_cluster  # None when joined with connect(): not ours to stop

    @property
    def target(self) -> str:
        """The Dask scheduler's address, for ``tf.Session(target)``."""
        return self.client.scheduler.address

    @property
    def spec(self) -> ClusterSpec:
        """The roles of the workers alive now."""
        return ClusterSpec.from_client(self.client)

    @property
    def dashboard_link(self) -> str | None:
        """The Dask dashboard's address, or None when it is not served (bokeh missing)."""
        try:
            import bokeh  # noqa: F401  (the dashboard needs it; without it the link is dead)
        except ImportError:
            return None
        return self.client.dashboard_link

    def wait_for(self, roles: list[str], timeout: float = START_TIMEOUT_S,
                 interrupted: threading.Event | None = None) -> None:
        """Block until a worker holds each of ``roles`` (``["ps/0", "worker/0"]``), or until
        ``interrupted`` is set (Ctrl-C or SIGTERM caught: the caller stops)."""
        deadline = time.monotonic() + timeout
        interrupted = interrupted or threading.Event()
        while not interrupted.is_set():
            present = {info.get("name") for info in worker_infos(self.client).values()}
            missing = [role for role in roles if role not in present]
            if not missing:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"after {timeout:.0f} s no worker holds {', '.join(missing)}; workers "
                                   f"present: {', '.join(sorted(map(str, present))) or 'none'}")
            interrupted.wait(0.1)

    def close(self) -> None:
        self.client.close()
        if self.dask_cluster is not None:
            scheduler_log = logging.getLogger("distributed.scheduler")
            scheduler_log.addFilter(_heartbeat_of_a_removed_worker)
            try:
                self.dask_cluster.close()
            finally:
                scheduler_log.removeFilter(_heartbeat_of_a_removed_worker)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<dflow Cluster {self.target} roles={self.spec.roles()}>"


def _heartbeat_of_a_removed_worker(record: logging.LogRecord) -> bool:
    """While the cluster closes, the scheduler removes workers whose heartbeat may already be on
    its way (Dask's race, see ``Worker.heartbeat``): that it came is no news then."""
    return not record.getMessage().startswith("Received heartbeat from unregistered worker")


def role_list(ps: int, workers: int) -> list[tuple[str, int]]:
    if ps < 0 or workers < 1:
        raise ValueError(f"a cluster needs at least one worker and no negative PS count, "
                         f"got ps={ps}, workers={workers}")
    return [("ps", i) for i in range(ps)] + [("worker", i) for i in range(workers)]


def blas_env(threads: int) -> dict[str, str]:
    """The environment that limits a worker process's BLAS (OpenBLAS, MKL, OpenMP) threads."""
    return {name: str(threads) for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}


def job_blas_env(job: str, workers: int, blas_threads: int | None) -> dict[str, str]:
    """BLAS threads per process: a PS only adds gradients (1 thread); the workers share the
    cores. Oversubscribed BLAS collapses throughput (docs/measured.md)."""
    return blas_env(1 if job == "ps" else blas_threads or max(1, (os.cpu_count() or 1) // workers))


def _start(dask_cluster, roles: list[tuple[str, int]], timeout: float) -> Cluster:
    """Start the workers put into ``dask_cluster.worker_spec``; on any failure stop it all."""
    import distributed

    try:
        dask_cluster.sync(dask_cluster._correct_state)
        client = distributed.Client(dask_cluster, set_as_default=False)
    except BaseException:
        dask_cluster.close()
        raise
    cluster = Cluster(client, dask_cluster)
    try:
        cluster.wait_for([role_name(job, i) for job, i in roles], timeout)
    except BaseException:
        cluster.close()
        raise
    return cluster


def local(ps: int = 1, workers: int = 2, threads_per_worker: int = 1, blas_threads: int | None = None,
          dashboard_address: str | None = f"{LOOPBACK}:0", timeout: float = START_TIMEOUT_S,
          host: str = LOOPBACK, secure: bool = False, security=None, **kwargs) -> Cluster:
    """An embedded cluster of worker processes on this machine, one per role.

    ``threads_per_worker`` are Dask threads (stages run on a pool of their own);
    ``blas_threads`` per worker default to the cores divided among the workers (PS: 1).
    The scheduler, the workers and the dashboard listen on loopback: ``host=`` (an address
    of this machine, or ``"0.0.0.0"``) opens the scheduler and workers to other machines,
    ``dashboard_address=`` the dashboard (None: no dashboard). ``secure=True`` makes every
    connection TLS with a certificate made for this cluster alone; ``security=`` takes a
    ``distributed.security.Security`` (:func:`tls_security`) instead.
    Other keyword arguments go to ``distributed.LocalCluster`` (its scheduler). Each worker
    is a ``dask worker`` subprocess that never imports the calling script, so a plain
    script may call this at its top level, without ``if __name__ == "__main__":``.

    >>> with tf.cluster.local(ps=1, workers=2) as cluster:  # doctest: +SKIP
    ...     cluster.spec.as_dict()
    {'ps': ['tcp://127.0.0.1:40117'], 'worker': ['tcp://127.0.0.1:35431', 'tcp://127.0.0.1:42325']}
    """
    import distributed

    from .worker_process import WorkerProcess

    roles = role_list(ps, workers)
    security = launch_security(secure, security)
    dask_cluster = distributed.LocalCluster(n_workers=0, processes=True, dashboard_address=dashboard_address,
                                            threads_per_worker=threads_per_worker, host=host,
                                            **({"security": security} if security else {}), **kwargs)
    host = dask_cluster.scheduler_address.rpartition("://")[2].rpartition(":")[0]
    for job, i in roles:  # subprocesses, not multiprocessing's spawn: see worker_process.py
        dask_cluster.worker_spec[role_name(job, i)] = {"cls": WorkerProcess, "options": {
            "nthreads": threads_per_worker, "resources": role_resources(job, i), "host": host,
            "env": {**job_blas_env(job, workers, blas_threads), **tls_env(security)},
            "death_timeout": timeout}}
    return _start(dask_cluster, roles, timeout)


def cuda(ps: int = 1, workers: int | None = None, threads_per_worker: int = 1,
         timeout: float = START_TIMEOUT_S, host: str = LOOPBACK, secure: bool = False, security=None,
         **kwargs) -> Cluster:
    """One worker per GPU of this machine, or on its first ``workers`` GPUs
    (``dask_cuda.LocalCUDACluster``: its CPU affinity and memory settings), tagged
    ``{"worker": 1, "GPU": 1}`` with its GPU as ``/gpu:0``, plus ``ps`` PS workers on the CPU
    (the seeds found PS on CPU beside GPU workers fastest).

    Keyword arguments go to ``LocalCUDACluster`` (``CUDA_VISIBLE_DEVICES="0,1"`` picks GPUs).
    As :func:`local`, it listens on loopback (dashboard included) unless ``host=`` or
    ``dashboard_address=`` say otherwise, and ``secure=``/``security=`` make it TLS.
    Needs ``pip install dflow[gpu]`` and an NVIDIA GPU.
    """
    try:
        import distributed
        from dask_cuda import LocalCUDACluster
    except ImportError as error:
        raise ImportError(f"dflow.cluster.cuda needs dask-cuda ({error}); install it with "
                          "`pip install dflow[gpu]` on a machine with an NVIDIA GPU") from error
    security = launch_security(secure, security)
    kwargs.setdefault("dashboard_address", f"{LOOPBACK}:0")
    if security:
        kwargs["security"] = security
    try:
        # it starts one worker per visible GPU, named by device id; renamed to roles below
        dask_cluster = LocalCUDACluster(n_workers=workers, threads_per_worker=threads_per_worker, host=host,
                                        **kwargs)
    except Exception as error:
        raise RuntimeError(f"dask-cuda could not start GPU workers ({type(error).__name__}: {error}); "
                           "is there an NVIDIA GPU and driver? Use dflow.cluster.local() on CPUs") from error
    gpu_specs = list(dask_cluster.worker_spec.values())
    dask_cluster.worker_spec.clear()
    for i, spec in enumerate(gpu_specs):
        spec["options"] = {**spec["options"], "resources": role_resources("worker", i, gpus=1)}
        dask_cluster.worker_spec[role_name("worker", i)] = spec
    for i in range(ps):
        dask_cluster.worker_spec[role_name("ps", i)] = {"cls": distributed.Nanny, "options": {
            "nthreads": threads_per_worker, "resources": role_resources("ps", i), "host": host,
            "security": security,
            "env": {"CUDA_VISIBLE_DEVICES": "", **job_blas_env("ps", len(gpu_specs), None)}}}
    roles = role_list(ps, len(gpu_specs))
    return _start(dask_cluster, roles, timeout)


def connect(address: str, roles: list[str] | None = None, timeout: float = START_TIMEOUT_S,
            security=None) -> Cluster:
    """Join the running Dask scheduler at ``address``; closing the result leaves its workers running.

    ``roles`` (``["ps/0", "worker/0", "worker/1"]``) waits until workers hold them. A TLS
    scheduler (``tls://host:port``) needs ``security=tls_security(ca_file, cert, key)`` (or
    Dask's ``distributed.comm.tls`` configuration).

    >>> cluster = tf.cluster.connect("tls://10.0.0.5:8786", security=tf.cluster.tls_security(
    ...     "ca.pem", "dflow.pem", "dflow-key.pem"))  # doctest: +SKIP
    """
    import distributed

    if security is None and address.startswith("tls://"):
        security = configured_security(address)
    cluster = Cluster(distributed.Client(address, set_as_default=False, timeout=timeout,
                                         **({"security": security} if security else {})))
    if roles:
        cluster.wait_for(roles, timeout)
    return cluster


def tls_security(ca_file: str, cert: str, key: str | None = None):
    """A ``distributed.security.Security`` for mutual TLS over your own files (PEM): ``ca_file``
    signed ``cert`` (its key in ``key``, or appended to ``cert``). Every role (scheduler,
    worker, client) shows ``cert`` and accepts only peers whose certificate ``ca_file`` signed.

    One self-signed certificate, made once and copied to the cluster's machines, serves as
    both the CA and the certificate (see the README's "Security")::

        openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj /CN=dflow \\
            -keyout dflow-key.pem -out dflow.pem
    """
    from distributed.security import Security

    missing = [f"{name} {path!r}" for name, path in (("CA file", ca_file), ("certificate", cert),
                                                    ("key", key)) if path and not os.path.isfile(path)]
    if missing:
        raise FileNotFoundError(f"TLS needs PEM files that exist; not found: {', '.join(missing)}")
    roles = {f"tls_{role}_{part}": path for role in ("client", "scheduler", "worker")
             for part, path in (("cert", cert), ("key", key)) if path}
    return Security(require_encryption=True, tls_ca_file=ca_file, **roles)


def tls_env(security) -> dict[str, str]:
    """The environment that gives a ``dask worker`` process ``security`` (Dask's configuration
    variables; PEM text or file paths): as a worker, and as the client its replicas open.
    In the environment, not on the command line, which every user of the machine can read."""
    if not security:
        return {}
    worker = security.get_tls_config_for_role("worker")
    env = {"DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "True"}
    for name, value in (("CA_FILE", worker["ca_file"]), ("WORKER__CERT", worker["cert"]),
                        ("WORKER__KEY", worker["key"]), ("CLIENT__CERT", worker["cert"]),
                        ("CLIENT__KEY", worker["key"])):
        if value:
            env[f"DASK_DISTRIBUTED__COMM__TLS__{name}"] = value
    return env


def launch_security(secure: bool, security):
    """The Security a launcher uses: the one given, a throw-away one for ``secure=True``, or None."""
    if security is not None:
        return security
    if not secure:
        return None
    from distributed.security import Security

    return Security.temporary()  # a self-signed certificate in memory: only this cluster knows it


def configured_security(address: str):
    """Dask's configured TLS (``distributed.comm.tls``) for ``address``, or a clear error."""
    from distributed.security import Security

    security = Security()
    if not (security.tls_ca_file and security.tls_client_cert):
        raise ValueError(f"the scheduler at {address} speaks TLS: pass security=tf.cluster.tls_security("
                         "ca_file, cert, key) (on the command line: --tls-ca-file, --tls-cert, --tls-key)")
    return security


def worker_command(scheduler: str, job: str, task: int, nthreads: int = 1, gpus: int = 0,
                   blas_threads: int = 1, extra: list[str] | None = None) -> tuple[list[str], dict]:
    """The ``dask worker`` command line and environment that give a worker process a dflow role."""
    resources = " ".join(f"{key}={value}" for key, value in role_resources(job, task, gpus).items())
    argv = [sys.executable, "-m", "distributed.cli.dask_worker", scheduler, "--name", role_name(job, task),
            "--resources", resources, "--nthreads", str(nthreads), "--nworkers", "1", *WORKER_PRELOAD,
            *(extra or [])]
    env = {**os.environ, **blas_env(blas_threads)}
    return argv, env

