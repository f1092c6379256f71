"""NCCL's protocols: what LL, LL128 and Simple cost beyond the wire.

NCCL moves data with one of three protocols, each a trade of latency against
bandwidth.  clustersim models each by three numbers, optional per collective
(``network.protocol``, a workload's ``protocol``, ``collective --protocol``;
none by default, when sends cost only what the links give):

* **bandwidth efficiency** -- the share of the bytes on the wire that is
  payload, from the protocols' line formats (NVIDIA/nccl ``src/include/device.h``):
  LL sends 16-byte lines of two 4-byte data words and two 4-byte flags (1/2);
  LL128 sends 128-byte lines of which 120 bytes are data (15/16); Simple
  sends data only (1).  A send of S bytes puts S / efficiency on the links.
* **per-hop latency** -- added to the latency of every route a send takes
  (NCCL's ``hwLat``), by the kind of link the route crosses: ``NET`` (it
  leaves the node through a NIC; also flat switches and custom fabrics),
  ``PCI`` (through a PCIe switch) or ``NVLink`` (NVLink, NVSwitch, direct GPU
  links).
* **base latency** -- once per collective, before its first send (NCCL's
  ``baseLat``).

The trees' data also gets NCCL's measured tree-kernel shares of the links
(:func:`tree_share`: 0.92, and 0.74 of that across three nodes or more,
from the tuner's ``perChMaxTreeBws`` against the rings' channel speed): NCCL's
trees reach less of the network than its rings at large sizes, which the
links alone do not show.

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

from dataclasses import dataclass, replace
from typing import Any

from ..errors import Problem, ScenarioError, hinted
from ..topology import Route, Topology

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

    def wire(self, call: Any, topology: Topology) -> Any:
        """``call`` with its bytes (and pipelining chunk) as the links carry them: over the
        protocol's efficiency and, for the trees, NCCL's tree kernel share
        (:func:`tree_share`)."""
        share = self.efficiency
        if family(call.algorithm) == "tree":
            share *= tree_share(call, topology)
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

TREE_KERNEL_SHARE = 0.92
"""Share of the links' bandwidth NCCL's tree kernels reach (tuning.cc: ``busBw * .92``)."""
TREE_CHANNEL_SHARE = 17.8 / 24.0
"""Across three nodes or more, NCCL caps a tree channel at ``perChMaxTreeBws`` = 17.8 GB/s
(Ampere; Hopper 36.0) where a ring channel gets its graph's speed, 24 GB/s on 200 Gb/s
NICs (``speedArrayInter``; Hopper 48 on 400 Gb/s): a tree moves 0.74 (Hopper 0.75) of a
ring's bytes per channel."""

CHOICES = ("auto", *PROTOCOLS)
"""What a ``protocol`` key accepts: a protocol, or ``auto`` (the fastest by the cost model)."""


def tree_share(call: Any, topology: Topology) -> float:
    """The share of link bandwidth a tree's data gets under the protocol model: NCCL's tree
    kernels' 0.92, times 0.74 when the group spans three nodes or more (see
    :data:`TREE_CHANNEL_SHARE`; the measured large-message tree/ring ratio is 0.79 on five
    H100 nodes, NVIDIA/nccl#1368)."""
    nodes = {topology.device(d).node for d in call.devices}
    if len(nodes) >= 3 and None not in nodes:
        return TREE_KERNEL_SHARE * TREE_CHANNEL_SHARE
    return TREE_KERNEL_SHARE


def check_protocol(name: str | None, path: str = "protocol") -> str | None:
    """``name`` if it is a protocol, ``auto`` or None; ScenarioError otherwise."""
    if name is None or name in CHOICES:
        return name
    raise ScenarioError(
        Problem(path, hinted(f"unknown protocol {name!r}", name, CHOICES), ", ".join(CHOICES))
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


class ProtocolView:
    """A topology whose routes carry ``protocol``'s per-hop latency on top of their own.

    Links (and so bandwidths and link indices) are the wrapped topology's;
    everything but :meth:`routes` and :meth:`route` is passed through.
    """

    def __init__(self, topology: Topology, protocol: Protocol, algorithm: str) -> None:
        self._topology = topology
        self._protocol = protocol
        self._family = family(algorithm)
        self._cache: dict[tuple[str, str, int | str | None], tuple[Route, ...]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._topology, name)

    def _slower(self, routes: tuple[Route, ...]) -> tuple[Route, ...]:
        hop = self._protocol.hop_latency_s
        return tuple(
            replace(r, latency_s=r.latency_s + hop[self._family, link_kind(r)]) for r in routes
        )

    def routes(self, src: str, dst: str) -> tuple[Route, ...]:
        """The wrapped topology's routes, each with the protocol's hop latency added."""
        key = (src, dst, None)
        out = self._cache.get(key)
        if out is None:
            out = self._cache[key] = self._slower(self._topology.routes(src, dst))
        return out

    def route(self, src: str, dst: str, flow_key: int | str = 0) -> Route:
        """The wrapped topology's ECMP route, with the protocol's hop latency added."""
        key = (src, dst, flow_key)
        out = self._cache.get(key)
        if out is None:
            out = self._cache[key] = self._slower((self._topology.route(src, dst, flow_key),))
        return out[0]


_VIEW_CACHE_LIMIT = 256
_views: dict[tuple[Any, str, str], ProtocolView] = {}


def protocol_view(topology: Topology, protocol: Protocol, algorithm: str) -> ProtocolView:
    """The :class:`ProtocolView` of ``topology`` for ``protocol`` and ``algorithm``'s
    family, one per combination (so that what is cached per topology stays valid)."""
    key = (topology, protocol.name, family(algorithm))
    view = _views.get(key)
    if view is None:
        if len(_views) >= _VIEW_CACHE_LIMIT:
            _views.clear()
        view = _views[key] = ProtocolView(topology, protocol, algorithm)
    return view


def priced_cost(algorithm: Any, call: Any, topology: Topology) -> float:
    """Seconds of ``call`` by ``algorithm``'s cost with its protocol (none, or a named one):
    the base latency, then the cost of the wire bytes on routes slowed by the hop latency."""
    protocol = PROTOCOLS.get(call.protocol) if call.protocol else None
    if protocol is None:
        return algorithm.cost(call, topology)
    view = protocol_view(topology, protocol, algorithm.name)
    base = protocol.base_latency_s[family(algorithm.name)] if call.n > 1 else 0.0
    return base + algorithm.cost(protocol.wire(call, topology), view)  # type: ignore[arg-type]
