"""Golden timings: record a scenario's key metrics once, then check later runs against them.

```python
from clustersim.studies import golden
golden.record(["scenarios/pipeline/1f1b_m8.yaml"], "tests/golden")
reports = golden.check(["scenarios/pipeline/1f1b_m8.yaml"], "tests/golden")
reports[0].passed          # False if a metric moved beyond its tolerance
reports[0].failures        # the rows that moved (metric, golden, now, change)
```

A golden file is JSON named after the scenario path (``scenarios/a/b.yaml`` ->
``<dir>/scenarios__a__b.json``) holding ``clustersim_version``, ``scenario``
(its name), ``scenario_file``, ``scenario_sha256`` (of the file's bytes),
``seed``, ``overrides`` (the ``--set KEY=VALUE`` texts it was recorded with, only
when there were any: ``golden check`` applies them again), ``rtol`` (default relative
tolerance), ``tolerances`` ({metric glob: relative tolerance}) and ``metrics`` (flat dotted keys -> numbers; times in
seconds, memory in bytes, bandwidth in GB/s). Nothing here prints; the CLI and
the pytest plugin render the rows.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ClustersimError, Problem, ScenarioError, SimulationError
from ..metrics import Summary
from ..outputs.atomic import write_atomic
from ..outputs.paths import check_output_file, check_output_folder
from ..strategies.hybrid.summary import HybridSummary
from ..strategies.jobs.summary import JobsSummary
from ..version import __version__
from .runner import run_all, worker_count

DEFAULT_RTOL = 0.01
"""Relative tolerance of a metric when neither the command nor the golden file sets one."""
ABS_TOL = 1e-12
"""Absolute tolerance around zero (a golden value of 0 compares absolutely)."""
MAX_DEVICES = 64
"""At most this many devices (in summary order) get per-device entries."""
TOP_METRICS = (
    "makespan_s",
    "iteration_time_s",
    "throughput_samples_per_s",
    "bubble_fraction",
    "idle_fraction",
    "updates_per_s",
    "busiest_server_share",
    "time_s",
    "algbw_GBps",
    "busbw_GBps",
)
"""Top-level summary keys kept when present (seconds, samples/s, fractions, GB/s;
``busiest_server_share``: parameter servers)."""
DEVICE_METRICS = ("compute_s", "communication_s", "exposed_communication_s", "idle_s")
"""Per-device breakdown keys kept (seconds over the whole run)."""

FORMAT_KEYS = (
    "clustersim_version",
    "scenario",
    "scenario_file",
    "scenario_sha256",
    "seed",
    "overrides",
    "rtol",
    "tolerances",
    "metrics",
)

Measure = Callable[[str], dict[str, Any]]


# --------------------------------------------------------------------------- metrics


def _rounded(value: float) -> float:
    """``value`` rounded to 12 significant digits, as summary.json stores floats."""
    return float(f"{float(value):.12g}")


def metrics_of(summary: Summary | Mapping[str, Any]) -> dict[str, float]:
    """The golden metrics of a run summary, as flat dotted keys.

    Top-level timings (:data:`TOP_METRICS`), each pipeline stage's
    ``activation_memory.<stage>.peak_bytes``, ``devices.<device>.<key>`` for the
    first :data:`MAX_DEVICES` devices and ``busiest_link.utilisation`` (0..1); in a
    multi-job run ``max_slowdown`` and each job's ``jobs.<job>.job_time_s``,
    ``alone_time_s`` and ``slowdown``.
    A mapping is read as a summary (partial ones too: what is missing is left out).
    """
    typed = Summary.of(summary)
    numbers = typed.numbers()
    out: dict[str, float] = {
        key: _rounded(numbers[key]) for key in TOP_METRICS if numbers.get(key) is not None
    }
    part = typed.strategy
    if isinstance(part, HybridSummary):
        for stage, memory in (part.activation_memory or {}).items():
            out[f"activation_memory.{stage}.peak_bytes"] = _rounded(memory.peak_bytes)
    if isinstance(part, JobsSummary):
        out["max_slowdown"] = _rounded(part.max_slowdown)
        for name, job in part.jobs.items():
            for key in ("job_time_s", "alone_time_s", "slowdown"):
                out[f"jobs.{name}.{key}"] = _rounded(getattr(job, key))
    for name, row in list(typed.devices.items())[:MAX_DEVICES]:
        for key in DEVICE_METRICS:
            value = getattr(row, key)
            if value is not None:
                out[f"devices.{name}.{key}"] = _rounded(value)
    if typed.busiest_links:
        out["busiest_link.utilisation"] = _rounded(typed.busiest_links[0].utilisation)
    return out


def scenario_sha256(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of the scenario file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _loaded(path: str | os.PathLike[str], overrides: Sequence[str] = ()) -> tuple[Any, Any]:
    """The document of the scenario at ``path`` with the ``--set KEY=VALUE`` texts
    ``overrides`` applied, and the scenario it validates to."""
    from ..scenario.overrides import load_with_settings, parse_set

    return load_with_settings(path, [parse_set(text, sweep=False) for text in overrides])


def _scenario(path: str | os.PathLike[str], overrides: Sequence[str] = ()) -> Any:
    """The scenario at ``path`` with the ``--set KEY=VALUE`` texts ``overrides`` applied."""
    return _loaded(path, overrides)[1]


def measure(
    path: str | os.PathLike[str],
    max_events: int | None = None,
    overrides: Sequence[str] = (),
    max_memory: float | None = None,
) -> dict[str, Any]:
    """Simulate the scenario at ``path`` with ``overrides`` (``--set KEY=VALUE`` texts)
    applied; its name, seed, file hash and metrics.

    ``max_events`` and ``max_memory`` (bytes) override the scenario's limits
    (``engine.max_events``, ``engine.max_memory``)."""
    scenario = _scenario(path, overrides)
    return measure_scenario(scenario, scenario_sha256(path), max_events, max_memory)


def measure_scenario(
    scenario: Any, sha256: str, max_events: int | None = None, max_memory: float | None = None
) -> dict[str, Any]:
    """:func:`measure` of a loaded :class:`~clustersim.scenario.Scenario` whose file has
    the hash ``sha256``."""
    from ..api import simulate

    summary = simulate(scenario, max_events=max_events, max_memory=max_memory).typed_summary
    return {
        "scenario": summary.header.scenario,
        "seed": summary.header.seed,
        "scenario_sha256": sha256,
        "metrics": metrics_of(summary),
    }


def _measure_safely(
    doc: Any,
    source: str,
    sha256: str,
    max_events: int | None = None,
    max_memory: float | None = None,
) -> dict[str, Any]:
    """:func:`measure` for a worker process, of the scenario's document with its overrides
    applied (a worker on another machine has no access to the file): errors come back as
    text (they pickle badly)."""
    from ..scenario import parse_scenario

    try:
        return measure_scenario(parse_scenario(doc, source), sha256, max_events, max_memory)
    except ClustersimError as exc:
        return {"error": str(exc), "simulation": isinstance(exc, SimulationError)}


def measure_all(
    paths: Sequence[str | os.PathLike[str]],
    jobs: int | None = None,
    max_events: int | None = None,
    overrides: Sequence[Sequence[str]] | None = None,
    scheduler: str | None = None,
    max_memory: float | None = None,
) -> list[dict[str, Any]]:
    """:func:`measure` of every path, in order, on ``jobs`` processes (default: all cores)
    or on the Dask cluster ``scheduler`` (:func:`run_all`); ``overrides``: each path's
    ``--set KEY=VALUE`` texts (default: none).

    Every scenario is checked first, its estimated work and memory against their limits
    (``max_events`` and ``max_memory``, else its ``engine.max_events`` and
    ``engine.max_memory``) included: bad input raises before anything runs."""
    from ..api import prepare
    from ..scenario.overrides import described

    names = [str(p) for p in paths]
    sets = [tuple(o) for o in overrides] if overrides is not None else [()] * len(names)
    for name in names:
        if not Path(name).is_file():
            raise ClustersimError(f"{name}: no such scenario file")
    loaded = [_loaded(name, texts) for name, texts in zip(names, sets)]
    prepared = [prepare(s, max_events=max_events, max_memory=max_memory) for _, s in loaded]
    memory = [p.memory.total for p in prepared]
    limit = min((p.strategy.max_memory or math.inf for p in prepared), default=None)
    if scheduler is None and worker_count(jobs, len(names)) == 1:
        # errors raised as they are
        return [measure(name, max_events, texts, max_memory) for name, texts in zip(names, sets)]
    calls = [
        (doc, described(name, list(texts)), scenario_sha256(name), max_events, max_memory)
        for (doc, _), name, texts in zip(loaded, names, sets)
    ]
    results = run_all(
        _measure_safely, calls, jobs, scheduler=scheduler, memory=memory, memory_limit=limit
    )
    for name, result in zip(names, results):
        if "error" in result:
            error = SimulationError if result["simulation"] else ClustersimError
            raise error(
                result["error"] if name in result["error"] else f"{name}: {result['error']}"
            )
    return results


# --------------------------------------------------------------------------- files


def golden_path(
    scenario: str | os.PathLike[str],
    golden_dir: str | os.PathLike[str],
    root: str | os.PathLike[str] | None = None,
) -> Path:
    """The golden file of ``scenario``: its path relative to ``root`` (default: the current
    folder; else just its name), suffix dropped, ``/`` -> ``__``, ``.json`` in ``golden_dir``."""
    path = Path(os.path.abspath(scenario))
    base = Path(os.path.abspath(root or os.getcwd()))
    try:
        relative = path.relative_to(base)
    except ValueError:
        relative = Path(path.name)
    if not relative.name:  # "", the current folder or "/": no file to name the golden after
        given = str(scenario)
        what = "is a folder, not a scenario file" if given else "no file named (an empty path)"
        raise ScenarioError(Problem("", what, "a scenario YAML file"), given or "''")
    stem = "__".join(relative.with_suffix("").parts)
    return Path(golden_dir) / f"{stem}.json"


def _relative_name(scenario: str | os.PathLike[str], root: str | os.PathLike[str] | None) -> str:
    path = Path(os.path.abspath(scenario))
    try:
        return path.relative_to(os.path.abspath(root or os.getcwd())).as_posix()
    except ValueError:
        return path.name


def load_golden(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and check a golden file; a ScenarioError naming the file and key if it is bad."""
    source = str(path)
    if os.path.exists(path) and not os.path.isfile(path):
        raise ClustersimError(f"{source}: not a regular file, so not a golden file")
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ClustersimError(
            f"{source}: no golden file (record one with `clustersim golden record`)"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ClustersimError(f"{source}: not a readable JSON golden file: {exc}") from None
    problems = _golden_problems(doc)
    if problems:
        raise ScenarioError(problems, source)
    return doc


def _is_number(value: Any) -> bool:
    """A finite JSON number (``NaN`` and ``Infinity``, which Python's json reads, are not)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _tolerance_problem(path: str, value: Any) -> Problem | None:
    """Why ``value`` is no relative tolerance (a finite number >= 0), or None."""
    if _is_number(value) and value >= 0:
        return None
    return Problem(path, f"expected a finite number >= 0, got {value!r}", "e.g. 0.01 (1%)")


def _golden_problems(doc: Any) -> list[Problem]:
    if not isinstance(doc, dict):
        return [Problem("<top level>", "expected a JSON object")]
    problems = []
    metrics = doc.get("metrics")
    if not isinstance(metrics, dict):
        problems.append(Problem("metrics", "missing or not an object of metric -> number"))
    else:
        problems += [
            Problem(f"metrics.{k}", f"expected a finite number, got {v!r}")
            for k, v in metrics.items()
            if not _is_number(v)
        ]
    problems += _overrides_problems(doc.get("overrides", []))
    problems.append(_tolerance_problem("rtol", doc.get("rtol", DEFAULT_RTOL)))
    tolerances = doc.get("tolerances", {})
    if not isinstance(tolerances, dict):
        problems.append(Problem("tolerances", "expected an object of metric glob -> rtol"))
    else:
        problems += [_tolerance_problem(f"tolerances.{k}", v) for k, v in tolerances.items()]
    return [p for p in problems if p is not None]


def _overrides_problems(overrides: Any) -> list[Problem]:
    """Why ``overrides`` is no list of ``KEY=VALUE`` texts (empty if it is one)."""
    from ..scenario.overrides import parse_set

    if not isinstance(overrides, list):
        return [Problem("overrides", "expected a list of KEY=VALUE texts")]
    problems = []
    for i, text in enumerate(overrides):
        try:
            parse_set(text if isinstance(text, str) else "", sweep=False)
        except ScenarioError as exc:
            got = exc.problems[0].message
            problems.append(Problem(f"overrides[{i}]", f"not a KEY=VALUE override: {got}"))
    return problems


def golden_document(
    scenario: str | os.PathLike[str],
    measured: dict[str, Any],
    previous: dict[str, Any] | None = None,
    rtol: float | None = None,
    root: str | os.PathLike[str] | None = None,
    overrides: Sequence[str] = (),
) -> dict[str, Any]:
    """The golden file's content for a measurement; ``rtol`` and ``tolerances`` are kept
    from ``previous`` (an older golden) unless ``rtol`` is given; ``overrides`` (the
    ``--set KEY=VALUE`` texts of the run) are written only when there are any."""
    previous = previous or {}
    replayed = {"overrides": list(overrides)} if overrides else {}
    return {
        "clustersim_version": __version__,
        "scenario": measured["scenario"],
        "scenario_file": _relative_name(scenario, root),
        "scenario_sha256": measured["scenario_sha256"],
        "seed": measured["seed"],
        **replayed,
        "rtol": rtol if rtol is not None else previous.get("rtol", DEFAULT_RTOL),
        "tolerances": previous.get("tolerances", {}),
        "metrics": measured["metrics"],
    }


def write_golden(path: str | os.PathLike[str], doc: dict[str, Any]) -> Path:
    """Write ``doc`` to ``path`` (folders made, temporary file renamed into place)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(target, json.dumps(doc, indent=2) + "\n")


def _check_rtol(rtol: float | None, flag: str = "--rtol") -> None:
    problem = None if rtol is None else _tolerance_problem(flag, rtol)
    if problem is not None:
        raise ScenarioError(problem)


def record(
    scenarios: Sequence[str | os.PathLike[str]],
    golden_dir: str | os.PathLike[str],
    rtol: float | None = None,
    jobs: int | None = None,
    root: str | os.PathLike[str] | None = None,
    flag: str = "--dir",
    max_events: int | None = None,
    overrides: Sequence[str] = (),
    scheduler: str | None = None,
    max_memory: float | None = None,
) -> list[Path]:
    """Run every scenario and write its golden file into ``golden_dir``; return the paths.

    ``overrides`` (``--set KEY=VALUE`` texts, one value each) are applied to every scenario
    and written into its golden file, so that :func:`check` applies them again.

    An existing golden's ``rtol`` and ``tolerances`` are kept (``rtol`` given replaces it).
    ``golden_dir`` and the files' names are checked before anything runs (errors at key
    path ``flag``); each file is then replaced on its own, atomically (the folder holds the
    goldens of other scenarios too, so it is not replaced as a unit).
    """
    _check_rtol(rtol)
    check_output_folder(golden_dir, flag, whole=False)
    targets = _unique_targets(scenarios, golden_dir, root)
    for target in targets:
        check_output_file(target, flag)
    previous = [_previous(target) for target in targets]
    overrides = tuple(overrides)
    sets = [overrides] * len(scenarios)
    measured = measure_all(scenarios, jobs, max_events, sets, scheduler, max_memory)
    return [
        write_golden(target, golden_document(s, m, old, rtol, root, overrides))
        for s, m, old, target in zip(scenarios, measured, previous, targets)
    ]


def _unique_targets(
    scenarios: Sequence[str | os.PathLike[str]],
    golden_dir: str | os.PathLike[str],
    root: str | os.PathLike[str] | None,
) -> list[Path]:
    targets = [golden_path(s, golden_dir, root) for s in scenarios]
    seen: dict[Path, str] = {}
    for scenario, target in zip(scenarios, targets):
        if target in seen and seen[target] != os.path.abspath(scenario):
            raise ClustersimError(
                f"{scenario}: has the same golden file {target} as {seen[target]}"
            )
        seen[target] = os.path.abspath(scenario)
    return targets


def _previous(target: Path) -> dict[str, Any] | None:
    """The golden already at ``target`` (its tolerances are kept), None if there is none."""
    return load_golden(target) if target.exists() else None


# --------------------------------------------------------------------------- checking


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
) -> list[GoldenReport]:
    """Re-run every scenario and compare it with its golden file in ``golden_dir``, with
    the overrides the file records.

    Bad input (a missing scenario or golden file, an unreadable golden) raises
    before anything runs; a scenario that cannot be read is named before its golden file.
    """
    from ..scenario import load_scenario

    _check_rtol(rtol)
    for scenario in scenarios:
        load_scenario(scenario)  # errors name the scenario file as given
    targets = [golden_path(s, golden_dir, root) for s in scenarios]
    docs = [load_golden(target) for target in targets]
    overrides = [doc.get("overrides", []) for doc in docs]
    measured = measure_all(scenarios, jobs, max_events, overrides, scheduler, max_memory)
    reports = [
        compare(doc, m, rtol, str(s), str(target))
        for s, m, doc, target in zip(scenarios, measured, docs, targets)
    ]
    for report, texts in zip(reports, overrides):
        if texts:
            report.notes.append("run with " + " ".join(f"--set {t}" for t in texts))
    return reports


def goldens_in(golden_dir: str | os.PathLike[str]) -> Iterable[Path]:
    """The golden files in ``golden_dir``, sorted."""
    return sorted(Path(golden_dir).glob("*.json"))


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
