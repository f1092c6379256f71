"""Gantt charts, memory and link plots, and the HTML report of a run.

Everything here is drawn from a run's records and summary, never by running
anything again: :func:`write_report` works on a finished run folder
(``summary.json``, ``timeline.csv``, ``links.csv``).

The Gantt chart (:func:`gantt_data`, :func:`gantt_figure`) has one row per
device that has records, grouped by pipeline stage (the ``stage`` tag of its
compute records) or else by node.  In each row the compute stream is the upper
lane: forward, backward, recomputation and other compute (optimizer, reduce)
in four colours, micro-batch numbers inside boxes wide enough for them; the
communication stream (transfers from the device, collectives it takes part in)
is a thinner lane below it; idle time is blank.  Dashed vertical lines mark
iteration ends (cumulative ``iteration_times_s``), and the bubble fraction of
each row is printed at its right end: ``per_device_bubble`` of the summary
when present, else idle / run time from the records (idle = neither compute
nor communication, as :func:`clustersim.metrics.device_breakdown`).

Large runs (more than :data:`MAX_ROWS` rows or :data:`MAX_BOXES` boxes) are
reduced and the title says how: one row per stage or node (its first device),
then the last iteration only, then no communication lane.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import matplotlib

matplotlib.use("Agg")

from matplotlib.figure import Figure  # noqa: E402

from .errors import Problem, ScenarioError  # noqa: E402
from .metrics import device_breakdown  # noqa: E402
from .outputs.trace import COMMUNICATION_KINDS, node_of  # noqa: E402
from .records import TIMELINE_COLUMNS, Record, sorted_records  # noqa: E402

MAX_ROWS = 64
"""Above this many devices the Gantt chart shows one row per stage or node."""
MAX_BOXES = 20_000
"""Above this many boxes the Gantt chart zooms to one iteration, then drops communication."""
MAX_TEXT_LABELS = 3_000
"""Micro-batch numbers drawn at most (text artists are slow)."""
BUSIEST_LINKS = 20
"""Links shown in the link utilisation plot."""

KINDS = ("forward", "backward", "recompute", "compute", "communication")
"""Box kinds, in legend order (``compute`` = other compute: optimizer, reduce, ...)."""
COLOURS = {
    "forward": "#4c72b0",
    "backward": "#dd8452",
    "recompute": "#9fb4e0",
    "compute": "#8c8c8c",
    "communication": "#55a868",
}
LEGEND = {
    "forward": "forward",
    "backward": "backward",
    "recompute": "recompute",
    "compute": "other compute",
    "communication": "communication",
}
COMPUTE_LANE = (0.08, 0.62)
"""Vertical extent (offset, height) of the compute lane inside a row of height 1."""
COMM_LANE = (0.72, 0.2)
"""Vertical extent of the communication lane, below the compute lane."""


class Box(NamedTuple):
    """One drawn box: a record in row ``row`` (index into :attr:`GanttData.rows`)."""

    row: int
    device: str
    kind: str
    start_s: float
    end_s: float
    microbatch: int
    label: str


@dataclass
class GanttData:
    """What the Gantt chart shows, for tests and for other renderers."""

    rows: list[str]
    """Device of each row, top to bottom."""
    groups: list[str]
    """Group (``stage 3``, ``rack0/node1``, or ``""``) of each row."""
    boxes: list[Box]
    bubble: list[float | None]
    """Bubble (idle) fraction of each row."""
    iteration_ends_s: list[float]
    title: str
    notes: list[str] = field(default_factory=list)
    """How a large run was reduced (also in the title)."""
    window_s: tuple[float, float] = (0.0, 0.0)
    """Time range shown."""


def box_kind(record: Record) -> str:
    """The kind a record is drawn as: forward, backward, recompute, compute or communication."""
    if record.kind in COMMUNICATION_KINDS:
        return "communication"
    label = record.label.lower()
    if label.startswith(("fwd", "forward")):
        return "forward"
    if label.startswith(("bwd", "backward")):
        return "backward"
    if label.startswith("recomp"):
        return "recompute"
    return "compute"


def _natural(name: str) -> tuple[Any, ...]:
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", name) if p)


def _row_groups(records: Sequence[Record]) -> dict[str, str]:
    """Group of each device: ``stage S`` (lowest stage tag of its compute) or its node."""
    stages: dict[str, int] = {}
    devices: dict[str, None] = {}
    for r in records:
        devices.setdefault(r.resource)
        if r.kind == "compute" and r.stage >= 0:
            stages[r.resource] = min(stages.get(r.resource, r.stage), r.stage)
    groups = {}
    for device in devices:
        if device in stages:
            groups[device] = f"stage {stages[device]}"
        else:
            node = node_of(device)
            groups[device] = "" if node == "cluster" else node
    return groups


def _ordered_rows(groups: Mapping[str, str]) -> list[str]:
    def key(device: str) -> tuple[Any, ...]:
        group = groups[device]
        if group.startswith("stage "):
            return (0, int(group.split()[1]), _natural(device))
        return (1, _natural(group), _natural(device))

    return sorted(groups, key=key)


def _bubbles(
    records: Sequence[Record], summary: Mapping[str, Any], rows: Sequence[str]
) -> list[float | None]:
    """Bubble fraction per row: the summary's ``per_device_bubble``, else idle / run time."""
    given = summary.get("per_device_bubble") or {}
    times = summary.get("iteration_times_s") or []
    run_s = float(sum(times)) if times else float(summary.get("makespan_s") or 0.0)
    if run_s <= 0:
        run_s = max((r.end_s for r in records), default=0.0)
    missing = [d for d in rows if _fraction(given.get(d)) is None]
    computed = device_breakdown(records, run_s, missing) if missing and run_s > 0 else {}
    out: list[float | None] = []
    for device in rows:
        value = _fraction(given.get(device))
        if value is None and device in computed:
            value = computed[device]["idle_s"] / run_s
        out.append(value)
    return out


