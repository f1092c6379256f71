"""Cluster topology: devices, switches, directed links and routes.

:func:`build_topology` turns a validated cluster spec (see ``scenario.py``) into a
:class:`Topology`.  Units are SI throughout: bandwidth in bytes per second,
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
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from clustersim.errors import Problem, ScenarioError, hinted

__all__ = ["Device", "Link", "Route", "Topology", "build_topology"]

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
    """A GPU or CPU: where compute runs and where transfers start and end.

    ``flops_per_s`` is peak FLOP/s, ``efficiency`` the achieved fraction of it,
    ``memory_bytes`` the capacity in bytes and ``memory_bandwidth_Bps`` bytes per
    second.  ``node`` ("rack0/node1") and ``rack`` ("rack0") are set in two-tier
    clusters only.
    """

    name: str
    kind: Literal["gpu", "cpu"]
    index: int
    flops_per_s: float
    efficiency: float
    memory_bytes: float
    memory_bandwidth_Bps: float
    node: str | None = None
    rack: str | None = None


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

# Frozen dataclasses set each field through object.__setattr__, which doubles the
# cost of building a million links (a fully connected 1,024-device cluster).  The
# slot descriptors give the same object at half the cost.
_new_object = object.__new__
_set_index = Link.index.__set__  # type: ignore[attr-defined]
_set_name = Link.name.__set__  # type: ignore[attr-defined]
_set_src = Link.src.__set__  # type: ignore[attr-defined]
_set_dst = Link.dst.__set__  # type: ignore[attr-defined]
_set_bandwidth = Link.bandwidth_Bps.__set__  # type: ignore[attr-defined]
_set_latency = Link.latency_s.__set__  # type: ignore[attr-defined]


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
        "_router",
        "_cache",
        "_device_list",
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
        self._router = router
        self._cache: dict[tuple[str, str], tuple[Route, ...]] = {}
        self._device_list = list(devices.values())

    def __repr__(self) -> str:
        return (
            f"Topology(kind={self.kind!r}, devices={len(self.devices)}, "
            f"switches={len(self.switches)}, links={len(self.links)})"
        )

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
        match = _compile_glob(glob)
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
        match = _compile_glob(glob)
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

    def route(self, src: str, dst: str, flow_key: int | str = 0) -> Route:
        """One route from ``src`` to ``dst``, chosen among :meth:`routes` by ECMP.

        The choice is a CRC-32 of ``"src|dst|flow_key"``: stable across runs and
        machines, and spread evenly over the alternatives for varying keys.
        """
        found = self.routes(src, dst)
        if len(found) == 1:
            return found[0]
        return found[zlib.crc32(f"{src}|{dst}|{flow_key}".encode()) % len(found)]

    # -- summary ------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        """Counts for humans (CLI): kind, racks, nodes, gpus, cpus, devices, switches, links."""
        gpus = sum(1 for d in self._device_list if d.kind == "gpu")
        return {
            "kind": self.kind,
            "racks": self.racks,
            "nodes": self.nodes,
            "gpus": gpus,
            "cpus": len(self._device_list) - gpus,
            "devices": len(self._device_list),
            "switches": len(self.switches),
            "links": len(self.links),
        }


def _compile_glob(glob: str) -> Any:
    return re.compile(fnmatch.translate(glob), re.DOTALL).match


def _is_plain(glob: str) -> bool:
    return not any(ch in glob for ch in "*?[")


# -- building -----------------------------------------------------------------


class _Builder:
    """Collects devices, switches and links in build order."""

    __slots__ = ("devices", "switches", "links")

    def __init__(self) -> None:
        self.devices: dict[str, Device] = {}
        self.switches: list[str] = []
        self.links: list[Link] = []

    def device(
        self,
        name: str,
        kind: Literal["gpu", "cpu"],
        spec: Any,
        node: str | None = None,
        rack: str | None = None,
    ) -> str:
        """Add a device with the compute/memory fields of ``spec``; returns its name."""
        self.devices[name] = Device(
            name=name,
            kind=kind,
            index=len(self.devices),
            flops_per_s=float(spec.flops_per_s),
            efficiency=float(spec.efficiency),
            memory_bytes=float(spec.memory_bytes),
            memory_bandwidth_Bps=float(spec.memory_bandwidth_Bps),
            node=node,
            rack=rack,
        )
        return name

    def switch(self, name: str) -> str:
        self.switches.append(name)
        return name

    def link(self, src: str, dst: str, bandwidth_Bps: float, latency_s: float) -> Link:
        """Append the directed link ``src->dst`` (bytes/s, seconds)."""
        link = _new_object(Link)
        _set_index(link, len(self.links))
        _set_name(link, f"{src}->{dst}")
        _set_src(link, src)
        _set_dst(link, dst)
        _set_bandwidth(link, bandwidth_Bps)
        _set_latency(link, latency_s)
        self.links.append(link)
        return link

    def cable(self, a: str, b: str, bandwidth_Bps: float, latency_s: float) -> tuple[Link, Link]:
        """A full-duplex cable: links ``a->b`` and ``b->a``, in that order."""
        return (
            self.link(a, b, bandwidth_Bps, latency_s),
            self.link(b, a, bandwidth_Bps, latency_s),
        )


def build_topology(cluster_spec: Any) -> Topology:
    """The topology of a validated cluster spec (``Scenario.cluster``).

    Raises ScenarioError (key paths under ``cluster.``) for what the spec's
    schema cannot check alone: NVLink pairs out of range, duplicate names or
    unknown link endpoints in custom clusters.
    """
    kind = getattr(cluster_spec, "kind", "two_tier")
    if kind == "two_tier":
        return _build_two_tier(cluster_spec)
    if kind == "three_tier":
        return _build_three_tier(cluster_spec)
    if kind == "rail_optimized":
        return _build_rail_optimized(cluster_spec)
    if kind == "switch":
        return _build_switch(cluster_spec)
    if kind == "ring":
        return _build_ring(cluster_spec)
    if kind == "fully_connected":
        return _build_fully_connected(cluster_spec)
    if kind == "custom":
        return _build_custom(cluster_spec)
    raise ScenarioError(
        Problem(
            "cluster.kind",
            f"unknown cluster kind {kind!r}",
            allowed="two_tier, three_tier, rail_optimized, switch, ring, fully_connected, custom",
        )
    )


# -- two-tier -----------------------------------------------------------------


@dataclass(slots=True)
class _Place:
    """Where a two-tier device sits and the links that leave and reach it."""

    rack: int
    node: str
    to_pcie: Link
    from_pcie: Link
    to_nvswitch: Link | None
    from_nvswitch: Link | None
    up: tuple[Link, ...]  # device -> pcie -> nic -> tor
    down: tuple[Link, ...]  # tor -> nic -> pcie -> device
    switch: str = ""
    """The PCIe switch the device hangs off (several per node with ``nics > 1``)."""
    to_root: tuple[Link, ...] = ()
    """Its switch -> the node's PCIe root (empty when the device sits on the root)."""
    from_root: tuple[Link, ...] = ()
    nvdomain: str = ""
    """The NVSwitch fabric its NVLink port reaches ("" without NVSwitch)."""
    nic: int = 0
    """Index of the NIC it reaches the network through (its rail)."""


