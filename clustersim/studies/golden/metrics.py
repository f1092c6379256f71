"""The golden metrics of a run, and the runs that measure them.

:func:`metrics_of` says which numbers of a run summary a golden file keeps (flat dotted
keys: times in seconds, memory in bytes, utilisation 0..1); :func:`measure` simulates a
scenario for them, :func:`measure_all` many scenarios on the studies' one process pool
(:func:`~clustersim.studies.runner.run_all`).
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ...budget import long_runs_notice
from ...errors import ClustersimError, SimulationError
from ...metrics import Summary
from ...strategies.hybrid.summary import HybridSummary
from ...strategies.jobs.summary import JobsSummary
from ..runner import memory_workers, run_all, worker_count

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

Measure = Callable[[str], dict[str, Any]]


def _rounded(value: float) -> float:
    """``value`` rounded to 12 significant digits, as summary.json stores floats."""
    return float(f"{float(value):.12g}")


def metrics_of(summary: Summary | Mapping[str, Any]) -> dict[str, float]:
    """The golden metrics of a run summary, as flat dotted keys.

    Top-level timings (:data:`TOP_METRICS`), each pipeline stage's
    ``activation_memory.<stage>.peak_bytes``, ``devices.<device>.<key>`` for the
    first :data:`MAX_DEVICES` devices, ``busiest_link.utilisation`` (0..1) and, where NICs
    run TCP, ``tcp.cpu_s``; in a
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
    if typed.tcp is not None:
        out["tcp.cpu_s"] = _rounded(typed.tcp.cpu_s)
    return out


def scenario_sha256(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of the scenario file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _loaded(path: str | os.PathLike[str], overrides: Sequence[str] = ()) -> tuple[Any, Any]:
    """The document of the scenario at ``path`` with the ``--set KEY=VALUE`` texts
    ``overrides`` applied, and the scenario it validates to."""
    from ...scenario.overrides import load_with_settings, parse_set

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
    from ...api import simulate

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
    from ...scenario import parse_scenario

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
    announce: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """:func:`measure` of every path, in order, on ``jobs`` processes (default: all cores)
    or on the Dask cluster ``scheduler`` (:func:`run_all`); ``overrides``: each path's
    ``--set KEY=VALUE`` texts (default: none).

    Every scenario is checked first, its estimated work and memory against their limits
    (``max_events`` and ``max_memory``, else its ``engine.max_events`` and
    ``engine.max_memory``) included: bad input raises before anything runs.  Runs
    estimated long together are then announced (``announce(text)``,
    :func:`clustersim.budget.long_runs_notice`; not on a Dask cluster, whose workers are
    not counted here)."""
    from ...api import prepare
    from ...scenario.overrides import described

    names = [str(p) for p in paths]
    sets = [tuple(o) for o in overrides] if overrides is not None else [()] * len(names)
    for name in names:
        if not Path(name).is_file():
            raise ClustersimError(f"{name}: no such scenario file")
    loaded = [_loaded(name, texts) for name, texts in zip(names, sets)]
    prepared = [prepare(s, max_events=max_events, max_memory=max_memory) for _, s in loaded]
    memory = [p.memory.total for p in prepared]
    limit = min((p.strategy.max_memory or math.inf for p in prepared), default=None)
    if announce is not None and scheduler is None:
        processes = memory_workers(worker_count(jobs, len(names)), memory, limit)
        more = ["fewer SCENARIOs"] if len(names) > 1 else []
        notice = long_runs_notice([p.work for p in prepared], processes, more=more)
        if notice:
            announce(notice)
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
