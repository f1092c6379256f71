"""Congestion-aware analytical collectives: a collective as a few weighted flows.

The flow-level model plays every send of a collective (2(n-1) n of them for a
ring all-reduce).  The congestion-aware analytical model
(``network: {model: analytical}``) plays each collective as a handful of
*phases*, each one weighted flow in the same network as every other transfer,
so collectives that run at once -- DDP buckets, the data-parallel rings of the
t tensor ranks that leave a node through one NIC, ZeRO reduce-scatters beside
pipeline sends -- share the links they have in common, as they do in the flow
model, at the cost of a few events per collective.

A phase (:class:`FluidPhase`) has

* ``fixed_s``: seconds that do not depend on bandwidth -- the latency terms
  of the algorithm's alpha-beta cost (its cost at zero bytes) and whatever
  its formula adds beyond the bandwidth its links need (pipeline fill);
* ``bandwidth_s``: the rest of its cost alone on the network;
* ``flows``: for every link the phase uses, how many of its sends cross the
  link at once (a ring: 1 per hop crossing it; the g rails of a node on its
  NIC: g); a tree's streams each count their route's wire where a protocol prices
  the links below their line rate (:func:`pair_flows`' ``wired``), as the flow-level
  model puts wire x bytes on them.

It is played as one flow over those links, weighted by ``flows``: after
``e x fixed_s`` (``e`` = :data:`EXPOSED_LATENCY`) it moves ``bandwidth_s x r0``
units at the weighted max-min fair rate, where ``r0 = min over links of
capacity / flows`` is its rate alone, never faster than the rate cap
``bandwidth_s x r0 / ((1 - e) fixed_s + bandwidth_s)``.  Alone, a phase
therefore takes exactly ``fixed_s + bandwidth_s`` and a collective exactly its
algorithm's cost.  Beside other traffic, each of its sends on a link counts as
one flow in the max-min share of that link, as in the flow-level model, and
the part of its latency spread by the cap leaves bandwidth to the others.

A call that stands for several channels (their copies merged into one slice,
:attr:`~clustersim.collectives.CollectiveCall.connections`) spreads each pair's
flows evenly over the routes its connections hash onto, as the flow-level model
plays one send per channel on its connection's route: the same load on average,
spread over the spine links as the channels spread it.  Its units stay those of
its cost, which prices each pair on one route (``FluidPhase.alone_Bps``), so
alone it still takes exactly that cost (the cap binds) and only its share of
contended links follows the spread.

What it leaves out: the step-by-step structure inside a phase (a phase's sends
are spread evenly over its duration) and the per-step dependencies that let a
slow hop delay only its neighbours.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import simpy

from ..caches import registered
from ..errors import SimulationError
from ..memo import RepeatMemo
from .bus import route_wire

if TYPE_CHECKING:
    from ..engine import Simulation
    from ..topology import Link, Topology
    from .algorithm import Algorithm
    from .call import CollectiveCall
    from .schedule import Schedule

__all__ = [
    "EXPOSED_LATENCY",
    "FluidPhase",
    "FluidRoute",
    "pair_flows",
    "run_fluid",
    "schedule_flows",
]

EXPOSED_LATENCY = 0.5
"""Share of a phase's ``fixed_s`` played as a delay before it takes bandwidth; the rest
spreads its transfer (a rate cap), leaving gaps other traffic can use.

