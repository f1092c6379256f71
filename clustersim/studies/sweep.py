"""Parameter grids over scenarios, run in parallel on local cores.

A sweep takes scenario documents, sets key paths in them (``--set
cluster.rack_uplink.oversubscription=1,2,4``: several keys make a grid, their
cartesian product), runs every point through :func:`clustersim.api.simulate`
in a process pool, and tabulates one numeric summary key (the *metric*, e.g.
``iteration_time_s`` in seconds) per point:

```python
from clustersim.studies import sweep
jobs = sweep.build_jobs(["a.yaml", "b.yaml"], [sweep.parse_set("cluster.rack_uplink.oversubscription=1,4")])
rows = sweep.table_rows(jobs, sweep.run_jobs(jobs, workers=2), "iteration_time_s")
sweep.write_outputs(rows, "reports/cmp", ["cluster.rack_uplink.oversubscription"], "iteration_time_s")
```

Nothing here prints; the CLI (``clustersim compare``) shows progress.
"""

from __future__ import annotations

import csv
import itertools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ClustersimError, Problem, ScenarioError, SimulationError
from ..outputs.atomic import write_atomic
from ..outputs.figures import save_png_svg
from ..outputs.folder import replace_folder
from ..outputs.tables import cell as table_cell
from ..outputs.tables import csv_text, markdown_escape, markdown_table
from ..scenario.overrides import (  # noqa: F401  (re-exported: compare's public names)
    PathPart,
    Setting,
    check_unique,
    described,
    get_path,
    parse_key_path,
    parse_set,
    parse_value,
    set_path,
    value_text,
)
from .runner import memory_workers, run_all, worker_count
from .sweep_plot import (  # noqa: F401  (LOG_SPAN*, plot_figure: re-exported)
    FALLBACK_METRIC,
    LOG_SPAN,
    LOG_SPAN_Y,
    MODEL_COLUMN,
    NOTE_COLUMN,
    _is_number,
    plot_figure,
)

if TYPE_CHECKING:
    from ..budget import WorkEstimate

DEFAULT_METRIC = "iteration_time_s"
EXTRA_COLUMNS = ("makespan_s", "throughput_samples_per_s")
"""Summary keys added to the table when some scenario has them."""
FLAT = 0.01
"""The reading calls a metric unchanged while it stays within this fraction of its first value."""


# --------------------------------------------------------------------------- --set and grids
# Key paths, values and --set live in clustersim.scenario.overrides (run, plan and golden
# use them too); they are re-exported here, where compare's users found them.


def expand_grid(settings: Sequence[Setting]) -> list[dict[str, Any]]:
    """Every combination of the settings' values, the first key varying slowest.

    Each point maps key (as written) to value; no settings give one empty point.
    """
    check_unique(settings)
    keys = [s.key for s in settings]
    return [dict(zip(keys, combo)) for combo in itertools.product(*(s.values for s in settings))]


# --------------------------------------------------------------------------- jobs


@dataclass
class Job:
    """One point of the sweep: a scenario document with the grid's values set."""

    index: int
    source: str
    """The file the scenario came from."""
    label: str
    """Scenario name (file stem when two files share a name)."""
    point: dict[str, Any]
    """Swept key -> value."""
    doc: dict[str, Any] = field(repr=False)
    model: str = ""
    """The model preset of a training scenario ("" otherwise)."""
    memory_bytes: float = 0.0
    """The run's estimated peak memory (:func:`clustersim.budget.estimate_memory`)."""
    memory_limit: float | None = None
    """Its memory limit, bytes (``engine.max_memory`` or the machine's default)."""
    work: WorkEstimate | None = None
    """The run's estimated work (None: its strategy cannot say)."""


