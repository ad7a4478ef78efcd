"""``dflow train`` on a cluster, and ``dflow worker``.

Training is between-graph replication, as the seeds trained: every worker task runs
the same program (:func:`dflow.train.program.train_replica`) that builds the model where
``--variable_update`` puts its variables (:class:`dflow.train.VariableUpdate`: on
the PS tasks, asynchronously or with ``SyncReplicasOptimizer`` (``--sync``), or as
copies on every worker kept equal by allreduce), reads its own shard of the data
and trains. The chief
(worker 0) initializes or restores the variables, saves checkpoints and reports
progress to the client through a Dask queue every ``--log_every`` global steps; the
client prints it, and at the end the chief's test evaluation.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import sys
import time
import uuid

import numpy as np

from .errors import OpError
from .train.program import (
    ROLE_LOSS_GRACE_S,
    SYNCHRONOUS_UPDATES,
    cancel_waits,
    interrupt_at_safe_points,
    log_scalars,
    stop_replicas,
    train_replica,
)
from .train.variable_update import VARIABLE_UPDATES

__all__ = ["add_cluster_arguments", "run_cluster_train", "add_worker_arguments", "run_worker",
           "add_tls_arguments", "tls_from_arguments", "tls_configured"]

_PROGRESS_POLL_S = 0.5
SCHEDULER_CONNECT_S = 10.0  # an unreachable scheduler is said in one line after this (as `dflow worker`)
GATHER_TIMEOUT_S = 60.0  # the replicas' small results, once they are done
STOP_WAIT_S = 20.0  # replicas asked to stop end their step and save a checkpoint within this
CONNECT_WAIT_S = 3.0  # a stop request to a worker that does not answer gives up after this
SLURM = "slurm"  # --cluster slurm: a cluster of Slurm jobs, not a scheduler's address
ROLE_RETURN_S = 120.0  # how long a lost role has to come back (a nanny's or dflow's restart)


def add_cluster_arguments(p: argparse.ArgumentParser) -> None:
    where = p.add_argument_group("where to train (default: an embedded local cluster)")
    where.add_argument("--local", action="store_true", help="train in this process, without a cluster")
    where.add_argument("--ps", type=int, default=1, help="parameter-server tasks (default 1)")
    where.add_argument("--workers", type=int, default=2, help="worker tasks, one replica each (default 2)")
    where.add_argument("--sync", action="store_true",
                       help="synchronous updates (SyncReplicasOptimizer) instead of the default, "
                            "asynchronous (each worker applies its gradients to the PS as it computes "
                            "them); replicated and allreduce are always synchronous")
    where.add_argument("--variable_update", choices=VARIABLE_UPDATES, default="parameter_server",
                       help="where the variables live and how replicas share updates (default "
                            "parameter_server; see README, 'Variable updates')")
    where.add_argument("--devices_per_node", type=int,
                       help="worker tasks per node for replicated/distributed_replicated (default: per host)")
    where.add_argument("--cluster", metavar="ADDRESS",
                       help="a running Dask scheduler whose workers `dflow worker` started "
                            "(--ps/--workers then come from its roles); or `slurm`: one Slurm job per "
                            "role of --ps/--workers, submitted again when it ends, set up by Dask's "
                            "jobqueue config (queue, account, cores, memory, walltime, interface: "
                            "~/.config/dask/jobqueue.yaml or DASK_JOBQUEUE__SLURM__* variables)")
    where.add_argument("--secure", action="store_true",
                       help="the embedded (or Slurm) cluster speaks TLS with a certificate made for it alone")
    add_tls_arguments(where)

    faults = p.add_argument_group("failures")
    faults.add_argument("--max_failures", type=int, default=3,
                        help="lost workers or PS tasks to recover from (default 3): wait for the role to "
                             "come back, restore the latest checkpoint on every replica, go on (needs "
                             "--checkpoint_dir); 0 fails at the first loss")
    faults.add_argument("--sync_timeout", type=float, default=300.0,
                        help="seconds a synchronous replica waits for the others before it fails "
                             "(default 300; a dead one is noticed within seconds through liveness)")
    faults.add_argument("--elastic", action="store_true",
                        help="with --variable_update allreduce: when a worker dies, the others rebuild the "
                             "ring without it and go on to --steps with a smaller global batch (as Horovod "
                             "Elastic) instead of waiting for it to come back (needs --checkpoint_dir)")


def add_tls_arguments(group) -> None:
    """``--tls-ca-file --tls-cert --tls-key``: join a TLS cluster (``dask scheduler --protocol tls``)."""
    group.add_argument("--tls-ca-file", dest="tls_ca_file", metavar="PEM",
                       help="TLS: the CA certificate that signed the cluster's certificates")
    group.add_argument("--tls-cert", dest="tls_cert", metavar="PEM", help="TLS: this process's certificate")
    group.add_argument("--tls-key", dest="tls_key", metavar="PEM",
                       help="TLS: its private key (if not appended to --tls-cert)")


def tls_from_arguments(args, parser):
    """The ``distributed.security.Security`` the TLS options ask for, or None without them."""
    given = [getattr(args, name, None) for name in ("tls_ca_file", "tls_cert", "tls_key")]
    if not any(given):
        return None
    if not (args.tls_ca_file and args.tls_cert):
        parser.error("TLS needs --tls-ca-file and --tls-cert (and --tls-key unless the key is in the "
                     "certificate file)")
    from .cluster import tls_security

    try:
        return tls_security(args.tls_ca_file, args.tls_cert, args.tls_key)
    except FileNotFoundError as error:
        parser.error(str(error))


def tls_configured(args, parser):
    """A context in which Dask's configuration carries the TLS options, so that every client
    opened inside it (a ``--cluster tls://...`` one) uses them; no-op without them."""
    if tls_from_arguments(args, parser) is None:
        return contextlib.nullcontext()
    import dask

    return dask.config.set({"distributed.comm.require-encryption": True,
                            "distributed.comm.tls.ca-file": args.tls_ca_file,
                            "distributed.comm.tls.client.cert": args.tls_cert,
                            "distributed.comm.tls.client.key": args.tls_key})


def check_cluster_arguments(args, parser) -> None:
    if args.local and (args.sync or args.cluster or args.variable_update != "parameter_server"):
        parser.error("--local trains in this process: it takes no --sync, --cluster or --variable_update")
    args.security = tls_from_arguments(args, parser)
    launched = not args.local and args.cluster in (None, SLURM)  # a cluster this command starts
    if args.security is not None and args.cluster in (None, SLURM):
        parser.error("--tls-ca-file/--tls-cert/--tls-key join a running cluster (--cluster tls://HOST:PORT); "
                     "--secure makes the cluster this command starts speak TLS")
    if args.secure and not launched:
        parser.error("--secure starts the embedded (or Slurm) cluster with TLS; a running cluster "
                     "(--cluster ADDRESS) takes --tls-ca-file/--tls-cert/--tls-key")
    if args.ps < 0 or args.workers < 1:
        parser.error(f"--ps must be 0 or more and --workers at least 1, got --ps {args.ps} "
                     f"--workers {args.workers}")
    if args.max_failures < 0 or args.sync_timeout <= 0:
        parser.error(f"--max_failures must be 0 or more and --sync_timeout positive, got --max_failures "
                     f"{args.max_failures} --sync_timeout {args.sync_timeout:g}")
    if args.elastic and args.variable_update != "allreduce":
        parser.error("--elastic goes on with the surviving workers of an allreduce ring: it needs "
                     "--variable_update allreduce")
    if args.variable_update in SYNCHRONOUS_UPDATES:
        args.sync = True
    if launched:  # (a running cluster's roles are known once connected)
        from .cluster import ClusterSpec
        from .train import VariableUpdate

        spec = ClusterSpec({"ps": [""] * args.ps, "worker": [""] * args.workers} if args.ps
                           else {"worker": [""] * args.workers})
        try:  # the mode's own checks (a PS mode without PS tasks, ...), before starting a cluster
            VariableUpdate(args.variable_update, spec, 0, sync=args.sync,
                           devices_per_node=args.devices_per_node)
        except ValueError as error:
            parser.error(str(error))


def _open_cluster(args):
    import dflow as tf

    if args.cluster == SLURM:
        return tf.cluster.slurm(ps=args.ps, workers=args.workers, secure=args.secure)
    if args.cluster:
        cluster = tf.cluster.connect(args.cluster, security=getattr(args, "security", None),
                                     timeout=SCHEDULER_CONNECT_S)
        try:
            args.ps, args.workers = (cluster.spec.num_tasks(job) for job in ("ps", "worker"))
        except ValueError:  # a scheduler without dflow roles
            cluster.close()
            raise
        return cluster
    return tf.cluster.local(ps=args.ps, workers=args.workers, secure=getattr(args, "secure", False))


def run_cluster_train(args, settings, steps: int, report) -> int:
    """Train on the cluster; ``report(total, n, weights)`` prints the chief's evaluation."""
    try:
        cluster = _open_cluster(args)
    except (OSError, TimeoutError, ValueError, RuntimeError) as error:  # one line, not Dask's traceback
        where = ("an embedded cluster" if not args.cluster else "a Slurm cluster" if args.cluster == SLURM
                 else f"the scheduler at {args.cluster}")
        print(f"dflow train: error: cannot use {where}: {error}", file=sys.stderr)
        return 1
    with cluster:
        print(f"cluster: {args.ps} PS + {args.workers} workers, {args.variable_update}, "
              f"{'synchronous' if args.sync else 'asynchronous'} updates; roles {cluster.spec.roles()}; "
              f"dashboard {cluster.dashboard_link or '(install bokeh to serve it)'}", flush=True)
        return _train_on(cluster, args, settings, steps, report)


class _Progress:
    """The chief's progress lines, as the client prints them, and the last global step seen."""

    def __init__(self, steps: int, logdir: str | None):
        self.steps, self.logdir = steps, logdir
        self.begin, self.first, self.last_step = time.perf_counter(), 0, 0
        self.recovering: _Recovery | None = None

    def show(self, item) -> None:
        if item[0] == "restored":
            _, path, step = item
            if self.recovering is not None:
                self.recovering.report(path, step)
                self.recovering = None
            elif path is not None:
                print(f"restored {path} (step {step})", flush=True)
            self.begin, self.first, self.last_step = time.perf_counter(), step, step
            return
        step, loss, rate = item
        self.last_step = max(self.last_step, step)
        eta = (time.perf_counter() - self.begin) / max(step - self.first, 1) * (self.steps - step)
        print(f"step {step}/{self.steps}  loss {loss:.4f}  images/sec {rate:.1f}  "
              f"(eta {datetime.timedelta(seconds=round(eta))})", flush=True)
        log_scalars(self.logdir, step, loss=loss, images_per_sec=rate)


class _Recovery:
    """One lost role on its way back: what died and when, the step reached, and what was restored."""

    def __init__(self, lost, died_at: float, number: int, max_failures: int):
        self.lost, self.died_at, self.step_reached = lost, died_at, 0
        self.detected_at, self.number, self.max_failures = time.time(), number, max_failures
        self.elastic: str | None = None  # how an elastic run goes on, said once it has restored

    def announce(self) -> None:
        print(f"failure {self.number}/{self.max_failures}: {self.lost} (detected "
              f"{max(self.detected_at - self.died_at, 0):.1f} s after it died); stopping the other replicas",
              flush=True)

    def report(self, path: str | None, step: int) -> None:
        # (a checkpoint saved as the replicas stopped may be a step past the last one they reported)
        reached = max(self.step_reached, step)
        print(f"recovered from the loss of {self.lost.role} in {time.time() - self.detected_at:.1f} s: "
              f"restored {path or 'the initial values (no checkpoint yet)'} (step {step}); training had "
              f"reached step {reached}: {reached - step} steps lost", flush=True)
        if self.elastic:
            print(self.elastic, flush=True)


def _train_on(cluster, args, settings, steps: int, report) -> int:
    import distributed

    import dflow as tf

    from .distributed.liveness import RoleLostError, RoleWatch
    from .distributed.replicate import cancel_replicas, start_replicas

    progress = distributed.Queue(f"dflow-train-{uuid.uuid4().hex[:8]}", client=cluster.client)
    view, failures = _Progress(steps, args.logdir), 0
    group = tf.train.ElasticGroup(cluster.spec) if getattr(args, "elastic", False) else None
    with interrupt_at_safe_points() as interrupted:
        while True:
            watch, run = RoleWatch(cluster.client, group and group.roles), uuid.uuid4().hex[:8]
            spec = group.spec(cluster.spec) if group else cluster.spec
            futures = start_replicas(train_replica, cluster, cluster.target, spec, args, settings,
                                     steps, progress.name, run, task_indices=group and group.tasks)
            try:
                _follow(progress, futures, view, interrupted, watch)
                results = [f.result(timeout=GATHER_TIMEOUT_S) for f in futures]
                break
            except RoleLostError as lost:
                # before anything waits: Dask would rerun a lost replica on its role's restarted worker
                lost_roles = {error.role for error in watch.lost()} | {lost.role}
                cancel_replicas(cluster.client, [f for f, role in zip(futures, _replica_roles(futures))
                                                 if role in lost_roles])
                failures += 1
                if failures > args.max_failures or not args.checkpoint_dir:
                    why = ("pass --checkpoint_dir to recover from it automatically" if not args.checkpoint_dir
                           else f"that is more than --max_failures {args.max_failures}")
                    print(f"dflow train: error: {lost}; {why}", file=sys.stderr, flush=True)
                    _stop(cluster, futures, run, watch)
                    _say_last_checkpoint(args.checkpoint_dir)
                    return 1
                view.recovering = _Recovery(lost, _died_at(cluster, lost), failures, args.max_failures)
                view.recovering.announce()
                gone = [error.role for error in watch.lost()] or [lost.role]
                saver = group.stand_in(gone) if group else _saver_in_chiefs_place(watch)
                stopped = _stop(cluster, futures, run, watch, saver)
                view.recovering.step_reached = max([view.last_step, *stopped])
                if group:  # the ring goes on without the dead: no waiting for them
                    problem = _go_on_without(cluster, group, gone, settings["batch_size"], view.recovering)
                else:
                    problem = _bring_back(cluster, watch.started, interrupted)
                if interrupted.is_set():  # Ctrl-C or SIGTERM while it recovered: the replicas stopped
                    _say_last_checkpoint(args.checkpoint_dir)
                    raise interrupted.exception() from None
                if problem:
                    print(f"dflow train: error: {problem}", file=sys.stderr)
                    return 1
            except FloatingPointError as e:
                _stop(cluster, futures, run, watch)
                print(f"dflow train: error: {e}", file=sys.stderr)
                return 1
            except (OSError, ValueError, RuntimeError, OpError) as e:  # raised in a replica
                _stop(cluster, futures, run, watch)
                print(f"dflow train: error on the cluster: {type(e).__name__}: {e}", file=sys.stderr)
                return 1
            except KeyboardInterrupt:  # (Terminated too) the chief saves a last checkpoint as it stops
                _stop(cluster, futures, run, watch)
                _say_last_checkpoint(args.checkpoint_dir)
                raise
            finally:
                cancel_replicas(cluster.client, futures)
    for result in results:
        staleness = result["staleness"]
        print(f"worker {result['task']}: {result['steps']} steps, last loss {result['loss']:.4f}, staleness "
              f"mean {np.mean(staleness) if staleness else 0:.2f} max {max(staleness, default=0)}")
    report(*results[0]["evaluation"])
    return 0


def _saver_in_chiefs_place(watch) -> int | None:
    """The surviving worker task that saves the PS's variables as it stops, when the chief died
    and the PS tasks did not (so the survivors' steps since the last checkpoint are kept)."""
    lost = {error.role for error in watch.lost()}
    if "worker/0" not in lost or any(role.startswith("ps/") for role in lost):
        return None
    survivors = [int(role.partition("/")[2]) for role in watch.started
                 if role.startswith("worker/") and role not in lost]
    return min(survivors, default=None)


def _died_at(cluster, lost) -> float:
    """When the lost role's process died, where this process started it (else when it was seen gone)."""
    process = getattr(cluster.dask_cluster, "workers", {}).get(lost.role)
    deaths = getattr(process, "deaths", None)
    return deaths[-1][0] if deaths else lost.at


def _bring_back(cluster, roles: dict[str, str], interrupted) -> str | None:
    """Wait for every role to be held again (a nanny's or dflow's restart), then forget every
    task's variables so that the chief restores them all from the latest checkpoint; or say why not.
    Returns at once when ``interrupted`` (Ctrl-C, SIGTERM) is set, as the run then ends."""
    import dflow as tf

    try:
        cluster.wait_for(sorted(roles), timeout=ROLE_RETURN_S, interrupted=interrupted)
        if interrupted.is_set():
            return None
        tf.Session.reset(cluster.target)
    except (TimeoutError, OSError, OpError) as error:
        return f"the cluster did not come back: {error}"
    return None


def _go_on_without(cluster, group, gone: list[str], batch_size: int, recovery) -> str | None:
    """An elastic run's recovery: the lost workers leave the ring, every task's variables and
    collectives start over (the new chief restores the checkpoint its survivors saved as they
    stopped); or why not. Only the members are reset: a lost role coming back meanwhile (a
    nanny's restart) is left out of the ring."""
    from .distributed.liveness import roles_alive

    try:
        group.leave(gone)
        alive = roles_alive(cluster.client)
        cluster.client.run(_reset_task, workers=[alive[role] for role in group.roles if role in alive])
    except (ValueError, TimeoutError, OSError) as error:
        return f"the elastic run cannot go on: {error}"
    recovery.elastic = group.describe(batch_size)
    return None


def _say_last_checkpoint(checkpoint_dir: str | None) -> None:
    import dflow as tf

    latest = tf.train.latest_checkpoint(checkpoint_dir) if checkpoint_dir else None
    if latest:
        print(f"the latest checkpoint is {latest}: rerun the same command to resume from it", flush=True)


def _stop(cluster, futures, run: str, watch, saver: int | None = None) -> list[int]:
    """Ask the live replicas to end their step and close their sessions (the chief saves a checkpoint
    then); wait up to STOP_WAIT_S for them. The global steps those that ended report.

    A replica whose role ``watch`` finds lost will never finish and is not waited for; when a role
    is lost, the live tasks' waits (a barrier expecting the dead replica) end at once."""
    import dask

    from .distributed.liveness import roles_alive

    alive, lost = roles_alive(cluster.client), {error.role for error in watch.lost()}
    workers = [address for role, address in alive.items() if role.startswith("worker/")]
    with contextlib.suppress(OSError, TimeoutError), \
            dask.config.set({"distributed.comm.timeouts.connect": f"{CONNECT_WAIT_S}s"}):
        cluster.client.run(stop_replicas, run, saver, workers=workers, on_error="ignore")
        if lost:
            cluster.client.run(cancel_waits, workers=list(alive.values()), on_error="ignore")
    live = [f for f, role in zip(futures, _replica_roles(futures)) if role not in lost]
    deadline = time.monotonic() + STOP_WAIT_S
    while time.monotonic() < deadline and not all(f.done() for f in live):
        time.sleep(_PROGRESS_POLL_S)
    return [f.result()["global_step"] for f in live if f.status == "finished"]


def _reset_task(dask_worker) -> None:
    from .distributed.worker import PLUGIN_NAME

    dask_worker.plugins[PLUGIN_NAME].reset()


def _replica_roles(futures) -> list[str]:
    """``dflow-replica-worker-1-<run>`` -> ``worker/1`` (start_replicas' keys)."""
    return ["/".join(str(f.key).split("-")[2:4]) for f in futures]


def _follow(progress, futures, view: _Progress, interrupted, watch=None) -> None:
    """Print the chief's progress lines until every replica has finished, one failed, or (``watch``)
    a role lost its worker."""
    while not interrupted.is_set():
        if progress.qsize():  # (a get with a timeout would log an error on the scheduler each time)
            view.show(progress.get(timeout=GATHER_TIMEOUT_S))
            continue
        failed = [f for f in futures if f.status == "error"]
        if failed:
            _raise_replica_error(failed[0], watch)
        if watch is not None:
            watch.check()
        if all(f.done() for f in futures):
            return
        interrupted.wait(_PROGRESS_POLL_S)
    raise interrupted.exception()


def _raise_replica_error(future, watch) -> None:
    """A replica's error; a role lost meanwhile instead (a survivor's step fails as the PS dies,
    sometimes before the scheduler has noticed the death)."""
    from .errors import AbortedError, CancelledError, DeadlineExceededError, UnavailableError

    error = future.exception(timeout=GATHER_TIMEOUT_S)
    lost_peer = (UnavailableError, AbortedError, CancelledError, DeadlineExceededError, OSError)
    if watch is not None and isinstance(error, lost_peer):  # not a model's own error: no wait for those
        deadline = time.monotonic() + ROLE_LOSS_GRACE_S
        while time.monotonic() < deadline:
            watch.check()
            time.sleep(_PROGRESS_POLL_S)
    raise error


# ---- dflow worker -----------------------------------------------------------------------------
def add_worker_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scheduler", required=True, metavar="ADDRESS",
                   help="the Dask scheduler to join (start one with `dask scheduler`)")
    p.add_argument("--job", required=True, help="this task's job: ps or worker")
    p.add_argument("--task", type=int, required=True, help="this task's index in its job")
    p.add_argument("--gpus", type=int, default=0, help="GPUs this worker offers (its /gpu:N devices)")
    p.add_argument("--nthreads", type=int, default=1, help="Dask threads (stages have a pool of their own)")
    p.add_argument("--blas_threads", type=int, help="BLAS threads (default: 1 for ps, all cores for worker)")
    listen = p.add_mutually_exclusive_group()
    listen.add_argument("--host", help="the address this worker listens on (default: loopback, for a "
                                       "scheduler on this machine; give this machine's address, or 0.0.0.0, "
                                       "to serve other machines)")
    listen.add_argument("--interface", help="listen on this network interface's address (e.g. eth0)")
    add_tls_arguments(p.add_argument_group("TLS (a scheduler started with --protocol tls)"))


