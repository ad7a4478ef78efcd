"""``dflow bench script``: time a TF 1.x script's training steps on dflow and on TensorFlow.

    $ dflow bench script --calls 100 --rounds 3 mnist_deep.py --data_dir MNIST_data
    $ dflow bench script --baseline ../dflow-v0.1 my_model.py    # against another dflow tree

(``dflow bench script``'s options come before the script; what follows it is the script's.)

The script runs unchanged, in a fresh process per framework and round (interleaved rounds,
as ``dflow bench --local --peers``): on dflow with ``import tensorflow`` importing dflow
(:mod:`dflow.scripts`), on TensorFlow through TF 2's ``tf.compat.v1`` with v2 behaviour off
(TF 1.x's ``tensorflow.examples.tutorials.mnist`` served by dflow's reader on both, which TF 2
no longer ships). Every ``Session.run`` is timed, and every call of a ``make_callable``
callable; the most frequent fetch list is the training step, and once it has run
``warmup + calls`` times the script is stopped. Printed: each run's
median ms a step, then per framework the median over rounds with its spread, and per round
the ratio to dflow (its ms over dflow's: above 1, dflow is faster). A script that fails on a
framework is reported with its last error line and log, and the others still run.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

__all__ = ["add_arguments", "main", "time_script", "FRAMEWORKS"]

#: the frameworks a script can be timed on (``--frameworks``); ``--baseline`` adds "baseline"
FRAMEWORKS = ("dflow", "tensorflow")


class _Enough(BaseException):
    """Stops the script once its step has been timed often enough (not an Exception: a
    script's ``except Exception`` does not swallow it)."""


def _signature(fetches) -> str:
    """A fetch list's names, as one string: the same fetches give the same string."""
    if isinstance(fetches, (list, tuple)):
        return "[" + ", ".join(_signature(f) for f in fetches) + "]"
    if isinstance(fetches, dict):  # keys may be objects (a MonitoredSession's hooks): their kind
        items = sorted((_signature(k) if isinstance(k, str) or hasattr(k, "name") else type(k).__name__,
                        _signature(v)) for k, v in fetches.items())
        return "{" + ", ".join(f"{k}: {v}" for k, v in items) + "}"
    return str(getattr(fetches, "name", fetches))


def _time_session_runs(session_class, calls: int, warmup: int, timings: dict) -> None:
    """Wrap ``session_class.run``, and the callables its ``make_callable`` returns (TF's skip
    ``run``), to record each call's seconds under its fetches' signature: the calls of the
    script's own thread (its queue runners' enqueues are not its steps), each once (dflow's
    callables call ``run``)."""
    original_run, original_make_callable = session_class.run, session_class.make_callable
    script_thread = threading.current_thread()
    timing = threading.local()

    def timed(fetches, call, *args, **kwargs):
        if threading.current_thread() is not script_thread or getattr(timing, "busy", False):
            return call(*args, **kwargs)
        timing.busy = True
        start = time.perf_counter()
        try:
            result = call(*args, **kwargs)
        finally:
            timing.busy = False
        seconds = time.perf_counter() - start
        times = timings[_signature(fetches)]
        times.append(seconds)
        if len(times) >= warmup + calls:
            raise _Enough()
        return result

    def run(self, fetches, *args, **kwargs):
        return timed(fetches, original_run, self, fetches, *args, **kwargs)

    def make_callable(self, fetches, *args, **kwargs):
        step = original_make_callable(self, fetches, *args, **kwargs)
        return lambda *values, **options: timed(fetches, step, *values, **options)

    session_class.run, session_class.make_callable = run, make_callable


def _use_tf_keras_where_installed() -> None:
    """``TF_USE_LEGACY_KERAS=1`` where ``tf_keras`` is installed and the environment says nothing:
    from TensorFlow 2.16 on, Keras 3 refuses the TF 1.x layers that scripts use
    (``tf.layers.dense``, ``tf.nn.rnn_cell.BasicRNNCell``: "not available with Keras 3"), and
    ``tf_keras`` is TF 1.x's Keras, which TensorFlow takes instead when told so before it loads."""
    import importlib.util

    if "TF_USE_LEGACY_KERAS" not in os.environ and importlib.util.find_spec("tf_keras") is not None:
        os.environ["TF_USE_LEGACY_KERAS"] = "1"


def _prepare(framework: str, checkout: str | None):
    """Make ``import tensorflow`` import ``framework``; the Session class whose runs are timed."""
    if framework == "tensorflow":
        _use_tf_keras_where_installed()
        import tensorflow

        v1 = tensorflow.compat.v1
        v1.disable_v2_behavior()
        from tensorflow.python.client import session

        sys.modules["tensorflow"] = v1
        _serve_mnist_tutorial_to_tensorflow()
        return session.BaseSession
    from dflow.scripts import alias_tensorflow  # this tree's: a checkout before it has none

    if checkout is not None:
        from .peers import use_checkout

        use_checkout(checkout)
    alias_tensorflow()
    import dflow

    return dflow.Session


def _serve_mnist_tutorial_to_tensorflow() -> None:
    """``tensorflow.examples.tutorials.mnist``, which TF 2 no longer ships, from dflow's: the
    reader (NumPy) as it is, the model module loaded again under TensorFlow's name, where its
    imports from the package above (``from .... import matmul, ...``) take TensorFlow's ops."""
    import importlib.util
    import types

    from dflow.examples.tutorials.mnist import input_data
    from dflow.examples.tutorials.mnist import mnist as dflow_mnist

    name = "tensorflow.examples.tutorials.mnist"
    spec = importlib.util.spec_from_file_location(f"{name}.mnist", dflow_mnist.__file__)
    model = importlib.util.module_from_spec(spec)
    parent = None
    for part in ("examples", "tutorials", "mnist"):
        package = types.ModuleType(f"{parent.__name__ if parent else 'tensorflow'}.{part}")
        package.__path__ = []  # only the modules set here
        sys.modules[package.__name__] = package
        # (an attribute of the package above too: ``import tensorflow.examples.tutorials.mnist.
        # input_data as input_data`` takes each part from the one above it)
        setattr(sys.modules["tensorflow"] if parent is None else parent, part, package)
        parent = package
    parent.input_data, parent.mnist = input_data, model
    sys.modules[f"{name}.input_data"], sys.modules[f"{name}.mnist"] = input_data, model
    spec.loader.exec_module(model)


def _child(framework: str, checkout: str | None, calls: int, warmup: int, result_path: str, script: str,
           script_args: list[str]) -> None:
    """One timed run, in its own process: the script until its step ran ``warmup + calls`` times
    (or it ended); the timings go to ``result_path`` as JSON."""
    import traceback

    from dflow.scripts import run_script

    timings: dict[str, list[float]] = collections.defaultdict(list)
    result = {"framework": framework, "ended": "finished", "error": None}
    start = time.perf_counter()
    try:
        _time_session_runs(_prepare(framework, checkout), calls, warmup, timings)
        run_script(script, script_args)
    except _Enough:
        result["ended"] = "stopped"
    except SystemExit as exit:
        if exit.code not in (None, 0):
            result.update(ended="failed", error=f"exit status {exit.code}")
    except BaseException as error:  # noqa: BLE001  (reported, with the traceback in the log)
        traceback.print_exc()
        result.update(ended="failed", error=f"{type(error).__name__}: {error}".splitlines()[0][:300])
    result["seconds"] = time.perf_counter() - start
    result["timings"] = timings
    with open(result_path, "w") as f:
        json.dump(result, f)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # the script's own threads (queue runners) must not keep the process


def _step_of(result: dict, warmup: int) -> dict | None:
    """The script's training step in one run: the most frequent fetch list, its calls after
    ``warmup`` and their median seconds; None where no call is left after the warm-up."""
    if not result.get("timings"):
        return None
    signature, times = max(result["timings"].items(), key=lambda item: len(item[1]))
    timed = times[warmup:]
    if not timed:
        return None
    return {"fetches": signature, "calls": len(timed), "median_s": statistics.median(timed),
            "min_s": min(timed), "max_s": max(timed)}


def time_script(script: str, script_args: list[str], frameworks: list[str], calls: int = 50, warmup: int = 10,
                rounds: int = 3, timeout_s: float = 600.0, baseline: str | None = None,
                log_dir: str | None = None, echo=print) -> list[dict]:
    """Run ``script`` on each of ``frameworks`` (and ``baseline``: a dflow source tree) in
    fresh processes, ``rounds`` times interleaved; one record per run (framework, round, how
    it ended, its step's median seconds, its log)."""
    log_dir = log_dir or tempfile.mkdtemp(prefix="dflow-bench-script-")
    runs = [*frameworks, *(["baseline"] if baseline else [])]
    records = []
    for round_number in range(1, rounds + 1):
        for framework in runs:
            log = os.path.join(log_dir, f"{framework}-{round_number}.log")
            record = _run_once(script, script_args, framework, baseline if framework == "baseline" else None,
                               calls, warmup, timeout_s, log)
            record["round"] = round_number
            records.append(record)
            echo(_describe(record))
    return records


def _run_once(script, script_args, framework, checkout, calls, warmup, timeout_s, log_path) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as result_file:
        result_path = result_file.name
    command = [sys.executable, "-m", "dflow.bench.script", "--child", "dflow" if checkout else framework,
               checkout or "-", str(calls), str(warmup), result_path, script, *script_args]
    record = {"framework": framework, "log": log_path}
    try:
        with open(log_path, "w") as log:
            subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s,
                           start_new_session=True, check=False)
        with open(result_path) as f:
            result = json.load(f)
    except subprocess.TimeoutExpired:
        return {**record, "ended": "timed out",
                "error": f"did not stop within --timeout {timeout_s:g} s (the script's own steps, or a hang)"}
    except (OSError, ValueError):
        return {**record, "ended": "failed",
                "error": f"the run died before it reported ({_last_line(log_path)})"}
    finally:
        os.unlink(result_path)
    step = _step_of(result, warmup)
    record.update(ended=result["ended"], error=result["error"], seconds=result["seconds"], step=step)
    if step is None and result["error"] is None:
        counts = {k: len(v) for k, v in result["timings"].items()}
        record["error"] = (f"nothing to time: the script's most frequent Session.run ran "
                           f"{max(counts.values(), default=0)} times, all within --warmup {warmup}")
    return record


