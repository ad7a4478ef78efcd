"""Fault injection on real processes: `dflow train` / `dflow bench` with workers and PS tasks
SIGKILLed mid-training, and Ctrl-C / SIGTERM sent to the whole process group as a terminal does;
and in-graph replication (one client, a tower per worker) whose worker/1 or ps/0 is SIGKILLed while
a Session or a MonitoredTrainingSession runs steps in a loop.

Every test waits for events (an output line, a checkpoint file) with a deadline, never for a
fixed time, and measures what it claims: seconds from the kill to the failure being reported
(detect), to training going on again (recover), and the steps lost. `-s` prints the numbers.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# a kill after the first checkpoint, one recovery and the rest: 160 steps (300 took 60-150 s a test
# on a 2-core machine, mostly steps after the recovery)
STEPS, CHECKPOINT_EVERY = 160, 40
# a run may go on as slowly as a loaded machine makes it (20 images/sec beside other work): a wait
# for a line, or for the end, fails when the command printed nothing for STALL_S (a progress line
# comes every 10 steps), and RUN_CAP_S bounds a whole run; the properties timed are fixed deadlines
STALL_S = 180
RUN_CAP_S = 1500
DETECT_LIMIT_S = 20  # the "within seconds", with room for a loaded machine
RECOVERED = re.compile(r"recovered from the loss of (\S+) in ([\d.]+) s: restored .* \(step (\d+)\); "
                       r"training had reached step (\d+): (\d+) steps lost")
FAILURE = re.compile(r"failure (\d+)/(\d+): (\S+) \(at (\S+)\) died or left the cluster at .*"
                     r"detected ([\d.]+) s after it died")


class Run:
    """A ``dflow`` command in a process group of its own, its output lines timestamped as they come."""

    def __init__(self, *argv: str, scratch=None, env: dict | None = None):
        path = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "PYTHONPATH": path, **(env or {})}
        if scratch is not None:  # where Dask's workers and scheduler keep their scratch directories
            env["DASK_TEMPORARY_DIRECTORY"] = str(scratch)
        self.process = subprocess.Popen([sys.executable, "-m", "dflow", *argv], stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)
        self.lines: list[tuple[float, str]] = []
        self.started = time.monotonic()
        self.changed = threading.Condition()
        self.seen: set[int] = set()  # every descendant's pid, for the no-orphans check
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            with self.changed:
                self.lines.append((time.monotonic(), line.rstrip("\n")))
                self.changed.notify_all()
        with self.changed:
            self.lines.append((time.monotonic(), None))
            self.changed.notify_all()

    @property
    def output(self) -> str:
        return "\n".join(line for _, line in self.lines if line is not None)

    def _deadline(self, timeout: float | None, began: float) -> float:
        """When a wait begun at ``began`` gives up: ``timeout`` s later, or (None) STALL_S after the
        command's last line (RUN_CAP_S after it started at the latest)."""
        if timeout is not None:
            return began + timeout
        last = self.lines[-1][0] if self.lines else self.started
        return min(max(last, began) + STALL_S, self.started + RUN_CAP_S)

    def _gave_up(self, timeout: float | None) -> str:
        return f"within {timeout} s" if timeout is not None else f"(nothing printed for {STALL_S} s)"

    def wait_for(self, pattern: str, timeout: float | None = None,
                 after: float = 0.0) -> tuple[float, re.Match]:
        """The time and match of the first line after ``after`` that matches ``pattern``."""
        regex, began = re.compile(pattern), time.monotonic()
        with self.changed:
            while True:
                for when, line in self.lines:
                    if line is None:
                        raise AssertionError(f"the command ended before {pattern!r}:\n{self.output}")
                    if when >= after and regex.search(line):
                        return when, regex.search(line)
                left = self._deadline(timeout, began) - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no line matched {pattern!r} {self._gave_up(timeout)}:\n"
                                         f"{self.output}")
                self.changed.wait(left)

    def wait_for_step(self, step: int) -> float:
        """When a progress line at ``step`` or later came."""
        after = 0.0
        while True:
            when, match = self.wait_for(r"^step (\d+)/", after=after)
            if int(match[1]) >= step:
                return when
            after = when + 1e-9

    def descendants(self) -> list[psutil.Process]:
        try:
            found = psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        self.seen.update(p.pid for p in found)
        return found

    def role_pid(self, role: str) -> int:
        """The pid of the worker process that holds ``role`` now (started by this command)."""
        for process in self.descendants():
            try:
                cmdline = process.cmdline()
            except psutil.NoSuchProcess:
                continue
            if "--name" in cmdline and cmdline[cmdline.index("--name") + 1] == role:
                return process.pid
        raise AssertionError(f"no process of this run holds {role}")

    def kill_role(self, role: str) -> float:
        pid = self.role_pid(role)
        os.kill(pid, signal.SIGKILL)
        return time.monotonic()

    def signal_group(self, signum: int) -> float:
        """As a terminal does: the signal to every process of the command's foreground group."""
        self.descendants()
        os.killpg(self.process.pid, signum)
        return time.monotonic()

    def finish(self, timeout: float | None = None) -> int:
        """The command's exit status, once it ends."""
        began = time.monotonic()
        while True:
            left = self._deadline(timeout, began) - time.monotonic()
            if left <= 0:
                raise AssertionError(f"the command still ran {self._gave_up(timeout)}:\n{self.output}")
            try:
                return self.process.wait(min(left, 5.0))
            except subprocess.TimeoutExpired:
                continue

    def orphans(self) -> list[int]:
        """Processes this run started that outlive it (waiting a little for them to exit)."""
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            left = [pid for pid in self.seen if psutil.pid_exists(pid)
                    and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
            if not left:
                return []
            time.sleep(0.2)
        return left

    def close(self) -> None:
        """Never leave processes behind, also when a test fails."""
        for pid in [*(p.pid for p in self.descendants()), self.process.pid]:
            try:
                psutil.Process(pid).kill()
            except psutil.NoSuchProcess:
                pass
        self.process.wait(30)


@pytest.fixture
def runs():
    started: list[Run] = []

    def start(*argv: str, scratch=None, env=None) -> Run:
        started.append(Run(*argv, scratch=scratch, env=env))
        return started[-1]

    yield start
    for run in started:
        run.close()


MODES = {"async": [], "sync": ["--sync"], "allreduce": ["--variable_update", "allreduce", "--ps", "0"]}


def train_args(checkpoint_dir, *extra: str) -> list[str]:
    return ["train", "--model", "deep_mnist", "--dataset", "digits", "--workers", "2", "--steps", str(STEPS),
            "--checkpoint_every", str(CHECKPOINT_EVERY), "--log_every", "10",
            "--checkpoint_dir", str(checkpoint_dir), *extra]


def scratch_left(scratch) -> list[str]:
    """The scratch directories Dask's workers and scheduler left (its lock files stay, empty)."""
    where = scratch / "dask-scratch-space"
    return sorted(name for name in os.listdir(where) if not name.endswith(".lock")) if where.exists() else []


def report(scenario: str, **numbers) -> None:
    print(f"\nFAULT {scenario}: " + ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}"
                                            for k, v in numbers.items()))


