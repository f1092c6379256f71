"""The Gantt chart of a training run (``gantt.png``, ``gantt.svg``).

It is drawn from a run's records and summary only, never by running anything
again, so ``clustersim report`` redraws it from a finished run folder.

The Gantt chart (:func:`gantt_data`, :func:`gantt_figure`) has one row per
device that has records, grouped by pipeline stage (the ``stage`` tag of its
compute records) or else by node.  In each row the compute stream is the upper
lane: forward, backward, recomputation and other compute (optimizer, reduce)
in four colours (the zero-bubble schedules' B and W passes, labels ``bwd_input`` and
``bwd_weight``, in two more), micro-batch numbers inside boxes wide enough for them; the
communication stream (transfers from the device, collectives it takes part in)
is a thinner lane below it; idle time is blank.  Dashed vertical lines mark
iteration ends (cumulative ``iteration_times_s``), and the bubble fraction of
each row is printed at its right end: ``per_device_bubble`` of the summary
when present, else idle / run time from the records (idle = neither compute nor
communication, the summary's ``bubble_fraction`` definition,
:data:`clustersim.metrics.training.BUBBLE_FRACTION`).

Rows are folded first (:mod:`.fold`): in one-replica mode only the simulated
replica's workers are drawn (from a folded timeline, the devices it holds, each
standing for its twins), and rows with identical boxes are drawn once,
labelled ``device x N`` with the number of devices the row stands for.  Large
runs (still more than :data:`MAX_ROWS` rows, or more than :data:`MAX_BOXES`
boxes) are reduced and the title says how: one row per stage or node (its
first device), then the last iteration only, then no communication lane.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import matplotlib

matplotlib.use("Agg")

from matplotlib.figure import Figure  # noqa: E402

from ..metrics import (  # noqa: E402
    COMMUNICATION_KINDS,
    Summary,
    device_breakdown,
)
from ..network.failures import FAULT_KINDS  # noqa: E402
from ..records import Record, phase_of, sorted_records  # noqa: E402
from ..strategies.hybrid.summary import HybridSummary  # noqa: E402
from ..strategies.jobs.summary import JobsSummary  # noqa: E402
from .atomic import save_figure  # noqa: E402
from .devices import as_fraction  # noqa: E402
from .figures import fit_title  # noqa: E402
from .fold import fold_rows, shown_devices, simulated_workers  # noqa: E402
from .trace import natural_key, node_of  # noqa: E402

MAX_ROWS = 64
"""Above this many devices the Gantt chart shows one row per stage or node."""
MAX_BOXES = 20_000
"""Above this many boxes the Gantt chart zooms to one iteration, then drops communication."""
MAX_TEXT_LABELS = 3_000
"""Micro-batch numbers drawn at most (text artists are slow)."""

KINDS = (
    "forward",
    "backward",
    "backward_input",
    "backward_weight",
    "recompute",
    "compute",
    "communication",
    "fault",
)
"""Box kinds, in legend order (``compute`` = other compute: optimizer, reduce, ...;
``fault`` = a link down or a flow stalled with no route, :mod:`clustersim.network.failures`)."""
COLOURS = {
    "forward": "#4c72b0",
    "backward": "#dd8452",
    "backward_input": "#c44e8a",
    "backward_weight": "#8172b3",
    "recompute": "#9fb4e0",
    "compute": "#8c8c8c",
    "communication": "#55a868",
    "fault": "#c44e52",
}
LEGEND = {
    "forward": "forward",
    "backward": "backward",
    "backward_input": "backward B (input gradient)",
    "backward_weight": "backward W (weight gradient)",
    "recompute": "recompute",
    "compute": "other compute",
    "communication": "communication",
    "fault": "link down / flow stalled",
}
SPLIT_BACKWARD = {"bwd_input": "backward_input", "bwd_weight": "backward_weight"}
"""Labels of the zero-bubble schedules' B and W records and the kinds they draw as."""
HATCHES = {"recompute": "///", "fault": "xx"}
"""Hatching of the box kinds that have one."""
GANTT_FILES = ("gantt.png", "gantt.svg")
"""The files the chart is saved as (a training run's folder has both)."""
JOB_COLOURS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3")
"""Colours of the jobs of a multi-job run, in the scenario's order (then again)."""
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
    counts: list[int] = field(default_factory=list)
    """Devices each row stands for (identical rows folded, ``x N``); empty: one each."""
    job_colours: list[str] = field(default_factory=list)
    """In a multi-job run: the colour of each row's job (boxes drawn in it, communication
    paler); empty otherwise (boxes coloured by kind)."""
    types: list[str] = field(default_factory=list)
    """In a mixed cluster: each row's device type (its preset); empty otherwise."""


