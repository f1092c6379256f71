"""Hierarchical (two-level) collectives: inside each node, then across nodes.

The group is split by node (``Device.node``, set in two-tier clusters).  With
``g`` GPUs of the group on each of ``N`` nodes, local rank ``r`` of every node
forms *rail* ``r`` (``N`` ranks, one per node).  An all-reduce of ``S`` bytes is

1. a reduce-scatter of ``S`` inside each node (intra algorithm, a ring by
   default): local rank ``r`` ends with shard ``r`` (``S / g`` bytes) summed
   over its node;
2. an all-reduce of ``S / g`` bytes on each rail across nodes, all ``g`` rails
   at once (``call.options["inter"]``, a ring by default);
3. an all-gather of ``S`` inside each node.

All-gather is an all-gather of ``S / g`` on each rail, then of ``S`` inside
each node; reduce-scatter is a reduce-scatter of ``S`` inside each node, then
of ``S / g`` on each rail.  Phases chain per rank (a rank starts a phase when
its own part of the previous one is done), not by a global barrier.

The phases are built from the registered algorithms' schedules and priced by
their costs.  The ``g`` rails of a node leave through the same NIC (and PCIe
link to it) at the same time, so the across-node phase is priced on a view of
the topology where every link that is not a device's own link carries ``g``
flows: bandwidth / ``g``.  The cost is exact (matches the flow-level run) when
every node has the same layout, the phases' own algorithms are exact on it and
the across-node algorithm's formula counts the flows it puts on each link
(``ring`` and ``direct`` do; then it is exact even behind oversubscribed rack
uplinks, with one spine or ``spine_routing: split``).  With several spines
and ECMP the view assumes every flow of a pair hashes onto the first spine
(pessimistic); algorithms whose formula ignores their own link sharing (e.g.
``halving_doubling`` across racks) give a lower bound.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

from ..topology import Link, Route, Topology, TopologyView, with_bandwidth
from .algorithm import Algorithm, registered_algorithms
from .call import CollectiveCall, node_groups
from .fluid import FluidPhase
from .schedule import Schedule

INTER_DEFAULT = "ring"
"""Algorithm across nodes when ``options`` does not name one."""
INTRA_DEFAULT = "ring"
"""Algorithm inside a node when ``options`` does not name one."""


class SharedLinks(TopologyView):
    """A view of a topology in which the rails that run at once split the links they share.

    ``shares[link index]`` is how many rails use the link (1 where absent): a
    GPU's own PCIe or NVLink port has one; with one NIC per node, the NIC,
    its PCIe link and the rack uplinks have all g rails; with one NIC per
    GPU, each NIC has one.  In the routes this view returns a link has
    bandwidth / its share.  With ``spine_routing: split`` a pair's k equal-cost routes
    become one route whose spine links have k times the bandwidth (each flow
    is split evenly over them); with ECMP the first route stands for all (as
    if every flow hashed onto the same spine).  Everything else is the
    wrapped topology's.
    """

    def __init__(self, topology: Topology, shares: dict[int, int]) -> None:
        super().__init__(topology)
        self._shares = shares

    def routes(self, src: str, dst: str) -> tuple[Route, ...]:
        """The wrapped topology's routes with shared links' bandwidth divided by ``share``."""
        key = (src, dst)
        found = self._cache.get(key)
        if found is None:
            alternatives = self._topology.routes(src, dst)
            split = len(alternatives) if self._topology.spine_routing == "split" else 1
            common = set.intersection(*({link.index for link in r.links} for r in alternatives))
            found = (
                Route.of(
                    self._scaled(link, 1 if link.index in common else split)
                    for link in alternatives[0].links
                ),
            )
            self._cache[key] = found
        return found

    def route(self, src: str, dst: str, flow_key: int | str = 0) -> Route:
        """Like :meth:`Topology.route`, on the shared view."""
        return self.routes(src, dst)[0]

    def _scaled(self, link: Link, split: int = 1) -> Link:
        """``link`` with bandwidth x ``split`` / the number of rails sharing it."""
        share = self._shares.get(link.index, 1)
        if share == split:
            return link
        return with_bandwidth(link, link.bandwidth_Bps * split / share)


def _pairs(sub: CollectiveCall) -> list[tuple[str, str]]:
    """The (src, dst) device pairs an across-node phase sends between: ring neighbours for a
    ring, every ordered pair otherwise (an upper bound of what any algorithm uses)."""
    devices = sub.devices
    if sub.algorithm == "ring":
        rings = [devices, devices[::-1]] if sub.bidirectional else [devices]
        return [(r[i], r[(i + 1) % len(r)]) for r in rings for i in range(len(r))]
    return [(a, b) for a in devices for b in devices if a != b]


# -- the algorithm ------------------------------------------------------------


class Hierarchical(Algorithm):
    """Two-level all-reduce / all-gather / reduce-scatter: inside nodes, then across them.

    Options: ``inter`` (algorithm across nodes, default ``ring``) and ``intra``
    (inside a node, default ``ring``).
    """

    name = "hierarchical"
    description = (
        "two levels: reduce-scatter in each node, all-reduce across nodes per rail, all-gather"
    )
    ops: ClassVar[frozenset[str]] = frozenset({"allreduce", "allgather", "reducescatter"})

    def unsupported(self, call: CollectiveCall, topology: Topology) -> str | None:
        """Why the call cannot run hierarchically: wrong op, no nodes, uneven nodes, bad sub-algorithm."""
        reason = super().unsupported(call, topology)
        if reason:
            return reason
        groups = node_groups(call, topology)
        if groups is None:
            return "hierarchical needs devices in nodes (a two_tier cluster)"
        sizes = {len(g) for g in groups}
        if len(sizes) > 1:
            return (
                "hierarchical needs the same number of the group's GPUs on every node "
                f"(got {', '.join(str(len(g)) for g in groups)})"
            )
        if call.n <= 1:
            return None
        for op, instances, _size, level in self._phases(call, groups):
            sub = self._sub_call(call, op, instances[0], 0.0, level)
            reason = self._sub_reason(sub, level, topology)
            if reason:
                return reason
        return None

    # -- phases ---------------------------------------------------------------

    def _phases(
        self, call: CollectiveCall, groups: list[list[int]]
    ) -> list[tuple[str, list[list[int]], float, str]]:
        """(op, rank lists of its parallel instances, size in bytes, level) for each phase."""
        g = len(groups[0])
        nodes = groups
        rails = [[grp[r] for grp in groups] for r in range(g)]
        size = call.size_bytes
        if call.op == "allreduce":
            return [
                ("reducescatter", nodes, size, "intra"),
                ("allreduce", rails, size / g, "inter"),
                ("allgather", nodes, size, "intra"),
            ]
        if call.op == "allgather":
            return [("allgather", rails, size / g, "inter"), ("allgather", nodes, size, "intra")]
        return [
            ("reducescatter", nodes, size, "intra"),
            ("reducescatter", rails, size / g, "inter"),
        ]

    def _sub_call(
        self, call: CollectiveCall, op: str, ranks: list[int], size: float, level: str
    ) -> CollectiveCall:
        return CollectiveCall(
            op,
            tuple(call.devices[r] for r in ranks),
            size,
            algorithm=str(
                call.options.get(level, INTER_DEFAULT if level == "inter" else INTRA_DEFAULT)
            ),
            chunk_bytes=call.chunk_bytes,
            bidirectional=call.bidirectional,
            reduce_cost=call.reduce_cost,
        )

    def _sub_reason(self, sub: CollectiveCall, level: str, topology: Any) -> str | None:
        algorithms = registered_algorithms()
        cls = algorithms.get(sub.algorithm)
        if cls is None:
            known = ", ".join(n for n in algorithms if n != self.name)
            return f"unknown {level} algorithm '{sub.algorithm}' (options.{level}; known: {known})"
        if cls is type(self):
            return f"options.{level} cannot be hierarchical itself"
        if sub.n <= 1:
            return None
        reason = cls().unsupported(sub, topology)
        return f"{level} phase: {reason}" if reason else None

    def _sub_schedule(self, sub: CollectiveCall, topology: Topology) -> Schedule:
        if sub.n <= 1:
            return Schedule(sub.n)
        return registered_algorithms()[sub.algorithm]().schedule(sub, topology)

    def _sub_cost(self, sub: CollectiveCall, topology: Any) -> float:
        if sub.n <= 1:
            return 0.0
        return registered_algorithms()[sub.algorithm]().cost(sub, topology)

    # -- schedule and cost ----------------------------------------------------

    def schedule(self, call: CollectiveCall, topology: Topology) -> Schedule:
        """Phases embedded one after the other, chained per rank."""
        s = Schedule(call.n)
        groups = node_groups(call, topology)
        if call.n <= 1 or groups is None:
            return s
        step = 0
        for op, instances, size, level in self._phases(call, groups):
            if len(instances[0]) <= 1:
                continue
            after = s.rank_ends()
            deepest = 0
            for ranks in instances:
                sub = self._sub_schedule(self._sub_call(call, op, ranks, size, level), topology)
                s.embed(sub, ranks, after=after, step_offset=step)
                deepest = max(deepest, max(sub.step, default=-1) + 1)
            step += deepest
        return s

    def _sub_calls(self, call: CollectiveCall, topology: Topology) -> list[CollectiveCall]:
        """Every sub-call the phases run (each node's, each rail's)."""
        groups = node_groups(call, topology)
        if call.n <= 1 or groups is None:
            return []
        return [
            self._sub_call(call, op, ranks, size, level)
            for op, instances, size, level in self._phases(call, groups)
            if len(instances[0]) > 1
            for ranks in instances
        ]

    def sends(self, call: CollectiveCall, topology: Topology) -> float:
        """The sub-calls' sends."""
        algorithms = registered_algorithms()
        return sum(
            algorithms[sub.algorithm]().sends(sub, topology)
            for sub in self._sub_calls(call, topology)
        )

    def priced_sends(self, call: CollectiveCall, topology: Topology) -> float:
        """What pricing the sub-calls builds (their :meth:`link_flows`)."""
        algorithms = registered_algorithms()
        return sum(
            algorithms[sub.algorithm]().priced_sends(sub, topology)
            for sub in self._sub_calls(call, topology)
        )

    def fluid_phases(self, call: CollectiveCall, topology: Topology) -> list[FluidPhase]:
        """One fluid phase per level phase: fixed and bandwidth parts as :meth:`cost` prices
        them (the slowest instance), flows of all its instances (every node, every rail)
        summed on the real topology."""
        groups = node_groups(call, topology)
        if call.n <= 1 or groups is None:
            return []
        shared = self._shared_view(call, groups, topology)
        out = []
        for op, instances, size, level in self._phases(call, groups):
            if len(instances[0]) <= 1:
                continue
            view = shared if level == "inter" else topology
            subs = [self._sub_call(call, op, ranks, size, level) for ranks in instances]
            algo = registered_algorithms()[subs[0].algorithm]()
            total = max(algo.cost(sub, view) for sub in subs)
            fixed = min(max(algo.cost(replace(sub, size_bytes=0.0), view) for sub in subs), total)
            flows: dict[int, float] = {}
            if total > fixed:
                for sub in subs:
                    for link, k in algo.link_flows(sub, topology).items():
                        flows[link] = flows.get(link, 0.0) + k
            out.append(FluidPhase(fixed, total - fixed, flows))
        return out

    def _shared_view(
        self, call: CollectiveCall, groups: list[list[int]], topology: Topology
    ) -> SharedLinks:
        """The view the across-node phase is priced on: each link shared by the rails whose
        sends cross it (on each pair's first route)."""
        shares: dict[int, int] = {}
        for op, instances, size, level in self._phases(call, groups):
            if level != "inter" or len(instances[0]) <= 1:
                continue
            for ranks in instances:
                sub = self._sub_call(call, op, ranks, size, level)
                used = {
                    link.index for a, b in _pairs(sub) for link in topology.first_route(a, b).links
                }
                for index in used:
                    shares[index] = shares.get(index, 0) + 1
            break
        return SharedLinks(topology, shares)

    def cost(self, call: CollectiveCall, topology: Topology) -> float:
        """Sum of the phases' costs, seconds.

        Intra-node phases are priced on the topology; the across-node phase on
        :class:`SharedLinks` (node-level links split ``g`` ways, the rails
        running at once).  Exact where the module docstring says.
        """
        groups = node_groups(call, topology)
        if call.n <= 1 or groups is None:
            return 0.0
        shared = self._shared_view(call, groups, topology)
        total = 0.0
        for op, instances, size, level in self._phases(call, groups):
            if len(instances[0]) <= 1:
                continue
            view = shared if level == "inter" else topology
            total += max(
                self._sub_cost(self._sub_call(call, op, ranks, size, level), view)
                for ranks in instances
            )
        return total
