"""``channels: auto``: the channel count NCCL picks, and the slices clustersim plays.

NCCL splits a collective over *channels*: rings (or trees) that run at once, each
entering and leaving a node through other GPUs and NICs.  It finds them by a search over
its topology (NVIDIA/nccl ``src/graph/search.cc``, ``connect.cc``; read at v2.21.5 and
master): each channel reserves a speed on every link it crosses, from a list of speeds
tried largest first, and the search keeps as many channels as the links hold.  clustersim
follows the same rules on its own cluster (:func:`nccl_graph`):

* **one node**: a channel is a ring through every GPU of the group; at speed ``s`` a GPU's
  path to the others (NVLink at NCCL's figure, :mod:`~clustersim.collectives.bus`, or
  PCIe) of bandwidth ``B`` holds ``floor(B / s)`` of them, ``s`` the largest intra-node
  speed not above ``B``;
* **several nodes**: a channel crosses each node through one NIC.  ``s`` is the largest
  inter-node speed not above a GPU's path to its NIC (the PCIe figure, the NIC's rate);
  every NIC the group's GPUs sit beside carries ``floor(min(NIC, PCIe) / s)`` channels;
* NCCL then doubles the channels (halving ``s``) unless ``s < 25`` GB/s, or on Hopper and
  later ``s < 50`` with more than 4 channels (``ncclTopoDupChannels``), and runs each
  searched channel twice (``connect.cc``: "rings per NIC": 2); Hopper and later double a
  multi-node count below 16 once more when ``s > 45``.  At most 64 channels.

The speed lists and the generation (Ampere, Hopper, Blackwell lists) come from the node's
NVLink generation (Ampere's lists when unknown).  This gives 24 channels on one DGX A100
or DGX H100 node and 16 across DGX A100 or DGX H100 nodes (8 NICs), as NCCL's logs show
("Channel 00/16", nccl#1453; 24 on one H100 node, nccl#1367).  Clusters whose links have no
kind (flat, custom) get 1.

Slices played (:func:`simulated_slices`): clustersim plays a channel as a slice of
``S / channels`` bytes with every node's ranks rotated so that the channel enters and leaves
the node through the GPUs and the NIC NCCL gives it (:func:`channel_order`,
:func:`clustersim.collectives.channel_call`): channel ``c`` at GPU ``c`` of each node where
every GPU has its NIC (or all share one), through the node's NICs in turn where 2 or more
GPUs share a NIC.  Channels ``c`` and ``c + p`` (``p`` the distinct placements: ``g`` ranks
per node, or the ``m`` NICs they share) cross the same links the same way.  When every
placement repeats equally often (``channels`` a multiple of ``p`` across nodes, 1 inside
one or on a flat fabric) and each pair has one route (no ECMP choice), the ``k`` copies of
each slice are played as one
slice of ``k`` times the bytes: max-min fair sharing gives ``k`` equal flows on the same
links each ``1/k`` of what one flow gets, so alone -- and beside collectives played the same
way -- the time is the same, with ``k`` times fewer events (tests/test_channels.py holds
it).  Beside other traffic a merged slice counts as one flow where NCCL has ``k``
connections.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..caches import registered
from ..memo import kept
from ..topology import Link, Route, Topology, TopologyView, with_bandwidth
from .bus import applies, bus_links, link_kind, per_topology, with_latency
from .call import CollectiveCall, node_groups

ARCH_OF_GENERATION = {1: 60, 2: 70, 3: 80, 4: 90, 5: 100}
"""NVLink generation -> the GPU architecture (SM) that brought it."""
SPEEDS_INTRA: dict[int, tuple[float, ...]] = {
    80: (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0),
    90: (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
    100: (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0),
}
"""NCCL's channel speeds inside a node, GB/s (search.cc ``speedArrayIntra``, ``sm90...``,
``sm100...``); architectures before Hopper use the first."""
SPEEDS_INTER: dict[int, tuple[float, ...]] = {
    80: (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0,
         2.4, 1.2, 0.24, 0.12),
    90: (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2,
         0.24, 0.12),
    100: (96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0,
          6.0, 3.0, 2.4, 1.2, 0.24, 0.12),
}  # fmt: skip
"""NCCL's channel speeds across nodes, GB/s (search.cc ``speedArrayInter`` and its kin)."""
MAX_SEARCHED = 32
"""Most channels NCCL's search keeps (MAXCHANNELS / 2)."""
MAX_CHANNELS = 64
"""Most channels a collective runs in (NCCL's MAXCHANNELS)."""
FLAT_KINDS = frozenset({"switch", "ring", "fully_connected"})
"""Cluster kinds without nodes whose pairs have one route each."""
AUTO = "auto"
"""The ``channels`` value that asks for NCCL's count."""
GB = 1e9


