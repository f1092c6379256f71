"""In-network all-reduce: the switches reduce (SHARP, NVLink SHARP / NVLS).

Each rank sends its S bytes into the network once and receives the sum once:
the switches add the data up where the ranks' paths meet and copy the result
where they part.  Units: seconds, bytes, bytes/s.

Aggregation tree
----------------
Built from the routes the topology already has (a pair's first route, so with
several spines the trees cross the first one only, at its share of the rack
uplink -- one tree, as one SHARP aggregation tree):

* the *top* T is a switch that lies on the route from rank 0 to every other
  rank and back.  Of those, the one whose trees have the least latency (the
  time of a zero-byte call below; ties: the one farther from rank 0) -- on
  ``switch`` the switch, in a two-tier rack with one GPU per node its ToR;
* rank i's *way up* is its route to rank 0 (rank 0: to rank 1) as far as T,
  its *way down* the route from rank 0 (rank 0: from rank 1) from T on;
* the ways up, in rank order, merge into one tree toward T: a way that
  reaches a vertex an earlier way crosses follows that way from there on (its
  data is summed there); the ways down merge into one tree from T, each
  vertex fed by one link, the data copied where branches part (multicast).

So every link of the up tree carries S once and every link of the down tree
S once: each rank sends S and receives S, and a rack uplink carries S up and S
down however many ranks sit behind it.  Reductions cost no device time
(``call.reduce_cost`` does not apply); the switch's reduction throughput is a
capacity of its own (below).  A group whose routes share no switch -- a
``ring`` or ``fully_connected`` cluster, or GPUs that reach each other over
NVLink in the node and over the NIC across nodes -- is refused; on the latter,
``hierarchical`` with ``options: {inter: in_network}`` reduces inside the nodes
first, then in the network.

Which switches reduce, and how fast
-----------------------------------
On racked clusters (two-tier, three-tier, rail-optimized) only switches that
can reduce in hardware may be the top (:func:`reduces`):

* an NVSwitch with NVLink SHARP (``cluster.node.nvlink.sharp``, NCCL's NVLS):
  what flows into it is summed at most at its throughput per GPU
  (``Topology.reductions``; 8 x H100 reach about 480 GB/s of bus bandwidth,
  not the 2 x 7/8 x 450 GB/s the line rate would give; :data:`NVLS_SHARE`);
* a network switch (top-of-rack, rail, spine, core) with InfiniBand SHARP
  (``cluster.sharp``, on by default): what arrives on a port is summed at most
  at a share of that port's line rate (``Topology.reduction_shares``;
  :data:`~clustersim.scenario.cluster.IB_SHARP_SHARE` = 0.8: about 20 GB/s of
  algorithm bandwidth per 25 GB/s NIC, NVIDIA/nccl#320).

A node's PCIe switch and NIC do not reduce, nor does an NVSwitch without SHARP:
a group meeting only there is refused.  Every up segment ending at a reducing
switch (the top, and a switch below it where two ways merge) moves its data at
most at that rate (:attr:`Segment.cap_Bps`): a flow capped there, its links
carrying only the bytes it moves (:class:`~clustersim.collectives.bus.CappedRoute`).
The copies down the tree run at line rate.  On flat and custom clusters, whose
switches are abstract, every switch reduces at line rate.

Schedule (flow-level mode)
--------------------------
The trees are cut into *segments*: runs of links from a rank, T or a vertex
where branches meet (up) or part (down), to the next such vertex or rank.
The message is cut into c = ceil(S / chunk) pieces of p = S / c bytes
(``call.chunk_bytes``, default :data:`IN_NETWORK_CHUNK_BYTES` = 1 MiB; a
zero-byte message is one piece).  Piece k crosses a segment as one send on
the segment's own links (:meth:`Schedule.send_on`), once the segment has
carried piece k - 1 and piece k has crossed the segments that feed it: those
ending where an up segment starts; every up segment ending at T, for a down
segment leaving T (through one zero-byte meeting send at T on the empty route:
n + n dependencies a piece on one switch, not n x n); the one ending where a
down segment starts.  Piece 0 pays the segment's latency, later pieces follow
it on the same links without it, as the bytes of one stream do.

Cost (analytical mode)
----------------------
Segment e has latency a_e (the sum over its links, s), bandwidth B_e (its
slowest link, bytes/s) and piece time t_e = p / B_e.  The last piece arrives
after the longest path through (segment, piece) pairs:

    T = max over segments e of  F(e) + H(e)
    F(e) = a_e + t_e + max over segments f feeding e of F(f)          (0 if none)
    H(e) = max((c - 1) t_e + R(e),  max over segments g fed by e of t_g + H(g))
    R(e) = max over segments g fed by e of t_g + R(g)                 (0 if none)

that is, over every way from a rank up to T and down to a rank: the
latencies up to some segment, each segment's piece time once, and c - 1 piece
times of the slowest segment from there on.  It is the flow-level time
(rel 1e-9) when no link is in two segments (each send alone on its links), as
on the built-in topologies.  On ways of m segments with latency a_up up and
a_down down and one bandwidth B:

    T = a_up + a_down + S / B + (m - 1) p / B

On one switch (each rank's cable: latency l, bandwidth B; m = 2):
T = 2 l + S / B + p / B -- 2 l is one rank-to-rank route latency (a piece
crosses the switch once), and the bandwidth term is paid once, not once up and
once down, as long as the message has several pieces: one piece (S <= chunk)
takes 2 l + 2 S / B.  Bus bandwidth 2(n-1)/n S / T then tends to 2(n-1)/n B
for large S, against B for a ring: about twice, as SHARP and NVLS give.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..topology import Link, Route, Topology
from ..topology.tiered import network_switches
from .algorithm import Algorithm
from .bus import TIERED, route_of
from .call import CollectiveCall
from .ring import pieces
from .schedule import Schedule

IN_NETWORK_CHUNK_BYTES = float(2**20)
"""Default pipelining piece of the in-network all-reduce: 1 MiB."""


@dataclass(frozen=True)
class Segment:
    """A run of links of the aggregation tree that one piece crosses as one send."""

    links: tuple[Link, ...]
    up: bool
    """True in the tree toward the top (reduction), False in the tree from it (copies)."""
    feeders: tuple[int, ...]
    """Segments (indices) piece k must have crossed before it crosses this one."""
    owner: int
    """The lowest rank behind it: its sends count as that rank's in the records."""
    sender: int
    """Rank at its start, -1 for a switch."""
    receiver: int
    """Rank at its end, -1 for a switch."""
    cap_Bps: float = math.inf
    """Most bytes/s it carries: the reduction throughput of the switch it ends at (NVLink
    or InfiniBand SHARP, :func:`reduction_cap`), else unbounded."""

    @property
    def latency_s(self) -> float:
        """Sum of its links' latencies, seconds."""
        return sum(link.latency_s for link in self.links)

    @property
    def bandwidth_Bps(self) -> float:
        """Its slowest link's bandwidth (bytes/s), at most :attr:`cap_Bps`."""
        return min(min(link.bandwidth_Bps for link in self.links), self.cap_Bps)


