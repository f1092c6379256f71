"""Cluster topology: devices, switches, directed links and routes.

:func:`~clustersim.topology.build_topology` turns a validated cluster spec
(see :mod:`clustersim.scenario`) into a :class:`Topology`.  Units are SI throughout: bandwidth in bytes per second,
latency in seconds, compute in FLOP/s, memory in bytes.

Every full-duplex cable becomes two directed :class:`Link` objects named
``"a->b"`` and ``"b->a"``; switches are non-blocking, so only links have
capacity.  Routes are tuples of links.  In a two-tier cluster they are built
structurally (no graph search), so that clusters of thousands of GPUs build and
route quickly; custom topologies use breadth-first search on demand.
"""

from __future__ import annotations

import fnmatch
import math
import re
import zlib
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from clustersim.errors import Problem, ScenarioError, hinted

__all__ = ["Device", "Link", "Route", "Topology", "TopologyView"]

MAX_ROUTES = 64
"""Most equal-cost alternatives :meth:`Topology.routes` returns for a custom topology."""


@dataclass(frozen=True, slots=True)
class Link:
    """One direction of a cable.

    ``bandwidth_Bps`` is in bytes per second, ``latency_s`` in seconds;
    ``index`` is the link's position in :attr:`Topology.links`.
    """

    index: int
    name: str
    src: str
    dst: str
    bandwidth_Bps: float
    latency_s: float


@dataclass(frozen=True, slots=True)
class Device:
    """A GPU, a CPU or the checkpoint storage: where compute runs and transfers start and end.

    ``flops_per_s`` is peak FLOP/s, ``efficiency`` the achieved fraction of it,
    ``memory_bytes`` the capacity in bytes and ``memory_bandwidth_Bps`` bytes per
    second.  ``node`` ("rack0/node1") and ``rack`` ("rack0") are set in two-tier
    clusters only.
    """

    name: str
    kind: Literal["gpu", "cpu", "storage"]
    index: int
    flops_per_s: float
    efficiency: float
    memory_bytes: float
    memory_bandwidth_Bps: float
    node: str | None = None
    rack: str | None = None
    compute: Any = field(default=None, compare=False)
    """The scenario's ``compute`` spec of the device (model and kernels file), if any."""
    type: str = ""
    """What the device is: its catalog preset (``h100-sxm5-80gb``), "" when it names none."""


@dataclass(frozen=True, slots=True)
class Route:
    """A path of directed links from one device to another.

    ``latency_s`` is the sum of the link latencies (seconds) and
    ``bottleneck_Bps`` the smallest link bandwidth (bytes per second; ``inf``
    for the empty route of a device to itself).
    """

    links: tuple[Link, ...] = ()
    latency_s: float = 0.0
    bottleneck_Bps: float = math.inf

    @classmethod
    def of(cls, links: Iterable[Link]) -> Route:
        """The route along ``links``, with its latency and bottleneck computed."""
        links = tuple(links)
        if not links:
            return cls((), 0.0, math.inf)
        latency = 0.0
        bottleneck = math.inf
        for link in links:
            latency += link.latency_s
            if link.bandwidth_Bps < bottleneck:
                bottleneck = link.bandwidth_Bps
        return cls(links, latency, bottleneck)


EMPTY_ROUTE = Route()