@dataclass(frozen=True)
class Graph:
    """What NCCL's search finds for a group: its channels and their speed."""

    nodes: int
    """Nodes the group spans."""
    arch: int
    """GPU architecture (SM: 80 Ampere, 90 Hopper, 100 Blackwell) of the speed lists."""
    searched: int
    """Channels the search keeps (each run twice)."""
    speed_GBps: float
    """Bus bandwidth of one searched channel, GB/s (NCCL's ``bwIntra``/``bwInter``)."""
    channels: int
    """Channels NCCL runs: what ``channels: auto`` reports."""


def _speed(speeds: tuple[float, ...], bandwidth_GBps: float) -> float:
    """The largest of ``speeds`` not above ``bandwidth_GBps`` (the smallest if none is)."""
    return next((s for s in speeds if s <= bandwidth_GBps * (1 + 1e-9)), speeds[-1])


def _arch(topology: Any) -> int:
    return ARCH_OF_GENERATION.get(getattr(topology, "nvlink_generation", None) or 3, 80)


_CACHE_LIMIT = 4096
_graphs: dict[tuple[int, Any], tuple[Any, Graph | None]] = registered({})


def nccl_graph(devices: tuple[str, ...], topology: Topology) -> Graph | None:
    """NCCL's channels for the group ``devices`` on ``topology`` (see the module docstring);
    None where the cluster's links have no kind (flat, custom) or a device has no node."""
    key = (id(topology), devices)
    found = _graphs.get(key)
    if found is not None and found[0] is topology:
        return found[1]
    orbit = topology.orbit_key(devices) if isinstance(topology, Topology) else None
    if orbit is not None:  # groups that sit alike get one search (topology/symmetry.py)
        key = (id(topology), orbit)
        found = _graphs.get(key)
        if found is not None and found[0] is topology:
            return found[1]
    graph = _search(devices, topology) if applies(topology) and len(devices) > 1 else None
    if len(_graphs) >= _CACHE_LIMIT:
        _graphs.clear()
    _graphs[key] = (topology, graph)
    return graph


def _search(devices: tuple[str, ...], topology: Topology) -> Graph | None:
    groups = _groups(devices, topology)
    if groups is None:
        return None
    arch = _arch(topology)
    key = 100 if arch >= 100 else 90 if arch >= 90 else 80
    bus = bus_links(topology)
    if len(groups) == 1:
        route = topology.first_route(devices[0], devices[1])
        path = min(bus[link.index].bandwidth_Bps for link in route.links) / GB
        speed = _speed(SPEEDS_INTRA[key], path)
        searched = max(1, math.floor(path / speed + 1e-9))
    else:
        speed, searched = _inter(devices, groups, topology, key)
    if speed >= 25.0 and not (arch > 80 and speed < 50.0 and searched > 4):
        doubled = min(2 * searched, MAX_SEARCHED)
        speed /= math.ceil(doubled / searched)
        searched = doubled
    channels = min(MAX_CHANNELS, 2 * searched)
    if arch >= 90 and len(groups) > 1 and speed > 45.0 and channels < 16:
        channels = min(MAX_CHANNELS, 2 * channels)
    return Graph(len(groups), arch, searched, speed, channels)


def _groups(devices: tuple[str, ...], topology: Topology) -> list[list[int]] | None:
    return node_groups(CollectiveCall("allreduce", devices, 0.0), topology)