def _fraction(value: Any) -> float | None:
    """A bubble fraction from a number or a mapping holding one (``mean``, ``bubble_fraction``)."""
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    if isinstance(value, Mapping):
        for key in ("bubble_fraction", "mean", "fraction", "bubble"):
            if key in value:
                return _fraction(value[key])
        numbers = [v for v in value.values() if isinstance(v, (int, float))]
        return sum(numbers) / len(numbers) if numbers else None
    if isinstance(value, (list, tuple)) and value:
        numbers = [v for v in value if isinstance(v, (int, float))]
        return sum(numbers) / len(numbers) if numbers else None
    return None


def _iteration_ends(summary: Mapping[str, Any]) -> list[float]:
    ends, total = [], 0.0
    for t in summary.get("iteration_times_s") or []:
        total += float(t)
        ends.append(total)
    return ends


def _title(summary: Mapping[str, Any], title: str | None) -> str:
    if title:
        return title
    name = str(summary.get("scenario") or "run")
    schedule = summary.get("schedule")
    if schedule:
        parts = [f"{schedule} schedule"]
        if summary.get("stages"):
            parts.append(f"p = {summary['stages']}")
        if summary.get("micro_batches"):
            parts.append(f"m = {summary['micro_batches']}")
        if (summary.get("chunks") or 1) > 1:
            parts.append(f"v = {summary['chunks']}")
        if (summary.get("tp") or 1) > 1:
            parts.append(
                f"tp = {summary['tp']}" + (" (SP)" if summary.get("sequence_parallel") else "")
            )
        if (summary.get("dp") or 1) > 1:
            parts.append(f"dp = {summary['dp']}")
        if summary.get("zero_stage"):
            parts.append(f"ZeRO-{summary['zero_stage']}")
        if summary.get("recompute"):
            parts.append(f"{summary.get('recompute_mode', 'full')} recompute")
        return f"{name}: " + ", ".join(parts)
    workload = summary.get("workload")
    return f"{name} ({workload})" if workload else name


