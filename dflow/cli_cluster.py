"""``dflow train`` on a cluster, and ``dflow worker``.

Training is between-graph replication, as the seeds trained: every worker task runs
the same program (:func:`_replica`) that builds the model where
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
import signal
import sys
import threading
import time
import uuid

import numpy as np

from .errors import OpError
from .train.variable_update import VARIABLE_UPDATES

SYNCHRONOUS_UPDATES = ("replicated", "allreduce")  # every replica applies the same summed update

__all__ = ["add_cluster_arguments", "run_cluster_train", "add_worker_arguments", "run_worker",
           "add_tls_arguments", "tls_from_arguments", "tls_configured"]

_PROGRESS_POLL_S = 0.5


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
                            "(--ps/--workers then come from its roles)")
    where.add_argument("--secure", action="store_true",
                       help="the embedded cluster speaks TLS with a certificate made for it alone")
    add_tls_arguments(where)


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
    if args.security is not None and not args.cluster:
        parser.error("--tls-ca-file/--tls-cert/--tls-key join a running cluster (--cluster tls://HOST:PORT); "
                     "--secure makes the embedded cluster speak TLS")
    if args.secure and (args.cluster or args.local):
        parser.error("--secure starts the embedded cluster with TLS; a running cluster (--cluster) takes "
                     "--tls-ca-file/--tls-cert/--tls-key")
    if args.ps < 0 or args.workers < 1:
        parser.error(f"--ps must be 0 or more and --workers at least 1, got --ps {args.ps} "
                     f"--workers {args.workers}")
    if args.variable_update in SYNCHRONOUS_UPDATES:
        args.sync = True
    if not args.local and not args.cluster:  # (a running cluster's roles are known once connected)
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

    if args.cluster:
        cluster = tf.cluster.connect(args.cluster, security=getattr(args, "security", None))
        args.ps, args.workers = (cluster.spec.num_tasks(job) for job in ("ps", "worker"))
        return cluster
    return tf.cluster.local(ps=args.ps, workers=args.workers, secure=getattr(args, "secure", False))


def run_cluster_train(args, settings, steps: int, report) -> int:
    """Train on the cluster; ``report(total, n, weights)`` prints the chief's evaluation."""
    import distributed

    from .distributed.replicate import start_replicas

    with _open_cluster(args) as cluster:
        print(f"cluster: {args.ps} PS + {args.workers} workers, {args.variable_update}, "
              f"{'synchronous' if args.sync else 'asynchronous'} updates; roles {cluster.spec.roles()}; "
              f"dashboard {cluster.dashboard_link or '(install bokeh to serve it)'}", flush=True)
        progress = distributed.Queue(f"dflow-train-{uuid.uuid4().hex[:8]}", client=cluster.client)
        futures = start_replicas(_replica, cluster, cluster.target, cluster.spec, args, settings, steps,
                                 progress.name)
        try:
            with _interrupt_at_safe_points() as interrupted:
                _follow(progress, futures, steps, interrupted, args.logdir)
            results = cluster.client.gather(futures)
        except FloatingPointError as e:
            print(f"dflow train: error: {e}", file=sys.stderr)
            return 1
        except (OSError, ValueError, RuntimeError, OpError) as e:  # raised in a replica
            print(f"dflow train: error on the cluster: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            cluster.client.run(_stop_replicas)  # they end their step and close their sessions
            cluster.client.gather(futures, errors="skip")
            raise
        finally:
            cluster.client.cancel(futures)
    for task, result in enumerate(results):
        staleness = result["staleness"]
        print(f"worker {task}: {result['steps']} steps, last loss {result['loss']:.4f}, staleness "
              f"mean {np.mean(staleness) if staleness else 0:.2f} max {max(staleness, default=0)}")
    report(*results[0]["evaluation"])
    return 0


@contextlib.contextmanager
def _interrupt_at_safe_points():
    """Ctrl-C sets a flag that the progress loop turns into KeyboardInterrupt between calls:
    raised inside a Dask client call, it would leave that call half done."""
    interrupted = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: interrupted.set())
    try:
        yield interrupted
    finally:
        signal.signal(signal.SIGINT, previous)