A ring step waits one latency, then moves its bytes.  Against steady traffic those
latencies add to the ring's time in full (share 1); between collectives whose steps
interleave, one's latency is hidden by the others' transfers (share 0).  The flow-level
model lands between the two: on the shipped data-parallel scenarios share 1 is up to 9%
slow and share 0 up to 6% fast; one half is within 2% of both regimes
(tests/test_fluid.py holds the bounds)."""


@dataclass(frozen=True)
class FluidPhase:
    """One phase of a collective in the congestion-aware analytical model."""

    fixed_s: float
    """Seconds of the phase that do not depend on link bandwidth (latency)."""
    bandwidth_s: float
    """Seconds of the phase's bandwidth term alone on the network."""
    flows: dict[int, float]
    """Link index -> sends of the phase crossing it at once (the link's weight)."""
    alone_Bps: float = 0.0
    """The rate alone its ``bandwidth_s`` was priced at (B/s) where it differs from that of
    ``flows``: a call standing for several channels spreads its flows over their routes,
    while its cost prices each pair on one route; 0: :meth:`rate_alone_Bps` of ``flows``."""

    def rate_alone_Bps(self, links: Sequence[Link]) -> float:
        """Rate of the phase's weighted flow alone on ``links`` (the topology's, by index, at
        their nominal bandwidth): min over its links of bandwidth / flows."""
        return min(links[link].bandwidth_Bps / k for link, k in self.flows.items())


class FluidRoute:
    """A route-like object for :meth:`Network.transfer`: links, weights, latency."""

    __slots__ = ("links", "weights", "latency_s", "rate_cap")

    def __init__(
        self, links: Sequence[Link], weights: Sequence[float], latency_s: float, rate_cap: float
    ) -> None:
        self.links = tuple(links)
        self.weights = tuple(weights)
        self.latency_s = latency_s
        self.rate_cap = rate_cap


def pair_flows(
    topology: Topology,
    src: str,
    dst: str,
    out: dict[int, float],
    count: float,
    connections: Sequence[int] = (0,),
    wired: bool = False,
) -> None:
    """Add ``count`` flows from ``src`` to ``dst`` to ``out`` (link index -> flows) on the
    routes the flow-level model gives the pair's sends: the ECMP route of each of
    ``connections`` (see :func:`clustersim.collectives.execution.execute`), evenly, or all
    its equal-cost routes evenly with ``spine_routing: split``.

    ``wired``: each flow counts its route's wire on the route's links (:func:`.bus.route_wire`),
    as the flow-level model puts wire x its bytes there: the weights of a fluid phase, played
    on the links at their line rate while ``topology`` prices them lower."""
    plain = getattr(topology, "same_links", topology)  # links only: skip a view's repricing
    if topology.spine_routing == "split":
        routes = plain.routes(src, dst)
    else:  # each connection's ECMP route (the pair's only one where it has one)
        routes = tuple(plain.route(src, dst, f"connection{c}") for c in connections)
    share = count / len(routes)
    priced = topology.links if wired and plain is not topology else None
    for route in routes:
        weight = share if priced is None else share * route_wire(route.links, priced)
        for link in route.links:
            out[link.index] = out.get(link.index, 0.0) + weight


def hop_flows(
    topology: Topology,
    hops: Sequence[tuple[str, str]],
    connections: Sequence[int] = (0,),
    first: dict[int, float] | None = None,
) -> dict[int, float]:
    """Link index -> hops crossing it, one flow per (src, dst) hop on the routes
    :func:`pair_flows` gives it; with ECMP each connection's route of the hop, counted in C
    (a ring of 1,024 ranks crosses 7,000 links), 1 / len(connections) a route.  ``first``,
    if given, gets the flows of the first connection alone (one flow a hop)."""
    out: dict[int, float] = {}
    if topology.spine_routing == "split":
        for src, dst in hops:
            pair_flows(topology, src, dst, out, 1.0)
        if first is not None:
            first.update(out)
        return out
    plain = getattr(topology, "same_links", topology)
    crossed: list[int] = []  # every link crossing of the other connections, in route order
    firsts: list[int] = []  # and of the first connection
    key, *others = [f"connection{c}" for c in connections]
    route_links = getattr(plain, "route_links", None)
    spread = getattr(plain, "ecmp_spread", None) if others else None
    for src, dst in hops:  # the first connection's routes are kept: flows take them too
        firsts += [link.index for link in plain.route(src, dst, key).links]
        found = None if spread is None else spread(src, dst, others)
        if found is not None:  # the links all the others take, then each one's own
            common, middles = found
            crossed += [link.index for link in common] * len(others)
            crossed += [link.index for middle in middles for link in middle]
            continue
        for other in others:
            links = (
                plain.route(src, dst, other).links
                if route_links is None
                else route_links(src, dst, other)
            )
            crossed += [link.index for link in links]
    counts = Counter(crossed)  # counted once, in C: the same counts in the same key order
    alone = Counter(firsts)
    if first is not None:
        first.update((link, float(k)) for link, k in alone.items())
    counts.update(alone)
    share = 1.0 / (1 + len(others))
    return {link: k * share for link, k in counts.items()}