def _last_line(path: str) -> str:
    with open(path, errors="replace") as f:
        lines = [line.strip() for line in f if line.strip()]
    return lines[-1] if lines else "no output"


def _describe(record: dict) -> str:
    head = f"round {record['round']} {record['framework']}:"
    step = record.get("step")
    if step is None:
        return f"{head} {record['ended']}: {record['error']} (log: {record['log']})"
    note = ""
    if record["ended"] != "stopped":
        note = f" (the script {record['ended']} first{': ' + record['error'] if record.get('error') else ''})"
    return (f"{head} {step['calls']} steps of {_short(step['fetches'])}, "
            f"median {step['median_s'] * 1e3:.2f} ms "
            f"[{step['min_s'] * 1e3:.2f}-{step['max_s'] * 1e3:.2f}]{note}")


def _short(signature: str, width: int = 60) -> str:
    return signature if len(signature) <= width else signature[:width - 3] + "..."


def summarize(records: list[dict]) -> list[str]:
    """Per framework the median step over rounds with its spread; per other framework, the
    ratio of its step to dflow's in each round (above 1: dflow is faster)."""
    by_framework = collections.defaultdict(dict)
    for record in records:
        if record.get("step"):
            by_framework[record["framework"]][record["round"]] = record["step"]["median_s"]
    lines = ["| framework | rounds | ms a step | steps/sec | dflow's speed against it |",
             "| --- | ---: | ---: | ---: | ---: |"]
    dflow = by_framework.get("dflow", {})
    for framework, per_round in by_framework.items():
        values = list(per_round.values())
        ratio = "" if framework == "dflow" else "-"
        ratios = [per_round[r] / dflow[r] for r in per_round if r in dflow]
        if framework != "dflow" and ratios:
            ratio = f"{statistics.median(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}]"
        median = statistics.median(values)
        lines.append(f"| {framework} | {len(values)} | {median * 1e3:.2f} [{min(values) * 1e3:.2f}-"
                     f"{max(values) * 1e3:.2f}] | {1 / median:.1f} | {ratio} |")
    return lines


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("script", help="a TF 1.x Python script, run unchanged (`import tensorflow as tf`); "
                                  "this command's options come before it")
    p.add_argument("script_args", nargs=argparse.REMAINDER, help="the script's own arguments")
    p.add_argument("--calls", type=int, default=50,
                   help="steps timed per run, after the warm-up (default 50)")
    p.add_argument("--warmup", type=int, default=10, help="steps run first and not timed (default 10)")
    p.add_argument("--rounds", type=int, default=3,
                   help="interleaved rounds, a fresh process each (default 3)")
    p.add_argument("--frameworks", default=None,
                   help="comma-separated, of dflow,tensorflow (default: both where TensorFlow is installed)")
    p.add_argument("--baseline", metavar="TREE", help="also time the dflow of this source tree")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds one run may take (default 600)")
    p.add_argument("--log_dir", help="keep each run's output here (default: a temporary folder)")
    p.add_argument("--output", help="write every run's record here as JSON")


