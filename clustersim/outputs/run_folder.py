"""A run folder: the files one run writes, and reading them back.

``clustersim run -o DIR`` (and :meth:`clustersim.api.Result.write`) writes

* ``summary.json`` -- the summary, :func:`clustersim.metrics.canonical_json`;
* ``timeline.csv`` -- every record (:mod:`.timeline`), or ``timeline.parquet``
  (``--timeline parquet``);
* ``links.csv`` -- every link that carried traffic (:mod:`.links`);
* ``trace.json`` -- the records as Chrome trace events (:mod:`.trace`);
* ``devices.csv`` -- every device's per-device quantities, when summary.json is folded
  (:mod:`.devices`);
* ``scenario.resolved.yaml`` -- the scenario as run, every override applied
  (``clustersim run``; :func:`clustersim.scenario.overrides.resolved_yaml`);
* ``gantt.png`` and ``gantt.svg`` -- for a training run or a replayed trace (:mod:`.gantt`).

On a cluster of :data:`.modes.FOLD_AT` devices or more the folder is folded by default
(:class:`.modes.OutputModes`): ``trace.json`` and the timeline hold one replica's records
(:func:`.fold.fold_devices`; the Gantt chart is drawn from them), summary.json's
per-device entries keep their highest and lowest devices (the rest in ``devices.csv``),
``links.csv`` holds equal links once (:func:`.links.fold_links`), and summary.json's
``folded`` block says what was folded.

The folder is replaced as a unit (:func:`.folder.replace_folder`): every file
is written into a temporary sibling folder, which then takes the old folder's
place, so the folder holds either the old complete set or the new one.  A
folder holding anything but clustersim's outputs is refused, not replaced.
``clustersim report DIR`` reads summary.json, the timeline and links.csv back
(:func:`read_run_folder`, a folded summary made whole from ``devices.csv``) and redraws
the rest.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..metrics import (
    FoldedLinks,
    FoldedOutputs,
    Summary,
    SummaryDict,
    SummaryFormatError,
    canonical_json,
)
from ..records import Record, sorted_records
from .atomic import write_atomic
from .devices import DEVICES_CSV, devices_csv, fold_entries, read_devices, unfold_entries
from .fold import DeviceFold, fold_devices
from .folder import replace_folder
from .links import fold_links, links_csv, read_links
from .modes import OutputModes
from .tables import file_problem
from .timeline import read_timeline, timeline_csv, write_timeline_parquet
from .trace import trace_json

TEXT_FILES = ("summary.json", "timeline.csv", "links.csv", "trace.json")
"""Files of every run folder in the default modes, in the order they are written."""
TIMELINE_FILES = ("timeline.csv", "timeline.parquet")
"""The timeline, in either format (:mod:`.timeline`)."""
RESOLVED_SCENARIO = "scenario.resolved.yaml"
"""The scenario as run (``clustersim run`` writes it after :data:`TEXT_FILES`)."""


@dataclass
class RunFolder:
    """What a finished run folder holds: its summary, records and link rows."""

    summary: dict[str, Any]
    records: list[Record]
    links: list[dict[str, Any]]


def run_texts(
    summary: Mapping[str, Any],
    records: Sequence[Record],
    links: Sequence[Mapping[str, Any]],
    nodes: Mapping[str, str | None] | None = None,
) -> dict[str, str]:
    """The text of each of :data:`TEXT_FILES`, unfolded; ``nodes`` maps devices to nodes
    (trace processes)."""
    return {
        "summary.json": canonical_json(dict(summary)),
        "timeline.csv": timeline_csv(records),
        "links.csv": links_csv(links),
        "trace.json": trace_json(records, nodes, summary),
    }


def is_training(summary: Mapping[str, Any], records: Sequence[Record]) -> bool:
    """Whether a run gets a Gantt chart: a training summary (``iteration_times_s``), a
    multi-job one (``jobs``) or a replayed trace (``workload: trace``), with records."""
    charted = "iteration_times_s" in summary or "jobs" in summary
    return (charted or summary.get("workload") == "trace") and bool(records)


@dataclass
class _Plan:
    """What each file of a run folder holds, the modes decided."""

    summary: dict[str, Any]
    """summary.json's keys (folded entries, the ``folded`` block)."""
    charted: dict[str, Any]
    """The summary the Gantt chart reads: whole, with the ``folded`` block."""
    timeline: list[Record]
    trace: list[Record]
    trace_fold: DeviceFold | None
    devices_table: str | None
    """``devices.csv``'s text (a folded summary), else None."""
    links: list[dict[str, Any]]
    """links.csv's rows (folded or not)."""


def _plan(
    summary: Mapping[str, Any],
    records: Sequence[Record],
    links: Sequence[Mapping[str, Any]],
    modes: OutputModes,
    devices: int,
) -> _Plan:
    """Decide the folds of ``modes`` (already resolved for the cluster's ``devices``)."""
    ordered = sorted_records(records)
    wants = modes.trace == "replica" or modes.timeline_rows == "replica"
    fold = fold_devices(summary, ordered) if wants else None
    kept = fold.kept(ordered) if fold is not None else ordered
    folded_files = [
        name
        for name, mode in ((modes.timeline_file, modes.timeline_rows), ("trace.json", modes.trace))
        if fold is not None and mode == "replica"
    ]
    data, cut = fold_entries(summary) if modes.summary_devices == "extremes" else (summary, None)
    link_rows = fold_links(links) if modes.links == "folded" else [dict(r) for r in links]
    merged = FoldedLinks("links.csv", len(links), len(link_rows))
    merged = merged if len(link_rows) < len(links) else None
    block = None
    if cut is not None or folded_files or merged is not None:
        rows = fold.block(folded_files) if fold is not None and folded_files else None
        block = FoldedOutputs(devices, modes.fold_at, cut, rows, merged).as_dict()
    extra = {"folded": block} if block is not None else {}
    return _Plan(
        summary={**data, **extra},
        charted=_charted(summary, extra),
        timeline=kept if modes.timeline_file in folded_files else ordered,
        trace=kept if "trace.json" in folded_files else ordered,
        trace_fold=fold if "trace.json" in folded_files else None,
        devices_table=devices_csv(summary) if cut is not None else None,
        links=link_rows if merged is not None else [dict(r) for r in links],
    )


