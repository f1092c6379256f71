"""NCCL's protocols: what LL, LL128 and Simple cost beyond the wire.

NCCL moves data with one of three protocols, each a trade of latency against
bandwidth.  clustersim prices the one a collective runs (``network.protocol``, a
workload's ``protocol``, ``collective --protocol``: ``auto`` by default, the fastest
by the cost model; ``none`` prices only what the links give) by:

* **link share** -- the share of link bandwidth the data gets.  From the
  protocols' line formats (NVIDIA/nccl ``src/include/device.h``): LL sends
  16-byte lines of two 4-byte data words and two 4-byte flags (1/2); LL128 sends
  128-byte lines of which 120 bytes are data (15/16); Simple sends data only (1);
  trees reach 0.92 of the links (NCCL's tree kernels).  Where NCCL's channels are
  known (:mod:`~clustersim.collectives.channels`: clusters of nodes) the shares are
  its tuner's, with its per-channel caps (:mod:`~clustersim.collectives.tuner`).
  A send of S bytes puts S / share on the links.
* **link bandwidth** -- on clusters of nodes the links run at the bandwidth NCCL
  reaches on them, not their line rate (:mod:`~clustersim.collectives.bus`:
  NVLink 0.8-0.82 by generation, PCIe 0.75, NICs 0.96).
* **per-hop latency** -- added to the latency of every route a send takes
  (NCCL's ``hwLat``), by the kind of link the route crosses: ``NET`` (it
  leaves the node through a NIC; also flat switches and custom fabrics),
  ``PCI`` (through a PCIe switch) or ``NVLink`` (NVLink, NVSwitch, direct GPU
  links).
* **base latency** -- once per collective, before its first send (NCCL's
  ``baseLat``; NVLS's 25 us for ``in_network`` with Simple).

Latencies are per algorithm family: ``tree`` (tree, double_tree) and ``ring``
(every other algorithm, NCCL having only rings besides trees).  Values are
NCCL 2.21.5's (``src/graph/tuning.cc``, tag v2.21.5-1, commit ab2b89c4),
except the tree's Simple per-hop latency: 2.21.5 puts 28 us there, the time
of one 256 kB chunk crossing a hop (a comment in 2.18.1 says so), which
clustersim already simulates piece by piece; the 2.18.3 values (4, 6 and
14 us) are used instead.  NCCL's tuner also scales bandwidths by measured
size-dependent correction factors (``treeCorrectionFactor``); those are fits
to NCCL's kernels at mid sizes and are left out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..caches import registered
from ..errors import Problem, ScenarioError, hinted
from ..topology import Link, Route, Topology
from .bus import BusView, RepricedView, bus_route, bus_view, with_latency
from .channels import nccl_graph, shared_view
from .tuner import TREE_KERNEL_SHARE, link_share

US = 1e-6

LINK_KINDS = ("NVLink", "PCI", "NET")


@dataclass(frozen=True)
class Protocol:
    """One NCCL protocol: payload share of the wire and latencies (seconds)."""

    name: str
    efficiency: float
    """Payload bytes per byte on the wire."""
    base_latency_s: dict[str, float]
    """Per algorithm family (``tree``, ``ring``): seconds once per collective."""
    hop_latency_s: dict[tuple[str, str], float]
    """Per (family, link kind): seconds added to every route."""

    def base_latency(self, algorithm: str) -> float:
        """Seconds once per collective of ``algorithm`` (its family's; NVLS's with Simple for
        ``in_network``: :data:`IN_NETWORK_SIMPLE_LATENCY_S`)."""
        if algorithm == "in_network" and self.name == "Simple":
            return IN_NETWORK_SIMPLE_LATENCY_S
        return self.base_latency_s[family(algorithm)]

    def share(self, call: Any, topology: Topology) -> float:
        """The share of link bandwidth ``call``'s data gets with this protocol: NCCL's
        tuner's where its channels are known (:func:`tuner.link_share`), else the line
        format's efficiency (x 0.92 for the trees)."""
        graph = nccl_graph(call.devices, topology) if call.n > 1 else None
        if graph is not None:
            return link_share(self.name, family(call.algorithm), graph)
        if family(call.algorithm) == "tree":
            return self.efficiency * TREE_KERNEL_SHARE
        return self.efficiency

    def wire(self, call: Any, topology: Topology) -> Any:
        """``call`` with its bytes (and pipelining chunk) as the links carry them: over
        :meth:`share`.  A tree with no chunk of its own, where NCCL's channels are known,
        pipelines in NCCL's tree chunk for the protocol (:data:`TREE_CHUNK_BYTES`)."""
        share = self.share(call, topology)
        if call.chunk_bytes is None and family(call.algorithm) == "tree" and call.n > 1:
            if nccl_graph(call.devices, topology) is not None:
                call = replace(call, chunk_bytes=TREE_CHUNK_BYTES[self.name])
        chunk = call.chunk_bytes / share if call.chunk_bytes else call.chunk_bytes
        return replace(call, size_bytes=call.size_bytes / share, chunk_bytes=chunk)


