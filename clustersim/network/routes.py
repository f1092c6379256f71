"""Routes as the network sees them: validated link indices, latency and weights."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..errors import SimulationError
from .flow import RouteLike

_INF = math.inf


def check_bandwidth(value: float, name: str) -> float:
    """``value`` as a link capacity in bytes/s; SimulationError unless it is finite and
    >= 0 (0: the link is down)."""
    bw = float(value)
    if not 0.0 <= bw < _INF:
        raise SimulationError(
            f"link {name!r}: bandwidth must be finite and >= 0 B/s, got {value!r}"
        )
    return bw


def link_capacities(links: Sequence[Any]) -> list[float]:
    """Each link's bandwidth in bytes/s, checked (:func:`check_bandwidth`), and its index
    (``links[i].index`` must be ``i``); equal bandwidths share one float (a 131,072-GPU
    cluster has 1.4 M links of a handful of bandwidths)."""
    checked: dict[float, float] = {}
    out = []
    for i, link in enumerate(links):
        if link.index != i:
            raise SimulationError(f"link {link.name!r} has index {link.index}, expected {i}")
        bandwidth = link.bandwidth_Bps
        found = checked.get(bandwidth)
        if found is None:
            found = checked[bandwidth] = check_bandwidth(bandwidth, link.name)
        out.append(found)
    return out


def route_info(route: RouteLike, n_links: int) -> tuple[Any, tuple[int, ...], float, Any, float]:
    """``(route, distinct link indices, latency_s, weights or None, wire)`` of ``route`` on a
    network of ``n_links`` links; SimulationError for a bad link index, latency, weight or
    wire.  ``wire`` (the route's ``wire`` attribute, default 1) is the bytes a transfer puts
    on the links per byte of data: a route slower than its links' line rate (NCCL's
    figures, :mod:`clustersim.collectives.bus`)."""
    idx = []
    for link in route.links:
        i = link.index
        if not (isinstance(i, int) and 0 <= i < n_links):
            raise SimulationError(
                f"link {getattr(link, 'name', link)!r}: index {i!r} not in 0..{n_links - 1}"
            )
        idx.append(i)
    latency, wire = route_timing(route)
    weights = getattr(route, "weights", None)
    if weights is None:
        return (route, tuple(dict.fromkeys(idx)), latency, None, wire)
    return (*weighted_route_info(route, idx, weights, latency), wire)


def route_timing(route: RouteLike) -> tuple[float, float]:
    """``(latency_s, wire)`` of ``route``, checked: a finite latency >= 0 s and a finite wire
    factor >= 1 (see :func:`route_info`)."""
    latency = float(route.latency_s)
    if not 0.0 <= latency < _INF:
        raise SimulationError(f"route latency must be finite and >= 0 s, got {route.latency_s!r}")
    wire = float(getattr(route, "wire", 1.0))
    if not 1.0 <= wire < _INF:
        raise SimulationError(f"route wire factor must be finite and >= 1, got {wire!r}")
    return latency, wire


def weighted_route_info(
    route: RouteLike, idx: list[int], weights: Sequence[float], latency: float
) -> tuple[Any, tuple[int, ...], float, tuple[float, ...]]:
    """Route info of a weighted route: a link listed twice adds its weights."""
    if len(weights) != len(idx):
        raise SimulationError(f"weighted route: {len(weights)} weights for {len(idx)} links")
    merged: dict[int, float] = {}
    for link, w in zip(idx, weights, strict=True):
        w = float(w)
        if not 0.0 < w < _INF:
            raise SimulationError(f"link weight must be finite and > 0, got {w!r}")
        merged[link] = merged.get(link, 0.0) + w
    return (route, tuple(merged), latency, tuple(merged.values()))