# ---- a dead role: recovered ----------------------------------------------------------------------
@pytest.mark.parametrize("role,mode", [("worker/1", "async"), ("worker/0", "async"), ("ps/0", "async"),
                                       ("worker/1", "sync"), ("worker/0", "sync"), ("ps/0", "sync"),
                                       ("worker/1", "allreduce")])
def test_a_killed_role_comes_back_and_training_finishes(tmp_path, runs, role, mode):
    run = runs(*train_args(tmp_path, *MODES[mode]))
    run.wait_for_step(CHECKPOINT_EVERY + 20)  # past the first checkpoint
    killed = run.kill_role(role)
    detected, failure = run.wait_for(FAILURE.pattern, timeout=DETECT_LIMIT_S * 3, after=killed)
    assert failure[3] == role, failure[0]
    recovered, line = run.wait_for(RECOVERED.pattern, after=killed)
    restored, reached, lost = int(line[3]), int(line[4]), int(line[5])
    assert line[1] == role and lost == reached - restored
    assert lost <= CHECKPOINT_EVERY + 20, run.output  # one checkpoint interval (+ a progress line's steps)
    assert run.finish() == 0, run.output
    assert re.search(rf"^step {STEPS}/{STEPS} ", run.output, re.M) and "test accuracy" in run.output
    assert "Traceback" not in run.output, run.output
    assert detected - killed < DETECT_LIMIT_S, run.output
    report(f"{mode} kill {role}", detect_s=detected - killed, recover_s=recovered - killed,
           steps_lost=lost, restored_step=restored)