class _TwoTierRouter:
    """Routes of two- and three-tier clusters (``pod_of`` set: pods joined by cores)."""

    __slots__ = (
        "places",
        "pair_links",
        "tor_up",
        "tor_down",
        "pod_of",
        "pod_up",
        "pod_down",
        "rails",
        "node_gpus",
    )

    def __init__(self) -> None:
        self.places: dict[str, _Place] = {}
        self.pair_links: dict[tuple[str, str], Link] = {}
        self.tor_up: list[list[Link]] = []  # [rack][spine]: tor -> spine
        self.tor_down: list[list[Link]] = []  # [rack][spine]: spine -> tor
        self.pod_of: list[int] | None = None  # [rack]: its pod (three-tier)
        self.pod_up: list[list[list[Link]]] = []  # [pod][spine][core]: spine -> core
        self.pod_down: list[list[list[Link]]] = []  # [pod][spine][core]: core -> spine
        self.rails = False  # rail-optimized: tor_up/tor_down are [group * nics + rail][spine]
        self.node_gpus: dict[str, list[str]] = {}  # node -> its GPUs, by index

    def routes(self, src: Device, dst: Device) -> tuple[Route, ...]:
        a = self.places[src.name]
        b = self.places[dst.name]
        if a.node == b.node:
            if a.to_nvswitch is not None and b.from_nvswitch is not None:
                return (Route.of((a.to_nvswitch, b.from_nvswitch)),)
            direct = self.pair_links.get((src.name, dst.name))
            if direct is not None:
                return (Route.of((direct,)),)
            if a.switch != b.switch:  # across the node's PCIe root
                return (Route.of((a.to_pcie, *a.to_root, *b.from_root, b.from_pcie)),)
            return (Route.of((a.to_pcie, b.from_pcie)),)
        if a.nvdomain and a.nvdomain == b.nvdomain:  # nodes of one NVLink domain
            if a.to_nvswitch is not None and b.from_nvswitch is not None:
                return (Route.of((a.to_nvswitch, b.from_nvswitch)),)
        if self.rails:
            return self._rail_routes(a, b)
        if a.rack == b.rack:
            return (Route.of(a.up + b.down),)
        ups = self.tor_up[a.rack]
        downs = self.tor_down[b.rack]
        pods = self.pod_of
        if pods is None or pods[a.rack] == pods[b.rack]:
            return tuple(
                Route.of((*a.up, up, down, *b.down)) for up, down in zip(ups, downs, strict=True)
            )
        to_core = self.pod_up[pods[a.rack]]
        from_core = self.pod_down[pods[b.rack]]
        return tuple(
            Route.of((*a.up, ups[k], to_core[k][m], from_core[k][m], downs[k], *b.down))
            for k in range(len(ups))
            for m in range(len(to_core[k]))
        )

    def _rail_routes(self, a: _Place, b: _Place) -> tuple[Route, ...]:
        """Rail-optimized: to the destination's rail first -- over NVLink to the GPU of that
        rail on the source node (PXN) when there is an NVSwitch -- then through that rail's
        switch, and through the spines between groups or rails."""
        prefix: tuple[Link, ...] = ()
        start = a
        if a.nic != b.nic and a.to_nvswitch is not None:
            relay = self.places[self.node_gpus[a.node][b.nic]]
            if relay.from_nvswitch is not None:
                prefix, start = (a.to_nvswitch, relay.from_nvswitch), relay
        if start.rack == b.rack and start.nic == b.nic:
            return (Route.of((*prefix, *start.up, *b.down)),)
        ups = self.tor_up[start.rack * self._nics + start.nic]
        downs = self.tor_down[b.rack * self._nics + b.nic]
        return tuple(
            Route.of((*prefix, *start.up, up, down, *b.down))
            for up, down in zip(ups, downs, strict=True)
        )

    @property
    def _nics(self) -> int:
        return len(next(iter(self.node_gpus.values()), [])) or 1