@dataclass(frozen=True)
class AggregationTree:
    """The up and down trees of a group as segments, each listed after its feeders."""

    top: str
    """The switch where the up tree ends and the down tree starts."""
    segments: tuple[Segment, ...]
    into_top: tuple[int, ...]
    """The up segments that end at the top: the feeders of every down segment leaving it."""

    def time(self, size_bytes: float, chunk_bytes: float) -> float:
        """Seconds of an all-reduce of ``size_bytes`` in pieces of at most ``chunk_bytes``
        (the formula of the module docstring)."""
        c = pieces(size_bytes, chunk_bytes)
        piece = size_bytes / c
        segs = self.segments
        t = [piece / s.bandwidth_Bps if piece > 0 else 0.0 for s in segs]
        # The down segments leaving the top all have the up segments into it as feeders
        # (one shared tuple, into_top): their maxima are taken once for the group, not
        # once per segment -- linear in the ranks instead of quadratic.
        shared = self.into_top
        top_first = 0.0
        first = [0.0] * len(segs)
        fed: list[list[int]] = [[] for _ in segs]
        group: list[int] = []  # down segments fed by into_top
        for e, s in enumerate(segs):
            if s.feeders is shared and shared:
                if not group:
                    top_first = max(first[f] for f in shared)
                group.append(e)
                first[e] = s.latency_s + t[e] + top_first
                continue
            first[e] = s.latency_s + t[e] + max((first[f] for f in s.feeders), default=0.0)
            for f in s.feeders:
                fed[f].append(e)
        feeds_group = set(shared) if group else set()
        rest = [0.0] * len(segs)
        piled = [0.0] * len(segs)
        group_max: tuple[float, float] | None = None
        for e in reversed(range(len(segs))):
            rests = [t[g] + rest[g] for g in fed[e]]
            piles = [t[g] + piled[g] for g in fed[e]]
            if e in feeds_group:  # the group's members, all after e, are done
                if group_max is None:
                    group_max = (
                        max(t[g] + rest[g] for g in group),
                        max(t[g] + piled[g] for g in group),
                    )
                rests.append(group_max[0])
                piles.append(group_max[1])
            rest[e] = max(rests, default=0.0)
            piled[e] = max([(c - 1) * t[e] + rest[e], *piles])
        return max(f + h for f, h in zip(first, piled, strict=True))