def _table(tree: tuple[float, ...], ring: tuple[float, ...]) -> dict[tuple[str, str], float]:
    """(family, kind) -> seconds from microseconds per link kind (NVLink, PCI, NET)."""
    out = {("tree", k): v * US for k, v in zip(LINK_KINDS, tree, strict=True)}
    out.update({("ring", k): v * US for k, v in zip(LINK_KINDS, ring, strict=True)})
    return out


PROTOCOLS: dict[str, Protocol] = {
    "LL": Protocol(
        "LL", 0.5, {"tree": 6.8 * US, "ring": 6.6 * US}, _table((0.6, 1.0, 5.0), (0.6, 1.0, 2.7))
    ),
    "LL128": Protocol(
        "LL128",
        120 / 128,
        {"tree": 14.0 * US, "ring": 14.0 * US},
        _table((1.25, 1.9, 8.5), (1.9, 2.5, 4.0)),
    ),
    "Simple": Protocol(
        "Simple", 1.0, {"tree": 0.0, "ring": 8.4 * US}, _table((4.0, 6.0, 14.0), (3.4, 5.7, 14.0))
    ),
}
"""NCCL's protocols by name (see the module docstring for sources)."""

TREE_CHUNK_BYTES = {"LL": 32.0 * 1024, "LL128": 32.0 * 1024, "Simple": 512.0 * 1024}
"""The piece NCCL's tree kernels pipeline in, per protocol (payload bytes; enqueue.cc and
device.h): Simple a step of its 4 MiB buffer (8 steps): 512 KiB; LL half its 64 KiB step:
32 KiB; LL128 a step of 576 kB halved while a channel holds few chunks, down to its floor of
32 KiB, which it reaches at the mid sizes where trees run with LL128."""

IN_NETWORK_SIMPLE_LATENCY_S = 25.0 * US
"""Latency of an in-switch all-reduce with Simple: NCCL's NVLS, which runs Simple only, has
base latency 0 and 25 us over NVLink (tuning.cc ``hwLatencies``, NVLS row); ``in_network``
builds its own routes and takes no per-hop latency, so the 25 us stand once for the call."""

CHOICES = ("auto", *PROTOCOLS)
"""What a ``protocol`` key accepts: a protocol, or ``auto`` (the fastest by the cost model);
also :data:`NONE`."""
NONE = "none"
"""The spelling of no protocol: sends cost only what the links give, at line rate."""


def check_protocol(name: str | None, path: str = "protocol") -> str | None:
    """``name`` if it is a protocol or ``auto``; None for None or ``none``; ScenarioError
    otherwise."""
    if name is None or name == NONE:
        return None
    if name in CHOICES:
        return name
    raise ScenarioError(
        Problem(
            path,
            hinted(f"unknown protocol {name!r}", name, (*CHOICES, NONE)),
            ", ".join((*CHOICES, NONE)),
        )
    )


def family(algorithm: str) -> str:
    """``tree`` for the tree algorithms, ``ring`` for every other."""
    return "tree" if algorithm in ("tree", "double_tree") else "ring"


def link_kind(route: Route) -> str:
    """``NET``, ``PCI`` or ``NVLink``: the slowest kind of hop ``route`` makes."""
    names = [end for link in route.links for end in (link.src, link.dst)]
    if any("nic" in name for name in names):
        return "NET"
    if any("pcie" in name or name.endswith("/root") for name in names):
        return "PCI"
    if any("nvswitch" in name or "nvdomain" in name for name in names) or len(route.links) == 1:
        return "NVLink"
    return "NET"


def plugin_times(protocol: str) -> int:
    """How many times NCCL adds the network plugin's latency (``cluster.node.nic.
    plugin_latency``) to a network step with ``protocol``: twice with Simple (its flush),
    once with LL and LL128 (src/graph/tuning.cc, ``interLat += graphs[a]->latencyInter``)."""
    return 2 if protocol == "Simple" else 1