def gantt_data(
    records: Iterable[Record], summary: Mapping[str, Any], title: str | None = None
) -> GanttData:
    """Rows, boxes, bubbles and iteration ends of the Gantt chart (see the module docstring)."""
    records = sorted_records(records)
    groups = _row_groups(records)
    rows = _ordered_rows(groups)
    notes: list[str] = []
    if len(rows) > MAX_ROWS:
        rows = _aggregate_rows(rows, groups, notes)
    bubble = _bubbles(records, summary, rows)
    ends = _iteration_ends(summary)
    end_s = max([r.end_s for r in records] + ends[-1:], default=0.0)
    window = (0.0, end_s)
    shown = set(rows)
    chosen = [r for r in records if r.resource in shown]
    if len(chosen) > MAX_BOXES and len(ends) > 1:
        window = (ends[-2], ends[-1])
        chosen = [r for r in chosen if r.end_s > window[0] and r.start_s < window[1]]
        notes.append(f"zoomed to iteration {len(ends)} of {len(ends)}")
    if len(chosen) > MAX_BOXES:
        chosen = [r for r in chosen if r.kind not in COMMUNICATION_KINDS]
        notes.append("communication not drawn")
    index = {device: i for i, device in enumerate(rows)}
    boxes = [
        Box(index[r.resource], r.resource, box_kind(r), r.start_s, r.end_s, r.microbatch, r.label)
        for r in chosen
    ]
    full_title = _title(summary, title)
    if notes:
        full_title += "\n(" + "; ".join(notes) + ")"
    return GanttData(
        rows=rows,
        groups=[groups[d] for d in rows],
        boxes=boxes,
        bubble=bubble,
        iteration_ends_s=ends,
        title=full_title,
        notes=notes,
        window_s=window,
    )


def _aggregate_rows(rows: list[str], groups: Mapping[str, str], notes: list[str]) -> list[str]:
    """One row per group (its first device); at most MAX_ROWS of them."""
    firsts: dict[str, str] = {}
    for device in rows:
        firsts.setdefault(groups[device] or device, device)
    kept = list(firsts.values())
    what = "stage" if all(groups[d].startswith("stage ") for d in kept) else "node"
    if len(kept) < len(rows) and len(firsts) > 1:
        notes.append(f"one row per {what} (its first device) of {len(rows)} devices")
    else:
        kept = rows
    if len(kept) > MAX_ROWS:
        notes.append(f"first {MAX_ROWS} of {len(kept)} rows")
        kept = kept[:MAX_ROWS]
    return kept


def gantt_figure(
    records: Iterable[Record], summary: Mapping[str, Any], title: str | None = None
) -> Figure:
    """The Gantt chart as a matplotlib Figure (Agg); ``fig.gantt_data`` holds its :class:`GanttData`."""
    return draw_gantt(gantt_data(records, summary, title))


def draw_gantt(data: GanttData) -> Figure:
    """Draw :class:`GanttData`: broken_barh per row and kind, one collection each.

    The figure widens with the densest row (about 0.09 in per compute box, 14
    to 32 in) and grows 0.34 in per row.
    """
    n = max(len(data.rows), 1)
    per_row = Counter(b.row for b in data.boxes if b.kind != "communication")
    width = min(max(14.0, 0.09 * max(per_row.values(), default=0)), 32.0)
    fig = Figure(figsize=(width, min(2.2 + 0.34 * n, 40.0)), layout="constrained")
    ax = fig.add_subplot()
    seconds, unit = _time_unit(data.window_s[1] - data.window_s[0])
    lo, hi = data.window_s[0] / seconds, max(data.window_s[1] / seconds, 1e-12)
    pt_per_unit = width * 72 * 0.8 / max(hi - lo, 1e-12)
    _draw_boxes(ax, data, seconds, pt_per_unit)
    ax.set_xlim(lo, hi)
    ax.set_ylim(n, 0)
    _label_rows(ax, data)
    _label_microbatches(ax, data, seconds, pt_per_unit)
    _iteration_lines(ax, data, seconds)
    _bubble_column(ax, data)
    ax.set_xlabel(f"simulated time ({unit})")
    ax.set_title(data.title, fontsize=11)
    ax.grid(axis="x", alpha=0.3)
    _legend(fig, ax)
    fig.gantt_data = data  # type: ignore[attr-defined]
    return fig


