"""Two-tier, rail-optimized and three-tier clusters: racks of nodes under switches."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from clustersim.errors import Problem, ScenarioError
from clustersim.scenario.node_groups import is_mixed, node_kinds

from .builder import FABRICS, FabricBuilder
from .graph import Device, Link, Route, Topology
from .symmetry import OrbitKey, Orbits

NETWORK_SWITCH = re.compile(r"(^|/)(tor|rail\d+|spine\d+|core\d+)$")
"""Names of a racked cluster's network switches: ``rack{r}/tor``, ``{group}/rail{j}``,
``spine{k}``, ``pod{p}/spine{k}``, ``core{m}`` (docs/internals.md)."""


def network_switches(switches: Sequence[str]) -> list[str]:
    """The network switches (not a node's PCIe switch, NIC or NVSwitch) among ``switches``."""
    return [name for name in switches if NETWORK_SWITCH.search(name)]


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
        "uniform",
        "_orbits",
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
        self.uniform = True  # every node, rack and pod built alike (see symmetry.py)
        self._orbits: Orbits | None = None

    def orbit_key(self, names: Sequence[str]) -> OrbitKey | None:
        """Equal for groups of devices that sit alike (:mod:`.symmetry`); None if unknown."""
        return self._index().key(names) if self.uniform else None

    def canonical(self, key: OrbitKey) -> list[str]:
        """The first group of the orbit ``key`` (:meth:`.symmetry.Orbits.canonical`)."""
        return self._index().canonical(key)

    def _index(self) -> Orbits:
        if self._orbits is None:
            self._orbits = Orbits(self.places, self.pod_of)
        return self._orbits

    def nic_of(self, name: str) -> int | None:
        """Index of the NIC on the PCIe switch of device ``name`` (None: no such device)."""
        place = self.places.get(name)
        return None if place is None else place.nic

    def first_route(self, src: Device, dst: Device) -> Route:
        """The first of :meth:`routes` (spine 0, core 0), built alone."""
        return self.routes(src, dst, first=True)[0]

    def ecmp_route(self, src: Device, dst: Device, pick: Callable[[int], int]) -> Route:
        """``routes(src, dst)[pick(len(routes))]``, built alone."""
        return self.routes(src, dst, pick=pick)[0]

    def ecmp_spread(
        self, src: str, dst: str, picks: Sequence[Callable[[int], int]]
    ) -> tuple[tuple[Link, ...], tuple[Link, ...], list[tuple[Link, ...]]] | None:
        """The routes :meth:`ecmp_route` would pick with each of ``picks`` between the devices
        named ``src`` and ``dst`` where the pair crosses the spines, as (the links up to the
        top-of-rack switch, those down from the other one, per pick the links between: its
        spine, and cores across pods): a route is up + between + down.  None elsewhere (route
        them).  No route is made."""
        a = self.places[src]
        b = self.places[dst]
        if self.rails or a.rack == b.rack or (a.nvdomain and a.nvdomain == b.nvdomain):
            return None
        ups = self.tor_up[a.rack]
        downs = self.tor_down[b.rack]
        pods = self.pod_of
        if pods is None or pods[a.rack] == pods[b.rack]:
            spines = len(ups)
            return a.up, b.down, [(ups[k], downs[k]) for k in (pick(spines) for pick in picks)]
        to_core = self.pod_up[pods[a.rack]]
        cores = len(to_core[0])
        if any(len(c) != cores for c in to_core):  # pairs not a k-major grid: route them
            return None
        from_core = self.pod_down[pods[b.rack]]
        between = []
        for pick in picks:
            k, m = divmod(pick(len(ups) * cores), cores)  # the order routes() lists them in
            between.append((ups[k], to_core[k][m], from_core[k][m], downs[k]))
        return a.up, b.down, between

    def routes(
        self,
        src: Device,
        dst: Device,
        first: bool = False,
        pick: Callable[[int], int] | None = None,
    ) -> tuple[Route, ...]:
        """The equal-cost routes from ``src`` to ``dst``: over spine ``k`` (and core ``m``
        across pods), ``k`` major; ``first``: only the first; ``pick``: only the one at
        ``pick(count)``."""
        if pick is None and first:
            pick = _first
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
            return self._rail_routes(a, b, pick)
        if a.rack == b.rack:
            return (Route.of(a.up + b.down),)
        ups = self.tor_up[a.rack]
        downs = self.tor_down[b.rack]
        pods = self.pod_of
        if pods is None or pods[a.rack] == pods[b.rack]:
            spines = range(len(ups)) if pick is None else (pick(len(ups)),)
            return tuple(Route.of((*a.up, ups[k], downs[k], *b.down)) for k in spines)
        to_core = self.pod_up[pods[a.rack]]
        from_core = self.pod_down[pods[b.rack]]
        pairs = [(k, m) for k in range(len(ups)) for m in range(len(to_core[k]))]
        if pick is not None:
            pairs = [pairs[pick(len(pairs))]]
        return tuple(
            Route.of((*a.up, ups[k], to_core[k][m], from_core[k][m], downs[k], *b.down))
            for k, m in pairs
        )

    def _rail_routes(
        self, a: _Place, b: _Place, pick: Callable[[int], int] | None = None
    ) -> tuple[Route, ...]:
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
        spines = range(len(ups)) if pick is None else (pick(len(ups)),)
        return tuple(Route.of((*prefix, *start.up, ups[k], downs[k], *b.down)) for k in spines)

    @property
    def _nics(self) -> int:
        return len(next(iter(self.node_gpus.values()), [])) or 1


def _first(count: int) -> int:
    """The first of ``count`` routes."""
    return 0


def rack_uplink_Bps(cluster_spec: Any, rack: int | None = None) -> float:
    """Total uplink bandwidth of one rack in bytes/s.

    ``rack_uplink.bandwidth_Bps`` when given, else the NIC bandwidth of the rack's nodes
    (nodes_per_rack x NICs x NIC bandwidth; in a mixed cluster, of rack ``rack``'s nodes,
    rack 0 when None) / oversubscription.
    """
    uplink = cluster_spec.rack_uplink
    if uplink.bandwidth_Bps is not None:
        return float(uplink.bandwidth_Bps)
    ratio = uplink.oversubscription if uplink.oversubscription is not None else 1.0
    return _edge_nic_Bps(cluster_spec, rack or 0, int(cluster_spec.nodes_per_rack)) / ratio


def _edge_nic_Bps(cluster_spec: Any, rack: int, per_rack: int) -> float:
    """Bytes/s of the NICs of the ``per_rack`` nodes of rack (or rail group) ``rack``."""
    if not is_mixed(cluster_spec):
        node = cluster_spec.node
        return per_rack * int(getattr(node, "nics", 1)) * float(node.nic.bandwidth_Bps)
    kinds = node_kinds(cluster_spec, per_rack, first=rack * per_rack)
    return sum(int(k.nics) * float(k.nic.bandwidth_Bps) for k in kinds)


def _build_two_tier(spec: Any) -> Topology:
    """Racks ``rack{r}`` under spines ``spine{k}``."""
    racks = int(spec.racks)
    b, router = _build_racks(spec, [f"rack{r}" for r in range(racks)])
    spines = int(spec.spines) if racks > 1 else 0
    if spines:
        latency = float(spec.rack_uplink.latency_s)
        spine_names = [f"spine{k}" for k in range(spines)]
        for r in range(racks):
            share = rack_uplink_Bps(spec, r) / spines
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
    kind: str, b: FabricBuilder, router: _TwoTierRouter, spec: Any, racks: int, nodes_per_rack: int
) -> Topology:
    """The topology of a racked cluster built by :func:`_build_racks` and its upper tiers:
    with the nodes' NVLink generation, their NVSwitches as reducing switches where
    ``nvlink.sharp`` says so, and the network switches reducing at ``sharp``'s share."""
    kinds = dict(zip(router.node_gpus, node_kinds(spec, len(router.node_gpus)), strict=True))
    reductions = {}
    for name in b.switches:
        if name.endswith("/nvswitch") or "/nvdomain" in name:
            nvlink = kinds[name.rsplit("/", 1)[0]].nvlink if name.endswith("/nvswitch") else None
            nvlink = nvlink or spec.node.nvlink  # an NVLink domain: the one kind of node
            if nvlink is not None and nvlink.sharp_Bps is not None:
                reductions[name] = nvlink.sharp_Bps
    generations = [k.nvlink.nvlink_generation for k in kinds.values() if k.nvlink is not None]
    share = spec.sharp_share
    shares = {} if share is None else dict.fromkeys(network_switches(b.switches), share)
    return Topology(
        kind,
        b.devices,
        b.links,
        b.switches,
        router,
        spine_routing=spec.spine_routing,
        racks=racks,
        nodes=racks * nodes_per_rack,
        nvlink_generation=min(generations, key=lambda g: g or 0) if generations else None,
        reductions=reductions,
        reduction_shares=shares,
        nic_transport=getattr(spec.node.nic, "transport", "rdma"),
        nic_plugin_latency_s=max(float(k.nic.plugin_latency_s) for k in kinds.values()),
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
    latency = float(uplink.latency_s)
    for g, group in enumerate(names):
        if uplink.bandwidth_Bps is not None:
            total = float(uplink.bandwidth_Bps)
        else:  # one rail: one NIC of each of the group's nodes
            total = _edge_nic_Bps(spec, g, nodes) / nics / float(uplink.oversubscription)
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
    latency = float(spec.rack_uplink.latency_s)
    router.pod_of = [r // per_pod for r in range(len(names))]
    for r, rack in enumerate(names):
        pod = r // per_pod
        rack_Bps = rack_uplink_Bps(spec, r)
        ups, downs = [], []
        for k in range(spines):
            up, down = b.cable(f"{rack}/tor", f"pod{pod}/spine{k}", rack_Bps / spines, latency)
            ups.append(up)
            downs.append(down)
        router.tor_up.append(ups)
        router.tor_down.append(downs)
    pod_latency = float(spec.pod_uplink.latency_s)
    for pod in range(pods):
        pod_Bps = pod_uplink_Bps(spec, pod)
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
    b: FabricBuilder, switch: str, uppers: list[str], bandwidth_Bps: float, latency_s: float
) -> tuple[list[Link], list[Link]]:
    """Cables from ``switch`` to each of ``uppers``: (the up links, the down links)."""
    pairs = [b.cable(switch, upper, bandwidth_Bps, latency_s) for upper in uppers]
    return [up for up, _ in pairs], [down for _, down in pairs]


def pod_uplink_Bps(cluster_spec: Any, pod: int | None = None) -> float:
    """Total bandwidth from one pod's spines to the cores in bytes/s:
    ``pod_uplink.bandwidth_Bps``, else the rack uplinks of its racks (racks_per_pod x rack
    uplink; in a mixed cluster, of pod ``pod``'s racks, pod 0 when None) / oversubscription."""
    uplink = cluster_spec.pod_uplink
    if uplink.bandwidth_Bps is not None:
        return float(uplink.bandwidth_Bps)
    ratio = uplink.oversubscription if uplink.oversubscription is not None else 1.0
    per_pod = int(cluster_spec.racks_per_pod)
    if not is_mixed(cluster_spec):
        return per_pod * rack_uplink_Bps(cluster_spec) / ratio
    first = (pod or 0) * per_pod
    racks = range(first, first + per_pod)
    return sum(rack_uplink_Bps(cluster_spec, r) for r in racks) / ratio


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


def nic_link(nic: Any) -> tuple[float, float]:
    """(bandwidth bytes/s, latency s) of a NIC's links to its switch: its line rate and
    latency over RDMA; over TCP the share of the line rate TCP reaches and the latency plus
    the per-message overhead of the NIC's stack (:mod:`clustersim.hardware.transport`)."""
    bandwidth, latency = float(nic.bandwidth_Bps), float(nic.latency_s)
    tcp = getattr(nic, "tcp_costs", None)
    if tcp is None:
        return bandwidth, latency
    return bandwidth * float(tcp.share), latency + float(tcp.message_latency_s)


def nic_node(link: Link) -> str | None:
    """The node whose NIC ``link`` joins to its network switch (either way, not the NIC's
    PCIe side): ``rack0/node1`` for ``rack0/node1/nic2->rack0/tor``; None for other links."""
    ends = (link.src, link.dst)
    lasts = [name.rsplit("/", 1)[-1] for name in ends]
    if any(last.startswith("pcie") or last == "root" for last in lasts):
        return None
    for name, last in zip(ends, lasts, strict=True):
        if last.startswith("nic"):
            return name.rsplit("/", 1)[0]
    return None


@dataclass(frozen=True, slots=True)
class _NodeParts:
    """What a node kind builds: its spec and its links' bandwidths (bytes/s) and latencies (s)."""

    spec: Any
    gpus: int
    pcie: tuple[float, float]
    nic: tuple[float, float]
    nvswitch: bool
    pairs: list[tuple[int, int, int]]  # (a, b, links): n links are one cable of n x bandwidth
    nvlink: tuple[float, float]

    @classmethod
    def of(cls, node_spec: Any) -> _NodeParts:
        nvlink = node_spec.nvlink
        nvswitch = nvlink is not None and nvlink.pairs is None
        pairs = (
            [(int(x), int(y), int(n[0]) if n else 1) for x, y, *n in nvlink.pairs]
            if nvlink is not None and not nvswitch
            else []
        )
        return cls(
            spec=node_spec,
            gpus=int(node_spec.gpus),
            pcie=(float(node_spec.pcie.bandwidth_Bps), float(node_spec.pcie.latency_s)),
            nic=nic_link(node_spec.nic),
            nvswitch=nvswitch,
            pairs=pairs,
            nvlink=(
                (float(nvlink.bandwidth_Bps), float(nvlink.latency_s))
                if nvlink is not None
                else (0.0, 0.0)
            ),
        )


def _node_parts(spec: Any, nodes: int) -> list[_NodeParts]:
    """The parts of each of the ``nodes`` nodes, in build order (one object per kind)."""
    made: dict[int, _NodeParts] = {}
    return [made.setdefault(id(kind), _NodeParts.of(kind)) for kind in node_kinds(spec, nodes)]


def _build_racks(
    spec: Any, rack_names: list[str], nodes_per_rack: int = 0, rails: bool = False
) -> tuple[FabricBuilder, _TwoTierRouter]:
    """The nodes of every rack (named ``rack_names``) under their top-of-rack switches;
    with ``rails``, NIC j of every node of a group under the group's rail switch j.  Nodes
    take their kinds from ``node`` or, in a mixed cluster, ``node_groups`` in build order."""
    node_spec = spec.node
    nodes_per_rack = nodes_per_rack or int(spec.nodes_per_rack)
    nics = int(getattr(node_spec, "nics", 1))
    domain = _nvlink_domain(node_spec, nodes_per_rack)
    kinds = _node_parts(spec, len(rack_names) * nodes_per_rack)

    b = FabricBuilder()
    router = _TwoTierRouter()
    places = router.places
    for r, rack in enumerate(rack_names):
        if rails:
            edge = [b.switch(f"{rack}/rail{j}") for j in range(nics)]
        else:
            edge = [b.switch(f"{rack}/tor")] * nics
        for n in range(nodes_per_rack):
            node = f"{rack}/node{n}"
            kind = kinds[r * nodes_per_rack + n]
            gpus, node_spec, nvswitch = kind.gpus, kind.spec, kind.nvswitch
            (pcie_bw, pcie_lat), (nic_bw, nic_lat), (nv_bw, nv_lat) = (
                kind.pcie,
                kind.nic,
                kind.nvlink,
            )
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
            for ga, gb, links in kind.pairs:
                there, back = b.cable(gpu_names[ga], gpu_names[gb], links * nv_bw, nv_lat)
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
    router.uniform = len({id(kind) for kind in kinds}) == 1
    return b, router


FABRICS.add("two_tier", _build_two_tier)
FABRICS.add("three_tier", _build_three_tier)
FABRICS.add("rail_optimized", _build_rail_optimized)
