"""The report's link-utilisation heatmap: the busiest links x time.

A run folder keeps each link's totals (``links.csv``) but not its traffic over
time, so the heatmap is rebuilt from the point-to-point transfers of
``timeline.csv``: each transfer's bytes are routed over the cluster of
``scenario.resolved.yaml`` (split evenly over its equal-cost routes) and spread
evenly over the transfer's duration, then summed per link and time bin.  A cell
is those bytes / (link bandwidth x bin width): the link's mean utilisation in
the bin, from 0 to 1 (it can pass 1 slightly where the even spread differs from
the max-min rates the run gave).  Collectives are not in it: their records do
not name the links they used (their bytes are in ``links.csv`` and the busiest
links table), so a run without point-to-point transfers has no heatmap.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from ..errors import ScenarioError
from ..records import Record
from ..topology.graph import Topology
from .figures import fit_title
from .gantt import time_unit

HEATMAP_LINKS = 32
"""Links shown in the heatmap at most (those with the most transfer bytes)."""
HEATMAP_BINS = 80
"""Time bins across the run."""


@dataclass
class Heatmap:
    """Utilisation per link (rows, busiest first) and time bin (columns)."""

    links: list[str]
    bandwidths_Bps: list[float]
    edges_s: list[float]
    """Bin edges, ``len(bins) + 1`` of them, from 0 to the run's end."""
    utilisation: np.ndarray
    """Shape (links, bins)."""
    transfers: int
    """Transfers routed."""


@dataclass
class ClusterContext:
    """What ``scenario.resolved.yaml`` adds to a run folder's report."""

    topology: Topology | None = None
    description: str = ""
    """The scenario's ``description``."""
    cluster: str = ""
    """The cluster in words: kind and counts (:meth:`Topology.describe`)."""


def read_cluster(run_dir: str | os.PathLike[str]) -> ClusterContext:
    """The cluster and description of a run folder's ``scenario.resolved.yaml``; empty
    without one (a run written by the API) or when it no longer loads."""
    path = Path(run_dir) / "scenario.resolved.yaml"
    if not path.is_file():
        return ClusterContext()
    from ..scenario import load_scenario
    from ..topology import build_topology

    try:
        scenario = load_scenario(path)
        topology = build_topology(scenario.cluster)
    except (ScenarioError, OSError):
        return ClusterContext()
    counts = topology.describe()
    kind = counts.pop("kind", "")
    words = ", ".join(f"{n} {name}" for name, n in counts.items() if n)
    return ClusterContext(topology, str(scenario.description or ""), f"{kind}: {words}")


def link_heatmap(
    records: Sequence[Record],
    topology: Topology,
    bins: int = HEATMAP_BINS,
    max_links: int = HEATMAP_LINKS,
) -> Heatmap | None:
    """The heatmap's data (see the module docstring); None without routable transfers."""
    transfers = [r for r in records if r.kind == "transfer" and r.bytes > 0 and r.src != r.dst]
    end_s = max((r.end_s for r in records), default=0.0)
    if not transfers or end_s <= 0:
        return None
    width = end_s / bins
    cells: dict[str, np.ndarray] = {}
    bandwidth: dict[str, float] = {}
    routed = 0
    for r in transfers:
        try:
            routes = topology.routes(r.src, r.dst)
        except ScenarioError:
            continue
        routed += 1
        spread = _spread(r, width, bins) / len(routes)
        for route in routes:
            for link in route.links:
                if link.name not in cells:
                    cells[link.name] = np.zeros(bins)
                    bandwidth[link.name] = link.bandwidth_Bps
                cells[link.name] += spread
    if not cells:
        return None
    busiest = sorted(cells, key=lambda n: (-float(cells[n].sum()), n))[:max_links]
    rows = np.array([cells[n] / (bandwidth[n] * width) for n in busiest])
    return Heatmap(
        links=busiest,
        bandwidths_Bps=[bandwidth[n] for n in busiest],
        edges_s=[i * width for i in range(bins + 1)],
        utilisation=rows,
        transfers=routed,
    )


def _spread(r: Record, width: float, bins: int) -> np.ndarray:
    """A transfer's bytes over the time bins, in proportion to its time in each."""
    out = np.zeros(bins)
    first = min(int(r.start_s / width), bins - 1)
    last = min(int(r.end_s / width), bins - 1)
    duration = r.end_s - r.start_s
    if last == first or duration <= 0:
        out[first] = r.bytes
        return out
    for b in range(first, last + 1):
        overlap = min(r.end_s, (b + 1) * width) - max(r.start_s, b * width)
        out[b] = r.bytes * max(overlap, 0.0) / duration
    return out


def heatmap_figure(data: Heatmap) -> Figure:
    """The heatmap as a figure: a row per link, colour = utilisation in %, from 0 to the
    largest cell (so light traffic still shows; the colour bar gives the scale)."""
    n = len(data.links)
    fig = Figure(figsize=(12, 1.6 + 0.26 * n), layout="constrained")
    ax = fig.add_subplot()
    seconds, unit = time_unit(data.edges_s[-1])
    extent = (data.edges_s[0] / seconds, data.edges_s[-1] / seconds, n, 0)
    image = ax.imshow(
        100 * data.utilisation,
        aspect="auto",
        interpolation="nearest",
        cmap="viridis",
        vmin=0.0,
        vmax=max(100 * peak_cell(data), 1e-9),
        extent=extent,
    )
    ax.set_yticks([i + 0.5 for i in range(n)], data.links, fontsize=7)
    ax.set_xlabel(f"simulated time ({unit})")
    colourbar = fig.colorbar(image, ax=ax, pad=0.01)
    colourbar.set_label("% of link bandwidth")
    title = f"Point-to-point traffic on the {n} busiest links ({data.transfers} transfers"
    fit_title(fig, title + f", bins of {data.edges_s[1] / seconds:.3g} {unit})", ax=ax)
    return fig


def peak_cell(data: Heatmap) -> float:
    """The largest cell (a utilisation, 0 to about 1); 0 for an empty heatmap."""
    return float(data.utilisation.max()) if data.utilisation.size else 0.0