def box_kind(record: Record) -> str:
    """The kind a record is drawn as: forward, backward, recompute, compute, communication
    (its :func:`~clustersim.records.phase_of`; the optimizer and other work draw as compute)
    or fault (a link's down window, a flow's stall)."""
    if record.kind in FAULT_KINDS:
        return "fault"
    if record.kind == "compute" and record.label in SPLIT_BACKWARD:
        return SPLIT_BACKWARD[record.label]
    phase = phase_of(record)
    return phase if phase in ("forward", "backward", "recompute", "communication") else "compute"


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
            return (0, int(group.split()[1]), natural_key(device))
        return (1, natural_key(group), natural_key(device))

    return sorted(groups, key=key)


def _bubbles(
    records: Sequence[Record], summary: Summary, rows: Sequence[str]
) -> list[float | None]:
    """Bubble fraction per row: the summary's ``per_device_bubble``, else idle / run time."""
    given = summary.strategy.device_bubbles()
    times = summary.strategy.iteration_times()
    run_s = float(sum(times)) if times else float(summary.header.makespan_s or 0.0)
    if run_s <= 0:
        run_s = max((r.end_s for r in records), default=0.0)
    missing = [d for d in rows if as_fraction(given.get(d)) is None]
    computed = device_breakdown(records, run_s, missing) if missing and run_s > 0 else {}
    out: list[float | None] = []
    for device in rows:
        value = as_fraction(given.get(device))
        if value is None and device in computed:
            value = computed[device]["idle_s"] / run_s
        out.append(value)
    return out


def _iteration_ends(summary: Summary) -> list[float]:
    ends, total = [], 0.0
    for t in summary.strategy.iteration_times():
        total += float(t)
        ends.append(total)
    return ends


def _title(summary: Summary, title: str | None) -> str:
    if title:
        return title
    name = str(summary.header.scenario or "run")
    part = summary.strategy
    if isinstance(part, HybridSummary) and part.schedule:
        return f"{name}: " + ", ".join(pipeline_parts(part))
    workload = summary.header.workload
    return f"{name} ({workload})" if workload else name


def pipeline_parts(part: HybridSummary) -> list[str]:
    """The title's words for a pipeline run: schedule, p, m, v, tp, dp, ZeRO, recompute."""
    parts = [f"{part.schedule} schedule"]
    if part.stages:
        parts.append(f"p = {part.stages}")
    if part.micro_batches:
        parts.append(f"m = {part.micro_batches}")
    if (part.chunks or 1) > 1:
        parts.append(f"v = {part.chunks}")
    if (part.tp or 1) > 1:
        parts.append(f"tp = {part.tp}" + (" (SP)" if part.sequence_parallel else ""))
    if (part.dp or 1) > 1:
        parts.append(f"dp = {part.dp}")
    if part.zero_stage:
        parts.append(f"ZeRO-{part.zero_stage}")
    if part.recompute:
        parts.append(f"{part.recompute_mode or 'full'} recompute")
    return parts


def gantt_data(
    records: Iterable[Record], summary: Summary | Mapping[str, Any], title: str | None = None
) -> GanttData:
    """Rows, boxes, bubbles and iteration ends of the Gantt chart (see the module docstring).

    ``summary`` is the run's :class:`~clustersim.metrics.Summary`, or a mapping of its keys
    (partial ones too: what is missing is computed from the records or left out)."""
    summary = Summary.of(summary)
    records = sorted_records(records)
    jobs = summary.strategy if isinstance(summary.strategy, JobsSummary) else None
    groups = _row_groups(records) if jobs is None else _job_groups(records, jobs)
    rows = _ordered_rows(groups) if jobs is None else list(groups)
    notes: list[str] = []
    workers, weight = shown_devices(summary)
    if workers:
        rows = [d for d in rows if d in workers]
        notes.append(_shown_note(summary, weight))
    shown, counts = fold_rows(rows, records, weight) if jobs is None else (rows, [1] * len(rows))
    if len(shown) < len(rows):
        notes.append(f"identical rows drawn once, x N: {len(rows)} rows in {len(shown)}")
    rows, count_of = shown, dict(zip(shown, counts))
    if len(rows) > MAX_ROWS:
        before = len(notes)
        rows = _aggregate_rows(rows, groups, notes)
        count_of = {} if any("one row per" in n for n in notes[before:]) else count_of
    counts = [count_of[d] for d in rows] if count_of else []
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
        counts=counts if any(n > 1 for n in counts) else [],
        job_colours=[] if jobs is None else _job_colours(jobs, rows, groups),
        types=_row_types(summary, rows),
    )


