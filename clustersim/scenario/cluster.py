"""YAML scenario -> validated, typed :class:`Scenario`, with clear errors.

The models below are the scenario format.  Every value is SI inside (seconds,
bytes, bytes per second, FLOP/s); the YAML writes units (``100Gb/s``) and
:mod:`clustersim.units` reads them.  YAML key names are the field aliases.

Every problem in a document is reported at once, each as a
:class:`~clustersim.errors.Problem` whose path uses the YAML key names
(``cluster.node.nic.bandwidth``, ``stragglers[1].slowdown``) and whose message
is plain English.  :func:`validate_model` does that for any pydantic model, so
workload plugins validate their own section the same way.
"""

from __future__ import annotations

import math
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, Union

import yaml
from pydantic import (
    AllowInfNan,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Strict,
    Tag,
    ValidationError,
    WithJsonSchema,
    model_validator,
)
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from clustersim import units
from clustersim.errors import Problem, ScenarioError, hinted, join_path

__all__ = [
    "CLUSTER_KINDS",
    "Bandwidth",
    "FlopCount",
    "FlopRate",
    "Size",
    "TimeSpan",
    "MAX_DEVICES",
    "MAX_FILE_BYTES",
    "MAX_LINKS",
    "MAX_YAML_DEPTH",
    "MAX_YAML_NODES",
    "ClusterSpec",
    "CustomCluster",
    "CustomDevice",
    "CustomLink",
    "DeviceSpec",
    "ExponentialSlowdown",
    "FixedStraggler",
    "FlatCluster",
    "Invalid",
    "LinkSpec",
    "LinkStraggler",
    "LognormalSlowdown",
    "NodeSpec",
    "NvlinkSpec",
    "RandomStraggler",
    "RandomStragglerSpec",
    "Scenario",
    "StragglerSpec",
    "TwoTierCluster",
    "UniformSlowdown",
    "UplinkSpec",
    "load_scenario",
    "parse_scenario",
    "scenario_json_schema",
    "validate_model",
]

M = TypeVar("M", bound=BaseModel)

# --------------------------------------------------------------------------- field types


def _quantity(parse: Callable[[object], float], key: str) -> Any:
    """A float field written with a unit in YAML, parsed to SI by ``parse``."""
    q = units.QUANTITIES[key]
    number = {"type": "number", "minimum": 0} if q.bare_numbers else {"enum": [0, "0"]}
    schema = {
        "anyOf": [{"type": "string", "pattern": units.unit_pattern(key)}, number],
        "description": f"{q.name[2:]} with a unit ({q.allowed})",
        "examples": list(q.examples),
    }
    return Annotated[float, BeforeValidator(parse), WithJsonSchema(schema)]


Size = _quantity(units.parse_size, "size")
"""Bytes, written ``160MB``, ``1GiB``, ``8Gb``."""
Bandwidth = _quantity(units.parse_bandwidth, "bandwidth")
"""Bytes per second, written ``100Gb/s``, ``12.5GB/s``."""
TimeSpan = _quantity(units.parse_time, "time")
"""Seconds, written ``1us``, ``1.5ms``, ``2s``."""
FlopRate = _quantity(units.parse_flop_rate, "flop_rate")
"""FLOP/s, written ``312TFLOPS``."""
FlopCount = _quantity(units.parse_flops, "flops")
"""FLOPs, written ``1.2TFLOP`` or as a plain number."""

Int = Annotated[int, Strict()]
"""A whole number (``true`` and ``2.0`` are refused)."""
Count = Annotated[int, Strict(), Field(ge=1)]
"""A whole number, at least 1."""
Float = Annotated[float, Strict(), AllowInfNan(False)]
"""A finite number (whole numbers accepted; ``true`` and ``"2"`` refused)."""
Bool = Annotated[bool, Strict()]
"""``true`` or ``false``."""
GpuIndex = Annotated[int, Strict(), Field(ge=0)]
"""Index of a GPU inside its node, from 0."""
Glob = Annotated[str, Field(min_length=1)]
"""A shell-style pattern over names, e.g. ``rack0/node1/*``."""


def _unit(default: str, alias: str) -> Any:
    """A unit-bearing field whose default is written like the YAML (and parsed like it)."""
    return Field(default, alias=alias, validate_default=True)


class Invalid(ValueError):
    """Raise inside a model validator to report problems below the model.

    Each problem's path is relative to the model being validated (``"nvlink.pairs[2]"``);
    :func:`validate_model` puts the model's own path in front.
    """

    def __init__(self, problems: Problem | Sequence[Problem]) -> None:
        self.problems = [problems] if isinstance(problems, Problem) else list(problems)
        """The problems found."""
        super().__init__("; ".join(p.render() for p in self.problems))