def run_worker(args, parser) -> int:
    """``dflow worker``: become ``dask worker`` with this role's name and resources."""
    from .cluster import role_name, tls_env, worker_command

    if args.task < 0:
        parser.error(f"--task must be 0 or more, got {args.task}")
    if not args.job.isidentifier():
        parser.error(f"--job must be a name like ps or worker, got {args.job!r}")
    if args.gpus < 0:
        parser.error(f"--gpus must be 0 or more, got {args.gpus}")
    if args.gpus:
        from .runtime.devices import gpu_namespace

        if gpu_namespace() is None:  # its ops of no device would be placed on a GPU it cannot use
            parser.error(f"--gpus {args.gpus}: this machine has no GPU that CuPy can use (dflow computes "
                         "on GPUs through CuPy: pip install 'dflow[gpu]'), so leave out --gpus")
    listen = _listen_arguments(args, parser)
    security = tls_from_arguments(args, parser)
    problem = _role_problem(args.scheduler, role_name(args.job, args.task), security)
    if problem:
        print(f"dflow worker: error: {problem}", file=sys.stderr)
        return 1
    blas = args.blas_threads or (1 if args.job == "ps" else os.cpu_count() or 1)
    argv, env = worker_command(args.scheduler, args.job, args.task, nthreads=args.nthreads,
                               gpus=args.gpus, blas_threads=blas, extra=listen)
    env.update(tls_env(security))
    print(f"dflow worker {args.job}/{args.task} joining {args.scheduler}", flush=True)
    os.execve(argv[0], argv, env)  # the worker is this process from here on; Ctrl-C stops it


