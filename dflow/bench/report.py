"""Tables and plots of benchmark records, and the numbers the papers derived from them.

A *record* is one line of a sweep's JSONL file: one configuration's result as
:func:`dflow.bench.harness.run_benchmark` returns it (``settings``,
``images_per_sec_mean`` ...). Everything here is a pure function over a list of
records:

- :func:`rows` flattens records into table rows and adds the derived numbers a
  :class:`Figure` asks for (speedup, scaling efficiency, I/O overhead, steps/sec,
  time to a fixed number of steps);
- :func:`best_rows` keeps, per configuration, the best over some settings (the
  PS count, as Bugliarello et al. 2017 reported it);
- :func:`markdown_table` and :func:`plot` draw them.

>>> record = {"settings": {"model": "cifar10", "batch_size": 100, "num_workers": 1,
...                        "devices_per_node": 1, "num_ps": 1, "data_dir": None},
...           "images_per_sec_mean": 500.0, "images_per_sec_std": 5.0}
>>> figure = Figure(x="num_workers", ys=("images_per_sec",), series=("batch_size",))
>>> rows([record], figure)[0]["speedup"]
1.0
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Figure", "load_records", "rows", "best_rows", "markdown_table", "plot",
           "speedup", "scaling_efficiency", "io_overhead_percent", "COLUMN_TITLES"]

#: settings that identify a configuration in a table row (the rest are constant in a sweep)
ROW_SETTINGS = ("model", "batch_size", "num_workers", "num_ps", "devices_per_node", "variable_update",
                "sync", "network", "ps_strategy", "data_format", "cluster")

COLUMN_TITLES = {
    "model": "model", "batch_size": "batch/device", "num_workers": "workers", "num_ps": "PS",
    "devices_per_node": "devices/node", "devices": "devices", "variable_update": "variable update",
    "sync": "sync", "network": "network", "ps_strategy": "PS placement", "data_format": "format",
    "cluster": "cluster", "data": "data", "images_per_sec": "images/sec", "images_per_sec_std": "± std",
    "speedup": "speedup", "scaling_efficiency": "scaling efficiency", "ideal_images_per_sec": "ideal",
    "io_overhead_percent": "I/O overhead %", "steps_per_sec": "steps/sec",
    "time_to_steps_s": "time to steps (s)", "accuracy": "accuracy", "ps_tried": "PS tried",
    "communication_share": "communication share", "measured_time_s": "measured time (s)",
    # dflow bench advise
    "compute_ms": "compute ms/step", "communication_ms": "communication ms/step", "best": "",
    "predicted": "predicted images/sec", "measured": "measured images/sec", "error_percent": "error %",
}


@dataclass(frozen=True)
class Figure:
    """What a sweep's table and plot show, in the paper's terms.

    ``x``: the settings key (or ``"devices"``: workers x devices per node) on the x-axis;
    ``ys``: one subplot per column drawn against it; ``series``: keys whose values make one
    line each (colour by the first, line style by the second); ``panels``: keys whose values
    make one subplot each (the paper's separate figures, e.g. 1 and 10 Gbit/s); ``derived``:
    the derived columns of the table; ``best_of``: keys to maximise images/sec over, per row;
    ``ideal``: draw the ideal (linear) speedup line; ``target_steps``: the fixed number of
    global steps that ``time_to_steps_s`` refers to.
    """

    x: str
    ys: tuple[str, ...] = ("images_per_sec",)
    series: tuple[str, ...] = ()
    panels: tuple[str, ...] = ()
    derived: tuple[str, ...] = ("speedup",)
    best_of: tuple[str, ...] = ()
    log_x: bool = False
    ideal: bool = False
    target_steps: int | None = None
    title: str = ""
    extra_columns: tuple[str, ...] = ()

    def columns(self, present: Iterable[str] = ()) -> list[str]:
        """The table's columns: panels, series, x, images/sec, derived, then extras."""
        keys = [*self.panels, *self.series, self.x, *self.best_of, "images_per_sec", "images_per_sec_std",
                *self.derived, *self.extra_columns]
        if self.best_of:
            keys.append("ps_tried")
        present = set(present)
        seen: list[str] = []
        for key in keys:
            if key not in seen and (not present or key in present):
                seen.append(key)
        return seen


# ---- reading -----------------------------------------------------------------------------------
def load_records(path: str) -> list[dict]:
    """The records of a JSONL file; a torn last line (a sweep killed mid-write) is skipped.

    A missing file is an empty sweep.
    """
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if number != len(lines):  # only the last line can be half-written
                raise ValueError(f"{path}:{number} is not a JSON record: {line[:80]!r}") from None
    return records


# ---- derived numbers ---------------------------------------------------------------------------
def speedup(images_per_sec: float, baseline_images_per_sec: float) -> float:
    """Throughput against the baseline's: ``img/s(N) / img/s(baseline)``."""
    return images_per_sec / baseline_images_per_sec


def scaling_efficiency(images_per_sec: float, devices: int, baseline_images_per_sec: float,
                       baseline_devices: int = 1) -> float:
    """Bugliarello et al.'s ``img/s(N) / (N x img/s(1))``, against a baseline of any size.

    >>> scaling_efficiency(1018.18, 8, 138.23)  # Piz Daint, 8 GPUs (their Table 1)
    0.9207...
    """
    return images_per_sec / (devices / baseline_devices * baseline_images_per_sec)


def io_overhead_percent(synthetic_images_per_sec: float, real_images_per_sec: float) -> float:
    """Bugliarello et al.'s Fig. 11: ``(synthetic - real) / synthetic x 100``.

    >>> round(io_overhead_percent(1018.18, 911.84), 2)
    10.44
    """
    return (synthetic_images_per_sec - real_images_per_sec) / synthetic_images_per_sec * 100


def _row(record: dict) -> dict:
    settings = record.get("settings", {})
    row = {key: settings.get(key) for key in ROW_SETTINGS if key in settings}
    row["devices"] = settings.get("num_workers", 1) * settings.get("devices_per_node", 1)
    row["data"] = "synthetic" if settings.get("data_dir") is None else "real"
    ips = record.get("images_per_sec_mean")
    row["images_per_sec"] = ips
    row["images_per_sec_std"] = record.get("images_per_sec_std")
    row["accuracy"] = record.get("accuracy")
    row["measured_time_s"] = record.get("time_to_steps_s")
    # a global step is one worker device's batch, so global steps/sec = images/sec / batch
    batch = settings.get("batch_size")
    row["steps_per_sec"] = ips / batch if ips and batch else None
    compute, comm = record.get("compute_s_per_step"), record.get("communication_s_per_step")
    row["communication_share"] = comm / (compute + comm) if compute is not None and comm else None
    return row


def _group_key(row: dict, leave_out: Iterable[str]) -> tuple:
    leave_out = set(leave_out)
    return tuple(sorted((k, str(v)) for k, v in row.items() if k in ROW_SETTINGS + ("data",)
                        and k not in leave_out))


def _add_scaling(table: list[dict], figure: Figure) -> None:
    """speedup and scaling efficiency against the smallest configuration of each line."""
    scale_keys = {"num_workers", "devices_per_node", "devices", figure.x, *figure.best_of}
    baselines: dict[tuple, dict] = {}
    for row in table:
        if row["images_per_sec"] is None:
            continue
        key = _group_key(row, scale_keys)
        if key not in baselines or row["devices"] < baselines[key]["devices"]:
            baselines[key] = row
    for row in table:
        base = baselines.get(_group_key(row, scale_keys))
        ok = base is not None and row["images_per_sec"] is not None and base["images_per_sec"]
        row["speedup"] = speedup(row["images_per_sec"], base["images_per_sec"]) if ok else None
        row["scaling_efficiency"] = (scaling_efficiency(row["images_per_sec"], row["devices"],
                                                        base["images_per_sec"], base["devices"])
                                     if ok else None)
        row["ideal_images_per_sec"] = (base["images_per_sec"] * row["devices"] / base["devices"]
                                       if ok else None)


def _add_io_overhead(table: list[dict], best_of: Iterable[str] = ()) -> None:
    """On each real-data row, the overhead against the same configuration on synthetic data;
    after a best-of, the best against the best (the paper's peak against peak), whatever
    configuration each was."""
    leave_out = ["data", *best_of]
    synthetic = {_group_key(r, leave_out): r for r in table if r["data"] == "synthetic"}
    for row in table:
        twin = synthetic.get(_group_key(row, leave_out))
        row["io_overhead_percent"] = (
            io_overhead_percent(twin["images_per_sec"], row["images_per_sec"])
            if row["data"] == "real" and twin and twin["images_per_sec"] and row["images_per_sec"]
            else None)


def rows(records: Sequence[dict], figure: Figure) -> list[dict]:
    """One row per configuration with the figure's derived numbers (best over ``best_of`` first).

    Speedup and scaling efficiency are against the line's smallest configuration (1 worker
    where it was measured); I/O overhead pairs each real-data row with its synthetic twin;
    ``time_to_steps_s`` is ``target_steps / steps_per_sec`` when the figure names a target.
    """
    table = [_row(r) for r in records]
    if figure.best_of:
        table = best_rows(table, figure.best_of)
    _add_scaling(table, figure)
    _add_io_overhead(table, figure.best_of)
    for row in table:
        steps = row["steps_per_sec"]
        row["time_to_steps_s"] = (figure.target_steps / steps if figure.target_steps and steps
                                  else row["measured_time_s"])
    return sorted(table, key=lambda r: [_sort_value(r.get(k)) for k in
                                        (*figure.panels, *figure.series, figure.x)])


def best_rows(table: Sequence[dict], over: Sequence[str]) -> list[dict]:
    """Per configuration, the row with the most images/sec over the settings ``over``.

    The kept row says which PS counts were tried (``ps_tried``), as the paper's tables
    list the PS count that won.
    """
    best: dict[tuple, dict] = {}
    tried: dict[tuple, set] = {}
    for row in table:
        key = _group_key(row, over)
        tried.setdefault(key, set()).add(row.get("num_ps"))
        if row["images_per_sec"] is not None and (
                key not in best or row["images_per_sec"] > best[key]["images_per_sec"]):
            best[key] = row
    return [{**row, "ps_tried": _span(tried[key])} for key, row in best.items()]


def _span(values: set) -> str:
    numbers = sorted(v for v in values if v is not None)
    if numbers and numbers == list(range(numbers[0], numbers[-1] + 1)) and len(numbers) > 2:
        return f"{numbers[0]}-{numbers[-1]}"
    return ", ".join(map(str, numbers))


def _sort_value(value) -> tuple:
    """Numbers first, then text in natural order ("1gbit" before "10gbit")."""
    if isinstance(value, int | float):
        return (0, value, "")
    leading = re.match(r"\d+", str(value))
    return (1, int(leading.group()) if leading else -1, str(value))


# ---- tables ------------------------------------------------------------------------------------
def _cell(key: str, value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if key in ("scaling_efficiency", "communication_share"):
        return f"{value * 100:.1f}%"
    if key == "accuracy":
        return f"{value:.4f}"
    if isinstance(value, float):
        return f"{value:.2f}" if abs(value) < 100 else f"{value:,.1f}"
    return str(value)


def markdown_table(table: Sequence[dict], columns: Sequence[str],
                   titles: Mapping[str, str] | None = None) -> str:
    """A Markdown table of ``table``'s ``columns`` (numbers right-aligned; ``titles`` rename them).

    >>> print(markdown_table([{"num_workers": 2, "images_per_sec": 912.5}],
    ...                      ["num_workers", "images_per_sec"]))
    | workers | images/sec |
    | ---: | ---: |
    | 2 | 912.5 |
    """
    titles = {**COLUMN_TITLES, **(titles or {})}
    header = "| " + " | ".join(titles.get(c, c) for c in columns) + " |"
    align = "| " + " | ".join("---:" if _numeric(table, c) else "---" for c in columns) + " |"
    body = ["| " + " | ".join(_cell(c, row.get(c)) for c in columns) + " |" for row in table]
    return "\n".join([header, align, *body])


def _numeric(table: Sequence[dict], column: str) -> bool:
    values = [row.get(column) for row in table if row.get(column) is not None]
    return bool(values) and all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


# ---- plots -------------------------------------------------------------------------------------
COLORS = ("tab:red", "tab:green", "tab:blue", "tab:orange", "tab:purple", "tab:brown", "tab:cyan")
LINE_STYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P")


def _pyplot():
    try:
        import matplotlib
    except ImportError as error:
        raise ImportError("plots need matplotlib: pip install dflow[plot]") from error
    matplotlib.use("Agg")  # files only: no display on a cluster node
    import matplotlib.pyplot as pyplot

    return pyplot


def _values(table: Sequence[dict], keys: Sequence[str]) -> list[tuple]:
    distinct = {tuple(row.get(k) for k in keys) for row in table}
    return sorted(distinct, key=lambda values: [_sort_value(v) for v in values])


def _label(keys: Sequence[str], values: tuple) -> str:
    return ", ".join(f"{COLUMN_TITLES.get(k, k)} {v}" for k, v in zip(keys, values))


def plot(table: Sequence[dict], figure: Figure, paths: Sequence[str]) -> list[str]:
    """Draw ``table`` (from :func:`rows`) as the paper drew it; save to each of ``paths``.

    One subplot per panel value and y column, one line per series value (colour by the
    first series key, line style and marker by the second), the ideal speedup as a thin
    grey line when the figure asks for it. Returns the paths written.
    """
    pyplot = _pyplot()
    ys = [y for y in figure.ys if any(row.get(y) is not None for row in table)] or list(figure.ys[:1])
    panels = _values(table, figure.panels) if figure.panels else [()]
    fig, axes = pyplot.subplots(len(ys), len(panels), squeeze=False,
                                figsize=(4.8 * len(panels), 3.4 * len(ys)))
    for column, panel in enumerate(panels):
        in_panel = [r for r in table if tuple(r.get(k) for k in figure.panels) == panel]
        for line, y in enumerate(ys):
            _draw(axes[line][column], in_panel, figure, y, _label(figure.panels, panel))
    if figure.title:
        fig.suptitle(figure.title, fontsize="medium", wrap=True)
    fig.tight_layout()
    for path in paths:
        fig.savefig(path, dpi=120)
    pyplot.close(fig)
    return list(paths)


def _draw(axis, table: Sequence[dict], figure: Figure, y: str, panel_title: str) -> None:
    first = _values(table, figure.series[:1]) if figure.series else [()]
    second = _values(table, figure.series[1:2]) if len(figure.series) > 1 else [()]
    for series in _values(table, figure.series) if figure.series else [()]:
        points = sorted((r for r in table if tuple(r.get(k) for k in figure.series) == series
                         and r.get(y) is not None and r.get(figure.x) is not None),
                        key=lambda r: r[figure.x])
        if not points:
            continue
        style = second.index(series[1:2]) if len(series) > 1 else 0
        axis.plot([r[figure.x] for r in points], [r[y] for r in points],
                  color=COLORS[first.index(series[:1]) % len(COLORS)],
                  linestyle=LINE_STYLES[style % len(LINE_STYLES)], marker=MARKERS[style % len(MARKERS)],
                  label=_label(figure.series, series) or None)
        _draw_ideal(axis, points, figure, y)
    if figure.log_x:
        axis.set_xscale("log")
    axis.set_xlabel(COLUMN_TITLES.get(figure.x, figure.x))
    axis.set_ylabel(COLUMN_TITLES.get(y, y))
    if panel_title:
        axis.set_title(panel_title)
    axis.grid(True, alpha=0.3)
    if axis.get_legend_handles_labels()[0]:
        axis.legend(fontsize="small")


def _draw_ideal(axis, points: Sequence[dict], figure: Figure, y: str) -> None:
    """The ideal line of Wang et al.'s Fig. 9: the baseline times the number of devices."""
    if not figure.ideal or y not in ("images_per_sec", "speedup"):
        return
    if y == "images_per_sec":
        ideal = [r.get("ideal_images_per_sec") for r in points]
    else:  # speedup: N / N0
        ideal = [r["devices"] / points[0]["devices"] for r in points]
    if all(v is not None for v in ideal):
        axis.plot([r[figure.x] for r in points], ideal, color="grey", linewidth=0.8, label=None)
