"""A storage service on the cluster's network: where checkpoints are written.

:func:`attach_storage` returns a copy of a built topology with one more device,
``storage`` (kind ``storage``), cabled to some switches: those matching
``checkpoint.storage.attach``, or by default the top tier -- the switches farthest (in hops)
from every GPU and CPU: the spines of a two-tier or rail-optimized cluster, the cores of a
three-tier one, the top-of-rack switch of a one-rack cluster, the switch of a flat one.
``storage.bandwidth`` is split evenly over the cables.

Nothing of the original topology changes: its devices keep their indices, its links their
names and indices (the storage cables come after them), and routes between its devices are
its own router's.  Routes to and from the storage are the fewest-hop paths through switches
only (a GPU or CPU never relays), equal-cost alternatives in link order, chosen by ECMP as
any other route.
"""

from __future__ import annotations

import fnmatch
from collections import deque
from typing import Any

from clustersim.errors import Problem, ScenarioError

from .graph import MAX_ROUTES, Device, Link, Route, Topology

STORAGE = "storage"
"""Name of the storage device."""

__all__ = ["STORAGE", "attach_storage", "top_tier"]


def top_tier(topology: Topology) -> list[str]:
    """The switches farthest, in hops, from every device (build order); [] without switches."""
    devices = topology.devices
    out: dict[str, list[str]] = {}
    for link in topology.links:
        out.setdefault(link.src, []).append(link.dst)
    dist: dict[str, int] = {name: 0 for name in devices}
    queue = deque(devices)
    while queue:
        u = queue.popleft()
        for v in out.get(u, ()):
            if v not in dist:
                dist[v] = dist[u] + 1
                if v not in devices:
                    queue.append(v)
    reached = [s for s in topology.switches if s in dist]
    if not reached:
        return []
    far = max(dist[s] for s in reached)
    return [s for s in reached if dist[s] == far]


def attach_storage(topology: Topology, storage: Any, path: str = "checkpoint.storage") -> Topology:
    """``topology`` with a storage device cabled to the switches ``storage.attach`` matches
    (default :func:`top_tier`), ``storage.bandwidth_Bps`` split evenly over the cables, each
    of ``storage.latency_s``.  ScenarioError at ``path`` when the name ``storage`` is taken,
    when ``attach`` matches no switch, or when the cluster has no switch to attach to."""
    if STORAGE in topology.devices or STORAGE in topology.switches:
        raise ScenarioError(
            Problem(path, f"the cluster already has a device or switch named {STORAGE!r}")
        )
    switches = _attach_points(topology, storage.attach, path)
    share = float(storage.bandwidth_Bps) / len(switches)
    latency = float(storage.latency_s)
    links = list(topology.links)
    for switch in switches:
        for src, dst in ((STORAGE, switch), (switch, STORAGE)):
            links.append(Link(len(links), f"{src}->{dst}", src, dst, share, latency))
    device = Device(STORAGE, "storage", len(topology.devices), 0.0, 1.0, 0.0, 0.0)
    devices = {**topology.devices, STORAGE: device}
    router = _StorageRouter(topology, devices, links)
    return Topology(
        topology.kind,
        devices,
        links,
        list(topology.switches),
        router,
        spine_routing=topology.spine_routing,
        racks=topology.racks,
        nodes=topology.nodes,
        nvlink_generation=topology.nvlink_generation,
        reductions=topology.reductions,
        reduction_shares=topology.reduction_shares,
        nic_transport=topology.nic_transport,
        nic_plugin_latency_s=topology.nic_plugin_latency_s,
    )


def _attach_points(topology: Topology, attach: str | None, path: str) -> list[str]:
    """The switches the storage is cabled to."""
    if attach is None:
        found = top_tier(topology)
        if not found:
            message = f"a {topology.kind} cluster has no switch to attach the storage to"
            raise ScenarioError(Problem(path, message, "a cluster with switches"))
        return found
    try:
        found = [s for s in topology.switches if fnmatch.fnmatchcase(s, attach)]
    except (RecursionError, OverflowError):  # pathological patterns
        found = []
    if not found:
        example = ", ".join(top_tier(topology)[:3]) or "none"
        raise ScenarioError(
            Problem(
                f"{path}.attach",
                f"no switch matches {attach!r}",
                f"globs over switch names (top tier here: {example})",
            )
        )
    return found


class _StorageRouter:
    """The original router between the original devices; fewest-hop search through switches
    for routes that start or end at the storage."""

    __slots__ = ("base", "devices", "out", "into", "to_storage", "from_storage")

    def __init__(self, base: Topology, devices: dict[str, Device], links: list[Link]) -> None:
        self.base = base
        self.devices = devices
        self.out: dict[str, list[Link]] = {}
        self.into: dict[str, list[Link]] = {}
        for link in links:
            self.out.setdefault(link.src, []).append(link)
            self.into.setdefault(link.dst, []).append(link)
        self.to_storage = self._hops(self.into, forward=False)
        self.from_storage = self._hops(self.out, forward=True)

    def _hops(self, edges: dict[str, list[Link]], forward: bool) -> dict[str, int]:
        """Hops from the storage (along links if ``forward``, else against them), through
        switches only: a device gets its distance but is never passed through."""
        dist = {STORAGE: 0}
        queue = deque((STORAGE,))
        while queue:
            u = queue.popleft()
            for link in edges.get(u, ()):
                v = link.dst if forward else link.src
                if v not in dist:
                    dist[v] = dist[u] + 1
                    if v not in self.devices:
                        queue.append(v)
        return dist

    def routes(self, src: Device, dst: Device) -> tuple[Route, ...]:
        if src.name != STORAGE and dst.name != STORAGE:
            return self.base.routes(src.name, dst.name)
        if src.name == STORAGE:  # walk back from dst towards the storage, then reverse
            paths = self._paths(dst.name, self.into, self.from_storage, forward=False)
            return tuple(Route.of(reversed(p)) for p in paths)
        return tuple(
            Route.of(p) for p in self._paths(src.name, self.out, self.to_storage, forward=True)
        )

    def _paths(
        self, start: str, edges: dict[str, list[Link]], dist: dict[str, int], forward: bool
    ) -> list[list[Link]]:
        """Every fewest-hop path from ``start`` to the storage (at most
        :data:`~clustersim.topology.graph.MAX_ROUTES`), depth first in link order."""
        if start not in dist:
            return []
        found: list[list[Link]] = []
        path: list[Link] = []

        def walk(u: str) -> None:
            if u == STORAGE:
                found.append(list(path))
                return
            for link in edges.get(u, ()):
                if len(found) >= MAX_ROUTES:
                    return
                v = link.dst if forward else link.src
                if dist.get(v) != dist[u] - 1 or (v in self.devices and v != STORAGE):
                    continue
                path.append(link)
                walk(v)
                path.pop()

        walk(start)
        return found