def _inter(
    devices: tuple[str, ...], groups: list[list[int]], topology: Topology, key: int
) -> tuple[float, int]:
    """(channel speed GB/s, channels) across nodes: one speed per channel on a GPU's path to
    its NIC, channels as the NICs beside the group's GPUs of the first node hold them."""
    bus = bus_links(topology)
    other = devices[groups[1][0]]
    nics: dict[int, float] = {}  # NIC link index -> what it carries, GB/s
    for rank in groups[0]:
        route = topology.first_route(devices[rank], other)
        pcie = math.inf
        for link in route.links:
            kind = link_kind(link, topology)
            if kind == "PCIe":
                pcie = min(pcie, bus[link.index].bandwidth_Bps / GB)
            elif kind == "NET":  # the NIC's own port: NCCL reads its rate
                nics[link.index] = min(link.bandwidth_Bps / GB, pcie)
                break
    if not nics:
        return _speed(SPEEDS_INTER[key], 1.0), 1
    path = max(nics.values())
    speed = _speed(SPEEDS_INTER[key], path)
    searched = sum(max(1, math.floor(bw / speed + 1e-9)) for bw in nics.values())
    return speed, searched


def channel_order(ranks: Sequence[int], nics: Sequence[Any], channel: int) -> list[int]:
    """The order in which channel ``channel`` goes through one node's ``ranks`` (in rank
    order; ``nics[i]`` the NIC beside ``ranks[i]``): a rotation of them, entering the node
    at its first rank and leaving it at its last, through the NIC NCCL gives the channel.

    NCCL starts its searched channels on the node's NICs in turn (``search.cc``,
    ``ncclTopoSearchRecNet``: channel ``i`` tries NIC ``i mod count`` first), enters
    through a GPU beside that NIC and, its rings, leaves through one beside the same NIC
    ("NET n -> GPU a -> .. -> GPU x -> NET n"; NCCL's maintainer: "Using the same NIC as
    input and output will ensure that we do not communicate across rails", nccl#1933); its
    trees go up and down through the GPUs at the head of the same chain (``connect.cc``:
    ``treeToParent``, ``treeToChild0``).  The copies of a channel (``ncclTopoDupChannels``,
    the rings run twice) are the same GPUs and NIC.  So where some of the node's NICs sit
    beside two or more of its ranks (PCIe switches shared by 2 or 4 GPUs and a NIC), channel
    ``c`` takes the node's ``c mod m``-th NIC (``m`` NICs beside its ranks) and enters at
    the second of the first two neighbouring ranks beside that NIC, leaving at the first:
    every NIC carries ``1/m`` of the channels, both ways.  With one NIC for all the ranks,
    or one rank beside each NIC, channel ``c`` enters at rank ``c mod g`` and leaves through
    the rank before it (``g`` ranks): one NIC beside every rank, entry and exit spread over
    the NICs alike."""
    g = len(ranks)
    distinct = list(dict.fromkeys(nics))
    start = channel % g
    if 1 < len(distinct) < g:
        nic = distinct[channel % len(distinct)]
        beside = [i for i in range(g) if nics[i] == nic]
        pairs = [i for i in beside if nics[(i + 1) % g] == nic]
        start = (pairs[0] + 1) % g if pairs else beside[0]
    return [*ranks[start:], *ranks[:start]]


def placements(nics: Sequence[Any]) -> int:
    """How many channels pass before :func:`channel_order` repeats on a node whose ranks sit
    beside ``nics``: the NICs beside them where some NIC has two or more, else the ranks."""
    g = len(nics)
    m = len(set(nics))
    return m if 1 < m < g else g


def nccl_channels(devices: tuple[str, ...], topology: Topology) -> int:
    """The channels NCCL runs a collective of ``devices`` in (1 where it cannot say)."""
    graph = nccl_graph(devices, topology)
    return 1 if graph is None else graph.channels


def resolve_channels(channels: int | str, devices: tuple[str, ...], topology: Topology) -> int:
    """``channels`` as a count: ``auto`` is NCCL's (:func:`nccl_channels`)."""
    return nccl_channels(devices, topology) if channels == "auto" else int(channels)


