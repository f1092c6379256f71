"""The ``cluster:`` section: devices, links, nodes and the shapes of a cluster.

Two- and three-tier, rail-optimized, flat (switch, ring, fully connected) and
custom clusters; :data:`ClusterSpec` chooses one by ``kind``.  Every shape refuses,
before anything is built, a cluster of more than :data:`MAX_DEVICES` devices or
:data:`MAX_LINKS` links.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    Tag,
    ValidationInfo,
    WithJsonSchema,
    model_validator,
)

from clustersim.errors import Problem, hinted, join_path

from .devices import (  # noqa: F401  (CPU_DEFAULTS, ComputeSpec: their former home)
    CPU_DEFAULTS,
    ComputeSpec,
    CurveSpec,
    DeviceSpec,
    _with_cpu_defaults,
    expanded,
)
from .fields import (
    Bandwidth,
    Bool,
    Count,
    Float,
    GpuIndex,
    Int,
    Invalid,
    TimeSpan,
    _Spec,
    _tag_of,
    _tagged,
    _unit,
)
from .nvlink import NVLS_SHARE, nvlink_generation
from .plugins import plugin_name

FabricName = plugin_name("fabrics")
"""The name of a registered fabric (``clustersim list fabrics``)."""

MIN_RATIO = 1e-6
"""Smallest oversubscription ratio."""
MAX_RATIO = 1e6
"""Largest oversubscription ratio."""


class LinkSpec(_Spec):
    """A full-duplex connection: one link each way, each with this bandwidth and latency."""

    bandwidth_Bps: Bandwidth = Field(alias="bandwidth")
    """Bandwidth of each direction, bytes per second."""
    latency_s: TimeSpan = _unit("0", "latency")
    """Latency of each direction, seconds."""


def _pair_shape(value: object) -> object:
    """An NVLink pair has 2 items (two GPU indices) or 3 (and its number of links)."""
    if isinstance(value, (list, tuple)) and len(value) not in (2, 3):
        message = f"must have 2 items (two GPU indices) or 3 (and a link count), got {len(value)}"
        raise Invalid(Problem("", message, "[a, b] or [a, b, links]"))
    return value


NvlinkPair = Annotated[
    tuple[GpuIndex, ...],
    BeforeValidator(_pair_shape),
    WithJsonSchema(
        {
            "type": "array",
            "items": {"type": "integer", "minimum": 0},
            "minItems": 2,
            "maxItems": 3,
            "description": "[a, b]: GPUs a and b joined by one link; [a, b, n]: by n links",
        }
    ),
]
"""GPUs ``[a, b]`` joined by one link, or ``[a, b, n]`` by ``n`` (n x the bandwidth)."""


class NvlinkSpec(LinkSpec):
    """GPU-to-GPU links inside a node (``bandwidth``: of one link, per direction)."""

    pairs: list[NvlinkPair] | None = None
    """GPU index pairs joined by a link, ``[a, b]``, or by ``n`` links, ``[a, b, n]`` (a
    hybrid cube-mesh has doubled pairs); absent means an NVSwitch joining all GPUs."""
    generation: Annotated[int, Strict(), Field(ge=1, le=5)] | None = None
    """NVLink generation, 1 (P100) to 5 (B200): NCCL's bandwidth figure per link
    (docs/collectives.md).  Default: the generation whose SXM parts have this bandwidth
    (80, 150, 300, 450 or 900 GB/s per GPU and direction), else none (NCCL's NVLink 2/3
    figure)."""
    sharp: Bool | Bandwidth = False
    """The NVSwitch reduces (NVLink SHARP, NCCL's NVLS; NVSwitch 3 and later: H100, H200,
    B200): ``true`` takes the generation's throughput (:data:`NVLS_SHARE`), a bandwidth gives
    the all-reduce throughput per GPU (bytes of result per second, NVLS's algorithm
    bandwidth).  Needs an NVSwitch (no pairs)."""

    @property
    def nvlink_generation(self) -> int | None:
        """``generation``, or the one its bandwidth implies (None if neither says)."""
        return self.generation or nvlink_generation(self.bandwidth_Bps)

    @property
    def sharp_Bps(self) -> float | None:
        """The switch's all-reduce throughput per GPU (bytes/s), None without SHARP."""
        if self.sharp is False:
            return None
        if self.sharp is True:
            return NVLS_SHARE[self.nvlink_generation or 0] * self.bandwidth_Bps
        return float(self.sharp)

    @model_validator(mode="after")
    def _sharp_needs_nvswitch(self) -> NvlinkSpec:
        if self.sharp is False:
            return self
        if self.pairs is not None:
            raise Invalid(
                Problem("sharp", "NVLink SHARP reduces in an NVSwitch; pairs have none", "false")
            )
        if self.sharp is True and self.nvlink_generation not in NVLS_SHARE:
            known = self.nvlink_generation
            what = f"generation {known}" if known else "an unknown generation"
            raise Invalid(
                Problem(
                    "sharp",
                    f"NVLink SHARP came with NVSwitch 3 (NVLink 4, H100); this NVLink is {what}",
                    "generation: 4 or 5 (or bandwidth 450GB/s or 900GB/s), or sharp: a "
                    "throughput such as 274GB/s, or false",
                )
            )
        return self


