"""Chrome-trace (Perfetto) files of benchmark steps: who computed, sent, or waited, when.

A trace is a list of :class:`TraceEvent` (a task, an activity, a name, start and end
in ``time.time()`` seconds); :func:`chrome_trace` turns it into the JSON that
``chrome://tracing`` and https://ui.perfetto.dev open: one process per task
(``worker/0``, ``ps/0``), one thread per activity (``compute``, ``send/recv``,
``waiting for PS``, ``waiting for data``, ``step``), each event an ``"X"``
(complete) event in microseconds from the first one. Events of one activity that
overlap (collectives in flight together, a PS serving two workers) go to extra
threads (``send/recv #2``), since a viewer draws one thread's events as a stack.

>>> events = [TraceEvent("worker/0", "compute", "compute", 10.0, 10.5),
...           TraceEvent("worker/0", "waiting for data", "data", 9.9, 10.0)]
>>> trace = chrome_trace(events)
>>> [(e["name"], e["ts"], e["dur"]) for e in trace["traceEvents"] if e["ph"] == "X"]
[('data', 0.0, 100000.0), ('compute', 100000.0, 500000.0)]

Timestamps of tasks on different machines are only as aligned as their clocks.
"""

from __future__ import annotations

import json
from typing import NamedTuple

from ..cluster.spec import device_role

__all__ = ["TraceEvent", "chrome_trace", "write_chrome_trace", "check_chrome_trace",
           "timeline_events", "ACTIVITIES"]

#: the activities (threads) a benchmark trace shows, in display order
ACTIVITIES = ("step", "waiting for data", "compute", "send/recv", "waiting for PS", "waiting for workers")


class TraceEvent(NamedTuple):
    """One span of one task's activity; ``start`` and ``end`` in ``time.time()`` seconds."""

    process: str  # the task: "worker/0", "ps/0"
    activity: str  # the thread it is drawn on: one of ACTIVITIES
    name: str
    start: float
    end: float


def _activity(task_role: str, label: str, has_ps: bool) -> str:
    """The activity of a runtime timeline label (``compute``, ``wait``, ``collective NAME``)."""
    if label.startswith("collective"):
        return "send/recv"
    if label == "wait":
        # a worker waits for the variables (or the barrier) on the PS; a PS waits for gradients
        return "waiting for PS" if task_role.startswith("worker/") and has_ps else "waiting for workers"
    return label


def timeline_events(timeline, for_replica: str, has_ps: bool) -> list[TraceEvent]:
    """:class:`TraceEvent` of a step's ``RunStats.timeline`` ``[(task, label, start, end)]``,
    run by the replica ``for_replica``. A task other than the replica's own (a PS) gets the
    replica in its activity, so the steps of concurrent replicas do not overlap on one thread."""
    events = []
    for task, label, start, end in timeline:
        name = device_role(task)
        activity = _activity(name, label, has_ps)
        if name != for_replica:
            activity = f"{activity} (for {for_replica})"
        events.append(TraceEvent(name, activity, label, start, end))
    return events


def _lanes(events: list[TraceEvent]) -> list[tuple[TraceEvent, str]]:
    """Each event with its thread: its activity, or ``activity #k`` where it overlaps another."""
    lanes_end: dict[tuple[str, str], list[float]] = {}
    placed = []
    for event in sorted(events, key=lambda e: (e.start, e.end)):
        ends = lanes_end.setdefault((event.process, event.activity), [])
        lane = next((i for i, end in enumerate(ends) if end <= event.start), len(ends))
        if lane == len(ends):
            ends.append(event.end)
        ends[lane] = event.end
        placed.append((event, event.activity if lane == 0 else f"{event.activity} #{lane + 1}"))
    return placed


def _thread_order(thread: str) -> tuple[int, str]:
    base = thread.split(" (for ")[0].split(" #")[0]
    return (ACTIVITIES.index(base) if base in ACTIVITIES else len(ACTIVITIES), thread)


def _process_order(process: str) -> tuple[int, str]:
    job, _, index = process.partition("/")
    return ({"worker": 0, "ps": 1}.get(job, 2), f"{job}/{int(index):06d}" if index.isdigit() else process)


def _metadata(kind: str, pid: int, tid: int, name: str, order: int) -> list[dict]:
    """A viewer's name and position for a process or a thread."""
    return [{"ph": "M", "name": f"{kind}_name", "pid": pid, "tid": tid, "args": {"name": name}},
            {"ph": "M", "name": f"{kind}_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": order}}]


def chrome_trace(events: list[TraceEvent]) -> dict:
    """The Chrome-trace JSON object (``{"traceEvents": [...]}``) of ``events``."""
    placed = _lanes([e for e in events if e.end >= e.start])
    origin = min((e.start for e, _ in placed), default=0.0)
    processes = sorted({e.process for e, _ in placed}, key=_process_order)
    pids = {name: pid for pid, name in enumerate(processes, 1)}
    threads = sorted({(e.process, thread) for e, thread in placed},
                     key=lambda key: (pids[key[0]], _thread_order(key[1])))
    tids = {key: tid for tid, key in enumerate(threads, 1)}
    trace = []
    for name, pid in pids.items():
        trace += _metadata("process", pid, 0, name, pid)
    for (process, thread), tid in tids.items():
        trace += _metadata("thread", pids[process], tid, thread, tid)
    for event, thread in placed:
        trace.append({"ph": "X", "name": event.name, "cat": event.activity, "pid": pids[event.process],
                      "tid": tids[(event.process, thread)], "ts": round((event.start - origin) * 1e6, 3),
                      "dur": round((event.end - event.start) * 1e6, 3)})
    return {"traceEvents": trace, "displayTimeUnit": "ms"}


def write_chrome_trace(path: str, events: list[TraceEvent]) -> dict:
    """Write ``events`` as a Chrome trace to ``path``; returns the JSON object written."""
    trace = chrome_trace(events)
    with open(path, "w") as f:
        json.dump(trace, f)
    return trace


def check_chrome_trace(trace: dict) -> None:
    """Raise ``ValueError`` naming the first problem that would keep a viewer from opening ``trace``.

    >>> check_chrome_trace({"traceEvents": [{"ph": "X", "name": "compute", "pid": 1, "tid": 1, "ts": 0}]})
    Traceback (most recent call last):
    ...
    ValueError: event 0 ('compute') lacks 'dur'
    """
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise ValueError("a Chrome trace is an object with a 'traceEvents' list")
    required = {"X": ("name", "pid", "tid", "ts", "dur"), "M": ("name", "pid", "args")}
    for i, event in enumerate(trace["traceEvents"]):
        phase = event.get("ph")
        if phase not in required:
            raise ValueError(f"event {i} has phase {phase!r}; this writer only makes 'X' and 'M' events")
        missing = [key for key in required[phase] if key not in event]
        if missing:
            raise ValueError(f"event {i} ({event.get('name')!r}) lacks {', '.join(map(repr, missing))}")
        if phase == "X" and (event["dur"] < 0 or event["ts"] < 0):
            raise ValueError(f"event {i} ({event['name']!r}) has a negative time: ts {event['ts']}, "
                             f"dur {event['dur']}")
        if not all(isinstance(event[key], int) for key in ("pid", "tid") if key in event):
            raise ValueError(f"event {i} ({event.get('name')!r}): pid and tid must be integers")
