"""The bandwidth NCCL reaches on each kind of link, instead of the line rate.

NCCL's topology gives every link the bandwidth its kernels reach on it, below the line
rate, and its search builds channels of those speeds (NVIDIA/nccl ``src/graph/topo.h``,
``topo.cc``, ``search.cc``; read at tag v2.21.5-1 and on master, 2026):

* **NVLink**: per link, 18 GB/s on P100 (SM60), 20 on V100 and A100 (SM70, SM80), 20.6
  on H100 (SM90), 40.1 on B200 (SM100), against line rates of 20, 25, 25, 25 and 50 GB/s
  per direction: shares 0.9, 0.8, 0.8, 0.824, 0.802.  An A100's 12 links give 240 GB/s of
  its 300, an H100's 18 give 370.8 of 450 (NVIDIA's maintainer: "With the protocol
  overhead (~20%) NCCL can get an effective NVLink bandwidth of 370GB/s",
  NVIDIA/nccl-tests#212).  An NVLink of unknown generation gets 0.8.
* **PCIe**: NCCL reads a link as lanes x 120 / 80 GB/s per 16 GT/s lane (``kvDictPciGen``):
  12, 24 and 48 GB/s for Gen3, Gen4 and Gen5 x16, against the 16, 32 and 64 GB/s a
  scenario writes: share 0.75.
* **NET** (a NIC and the fabric behind it): a channel crossing a NIC runs at the largest
  speed of NCCL's inter-node speed list not above the NIC's rate (``speedArrayInter``):
  24 GB/s on 200 Gb/s (25 GB/s), 48 on 400 Gb/s, 12 on 100 Gb/s: share 0.96.  Eight NICs of
  200 Gb/s so carry 192 GB/s of ring bus bandwidth, which DGX A100 measures (nccl#812).
  That is NCCL's RDMA transport (its IB plugin).  A NIC whose ``transport`` is ``tcp`` runs
  NCCL's socket transport: its links already carry TCP's share of the line rate
  (:mod:`clustersim.hardware.transport`, 0.5 measured on NCCL socket rings), and NCCL's
  NET share is not applied on top (share 1 of the TCP rate); the uplinks behind it keep 0.96.

The figures apply where the kind of a link is known (two-tier, three-tier and
rail-optimized clusters) and only to collectives priced with an NCCL protocol (named or
``auto``; :mod:`~clustersim.collectives.protocol`): ``protocol: none`` keeps line rates,
and so do flat and custom clusters, whose links are abstract.

How it is priced: :func:`bus_links` are the topology's links at NCCL's bandwidth (same
indices); routes built from them (:class:`BusRoute`) have NCCL's bottleneck, and carry
``wire`` = the line-rate bottleneck over it, so that a flow on the real links puts
``wire`` bytes on them per byte of data (:class:`~clustersim.network.Network` honours it)
and moves alone at NCCL's rate.  Costs (analytical model, ``algorithm: auto``) read the
scaled links directly.  Left out: a flow beside other traffic shares each of its links as
if every one were at the route's share (NCCL's figure is a property of its kernels, not of
the link's other users).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..caches import registered
from ..topology import Link, Route, Topology, TopologyView, nic_node, with_bandwidth

NVLINK_BUS_GBps: dict[int, tuple[float, float]] = {
    1: (18.0, 20.0),
    2: (20.0, 25.0),
    3: (20.0, 25.0),
    4: (20.6, 25.0),
    5: (40.1, 50.0),
}
"""NVLink generation -> (NCCL's GB/s per link, line rate GB/s per link and direction)."""
NVLINK_UNKNOWN_SHARE = 20.0 / 25.0
"""Share of an NVLink of unknown generation (NCCL's SM70/SM80 figure)."""
PCI_SHARE = 0.75
"""NCCL's PCIe figure over the nominal x16 rate: 12/16, 24/32, 48/64."""
NET_SHARE = 0.96
"""NCCL's channel speed on a NIC over its rate: 24/25 (200 Gb/s), 48/50 (400 Gb/s)."""
TIERED = frozenset({"two_tier", "three_tier", "rail_optimized"})
"""Cluster kinds whose links have a known kind (see the module docstring)."""
KINDS = ("NVLink", "PCIe", "NET")
"""Link kinds, as summaries name them."""


@dataclass(frozen=True, slots=True)
class BusRoute(Route):
    """A route at NCCL's bandwidth: ``bottleneck_Bps`` is NCCL's, and every byte of data
    puts ``wire`` bytes on the real links (1 where NCCL reaches the line rate)."""

    wire: float = 1.0


@dataclass(frozen=True, slots=True)
class CappedRoute(BusRoute):
    """A route whose data rate is at most ``bottleneck_Bps``, below its links' (a reducing
    switch's throughput): a flow on it is a weighted flow (weights 1) whose rate, in wire
    bytes per second, is at most ``rate_cap`` = ``bottleneck_Bps`` x ``wire``
    (:mod:`clustersim.network.weighted`).  Its links carry the bytes it moves, no more: the
    rest of their capacity stays free for other flows."""

    weights: tuple[float, ...] = ()
    rate_cap: float = float("inf")


def nvlink_share(generation: int | None) -> float:
    """NCCL's bandwidth over the line rate on an NVLink of ``generation`` (None: unknown)."""
    if generation is None or generation not in NVLINK_BUS_GBps:
        return NVLINK_UNKNOWN_SHARE
    nccl, line = NVLINK_BUS_GBps[generation]
    return nccl / line


def _end(name: str) -> str:
    """The last part of a device or switch path (``rack0/node1/pcie2`` -> ``pcie2``)."""
    return name.rsplit("/", 1)[-1]


def link_kind(link: Link, topology: Topology) -> str:
    """``NVLink``, ``PCIe`` or ``NET``: what ``link`` of a tiered cluster is, by its ends
    (docs/internals.md names them): an NVSwitch or NVLink-domain port or a GPU-to-GPU
    cable is NVLink; a cable to a PCIe switch or root is PCIe; the rest (NIC to switch,
    switch to switch, storage) is the network."""
    ends = (_end(link.src), _end(link.dst))
    if any(e == "nvswitch" or e.startswith("nvdomain") for e in ends):
        return "NVLink"
    if any(e.startswith("pcie") or e == "root" for e in ends):
        return "PCIe"
    devices = topology.devices
    if all(devices.get(n) is not None and devices[n].kind == "gpu" for n in (link.src, link.dst)):
        return "NVLink"
    return "NET"


def kind_share(kind: str, topology: Topology) -> float:
    """NCCL's bandwidth over the line rate on a link of ``kind`` in ``topology``."""
    if kind == "NVLink":
        return nvlink_share(topology.nvlink_generation)
    return PCI_SHARE if kind == "PCIe" else NET_SHARE


def link_share(link: Link, topology: Topology) -> float:
    """NCCL's bandwidth over the bandwidth ``link`` has in ``topology``: its kind's share,
    or 1 on the port of a TCP NIC (the link carries TCP's share already, module docstring)."""
    if getattr(topology, "nic_transport", "rdma") == "tcp" and nic_node(link) is not None:
        return 1.0
    return kind_share(link_kind(link, topology), topology)


_LINKS_CACHE_LIMIT = 64
_scaled: dict[int, tuple[Topology, BusLinks]] = registered({})


def applies(topology: Any) -> bool:
    """Whether ``topology``'s links have NCCL figures (a tiered cluster)."""
    return getattr(topology, "kind", "") in TIERED


class BusLinks(Sequence[Link]):
    """A topology's links at NCCL's bandwidth, each made when first read (a 131,072-GPU
    cluster has 1.4 M links; collectives read those of their groups' routes)."""

    def __init__(self, topology: Topology) -> None:
        self._topology = topology
        self._made: dict[int, Link] = {}

    def __len__(self) -> int:
        return len(self._topology.links)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        found = self._made.get(index)
        if found is None:
            topology = self._topology
            link = topology.links[index]
            share = link_share(link, topology)
            found = self._made[index] = with_bandwidth(link, link.bandwidth_Bps * share)
        return found


def bus_links(topology: Topology) -> Sequence[Link]:
    """``topology.links`` at NCCL's bandwidth (same indices and names; :class:`BusLinks`);
    the links themselves where no figures apply."""
    if not applies(topology) or getattr(topology, "bus_scaled", False):
        return topology.links
    return per_topology(_scaled, topology, BusLinks)


def per_topology(cache: dict[int, tuple[Any, Any]], topology: Any, make: Any) -> Any:
    """``make(topology)``, made once per topology and kept in ``cache`` (by identity, at
    most :data:`_LINKS_CACHE_LIMIT` topologies)."""
    found = cache.get(id(topology))
    if found is not None and found[0] is topology:
        return found[1]
    made = make(topology)
    if len(cache) >= _LINKS_CACHE_LIMIT:
        cache.clear()
    cache[id(topology)] = (topology, made)
    return made


class RepricedView(TopologyView):
    """A view of a topology whose routes are those of ``source`` (the topology or a view of
    it taking the same links, in the same ECMP choices) repriced by :meth:`_repriced`, each
    kept once made.  Prices change by link kind alone, so groups that sit alike in the
    topology sit alike here (:meth:`orbit_key`)."""

    def __init__(self, topology: Topology, source: Any) -> None:
        super().__init__(topology)
        self._source = source

    def _repriced(self, routes: tuple[Route, ...]) -> tuple[Route, ...]:
        """``routes`` (the source's) as this view prices them."""
        raise NotImplementedError

    def orbit_key(self, names: Sequence[str]) -> Hashable | None:
        """The wrapped topology's (see the class docstring)."""
        return self._topology.orbit_key(names)

    def canonical(self, key: Hashable) -> list[str]:
        """The wrapped topology's first group of the orbit ``key``."""
        return self._topology.canonical(key)

    @property
    def same_links(self) -> Topology:
        """The wrapped topology: this view's routes take its links, in its ECMP choices."""
        return self._topology

    def routes(self, src: str, dst: str) -> tuple[Route, ...]:
        """The source's routes, repriced."""
        key = (src, dst, None)
        out = self._cache.get(key)
        if out is None:
            out = self._cache[key] = self._repriced(self._source.routes(src, dst))
        return out

    def first_route(self, src: str, dst: str) -> Route:
        """The first of :meth:`routes`, built alone."""
        key = (src, dst, _FIRST)
        out = self._cache.get(key)
        if out is None:
            out = self._cache[key] = self._repriced((self._source.first_route(src, dst),))
        return out[0]

    def route(self, src: str, dst: str, flow_key: int | str = 0) -> Route:
        """The source's ECMP route, repriced."""
        key = (src, dst, flow_key)
        out = self._cache.get(key)
        if out is None:
            out = self._cache[key] = self._repriced((self._source.route(src, dst, flow_key),))
        return out[0]


_FIRST = object()
"""The cache key of a view's first route (no ECMP flow key equals it)."""


class BusView(RepricedView):
    """A topology at NCCL's bandwidths (:func:`bus_links`), every route keeping its own
    latency: what every protocol's view of the topology
    (:class:`~clustersim.collectives.protocol.ProtocolView`) shares, so that a route is
    scaled once for all the protocols, algorithm families and send latencies it is priced
    with (they change its latency alone).  Where no figures apply, its routes are the
    topology's own."""

    def __init__(self, topology: Topology) -> None:
        super().__init__(topology, topology)
        self.links = bus_links(topology)
        """The wrapped topology's links at NCCL's bandwidth (:func:`bus_links`)."""
        self.bus_scaled = True
        """Its links are at NCCL's bandwidth already (:func:`bus_links` keeps them)."""

    @property
    def same_bandwidths(self) -> BusView:
        """Itself (see :attr:`~clustersim.topology.TopologyView.same_bandwidths`)."""
        return self

    def _repriced(self, routes: tuple[Route, ...]) -> tuple[Route, ...]:
        """``routes`` (the wrapped topology's) at NCCL's bandwidth, latencies kept."""
        if self.links is self._topology.links:
            return routes
        return tuple(bus_route(r.links, r.latency_s, self.links) for r in routes)


_views: dict[int, tuple[Topology, BusView]] = registered({})


def bus_view(topology: Topology) -> BusView:
    """The :class:`BusView` of ``topology``, one per topology (its routes built once)."""
    return per_topology(_views, topology, BusView)  # type: ignore[no-any-return]


def with_latency(route: Route, latency_s: float) -> Route:
    """``route`` with latency ``latency_s`` (seconds), everything else kept (built directly
    for the two kinds views make most, a :class:`Route` and a :class:`BusRoute`)."""
    kind = type(route)
    if kind is BusRoute:
        return BusRoute(route.links, latency_s, route.bottleneck_Bps, route.wire)
    if kind is Route:
        return Route(route.links, latency_s, route.bottleneck_Bps)
    return replace(route, latency_s=latency_s)


def bus_route(
    links: Iterable[Link], latency_s: float, bus: Sequence[Link], cap_Bps: float = float("inf")
) -> BusRoute:
    """The route along ``links`` (of any copy of the topology's) at NCCL's bandwidth
    ``bus`` (by index), with ``latency_s``, its data rate at most ``cap_Bps`` (a
    :class:`CappedRoute` when the cap is below the links' bottleneck)."""
    real = tuple(links)
    scaled = tuple(bus[link.index] for link in real)
    bottleneck = min((link.bandwidth_Bps for link in scaled), default=float("inf"))
    wire = route_wire(real, bus)
    if scaled and cap_Bps < bottleneck:
        weights = (1.0,) * len(scaled)
        return CappedRoute(scaled, latency_s, cap_Bps, wire, weights, cap_Bps * wire)
    return BusRoute(scaled, latency_s, bottleneck, wire)


def route_wire(links: Sequence[Link], priced: Sequence[Link]) -> float:
    """The wire of a route over ``links`` (at their line rate) whose links are priced at
    ``priced`` (by index, NCCL's bandwidths): its line bottleneck over its priced bottleneck,
    the bytes on the links per byte of data (1 where the priced bottleneck is not below the
    line one, and on an empty route)."""
    if not links:
        return 1.0
    line = min(link.bandwidth_Bps for link in links)
    bottleneck = min(priced[link.index].bandwidth_Bps for link in links)
    return line / bottleneck if bottleneck < line else 1.0


def figures_GBps(topology: Topology) -> dict[str, float]:
    """Per link kind of ``topology``, the bandwidth collectives are priced at (GB/s, one
    direction): a GPU's NVLink port, its PCIe link, a NIC's network port.  Empty where no
    figures apply."""
    if not applies(topology):
        return {}
    out: dict[str, float] = {}
    gpus = [d for d in topology.devices.values() if d.kind == "gpu"]
    first = gpus[0].name if gpus else ""
    bus = bus_links(topology)
    for link in topology.links:
        kind = link_kind(link, topology)
        if kind in out:
            continue
        if kind == "NET" and not _end(link.src).startswith("nic"):
            continue
        if kind != "NET" and link.src != first:
            continue
        out[kind] = round(bus[link.index].bandwidth_Bps / 1e9, 6)
    return {kind: out[kind] for kind in KINDS if kind in out}


def route_latency(topology: Any) -> Callable[[str, str], float]:
    """``latency(src, dst)``: seconds of ``topology.first_route(src, dst)`` (a view's), asked
    of the view that has its latencies (:attr:`~clustersim.topology.TopologyView.same_latencies`)
    and without building the route where that view can say (a protocol's)."""
    timing = getattr(topology, "same_latencies", topology)
    own = getattr(timing, "route_latency_s", None)
    if own is not None:
        return own  # type: ignore[no-any-return]
    return lambda src, dst: timing.first_route(src, dst).latency_s  # type: ignore[no-any-return]


def route_of(topology: Any, links: Sequence[Link], cap_Bps: float = float("inf")) -> Route:
    """The route along ``links`` as ``topology`` prices it (a protocol's view: at NCCL's
    bandwidth), its data rate at most ``cap_Bps`` (a reducing switch's throughput)."""
    own = getattr(topology, "route_of", None)
    if own is not None:
        return own(links, cap_Bps)
    latency = sum(link.latency_s for link in links)
    if cap_Bps == float("inf"):
        return Route.of(links)
    return bus_route(links, latency, topology.links, cap_Bps)