# ---- a dead role without recovery: fails fast, naming it --------------------------------------------
@pytest.mark.parametrize("role,mode", [("worker/1", "async"), ("worker/1", "sync"), ("ps/0", "sync"),
                                       ("worker/0", "allreduce")])
def test_a_killed_role_fails_the_run_within_seconds_naming_it(tmp_path, runs, role, mode):
    run = runs(*train_args(tmp_path, "--max_failures", "0", *MODES[mode]))
    run.wait_for_step(20)
    killed = run.kill_role(role)
    code = run.finish(timeout=DETECT_LIMIT_S * 3)
    ended = time.monotonic()
    assert code == 1, run.output
    assert re.search(rf"^dflow train: error: {role} \(at tcp://\S+\) died or left the cluster", run.output,
                     re.M), run.output
    assert "Traceback" not in run.output
    assert run.orphans() == []
    report(f"{mode} kill {role}, --max_failures 0", fail_s=ended - killed)


# ---- Ctrl-C and SIGTERM ------------------------------------------------------------------------------
SIGNALS = pytest.mark.parametrize("signum,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
                                  ids=["SIGINT", "SIGTERM"])


@SIGNALS
def test_a_signal_to_the_process_group_saves_a_checkpoint_and_exits(tmp_path, runs, signum, code):
    run = runs(*train_args(tmp_path / "checkpoints", "--steps", "100000"), scratch=tmp_path)
    _, step = run.wait_for(r"^step (\d+)/")
    signalled = run.signal_group(signum)
    assert run.finish(timeout=30) == code, run.output
    took = time.monotonic() - signalled
    _, saved = run.wait_for(r"the latest checkpoint is \S+model\.ckpt-(\d+)")
    assert int(saved[1]) >= int(step[1]), run.output  # the last one is the step it stopped at
    assert "Traceback" not in run.output and "KeyboardInterrupt" not in run.output, run.output
    assert "WARNING" not in run.output, run.output
    assert run.orphans() == []
    assert not [name for name in os.listdir(tmp_path / "checkpoints") if name.startswith(".tmp")]
    assert scratch_left(tmp_path) == []
    report(f"{signal.Signals(signum).name} to dflow train's group", exit_s=took,
           final_checkpoint=int(saved[1]))


@SIGNALS
def test_a_signal_to_the_process_group_stops_bench(runs, signum, code):
    run = runs("bench", "--model", "mnist_dnn", "--num_batches", "100000", "--num_warmup_batches", "2",
               "--batch_size", "8")
    run.wait_for(r"^\d+\timages/sec", timeout=180)  # timed steps running
    signalled = run.signal_group(signum)
    assert run.finish(timeout=30) == code, run.output
    took = time.monotonic() - signalled
    assert "Traceback" not in run.output and "KeyboardInterrupt" not in run.output, run.output
    assert run.orphans() == []
    report(f"{signal.Signals(signum).name} to dflow bench's group", exit_s=took)


def test_an_unreachable_scheduler_is_one_line_within_seconds(runs):
    run = runs("train", "--model", "mnist_dnn", "--dataset", "digits", "--cluster", "tcp://127.0.0.1:1")
    assert run.finish(timeout=90) == 1  # (Python's start alone takes 10-15 s on a loaded machine)
    errors = [line for line in run.output.splitlines() if line.startswith("dflow train: error")]
    assert len(errors) == 1 and "tcp://127.0.0.1:1" in errors[0], run.output
    assert "Traceback" not in run.output
    # from the first line (settings read, data loaded) to the error: the connection's wait (was 122 s)
    began, _ = run.wait_for(r"^training ")
    ended, _ = run.wait_for(r"^dflow train: error")
    took = ended - began
    assert took < 30, took
    report("unreachable scheduler", error_s=took)