def simulated_slices(call: Any, topology: Topology, channels: int, plays_sends: bool = True) -> int:
    """How many slices of ``call`` split over ``channels`` are played (see the module
    docstring): the distinct rotations when each repeats equally often and routes are
    unique, else ``channels``.  A network model that does not play sends (the analytical
    one) routes every channel's copy of a pair alike, so its copies merge whatever the
    routes (``plays_sends`` False).  Worked out once per group of devices, topology and
    channels (a data-parallel group's buckets ask again and again: its nodes and NICs
    were looked up for every call, twice counting the work estimate)."""
    if channels <= 1 or call.n < 2:
        return 1
    known = per_topology(_SLICES, topology, lambda _topology: {})
    key = (tuple(call.devices), channels, plays_sends)
    return kept(known, key, lambda: _slices(call, topology, channels, plays_sends), _SLICES_LIMIT)


_SLICES: dict[int, tuple[Any, Any]] = registered({})
"""Per topology (by identity), :func:`simulated_slices` by devices, channels and model."""

_SLICES_LIMIT = 4096
"""Most groups remembered per topology (all forgotten when full)."""


def _slices(call: Any, topology: Topology, channels: int, plays_sends: bool) -> int:
    """:func:`simulated_slices`, worked out."""
    groups = node_groups(call, topology)
    if groups is None:  # no nodes, no rotation: copies of one slice on a flat fabric's routes
        return 1 if topology.kind in FLAT_KINDS else channels
    distinct = 1
    if len(groups) > 1:
        for ranks in groups:
            distinct = math.lcm(distinct, placements(node_nics(call.devices, ranks, topology)))
    if channels % distinct or len({len(g) for g in groups}) > 1:
        return channels
    if distinct < channels and plays_sends and not _unique_routes(call.devices, groups, topology):
        return channels
    return distinct


def node_nics(devices: Sequence[str], ranks: Sequence[int], topology: Any) -> list[Any]:
    """The NIC beside each of a node's ``ranks`` (:meth:`Topology.nic_of`; None without)."""
    nic_of = getattr(topology, "nic_of", None)
    return [None if nic_of is None else nic_of(devices[r]) for r in ranks]


def _unique_routes(devices: tuple[str, ...], groups: list[list[int]], topology: Topology) -> bool:
    """Whether every pair of the group's nodes has one route (or routes split evenly), so
    that a channel's ECMP hash picks nothing."""
    if topology.spine_routing == "split" or len(groups) < 2:
        return True
    first = devices[groups[0][0]]
    return all(len(topology.routes(first, devices[g[0]])) == 1 for g in groups[1:])


class _DividedLinks(Sequence[Link]):
    """The links of a topology, those in ``counts`` with bandwidth / count (built lazily)."""

    def __init__(self, links: Sequence[Link], counts: Mapping[int, float]) -> None:
        self._links = links
        self.counts = counts
        """Link index -> what its bandwidth is divided by (absent: 1)."""
        self._made: dict[int, Link] = {}

    def __len__(self) -> int:
        return len(self._links)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        count = self.counts.get(index, 1)
        if count <= 1:
            return self._links[index]
        found = self._made.get(index)
        if found is None:
            link = self._links[index]
            found = self._made[index] = with_bandwidth(link, link.bandwidth_Bps / count)
        return found