def _draw_boxes(ax: Any, data: GanttData, seconds: float, pt_per_unit: float) -> None:
    """One broken_barh collection per row and kind, gid ``gantt:KIND:ROW``.

    Compute boxes get a thin white edge, so neighbours stay apart, unless most
    of them are too narrow (under 4 pt) for it.
    """
    spans: dict[tuple[int, str], list[tuple[float, float]]] = {}
    for box in data.boxes:
        spans.setdefault((box.row, box.kind), []).append(
            (box.start_s / seconds, (box.end_s - box.start_s) / seconds)
        )
    widths = sorted(w for (_, kind), xs in spans.items() if kind != "communication" for _, w in xs)
    edged = bool(widths) and widths[len(widths) // 2] * pt_per_unit >= 4.0
    drawn = set()
    for (row, kind), xs in sorted(spans.items()):
        offset, height = COMM_LANE if kind == "communication" else COMPUTE_LANE
        coll = ax.broken_barh(
            xs,
            (row + offset, height),
            facecolors=COLOURS[kind],
            edgecolors="white" if edged and kind != "communication" else "none",
            linewidth=0.4,
            hatch="///" if kind == "recompute" else None,
            label=LEGEND[kind] if kind not in drawn else None,
        )
        coll.set_gid(f"gantt:{kind}:{row}")
        drawn.add(kind)


def _legend(fig: Figure, ax: Any) -> None:
    """Box kinds in a fixed order, then the iteration line; below the plot."""
    handles, labels = ax.get_legend_handles_labels()
    order = [LEGEND[k] for k in KINDS] + ["iteration end"]
    pairs = sorted(zip(labels, handles), key=lambda p: order.index(p[0]) if p[0] in order else 99)
    if pairs:
        fig.legend(
            [h for _, h in pairs],
            [lab for lab, _ in pairs],
            loc="outside lower center",
            ncol=len(pairs),
            frameon=False,
            fontsize=9,
        )


def _time_unit(span_s: float) -> tuple[float, str]:
    """Seconds per axis unit and its name, so tick values stay readable."""
    if span_s >= 10:
        return 1.0, "s"
    if span_s >= 0.01:
        return 1e-3, "ms"
    return 1e-6, "us"


def _label_rows(ax: Any, data: GanttData) -> None:
    """Device names as tick labels; a group's name before its first row, a line between groups."""
    labels = []
    for i, (device, group) in enumerate(zip(data.rows, data.groups)):
        first = i == 0 or data.groups[i - 1] != group
        labels.append(f"{group}   {device}" if group and first and group != device else device)
        if first and i > 0:
            ax.axhline(i, color="#333333", linewidth=0.8)
    ax.set_yticks([i + 0.5 for i in range(len(data.rows))], labels, fontsize=8)
    ax.tick_params(axis="y", length=0)


def _label_microbatches(ax: Any, data: GanttData, seconds: float, pt_per_unit: float) -> None:
    """Micro-batch numbers inside compute boxes wide enough for them."""
    candidates = [b for b in data.boxes if b.microbatch >= 0 and b.kind != "communication"]
    if not candidates or len(candidates) > 4 * MAX_TEXT_LABELS:
        return
    fontsize = 7 if len(data.rows) <= 24 else 6
    drawn = 0
    for box in candidates:
        text = str(box.microbatch)
        width_pt = (box.end_s - box.start_s) / seconds * pt_per_unit
        if width_pt < (len(text) + 0.8) * fontsize * 0.6:
            continue
        ax.text(
            (box.start_s + box.end_s) / 2 / seconds,
            box.row + COMPUTE_LANE[0] + COMPUTE_LANE[1] / 2,
            text,
            ha="center",
            va="center",
            fontsize=fontsize,
            color="white",
            clip_on=True,
        )
        drawn += 1
        if drawn >= MAX_TEXT_LABELS:
            break


def _iteration_lines(ax: Any, data: GanttData, seconds: float) -> None:
    lo, hi = data.window_s
    label = "iteration end"
    for end in data.iteration_ends_s:
        if lo < end <= hi * (1 + 1e-9):
            ax.axvline(end / seconds, color="#222222", linestyle="--", linewidth=0.9, label=label)
            label = None


def _bubble_column(ax: Any, data: GanttData) -> None:
    """Each row's bubble fraction just right of the plot."""
    transform = ax.get_yaxis_transform()  # x in axes coordinates, y in data
    ax.text(1.005, -0.05, "bubble", transform=transform, fontsize=8, va="bottom", weight="bold")
    for i, value in enumerate(data.bubble):
        if value is not None:
            ax.text(
                1.005, i + 0.5, f"{100 * value:.1f}%", transform=transform, fontsize=8, va="center"
            )


def gantt_counts(fig: Figure) -> dict[str, int]:
    """Boxes drawn per kind, counted from the figure's collections (gid ``gantt:KIND:ROW``)."""
    counts: dict[str, int] = {}
    for ax in fig.axes:
        for coll in ax.collections:
            gid = coll.get_gid() or ""
            if gid.startswith("gantt:"):
                kind = gid.split(":")[1]
                counts[kind] = counts.get(kind, 0) + len(coll.get_paths())
    return counts


# --- memory and link plots -------------------------------------------------------------


def memory_series(activation_memory: Any) -> list[tuple[str, list[float], list[float]]]:
    """(name, times_s, bytes) step series found in a summary's ``activation_memory``.

    Accepted shapes, per stage or device name: ``{"times_s": [...], "bytes": [...]}``
    (any key with ``time`` and any list key with ``bytes``), or a list of
    ``[time_s, ..., bytes]`` points (first item the time, last the bytes), alone or
    under any key of the entry (the pipeline's ``{"timeline": [[t, count, bytes]]}``).
    """
    if not isinstance(activation_memory, Mapping):
        return []
    for key in ("timeline", "series", "per_stage", "stages", "devices"):
        inner = activation_memory.get(key)
        if isinstance(inner, Mapping) and memory_series(inner):
            return memory_series(inner)
    out = []
    for name, value in activation_memory.items():
        series = _one_series(value)
        if series:
            out.append((str(name), *series))
    return out


def _one_series(value: Any) -> tuple[list[float], list[float]] | None:
    if isinstance(value, Mapping):
        times = next(
            (v for k, v in value.items() if "time" in k and isinstance(v, list) and v), None
        )
        sizes = next(
            (
                v
                for k, v in value.items()
                if "bytes" in k and "peak" not in k and isinstance(v, list) and v
            ),
            None,
        )
        if times is not None and sizes is not None and len(times) == len(sizes):
            return [float(t) for t in times], [float(b) for b in sizes]
        for v in value.values():
            if isinstance(v, list):
                found = _one_series(v)
                if found:
                    return found
        return None
    if (
        isinstance(value, list)
        and value
        and all(isinstance(p, (list, tuple)) and len(p) >= 2 for p in value)
    ):
        return [float(p[0]) for p in value], [float(p[-1]) for p in value]
    return None


def memory_peaks(activation_memory: Any) -> dict[str, float]:
    """Peak bytes per stage or device: a ``peak`` key of each entry, else the series' maximum."""
    peaks: dict[str, float] = {}
    if not isinstance(activation_memory, Mapping):
        return peaks
    for name, value in activation_memory.items():
        if isinstance(value, Mapping):
            peak = next(
                (v for k, v in value.items() if "peak" in k and isinstance(v, (int, float))), None
            )
            if peak is not None:
                peaks[str(name)] = float(peak)
    if not peaks:
        peaks = {name: max(sizes) for name, _, sizes in memory_series(activation_memory) if sizes}
    return peaks


def memory_figure(summary: Mapping[str, Any]) -> Figure | None:
    """Activation memory over time per stage (step lines), or peaks as bars; None without data."""
    memory = summary.get("activation_memory")
    series = memory_series(memory)
    peaks = memory_peaks(memory)
    if not series and not peaks:
        return None
    fig = Figure(figsize=(10, 4), layout="constrained")
    ax = fig.add_subplot()
    if series:
        span = max((t for _, times, _ in series for t in times), default=0.0)
        seconds, unit = _time_unit(span)
        for name, times, sizes in series[:32]:
            label = f"stage {name}" if name.isdigit() else name
            peak = peaks.get(name, max(sizes))
            xs, ys = [t / seconds for t in times], [b / 1e9 for b in sizes]
            ax.step(xs, ys, where="post", label=f"{label} (peak {peak / 1e9:.3g} GB)")
        ax.set_xlabel(f"simulated time ({unit})")
        if len(series) <= 16:
            ax.legend(fontsize=8, ncol=2)
    else:
        names = list(peaks)
        ax.bar(names, [peaks[n] / 1e9 for n in names], color=COLOURS["forward"])
        ax.tick_params(axis="x", rotation=60, labelsize=7)
    ax.set_ylabel("activation memory (GB)")
    ax.set_title("Activation memory" + ("" if series else " (peak)"))
    ax.grid(alpha=0.3)
    return fig


def links_figure(links: Sequence[Mapping[str, Any]]) -> Figure | None:
    """Utilisation and busy fraction of the busiest links (horizontal bars); None without links."""
    rows = sorted(
        links, key=lambda r: (-float(r["utilisation"]), -float(r["bytes"]), str(r["link"]))
    )[:BUSIEST_LINKS]
    if not rows:
        return None
    fig = Figure(figsize=(10, 1.2 + 0.3 * len(rows)), layout="constrained")
    ax = fig.add_subplot()
    ys = range(len(rows))
    ax.barh(
        [y - 0.2 for y in ys],
        [100 * float(r["utilisation"]) for r in rows],
        height=0.4,
        color=COLOURS["communication"],
        label="utilisation (bytes / capacity)",
    )
    ax.barh(
        [y + 0.2 for y in ys],
        [100 * float(r["busy_fraction"]) for r in rows],
        height=0.4,
        color="#c0c0c0",
        label="busy (a flow on it)",
    )
    ax.set_yticks(list(ys), [str(r["link"]) for r in rows], fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlabel("% of the run")
    ax.set_title(f"Busiest {len(rows)} links")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    return fig


# --- files ---------------------------------------------------------------------------


def save_figure(fig: Figure, path: str | os.PathLike[str]) -> Path:
    """Write ``fig`` as PNG or SVG (by suffix) atomically; SVG without a date, with fixed ids."""
    from .api import atomic_file

    target = Path(path)
    fmt = target.suffix.lstrip(".").lower() or "png"
    with matplotlib.rc_context({"svg.hashsalt": "clustersim"}):
        with atomic_file(target, "wb") as fh:
            fig.savefig(fh, format=fmt, dpi=100, metadata=_metadata(fmt))
    return target


def _metadata(fmt: str) -> dict[str, Any]:
    if fmt == "svg":
        return {"Date": None}
    if fmt == "png":
        return {"Software": None}
    return {}


def write_gantt(
    out_dir: str | os.PathLike[str], records: Sequence[Record], summary: Mapping[str, Any]
) -> list[Path]:
    """Write ``gantt.png`` and ``gantt.svg`` into ``out_dir``; return their paths."""
    fig = gantt_figure(records, summary)
    out = Path(out_dir)
    return [save_figure(fig, out / "gantt.png"), save_figure(fig, out / "gantt.svg")]


def _problem(path: Path, message: str, allowed: str = "") -> ScenarioError:
    return ScenarioError(Problem(str(path), message, allowed))


def read_summary(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A run's ``summary.json``; a missing or garbled file is a ScenarioError naming it."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise _problem(path, "missing (is this a clustersim run folder?)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _problem(path, f"cannot be read as JSON: {exc}") from None
    if not isinstance(data, dict):
        raise _problem(path, "expected a JSON object")
    return data


def read_timeline(path: str | os.PathLike[str]) -> list[Record]:
    """Records from a ``timeline.csv`` (pandas); empty tag cells become -1 or ''."""
    frame = _read_csv(Path(path), TIMELINE_COLUMNS)
    try:
        return [_record(row) for row in frame.itertuples(index=False)]
    except (TypeError, ValueError) as exc:
        raise _problem(Path(path), f"a row cannot be read: {exc}") from None


def _record(row: Any) -> Record:
    values = row._asdict()
    text = {k: "" if _blank(values[k]) else str(values[k]) for k in ("resource", "kind", "label")}
    text.update({k: "" if _blank(values[k]) else str(values[k]) for k in ("src", "dst", "op")})
    number = {k: 0.0 if _blank(values[k]) else float(values[k]) for k in ("bytes", "flops")}
    tag = {
        k: -1 if _blank(values[k]) else int(values[k]) for k in ("iteration", "microbatch", "stage")
    }
    return Record(
        resource=text["resource"],
        kind=text["kind"],
        label=text["label"],
        start_s=float(values["start_s"]),
        end_s=float(values["end_s"]),
        bytes=number["bytes"],
        flops=number["flops"],
        src=text["src"],
        dst=text["dst"],
        iteration=tag["iteration"],
        microbatch=tag["microbatch"],
        stage=tag["stage"],
        op=text["op"],
    )


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value == ""


def read_links(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Rows of a ``links.csv``."""
    from .api import LINK_COLUMNS

    frame = _read_csv(Path(path), LINK_COLUMNS)
    return frame.to_dict("records")


def _read_csv(path: Path, columns: Sequence[str]) -> Any:
    import pandas as pd

    strings = {c: str for c in ("resource", "kind", "label", "src", "dst", "op", "link")}
    try:
        frame = pd.read_csv(path, dtype={c: strings[c] for c in columns if c in strings})
    except FileNotFoundError:
        raise _problem(path, "missing (is this a clustersim run folder?)") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise _problem(path, f"cannot be read as CSV: {exc}") from None
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise _problem(
            path, f"missing column(s) {', '.join(missing)}", "columns " + ", ".join(columns)
        )
    return frame


# --- HTML report ---------------------------------------------------------------------


def _png_base64(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list):
        shown = ", ".join(_cell(v) for v in value[:12])
        return shown + (f", ... ({len(value)} in all)" if len(value) > 12 else "")
    return str(value)


def _summary_rows(summary: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Top-level scalars (and short lists of scalars) of the summary."""
    rows = []
    for key, value in summary.items():
        if isinstance(value, (str, int, float, bool)) or (
            isinstance(value, list) and all(isinstance(v, (int, float, str)) for v in value)
        ):
            rows.append((key, _cell(value)))
    return rows


def _numeric(text: str) -> bool:
    """Whether a cell reads as a number (right-aligned)."""
    return bool(re.fullmatch(r"[-+0-9.,e%]+", text.replace(", ", ",")))


def _table(header: Sequence[str], rows: Iterable[Sequence[str]], numeric_from: int = 1) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = []
    for row in rows:
        cells = "".join(
            f"<td{' class=num' if i >= numeric_from and _numeric(c) else ''}>{html.escape(c)}</td>"
            for i, c in enumerate(row)
        )
        body.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _device_rows(summary: Mapping[str, Any], data: GanttData | None) -> list[list[str]]:
    devices = summary.get("devices") or {}
    bubble = dict(zip(data.rows, data.bubble)) if data else {}
    given = summary.get("per_device_bubble") or {}
    rows = []
    for name, row in devices.items():
        if not isinstance(row, Mapping):
            continue
        value = _fraction(given.get(name))
        value = bubble.get(name) if value is None else value
        rows.append(
            [name]
            + [
                f"{1e3 * float(row.get(k, 0.0)):.4g}"
                for k in ("compute_s", "communication_s", "exposed_communication_s", "idle_s")
            ]
            + ["" if value is None else f"{100 * value:.1f}%"]
        )
    return rows


REPORT_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
img { max-width: 100%; border: 1px solid #eee; }
.wide { overflow-x: auto; }
.wide img { max-width: none; }
"""


def report_html(
    summary: Mapping[str, Any],
    records: Sequence[Record],
    links: Sequence[Mapping[str, Any]],
    gantt: Figure | None = None,
) -> str:
    """The text of ``report.html``: summary, per-device table, Gantt, memory and link plots."""
    name = html.escape(str(summary.get("scenario", "run")))
    parts = [
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>clustersim: {name}</title>",
        f"<style>{REPORT_CSS}</style></head><body>",
        f"<h1>clustersim report: {name}</h1>",
        "<h2>Summary</h2>",
        _table(["key", "value"], _summary_rows(summary)),
    ]
    if gantt is None and records:
        gantt = gantt_figure(records, summary)
    data = getattr(gantt, "gantt_data", None)
    device_rows = _device_rows(summary, data)
    if device_rows:
        header = ["device", "compute (ms)", "communication (ms)", "exposed comm. (ms)"]
        parts += [
            "<h2>Per device</h2>",
            _table(header + ["idle (ms)", "bubble"], device_rows),
        ]
    figures = [
        ("Gantt chart", gantt, "gantt.svg"),
        ("Activation memory", memory_figure(summary), ""),
        ("Links", links_figure(links), "links.csv"),
    ]
    for heading, fig, link in figures:
        if fig is None:
            continue
        parts.append(f"<h2>{heading}</h2>")
        if link:
            parts.append(f"<p><a href='{link}'>{link}</a></p>")
        image = f"<img alt='{heading}' src='data:image/png;base64,{_png_base64(fig)}'>"
        parts.append(f"<div class='wide'>{image}</div>" if fig is gantt else image)
    parts.append("</body></html>\n")
    return "\n".join(parts)


def write_report(run_dir: str | os.PathLike[str]) -> list[Path]:
    """Redraw ``gantt.png``/``gantt.svg`` and write ``report.html`` from a finished run folder.

    Reads ``summary.json``, ``timeline.csv`` and ``links.csv``; a missing
    folder or file, or one that cannot be read, is a ScenarioError naming it.
    """
    from .api import write_atomic

    out = Path(run_dir)
    if not out.is_dir():
        raise _problem(out, "no such run folder")
    summary = read_summary(out / "summary.json")
    records = read_timeline(out / "timeline.csv")
    links = read_links(out / "links.csv")
    written: list[Path] = []
    gantt = None
    if records:
        gantt = gantt_figure(records, summary)
        written += [save_figure(gantt, out / "gantt.png"), save_figure(gantt, out / "gantt.svg")]
    written.append(write_atomic(out / "report.html", report_html(summary, records, links, gantt)))
    return written
