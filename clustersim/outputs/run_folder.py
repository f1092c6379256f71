"""A run folder: the files one run writes, and reading them back.

``clustersim run -o DIR`` (and :meth:`clustersim.api.Result.write`) writes

* ``summary.json`` -- the summary, :func:`clustersim.metrics.canonical_json`;
* ``timeline.csv`` -- every record (:mod:`.timeline`);
* ``links.csv`` -- every link that carried traffic (:mod:`.links`);
* ``trace.json`` -- the records as Chrome trace events (:mod:`.trace`);
* ``scenario.resolved.yaml`` -- the scenario as run, every override applied
  (``clustersim run``; :func:`clustersim.scenario.overrides.resolved_yaml`);
* ``gantt.png`` and ``gantt.svg`` -- for a training run or a replayed trace (:mod:`.gantt`).

The folder is replaced as a unit (:func:`.folder.replace_folder`): every file
is written into a temporary sibling folder, which then takes the old folder's
place, so the folder holds either the old complete set or the new one.  A
folder holding anything but clustersim's outputs is refused, not replaced.
``clustersim report DIR`` reads the first three back (:func:`read_run_folder`)
and redraws the rest.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..metrics import Summary, SummaryFormatError, canonical_json
from ..records import Record
from .atomic import write_atomic
from .folder import replace_folder
from .links import links_csv, read_links
from .tables import file_problem
from .timeline import read_timeline, timeline_csv
from .trace import trace_json

TEXT_FILES = ("summary.json", "timeline.csv", "links.csv", "trace.json")
"""Files of every run folder, in the order they are written."""
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
    """The text of each of :data:`TEXT_FILES`; ``nodes`` maps devices to nodes (trace processes)."""
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


def write_run_folder(
    out_dir: str | os.PathLike[str],
    summary: Mapping[str, Any],
    records: Sequence[Record],
    links: Sequence[Mapping[str, Any]],
    nodes: Mapping[str, str | None] | None = None,
    flag: str = "output folder",
    resolved_scenario: str | None = None,
) -> list[Path]:
    """Replace the folder ``out_dir`` (made if missing) by one holding :data:`TEXT_FILES`,
    :data:`RESOLVED_SCENARIO` when its text is given, and the Gantt chart
    (:data:`.gantt.GANTT_FILES`) for a training run; return their paths.  Problems with
    ``out_dir`` name it at key path ``flag``."""
    texts = run_texts(summary, records, links, nodes)
    if resolved_scenario is not None:
        texts[RESOLVED_SCENARIO] = resolved_scenario

    def fill(folder: Path) -> list[str]:
        names = [write_atomic(folder / name, text).name for name, text in texts.items()]
        if is_training(summary, records):
            from .gantt import write_gantt  # matplotlib only when there is a chart to draw

            names += [path.name for path in write_gantt(folder, records, summary)]
        return names

    return replace_folder(out_dir, fill, flag)


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


def read_run_folder(run_dir: str | os.PathLike[str]) -> RunFolder:
    """``summary.json``, ``timeline.csv`` and ``links.csv`` of a finished run folder; a
    missing folder or file, or one that cannot be read, is a ScenarioError naming it."""
    out = Path(run_dir)
    if not out.is_dir():
        raise file_problem(out, "no such run folder")
    for name in TEXT_FILES[:3]:
        path = out / name
        if os.path.exists(path) and not path.is_file():  # a pipe would block the reader
            raise file_problem(path, "is not a regular file")
    return RunFolder(
        summary=read_summary(out / "summary.json"),
        records=read_timeline(out / "timeline.csv"),
        links=read_links(out / "links.csv"),
    )