# ---- a hand-started cluster: a nanny restarts the killed worker at a new address ---------------------
class HandStartedCluster:
    """`dask scheduler` and `dflow worker` processes (each with its nanny), as the README starts them."""

    def __init__(self, tmp_path, roles: list[tuple[str, int]]):
        path = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
        self.env = {**os.environ, "PYTHONPATH": path, "DASK_LOGGING__DISTRIBUTED": "error"}
        self.processes: list[subprocess.Popen] = []
        try:
            self._start_all(tmp_path / "scheduler.json", roles)
        except BaseException:
            self.close()
            raise

    def _start_all(self, scheduler_file, roles) -> None:
        import json

        import dflow as tf

        self._start(sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port",
                    "0", "--no-dashboard", "--scheduler-file", str(scheduler_file))
        deadline = time.monotonic() + 60
        while not scheduler_file.exists() or not scheduler_file.read_text().strip():
            assert time.monotonic() < deadline, "the scheduler did not start"
            time.sleep(0.1)
        self.address = json.loads(scheduler_file.read_text())["address"]
        self.workers = {f"{job}/{task}": self._start(sys.executable, "-m", "dflow", "worker", "--scheduler",
                                                     self.address, "--job", job, "--task", str(task))
                        for job, task in roles}
        tf.cluster.connect(self.address, roles=list(self.workers), timeout=120).close()  # all joined

    def _start(self, *argv: str) -> subprocess.Popen:
        self.processes.append(subprocess.Popen(argv, env=self.env, start_new_session=True,
                                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        return self.processes[-1]

    def worker_process(self, role: str) -> int:
        """The pid of the process the nanny of ``role`` runs its worker in."""
        children = psutil.Process(self.workers[role].pid).children()
        workers = [p.pid for p in children if "spawn_main" in " ".join(p.cmdline())]
        assert len(workers) == 1, [p.cmdline() for p in children]
        return workers[0]

    def close(self) -> None:
        for process in self.processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)


def test_a_worker_its_nanny_restarts_at_a_new_address_is_recovered(tmp_path, runs):
    cluster = HandStartedCluster(tmp_path, [("ps", 0), ("worker", 0), ("worker", 1)])
    try:
        run = runs(*train_args(tmp_path / "checkpoints", "--cluster", cluster.address))
        run.wait_for_step(CHECKPOINT_EVERY + 20)
        os.kill(cluster.worker_process("worker/1"), signal.SIGKILL)
        killed = time.monotonic()
        detected, failure = run.wait_for(FAILURE.pattern, timeout=DETECT_LIMIT_S * 3, after=killed)
        assert failure[3] == "worker/1"
        recovered, line = run.wait_for(RECOVERED.pattern, after=killed)
        assert run.finish() == 0, run.output
        assert "test accuracy" in run.output and "Traceback" not in run.output
        report("hand-started cluster, nanny restarts worker/1", detect_s=detected - killed,
               recover_s=recovered - killed, steps_lost=int(line[5]))
    finally:
        cluster.close()


# ---- elastic allreduce: the ring goes on without the dead worker ----------------------------------------
ELASTIC = re.compile(r"^elastic: going on with (\d+) of (\d+) workers \(([^)]*)\); global batch now "
                     r"(\d+) images \(was (\d+)\)", re.M)


def test_an_elastic_ring_goes_on_without_a_killed_chief(tmp_path, runs):
    """3 allreduce workers, the chief (worker/0) SIGKILLed: worker/1 and worker/2 rebuild the ring and
    train to the step budget on a smaller global batch; nothing waits for worker/0 to come back."""
    steps = 160
    run = runs(*train_args(tmp_path / "checkpoints", "--workers", "3", "--steps", str(steps),
                           *MODES["allreduce"], "--elastic"), scratch=tmp_path)
    run.wait_for_step(CHECKPOINT_EVERY + 20)
    killed = run.kill_role("worker/0")
    detected, failure = run.wait_for(FAILURE.pattern, timeout=DETECT_LIMIT_S * 3, after=killed)
    assert failure[3] == "worker/0", failure[0]
    recovered, line = run.wait_for(RECOVERED.pattern, after=killed)
    restored, reached, lost = int(line[3]), int(line[4]), int(line[5])
    assert line[1] == "worker/0" and lost == reached - restored
    assert lost <= CHECKPOINT_EVERY + 20, run.output
    assert run.finish() == 0, run.output
    (going_on,) = ELASTIC.findall(run.output)
    assert going_on[:3] == ("2", "3", "worker/1, worker/2"), going_on
    assert int(going_on[3]) * 3 == int(going_on[4]) * 2, going_on  # the global batch shrank by a third
    assert re.search(rf"^step {steps}/{steps} ", run.output, re.M) and "test accuracy" in run.output
    finished = re.findall(r"^worker (\d+): \d+ steps", run.output, re.M)
    assert finished == ["1", "2"], run.output  # the dead chief did not come back into the ring
    assert "Traceback" not in run.output, run.output
    assert scratch_left(tmp_path) == []  # also the killed worker's (its restart purged it)
    report("elastic allreduce, 3 workers, kill worker/0", detect_s=detected - killed,
           recover_s=recovered - killed, steps_lost=lost, restored_step=restored)


# ---- in-graph replication: one client, a tower on each worker, the variables on ps/0 ----------------------
IN_GRAPH_WORKERS, KILL_AT_STEP = 2, 35  # (the checkpoints fall at steps 1, 11, 21, 31, ...)


def in_graph_towers():
    """The in-graph model of tests/test_replication.py: each worker computes the gradients of its
    half of the batch, ps/0 averages them and applies them. (x, y, train_op, global_step)."""
    import dflow as tf

    x, y = tf.placeholder(tf.float32, [16, 4]), tf.placeholder(tf.float32, [16, 1])
    optimizer = tf.train.GradientDescentOptimizer(0.05)
    tower_grads = []
    for i, (xi, yi) in enumerate(zip(tf.split(x, IN_GRAPH_WORKERS), tf.split(y, IN_GRAPH_WORKERS))):
        with tf.device(tf.train.replica_device_setter(ps_tasks=1, worker_device=f"/job:worker/task:{i}")), \
                tf.variable_scope("model", reuse=i > 0):
            w = tf.get_variable("w", [4, 1], initializer=tf.zeros_initializer())
            loss = tf.reduce_mean(tf.square(tf.matmul(xi, w) - yi))
            tower_grads.append(optimizer.compute_gradients(loss, [w]))
    with tf.device("/job:ps/task:0"):
        step = tf.train.get_or_create_global_step()
        averaged = [(tf.add_n([g[k][0] for g in tower_grads]) / float(IN_GRAPH_WORKERS), var)
                    for k, (_, var) in enumerate(tower_grads[0])]
        train_op = optimizer.apply_gradients(averaged, global_step=step)
    return x, y, train_op, step


def in_graph_batch(step: int):
    import numpy as np

    xs = np.random.default_rng(step).normal(size=(16, 4)).astype(np.float32)
    return xs, (xs @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32)).astype(np.float32)


