"""Collective microbenchmarks, nccl-tests style: time one operation over a range of sizes.

```python
from clustersim.collectives.bench import flat_cluster, scenario_of, sweep
scenario = scenario_of(flat_cluster("ring", 8, "54GB/s", "1us"))
rows = sweep(scenario, "allreduce", [160e6], ["ring"])
rows[0]["time_s"], rows[0]["busbw_GBps"]
```

Each (size, algorithm) point runs on a fresh :class:`~clustersim.engine.Simulation`
of the cluster: the collective is started ``iterations`` times back to back and
the time of one is the simulated end time over ``iterations``.  Bandwidths are
nccl-tests': algbw = size / time, busbw = algbw x the operation's bus factor
(:func:`clustersim.collectives.bandwidths`), both in GB/s (1e9 bytes/s).

This module computes; it never prints.  The ``clustersim collective`` command
formats its rows.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ..errors import Problem, ScenarioError, hinted
from ..outputs.atomic import save_figure as outputs_save_figure
from ..outputs.tables import cell, csv_text
from ..units import UnitError, parse_size
from . import (
    OPERATIONS,
    CollectiveCall,
    applicable_algorithms,
    bandwidths,
    canonical_op,
    check_call,
    registered_algorithms,
    run_collective,
    what_ran,
)
from .protocol import check_protocol

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ..scenario import Scenario
    from ..topology import Topology

ROW_KEYS = (
    "op",
    "algorithm",
    "bytes",
    "devices",
    "time_s",
    "algbw_GBps",
    "busbw_GBps",
    "chosen",
)
"""Keys of every row :func:`sweep` returns, in order (the JSON and CSV columns)."""

MAX_POINTS = 1000
"""Most sizes a range may expand to."""

MODELS = ("flow", "analytical")
"""How a point is priced: simulated flows or the algorithm's alpha-beta formula."""

FLAT_KINDS = ("switch", "ring", "fully_connected")
TOPOLOGIES = (*FLAT_KINDS, "two_tier")
"""Cluster shapes the command builds from flags."""

PLACEHOLDER_WORKLOAD = {"collective": {}}
"""Workload of the minimal scenario around a cluster (never run; only the cluster is used)."""

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


# --------------------------------------------------------------------------- clusters


def flat_cluster(
    kind: str, devices: int, bandwidth: str | float, latency: str | float = 0
) -> dict[str, Any]:
    """The ``cluster:`` section of a switch, ring or fully connected cluster of ``devices`` GPUs."""
    return {"kind": kind, "devices": devices, "link": {"bandwidth": bandwidth, "latency": latency}}


TWO_TIER_DEFAULTS: Mapping[str, Any] = MappingProxyType(
    {
        "racks": 1,
        "nodes_per_rack": 2,
        "gpus_per_node": 8,
        "nic_bandwidth": "25GB/s",
        "nic_latency": 0,
        "oversubscription": 1.0,
        "pcie": "32GB/s",
        "nvlink": "300GB/s",
    }
)
"""What :func:`two_tier_cluster` builds when not told otherwise, by keyword (the
``clustersim collective`` flags default to these too)."""


def two_tier_cluster(
    *,
    racks: int = TWO_TIER_DEFAULTS["racks"],
    nodes_per_rack: int = TWO_TIER_DEFAULTS["nodes_per_rack"],
    gpus_per_node: int = TWO_TIER_DEFAULTS["gpus_per_node"],
    nic_bandwidth: str | float = TWO_TIER_DEFAULTS["nic_bandwidth"],
    nic_latency: str | float = TWO_TIER_DEFAULTS["nic_latency"],
    oversubscription: float = TWO_TIER_DEFAULTS["oversubscription"],
    pcie: str | float = TWO_TIER_DEFAULTS["pcie"],
    nvlink: str | float | None = TWO_TIER_DEFAULTS["nvlink"],
) -> dict[str, Any]:
    """The ``cluster:`` section of a two-tier cluster (``nvlink=None``: GPUs talk over PCIe)."""
    node: dict[str, Any] = {
        "gpus": gpus_per_node,
        "pcie": {"bandwidth": pcie},
        "nic": {"bandwidth": nic_bandwidth, "latency": nic_latency},
    }
    if nvlink is not None:
        node["nvlink"] = {"bandwidth": nvlink}
    return {
        "kind": "two_tier",
        "racks": racks,
        "nodes_per_rack": nodes_per_rack,
        "node": node,
        "rack_uplink": {"oversubscription": oversubscription},
    }


