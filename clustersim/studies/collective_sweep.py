"""The collective sweep, nccl-tests style: time one operation over a range of sizes.

```python
from clustersim.studies.collective_sweep import flat_cluster, scenario_of, sweep
scenario = scenario_of(flat_cluster("ring", 8, "54GB/s", "1us"))
rows = sweep(scenario, "allreduce", [160e6], ["ring"])
rows[0]["time_s"], rows[0]["busbw_GBps"]
```

Each (size, algorithm) point runs on a fresh :class:`~clustersim.engine.Simulation`
of the cluster: the collective is started ``iterations`` times back to back and
the time of one is the simulated end time over ``iterations``.  Bandwidths are
nccl-tests': algbw = size / time, busbw = algbw x the operation's bus factor
(:func:`clustersim.collectives.bandwidths`), both in GB/s (1e9 bytes/s).

The clusters come from :mod:`clustersim.scenario.shorthand` (its names are
re-exported here, as the sweep's users build their cluster with them).  This
module computes; it never prints.  The ``clustersim collective`` command formats
its rows.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..collectives import (
    CollectiveCall,
    applicable_algorithms,
    bandwidths,
    canonical_op,
    check_call,
    registered_algorithms,
    root_problem,
    run_collective,
    timed_group_problem,
    what_ran,
)
from ..collectives.protocol import check_protocol
from ..errors import Problem, ScenarioError, hinted
from ..outputs.figures import save_png_svg
from ..outputs.tables import cell, csv_text
from ..scenario.shorthand import (
    FLAT_KINDS,
    PLACEHOLDER_WORKLOAD,
    SCENARIO_KEYS,
    TOPOLOGIES,
    TWO_TIER_DEFAULTS,
    flat_cluster,
    load_cluster,
    scenario_of,
    two_tier_cluster,
)
from ..units import UnitError, parse_size
from .collective_work import (  # noqa: F401  (check_point_work, check_sweep_work: re-exported)
    Limits,
    check_point_work,
    check_points_work,
    check_sweep_work,
    shorter_sweep,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ..scenario import Scenario
    from ..topology import Topology

__all__ = [
    "FLAT_KINDS",
    "GB",
    "MAX_POINTS",
    "MODELS",
    "PLACEHOLDER_WORKLOAD",
    "ROW_KEYS",
    "SCENARIO_KEYS",
    "TOPOLOGIES",
    "TWO_TIER_DEFAULTS",
    "flat_cluster",
    "group_devices",
    "link_figures",
    "load_cluster",
    "parse_sizes",
    "plot_figure",
    "resolve_algorithms",
    "rows_csv",
    "run_point",
    "save_figure",
    "scenario_of",
    "sweep",
    "two_tier_cluster",
]

ROW_KEYS = (
    "op",
    "algorithm",
    "bytes",
    "devices",
    "time_s",
    "algbw_GBps",
    "busbw_GBps",
    "chosen",
    "protocol",
    "channels",
)
"""Keys of every row :func:`sweep` returns, in order (the JSON and CSV columns): ``chosen``
is what ran (``algorithm/protocol``, ``auto`` resolved), ``protocol`` the protocol priced
(``none`` for line rates), ``channels`` the channel count (``auto``: NCCL's)."""

MAX_POINTS = 1000
"""Most sizes a range may expand to."""

MODELS = ("flow", "analytical")
"""How a point is priced: simulated flows or the algorithm's alpha-beta formula."""

GB = 1e9

# --------------------------------------------------------------------------- sizes


def parse_sizes(text: str, path: str = "--bytes") -> list[float]:
    """Sizes in bytes from ``SIZE``, ``MIN:MAX:xF`` (multiply by F) or ``MIN:MAX:+STEP`` (add).

    A range runs from MIN up to MAX included (MAX itself only if a step lands
    on it); F must be > 1 and STEP a size > 0.  Raises ScenarioError at ``path``.
    """
    parts = str(text).strip().split(":")
    if len(parts) == 1:
        return [_size(parts[0], path)]
    if len(parts) != 3:
        raise ScenarioError(
            Problem(
                path, f"cannot read size range {text!r}", "SIZE, MIN:MAX:xFACTOR or MIN:MAX:+STEP"
            )
        )
    low, high = _size(parts[0], path), _size(parts[1], path)
    if low > high:
        raise ScenarioError(
            Problem(path, f"range minimum {parts[0]} is larger than its maximum {parts[1]}")
        )
    return _expand(low, high, parts[2].strip(), path)


def _size(text: str, path: str) -> float:
    try:
        return parse_size(text.strip())
    except UnitError as exc:
        raise ScenarioError(Problem(path, exc.message, exc.allowed)) from None


def _expand(low: float, high: float, step: str, path: str) -> list[float]:
    """The sizes from ``low`` to ``high`` by ``step`` (``xF`` or ``+SIZE``)."""
    limit = high * (1 + 1e-9)
    if step[:1] in ("x", "*"):
        factor = _factor(step[1:], path)
        if low <= 0:
            raise ScenarioError(Problem(path, "a range multiplied by a factor must start above 0"))
        count = int(math.floor(math.log(limit / low) / math.log(factor))) + 1
        _check_count(count, path)
        return [float(round(low * factor**i, 6)) for i in range(count)]
    if step[:1] == "+":
        increment = _size(step[1:], path)
        if increment <= 0:
            raise ScenarioError(Problem(path, "the step of a range must be larger than 0"))
        count = int(math.floor((limit - low) / increment)) + 1
        _check_count(count, path)
        return [low + i * increment for i in range(count)]
    raise ScenarioError(
        Problem(path, f"cannot read range step {step!r}", "xFACTOR (e.g. x2) or +STEP (e.g. +1MB)")
    )


def _factor(text: str, path: str) -> float:
    try:
        factor = float(text)
    except ValueError:
        factor = float("nan")
    if not math.isfinite(factor) or factor <= 1:
        raise ScenarioError(Problem(path, f"range factor x{text} must be a number larger than 1"))
    return factor


def _check_count(count: int, path: str) -> None:
    if count > MAX_POINTS:
        raise ScenarioError(
            Problem(path, f"the range gives {count:,} sizes", f"at most {MAX_POINTS:,}")
        )


# --------------------------------------------------------------------------- the sweep


def group_devices(topology: Topology, glob: str | None = None) -> tuple[str, ...]:
    """Devices of the benchmarked group: those matching ``glob``, or every GPU (every device if none)."""
    if glob:
        return tuple(d.name for d in topology.select(glob, "--group"))
    devices = list(topology.devices.values())
    gpus = [d.name for d in devices if d.kind == "gpu"]
    return tuple(gpus or [d.name for d in devices])


def resolve_algorithms(
    op: str, devices: tuple[str, ...], topology: Topology, requested: str | Sequence[str] = "all"
) -> list[str]:
    """The algorithm names to run: every applicable one for ``"all"`` (``auto``, which only
    chooses among them, left out), else those given, checked.

    ``requested`` is ``"all"``, a name, comma-separated names or a sequence of names.

    Raises ScenarioError (unknown name with did-you-mean, or not applicable to
    ``op`` on this group and topology, naming the applicable ones).
    """
    if isinstance(requested, str):
        requested = [name.strip() for name in requested.split(",") if name.strip()]
    requested = list(dict.fromkeys(requested))
    known = registered_algorithms()
    if list(requested) in ([], ["all"]):
        names = [n for n in applicable_algorithms(op, devices, topology) if n != "auto"]
        if not names:
            raise ScenarioError(
                Problem(
                    "--algorithm",
                    f"no registered algorithm implements {op} here",
                    ", ".join(known) or "none registered",
                )
            )
        return names
    for name in requested:
        if name not in known:
            raise ScenarioError(
                Problem(
                    "--algorithm",
                    hinted(f"unknown algorithm {name!r}", name, known),
                    ", ".join(["all", *known]),
                )
            )
        check_call(CollectiveCall(op, devices, 0.0, algorithm=name), topology, "--algorithm")
    return list(requested)


def sweep(
    scenario: Scenario,
    op: str,
    sizes: Sequence[float],
    algorithms: str | Sequence[str] = "all",
    *,
    group: str | None = None,
    root: int = 0,
    chunk_bytes: float | None = None,
    bidirectional: bool = False,
    reduce_cost: bool = False,
    model: str = "flow",
    iterations: int = 1,
    progress: Callable[[int, int], None] | None = None,
    topology: Topology | None = None,
    channels: int | str = 1,
    protocol: str | None = None,
    group_flag: str = "",
    max_events: int | None = None,
    max_memory: float | None = None,
    announce: Callable[[str], None] | None = None,
    work_progress: Callable[[float, float], None] | None = None,
) -> list[dict[str, Any]]:
    """Time ``op`` for every size (bytes) and algorithm on ``scenario``'s cluster.

    Returns one row per point, sizes in the outer loop, with the keys
    :data:`ROW_KEYS`: ``bytes`` (nccl-tests size), ``devices`` (group size),
    ``time_s`` (seconds per iteration), ``algbw_GBps`` and ``busbw_GBps``
    (1e9 bytes/s).  ``progress(done, total)`` is called after each point.
    ``channels`` runs each collective as that many slices at once (``auto``: NCCL's count);
    ``protocol`` prices NCCL's protocol (``LL``, ``LL128``, ``Simple``, ``auto``; None or
    ``none``: line rates).  These defaults are the textbook's; ``clustersim collective``
    passes NCCL's (``auto`` for all three).  ``chosen`` is what ran: ``algorithm/protocol``,
    ``auto`` resolved.  Everything is checked before the first
    point runs: a group of fewer than 2 ranks is refused (with one nothing moves), at
    ``group_flag`` (default ``--group`` or ``--devices``), and ``root`` must be a rank.
    The work of every point is checked too: a point estimated over ``max_events`` events
    (default: the scenario's ``engine.max_events``), or all of them together, is refused
    before any runs (:class:`clustersim.budget.WorkLimitError`), and so is a point whose
    peak memory is estimated over ``max_memory`` bytes (default: the scenario's
    ``engine.max_memory``, else 80% of this machine's;
    :class:`clustersim.budget.MemoryLimitError`).

    Once the checks pass, a sweep estimated longer than
    :data:`~clustersim.budget.NOTICE_AFTER_S` of wall time is announced:
    ``announce(text)`` with :func:`~clustersim.budget.long_work_notice`'s text, naming
    the flags that would shorten it (:func:`shorter_sweep`).  ``work_progress(done,
    total)`` counts events: the sweep's estimate as ``total``, and as ``done`` the
    points run so far plus the events of the point running (its records and transfers
    started, every few thousand steps, :func:`run_point`).
    """
    from ..budget import NOTHING, is_long, long_work_notice
    from ..topology import build_topology

    op = canonical_op(op, "--op")
    if model not in MODELS:
        raise ScenarioError(Problem("--model", f"unknown model {model!r}", ", ".join(MODELS)))
    if iterations < 1:
        raise ScenarioError(Problem("--iterations", f"must be at least 1, got {iterations}"))
    from ..scenario import MAX_CHANNELS

    if channels != "auto" and not (isinstance(channels, int) and 1 <= channels <= MAX_CHANNELS):
        raise ScenarioError(
            Problem("--channels", f"must be from 1 to {MAX_CHANNELS}, got {channels}", "auto")
        )
    if topology is None:
        try:
            topology = build_topology(scenario.cluster)
        except ScenarioError as exc:
            raise exc.with_source(scenario.source) from None
    devices = group_devices(topology, group)
    _check_options(devices, root, chunk_bytes, group_flag or ("--group" if group else "--devices"))
    names = resolve_algorithms(op, devices, topology, algorithms)
    calls = [
        [
            CollectiveCall(
                op,
                devices,
                float(size),
                name,
                root,
                chunk_bytes,
                bidirectional,
                reduce_cost,
                protocol=check_protocol(protocol, "--protocol"),
            )
            for name in names
        ]
        for size in sizes
    ]
    engine = getattr(scenario, "engine", None)
    limits = Limits(
        max_events or getattr(engine, "max_events", None),
        max_memory or getattr(engine, "max_memory", None),
    )
    points = [call for row_calls in calls for call in row_calls]
    works = check_points_work(calls, topology, model, iterations, channels, limits)
    events = [work.events for work in works]
    total = sum(works, NOTHING)
    if announce is not None and is_long(total):
        shorter = shorter_sweep(points, events, len(sizes), topology, model, iterations, channels)
        announce(long_work_notice(total, shorter))
    done, estimated = 0.0, sum(events)
    rows = []
    for call, point_events in zip(points, events):
        within = None
        if work_progress is not None:
            work_progress(done, estimated)
            within = _within_point(work_progress, done, point_events, estimated)
        rows.append(run_point(scenario, topology, call, model, iterations, channels, within))
        done += point_events
        if progress is not None:
            progress(len(rows), len(points))
    if work_progress is not None:
        work_progress(done, estimated)
    return rows


def _within_point(
    work_progress: Callable[[float, float], None], before: float, events: float, total: float
) -> Callable[[float], None]:
    """``run_point``'s progress: the events of the point so far (at most its estimate) after
    the ``before`` of the points run."""
    return lambda counted: work_progress(before + min(counted, events), total)


def _check_options(
    devices: tuple[str, ...], root: int, chunk_bytes: float | None, group_flag: str
) -> None:
    """The group (2 ranks or more, as the ``collective`` workload), the root (a rank of the
    group, for every operation) and the chunk (above 0)."""
    fix = "2 or more devices: --devices N, --group GLOB or --cluster FILE"
    for problem in (
        timed_group_problem(devices, group_flag, fix),
        root_problem(root, len(devices), "--root"),
    ):
        if problem is not None:
            raise ScenarioError(problem)
    if chunk_bytes is not None and chunk_bytes <= 0:
        raise ScenarioError(
            Problem("--chunk", f"the chunk size must be larger than 0, got {chunk_bytes:g} B")
        )


def run_point(
    scenario: Scenario,
    topology: Topology,
    call: CollectiveCall,
    model: str,
    iterations: int,
    channels: int | str = 1,
    progress: Callable[[float], None] | None = None,
) -> dict[str, Any]:
    """One row: ``call`` run ``iterations`` times back to back on a fresh simulation.

    ``progress(events)``: the events done so far (records and transfers started, as the
    estimate counts them), every :data:`~clustersim.engine.STEPS_PER_CHECK` steps."""
    from ..collectives import channel_count, slices
    from ..engine import Simulation

    sim = Simulation.from_scenario(scenario, topology)

    def repeat() -> Any:
        for i in range(iterations):
            yield run_collective(
                sim, call, model=model, iteration=i, record_transfers=False, channels=channels
            )

    def counted(now_s: float) -> None:
        assert progress is not None
        progress(len(sim.records) + sim.network.flows_started)

    sim.process(repeat())
    sim.run(progress=counted if progress is not None else None)
    time_s = sim.now / iterations
    algbw, busbw = bandwidths(call.op, call.n, call.size_bytes, time_s)
    return {
        "op": call.op,
        "algorithm": call.algorithm,
        "bytes": int(call.size_bytes) if call.size_bytes.is_integer() else call.size_bytes,
        "devices": call.n,
        "time_s": time_s,
        "algbw_GBps": algbw / GB,
        "busbw_GBps": busbw / GB,
        "chosen": what_ran(call, topology, channels),
        "protocol": slices(call, topology, channels)[0].protocol or "none",
        "channels": channel_count(call, topology, channels),
    }


def link_figures(scenario: Scenario, protocol: str | None) -> dict[str, float]:
    """The bandwidths (GB/s) the sweep prices links at, per kind, where NCCL's figures apply
    (a protocol priced on a cluster of nodes, :mod:`clustersim.collectives.bus`); else {}."""
    from ..collectives.bus import figures_GBps
    from ..topology import build_topology

    if check_protocol(protocol, "--protocol") is None:
        return {}
    return figures_GBps(build_topology(scenario.cluster))


# --------------------------------------------------------------------------- outputs


def rows_csv(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as CSV text with the :data:`ROW_KEYS` columns (whole floats below 1e18
    without ``.0``; a cell holding a comma or a quote quoted, through :mod:`csv`)."""
    cells = ([cell(row[key], 1e18) for key in ROW_KEYS] for row in rows)
    return csv_text(ROW_KEYS, cells)


def plot_figure(rows: Sequence[dict[str, Any]], title: str) -> Figure:
    """Bus bandwidth (GB/s) against size (bytes, log axis), one line per algorithm.

    Built on the Agg canvas without pyplot (no global state); sizes of 0 bytes
    are left out (no place on a log axis).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from ..outputs.figures import bus_bandwidth_axes

    fig = Figure(figsize=(8, 5), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for name in dict.fromkeys(row["algorithm"] for row in rows):
        points = [(r["bytes"], r["busbw_GBps"]) for r in rows if r["algorithm"] == name]
        points = [p for p in points if p[0] > 0]
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=name)
    bus_bandwidth_axes(fig, ax, title)
    ax.legend(title="algorithm")
    return fig


def save_figure(fig: Figure, path: str | os.PathLike[str]) -> list[Path]:
    """Write ``fig`` as PNG to ``path`` and as SVG beside it (``X.png`` and ``X.svg``), each
    atomically and reproducibly; return both paths, PNG first."""
    return save_png_svg(fig, path)