def aggregation_tree(devices: Sequence[str], topology: Topology) -> AggregationTree | str:
    """The aggregation tree of the group ``devices`` (two or more), or why there is none."""
    tops = _tops(devices, topology)
    if isinstance(tops, str):
        return tops
    best: AggregationTree | None = None
    best_s = 0.0
    why = ""
    for top in tops:  # in order from rank 0: the later of equals wins
        tree = _tree(devices, topology, top)
        merging = _merges_without_reducing(tree, topology)
        if merging:
            why = why or (
                f"in_network through {top}: the group's data would merge in {merging}, which "
                "does not reduce (a node's PCIe switches and NICs do not); hierarchical with "
                "options inter: in_network sums inside the nodes first"
            )
            continue
        latency = tree.time(0.0, IN_NETWORK_CHUNK_BYTES)
        if best is None or latency <= best_s:
            best, best_s = tree, latency
    return why if best is None else best


def _merges_without_reducing(tree: AggregationTree, topology: Topology) -> str | None:
    """A switch below the top where two ways of the up tree merge but which cannot sum."""
    for segment in tree.segments:
        end = segment.links[-1].dst
        if segment.up and segment.receiver < 0 and not reduces(topology, end):
            return end
    return None


def _route(topology: Topology, src: str, dst: str) -> Route:
    return topology.first_route(src, dst)


def _inner(route: Route) -> list[str]:
    """The vertices a route passes between its ends, in order."""
    return [link.dst for link in route.links[:-1]]


def reduces(topology: Topology, switch: str) -> bool:
    """Whether ``switch`` sums data: on a racked cluster an NVSwitch with NVLink SHARP or a
    network switch with SHARP; on the other kinds (abstract switches) every switch."""
    if getattr(topology, "kind", "") not in TIERED:
        return True
    return switch in getattr(topology, "reductions", {}) or switch in getattr(
        topology, "reduction_shares", {}
    )


def reduction_cap(topology: Topology, switch: str, link: Link) -> float:
    """Bytes/s at which ``switch`` sums what arrives over ``link`` (inf: at line rate)."""
    found = getattr(topology, "reductions", {}).get(switch)
    if found is not None:
        return float(found)
    share = getattr(topology, "reduction_shares", {}).get(switch)
    if share is None:
        return math.inf
    line = getattr(topology, "same_links", topology).links[link.index].bandwidth_Bps
    return float(share) * line


def _not_reducing(topology: Topology, meeting: list[str]) -> str:
    """Why a group whose routes meet only in ``meeting`` (none of which reduces) is refused."""
    names = ", ".join(meeting[:3]) + (", ..." if len(meeting) > 3 else "")
    if any(name.endswith("/nvswitch") or "/nvdomain" in name for name in meeting):
        fix = (
            "an NVSwitch reduces with NVLink SHARP (cluster.node.nvlink.sharp, H100 and "
            "later); else use ring or tree"
        )
    elif network_switches(meeting):
        fix = (
            "cluster.sharp is false, so the network switches do not reduce (true: InfiniBand "
            "SHARP); else use ring or tree"
        )
    else:
        fix = (
            "a node's PCIe switches and NICs do not reduce: hierarchical with options "
            "inter: in_network sums inside the nodes first"
        )
    return f"in_network reduces in switches, but the group's routes meet only in {names}: {fix}"


def _tops(devices: Sequence[str], topology: Topology) -> list[str] | str:
    """Reducing switches on every route between rank 0 and the others (both ways), in order
    from rank 0; or why there are none."""
    switches = set(topology.switches)
    first, second = devices[0], devices[1]
    order = [v for v in _inner(_route(topology, first, second)) if v in switches]
    if not order:
        return (
            f"in_network reduces in switches, but the route from {first} to {second} "
            f"crosses none (a {topology.kind} cluster cables devices to each other)"
        )
    common = set(order)
    for other in devices[1:]:
        common.intersection_update(_inner(_route(topology, first, other)))
        common.intersection_update(_inner(_route(topology, other, first)))
        if not common:
            hint = ""
            if topology.device(first).node is not None:
                hint = "; hierarchical with options inter: in_network reduces across nodes"
            return (
                "in_network needs a switch on every route of the group to reduce in, but "
                f"the routes between {first} and {second} and between {first} and {other} "
                f"share none{hint}"
            )
    meeting = [v for v in order if v in common]
    found = [v for v in meeting if reduces(topology, v)]
    return found if found else _not_reducing(topology, meeting)