def rack_uplink_Bps(cluster_spec: Any) -> float:
    """Total uplink bandwidth of one rack in bytes/s.

    ``rack_uplink.bandwidth_Bps`` when given, else nodes_per_rack x NIC
    bandwidth / oversubscription.
    """
    uplink = cluster_spec.rack_uplink
    if uplink.bandwidth_Bps is not None:
        return float(uplink.bandwidth_Bps)
    ratio = uplink.oversubscription if uplink.oversubscription is not None else 1.0
    nics = int(getattr(cluster_spec.node, "nics", 1))
    return cluster_spec.nodes_per_rack * nics * float(cluster_spec.node.nic.bandwidth_Bps) / ratio


def _build_two_tier(spec: Any) -> Topology:
    """Racks ``rack{r}`` under spines ``spine{k}``."""
    racks = int(spec.racks)
    b, router = _build_racks(spec, [f"rack{r}" for r in range(racks)])
    spines = int(spec.spines) if racks > 1 else 0
    if spines:
        share = rack_uplink_Bps(spec) / spines
        latency = float(spec.rack_uplink.latency_s)
        spine_names = [f"spine{k}" for k in range(spines)]
        for r in range(racks):
            ups: list[Link] = []
            downs: list[Link] = []
            for spine in spine_names:
                up, down = b.cable(f"rack{r}/tor", spine, share, latency)
                ups.append(up)
                downs.append(down)
            router.tor_up.append(ups)
            router.tor_down.append(downs)
        for spine in spine_names:
            b.switch(spine)
    return _tiered("two_tier", b, router, spec, racks, int(spec.nodes_per_rack))