def _on_this_machine(host: str) -> bool:
    """Is ``host`` (a name or address) this machine: loopback or one of its interfaces' addresses?"""
    import socket

    import psutil  # (a dependency of distributed)

    try:
        address = socket.gethostbyname(host.strip("[]"))
    except OSError:
        return False
    own = {entry.address for entries in psutil.net_if_addrs().values() for entry in entries}
    return address.startswith("127.") or address in own


def _listen_arguments(args, parser) -> list[str]:
    """``dask worker``'s options for where to listen: loopback unless told (--host, --interface);
    its dashboard on loopback always. A worker runs code that any peer reaching it sends."""
    dashboard = ["--dashboard-address", "127.0.0.1:0"]
    if args.interface:
        return ["--interface", args.interface, *dashboard]
    if args.host is None:
        scheduler_host = args.scheduler.rpartition("://")[2].rpartition(":")[0] or args.scheduler
        if not _on_this_machine(scheduler_host):
            parser.error(f"the scheduler {args.scheduler} is on another machine, and a worker listens on "
                         "loopback unless told: pass --host with this machine's address on the cluster's "
                         "network (or --interface NAME), and use TLS (--tls-ca-file, --tls-cert, --tls-key)")
    return ["--host", args.host or "127.0.0.1", *dashboard]


def _role_problem(scheduler: str, role: str, security=None) -> str | None:
    """Why a worker cannot take ``role`` at ``scheduler``, or None (Dask would only say
    'name taken' deep in a traceback)."""
    from .cluster import connect, worker_infos

    try:
        with connect(scheduler, timeout=10, security=security) as cluster:
            held = {str(info.get("name")): address for address, info in worker_infos(cluster.client).items()}
    except ValueError as error:  # a TLS scheduler, no certificate given
        return str(error)
    except (OSError, TimeoutError) as error:
        return f"cannot reach the scheduler at {scheduler} ({error}); start one with `dask scheduler`"
    if role in held:
        return (f"role {role} is already held by the worker at {held[role]}; the cluster's roles are "
                f"{', '.join(sorted(held))}: choose a free --task")
    return None