def _tree(devices: Sequence[str], topology: Topology, top: str) -> AggregationTree:
    """The trees of ``devices`` through the switch ``top`` (see the module docstring)."""
    rank_of = {d: i for i, d in enumerate(devices)}
    ups: list[tuple[Link, ...]] = []
    downs: list[tuple[Link, ...]] = []
    for i, device in enumerate(devices):
        other = devices[1] if i == 0 else devices[0]
        way = _route(topology, device, other).links
        ups.append(way[: next(k for k, link in enumerate(way) if link.dst == top) + 1])
        way = _route(topology, other, device).links
        downs.append(way[next(k for k, link in enumerate(way) if link.src == top) :])
    segments: list[Segment] = []
    into_top = tuple(_up_segments(ups, rank_of, top, segments, topology))
    _down_segments(downs, rank_of, top, into_top, segments)
    return AggregationTree(top, tuple(segments), into_top)


def _up_segments(
    ups: list[tuple[Link, ...]],
    rank_of: dict[str, int],
    top: str,
    out: list[Segment],
    topology: Topology,
) -> list[int]:
    """Append the up tree's segments to ``out`` (deepest first); return those ending at ``top``.
    A segment ending at a switch carries at most that switch's reduction throughput
    (:func:`reduction_cap`)."""
    parent: dict[str, Link] = {}  # vertex -> its link toward the top
    owner: dict[str, int] = {}  # vertex -> the first (lowest) rank whose way crosses it
    for rank, way in enumerate(ups):
        for link in way:
            if link.src in parent:
                break  # joins an earlier way: summed here
            parent[link.src] = link
            owner[link.src] = rank
    inflow = Counter(link.dst for link in parent.values())

    def joint(v: str) -> bool:
        return v == top or inflow[v] + (v in rank_of) >= 2

    depth: dict[str, int] = {top: 0}  # vertex -> links to the top

    def depth_of(v: str) -> int:
        if v not in depth:
            depth[v] = depth_of(parent[v].dst) + 1
        return depth[v]

    starts = sorted((v for v in parent if v in rank_of or joint(v)), key=lambda v: -depth_of(v))
    ending: dict[str, list[int]] = {}  # joint -> segments ending there
    for v in starts:
        links = [parent[v]]
        while not joint(links[-1].dst):
            links.append(parent[links[-1].dst])
        end = links[-1].dst
        ending.setdefault(end, []).append(len(out))
        out.append(
            Segment(
                tuple(links),
                True,
                tuple(ending.get(v, ())),
                owner[v],
                rank_of.get(v, -1),
                rank_of.get(end, -1),
                math.inf if end in rank_of else reduction_cap(topology, end, links[-1]),
            )
        )
    return ending[top]


def _down_segments(
    downs: list[tuple[Link, ...]],
    rank_of: dict[str, int],
    top: str,
    into_top: tuple[int, ...],
    out: list[Segment],
) -> None:
    """Append the down tree's segments to ``out``, from ``top`` outwards."""
    feeder: dict[str, Link] = {}  # vertex -> its link from the top's side
    owner: dict[str, int] = {}
    for rank, way in enumerate(downs):
        for link in reversed(way):
            if link.dst in feeder:
                break  # an earlier way already reaches it: copied here
            feeder[link.dst] = link
            owner[link.dst] = rank
    outs: dict[str, list[Link]] = {}
    for link in feeder.values():
        outs.setdefault(link.src, []).append(link)

    def stop(v: str) -> bool:
        return v in rank_of or len(outs.get(v, ())) >= 2

    queue = [top]
    ending: dict[str, int] = {}  # vertex -> the segment ending there
    for v in queue:
        feeders = into_top if v == top else (ending[v],)
        for link in outs.get(v, ()):
            links = [link]
            while not stop(links[-1].dst):
                links.append(outs[links[-1].dst][0])
            end = links[-1].dst
            ending[end] = len(out)
            out.append(
                Segment(
                    tuple(links),
                    False,
                    feeders,
                    owner[end],
                    rank_of.get(v, -1),
                    rank_of.get(end, -1),
                )
            )
            if end in outs:
                queue.append(end)


