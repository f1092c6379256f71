"""Custom clusters: devices, switches and links listed in the scenario; routes by search."""

from __future__ import annotations

from collections import deque
from typing import Any

from clustersim.errors import Problem, ScenarioError

from .builder import FABRICS, FabricBuilder
from .graph import MAX_ROUTES, Device, Link, Route, Topology


class _GraphRouter:
    """Fewest-hop routes by breadth-first search over directed links."""

    __slots__ = ("out", "into", "limit")

    def __init__(self, links: list[Link], limit: int = MAX_ROUTES) -> None:
        self.out: dict[str, list[Link]] = {}
        self.into: dict[str, list[Link]] = {}
        for link in links:
            self.out.setdefault(link.src, []).append(link)
            self.into.setdefault(link.dst, []).append(link)
        self.limit = limit

    @staticmethod
    def _distances(
        start: str, edges: dict[str, list[Link]], forward: bool, stop: str
    ) -> dict[str, int]:
        """Hop counts from ``start`` (against link direction unless ``forward``),
        exploring no level beyond the one where ``stop`` is reached."""
        dist = {start: 0}
        queue = deque((start,))
        while queue:
            u = queue.popleft()
            if stop in dist and dist[u] >= dist[stop]:
                break
            d = dist[u] + 1
            for link in edges.get(u, ()):
                v = link.dst if forward else link.src
                if v not in dist:
                    dist[v] = d
                    queue.append(v)
        return dist

    def routes(self, src: Device, dst: Device) -> tuple[Route, ...]:
        s, t = src.name, dst.name
        from_s = self._distances(s, self.out, True, t)
        if t not in from_s:
            return ()
        hops = from_s[t]
        to_t = self._distances(t, self.into, False, s)
        # A link u->v lies on a shortest route iff it advances one hop from s and
        # v is exactly the remaining number of hops from t.  Walk these links in
        # index order (depth first) so the alternatives come out in a fixed order.
        found: list[Route] = []
        path: list[Link] = []
        stack: list[tuple[str, int]] = [(s, 0)]
        while stack:
            u, k = stack[-1]
            if u == t:
                found.append(Route.of(path))
                if len(found) >= self.limit:
                    break
                stack.pop()
                path.pop()
                continue
            options = self.out.get(u, ())
            step = from_s[u] + 1
            while k < len(options):
                v = options[k].dst
                k += 1
                if from_s.get(v) == step and to_t.get(v) == hops - step:
                    stack[-1] = (u, k)
                    path.append(options[k - 1])
                    stack.append((v, 0))
                    break
            else:
                stack.pop()
                if path:
                    path.pop()
        return tuple(found)


def _build_custom(spec: Any) -> Topology:
    """A custom topology.  Names, link ends and self-loops were checked by the scenario."""
    b = FabricBuilder()
    for d in spec.devices:
        b.device(d.name, d.kind, d)
    for s in spec.switches:
        b.switch(s)
    problems: list[Problem] = []
    defined: dict[str, int] = {}  # link name -> index in cluster.links
    for i, spec_link in enumerate(spec.links):
        src, dst = spec_link.src, spec_link.dst
        for name in [f"{src}->{dst}"] + ([f"{dst}->{src}"] if spec_link.duplex else []):
            if name in defined:
                problems.append(
                    Problem(
                        f"cluster.links[{i}]",
                        f"second link {name} (first at cluster.links[{defined[name]}])",
                        allowed="one link per direction; give one link the combined bandwidth",
                    )
                )
            else:
                defined[name] = i
    if problems:
        raise ScenarioError(problems)
    for spec_link in spec.links:
        bw, lat = float(spec_link.bandwidth_Bps), float(spec_link.latency_s)
        if spec_link.duplex:
            b.cable(spec_link.src, spec_link.dst, bw, lat)
        else:
            b.link(spec_link.src, spec_link.dst, bw, lat)
    return Topology("custom", b.devices, b.links, b.switches, _GraphRouter(b.links))


FABRICS.add("custom", _build_custom)