def _tiered(
    kind: str, b: _Builder, router: _TwoTierRouter, spec: Any, racks: int, nodes_per_rack: int
) -> Topology:
    """The topology of a racked cluster built by :func:`_build_racks` and its upper tiers."""
    return Topology(
        kind,
        b.devices,
        b.links,
        b.switches,
        router,
        spine_routing=spec.spine_routing,
        racks=racks,
        nodes=racks * nodes_per_rack,
    )


def _build_rail_optimized(spec: Any) -> Topology:
    """Rail groups ``group{g}``: NIC j of each of the group's nodes on rail switch
    ``group{g}/rail{j}``, every rail switch linked to every spine ``spine{k}``."""
    groups, nodes = int(spec.groups), int(spec.nodes_per_group)
    names = [f"group{g}" for g in range(groups)]
    b, router = _build_racks(spec, names, nodes_per_rack=nodes, rails=True)
    router.rails = True
    nics = int(spec.node.nics)
    spines = int(spec.spines)
    uplink = spec.rail_uplink
    if uplink.bandwidth_Bps is not None:
        total = float(uplink.bandwidth_Bps)
    else:
        total = nodes * float(spec.node.nic.bandwidth_Bps) / float(uplink.oversubscription)
    latency = float(uplink.latency_s)
    for group in names:
        for j in range(nics):
            spine_names = [f"spine{k}" for k in range(spines)]
            ups, downs = _uplinks(b, f"{group}/rail{j}", spine_names, total / spines, latency)
            router.tor_up.append(ups)
            router.tor_down.append(downs)
    for k in range(spines):
        b.switch(f"spine{k}")
    return _tiered("rail_optimized", b, router, spec, groups, nodes)