def main(args: argparse.Namespace, echo=print) -> int:
    import importlib.util

    tensorflow_here = importlib.util.find_spec("tensorflow") is not None
    if args.frameworks is None:
        frameworks = ["dflow", "tensorflow"] if tensorflow_here else ["dflow"]
        if not tensorflow_here:
            echo("TensorFlow is not installed here (pip install tensorflow): timing dflow alone")
    else:
        frameworks = [f.strip() for f in args.frameworks.split(",") if f.strip()]
        unknown = [f for f in frameworks if f not in FRAMEWORKS]
        if unknown or not frameworks:
            raise SystemExit(f"dflow bench script: --frameworks takes {', '.join(FRAMEWORKS)}, "
                             f"got {args.frameworks!r}")
        if "tensorflow" in frameworks and not tensorflow_here:
            raise SystemExit("dflow bench script: --frameworks tensorflow, but TensorFlow is not installed "
                             "here (pip install tensorflow)")
    if not os.path.isfile(args.script):
        raise SystemExit(f"dflow bench script: {args.script}: no such script")
    if args.baseline and not os.path.isfile(os.path.join(args.baseline, "dflow", "__init__.py")):
        raise SystemExit(f"dflow bench script: --baseline {args.baseline} is not a dflow source tree "
                         "(it has no dflow/__init__.py)")
    if min(args.calls, args.rounds) < 1 or args.warmup < 0 or args.timeout <= 0:
        raise SystemExit("dflow bench script: --calls and --rounds take 1 or more, --warmup 0 or more, "
                         "--timeout a positive number of seconds")
    if args.log_dir:
        os.makedirs(args.log_dir, exist_ok=True)
    runs = ", ".join(frameworks + (["baseline"] if args.baseline else []))
    echo(f"{args.script}: {args.rounds} rounds of {runs}, "
         f"each a fresh process: {args.warmup} steps of warm-up, then {args.calls} timed")
    records = time_script(args.script, args.script_args, frameworks, args.calls, args.warmup, args.rounds,
                          args.timeout, args.baseline, args.log_dir, echo)
    for line in summarize(records):
        echo(line)
    if args.output:
        with open(args.output, "w") as f:
            json.dump(records, f, indent=1)
    failed = sorted({r["framework"] for r in records if r.get("step") is None})
    if failed:
        echo(f"no step timed on: {', '.join(failed)} (see the lines above and their logs)")
    return 1 if "dflow" in failed else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        framework, checkout, calls, warmup, result_path, script, *script_args = sys.argv[2:]
        _child(framework, None if checkout == "-" else checkout, int(calls), int(warmup), result_path, script,
               script_args)