class SharedView(TopologyView):
    """A topology (or a protocol's view of it) on which the slices of one collective run at
    once: a link whose share ``counts[link]`` divides (:func:`shared_divisors`: all the
    slices' flows on it over the priced slice's own) has bandwidth / that, in :attr:`links`
    and in the routes.  ``algorithm: auto`` prices a slice on it, so that an algorithm whose
    slices meet on a link (the double tree's on a NIC) is priced as it will run
    (:func:`clustersim.collectives.auto.choose`)."""

    def __init__(self, topology: Any, counts: Mapping[int, float]) -> None:
        super().__init__(topology)
        self.links = _DividedLinks(topology.links, counts)
        self._bandwidths: Any = None

    @property
    def same_bandwidths(self) -> Any:
        """The :func:`shared_view` of the wrapped view's
        :attr:`~clustersim.topology.TopologyView.same_bandwidths` with the same counts:
        the divided links are the same, and the routes keep the wrapped latencies."""
        if self._bandwidths is None:
            inner = getattr(self._topology, "same_bandwidths", self._topology)
            same = inner is self._topology
            self._bandwidths = self if same else shared_view(inner, self.links.counts)
        return self._bandwidths

    @property
    def uniform_latency_s(self) -> float | None:  # type: ignore[override]
        """The wrapped view's (latencies are kept)."""
        return getattr(self._topology, "uniform_latency_s", None)

    @property
    def same_links(self) -> Any:
        """The wrapped view's: this view divides bandwidths, it does not reroute."""
        return getattr(self._topology, "same_links", self._topology)

    @property
    def same_latencies(self) -> Any:
        """The wrapped view's: this view keeps its latencies."""
        return getattr(self._topology, "same_latencies", self._topology)

    def routes(self, src: str, dst: str) -> tuple[Route, ...]:
        """The wrapped topology's routes on the divided links (latencies kept)."""
        key = (src, dst)
        found = self._cache.get(key)
        if found is None:
            inner = self._topology.routes(src, dst)
            shared = self.same_bandwidths
            if shared is self:
                found = tuple(self._divided(r) for r in inner)
            else:  # the shared view's routes, at the wrapped latencies
                found = tuple(
                    with_latency(r, own.latency_s)
                    for r, own in zip(shared.routes(src, dst), inner, strict=True)
                )
            self._cache[key] = found
        return found

    def first_route(self, src: str, dst: str) -> Route:
        """The first of :meth:`routes`, built alone."""
        key = (src, dst, None)
        found = self._cache.get(key)
        if found is None:
            inner = self._topology.first_route(src, dst)
            shared = self.same_bandwidths
            if shared is self:
                found = self._divided(inner)
            else:  # the shared view's route, at the wrapped latency
                found = with_latency(shared.first_route(src, dst), inner.latency_s)
            self._cache[key] = found
        return found

    def _divided(self, route: Route) -> Route:
        """``route`` on the divided links (its latency kept)."""
        links = self.links
        return Route(
            tuple(links[link.index] for link in route.links),
            route.latency_s,
            min((links[link.index].bandwidth_Bps for link in route.links), default=math.inf),
        )

    def route(self, src: str, dst: str, flow_key: int | str = 0) -> Route:
        """The wrapped topology's ECMP route on the divided links."""
        chosen = self._topology.route(src, dst, flow_key)
        for route in self.routes(src, dst):
            if tuple(link.index for link in route.links) == tuple(
                link.index for link in chosen.links
            ):
                return route
        return self.routes(src, dst)[0]


_SHARED_CACHE_LIMIT = 256
_shared: dict[tuple[int, int], tuple[Any, Mapping[int, float], SharedView]] = registered({})


def shared_view(view: Any, counts: Mapping[int, float]) -> SharedView:
    """The :class:`SharedView` of ``view`` with ``counts``, one per pair (so that what
    algorithms cache per topology stays valid)."""
    key = (id(view), id(counts))
    found = _shared.get(key)
    if found is not None and found[0] is view and found[1] is counts:
        return found[2]
    if len(_shared) >= _SHARED_CACHE_LIMIT:
        _shared.clear()
    made = SharedView(view, counts)
    _shared[key] = (view, counts, made)
    return made


def slice_flows(algorithm: Any, slices: Sequence[Any], topology: Topology) -> dict[int, float]:
    """Link index -> flows that ``slices`` (calls run at once by ``algorithm``) put on it
    (the sum of their :meth:`~clustersim.collectives.Algorithm.link_flows`)."""
    flows: dict[int, float] = {}
    for part in slices:
        for link, k in algorithm.link_flows(part, topology).items():
            flows[link] = flows.get(link, 0.0) + k
    return flows


def shared_divisors(
    algorithm: Any,
    part: Any,
    flows: Mapping[int, float],
    topology: Topology,
    counted: bool = True,
) -> dict[int, float]:
    """Link index -> what ``part``'s share of the link is divided by when it runs beside
    the slices whose flows are ``flows`` (:func:`slice_flows`; ``counted``: ``part``'s own
    among them): all the flows on the link over ``part``'s own.  Its cost already shares
    the link among its own flows (a double tree whose two trees leave through one NIC),
    so dividing by the flows of the others alone would count its own twice.  Links where
    ``part`` is alone are left out."""
    own = algorithm.link_flows(part, topology)
    out: dict[int, float] = {}
    for link, k in own.items():
        if k <= 0.0:
            continue
        total = flows.get(link, 0.0) + (0.0 if counted else k)
        if total > k * (1.0 + 1e-12):
            out[link] = total / k
    return out