def _preset_or_links(schema: dict[str, Any]) -> None:
    """JSON Schema of a node: ``pcie`` and ``nic`` are required unless a ``preset`` gives them."""
    required = [key for key in schema.get("required", []) if key not in ("pcie", "nic")]
    schema["required"] = required
    schema["anyOf"] = [{"required": ["preset"]}, {"required": ["pcie", "nic"]}]
    if not required:
        schema.pop("required")


class NodeSpec(_Spec):
    """One server: GPUs and a CPU on PCIe, optional NVLink, one NIC or several."""

    model_config = {**_Spec.model_config, "json_schema_extra": _preset_or_links}

    gpus: Int = Field(8, ge=0)
    """Number of GPUs (0 for a node that only holds a CPU and a NIC)."""
    gpu: DeviceSpec = Field(default_factory=DeviceSpec)
    """Each GPU."""
    cpu: DeviceSpec = Field(default_factory=lambda: DeviceSpec.model_validate(CPU_DEFAULTS))
    """The CPU (defaults: 2TFLOPS, 1TB, 200GB/s)."""
    pcie: LinkSpec
    """Each device's link to the PCIe switch."""
    nvlink: NvlinkSpec | None = None
    """NVLink between GPUs, if any."""
    nic: LinkSpec
    """Each network card: its PCIe switch <-> top-of-rack switch."""
    nvlink_domain: Count = 1
    """Nodes whose GPUs share one NVSwitch fabric (an NVLink domain spanning nodes, as in
    NVL72: 18 nodes of 4 GPUs): their GPUs talk over NVLink; it must divide
    nodes_per_rack, and nvlink must be an NVSwitch."""
    nics: Int = Field(1, ge=1)
    """Network cards per node.  With N > 1, NIC j sits on PCIe switch j of its own,
    GPU i on switch floor(i N / gpus) (GPUs 2j, 2j+1 with 8 GPUs and 4 NICs; one NIC per
    GPU with 8: rail-optimised DGX/HGX nodes), the switches joined by the node's PCIe
    root, where the CPU sits and uses NIC 0."""
    preset: str | None = None
    """A catalog node kind (``clustersim list nodes``) or a YAML file of one: its values are
    this node's; keys beside it replace them (deep merge: ``nic: {bandwidth: ...}`` keeps the
    preset's NIC latency)."""

    @model_validator(mode="before")
    @classmethod
    def _preset_and_cpu_defaults(cls, data: Any, info: ValidationInfo) -> Any:
        data = expanded(data, "node", info)
        if isinstance(data, dict):
            return {**data, "cpu": _with_cpu_defaults(data.get("cpu", {}))}
        return data

    @model_validator(mode="after")
    def _check_pairs(self) -> NodeSpec:
        if self.nics > max(self.gpus, 1):
            raise Invalid(
                Problem(
                    "nics",
                    f"{self.nics} NICs for {self.gpus} GPUs: every NIC needs a GPU",
                    f"1 to {max(self.gpus, 1)}",
                )
            )
        if self.nvlink is not None and self.nvlink.pairs is not None:
            problems = _pair_problems(self.nvlink.pairs, self.gpus)
            if problems:
                raise Invalid(problems)
        return self