class ProtocolView(RepricedView):
    """A topology as an NCCL protocol sees it: routes carry ``protocol``'s per-hop latency on
    top of their own, and links run at the bandwidth NCCL reaches on them
    (:mod:`clustersim.collectives.bus`: :attr:`links` and the routes' links are copies at
    that bandwidth, same indices; each route's ``wire`` factor makes flows on the real
    links move at it).  With ``send_latency_s`` (an algorithm NCCL's latency model prices
    whole, :meth:`~clustersim.collectives.Algorithm.send_latency_s`) every route's latency
    is that instead: NCCL's per-hop figures include the links', which are not added again.
    Everything else is the wrapped topology's.
    """

    def __init__(
        self,
        topology: Topology,
        protocol: Protocol,
        algorithm: str,
        send_latency_s: float | None = None,
    ) -> None:
        bus = bus_view(topology)
        super().__init__(topology, bus)
        self._bus = bus
        self._protocol = protocol
        self._family = family(algorithm)
        self._send_latency_s = send_latency_s
        self._plugin_s = float(getattr(topology, "nic_plugin_latency_s", 0.0)) * plugin_times(
            protocol.name
        )
        """What a network hop pays for the network plugin's latency, seconds."""
        self.links = bus.links
        """The wrapped topology's links at NCCL's bandwidth (:func:`bus.bus_links`)."""
        self.bus_scaled = True
        """Its links are at NCCL's bandwidth already (:func:`bus.bus_links` keeps them)."""

    @property
    def same_bandwidths(self) -> BusView:
        """The topology at NCCL's bandwidths (:class:`~clustersim.collectives.bus.BusView`):
        this view's routes are its routes with other latencies."""
        return self._bus

    @property
    def uniform_latency_s(self) -> float | None:  # type: ignore[override]
        """The send latency (seconds), every route's where given."""
        return self._send_latency_s

    def _latency(self, route: Route) -> float:
        """Seconds a send on ``route`` waits: the view's send latency, else the route's own
        and the protocol's per-hop latency for its kind."""
        if self._send_latency_s is not None:
            return self._send_latency_s
        kind = link_kind(route)
        extra = self._plugin_s if kind == "NET" else 0.0
        return route.latency_s + self._protocol.hop_latency_s[self._family, kind] + extra

    def route_latency_s(self, src: str, dst: str) -> float:
        """Seconds of :meth:`first_route` from ``src`` to ``dst``, found without scaling the
        route to NCCL's bandwidths (its latency does not depend on them)."""
        if self._send_latency_s is not None:
            return self._send_latency_s
        key = (src, dst, _LATENCY)
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = self._latency(self._topology.first_route(src, dst))
        return found  # type: ignore[no-any-return]

    def _repriced(self, routes: tuple[Route, ...]) -> tuple[Route, ...]:
        """``routes`` (the :class:`~clustersim.collectives.bus.BusView`'s) at this view's
        latency."""
        return tuple(with_latency(r, self._latency(r)) for r in routes)

    def route_of(self, links: Sequence[Link], cap_Bps: float = math.inf) -> Route:
        """The route along ``links`` at NCCL's bandwidth, its data rate at most ``cap_Bps``
        (no protocol hop latency: the caller builds its own route, as ``in_network`` does)."""
        real = self._topology.links
        latency = sum(link.latency_s for link in links)
        return bus_route((real[link.index] for link in links), latency, self.links, cap_Bps)


_LATENCY = object()
"""The cache key part of a route's latency alone (:meth:`ProtocolView.route_latency_s`)."""

_VIEW_CACHE_LIMIT = 256
_views: dict[tuple[Any, str, str, float | None], ProtocolView] = registered({})


def protocol_view(
    topology: Topology, protocol: Protocol, algorithm: str, send_latency_s: float | None = None
) -> ProtocolView:
    """The :class:`ProtocolView` of ``topology`` for ``protocol``, ``algorithm``'s family
    and ``send_latency_s``, one per combination (so that what is cached per topology stays
    valid)."""
    key = (topology, protocol.name, family(algorithm), send_latency_s)
    view = _views.get(key)
    if view is None:
        if len(_views) >= _VIEW_CACHE_LIMIT:
            _views.clear()
        view = _views[key] = ProtocolView(topology, protocol, algorithm, send_latency_s)
    return view


def priced_cost(
    algorithm: Any, call: Any, topology: Topology, counts: Mapping[int, float] | None = None
) -> float:
    """Seconds of ``call`` by ``algorithm``'s cost with its protocol (none, or a named one):
    the base latency, then the cost of the wire bytes on routes slowed by the hop latency,
    at NCCL's link bandwidths.  ``counts`` (link index -> what the slice's share of it is
    divided by, :func:`~clustersim.collectives.channels.shared_divisors`) prices one slice
    of a collective beside its siblings (:class:`~clustersim.collectives.channels.SharedView`)."""
    protocol = PROTOCOLS.get(call.protocol) if call.protocol else None
    if protocol is None:
        view: Any = shared_view(topology, counts) if counts else topology
        return algorithm.cost(call, view)
    view, wire = protocol_call(algorithm, call, topology, protocol)
    if counts:
        view = shared_view(view, counts)
    base = protocol.base_latency(algorithm.name) if call.n > 1 else 0.0
    return base + algorithm.cost(wire, view)


def protocol_call(
    algorithm: Any, call: Any, topology: Topology, protocol: Protocol
) -> tuple[ProtocolView, Any]:
    """(the view of ``topology`` that ``call`` runs on with ``protocol``, ``call`` with its
    wire bytes): the view's routes carry the algorithm's send latency where NCCL's latency
    model prices it whole (:meth:`~clustersim.collectives.Algorithm.send_latency_s`), else
    the protocol's per-hop latency on top of their own."""
    wire = protocol.wire(call, topology)
    send_latency = algorithm.send_latency_s(wire, topology, protocol.name) if call.n > 1 else None
    return protocol_view(topology, protocol, algorithm.name, send_latency), wire