def schedule_flows(
    schedule: Schedule,
    devices: Sequence[str],
    topology: Topology,
    connections: Sequence[int] = (0,),
) -> dict[int, float]:
    """Concurrent flows per link of a schedule: link index -> flows crossing it at once.

    Sends are grouped by step and (src, dst) pair (the pieces of one message
    are one flow); a send on its own route (:meth:`Schedule.send_on`) by step,
    pair and route, and counted on that route's links.  For each link, with
    ``D`` the bytes all steps put on it and ``B`` the sum over steps of the
    mean bytes of the pairs crossing it in that step, the link carries
    ``D / B`` flows at once: the number of pairs crossing it in each step,
    averaged with the steps' bytes as weights.
    """
    pair_bytes: dict[tuple[int, int, int, tuple[int, ...] | None], float] = {}
    vias = schedule.routes or {}
    for i, (src, dst, nbytes, step) in enumerate(
        zip(schedule.src, schedule.dst, schedule.nbytes, schedule.step, strict=True)
    ):
        via = vias.get(i) if vias else None
        own = None if via is None else tuple(link.index for link in via.route.links)
        key = (step, src, dst, own)
        pair_bytes[key] = pair_bytes.get(key, 0.0) + nbytes
    per_step: dict[tuple[int, int], list[float]] = {}  # (step, link) -> [bytes, pairs]
    routes: dict[tuple[int, int, tuple[int, ...] | None], dict[int, float]] = {}
    for (step, src, dst, own), nbytes in pair_bytes.items():
        links = routes.get((src, dst, own))
        if links is None:
            links = routes[src, dst, own] = {}
            if own is not None:
                for index in own:
                    links[index] = links.get(index, 0.0) + 1.0
            else:
                pair_flows(topology, devices[src], devices[dst], links, 1.0, connections)
        for link, share in links.items():
            acc = per_step.setdefault((step, link), [0.0, 0.0])
            acc[0] += nbytes * share
            acc[1] += share
    total: dict[int, float] = {}
    mean: dict[int, float] = {}
    for (_step, link), (nbytes, pairs) in per_step.items():
        total[link] = total.get(link, 0.0) + nbytes
        mean[link] = mean.get(link, 0.0) + nbytes / pairs
    return {link: total[link] / mean[link] for link in total if mean[link] > 0.0}


def run_fluid(
    sim: Simulation,
    call: CollectiveCall,
    algorithm: Algorithm,
    label: str,
    iteration: int = -1,
    topology: Any = None,
    delay_s: float = 0.0,
    op: str = "",
) -> simpy.Event:
    """Start ``call`` now as its algorithm's fluid phases; the event fires when it ends.

    ``topology`` (default: the simulation's) prices the phases: a view of the simulation's
    topology with the same links, such as a protocol's; ``delay_s`` seconds pass first.
    Each rank gets one ``collective`` record (of op ``op``) from the start to the end.
    """
    phases = call_phases(algorithm, call, sim.topology if topology is None else topology)
    if delay_s > 0.0:
        phases = [FluidPhase(delay_s, 0.0, {}), *phases]
    return sim.process(_play(sim, call, phases, label, iteration, op))


