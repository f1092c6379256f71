"""``golden check``: run scenarios again and compare their metrics with their golden files,
metric by metric within a relative tolerance; the report as text lines (nothing here
prints: the CLI and the pytest plugin render the rows)."""

from __future__ import annotations

import fnmatch
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...version import __version__
from .files import DEFAULT_RTOL, check_rtol, golden_path, load_golden
from .metrics import measure_all

ABS_TOL = 1e-12
"""Absolute tolerance around zero (a golden value of 0 compares absolutely)."""


@dataclass(frozen=True)
class Row:
    """One metric compared: values in the metric's unit, ``change`` relative (0.01 = +1%)."""

    metric: str
    golden: float | None
    now: float | None
    change: float | None
    """(now - golden) / |golden|; None when one side is missing or golden is 0."""
    tolerance: float
    status: str
    """``ok``, ``changed`` (beyond tolerance), ``missing`` (not measured now) or ``new``."""

    @property
    def failed(self) -> bool:
        return self.status in ("changed", "missing")


@dataclass
class GoldenReport:
    """The comparison of one scenario with its golden file."""

    scenario_file: str
    golden_file: str
    rows: list[Row]
    notes: list[str] = field(default_factory=list)
    """Things worth knowing that do not fail the check (scenario edited, other version)."""

    @property
    def failures(self) -> list[Row]:
        return [row for row in self.rows if row.failed]

    @property
    def passed(self) -> bool:
        return not self.failures


def tolerance_for(metric: str, tolerances: dict[str, float], default: float) -> float:
    """The relative tolerance of ``metric``: an exact key of ``tolerances``, else the longest
    glob matching it, else ``default``."""
    if metric in tolerances:
        return float(tolerances[metric])
    matching = [g for g in tolerances if fnmatch.fnmatchcase(metric, g)]
    return float(tolerances[max(matching, key=len)]) if matching else default


def compare_metrics(
    golden: dict[str, float],
    now: dict[str, float],
    tolerances: dict[str, float] | None = None,
    rtol: float = DEFAULT_RTOL,
) -> list[Row]:
    """One row per metric of either side, golden's order first, then new ones."""
    tolerances = tolerances or {}
    rows = []
    for metric in [*golden, *(k for k in now if k not in golden)]:
        tol = tolerance_for(metric, tolerances, rtol)
        old, new = golden.get(metric), now.get(metric)
        if old is None:
            rows.append(Row(metric, None, new, None, tol, "new"))
        elif new is None:
            rows.append(Row(metric, old, None, None, tol, "missing"))
        elif not math.isfinite(new):  # NaN compares false with everything: never "ok"
            rows.append(Row(metric, old, new, None, tol, "changed"))
        else:
            change = (new - old) / abs(old) if old != 0 else None
            moved = abs(new - old) > ABS_TOL and (change is None or abs(change) > tol)
            rows.append(Row(metric, old, new, change, tol, "changed" if moved else "ok"))
    return rows


def compare(
    doc: dict[str, Any],
    measured: dict[str, Any],
    rtol: float | None = None,
    scenario_file: str = "",
    golden_file: str = "",
) -> GoldenReport:
    """Compare a measurement with a golden document. ``rtol`` overrides the file's default
    (its per-metric ``tolerances`` still win)."""
    default = rtol if rtol is not None else float(doc.get("rtol", DEFAULT_RTOL))
    rows = compare_metrics(doc["metrics"], measured["metrics"], doc.get("tolerances"), default)
    notes = []
    if doc.get("scenario_sha256") not in (None, measured["scenario_sha256"]):
        notes.append("the scenario file changed since the golden was recorded")
    if doc.get("clustersim_version") not in (None, __version__):
        notes.append(f"golden recorded with clustersim {doc['clustersim_version']}")
    if doc.get("scenario") not in (None, measured["scenario"]):
        notes.append(f"scenario name was {doc['scenario']!r}, now {measured['scenario']!r}")
    return GoldenReport(scenario_file, golden_file, rows, notes)


def check(
    scenarios: Sequence[str | os.PathLike[str]],
    golden_dir: str | os.PathLike[str],
    rtol: float | None = None,
    jobs: int | None = None,
    root: str | os.PathLike[str] | None = None,
    max_events: int | None = None,
    scheduler: str | None = None,
    max_memory: float | None = None,
    announce: Callable[[str], None] | None = None,
) -> list[GoldenReport]:
    """Re-run every scenario and compare it with its golden file in ``golden_dir``, with
    the overrides the file records.

    Bad input (a missing scenario or golden file, an unreadable golden) raises
    before anything runs; a scenario that cannot be read is named before its golden file.
    Runs estimated long are announced first (``announce``, :func:`measure_all`).
    """
    from ...scenario import load_scenario

    check_rtol(rtol)
    for scenario in scenarios:
        load_scenario(scenario)  # errors name the scenario file as given
    targets = [golden_path(s, golden_dir, root) for s in scenarios]
    docs = [load_golden(target) for target in targets]
    overrides = [doc.get("overrides", []) for doc in docs]
    measured = measure_all(scenarios, jobs, max_events, overrides, scheduler, max_memory, announce)
    reports = [
        compare(doc, m, rtol, str(s), str(target))
        for s, m, doc, target in zip(scenarios, measured, docs, targets)
    ]
    for report, texts in zip(reports, overrides):
        if texts:
            report.notes.append("run with " + " ".join(f"--set {t}" for t in texts))
    return reports


# --------------------------------------------------------------------------- rendering


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.8g}"


def report_lines(report: GoldenReport, all_rows: bool = False) -> list[str]:
    """The report as text lines: status, notes, then a table of metric, golden, now, relative
    change and status. Per-device and memory rows appear only when they fail (or ``all_rows``)."""
    state = "ok" if report.passed else f"CHANGED ({len(report.failures)} metric(s))"
    lines = [f"{report.scenario_file}: {state}  [golden {report.golden_file}]"]
    lines += [f"  note: {note}" for note in report.notes]
    rows = [
        r
        for r in report.rows
        if all_rows or r.status != "ok" or not r.metric.startswith(("devices.", "activation_"))
    ]
    width = max([len("metric"), *(len(r.metric) for r in rows)])
    lines.append(f"  {'metric':<{width}} {'golden':>14} {'now':>14} {'change':>10}  status")
    for r in rows:
        change = "-" if r.change is None else f"{100 * r.change:+.3f}%"
        flag = {"ok": "ok", "new": "new (not in the golden)"}.get(r.status)
        flag = flag or f"{r.status.upper()} (rtol {r.tolerance:g})"
        lines.append(
            f"  {r.metric:<{width}} {_number(r.golden):>14} {_number(r.now):>14} {change:>10}  {flag}"
        )
    return lines