def load_document(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The YAML document of the scenario file at ``path``, validated as a scenario."""
    from ..scenario import _load_yaml, _read_text, parse_scenario

    source = str(path)
    doc = _load_yaml(_read_text(path, source), source)
    parse_scenario(doc, source)
    assert isinstance(doc, dict)
    return doc


def build_jobs(
    files: Sequence[str | os.PathLike[str]],
    settings: Sequence[Setting],
    max_events: int | None = None,
    max_memory: float | None = None,
) -> list[Job]:
    """One job per file and grid point, each document re-validated against its topology
    and its estimated work and memory against their limits: ``max_events`` and
    ``max_memory`` (bytes; written into every document as ``engine.max_events`` and
    ``engine.max_memory``), else the document's own.

    Errors name the file, the --set values of the point and the key path (ScenarioError).
    """
    from ..api import prepare
    from ..budget import with_limit
    from ..scenario import parse_scenario

    grid = expand_grid(settings)
    docs = [(str(f), load_document(f)) for f in files]
    labels = _labels(docs)
    jobs: list[Job] = []
    for (source, doc), label in zip(docs, labels):
        for point in grid:
            changed = doc
            for setting in settings:
                try:
                    changed = set_path(changed, setting.path, point[setting.key])
                except ScenarioError as exc:
                    single = {setting.key: point[setting.key]}
                    raise exc.with_source(_set_source(source, single)) from None
            changed = with_limit(changed, max_events, max_memory)
            try:
                prepared = prepare(parse_scenario(changed, source=source))
            except ScenarioError as exc:
                if not point:
                    raise
                raise exc.with_source(_set_source(source, point)) from None
            model = changed.get("model")
            preset = model.get("preset") if isinstance(model, dict) else None
            memory, limit = prepared.memory.total, prepared.strategy.max_memory
            job = Job(len(jobs), source, label, point, changed, str(preset or ""), memory, limit)
            job.work = prepared.work
            jobs.append(job)
    return jobs


def jobs_notice(
    jobs: Sequence[Job], workers: int | None = None, scheduler: str | None = None
) -> str:
    """What to say before the jobs start when they are estimated long
    (:func:`clustersim.budget.long_runs_notice`): their time on the processes
    :func:`run_jobs` starts, their events, and what would shorten them (fewer ``--set``
    values; what shortens the longest job, its scenario prepared again, but a key swept).
    Empty on a Dask cluster (``scheduler``), whose workers are not counted here."""
    from ..api import prepare
    from ..budget import long_runs_notice
    from ..scenario import parse_scenario

    if scheduler is not None:
        return ""
    memory = [j.memory_bytes for j in jobs]
    limit = min((j.memory_limit for j in jobs if j.memory_limit), default=None)
    processes = memory_workers(worker_count(workers, len(jobs)), memory, limit)

    swept = tuple(f"--set {key}=" for job in jobs for key in job.point)

    def shorter(index: int) -> list[str]:
        job = jobs[index]
        hints = prepare(parse_scenario(job.doc, source=job.source)).strategy.shorter()
        return [hint for hint in hints if not hint.startswith(swept)]

    more = ["fewer --set values"] if len(jobs) > 1 else []
    return long_runs_notice([j.work for j in jobs], processes, shorter, more)


def _set_source(source: str, point: dict[str, Any]) -> str:
    """``source`` naming the ``--set`` values that made its document: the file of an error
    found after setting them (``a.yaml with --set seed=-1``)."""
    return described(source, [f"{key}={value_text(value)}" for key, value in point.items()])


def _labels(docs: Sequence[tuple[str, dict[str, Any]]]) -> list[str]:
    names = [str(doc.get("name", "")) for _, doc in docs]
    if len(set(names)) == len(names):
        return names
    return [Path(source).stem if names.count(n) > 1 else n for (source, _), n in zip(docs, names)]


def run_document(doc: dict[str, Any], source: str) -> dict[str, Any]:
    """Simulate one document; its summary's top-level numbers, or ``{"error": message}``.

    Runs in a worker process: errors come back as text (they do not pickle).
    """
    from ..api import simulate
    from ..scenario import parse_scenario

    try:
        summary = simulate(parse_scenario(doc, source=source)).typed_summary
    except ClustersimError as exc:
        return {"error": str(exc), "simulation": isinstance(exc, SimulationError)}
    return summary.numbers()


def run_jobs(
    jobs: Sequence[Job],
    workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    scheduler: str | None = None,
) -> list[dict[str, Any]]:
    """Each job's numeric summary keys, in job order; ``workers`` processes (default: all cores),
    no more than fit in the memory limit together (their estimates).

    With one worker (or one job) the jobs run in this process; with ``scheduler``, on that
    Dask cluster (:func:`run_all`). ``progress(done, total)`` is called after each job. A
    failed job raises its error, naming the file.
    """
    calls = [(j.doc, j.source) for j in jobs]
    memory = [j.memory_bytes for j in jobs]
    limit = min((j.memory_limit for j in jobs if j.memory_limit), default=None)
    results = run_all(
        run_document,
        calls,
        workers,
        progress,
        scheduler=scheduler,
        memory=memory,
        memory_limit=limit,
    )
    for job, result in zip(jobs, results):
        if "error" in result:
            where = ", ".join(f"{k}={v}" for k, v in job.point.items())
            text = f"{job.source}{f' ({where})' if where else ''}: {result['error']}"
            raise SimulationError(text) if result["simulation"] else ClustersimError(text)
    return results


# --------------------------------------------------------------------------- tables


def table_rows(
    jobs: Sequence[Job], results: Sequence[dict[str, Any]], metric: str = DEFAULT_METRIC
) -> list[dict[str, Any]]:
    """One row per job: scenario, [model], swept keys, the metric, makespan/throughput, [note].

    ``iteration_time_s`` falls back to ``makespan_s`` for a scenario without
    iterations (the row's ``note`` says so); any other missing metric is an error.
    """
    rows = []
    for job, result in zip(jobs, results):
        row: dict[str, Any] = {"scenario": job.label}
        if any(j.model for j in jobs):
            row[MODEL_COLUMN] = job.model
        row.update(job.point)
        row[metric] = _metric_value(job, result, metric, row)
        for key in EXTRA_COLUMNS:
            if key != metric and key in result:
                row[key] = result[key]
        rows.append(row)
    return rows


def _metric_value(job: Job, result: dict[str, Any], metric: str, row: dict[str, Any]) -> float:
    if metric in result:
        return result[metric]
    if metric == DEFAULT_METRIC and FALLBACK_METRIC in result:
        row[NOTE_COLUMN] = f"no {DEFAULT_METRIC}: {FALLBACK_METRIC} shown"
        return result[FALLBACK_METRIC]
    numeric = ", ".join(sorted(k for k in result if k != "seed"))
    raise ScenarioError(
        Problem("--metric", f"the summary of {job.label} has no numeric key {metric!r}", numeric),
        job.source,
    )


def table_columns(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The columns of ``rows`` in first-seen order, ``note`` last."""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    if NOTE_COLUMN in columns:
        columns.remove(NOTE_COLUMN)
        columns.append(NOTE_COLUMN)
    return columns


WHOLE_BELOW = 1e15
"""Whole floats of smaller magnitude are written without ``.0`` in compare.csv and compare.md."""


def _cell(value: Any) -> str:
    return table_cell(value, WHOLE_BELOW)


def rows_csv(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as CSV text (missing cells empty)."""
    columns = table_columns(rows)
    return csv_text(columns, ([_cell(row.get(c)) for c in columns] for row in rows))


def read_csv(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Rows of a compare.csv, numbers parsed back (empty cells left out)."""
    with open(path, newline="", encoding="utf-8") as fh:
        return [
            {k: parse_value(v) for k, v in row.items() if v != ""} for row in csv.DictReader(fh)
        ]


def _md_cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return markdown_escape(_cell(value))


def rows_markdown(rows: Sequence[dict[str, Any]], title: str = "") -> str:
    """The rows as a Markdown table, under ``# title`` when given."""
    columns = table_columns(rows)
    lines = [f"# {title}", ""] if title else []
    lines += markdown_table(columns, ([_md_cell(row.get(c, "")) for c in columns] for row in rows))
    if any(NOTE_COLUMN in row for row in rows):
        lines += [
            "",
            f"Rows with a note have no `{DEFAULT_METRIC}`: they show `{FALLBACK_METRIC}`.",
        ]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- outputs


def write_outputs(
    rows: Sequence[dict[str, Any]],
    out_dir: str | os.PathLike[str],
    keys: Sequence[str],
    metric: str,
    title: str = "",
    flag: str = "output folder",
) -> list[Path]:
    """Replace the folder ``out_dir`` by one holding compare.csv, compare.md, compare.png
    and compare.svg
    (:func:`clustersim.outputs.folder.replace_folder`: as a unit, and only a folder of
    clustersim's outputs; ``flag`` names ``out_dir`` in errors)."""
    title = title or f"{metric} against {keys[0] if keys else 'scenario'}"

    def fill(out: Path) -> list[str]:
        figure = plot_figure(rows, keys, metric, title)
        return [
            write_atomic(out / "compare.csv", rows_csv(rows)).name,
            write_atomic(out / "compare.md", rows_markdown(rows, title)).name,
            *(p.name for p in save_png_svg(figure, out / "compare.png")),
        ]

    return replace_folder(out_dir, fill, flag)


# --------------------------------------------------------------------------- reading


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def reading(rows: Sequence[dict[str, Any]], key: str, metric: str = DEFAULT_METRIC) -> str:
    """A short Markdown reading: per model, which scenario is fastest at each value of ``key``.

    ``rows`` are compare rows (as :func:`read_csv` gives them); the metric is
    taken to be seconds, lower is better.
    """
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(str(row.get(MODEL_COLUMN, "")), []).append(row)
    lines = [f"# Reading: {metric} against {key}", ""]
    for model, group in groups.items():
        lines += _group_reading(model, group, key, metric)
    return "\n".join(lines).rstrip() + "\n"


def _group_reading(model: str, rows: list[dict[str, Any]], key: str, metric: str) -> list[str]:
    """A table of the metric (ms) by value of ``key``, the winner at each value, and growth."""
    values = list(dict.fromkeys(row[key] for row in rows))
    scenarios = list(dict.fromkeys(row["scenario"] for row in rows))
    cell = {(row["scenario"], row[key]): row[metric] for row in rows}
    winners = [
        min((s for s in scenarios if (s, v) in cell), key=lambda s: cell[(s, v)]) for v in values
    ]
    lines = [f"## {model}", ""] if model else []
    lines += [f"`{metric}` in ms by `{key}`; the fastest in bold.", ""]
    table = []
    for s in scenarios:
        cells = [_ms(cell[(s, v)]) if (s, v) in cell else "—" for v in values]
        table.append([s] + [f"**{c}**" if s == w else c for c, w in zip(cells, winners)])
    header = ["scenario"] + [str(v) for v in values]
    lines += markdown_table(header, table, right_aligned=range(1, len(header)))
    lines.append("")
    lines += [_value_line(key, v, scenarios, cell) for v in values]
    lines += _winner_lines(key, values, winners)
    lines += [_growth_line(key, values, s, cell) for s in scenarios]
    return lines + [""]


def _value_line(key: str, value: Any, scenarios: list[str], cell: dict) -> str:
    ranked = sorted((cell[(s, value)], s) for s in scenarios if (s, value) in cell)
    best_time, best = ranked[0]
    text = f"- {key} = {value}: **{best}** is fastest ({_ms(best_time)})"
    if len(ranked) > 1:
        runner_time, runner = ranked[1]
        worst_time, worst = ranked[-1]
        text += f", {_ratio(runner_time, best_time)} ahead of {runner} ({_ms(runner_time)})"
        text += f"; slowest {worst} ({_ms(worst_time)}, {_times(worst_time, best_time)})"
    return text + "."


def _winner_lines(key: str, values: list[Any], winners: list[str]) -> list[str]:
    changes = [i for i in range(1, len(values)) if winners[i] != winners[i - 1]]
    if not changes:
        return [f"- {winners[0]} wins at every {key}."]
    return [
        f"- The winner changes from {winners[i - 1]} to {winners[i]} "
        f"between {key} = {values[i - 1]} and {values[i]}."
        for i in changes
    ]


def _growth_line(key: str, values: list[Any], scenario: str, cell: dict) -> str:
    """How the scenario's metric grows from the first value of ``key`` to the last."""
    own = [(v, cell[(scenario, v)]) for v in values if (scenario, v) in cell]
    (first_value, first), (last_value, last) = own[0], own[-1]
    flat = [v for v, t in own if abs(t - first) <= FLAT * abs(first)]
    text = f"- {scenario}: {_ms(first)} at {first_value}"
    if len(flat) > 1 and flat[-1] != last_value:
        text += f", unchanged (within {FLAT:.0%}) up to {flat[-1]}"
    if last_value != first_value:
        text += f", {_times(last, first).replace(' the fastest', '')} that at {last_value}"
    return text + "."


def _ratio(slower: float, faster: float) -> str:
    """How much faster ``faster`` is, as a percentage of it."""
    if faster <= 0:
        return "n/a"
    return f"{100 * (slower / faster - 1):.1f}%"


def _times(slower: float, faster: float) -> str:
    return f"{slower / faster:.2f}x the fastest" if faster > 0 else "n/a"


def write_reading(out_dir: str | os.PathLike[str], key: str, metric: str = DEFAULT_METRIC) -> Path:
    """Write ``out_dir``/README.md: the :func:`reading` of ``out_dir``/compare.csv."""
    out = Path(out_dir)
    return write_atomic(out / "README.md", reading(read_csv(out / "compare.csv"), key, metric))