class InNetwork(Algorithm):
    """All-reduce reduced by the switches (SHARP, NVLS): see the module docstring."""

    name = "in_network"
    description = (
        "in_network: the switches reduce and multicast (SHARP/NVLS); each rank sends and "
        "receives S once, about S beta"
    )
    ops = frozenset({"allreduce"})
    nccl_protocols = ("Simple",)  # NCCL's NVLS runs Simple only (tuning.cc)

    def unsupported(self, call: CollectiveCall, topology: Topology) -> str | None:
        """Why ``call`` cannot be reduced in the network: another operation, a non-positive
        chunk, or routes that share no switch."""
        if call.chunk_bytes is not None and not call.chunk_bytes > 0:
            return f"chunk must be positive bytes, got {call.chunk_bytes}"
        reason = super().unsupported(call, topology)
        if reason or call.n < 2:
            return reason
        found = aggregation_tree(call.devices, topology)
        return found if isinstance(found, str) else None

    def nccl_candidate(self, call: CollectiveCall, topology: Topology) -> bool:
        """NCCL reduces in a switch only where the switch can: an NVSwitch with NVLink SHARP
        (NVLS; ``cluster.node.nvlink.sharp``), the top of the call's aggregation tree."""
        reductions = getattr(topology, "reductions", None)
        if call.n < 2 or not reductions:  # no switch can: no tree to build
            return False
        found = aggregation_tree(call.devices, topology)
        return not isinstance(found, str) and found.top in reductions

    def tree(self, call: CollectiveCall, topology: Topology) -> AggregationTree:
        """The call's aggregation tree (ValueError if it has none: see :meth:`unsupported`)."""
        found = aggregation_tree(call.devices, topology)
        if isinstance(found, str):
            raise ValueError(found)
        return found

    def _chunk(self, call: CollectiveCall) -> float:
        return IN_NETWORK_CHUNK_BYTES if call.chunk_bytes is None else call.chunk_bytes

    def schedule(self, call: CollectiveCall, topology: Topology) -> Schedule:
        """c pieces through every segment, each after its feeders and its previous piece.

        The down segments leaving the top wait for piece k at the top through one
        zero-byte meeting send on the empty route (completed as the up segments into the
        top are): n + n dependencies per piece on one switch instead of n x n."""
        schedule = Schedule(call.n)
        if call.n < 2:
            return schedule
        tree = self.tree(call, topology)
        segs = tree.segments
        c = pieces(call.size_bytes, self._chunk(call))
        piece = call.size_bytes / c
        first = [route_of(topology, s.links, s.cap_Bps) for s in segs]
        stream = [replace(r, latency_s=0.0) for r in first]
        send = schedule.send_on
        meet = Route()  # the empty route: the meeting send at the top
        previous: list[int] = []
        for k in range(c):
            routes = first if k == 0 else stream
            current: list[int] = []
            at_top = -1
            for e, s in enumerate(segs):
                if not s.up and s.feeders == tree.into_top:
                    if at_top < 0:
                        ups = [current[f] for f in s.feeders]
                        at_top = send(meet, -1, -1, 0.0, ups, owner=0, step=0)
                    after = [at_top]
                else:
                    after = [current[f] for f in s.feeders]
                if previous:
                    after.append(previous[e])
                step = 0 if s.up else 1
                current.append(
                    send(routes[e], s.sender, s.receiver, piece, after, owner=s.owner, step=step)
                )
            previous = current
        return schedule

    def sends(self, call: CollectiveCall, topology: Topology) -> float:
        """c pieces through every segment, plus one meeting send per piece at the top."""
        if call.n < 2:
            return 0.0
        tree = self.tree(call, topology)
        segs = tree.segments
        meet = any(not s.up and s.feeders == tree.into_top for s in segs)
        return float(len(segs) + meet) * pieces(call.size_bytes, self._chunk(call))

    def cost(self, call: CollectiveCall, topology: Topology) -> float:
        """Seconds by the formula of the module docstring."""
        if call.n < 2:
            return 0.0
        return self.tree(call, topology).time(call.size_bytes, self._chunk(call))

    def link_flows(self, call: CollectiveCall, topology: Topology) -> dict[int, float]:
        """Link index -> segments crossing it (1 on every link of the trees)."""
        if call.n < 2:
            return {}
        count = Counter(link.index for s in self.tree(call, topology).segments for link in s.links)
        return {index: float(k) for index, k in count.items()}