def _charted(summary: Mapping[str, Any], extra: Mapping[str, Any]) -> Mapping[str, Any]:
    """``summary`` with ``extra`` keys (its ``folded`` block), for the charts: still
    carrying its typed summary (:class:`~clustersim.metrics.SummaryDict`), so that each
    chart does not type two million values again."""
    out = SummaryDict({**summary, **extra})
    typed = getattr(summary, "typed", None)
    if isinstance(typed, Summary):
        folded = extra.get("folded")
        out.typed = replace(typed, folded=FoldedOutputs.from_dict(folded)) if folded else typed
    return out


def write_run_folder(
    out_dir: str | os.PathLike[str],
    summary: Mapping[str, Any],
    records: Sequence[Record],
    links: Sequence[Mapping[str, Any]],
    nodes: Mapping[str, str | None] | None = None,
    flag: str = "output folder",
    resolved_scenario: str | None = None,
    modes: OutputModes | None = None,
    devices: int | None = None,
) -> list[Path]:
    """Replace the folder ``out_dir`` (made if missing) by one holding summary.json, the
    timeline, links.csv and trace.json, ``devices.csv`` when summary.json is folded,
    :data:`RESOLVED_SCENARIO` when its text is given, and the Gantt chart
    (:data:`.gantt.GANTT_FILES`) for a training run; return their paths.

    ``modes`` (default :class:`.modes.OutputModes`: folded at scale) are decided for a
    cluster of ``devices`` devices (default: the summary's ``devices``).  Problems with
    ``out_dir`` name it at key path ``flag``."""
    modes = (modes or OutputModes()).resolved(
        len(summary.get("devices") or {}) if devices is None else devices
    )
    plan = _plan(summary, records, links, modes, devices or len(summary.get("devices") or {}))
    steps: list[tuple[str, Callable[[Path], Any]]] = [
        ("summary.json", lambda p: write_atomic(p, canonical_json(plan.summary))),
        (modes.timeline_file, lambda p: _write_timeline(p, plan.timeline)),
        ("links.csv", lambda p: write_atomic(p, links_csv(plan.links))),
        ("trace.json", lambda p: write_atomic(p, _trace(plan, nodes, summary))),
    ]
    if plan.devices_table is not None:
        table = plan.devices_table
        steps.append((DEVICES_CSV, lambda p: write_atomic(p, table)))
    if resolved_scenario is not None:
        steps.append((RESOLVED_SCENARIO, lambda p: write_atomic(p, resolved_scenario)))

    def fill(folder: Path) -> list[str]:
        names = []
        for name, write in steps:
            write(folder / name)
            names.append(name)
        if is_training(summary, plan.timeline):
            from .gantt import write_gantt  # matplotlib only when there is a chart to draw

            names += [path.name for path in write_gantt(folder, plan.timeline, plan.charted)]
        return names

    return replace_folder(out_dir, fill, flag)


def _write_timeline(path: Path, records: Sequence[Record]) -> Path:
    if path.suffix == ".parquet":
        return write_timeline_parquet(path, records)
    return write_atomic(path, timeline_csv(records))


def _trace(plan: _Plan, nodes: Mapping[str, str | None] | None, summary: Mapping) -> str:
    return trace_json(plan.trace, nodes, summary, plan.trace_fold)


def read_summary(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A run's ``summary.json``; a missing or garbled file is a ScenarioError naming it."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise file_problem(path, "missing (is this a clustersim run folder?)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise file_problem(path, f"cannot be read as JSON: {exc}") from None
    if not isinstance(data, dict):
        raise file_problem(path, "expected a JSON object")
    try:
        Summary.from_dict(data, lenient=True)  # the shapes the report reads it by
    except SummaryFormatError as exc:
        raise file_problem(path, str(exc)) from None
    return data


def timeline_path(run_dir: str | os.PathLike[str]) -> Path:
    """The run folder's timeline: ``timeline.csv``, else ``timeline.parquet`` when only
    that one is there."""
    out = Path(run_dir)
    csv_path, parquet_path = (out / name for name in TIMELINE_FILES)
    return parquet_path if not csv_path.exists() and parquet_path.exists() else csv_path


def read_run_folder(run_dir: str | os.PathLike[str]) -> RunFolder:
    """``summary.json`` (made whole from ``devices.csv`` when folded), the timeline
    (:func:`timeline_path`) and ``links.csv`` of a finished run folder; a missing folder or
    file, or one that cannot be read, is a ScenarioError naming it."""
    out = Path(run_dir)
    if not out.is_dir():
        raise file_problem(out, "no such run folder")
    timeline = timeline_path(out)
    for path in (out / "summary.json", timeline, out / "links.csv", out / DEVICES_CSV):
        if os.path.exists(path) and not path.is_file():  # a pipe would block the reader
            raise file_problem(path, "is not a regular file")
    summary = read_summary(out / "summary.json")
    if ((summary.get("folded") or {}).get("summary") or {}).get("entries"):
        summary = unfold_entries(summary, read_devices(out / DEVICES_CSV))
    return RunFolder(
        summary=summary,
        records=read_timeline(timeline),
        links=read_links(out / "links.csv"),
    )