def _follow(progress, futures, steps: int, interrupted: threading.Event, logdir: str | None = None) -> None:
    """Print the chief's progress lines until every replica has finished (or one failed)."""
    from .cli import _log_scalars
    begin, first = time.perf_counter(), 0
    while not interrupted.is_set():
        if progress.qsize():  # (a get with a timeout would log an error on the scheduler each time)
            item = progress.get()
            if item[0] == "restored":
                print(f"restored {item[1]} (step {item[2]})", flush=True)
                begin, first = time.perf_counter(), item[2]
                continue
            step, loss, rate = item
            eta = (time.perf_counter() - begin) / max(step - first, 1) * (steps - step)
            print(f"step {step}/{steps}  loss {loss:.4f}  images/sec {rate:.1f}  "
                  f"(eta {datetime.timedelta(seconds=round(eta))})", flush=True)
            _log_scalars(logdir, step, loss=loss, images_per_sec=rate)
            continue
        failed = [f for f in futures if f.status == "error"]
        if failed:
            failed[0].result()  # raises the replica's error here
        if all(f.done() for f in futures):
            return
        interrupted.wait(_PROGRESS_POLL_S)
    raise KeyboardInterrupt


_STOP = threading.Event()  # set in a worker process by the client on Ctrl-C: its replica stops


def _stop_replicas() -> None:
    _STOP.set()


def _replica(task_index: int, target: str, spec_of_cluster, args, settings, steps: int, progress_name: str):
    """One worker's training program; returns its steps, last loss, staleness and (chief) evaluation."""
    import distributed

    import dflow as tf
    from dflow.cli import _build, _evaluate, _load
    from dflow.models import get_model

    model = get_model(args.model)
    data = _load(settings["dataset"], model)
    chief = task_index == 0
    tf.set_random_seed(args.seed)  # the chief's initializers give the weights local training would
    update = tf.train.VariableUpdate(args.variable_update, spec_of_cluster, task_index, sync=args.sync,
                                     devices_per_node=args.devices_per_node)
    with tf.device(update.device()):
        g = _build(tf, model, settings, args, optimizer_wrapper=update.optimizer)
    hooks = [tf.train.StopAtStepHook(last_step=steps)] + update.hooks()
    batches = data.train_batches(settings["batch_size"], seed=args.seed + task_index,
                                 shard=(task_index, args.workers))  # each worker reads its own examples
    images_per_step = update.images_per_step(settings["batch_size"])
    queue = distributed.Queue(progress_name) if chief else None
    losses, staleness, local_steps = [], [], 0
    _STOP.clear()
    checkpoint_dir = args.checkpoint_dir if update.saves_checkpoints else None
    with tf.train.MonitoredTrainingSession(
            target, is_chief=update.is_chief, hooks=hooks, checkpoint_dir=checkpoint_dir,
            save_checkpoint_steps=args.checkpoint_every if checkpoint_dir else None) as sess:
        last_step, last_time = int(sess.run(g.global_step)), time.perf_counter()
        if queue is not None and last_step > 0:  # the chief restored a checkpoint
            queue.put(("restored", tf.train.latest_checkpoint(args.checkpoint_dir), last_step))
        reported = last_step // args.log_every
        recent = []
        while not sess.should_stop() and not _STOP.is_set():
            x, y = next(batches)
            feed = {g.inputs: x, g.targets: y}
            if g.keep_prob is not None:
                feed[g.keep_prob] = settings["keep_prob"]
            try:
                _, loss, step = sess.run([g.train_op, g.loss, g.global_step], feed)
            except tf.errors.CancelledError:
                break  # sync training ended while this replica waited at the barrier
            if not np.isfinite(loss):
                raise FloatingPointError(f"the loss is {loss} on worker {task_index} near step {step}; "
                                         "try a lower --learning_rate")
            local_steps += 1
            losses.append(float(loss))
            recent.append(float(loss))
            staleness.append(sess.last_run_stats.staleness or 0)
            step = int(step) + 1  # the step was read before this run's update
            if queue is not None and (step // args.log_every > reported or step >= steps):
                now = time.perf_counter()
                queue.put((min(step, steps), float(np.mean(recent)),
                           (step - last_step) * images_per_step / (now - last_time)))
                reported, last_step, last_time, recent = step // args.log_every, step, now, []
        evaluation = (_evaluate(sess, g, data, model.num_classes is None)
                      if chief and not _STOP.is_set() else None)
    return {"steps": local_steps, "loss": float(np.mean(losses[-20:])) if losses else float("nan"),
            "staleness": staleness, "evaluation": evaluation}


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