class TopologyView:
    """A view of a topology: what a subclass does not define is the wrapped topology's.
    Subclasses override :meth:`routes` (and what else they change); ``_cache`` is theirs."""

    uniform_latency_s: float | None = None
    """Seconds of every route of this view where they all have one latency (a protocol's
    view with a send latency); None: each route's own (see :attr:`Route.latency_s`)."""

    def __init__(self, topology: Any) -> None:
        self._topology = topology
        self._cache: dict[Any, Any] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._topology, name)

    def first_route(self, src: str, dst: str) -> Route:
        """The first of this view's :meth:`routes` (views that can build it alone override
        this; one that changes routes must not inherit the wrapped topology's)."""
        return self.routes(src, dst)[0]

    def orbit_key(self, names: Sequence[str]) -> Hashable | None:
        """None: a view may change links one by one, so the wrapped topology's symmetry
        (:meth:`Topology.orbit_key`) is not known to hold in it; views that change every
        link of a kind alike say otherwise."""
        return None

    @property
    def same_links(self) -> Any:
        """The topology whose routes run over the same links, in the same ECMP choices, as
        this view's (itself: a view may reroute; views that only reprice links say their
        wrapped topology, which builds routes more cheaply)."""
        return self

    @property
    def same_latencies(self) -> Any:
        """The topology or view whose routes have this view's latencies (itself: a view may
        change anything; views that change only bandwidths say the one they wrap, whose
        routes are cheaper to find and shared by every view over it)."""
        return self

    @property
    def same_bandwidths(self) -> Any:
        """The topology or view whose routes are this view's but for their latencies: the
        same links at the same bandwidths, in the same ECMP choices (itself: a view may
        change anything; views that change only latencies say the one they share, so that
        what depends on bandwidths alone is computed once for all of them)."""
        return self


class _Router(Protocol):
    def routes(self, src: Device, dst: Device) -> tuple[Route, ...]:
        """Equal-cost routes from ``src`` to ``dst`` (distinct devices); () if none."""
        ...