class KillAtStep:
    """Kills the process of ``role`` from another thread once the training loop has reached
    ``step``: the kill lands while the loop goes on running steps, as a real failure would."""

    def __init__(self, cluster, role: str, step: int):
        self.process = cluster.dask_cluster.workers[role]  # dflow's WorkerProcess: restarts it
        self.step, self.killed_at = step, None
        self.reached, self.killed = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._kill, daemon=True)
        self.thread.start()

    def after_step(self, step: int) -> None:
        if step >= self.step:
            self.reached.set()

    def _kill(self) -> None:
        if self.reached.wait(RUN_CAP_S):
            os.kill(self.process.process.pid, signal.SIGKILL)
            self.killed_at = time.monotonic()
            self.killed.set()

    def wait(self) -> float:
        """When the role was killed (the loop must reach the step within STALL_S)."""
        assert self.killed.wait(STALL_S), f"the training loop did not reach step {self.step}"
        return self.killed_at


class TrainingLoop:
    """``loop()`` in a thread of its own, so that a step that hangs fails the test at a deadline
    rather than hanging it: ``ended`` is set with ``result`` or ``error``."""

    def __init__(self, loop):
        self.result = self.error = self.ended_at = None
        self.ended = threading.Event()
        threading.Thread(target=self._run, args=(loop,), daemon=True).start()

    def _run(self, loop) -> None:
        try:
            self.result = loop()
        except BaseException as error:  # noqa: BLE001 - the test asserts on it
            self.error = error
        self.ended_at = time.monotonic()
        self.ended.set()

    def wait(self, timeout: float, what: str) -> None:
        assert self.ended.wait(timeout), f"{what}: the training loop still ran {timeout} s later (a hang)"