def _pair_problems(pairs: Sequence[tuple[int, ...]], gpus: int) -> list[Problem]:
    """What is wrong with NVLink ``pairs`` in a node of ``gpus`` GPUs."""
    problems: list[Problem] = []
    seen: dict[frozenset[int], int] = {}
    for i, (a, b, *links) in enumerate(pairs):
        path = join_path("nvlink", "pairs", i)
        if links and links[0] < 1:
            problems.append(Problem(join_path(path, 2), f"{links[0]} links", "1 or more"))
        elif a >= gpus or b >= gpus:
            problems.append(
                Problem(path, f"GPU index out of range in [{a}, {b}]", f"0 to {gpus - 1}")
            )
        elif a == b:
            problems.append(Problem(path, f"a GPU cannot be paired with itself: [{a}, {b}]"))
        elif frozenset((a, b)) in seen:
            problems.append(
                Problem(path, f"pair [{a}, {b}] already listed at pairs[{seen[frozenset((a, b))]}]")
            )
        else:
            seen[frozenset((a, b))] = i
    return problems


class UplinkSpec(_Spec):
    """Each top-of-rack switch's link to each spine: a ratio or a bandwidth, not both."""

    oversubscription: Float | None = Field(None, ge=MIN_RATIO, le=MAX_RATIO)
    """Uplink bandwidth = nodes_per_rack x NIC bandwidth / oversubscription (1e-6 .. 1e6)."""
    bandwidth_Bps: Bandwidth | None = Field(None, alias="bandwidth")
    """Uplink bandwidth, bytes per second."""
    latency_s: TimeSpan = _unit("0", "latency")
    """Uplink latency, seconds."""

    @model_validator(mode="after")
    def _exactly_one(self) -> UplinkSpec:
        given = (self.oversubscription is not None) + (self.bandwidth_Bps is not None)
        if given != 1:
            what = (
                "both oversubscription and bandwidth given"
                if given
                else "neither oversubscription nor bandwidth given"
            )
            raise Invalid(
                Problem(
                    "",
                    f"{what}; give exactly one",
                    "oversubscription: RATIO or bandwidth: BANDWIDTH",
                )
            )
        return self


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


class TwoTierCluster(_Priced):
    """Nodes in racks under top-of-rack switches, racks joined by spine switches."""

    kind: Literal["two_tier"] = "two_tier"
    """The cluster shape."""
    racks: Count = 1
    """Number of racks."""
    nodes_per_rack: Count = 1
    """Nodes in each rack."""
    node: NodeSpec
    """Every node."""
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
        return self


class ThreeTierCluster(_Priced):
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
    node: NodeSpec
    rack_uplink: UplinkSpec = TwoTierCluster.model_fields["rack_uplink"]  # type: ignore[assignment]
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
        return self


class RailOptimizedCluster(_Priced):
    """Rail-optimized groups of nodes (DGX SuperPOD style): NIC j of every node of a group
    on the group's rail switch j, rail switches joined by spines; one NIC per GPU."""

    kind: Literal["rail_optimized"]
    """The cluster shape."""
    groups: Count = 1
    """Rail groups (scalable units), named ``group{g}``."""
    nodes_per_group: Count = 1
    """Nodes in each group, named ``group{g}/node{n}``."""
    node: NodeSpec
    """Every node; ``nics`` must equal ``gpus`` (GPU j's NIC is rail j)."""
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