_phases_of: RepeatMemo[list[FluidPhase]] = registered(RepeatMemo(4096))
"""Fluid phases by call, algorithm and topology (:func:`call_phases`), kept from a call's
second time: a one-iteration run at scale prices most of its groups once."""


def call_phases(algorithm: Algorithm, call: CollectiveCall, topology: Any) -> list[FluidPhase]:
    """``algorithm.fluid_phases(call, topology)``, kept per call, algorithm class and
    topology: a run calls the same collective many times (a ZeRO-3 layer's all-gather at
    every micro-batch, a bucket at every iteration), and its phases are a function of those
    alone (every field of the call; the topology's links and bandwidths, which a run does
    not change: failures and stragglers act on the network and devices).  A call whose
    options cannot be a key is priced each time.  The list is not changed by its users."""
    key = (type(algorithm), topology, *map(_hashable, vars(call).values()))
    try:
        phases = _phases_of.get(key)
    except TypeError:  # an option that cannot be a key
        return algorithm.fluid_phases(call, topology)
    if phases is None:
        phases = algorithm.fluid_phases(call, topology)
        _phases_of.offer(key, phases)
    return phases


def _hashable(value: Any) -> Any:
    """A call field as part of a key: a dict (the options) as its sorted items."""
    return tuple(sorted(value.items())) if isinstance(value, dict) else value


_weighted_links_of: RepeatMemo[
    tuple[dict[int, float], Any, tuple[Any, ...], tuple[float, ...], float]
] = registered(RepeatMemo(1024))
"""By ``id(flows)``: the flows, the links list, and what :func:`_weighted_links` made of
them (kept from the second time a flows dict is seen: one kept by its algorithm)."""


def _weighted_links(
    flows: dict[int, float], links: Sequence[Link]
) -> tuple[tuple[Link, ...], tuple[float, ...], float]:
    """A phase's links in index order, their weights and its rate alone (bytes/s,
    :meth:`FluidPhase.rate_alone_Bps`).  Kept per ``flows`` dict: an algorithm that keeps
    its link flows (a ring's, per group) hands the same dict to every call of the group,
    and the same tuples then let the network check the weighted route once."""
    kept = _weighted_links_of.get(id(flows))
    if kept is not None and kept[0] is flows and kept[1] is links:
        return kept[2], kept[3], kept[4]
    order = sorted(flows)
    route_links = tuple(links[i] for i in order)
    weights = tuple(flows[i] for i in order)
    alone = min(link.bandwidth_Bps / k for link, k in zip(route_links, weights, strict=True))
    _weighted_links_of.offer(id(flows), (flows, links, route_links, weights, alone))
    return route_links, weights, alone


def _play(
    sim: Simulation,
    call: CollectiveCall,
    phases: Sequence[FluidPhase],
    label: str,
    iteration: int,
    op: str = "",
) -> Any:
    start = sim.now
    links = sim.topology.links
    for phase in phases:
        if not phase.flows or phase.bandwidth_s <= 0.0:
            if phase.fixed_s + max(phase.bandwidth_s, 0.0) > 0.0:
                wait = phase.fixed_s + max(phase.bandwidth_s, 0.0)
                yield sim.timeout(wait, f"a phase of collective '{label}'")
            continue
        route_links, weights, alone_Bps = _weighted_links(phase.flows, links)
        units = phase.bandwidth_s * (phase.alone_Bps or alone_Bps)
        if not units < math.inf:
            raise SimulationError(
                f"collective '{label}' ({call.op} of {call.size_bytes:g} B) overflowed: a "
                f"phase would take {phase.bandwidth_s!r} s; the inputs are too large or small"
            )
        route = FluidRoute(
            route_links,
            weights,
            EXPOSED_LATENCY * phase.fixed_s,
            units / ((1.0 - EXPOSED_LATENCY) * phase.fixed_s + phase.bandwidth_s),
        )
        yield sim.network.transfer(route, units)
    sim.book_collective(call.devices, label, start, sim.now, iteration=iteration, op=op)