def scenario_of(cluster: dict[str, Any], name: str = "collective", source: str = "") -> Scenario:
    """A minimal validated scenario around a ``cluster:`` section."""
    from ..scenario import parse_scenario

    doc = {"name": name, "cluster": cluster, "workload": dict(PLACEHOLDER_WORKLOAD)}
    return parse_scenario(doc, source)


SCENARIO_KEYS = ("name", "workload", "seed", "description", "stragglers", "network")


def load_cluster(path: str | os.PathLike[str]) -> Scenario:
    """The scenario to benchmark on from a file holding a scenario or only a cluster section.

    A full scenario is loaded as is (its stragglers and seed apply); a scenario
    without workload gets a placeholder one; a bare cluster section (top-level
    ``kind``, ``racks``, ``node`` ...) is wrapped, and its problems are reported
    at key paths of the file.  Errors name the file.
    """
    from ..scenario import _load_yaml, _read_text, load_scenario, parse_scenario

    source = str(path)
    doc = _load_yaml(_read_text(path, source), source)
    if not isinstance(doc, dict):
        raise ScenarioError(
            Problem("", "expected a scenario or a cluster section (a mapping of keys)"), source
        )
    if "cluster" in doc:
        if "workload" in doc and "name" in doc:
            return load_scenario(path)
        full = {"name": Path(source).stem or "cluster", **doc}
        full.setdefault("workload", dict(PLACEHOLDER_WORKLOAD))
        return parse_scenario(full, source)
    if any(key in doc for key in SCENARIO_KEYS):
        raise ScenarioError(Problem("cluster", "the scenario has no cluster section"), source)
    try:
        return scenario_of(doc, Path(source).stem or "cluster", source)
    except ScenarioError as exc:
        raise _unprefixed(exc, "cluster") from None


def _unprefixed(exc: ScenarioError, prefix: str) -> ScenarioError:
    """``exc`` with ``prefix.`` taken off its key paths (a bare cluster file has no such key)."""
    problems = []
    for p in exc.problems:
        path = p.path
        if path == prefix:
            path = ""
        elif path.startswith(prefix + ".") or path.startswith(prefix + "["):
            path = path[len(prefix) :].lstrip(".")
        problems.append(Problem(path, p.message, p.allowed))
    return ScenarioError(problems, exc.source)


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
    channels: int = 1,
    protocol: str | None = None,
    max_events: int | None = None,
) -> list[dict[str, Any]]:
    """Time ``op`` for every size (bytes) and algorithm on ``scenario``'s cluster.

    Returns one row per point, sizes in the outer loop, with the keys
    :data:`ROW_KEYS`: ``bytes`` (nccl-tests size), ``devices`` (group size),
    ``time_s`` (seconds per iteration), ``algbw_GBps`` and ``busbw_GBps``
    (1e9 bytes/s).  ``progress(done, total)`` is called after each point.
    ``channels`` runs each collective as that many slices at once; ``protocol`` prices
    NCCL's protocol (``LL``, ``LL128``, ``Simple``, ``auto``).  ``chosen`` is what ran:
    ``algorithm/protocol``, ``auto`` resolved.  Everything is checked before the first
    point runs, the work of every point too: a point estimated over ``max_events`` events
    (default: the scenario's ``engine.max_events``) is refused before any runs
    (:class:`clustersim.budget.WorkLimitError`).
    """
    from ..topology import build_topology

    op = canonical_op(op, "--op")
    if model not in MODELS:
        raise ScenarioError(Problem("--model", f"unknown model {model!r}", ", ".join(MODELS)))
    if iterations < 1:
        raise ScenarioError(Problem("--iterations", "must be at least 1"))
    from ..scenario import MAX_CHANNELS

    if not 1 <= channels <= MAX_CHANNELS:
        raise ScenarioError(
            Problem("--channels", f"must be from 1 to {MAX_CHANNELS}, got {channels}")
        )
    if topology is None:
        try:
            topology = build_topology(scenario.cluster)
        except ScenarioError as exc:
            raise exc.with_source(scenario.source) from None
    devices = group_devices(topology, group)
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
    _check_options(op, len(devices), root, chunk_bytes)
    limit = max_events or getattr(getattr(scenario, "engine", None), "max_events", None)
    for row_calls in calls:
        for call in row_calls:
            check_point_work(call, topology, model, iterations, channels, limit)
    total = len(sizes) * len(names)
    rows = []
    for row_calls in calls:
        for call in row_calls:
            rows.append(run_point(scenario, topology, call, model, iterations, channels))
            if progress is not None:
                progress(len(rows), total)
    return rows