def _build_three_tier(spec: Any) -> Topology:
    """Pods ``pod{p}`` of racks ``pod{p}/rack{i}`` under the pod's spines ``pod{p}/spine{k}``;
    spine k of every pod joined to every core switch ``core{m}`` (spine planes)."""
    pods, per_pod = int(spec.pods), int(spec.racks_per_pod)
    names = [f"pod{p}/rack{i}" for p in range(pods) for i in range(per_pod)]
    b, router = _build_racks(spec, names)
    spines = int(spec.spines) if pods * per_pod > 1 else 0
    cores = int(spec.cores) if pods > 1 else 0
    rack_Bps = rack_uplink_Bps(spec)
    latency = float(spec.rack_uplink.latency_s)
    router.pod_of = [r // per_pod for r in range(len(names))]
    for r, rack in enumerate(names):
        pod = r // per_pod
        ups, downs = [], []
        for k in range(spines):
            up, down = b.cable(f"{rack}/tor", f"pod{pod}/spine{k}", rack_Bps / spines, latency)
            ups.append(up)
            downs.append(down)
        router.tor_up.append(ups)
        router.tor_down.append(downs)
    pod_Bps = pod_uplink_Bps(spec)
    pod_latency = float(spec.pod_uplink.latency_s)
    for pod in range(pods):
        ups_k, downs_k = [], []
        for k in range(spines):
            spine = b.switch(f"pod{pod}/spine{k}")
            core_names = [f"core{m}" for m in range(cores)]
            share = pod_Bps / (spines * cores) if cores else 0.0
            ups, downs = _uplinks(b, spine, core_names, share, pod_latency)
            ups_k.append(ups)
            downs_k.append(downs)
        router.pod_up.append(ups_k)
        router.pod_down.append(downs_k)
    for m in range(cores):
        b.switch(f"core{m}")
    return _tiered("three_tier", b, router, spec, len(names), int(spec.nodes_per_rack))


def _uplinks(
    b: _Builder, switch: str, uppers: list[str], bandwidth_Bps: float, latency_s: float
) -> tuple[list[Link], list[Link]]:
    """Cables from ``switch`` to each of ``uppers``: (the up links, the down links)."""
    pairs = [b.cable(switch, upper, bandwidth_Bps, latency_s) for upper in uppers]
    return [up for up, _ in pairs], [down for _, down in pairs]


def pod_uplink_Bps(cluster_spec: Any) -> float:
    """Total bandwidth from one pod's spines to the cores in bytes/s:
    ``pod_uplink.bandwidth_Bps``, else racks_per_pod x rack uplink / oversubscription."""
    uplink = cluster_spec.pod_uplink
    if uplink.bandwidth_Bps is not None:
        return float(uplink.bandwidth_Bps)
    ratio = uplink.oversubscription if uplink.oversubscription is not None else 1.0
    return cluster_spec.racks_per_pod * rack_uplink_Bps(cluster_spec) / ratio


def _nvlink_domain(node_spec: Any, nodes_per_rack: int) -> int:
    """Nodes per NVLink domain (``node.nvlink_domain``), checked against the rack."""
    domain = int(getattr(node_spec, "nvlink_domain", 1))
    if domain == 1:
        return 1
    path = "cluster.node.nvlink_domain"
    if node_spec.nvlink is None or node_spec.nvlink.pairs is not None:
        raise ScenarioError(
            Problem(path, "an NVLink domain needs nvlink with an NVSwitch (no pairs)")
        )
    if nodes_per_rack % domain:
        raise ScenarioError(
            Problem(
                path,
                f"{domain} nodes per domain do not divide nodes_per_rack {nodes_per_rack}",
                "a divisor of nodes_per_rack",
            )
        )
    return domain


def _build_racks(
    spec: Any, rack_names: list[str], nodes_per_rack: int = 0, rails: bool = False
) -> tuple[_Builder, _TwoTierRouter]:
    """The nodes of every rack (named ``rack_names``) under their top-of-rack switches;
    with ``rails``, NIC j of every node of a group under the group's rail switch j."""
    node_spec = spec.node
    gpus = int(node_spec.gpus)
    pcie_bw, pcie_lat = float(node_spec.pcie.bandwidth_Bps), float(node_spec.pcie.latency_s)
    nic_bw, nic_lat = float(node_spec.nic.bandwidth_Bps), float(node_spec.nic.latency_s)
    nvlink = node_spec.nvlink
    nvswitch = nvlink is not None and nvlink.pairs is None
    pairs = (
        [(int(x), int(y)) for x, y in nvlink.pairs] if nvlink is not None and not nvswitch else []
    )
    nv_bw = float(nvlink.bandwidth_Bps) if nvlink is not None else 0.0
    nv_lat = float(nvlink.latency_s) if nvlink is not None else 0.0
    nodes_per_rack = nodes_per_rack or int(spec.nodes_per_rack)
    nics = int(getattr(node_spec, "nics", 1))
    domain = _nvlink_domain(node_spec, nodes_per_rack)

    b = _Builder()
    router = _TwoTierRouter()
    places = router.places
    for r, rack in enumerate(rack_names):
        if rails:
            edge = [b.switch(f"{rack}/rail{j}") for j in range(nics)]
        else:
            edge = [b.switch(f"{rack}/tor")] * nics
        for n in range(nodes_per_rack):
            node = f"{rack}/node{n}"
            gpu_names = [
                b.device(f"{node}/gpu{g}", "gpu", node_spec.gpu, node, rack) for g in range(gpus)
            ]
            cpu = b.device(f"{node}/cpu", "cpu", node_spec.cpu, node, rack)
            one = nics == 1
            pcies = [b.switch(f"{node}/pcie" if one else f"{node}/pcie{j}") for j in range(nics)]
            if not nvswitch:
                nvs = ""
            elif domain == 1:
                nvs = b.switch(f"{node}/nvswitch")
            elif n % domain == 0:
                nvs = b.switch(f"{rack}/nvdomain{n // domain}")
            nic_names = [b.switch(f"{node}/nic" if one else f"{node}/nic{j}") for j in range(nics)]
            root = pcies[0] if one else b.switch(f"{node}/root")
            homes = [pcies[g * nics // gpus] for g in range(gpus)] + [root]
            attached = [
                (name, home, *b.cable(name, home, pcie_bw, pcie_lat))
                for name, home in zip([*gpu_names, cpu], homes, strict=True)
            ]
            up: dict[str, tuple[Link, ...]] = {}  # switch -> ... -> tor
            down: dict[str, tuple[Link, ...]] = {}
            to_root: dict[str, tuple[Link, ...]] = {root: ()}
            from_root: dict[str, tuple[Link, ...]] = {root: ()}
            for pcie, nic, tor in zip(pcies, nic_names, edge, strict=True):
                nic_to_pcie, pcie_to_nic = b.cable(nic, pcie, pcie_bw, pcie_lat)
                to_tor, from_tor = b.cable(nic, tor, nic_bw, nic_lat)
                up[pcie], down[pcie] = (pcie_to_nic, to_tor), (from_tor, nic_to_pcie)
                if not one:
                    there, back = b.cable(pcie, root, pcie_bw, pcie_lat)
                    to_root[pcie], from_root[pcie] = (there,), (back,)
            if not one:  # the CPU on the root reaches the network through NIC 0
                up[root] = (*from_root[pcies[0]], *up[pcies[0]])
                down[root] = (*down[pcies[0]], *to_root[pcies[0]])
            nv_links: dict[str, tuple[Link, Link]] = {}
            if nvswitch:
                for name in gpu_names:
                    nv_links[name] = b.cable(name, nvs, nv_bw, nv_lat)
            for ga, gb in pairs:
                there, back = b.cable(gpu_names[ga], gpu_names[gb], nv_bw, nv_lat)
                router.pair_links[(there.src, there.dst)] = there
                router.pair_links[(back.src, back.dst)] = back
            for name, home, to_pcie, from_pcie in attached:
                nv = nv_links.get(name)
                places[name] = _Place(
                    rack=r,
                    node=node,
                    to_pcie=to_pcie,
                    from_pcie=from_pcie,
                    to_nvswitch=nv[0] if nv else None,
                    from_nvswitch=nv[1] if nv else None,
                    up=(to_pcie, *up[home]),
                    down=(*down[home], from_pcie),
                    switch=home,
                    to_root=to_root[home],
                    from_root=from_root[home],
                    nvdomain=nvs if name in nv_links else "",
                    nic=pcies.index(home) if home in pcies else 0,
                )
            router.node_gpus[node] = gpu_names
    return b, router


# -- flat kinds ---------------------------------------------------------------


def _flat_devices(b: _Builder, spec: Any) -> list[str]:
    kind = spec.device_kind
    return [b.device(f"{kind}{i}", kind, spec.device) for i in range(int(spec.devices))]


class _SwitchRouter:
    __slots__ = ("up", "down")

    def __init__(self, up: list[Link], down: list[Link]) -> None:
        self.up = up  # [device index]: device -> switch
        self.down = down  # [device index]: switch -> device

    def routes(self, src: Device, dst: Device) -> tuple[Route, ...]:
        return (Route.of((self.up[src.index], self.down[dst.index])),)


def _build_switch(spec: Any) -> Topology:
    b = _Builder()
    names = _flat_devices(b, spec)
    switch = b.switch("switch")
    bw, lat = float(spec.link.bandwidth_Bps), float(spec.link.latency_s)
    up: list[Link] = []
    down: list[Link] = []
    for name in names:
        there, back = b.cable(name, switch, bw, lat)
        up.append(there)
        down.append(back)
    return Topology("switch", b.devices, b.links, b.switches, _SwitchRouter(up, down))


class _RingRouter:
    __slots__ = ("forward", "backward")

    def __init__(self, forward: list[Link], backward: list[Link] | None) -> None:
        self.forward = forward  # [i]: link i -> i+1 (mod n)
        self.backward = backward  # [i]: link i -> i-1 (mod n); None if unidirectional

    def routes(self, src: Device, dst: Device) -> tuple[Route, ...]:
        n = len(self.forward)
        i, j = src.index, dst.index
        ahead = (j - i) % n
        behind = n - ahead
        found: list[Route] = []
        if self.backward is None or ahead <= behind:
            found.append(Route.of(self.forward[(i + k) % n] for k in range(ahead)))
        if self.backward is not None and behind <= ahead:
            back = Route.of(self.backward[(i - k) % n] for k in range(behind))
            if not found or found[0].links != back.links:  # n == 2: the same single cable
                found.append(back)
        return tuple(found)


def _build_ring(spec: Any) -> Topology:
    b = _Builder()
    names = _flat_devices(b, spec)
    n = len(names)
    bw, lat = float(spec.link.bandwidth_Bps), float(spec.link.latency_s)
    if n < 2:
        router = _RingRouter([], None)
    elif spec.bidirectional:
        # Cable i joins i and i+1; with two devices a single cable closes the ring.
        cables = [b.cable(names[i], names[(i + 1) % n], bw, lat) for i in range(n if n > 2 else 1)]
        if n == 2:
            cables.append(cables[0][::-1])
        forward = [cables[i][0] for i in range(n)]  # i -> i+1
        backward = [cables[i - 1][1] for i in range(n)]  # i -> i-1
        router = _RingRouter(forward, backward)
    else:
        router = _RingRouter(
            [b.link(names[i], names[(i + 1) % n], bw, lat) for i in range(n)], None
        )
    return Topology("ring", b.devices, b.links, b.switches, router)


class _FullRouter:
    __slots__ = ("links", "n")

    def __init__(self, links: list[Link], n: int) -> None:
        self.links = links
        self.n = n

    def routes(self, src: Device, dst: Device) -> tuple[Route, ...]:
        i, j = src.index, dst.index
        lo, hi = (i, j) if i < j else (j, i)
        cable = lo * (2 * self.n - lo - 1) // 2 + (hi - lo - 1)
        return (Route.of((self.links[2 * cable + (i > j)],)),)


def _build_fully_connected(spec: Any) -> Topology:
    b = _Builder()
    names = _flat_devices(b, spec)
    bw, lat = float(spec.link.bandwidth_Bps), float(spec.link.latency_s)
    cable = b.cable
    for i, a in enumerate(names):
        for other in names[i + 1 :]:
            cable(a, other, bw, lat)
    return Topology(
        "fully_connected", b.devices, b.links, b.switches, _FullRouter(b.links, len(names))
    )


# -- custom -------------------------------------------------------------------


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
    b = _Builder()
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