class _Spec(BaseModel):
    """Base of every scenario model: unknown keys are errors, instances are immutable."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, use_attribute_docstrings=True
    )


# --------------------------------------------------------------------------- hardware


CPU_DEFAULTS: dict[str, Any] = {
    "flops": "2TFLOPS",
    "efficiency": 1.0,
    "memory": "1TB",
    "memory_bandwidth": "200GB/s",
}
"""What a CPU has when the scenario does not say (YAML keys and spellings)."""


class DeviceSpec(_Spec):
    """A compute device.  The defaults are those of a GPU (an A100); see :data:`CPU_DEFAULTS`."""

    flops_per_s: FlopRate = _unit("312TFLOPS", "flops")
    """Peak compute rate, FLOP/s."""
    efficiency: Float = Field(1.0, gt=0, le=1)
    """Fraction of the peak that is reached (0 < e <= 1)."""
    memory_bytes: Size = _unit("80GB", "memory")
    """Memory capacity, bytes."""
    memory_bandwidth_Bps: Bandwidth = _unit("2TB/s", "memory_bandwidth")
    """Memory bandwidth, bytes per second."""


def _with_cpu_defaults(device: object, model: type[BaseModel] = DeviceSpec) -> object:
    """``device`` (raw YAML mapping) with the CPU defaults for every key it does not give."""
    if not isinstance(device, dict):
        return device
    filled = dict(device)
    for key, value in CPU_DEFAULTS.items():
        name = next(n for n, f in model.model_fields.items() if (f.alias or n) == key)
        if key not in filled and name not in filled:
            filled[key] = value
    return filled


class LinkSpec(_Spec):
    """A full-duplex connection: one link each way, each with this bandwidth and latency."""

    bandwidth_Bps: Bandwidth = Field(alias="bandwidth")
    """Bandwidth of each direction, bytes per second."""
    latency_s: TimeSpan = _unit("0", "latency")
    """Latency of each direction, seconds."""


class NvlinkSpec(LinkSpec):
    """GPU-to-GPU links inside a node."""

    pairs: list[tuple[GpuIndex, GpuIndex]] | None = None
    """GPU index pairs joined by a link; absent means an NVSwitch joining all GPUs."""


class NodeSpec(_Spec):
    """One server: GPUs and a CPU on PCIe, optional NVLink, one NIC or several."""

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

    @model_validator(mode="before")
    @classmethod
    def _cpu_defaults(cls, data: Any) -> Any:
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


def _pair_problems(pairs: Sequence[tuple[int, int]], gpus: int) -> list[Problem]:
    """What is wrong with NVLink ``pairs`` in a node of ``gpus`` GPUs."""
    problems: list[Problem] = []
    seen: dict[frozenset[int], int] = {}
    for i, (a, b) in enumerate(pairs):
        path = join_path("nvlink", "pairs", i)
        if a >= gpus or b >= gpus:
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

    oversubscription: Float | None = Field(None, gt=0)
    """Uplink bandwidth = nodes_per_rack x NIC bandwidth / oversubscription."""
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


MAX_CHANNELS = 64
"""Most channels a collective may run in (NCCL's limit)."""
MAX_DEVICES = 262_144
"""Most devices (GPUs and CPUs) a cluster may have; checked before anything is built."""
MAX_LINKS = 1_000_000
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


class TwoTierCluster(_Spec):
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


class ThreeTierCluster(_Spec):
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


class RailOptimizedCluster(_Spec):
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


class FlatCluster(_Spec):
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


class CustomCluster(_Spec):
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


CLUSTER_KINDS = (
    "two_tier",
    "three_tier",
    "rail_optimized",
    "switch",
    "ring",
    "fully_connected",
    "custom",
)
"""Every value of ``cluster.kind``."""

TAG_ERROR = "clustersim_tag"
"""Error type of the discriminators below; :func:`validate_model` explains it."""


def _tag_of(key: str, default: str | None = None) -> Callable[[Any], str | None]:
    """Discriminator function: the string under ``key`` of a mapping (or its attribute)."""

    def tag(data: Any) -> str | None:
        value = data.get(key, default) if isinstance(data, dict) else getattr(data, key, None)
        return value if isinstance(value, str) else None

    return tag


def _tagged(key: str, choices: Sequence[str], default: str | None = None) -> Discriminator:
    """A discriminator on ``key`` whose errors :func:`validate_model` words itself."""
    return Discriminator(
        _tag_of(key, default),
        custom_error_type=TAG_ERROR,
        custom_error_message=f"unknown {key}",
        custom_error_context={"key": key, "choices": ", ".join(choices)},
    )


ClusterSpec = Annotated[
    Annotated[TwoTierCluster, Tag("two_tier")]
    | Annotated[ThreeTierCluster, Tag("three_tier")]
    | Annotated[RailOptimizedCluster, Tag("rail_optimized")]
    | Annotated[FlatCluster, Tag("switch")]
    | Annotated[FlatCluster, Tag("ring")]
    | Annotated[FlatCluster, Tag("fully_connected")]
    | Annotated[CustomCluster, Tag("custom")],
    _tagged("kind", CLUSTER_KINDS, default="two_tier"),
]
"""A cluster of any kind; ``kind`` chooses, ``two_tier`` when absent."""

# --------------------------------------------------------------------------- stragglers


class LognormalSlowdown(_Spec):
    """Slowdown factor exp(N(mu, sigma))."""

    dist: Literal["lognormal"]
    """The distribution."""
    sigma: Float = Field(ge=0)
    """Standard deviation of the underlying normal."""
    mu: Float = 0.0
    """Mean of the underlying normal."""


class ExponentialSlowdown(_Spec):
    """Slowdown drawn from an exponential distribution."""

    dist: Literal["exponential"]
    """The distribution."""
    scale: Float = Field(gt=0)
    """Mean of the exponential."""


class UniformSlowdown(_Spec):
    """Slowdown factor uniform in [low, high]."""

    dist: Literal["uniform"]
    """The distribution."""
    low: Float = Field(gt=0)
    """Smallest factor."""
    high: Float = Field(gt=0)
    """Largest factor (at least ``low``)."""

    @model_validator(mode="after")
    def _ordered(self) -> UniformSlowdown:
        if self.high < self.low:
            raise Invalid(
                Problem("high", f"must be at least low ({self.low:g}), got {self.high:g}")
            )
        return self


SLOWDOWN_DISTS = ("lognormal", "exponential", "uniform")
"""Every value of ``slowdown.dist``."""

SlowdownDist = Annotated[
    Annotated[LognormalSlowdown, Tag("lognormal")]
    | Annotated[ExponentialSlowdown, Tag("exponential")]
    | Annotated[UniformSlowdown, Tag("uniform")],
    _tagged("dist", SLOWDOWN_DISTS),
]
"""A random slowdown distribution; ``dist`` chooses."""


class FixedStraggler(_Spec):
    """Devices that are always slower by a fixed factor."""

    devices: Glob
    """Which devices (pattern over device names)."""
    slowdown: Float = Field(gt=0)
    """Compute time multiplier (2 = twice as slow)."""


class RandomStragglerSpec(_Spec):
    """Per-iteration random slowdowns drawn from a seeded distribution."""

    devices: Glob = "*"
    """Which devices may straggle."""
    fraction: Float = Field(1.0, gt=0, le=1)
    """Fraction of those devices that straggle in each iteration."""
    slowdown: SlowdownDist
    """Distribution of the slowdown factor."""


class RandomStraggler(_Spec):
    """Random stragglers: ``{random: {...}}``."""

    random: RandomStragglerSpec
    """The random slowdown."""


class LinkStraggler(_Spec):
    """Links whose bandwidth is scaled during a time window."""

    links: Glob
    """Which links (pattern over link names ``src->dst``)."""
    bandwidth_factor: Float = Field(gt=0)
    """Bandwidth multiplier during the window (0.5 = half speed)."""
    start_s: TimeSpan = _unit("0", "start")
    """Window start, seconds of simulated time."""
    end_s: TimeSpan = Field(math.inf, alias="end")
    """Window end, seconds of simulated time (default: never)."""

    @model_validator(mode="after")
    def _ordered(self) -> LinkStraggler:
        if self.end_s <= self.start_s:
            raise Invalid(Problem("end", "must be later than start"))
        return self


STRAGGLER_FORMS = (
    "{devices: GLOB, slowdown: FACTOR} | {random: {devices, fraction, slowdown: {dist, ...}}} "
    "| {links: GLOB, bandwidth_factor: FACTOR, start: TIME, end: TIME}"
)
"""The three straggler forms, for messages."""


_STRAGGLER_TAGS: dict[type[BaseModel], str] = {
    FixedStraggler: "fixed straggler",
    RandomStraggler: "random straggler",
    LinkStraggler: "link straggler",
}
"""Internal union tags of the straggler forms (never a YAML key, so never in a path)."""


def _straggler_form(data: Any) -> str | None:
    """Which straggler form ``data`` is, told by its keys."""
    if isinstance(data, BaseModel):
        return _STRAGGLER_TAGS.get(type(data))
    if not isinstance(data, dict):
        return None
    if "random" in data:
        return _STRAGGLER_TAGS[RandomStraggler]
    if "links" in data or "bandwidth_factor" in data:
        return _STRAGGLER_TAGS[LinkStraggler]
    if "devices" in data or "slowdown" in data:
        return _STRAGGLER_TAGS[FixedStraggler]
    return None


StragglerSpec = Annotated[
    Annotated[FixedStraggler, Tag(_STRAGGLER_TAGS[FixedStraggler])]
    | Annotated[RandomStraggler, Tag(_STRAGGLER_TAGS[RandomStraggler])]
    | Annotated[LinkStraggler, Tag(_STRAGGLER_TAGS[LinkStraggler])],
    Discriminator(
        _straggler_form,
        custom_error_type=TAG_ERROR,
        custom_error_message="matches none of the three straggler forms",
        custom_error_context={"allowed": STRAGGLER_FORMS},
    ),
]
"""A straggler of one of three forms: fixed, random or link."""

# --------------------------------------------------------------------------- scenario


# --------------------------------------------------------------------------- training


class LayerSpec(_Spec):
    """One layer (or a block repeated ``repeat`` times) of a model given by hand."""

    name: Annotated[str, Field(min_length=1)]
    """Name of the layer, shown in the timeline."""
    params: FlopCount
    """Number of parameters (a count, e.g. 2.4e6)."""
    flops: FlopCount
    """Forward FLOPs per sample."""
    backward_flops: FlopCount | None = None
    """Backward FLOPs per sample (default: 2 x forward)."""
    activations: Size = _unit("0B", "activations")
    """Activation bytes stored per sample for backward."""
    repeat: Count = 1
    """How many identical copies of the layer follow one another."""


class TransformerSpec(_Spec):
    """A transformer given by its architecture (the keys of the transformer presets)."""

    layers: Count
    """Transformer blocks (l)."""
    hidden: Count
    """Hidden size (h)."""
    heads: Count
    """Attention heads (a); must divide ``hidden``."""
    seq: Count
    """Sequence length (s): tokens per sample."""
    vocab: Count
    """Vocabulary size (V)."""
    ffn: Count | None = None
    """Feed-forward width (default 4 x hidden)."""
    kv_heads: Count | None = None
    """Key/value heads for grouped-query attention (default: heads)."""
    gated_ffn: Bool = False
    """Gated feed-forward (SwiGLU, LLaMA): three matrices instead of two."""
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    """Normalisation: layernorm (scale and shift) or rmsnorm (scale only)."""
    bias: Bool = True
    """Linear layers have biases (GPT, BERT) or not (LLaMA)."""
    head: Literal["tied", "untied", "none"] = "tied"
    """LM head: sharing the token embedding (tied), its own matrix (untied) or none."""
    positions: Literal["learned", "rotary"] = "learned"
    """Position embeddings: learned (one vector per position) or rotary (no parameters)."""
    dropout: Bool = True
    """Dropout layers (GPT, BERT) or none (LLaMA): their masks count as stored activations."""

    @model_validator(mode="after")
    def _heads_divide(self) -> TransformerSpec:
        if self.hidden % self.heads:
            raise Invalid(
                Problem(
                    "heads",
                    f"{self.heads} heads do not divide hidden {self.hidden}",
                    "a divisor of hidden",
                )
            )
        if self.kv_heads is not None and self.heads % self.kv_heads:
            raise Invalid(
                Problem(
                    "kv_heads",
                    f"{self.kv_heads} key/value heads do not divide {self.heads} heads",
                    "a divisor of heads",
                )
            )
        return self


class ModelSpec(_Spec):
    """The model: a preset computed from its architecture, a transformer, or a list of layers."""

    preset: str | None = None
    """Preset name, e.g. gpt3-175b, llama2-70b, bert-large, resnet50 (``clustersim list models``)."""
    transformer: TransformerSpec | None = None
    """A transformer given by its architecture (instead of a preset)."""
    layers: list[LayerSpec] | None = None
    """Layers given by hand (instead of a preset)."""

    @model_validator(mode="after")
    def _one_source(self) -> ModelSpec:
        given = [x is not None for x in (self.preset, self.transformer, self.layers)]
        if sum(given) != 1:
            raise Invalid(
                Problem(
                    "",
                    "give exactly one of preset, transformer or layers",
                    "preset: NAME, transformer: {layers, hidden, heads, seq, vocab} or layers: [...]",
                )
            )
        if self.layers is not None and not self.layers:
            raise Invalid(Problem("layers", "needs at least one layer"))
        return self


class TrainingSpec(_Spec):
    """How training runs: batch, iterations, number format, optimizer."""

    global_batch: Count
    """Samples per iteration over all data-parallel workers."""
    iterations: Count = 3
    """Training iterations to simulate."""
    precision: Literal["fp32", "fp16", "bf16"] = "fp32"
    """Number format of gradients and communicated values (4 or 2 bytes)."""
    optimizer: Literal["sgd", "momentum", "adam"] = "sgd"
    """Optimizer; its step costs memory traffic (bytes per parameter: sgd 12, momentum 20, adam 28)."""
    micro_batch: Count | None = None
    """Samples per micro-batch (pipeline/tensor parallel: sets micro-batches per iteration to
    global_batch / (dp x micro_batch)); default: from ``pipeline.micro_batches``."""
    recompute: Literal["none", "selective", "full"] | None = None
    """Activation recomputation: none, selective (attention scores and softmax, Korthikanti
    et al. 2022) or full (each transformer block re-runs its forward in backward; only block
    inputs are stored).  Default: full if ``pipeline.recompute`` is true, else none."""


class AllreduceSyncSpec(_Spec):
    """Gradient all-reduce as PyTorch DDP and Horovod do it."""

    algorithm: str = "ring"
    """Collective algorithm (``clustersim list algorithms``)."""
    bucket: Size = _unit("25MB", "bucket")
    """Gradient bucket size; a full bucket is all-reduced at once."""
    overlap: Bool = True
    """All-reduce buckets while backward goes on (false: wait for the whole backward)."""
    options: dict[str, Any] = {}
    """Algorithm options (hierarchical: inter, intra)."""
    channels: Annotated[int, Strict(), Field(ge=1, le=MAX_CHANNELS)] | None = None
    """Channels of each gradient collective: equal slices that run at once, at most 64
    (default: ``network.channels``)."""


class ParameterServerSpec(_Spec):
    """Parameter servers: placement, sharding and consistency mode."""

    placement: Literal["cpu", "gpu", "dedicated", "sharded"] = "cpu"
    """cpu: the CPU of worker node(s); gpu: one GPU; dedicated: server nodes that do not
    train; sharded: every worker is also a server."""
    servers: Count = 1
    """Number of servers the parameters are sharded over (sharded: every worker)."""
    server_devices: Glob | None = None
    """Which devices serve (default: by placement; dedicated: the CPUs of the last nodes)."""
    mode: Literal["sync", "backup", "async", "ssp", "geo"] = "sync"
    """sync: wait for every worker; backup: go on after the first k pushes; async: no waiting;
    ssp: bounded staleness; geo: local steps, push deltas every k steps."""
    backup_k: Count | None = None
    """backup: how many pushes the server waits for (default: 90% of the workers, rounded up)."""
    staleness: Int = Field(2, ge=0)
    """ssp: how many iterations a worker may run ahead of the slowest."""
    geo_period: Count = 4
    """geo: local steps between pushes of parameter deltas."""


class DataParallelSpec(_Spec):
    """Data parallelism: how gradients are synchronised."""

    sync: Literal["allreduce", "ps"] = "allreduce"
    """allreduce or ps (parameter servers)."""
    workers: Glob = "*/gpu*"
    """Devices that train (data-parallel ranks)."""
    allreduce: AllreduceSyncSpec = AllreduceSyncSpec()
    """Settings of sync: allreduce."""
    ps: ParameterServerSpec = ParameterServerSpec()
    """Settings of sync: ps."""


ParallelAxis = Literal["tp", "pp", "dp"]


class ParallelismSpec(_Spec):
    """How the workers are split into data-, tensor- and pipeline-parallel groups."""

    dp: Count | None = None
    """Data-parallel replicas (default: workers / (pp x tp)); dp x tp x pp must equal the workers."""
    pp: Count = 1
    """Pipeline stages."""
    tp: Count = 1
    """Tensor-parallel degree (Megatron-LM 1-D): GPUs that split each layer."""
    order: list[ParallelAxis] = ["tp", "pp", "dp"]
    """How ranks map onto the workers, innermost first: consecutive workers form a group of the
    first axis (default: tensor groups inside a node, then pipeline stages, then replicas)."""
    allow_cross_node_tp: Bool = False
    """Allow a tensor-parallel group to span nodes (normally an error: TP needs NVLink)."""
    sequence_parallel: Bool = False
    """Megatron sequence parallelism: reduce-scatter + all-gather in place of each TP all-reduce;
    layer-norm and dropout activations are split over the TP group."""
    tp_algorithm: str = "ring"
    """Collective algorithm of the tensor-parallel all-reduces (``clustersim list algorithms``)."""
    simulate_replicas: Literal["all", "one"] = "all"
    """``one``: simulate data-parallel replica 0 only and run the data-parallel collectives
    in the congestion-aware analytical model -- dp times fewer events, for identical replicas
    (no stragglers); what ``clustersim plan`` uses."""

    @model_validator(mode="after")
    def _order_is_permutation(self) -> ParallelismSpec:
        if sorted(self.order) != ["dp", "pp", "tp"]:
            raise Invalid(
                Problem(
                    "order",
                    f"{list(self.order)} is not an order of the three axes",
                    "each of tp, pp, dp once, innermost first, e.g. [tp, pp, dp]",
                )
            )
        return self


class ZeroSpec(_Spec):
    """ZeRO (Rajbhandari et al. 2020) / FSDP: sharding model states over data-parallel ranks."""

    stage: Literal[0, 1, 2, 3, "fsdp"] = 0
    """0: plain data parallel; 1: optimizer states sharded; 2: + gradients; 3 (or fsdp):
    + parameters, all-gathered layer by layer before forward and backward."""
    prefetch: Bool = True
    """Stage 3: all-gather the next layer's parameters while the current layer computes."""

    @property
    def level(self) -> int:
        """The stage as a number (fsdp is 3)."""
        return 3 if self.stage == "fsdp" else int(self.stage)


class PipelineSpec(_Spec):
    """Pipeline parallelism: schedule, micro-batches, stage split."""

    schedule: Literal["naive", "gpipe", "1f1b", "interleaved"] = "1f1b"
    """naive: one micro-batch through all stages; gpipe: all forwards then all backwards;
    1f1b: PipeDream-Flush; interleaved: 1F1B over ``chunks`` model chunks per device."""
    micro_batches: Count = 8
    """Micro-batches per iteration (the global batch is split among them)."""
    chunks: Count = 1
    """interleaved: model chunks per device (v)."""
    recompute: Bool = False
    """Activation recomputation: backward re-runs the forward; only stage inputs are stored."""
    stage_layers: list[Count] | None = None
    """Layers per stage (virtual stage for interleaved), input first; default: balanced by compute time."""


class NetworkSpec(_Spec):
    """How communication is priced."""

    model: Literal["flow", "analytical"] = "flow"
    """``flow`` (flow-level max-min, default): every transfer, every send of a collective
    included, is a flow sharing links max-min fairly; ``analytical`` (congestion-aware
    analytical): each collective is a few weighted flows priced by its algorithm's
    alpha-beta cost, sharing links with everything in flight (few events; large sweeps)."""
    channels: Annotated[int, Strict(), Field(ge=1, le=MAX_CHANNELS)] = 1
    """Channels per collective (NCCL's, at most 64): each collective runs as this many equal
    slices at once on its ranks.  Collectives of one process group always run one after
    another."""
    protocol: Literal["LL", "LL128", "Simple", "auto"] | None = None
    """NCCL protocol priced on top of the links for every collective: ``LL``, ``LL128``,
    ``Simple`` (base and per-hop latency, payload share of the wire; see
    ``clustersim/collectives/protocol.py``), or ``auto`` (the fastest by the cost model, per
    collective).  Default: none, sends cost only what the links give."""


class Scenario(_Spec):
    """A whole scenario: the cluster, its stragglers, and the workload to run on it."""

    name: Annotated[str, Field(min_length=1)]
    """Name of the scenario."""
    seed: Int = Field(0, ge=0)
    """Seed of every random choice; same seed, same result."""
    description: str = ""
    """What the scenario shows."""
    cluster: ClusterSpec
    """The hardware."""
    stragglers: list[StragglerSpec] = []
    """Slow devices and degraded links."""
    network: NetworkSpec = NetworkSpec()
    """How communication is priced (flow-level by default)."""
    model: ModelSpec | None = None
    """The model trained (training scenarios)."""
    training: TrainingSpec | None = None
    """Batch, iterations, precision, optimizer (training scenarios)."""
    data_parallel: DataParallelSpec | None = None
    """Gradient synchronisation (training scenarios; default all-reduce over every GPU)."""
    parallelism: ParallelismSpec | None = None
    """Split of the workers into data-parallel and pipeline groups (training scenarios)."""
    pipeline: PipelineSpec | None = None
    """Pipeline schedule (training scenarios with parallelism.pp > 1)."""
    zero: ZeroSpec | None = None
    """ZeRO stage / FSDP (training scenarios)."""
    workload: dict[str, Any] | None = Field(None, min_length=1)
    """What runs, for scenarios that are not training: checked by the workload plugin named
    by its key (program, collective)."""

    @model_validator(mode="after")
    def _workload_or_training(self) -> Scenario:
        training = {"model": self.model, "training": self.training}
        if self.workload is not None:
            given = [k for k, v in training.items() if v is not None]
            sections = (self.data_parallel, self.pipeline, self.parallelism, self.zero)
            if given or any(x is not None for x in sections):
                raise Invalid(
                    Problem(
                        "workload",
                        "a scenario runs either a workload or training (model, training), not both",
                    )
                )
            return self
        missing = [k for k, v in training.items() if v is None]
        if len(missing) == 2:
            raise Invalid(
                Problem(
                    "",
                    "nothing to run: give workload (program, collective) or model and training",
                    "workload: {...} or model: {...} with training: {...}",
                )
            )
        if missing:
            raise Invalid(Problem(missing[0], "required key missing for a training scenario"))
        return self

    _source: str = PrivateAttr("")

    @property
    def source(self) -> str:
        """The file the scenario came from ("" if none)."""
        return self._source


def parse_scenario(doc: object, source: str = "") -> Scenario:
    """Validate a loaded document; raise :class:`ScenarioError` listing every problem."""
    if not isinstance(doc, dict):
        got = "an empty document" if doc is None else _describe(doc)
        raise ScenarioError(
            Problem("", f"a scenario must be a mapping of keys to values, got {got}"), source
        )
    scenario = validate_model(Scenario, doc, source=source)
    scenario._source = source
    return scenario


# --------------------------------------------------------------------------- errors


def validate_model(model_cls: type[M], data: Any, path_prefix: str = "", source: str = "") -> M:
    """``model_cls`` validated from ``data``, or :class:`ScenarioError` with every problem.

    Paths use the YAML key names and list indices, prefixed with ``path_prefix``
    (e.g. ``"workload.program"``); ``source`` names the file in the messages.
    """
    try:
        return model_cls.model_validate(data)
    except ValidationError as exc:
        problems = _problems(model_cls, data, exc.errors(include_url=False))
        prefixed = [Problem(join_path(path_prefix, p.path), p.message, p.allowed) for p in problems]
        raise ScenarioError(prefixed, source) from None


def _problems(model_cls: type[BaseModel], data: Any, errors: Sequence[Any]) -> list[Problem]:
    """Pydantic errors as problems: plain words, YAML paths, document order, no duplicates."""
    found: list[Problem] = []
    for error in errors:
        found.extend(_error_problems(model_cls, error))
    unique = list(dict.fromkeys(found))
    return sorted(unique, key=lambda p: _document_position(data, p.path))


def _error_problems(model_cls: type[BaseModel], error: Any) -> list[Problem]:
    """The problems one pydantic error stands for."""
    loc = tuple(error["loc"])
    parts, annotation = _walk(model_cls, loc)
    _, parent = _walk(model_cls, loc[:-1])
    path = join_path(*parts)
    kind = error["type"]
    exc = error.get("ctx", {}).get("error")
    if isinstance(exc, Invalid):
        return [Problem(join_path(path, p.path), p.message, p.allowed) for p in exc.problems]
    if kind == TAG_ERROR:
        return [_tag_problem(path, error)]
    if kind == "extra_forbidden":
        return [_unknown_key_problem(path, parts[-1] if parts else "", parent)]
    if kind == "missing" and _tuple_length(parent):
        parent_path = join_path(*parts[:-1])
        return [Problem(parent_path, f"must have exactly {_tuple_length(parent)} items")]
    message, allowed = _message(error, annotation)
    return [Problem(path, message, allowed)]


def _unknown_key_problem(path: str, key: object, model: Any) -> Problem:
    """An unknown key, with a did-you-mean hint and the keys allowed at its place."""
    keys = _model_keys(model)
    return Problem(path, hinted("unknown key", key, keys), ", ".join(keys))


def _tag_problem(path: str, error: Any) -> Problem:
    """A value that matches no member of a tagged union (e.g. an unknown ``kind``)."""
    ctx, data = error.get("ctx", {}), error.get("input")
    key, choices = ctx.get("key"), ctx.get("choices", "")
    allowed = choices or ctx.get("allowed", "")
    if not isinstance(data, dict):
        got = _describe(data)
        return Problem(
            path, f"must be a mapping of keys to values, got {got}", ctx.get("allowed", "")
        )
    if key is None:
        return Problem(path, error["msg"], allowed)
    if key not in data:
        return Problem(join_path(path, key), "required key missing", allowed)
    value = data[key]
    message = hinted(f"unknown {key} {_describe(value)}", value, choices.split(", "))
    return Problem(join_path(path, key), message, allowed)


_SIMPLE_MESSAGES = {
    "missing": "required key missing",
    "int_type": "must be a whole number, got {got}",
    "int_parsing": "must be a whole number, got {got}",
    "int_from_float": "must be a whole number, got {got}",
    "float_type": "must be a number, got {got}",
    "float_parsing": "must be a number, got {got}",
    "finite_number": "must be a finite number, got {got}",
    "bool_type": "must be true or false, got {got}",
    "bool_parsing": "must be true or false, got {got}",
    "string_type": "must be text, got {got}",
    "list_type": "must be a list, got {got}",
    "tuple_type": "must be a list, got {got}",
    "set_type": "must be a list, got {got}",
    "dict_type": "must be a mapping of keys to values, got {got}",
    "model_type": "must be a mapping of keys to values, got {got}",
    "model_attributes_type": "must be a mapping of keys to values, got {got}",
    "greater_than": "must be greater than {gt}, got {got}",
    "greater_than_equal": "must be at least {ge}, got {got}",
    "less_than": "must be less than {lt}, got {got}",
    "less_than_equal": "must be at most {le}, got {got}",
    "multiple_of": "must be a multiple of {multiple_of}, got {got}",
    "none_required": "must be empty (null), got {got}",
}


def _message(error: Any, annotation: Any) -> tuple[str, str]:
    """(message, allowed) for one pydantic error, in plain words."""
    kind, ctx = error["type"], dict(error.get("ctx", {}))
    got = _describe(error.get("input"))
    if kind in _SIMPLE_MESSAGES:
        numbers = {k: f"{v:g}" if isinstance(v, float) else v for k, v in ctx.items()}
        return _SIMPLE_MESSAGES[kind].format(got=got, **numbers), ""
    if kind in ("literal_error", "enum"):
        return _choice_message(error.get("input"), annotation, ctx)
    if kind in ("value_error", "assertion_error"):
        exc = ctx.get("error")
        return str(exc), getattr(exc, "allowed", "")
    if kind in ("too_short", "too_long", "string_too_short", "string_too_long"):
        return _length_message(kind, ctx, annotation), ""
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        return _builtin_tag_message(kind, ctx)
    return _plain(error["msg"]), ""


def _choice_message(value: object, annotation: Any, ctx: Mapping[str, Any]) -> tuple[str, str]:
    """A value that is not one of a fixed set of choices."""
    choices = [str(c) for c in typing.get_args(annotation)] if _is_literal(annotation) else []
    allowed = ", ".join(choices) or str(ctx.get("expected", "")).replace("'", "")
    return hinted(f"unknown value {_describe(value)}", value, choices), allowed


def _length_message(kind: str, ctx: Mapping[str, Any], annotation: Any) -> str:
    """Too few or too many items (or characters)."""
    exact = _tuple_length(annotation)
    if exact:
        return f"must have exactly {exact} items, got {ctx.get('actual_length', 'another number')}"
    if kind == "string_too_short" and ctx.get("min_length") == 1:
        return "must not be empty"
    if kind == "too_short" and ctx.get("min_length") == 1:
        return "must not be empty"
    unit = "characters" if kind.startswith("string") else "items"
    if "short" in kind:
        return f"must have at least {ctx.get('min_length')} {unit}"
    return f"must have at most {ctx.get('max_length')} {unit}"


def _builtin_tag_message(kind: str, ctx: Mapping[str, Any]) -> tuple[str, str]:
    """Pydantic's own discriminator errors (models that do not use :func:`_tagged`)."""
    key = str(ctx.get("discriminator", "")).strip("'")
    allowed = str(ctx.get("expected_tags", "")).replace("'", "")
    if kind == "union_tag_not_found":
        return f"required key {key!r} missing", allowed
    tag = str(ctx.get("tag", ""))
    return hinted(f"unknown {key} {tag!r}", tag, allowed.split(", ")), allowed


def _plain(message: str) -> str:
    """Pydantic's wording of an uncommon error, without its jargon."""
    message = re.sub(r"^Input should be", "must be", message)
    message = re.sub(r"\bvalid ", "", message)
    return message.replace("Input", "value")


def _describe(value: object) -> str:
    """A short description of a YAML value, for 'got ...'."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# --------------------------------------------------------------------------- walking types


def _walk(model_cls: type[BaseModel], loc: Sequence[str | int]) -> tuple[list[str | int], Any]:
    """Follow a pydantic error location through the model's types.

    Returns the user's key path (union member tags and validator labels dropped)
    and the type found at its end (``None`` once the types are lost).
    """
    parts: list[str | int] = []
    annotation: Any = model_cls
    for item in loc:
        annotation = _unwrap(annotation)
        if _is_union(annotation):
            annotation = _union_member(annotation, item)
            continue
        parts.append(item)
        annotation = _child(annotation, item)
    return parts, _unwrap(annotation)


def _unwrap(annotation: Any) -> Any:
    """``annotation`` without ``Annotated[...]`` and without ``| None``."""
    while True:
        if typing.get_origin(annotation) is Annotated:
            annotation = typing.get_args(annotation)[0]
        elif _is_union(annotation, count_none=False):
            members = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(members) != 1:
                return annotation
            annotation = members[0]
        else:
            return annotation


def _is_union(annotation: Any, count_none: bool = True) -> bool:
    """Whether ``annotation`` is a union (with two or more members besides None if ``count_none``)."""
    if typing.get_origin(annotation) not in (Union, types.UnionType):
        return False
    members = [a for a in typing.get_args(annotation) if a is not type(None)]
    return len(members) > 1 or not count_none


def _union_member(union: Any, label: object) -> Any:
    """The member of ``union`` that pydantic labelled ``label`` (a tag or a class name)."""
    for member in typing.get_args(union):
        metadata = getattr(member, "__metadata__", ())
        if any(isinstance(m, Tag) and m.tag == label for m in metadata):
            return member
        if getattr(_unwrap(member), "__name__", None) == label:
            return member
    return None


def _child(annotation: Any, item: str | int) -> Any:
    """The type of ``annotation``'s part ``item``: a field, a list item, a mapping value."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        for name, field in annotation.model_fields.items():
            if item in (name, field.alias):
                return _field_type(field)
        return None
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (list, set, frozenset) or (origin is tuple and len(args) == 2 and args[1] is ...):
        return args[0] if args else Any
    if origin is tuple and isinstance(item, int) and item < len(args):
        return args[item]
    if origin in (dict, Mapping) and len(args) == 2:
        return args[1]
    return None


def _field_type(field: Any) -> Any:
    """A field's annotation, with its discriminator (kept apart by pydantic) put back."""
    if field.discriminator is not None:
        return Annotated[field.annotation, field.discriminator]
    return field.annotation


def _is_literal(annotation: Any) -> bool:
    return typing.get_origin(annotation) is Literal


def _tuple_length(annotation: Any) -> int:
    """The length of a fixed-length tuple type, else 0."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is tuple and args and args[-1] is not ...:
        return len(args)
    return 0


def _model_keys(model: Any) -> list[str]:
    """The YAML keys of ``model`` (empty if it is not a model)."""
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return []
    return [field.alias or name for name, field in model.model_fields.items()]


_PATH_PART = re.compile(r"\[(\d+)\]|([^.\[\]]+)")


def _document_position(data: Any, path: str) -> tuple[int, ...]:
    """Where ``path`` is in ``data``: the position of each key or index along it."""
    position: list[int] = []
    for index, key in _PATH_PART.findall(path):
        if isinstance(data, dict):
            keys = list(data)
            position.append(keys.index(key) if key in data else len(keys))
            data = data.get(key)
        elif isinstance(data, list) and index:
            position.append(int(index))
            data = data[int(index)] if int(index) < len(data) else None
        else:
            position.append(0)
            data = None
    return tuple(position)


# --------------------------------------------------------------------------- YAML


MAX_YAML_NODES = 1_000_000
"""Largest document accepted, counted with every alias expanded (guards against alias bombs)."""
MAX_YAML_DEPTH = 100
"""Deepest nesting of lists and mappings accepted."""
MAX_FILE_BYTES = 16 * 1024 * 1024
"""Largest scenario file accepted, bytes (16 MiB)."""


_MERGE_TAG = "tag:yaml.org,2002:merge"


class _NodeCheck:
    """Checks of a composed YAML node graph before it is built into Python objects.

    Walks the graph once, each node once however many aliases point at it:
    counts the nodes the document would have with aliases expanded, refuses
    recursive aliases, and notes keys given twice in one mapping.
    """

    def __init__(self, loader: yaml.SafeLoader) -> None:
        self.loader = loader
        """Builds key values, so that ``1`` and ``01`` count as the same key."""
        self.duplicates: list[Problem] = []
        """Keys given twice, at their key path."""
        self._sizes: dict[int, int] = {}
        self._heights: dict[int, int] = {}
        self._active: set[int] = set()

    def size(self, node: Node, path: str = "", depth: int = 0) -> int:
        """Number of nodes under ``node`` (itself included) with aliases expanded.

        ``depth`` is how many lists and mappings hold ``node``; deeper than
        :data:`MAX_YAML_DEPTH` is refused.
        """
        if id(node) in self._sizes:
            self._check_depth(node, path, depth + self._heights[id(node)] - 1)
            return self._sizes[id(node)]
        self._check_depth(node, path, depth)
        if id(node) in self._active:
            raise ScenarioError(
                Problem(path, f"recursive alias at line {node.start_mark.line + 1}")
            )
        self._active.add(id(node))
        size, children = 1, self._children(node, path)
        for child, child_path in children:
            size += self.size(child, child_path, depth + 1)
        self._active.discard(id(node))
        self._sizes[id(node)] = min(
            size + len(children) * isinstance(node, MappingNode), MAX_YAML_NODES + 1
        )
        self._heights[id(node)] = 1 + max((self._heights[id(c)] for c, _ in children), default=0)
        return self._sizes[id(node)]

    def _children(self, node: Node, path: str) -> list[tuple[Node, str]]:
        """The items of a list or the values of a mapping, each with its key path."""
        if isinstance(node, SequenceNode):
            return [(child, join_path(path, i)) for i, child in enumerate(node.value)]
        if isinstance(node, MappingNode):
            self._note_duplicates(node, path)
            return [
                (value, join_path(path, key.value if isinstance(key, ScalarNode) else "?"))
                for key, value in node.value
            ]
        return []

    @staticmethod
    def _check_depth(node: Node, path: str, depth: int) -> None:
        if depth > MAX_YAML_DEPTH:
            line = node.start_mark.line + 1
            message = f"nested more than {MAX_YAML_DEPTH} levels deep (line {line})"
            raise ScenarioError(Problem(path, message, f"at most {MAX_YAML_DEPTH} levels"))

    def _note_duplicates(self, node: MappingNode, path: str) -> None:
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == _MERGE_TAG:
                continue
            key = self.loader.construct_object(key_node)
            line = key_node.start_mark.line + 1
            if key in first_line:
                message = f"duplicate key at line {line} (first at line {first_line[key]})"
                self.duplicates.append(Problem(join_path(path, str(key)), message))
            else:
                first_line[key] = line


class _Loader(yaml.SafeLoader):
    """The safe loader, refusing lists and mappings nested deeper than :data:`MAX_YAML_DEPTH`
    while it composes (so that a deep document fails fast, before the whole file is read)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH + 1:
                line = self.peek_event().start_mark.line + 1
                message = f"nested more than {MAX_YAML_DEPTH} levels deep (line {line})"
                raise ScenarioError(Problem("", message, f"at most {MAX_YAML_DEPTH} levels"))
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _yaml_problem(exc: yaml.YAMLError) -> Problem:
    """A YAML syntax error, with its line and column."""
    if isinstance(exc, yaml.reader.ReaderError):
        character = f"U+{exc.character:04X}" if isinstance(exc.character, int) else "a character"
        return Problem(
            "", f"invalid YAML: {character} at character {exc.position} is not allowed in YAML"
        )
    mark = getattr(exc, "problem_mark", None)
    what = " ".join(
        str(x) for x in (getattr(exc, "context", None), getattr(exc, "problem", None)) if x
    )
    if mark is None:
        return Problem("", f"invalid YAML: {what or exc}")
    return Problem("", f"invalid YAML at line {mark.line + 1}, column {mark.column + 1}: {what}")


def _load_yaml(text: str, source: str) -> object:
    """The document in ``text``: safe YAML, no duplicate keys, no alias bombs."""
    try:
        loader = _Loader(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(_yaml_problem(exc), source) from None
    try:
        node = loader.get_single_node()
        if node is None:
            message = "the file is empty; a scenario is a mapping of keys to values"
            raise ScenarioError(Problem("", message), source)
        check = _NodeCheck(loader)
        if check.size(node) > MAX_YAML_NODES:
            message = f"the document expands to more than {MAX_YAML_NODES:,} values through aliases"
            raise ScenarioError(Problem("", message), source)
        if check.duplicates:
            raise ScenarioError(check.duplicates, source)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise ScenarioError(_yaml_problem(exc), source) from None
    except RecursionError:
        message = f"the document is nested too deeply (at most {MAX_YAML_DEPTH} levels)"
        raise ScenarioError(Problem("", message), source) from None
    except ScenarioError as exc:
        raise exc.with_source(source) from None
    finally:
        loader.dispose()


def _read_text(path: str | Path, source: str) -> str:
    """The file's text; errors name the file."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise ScenarioError(Problem("", "file not found"), source) from None
    except OSError as exc:
        raise ScenarioError(Problem("", f"cannot read the file: {exc.strerror}"), source) from None
    if len(data) > MAX_FILE_BYTES:
        message = f"the file is larger than {MAX_FILE_BYTES // 2**20} MiB"
        raise ScenarioError(Problem("", message, f"at most {MAX_FILE_BYTES:,} bytes"), source)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ScenarioError(
            Problem("", f"not UTF-8 text (bad byte at offset {exc.start})"), source
        ) from None


def load_scenario(path: str | Path) -> Scenario:
    """Read, parse and validate the scenario file at ``path``; errors name the file."""
    source = str(path)
    doc = _load_yaml(_read_text(path, source), source)
    return parse_scenario(doc, source)


# --------------------------------------------------------------------------- JSON Schema


JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def scenario_json_schema(
    workload_schemas: Mapping[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of the scenario format, with YAML key names.

    ``workload_schemas`` maps each workload key (``"program"``) to the schema of
    the whole ``workload:`` mapping of that kind (an object schema whose
    properties include the key); ``workload`` then must be exactly one of them.
    """
    body = Scenario.model_json_schema(by_alias=True, mode="validation")
    body.pop("title", None)
    schema: dict[str, Any] = {
        "$schema": JSON_SCHEMA_DIALECT,
        "title": "clustersim scenario",
        **body,
    }
    if workload_schemas:
        defs = schema.setdefault("$defs", {})
        alternatives = [
            _workload_alternative(key, sub, defs) for key, sub in workload_schemas.items()
        ]
        schema["properties"]["workload"] = {
            "description": schema["properties"]["workload"].get("description", ""),
            "oneOf": alternatives,
        }
    return _finite(schema)


def _workload_alternative(key: str, sub: Mapping[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """``sub`` with ``key`` required; its own ``$defs`` move to the top, renamed if they clash."""
    sub = dict(sub)
    sub.pop("$schema", None)
    renames: dict[str, str] = {}
    for name, definition in sub.pop("$defs", {}).items():
        new = name
        while new in defs and defs[new] != definition:
            new = f"{key}.{new}"
        renames[name] = new
        defs[new] = definition
    sub = _renamed_refs(sub, renames)
    for new in renames.values():
        defs[new] = _renamed_refs(defs[new], renames)
    required = list(sub.get("required", []))
    if key not in required:
        required.insert(0, key)
    return {**sub, "type": "object", "required": required}


def _renamed_refs(schema: Any, renames: Mapping[str, str]) -> Any:
    """``schema`` with each ``#/$defs/OLD`` reference pointing to its new name."""
    if isinstance(schema, dict):
        out = {k: _renamed_refs(v, renames) for k, v in schema.items()}
        ref = out.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/") and ref[8:] in renames:
            out["$ref"] = "#/$defs/" + renames[ref[8:]]
        return out
    if isinstance(schema, list):
        return [_renamed_refs(v, renames) for v in schema]
    return schema


def _finite(schema: Any) -> Any:
    """``schema`` without non-finite numbers (JSON cannot hold them), e.g. a default of inf."""
    if isinstance(schema, dict):
        return {k: _finite(v) for k, v in schema.items() if not _non_finite(v)}
    if isinstance(schema, list):
        return [_finite(v) for v in schema if not _non_finite(v)]
    return schema


def _non_finite(value: object) -> bool:
    return isinstance(value, float) and not math.isfinite(value)