class Topology:
    """Devices, switches and directed links of a cluster, with routing.

    Built by :func:`build_topology`.  ``devices`` is in build order and
    ``Device.index`` is the position in it; ``links[i].index == i``;
    ``switches`` names the switches and NICs.
    """

    __slots__ = (
        "kind",
        "devices",
        "links",
        "switches",
        "spine_routing",
        "racks",
        "nodes",
        "nvlink_generation",
        "reductions",
        "reduction_shares",
        "nic_transport",
        "nic_plugin_latency_s",
        "_router",
        "_cache",
        "_device_list",
        "_part",
        "_first",
        "_ecmp",
    )

    def __init__(
        self,
        kind: str,
        devices: dict[str, Device],
        links: list[Link],
        switches: list[str],
        router: _Router,
        *,
        spine_routing: Literal["ecmp", "split"] = "ecmp",
        racks: int = 0,
        nodes: int = 0,
        nvlink_generation: int | None = None,
        reductions: Mapping[str, float] | None = None,
        reduction_shares: Mapping[str, float] | None = None,
        nic_transport: str = "rdma",
        nic_plugin_latency_s: float = 0.0,
    ) -> None:
        self.kind = kind
        self.devices = devices
        self.links = links
        self.switches = switches
        self.spine_routing = spine_routing
        self.racks = racks
        """Number of racks (two-tier only, else 0)."""
        self.nodes = nodes
        """Number of nodes (two-tier only, else 0)."""
        self.nvlink_generation = nvlink_generation
        """NVLink generation of the nodes (``cluster.node.nvlink``), None if unknown or none."""
        self.reductions: Mapping[str, float] = reductions or {}
        """Switches that reduce (NVLink SHARP): name -> all-reduce throughput per GPU, B/s."""
        self.reduction_shares: Mapping[str, float] = reduction_shares or {}
        """Network switches that reduce (InfiniBand SHARP): name -> share of each port's line
        rate at which it reduces what arrives over that port."""
        self.nic_transport = nic_transport
        """The nodes' NIC transport (``cluster.node.nic.transport``): ``rdma`` or ``tcp``; a
        TCP NIC's links carry TCP's share of the line rate already."""
        self.nic_plugin_latency_s = nic_plugin_latency_s
        """Seconds NCCL's network plugin reports for the nodes' NICs
        (``cluster.node.nic.plugin_latency``): added to every network step NCCL's latency
        model prices (:mod:`clustersim.collectives.ring_latency`)."""
        self._router = router
        self._cache: dict[tuple[str, str], tuple[Route, ...]] = {}
        self._device_list = list(devices.values())
        self._part = False  # a restricted view: groups of the whole cluster are not its own
        self._first: dict[tuple[str, str], Route] = {}
        self._ecmp: dict[tuple[str, str, int | str], Route] = {}

    def __repr__(self) -> str:
        return (
            f"Topology(kind={self.kind!r}, devices={len(self.devices)}, "
            f"switches={len(self.switches)}, links={len(self.links)})"
        )

    def restricted(self, names: Iterable[str]) -> Topology:
        """A view of this cluster holding only the devices ``names`` (kept in build order,
        each with its index in the whole cluster): the same links, switches and routes
        (the route cache shared), so a workload given the view places its ranks only on
        those devices while its flows cross the links every other workload uses."""
        keep = set(names)
        devices = {name: d for name, d in self.devices.items() if name in keep}
        view = Topology(
            self.kind,
            devices,
            self.links,
            self.switches,
            self._router,
            spine_routing=self.spine_routing,
            racks=self.racks,
            nodes=self.nodes,
            nvlink_generation=self.nvlink_generation,
            reductions=self.reductions,
            reduction_shares=self.reduction_shares,
            nic_transport=self.nic_transport,
            nic_plugin_latency_s=self.nic_plugin_latency_s,
        )
        view._cache = self._cache
        view._first = self._first
        view._ecmp = self._ecmp
        view._part = True
        return view

    # -- lookup -------------------------------------------------------------

    def device(self, name: str, path: str = "") -> Device:
        """The device called ``name`` (its full path name).

        Raises ScenarioError at key path ``path`` with a did-you-mean hint when
        there is no such device.
        """
        try:
            return self.devices[name]
        except (KeyError, TypeError):
            pass
        example = self._device_list[0].name if self._device_list else "gpu0"
        raise ScenarioError(
            Problem(
                path,
                hinted(f"unknown device {name!r}", str(name), self.devices),
                allowed=f"full device paths such as {example}",
            )
        )

    def select(self, glob: str, path: str = "") -> list[Device]:
        """Devices whose full name matches ``glob``, in build order.

        fnmatch semantics, case-sensitive; ``*`` also crosses ``/`` so
        ``rack0/*/gpu*`` and ``*/cpu`` work.  Raises ScenarioError at ``path``
        when nothing matches.
        """
        match = _compile_glob(glob, path)
        found = [d for d in self._device_list if match(d.name)]
        if not found:
            example = self._device_list[0].name if self._device_list else "gpu0"
            raise ScenarioError(
                Problem(
                    path,
                    hinted(f"no device matches {glob!r}", glob, self.devices)
                    if _is_plain(glob)
                    else f"no device matches {glob!r}",
                    allowed=f"globs over full device names, e.g. {example}, * or */gpu*",
                )
            )
        return found

    def select_links(self, glob: str, path: str = "") -> list[Link]:
        """Links whose name (``"src->dst"``) matches ``glob``, in index order.

        Same semantics as :meth:`select`; raises ScenarioError at ``path`` when
        nothing matches.
        """
        match = _compile_glob(glob, path)
        found = [link for link in self.links if match(link.name)]
        if not found:
            example = self.links[0].name if self.links else "a->b"
            raise ScenarioError(
                Problem(
                    path,
                    f"no link matches {glob!r}",
                    allowed=f"globs over link names 'src->dst', e.g. {example} or *->*tor",
                )
            )
        return found

    def links_touching(self, name: str, path: str = "") -> list[Link]:
        """Links from or to ``name`` -- a device, a switch or a NIC (``spine0``,
        ``rack0/node1/nic``) -- or from or to anything under it (``rack0/node1``: its GPUs,
        CPU, PCIe switch and NIC), in index order.  What failing that element cuts off.

        Raises ScenarioError at ``path`` when no link touches it.
        """
        under = f"{name}/"

        def touches(end: str) -> bool:
            return end == name or end.startswith(under)

        found = [link for link in self.links if touches(link.src) or touches(link.dst)]
        if not found:
            names = dict.fromkeys([*self.devices, *self.switches])
            raise ScenarioError(
                Problem(
                    path,
                    hinted(f"no link touches {name!r}", name, names),
                    allowed="a device, switch or NIC name, or a node or rack (rack0/node1)",
                )
            )
        return found

    # -- routing ------------------------------------------------------------

    def routes(self, src: str, dst: str) -> tuple[Route, ...]:
        """All equal-cost routes from device ``src`` to device ``dst``.

        Cached per pair.  ``src == dst`` gives ``(empty route,)``; unknown
        devices or unconnected pairs raise ScenarioError.
        """
        key = (src, dst)
        found = self._cache.get(key)
        if found is not None:
            return found
        a = self.device(src)
        b = self.device(dst)
        found = (EMPTY_ROUTE,) if a is b else self._router.routes(a, b)
        if not found:
            raise ScenarioError(Problem("", f"no route from {src} to {dst}"))
        self._cache[key] = found
        return found

    def first_route(self, src: str, dst: str) -> Route:
        """``routes(src, dst)[0]``, built alone where the router can (a pair across pods
        has spines x cores routes; pricing a ring needs only its first)."""
        found = self._cache.get((src, dst))
        if found is not None:
            return found[0]
        key = (src, dst)
        route = self._first.get(key)
        if route is None:
            first = getattr(self._router, "first_route", None)
            if first is None or src == dst:
                route = self.routes(src, dst)[0]
            else:
                route = first(self.device(src), self.device(dst))
            self._first[key] = route
        return route

    def route(self, src: str, dst: str, flow_key: int | str = 0) -> Route:
        """One route from ``src`` to ``dst``, chosen among :meth:`routes` by ECMP.

        The choice is a CRC-32 of ``"src|dst|flow_key"``: stable across runs and
        machines, and spread evenly over the alternatives for varying keys.
        """
        found = self._cache.get((src, dst))
        pick = getattr(self._router, "ecmp_route", None)
        if found is None and pick is not None and src != dst:
            # The router builds the chosen route alone (a pair across pods has spines x
            # cores of them); remembered per pair and key, so a flow's route is one object.
            key = (src, dst, flow_key)
            route = self._ecmp.get(key)
            if route is None:
                if len(self._ecmp) >= _ECMP_CACHE_LIMIT:
                    self._ecmp.clear()
                route = self._ecmp[key] = pick(
                    self.device(src), self.device(dst), lambda n: _ecmp_index(src, dst, flow_key, n)
                )
            return route
        found = self.routes(src, dst)
        if len(found) == 1:
            return found[0]
        return found[_ecmp_index(src, dst, flow_key, len(found))]

    def route_links(self, src: str, dst: str, flow_key: int | str = 0) -> tuple[Link, ...]:
        """The links of :meth:`route`, the route not remembered when it was not already (a
        pricing pass over every channel's route of a large ring need not keep them all)."""
        found = self._ecmp.get((src, dst, flow_key))
        if found is not None:
            return found.links
        spread = getattr(self._router, "ecmp_spread", None)
        if spread is None or src == dst or (src, dst) in self._cache:
            return self.route(src, dst, flow_key).links
        pick = lambda n: _ecmp_index(src, dst, flow_key, n)  # noqa: E731
        found = spread(src, dst, (pick,))
        if found is None:  # routed as ever, the route not kept
            return self._router.ecmp_route(self.device(src), self.device(dst), pick).links  # type: ignore[no-any-return]
        up, down, (between,) = found
        return (*up, *between, *down)

    def ecmp_spread(
        self, src: str, dst: str, flow_keys: Sequence[int | str]
    ) -> tuple[tuple[Link, ...], list[tuple[Link, ...]]] | None:
        """The routes of :meth:`route` for each of ``flow_keys`` as the links all of them
        take and, per key, the rest -- from routers that can say without making the routes
        (tiered fabrics, pairs across the spines); None otherwise."""
        spread = getattr(self._router, "ecmp_spread", None)
        if spread is None or src == dst:
            return None
        picks = [lambda n, key=key: _ecmp_index(src, dst, key, n) for key in flow_keys]
        found = spread(src, dst, picks)
        if found is None:
            return None
        up, down, between = found
        return (*up, *down), between

    @property
    def same_links(self) -> Topology:
        """Itself (see :attr:`TopologyView.same_links`)."""
        return self

    @property
    def same_bandwidths(self) -> Topology:
        """Itself (see :attr:`TopologyView.same_bandwidths`)."""
        return self

    def orbit_key(self, names: Sequence[str]) -> Hashable | None:
        """A key equal for groups of devices that sit alike in this cluster, so that what is
        priced on their routes is the same (:mod:`clustersim.topology.symmetry`); None
        where the cluster cannot say (flat and custom clusters)."""
        key = getattr(self._router, "orbit_key", None)
        return None if key is None or self._part else key(names)

    def canonical(self, key: Hashable) -> list[str]:
        """The first group (device names) of the orbit :meth:`orbit_key` gave ``key``: the
        one priced for all groups alike."""
        return self._router.canonical(key)  # type: ignore[attr-defined]

    def nic_of(self, name: str) -> int | None:
        """Index, within its node, of the NIC device ``name`` reaches the network through (the
        NIC on its PCIe switch: its rail); None where the cluster has no NICs (flat and
        custom clusters)."""
        nic = getattr(self._router, "nic_of", None)
        return None if nic is None else nic(name)

    # -- summary ------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        """Counts for humans (CLI): kind, racks, nodes, gpus, cpus, devices, switches, links;
        and ``gpu_types`` (GPUs per type, in device order) when the GPUs are of several types."""
        gpus = sum(1 for d in self._device_list if d.kind == "gpu")
        out: dict[str, Any] = {
            "kind": self.kind,
            "racks": self.racks,
            "nodes": self.nodes,
            "gpus": gpus,
            "cpus": len(self._device_list) - gpus,
            "devices": len(self._device_list),
            "switches": len(self.switches),
            "links": len(self.links),
        }
        types = self.gpu_types()
        if len(types) > 1:
            out["gpu_types"] = types
        return out

    def gpu_types(self) -> dict[str, int]:
        """GPUs per :attr:`Device.type` ("" for GPUs naming no preset), in device order."""
        types: dict[str, int] = {}
        for device in self._device_list:
            if device.kind == "gpu":
                types[device.type] = types.get(device.type, 0) + 1
        return types


def gpu_mix(types: Mapping[str, int]) -> str:
    """GPUs per type (:meth:`Topology.gpu_types`) in words: ``32 x a100-sxm4-80gb + 16 x
    h100-sxm5-80gb`` (``unnamed`` for GPUs naming no preset)."""
    return " + ".join(f"{count} x {name or 'unnamed'}" for name, count in types.items())


_ECMP_CACHE_LIMIT = 1 << 20
"""(pair, flow key) routes :meth:`Topology.route` remembers (then it starts afresh)."""


def _ecmp_index(src: str, dst: str, flow_key: int | str, count: int) -> int:
    """Which of a pair's ``count`` equal-cost routes ECMP gives ``flow_key``: a CRC-32 of
    ``"src|dst|flow_key"`` (stable across runs and machines, even over varying keys)."""
    return zlib.crc32(f"{src}|{dst}|{flow_key}".encode()) % count if count > 1 else 0


def _compile_glob(glob: str, path: str) -> Any:
    """The matcher of ``glob``; a ScenarioError at ``path`` if it cannot be compiled."""
    try:
        return re.compile(fnmatch.translate(glob), re.DOTALL).match
    except (re.error, RecursionError, OverflowError) as exc:
        message = f"cannot read the pattern {glob[:60]!r}: {exc}"
        raise ScenarioError(Problem(path, message, "shell-style globs: * ? [seq] [!seq]")) from None


def _is_plain(glob: str) -> bool:
    return not any(ch in glob for ch in "*?[")