@pytest.mark.parametrize("runner", ["direct", "dask"])
@pytest.mark.parametrize("role", ["worker/1", "ps/0"])
def test_an_in_graph_step_fails_within_seconds_naming_a_killed_role(role, runner):
    """A plain Session's step loop: the step running when the role dies (or the next) raises
    UnavailableError naming the role's task, within seconds, and nothing hangs."""
    import dflow as tf

    task = "/job:{}/task:{}".format(*role.split("/"))
    with tf.Graph().as_default() as graph, tf.cluster.local(ps=1, workers=IN_GRAPH_WORKERS) as cluster:
        x, y, train_op, step = in_graph_towers()
        killer = KillAtStep(cluster, role, KILL_AT_STEP)
        with tf.Session(cluster.target, config=tf.ConfigProto(runner=runner)) as sess:
            sess.run(tf.global_variables_initializer())

            def train_until_a_step_fails():
                with graph.as_default():
                    for i in range(100_000):  # bounded by the deadline below
                        xs, ys = in_graph_batch(i)
                        killer.after_step(int(sess.run([train_op, step], {x: xs, y: ys})[1]))

            loop = TrainingLoop(train_until_a_step_fails)
            killed_at = killer.wait()
            loop.wait(DETECT_LIMIT_S, f"{role} killed")
    assert isinstance(loop.error, tf.errors.UnavailableError), loop.error
    assert task in str(loop.error), loop.error
    failed_s = loop.ended_at - killed_at
    assert failed_s < DETECT_LIMIT_S, failed_s
    report(f"in-graph Session (runner={runner}), kill {role}", fail_s=failed_s)
    print(f"  {type(loop.error).__name__}: {loop.error}")


@pytest.mark.parametrize("runner", ["direct", "dask"])
@pytest.mark.parametrize("role", ["worker/1", "ps/0"])
def test_an_in_graph_monitored_session_recovers_a_killed_role(tmp_path, role, runner):
    """MonitoredTrainingSession with a checkpoint_dir, as TF users train in-graph: the step that fails
    names the role, the role's process comes back (restarted under its name), the chief restores the
    latest checkpoint and the loop reaches its step budget, losing at most one checkpoint interval."""
    import numpy as np

    import dflow as tf

    last_step, every = 80, 10
    task = "/job:{}/task:{}".format(*role.split("/"))
    with tf.Graph().as_default() as graph, tf.cluster.local(ps=1, workers=IN_GRAPH_WORKERS) as cluster:
        x, y, train_op, step = in_graph_towers()
        killer = KillAtStep(cluster, role, KILL_AT_STEP)
        hooks = [tf.train.StopAtStepHook(last_step=last_step)]
        back = {}

        def train_to_the_budget():
            with graph.as_default(), tf.train.MonitoredTrainingSession(
                    master=cluster.target, checkpoint_dir=str(tmp_path), save_checkpoint_steps=every,
                    hooks=hooks, recovery_timeout_secs=120, config=tf.ConfigProto(runner=runner)) as sess:
                i = 0
                while not sess.should_stop():
                    xs, ys = in_graph_batch(i)
                    killer.after_step(int(sess.run([train_op, step], {x: xs, y: ys})[1]))
                    if sess.recoveries:
                        back.setdefault("at", time.monotonic())
                    i += 1
                return int(sess.run(step)), sess.run(tf.trainable_variables()[0]), sess.recoveries

        loop = TrainingLoop(train_to_the_budget)
        killed_at = killer.wait()
        loop.wait(STALL_S, f"{role} killed")
        assert loop.error is None, repr(loop.error)
        assert len(killer.process.deaths) == 1  # it came back, under its name
    final_step, w, recoveries = loop.result
    assert final_step == last_step and np.isfinite(w).all()
    # on a loaded machine the first step after a recovery may come before the role is back up (its
    # process still starting): a second recovery, from the same checkpoint, within the budget of 3
    assert 1 <= len(recoveries) <= 2, recoveries
    for recovery in recoveries:
        assert "UnavailableError" in recovery.error and task in recovery.error, recovery.error
        assert recovery.step_reached >= KILL_AT_STEP and recovery.checkpoint is not None, recovery
        assert 0 <= recovery.steps_lost <= every + 1, recovery  # (+1: a step may finish as the kill lands)
    recovery = recoveries[0]
    report(f"in-graph MonitoredTrainingSession (runner={runner}), kill {role}",
           recover_s=back["at"] - killed_at, recovery_s=recovery.seconds, steps_lost=recovery.steps_lost,
           restored_step=recovery.step_restored)
    print(f"  {recovery.error}")
