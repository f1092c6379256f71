"""The ``cluster:`` section: the shapes of a cluster, assembled from :mod:`.node`'s parts.

Two- and three-tier, rail-optimized, flat (switch, ring, fully connected), custom and
plugin clusters; :data:`ClusterSpec` chooses one by ``kind``.  Every shape refuses,
before anything is built, a cluster of more than :data:`MAX_DEVICES` devices or
:data:`MAX_LINKS` links.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AllowInfNan,
    ConfigDict,
    Field,
    Strict,
    Tag,
    model_validator,
)

from clustersim.errors import Problem, hinted, join_path

from .devices import (
    DeviceSpec,
    _with_cpu_defaults,
)
from .fields import (
    Bool,
    Count,
    Float,
    Invalid,
    _Spec,
    _tag_of,
    _tagged,
)
from .node import LinkSpec, NodeSpec, UplinkSpec
from .node_groups import NodeGroupSpec, check_groups, with_first_node
from .plugins import plugin_name

FabricName = plugin_name("fabrics")
"""The name of a registered fabric (``clustersim list fabrics``)."""

MAX_DEVICES = 262_144
"""Most devices (GPUs and CPUs) a cluster may have; checked before anything is built."""
MAX_LINKS = 3_000_000
"""Most links (each direction counted) a cluster may have; checked before anything is built."""


def _size_check(devices: int, links: int, how: str) -> None:
    """Raise :class:`Invalid` when a cluster of ``devices`` and ``links`` is over the limits.

    ``how`` says how the counts follow from the keys, for the message.
    """
    allowed = f"at most {MAX_DEVICES:,} devices and {MAX_LINKS:,} links"
    if devices > MAX_DEVICES:
        message = f"the cluster would have {devices:,} devices ({how}); too many"
        raise Invalid(Problem("", message, allowed))
    if links > MAX_LINKS:
        message = f"the cluster would have {links:,} links ({how}); too many"
        raise Invalid(Problem("", message, allowed))


class _Priced(_Spec):
    """Base of every cluster kind: what a GPU-hour costs."""

    gpu_hour_price: Float | None = Field(None, gt=0)
    """Price of one GPU-hour, in your currency (optional): training summaries with
    ``training.tokens`` or ``duration`` then give ``cost`` = ``gpu_hours`` x this price."""


IB_SHARP_SHARE = 20.0 / 25.0
"""Share of a port's line rate at which an InfiniBand switch reduces (SHARP): NCCL's
maintainer's rule of thumb, "~20 GB/s per NIC" of algorithm bandwidth through SHARP on
200 Gb/s (25 GB/s) HDR NICs (NVIDIA/nccl#320, 2023-01-03)."""

SharpShare = Annotated[float, Strict(), AllowInfNan(False), Field(gt=0, le=1)]
"""A share of a port's line rate, in (0, 1]."""


class _Switched(_Priced):
    """Base of the racked cluster kinds: whether their network switches reduce."""

    sharp: Bool | SharpShare = True
    """The network switches (top-of-rack, rail, spine, core) reduce for ``in_network``
    all-reduces (InfiniBand SHARP), each port at a share of its line rate: ``true`` takes
    :data:`IB_SHARP_SHARE` (0.8, NVIDIA/nccl#320), a number in (0, 1] another share,
    ``false`` says they do not reduce (Ethernet without in-network aggregation):
    ``in_network`` across nodes is then refused."""

    @property
    def sharp_share(self) -> float | None:
        """The share of a port's line rate the network switches reduce at (None: they don't)."""
        if self.sharp is False:
            return None
        return IB_SHARP_SHARE if self.sharp is True else float(self.sharp)


class _Racked(_Switched):
    """Base of the racked cluster kinds: one node kind, or several (:mod:`.node_groups`)."""

    node_groups: list[NodeGroupSpec] | None = Field(None, min_length=1)
    """Nodes of several kinds (a mixed cluster), in build order: each a node (``preset`` and
    keys beside it), its ``count`` and optionally its ``gpu_hour_price``; instead of
    ``node``.  The counts add up to the cluster's nodes; every group has the same GPUs and
    NICs per node (docs/mixed-clusters.md)."""

    @model_validator(mode="after")
    def _first_group_is_node(self) -> _Racked:
        """``node`` is the first group's when ``node_groups`` is given (what nodes share is
        read from it); exactly one of the two is given."""
        node = with_first_node(self.node, self.node_groups)
        if node is not self.node:
            object.__setattr__(self, "node", node)  # frozen: set once, while validating
        return self


class TwoTierCluster(_Racked):
    """Nodes in racks under top-of-rack switches, racks joined by spine switches."""

    kind: Literal["two_tier"] = "two_tier"
    """The cluster shape."""
    racks: Count = 1
    """Number of racks."""
    nodes_per_rack: Count = 1
    """Nodes in each rack."""
    node: NodeSpec = None  # type: ignore[assignment]  # set from node_groups when absent
    """Every node; required unless ``node_groups`` is given (then the first group's)."""
    rack_uplink: UplinkSpec = Field(
        default={"oversubscription": 1},
        validate_default=True,  # type: ignore[arg-type]
    )
    """Links from each top-of-rack switch to each spine."""
    spines: Count = 1
    """Number of spine switches."""
    spine_routing: Literal["ecmp", "split"] = "ecmp"
    """How rack-to-rack flows use the spines: one path by hash (ecmp) or all (split)."""

    @model_validator(mode="after")
    def _not_too_large(self) -> TwoTierCluster:
        nodes, gpus = self.racks * self.nodes_per_rack, self.node.gpus
        nvlink = self.node.nvlink
        per_node = 2 * (gpus + 1) + 4  # device <-> PCIe, NIC <-> PCIe, NIC <-> ToR
        if nvlink is not None:
            per_node += 2 * (gpus if nvlink.pairs is None else len(nvlink.pairs))
        spine_links = 2 * self.racks * self.spines if self.racks > 1 else 0
        how = (
            f"racks {self.racks} x nodes_per_rack {self.nodes_per_rack} x "
            f"(gpus {gpus} + 1 CPU), spines {self.spines}"
        )
        _size_check(nodes * (gpus + 1), nodes * per_node + spine_links, how)
        check_groups(self, nodes, f"racks {self.racks} x nodes_per_rack {self.nodes_per_rack}")
        return self


class ThreeTierCluster(_Racked):
    """Pods of racks: each pod's racks under its spine switches, pods joined by core switches.

    ``nodes_per_rack``, ``node`` and ``rack_uplink`` (each top-of-rack switch's links to its
    pod's spines) mean what they mean in :class:`TwoTierCluster`.
    """

    kind: Literal["three_tier"]
    """The cluster shape."""
    pods: Count = 1
    """Number of pods."""
    racks_per_pod: Count = 1
    """Racks in each pod, named ``pod{p}/rack{i}``."""
    nodes_per_rack: Count = TwoTierCluster.model_fields["nodes_per_rack"].default
    """Nodes in each rack."""
    node: NodeSpec = None  # type: ignore[assignment]  # set from node_groups when absent
    """Every node; required unless ``node_groups`` is given (then the first group's)."""
    rack_uplink: UplinkSpec = TwoTierCluster.model_fields["rack_uplink"]  # type: ignore[assignment]
    """Links from each top-of-rack switch to each spine."""
    pod_uplink: UplinkSpec = Field(
        default={"oversubscription": 1},
        validate_default=True,  # type: ignore[arg-type]
    )
    """Each pod's links from its spines to the cores (ratio: of the pod's rack uplinks,
    racks_per_pod x rack uplink / oversubscription; a bandwidth: the pod's total)."""
    spines: Count = 1
    """Spine switches per pod (``pod{p}/spine{k}``); spine k of every pod links to every core."""
    cores: Count = 1
    """Core switches (``core{m}``)."""
    spine_routing: Literal["ecmp", "split"] = "ecmp"
    """How flows between racks use the spines and cores: one path by hash, or all evenly."""

    @model_validator(mode="after")
    def _not_too_large(self) -> ThreeTierCluster:
        racks = self.pods * self.racks_per_pod
        nodes, gpus = racks * self.nodes_per_rack, self.node.gpus
        per_node = 2 * (gpus + 1) + 4 * self.node.nics + 2 * (self.node.nics > 1) * self.node.nics
        if self.node.nvlink is not None:
            nvlink = self.node.nvlink
            per_node += 2 * (gpus if nvlink.pairs is None else len(nvlink.pairs))
        upper = 2 * racks * self.spines + 2 * self.pods * self.spines * self.cores
        how = (
            f"pods {self.pods} x racks_per_pod {self.racks_per_pod} x nodes_per_rack "
            f"{self.nodes_per_rack} x (gpus {gpus} + 1 CPU), spines {self.spines}, "
            f"cores {self.cores}"
        )
        _size_check(nodes * (gpus + 1), nodes * per_node + upper, how)
        check_groups(
            self,
            nodes,
            f"pods {self.pods} x racks_per_pod {self.racks_per_pod} x "
            f"nodes_per_rack {self.nodes_per_rack}",
        )
        return self


class RailOptimizedCluster(_Racked):
    """Rail-optimized groups of nodes (DGX SuperPOD style): NIC j of every node of a group
    on the group's rail switch j, rail switches joined by spines; one NIC per GPU."""

    kind: Literal["rail_optimized"]
    """The cluster shape."""
    groups: Count = 1
    """Rail groups (scalable units), named ``group{g}``."""
    nodes_per_group: Count = 1
    """Nodes in each group, named ``group{g}/node{n}``."""
    node: NodeSpec = None  # type: ignore[assignment]  # set from node_groups when absent
    """Every node, ``nics`` equal to ``gpus`` (GPU j's NIC is rail j); required unless
    ``node_groups`` is given (then the first group's)."""
    rail_uplink: UplinkSpec = TwoTierCluster.model_fields["rack_uplink"]  # type: ignore[assignment]
    """Each rail switch's links to the spines (ratio: of nodes_per_group x NIC bandwidth)."""
    spines: Count = 1
    """Spine switches ``spine{k}``; every rail switch links to every spine."""
    spine_routing: Literal["ecmp", "split"] = TwoTierCluster.model_fields["spine_routing"].default
    """How flows between rails or groups use the spines."""

    @model_validator(mode="after")
    def _one_nic_per_gpu(self) -> RailOptimizedCluster:
        if self.node.nics != self.node.gpus:
            raise Invalid(
                Problem(
                    "node.nics",
                    f"a rail-optimized node needs one NIC per GPU: nics {self.node.nics}, "
                    f"gpus {self.node.gpus}",
                    f"nics: {self.node.gpus}",
                )
            )
        nodes, gpus = self.groups * self.nodes_per_group, self.node.gpus
        per_node = 2 * (gpus + 1) + 6 * gpus + (2 * gpus if self.node.nvlink else 0)
        how = (
            f"groups {self.groups} x nodes_per_group {self.nodes_per_group} x "
            f"(gpus {gpus} + 1 CPU), spines {self.spines}"
        )
        upper = 2 * self.groups * gpus * self.spines
        _size_check(nodes * (gpus + 1), nodes * per_node + upper, how)
        check_groups(self, nodes, f"groups {self.groups} x nodes_per_group {self.nodes_per_group}")
        return self


class FlatCluster(_Priced):
    """Devices joined directly: one switch, a ring, or every pair linked."""

    kind: Literal["switch", "ring", "fully_connected"]
    """The cluster shape."""
    devices: Count
    """Number of devices."""
    device_kind: Literal["gpu", "cpu"] = "gpu"
    """What the devices are (sets the device defaults)."""
    device: DeviceSpec = Field(default_factory=DeviceSpec)
    """Every device."""
    link: LinkSpec
    """Every link (for ``switch``: each device to the switch)."""
    bidirectional: Bool = True
    """Ring only: false means links i -> i+1 only."""

    @model_validator(mode="before")
    @classmethod
    def _cpu_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("device_kind") == "cpu":
            return {**data, "device": _with_cpu_defaults(data.get("device", {}))}
        return data

    @model_validator(mode="after")
    def _bidirectional_ring_only(self) -> FlatCluster:
        if not self.bidirectional and self.kind != "ring":
            raise Invalid(
                Problem(
                    "bidirectional", f"only a ring can be one-way, not kind {self.kind!r}", "true"
                )
            )
        return self

    @model_validator(mode="after")
    def _not_too_large(self) -> FlatCluster:
        n = self.devices
        links = {"switch": 2 * n, "ring": 2 * n if self.bidirectional else n}
        _size_check(n, links.get(self.kind, n * (n - 1)), f"{self.kind} of devices {n}")
        return self


class CustomDevice(DeviceSpec):
    """A named device of a custom cluster."""

    name: Annotated[str, Field(min_length=1)]
    """Unique device name."""
    kind: Literal["gpu", "cpu"] = "gpu"
    """What the device is (sets its defaults)."""

    @model_validator(mode="before")
    @classmethod
    def _cpu_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("kind") == "cpu":
            return _with_cpu_defaults(data, cls)
        return data


class CustomLink(LinkSpec):
    """A link of a custom cluster between two named devices or switches."""

    src: Annotated[str, Field(min_length=1)]
    """Name of one end."""
    dst: Annotated[str, Field(min_length=1)]
    """Name of the other end."""
    duplex: Bool = True
    """True: one link each way; false: src -> dst only."""


class CustomCluster(_Priced):
    """Any shape: devices, switches and the links between them, listed."""

    kind: Literal["custom"]
    """The cluster shape."""
    devices: list[CustomDevice] = Field(min_length=1)
    """The devices."""
    switches: list[Annotated[str, Field(min_length=1)]] = []
    """Names of the (non-blocking) switches."""
    links: list[CustomLink]
    """The links."""

    @model_validator(mode="after")
    def _check_names(self) -> CustomCluster:
        problems = _name_problems(self)
        if problems:
            raise Invalid(problems)
        links = sum(2 if link.duplex else 1 for link in self.links)
        _size_check(len(self.devices), links, "as listed")
        return self


def _name_problems(cluster: CustomCluster) -> list[Problem]:
    """Duplicate names and links to unknown or same ends in a custom cluster."""
    problems: list[Problem] = []
    names: set[str] = set()
    entries = [(join_path("devices", i, "name"), d.name) for i, d in enumerate(cluster.devices)]
    entries += [(join_path("switches", i), s) for i, s in enumerate(cluster.switches)]
    for path, name in entries:
        if name in names:
            problems.append(Problem(path, f"name {name!r} is used twice"))
        names.add(name)
    for i, link in enumerate(cluster.links):
        for end in ("src", "dst"):
            name = getattr(link, end)
            if name not in names:
                message = hinted(f"unknown device or switch {name!r}", name, names)
                problems.append(Problem(join_path("links", i, end), message))
        if link.src == link.dst:
            problems.append(
                Problem(join_path("links", i), f"a link cannot join {link.src!r} to itself")
            )
    return problems


class PluginCluster(_Priced):
    """A cluster of a kind registered from outside the package (``FABRICS.add(kind,
    build)``, :mod:`clustersim.topology.builder`).  ``kind`` names it, checked against the
    fabric registry like every plugin key (:mod:`.plugins`); every other key is the
    fabric's own (``model_extra``), which its builder validates."""

    model_config = ConfigDict(extra="allow")

    kind: FabricName
    """A registered fabric (``clustersim list fabrics``)."""


CLUSTER_KINDS = (
    "two_tier",
    "three_tier",
    "rail_optimized",
    "switch",
    "ring",
    "fully_connected",
    "custom",
)
"""The built-in cluster kinds, whose keys this module types; every other registered fabric
takes a :class:`PluginCluster`."""
PLUGIN_KIND = "plugin"
"""The union tag of every kind that is not built in."""


def _cluster_tag(data: Any) -> str | None:
    """The union member of a cluster mapping: its built-in kind, else :data:`PLUGIN_KIND`
    (the fabric registry then says whether the kind exists)."""
    kind = _tag_of("kind", "two_tier")(data)
    if kind is None or kind in CLUSTER_KINDS:
        return kind
    return PLUGIN_KIND


ClusterSpec = Annotated[
    Annotated[TwoTierCluster, Tag("two_tier")]
    | Annotated[ThreeTierCluster, Tag("three_tier")]
    | Annotated[RailOptimizedCluster, Tag("rail_optimized")]
    | Annotated[FlatCluster, Tag("switch")]
    | Annotated[FlatCluster, Tag("ring")]
    | Annotated[FlatCluster, Tag("fully_connected")]
    | Annotated[CustomCluster, Tag("custom")]
    | Annotated[PluginCluster, Tag(PLUGIN_KIND)],
    _tagged("kind", CLUSTER_KINDS, default="two_tier", tag=_cluster_tag),
]
"""A cluster of any kind; ``kind`` chooses, ``two_tier`` when absent."""