def _check_options(op: str, n: int, root: int, chunk_bytes: float | None) -> None:
    if OPERATIONS[op].rooted and not 0 <= root < n:
        raise ScenarioError(
            Problem("--root", f"root {root} is not a rank of the group", f"0 .. {n - 1}")
        )
    if chunk_bytes is not None and chunk_bytes <= 0:
        raise ScenarioError(Problem("--chunk", "the chunk size must be larger than 0"))


def check_point_work(
    call: CollectiveCall,
    topology: Topology,
    model: str,
    iterations: int,
    channels: int = 1,
    limit: int | None = None,
) -> None:
    """Refuse (:class:`~clustersim.budget.WorkLimitError`) a point whose estimated work,
    ``call`` run ``iterations`` times as :func:`run_point` runs it, is over ``limit``
    events (default :data:`~clustersim.budget.DEFAULT_MAX_EVENTS`)."""
    from ..budget import DEFAULT_MAX_EVENTS, LIMIT_FLAG, enforce
    from ..units import format_size
    from .work import call_work

    once = call_work(call, topology, model=model, channels=channels, record_transfers=False)
    what = f"{call.op} of {format_size(call.size_bytes)} by {call.algorithm}"
    if iterations > 1:
        what += f", {iterations:,} iterations"
    enforce(once * iterations, limit or DEFAULT_MAX_EVENTS, what=what, path=LIMIT_FLAG)


def run_point(
    scenario: Scenario,
    topology: Topology,
    call: CollectiveCall,
    model: str,
    iterations: int,
    channels: int = 1,
) -> dict[str, Any]:
    """One row: ``call`` run ``iterations`` times back to back on a fresh simulation."""
    from ..engine import Simulation

    sim = Simulation.from_scenario(scenario, topology)

    def repeat() -> Any:
        for i in range(iterations):
            yield run_collective(
                sim, call, model=model, iteration=i, record_transfers=False, channels=channels
            )

    sim.process(repeat())
    sim.run()
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
    }


# --------------------------------------------------------------------------- outputs


def rows_csv(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as CSV text with the :data:`ROW_KEYS` columns (whole floats below 1e18
    without ``.0``, cells joined by commas as they are)."""
    cells = ([cell(row[key], 1e18) for key in ROW_KEYS] for row in rows)
    return csv_text(ROW_KEYS, cells, quote=False)


def plot_figure(rows: Sequence[dict[str, Any]], title: str) -> Figure:
    """Bus bandwidth (GB/s) against size (bytes, log axis), one line per algorithm.

    Built on the Agg canvas without pyplot (no global state); sizes of 0 bytes
    are left out (no place on a log axis).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for name in dict.fromkeys(row["algorithm"] for row in rows):
        points = [(r["bytes"], r["busbw_GBps"]) for r in rows if r["algorithm"] == name]
        points = [p for p in points if p[0] > 0]
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=name)
    ax.set_xscale("log")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(title="algorithm")
    fig.tight_layout()
    return fig


def save_figure(fig: Figure, path: str | os.PathLike[str]) -> Path:
    """Write ``fig`` as PNG to ``path`` atomically (a temporary name, then renamed)."""
    return outputs_save_figure(fig, path, "png", reproducible=False)