def _row_types(summary: Summary, rows: Sequence[str]) -> list[str]:
    """Each row's device type when the summary gives types (a mixed cluster), else none."""
    found = [getattr(summary.devices.get(d), "type", None) or "" for d in rows]
    return found if any(found) else []


def _shown_note(summary: Summary, weight: Mapping[str, int]) -> str:
    """What the shown rows are: the simulated replica, or what a folded timeline holds."""
    replicas, _ = simulated_workers(summary)
    if replicas:
        return f"1 simulated replica of {max(weight.values())}"
    rows = summary.folded.rows if summary.folded is not None else None
    if rows is not None and rows.replicas:
        return f"the folded timeline's replica 0 of {rows.replicas}"
    return f"the folded timeline's {len(weight)} of {sum(weight.values())} devices"


def _job_groups(records: Sequence[Record], jobs: JobsSummary) -> dict[str, str]:
    """``job NAME`` of each device with records, rows in the jobs' order."""
    owner = jobs.job_of_device()
    order = {name: i for i, name in enumerate(jobs.jobs)}
    devices = {r.resource: None for r in records}
    key = lambda d: (order.get(owner.get(d, ""), len(order)), natural_key(d))  # noqa: E731
    return {d: f"job {owner[d]}" if d in owner else "" for d in sorted(devices, key=key)}


def _job_colours(jobs: JobsSummary, rows: Sequence[str], groups: Mapping[str, str]) -> list[str]:
    colour = {f"job {name}": JOB_COLOURS[i % len(JOB_COLOURS)] for i, name in enumerate(jobs.jobs)}
    return [colour.get(groups[d], COLOURS["compute"]) for d in rows]


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
    records: Iterable[Record], summary: Summary | Mapping[str, Any], title: str | None = None
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
    seconds, unit = time_unit(data.window_s[1] - data.window_s[0])
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
    fit_title(fig, data.title, fontsize=11, ax=ax)
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
        if data.job_colours:
            _draw_job_boxes(ax, data, row, kind, xs, drawn)
            continue
        coll = ax.broken_barh(
            xs,
            (row + offset, height),
            facecolors=COLOURS[kind],
            edgecolors="white" if edged and kind != "communication" else "none",
            linewidth=0.4,
            hatch=HATCHES.get(kind),
            label=LEGEND[kind] if kind not in drawn else None,
        )
        coll.set_gid(f"gantt:{kind}:{row}")
        drawn.add(kind)


def _draw_job_boxes(
    ax: Any, data: GanttData, row: int, kind: str, xs: list[tuple[float, float]], drawn: set[Any]
) -> None:
    """A row's boxes of one kind in its job's colour (communication paler), gid
    ``gantt:KIND:ROW``; the job named in the legend once."""
    job = data.groups[row]
    offset, height = COMM_LANE if kind == "communication" else COMPUTE_LANE
    coll = ax.broken_barh(
        xs,
        (row + offset, height),
        facecolors=data.job_colours[row],
        edgecolors="none",
        alpha=0.5 if kind == "communication" else 1.0,
        hatch="///" if kind == "recompute" else None,
        label=job if job and job not in drawn else None,
    )
    coll.set_gid(f"gantt:{kind}:{row}")
    drawn.add(job)


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


def time_unit(span_s: float) -> tuple[float, str]:
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
        shown = f"{device} x {data.counts[i]}" if data.counts and data.counts[i] > 1 else device
        shown += f" [{data.types[i]}]" if data.types and data.types[i] else ""
        labels.append(f"{group}   {shown}" if group and first and group != device else shown)
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


def write_gantt(
    out_dir: str | os.PathLike[str],
    records: Sequence[Record],
    summary: Summary | Mapping[str, Any],
) -> list[Path]:
    """Write ``gantt.png`` and ``gantt.svg`` into ``out_dir``; return their paths."""
    return save_gantt(gantt_figure(records, summary), out_dir)


def save_gantt(fig: Figure, out_dir: str | os.PathLike[str]) -> list[Path]:
    """Save a drawn Gantt chart as ``gantt.png`` and ``gantt.svg`` in ``out_dir`` (atomically,
    the same bytes for the same chart)."""
    out = Path(out_dir)
    return [save_figure(fig, out / name) for name in GANTT_FILES]
