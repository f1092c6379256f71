"""The parts clusters are built of: a link, NVLink, a node (its GPUs, CPU, PCIe, NVLink and
NICs) and the uplinks of a rack or pod, with the oversubscription ratios they allow.

The cluster kinds that assemble them are :mod:`.cluster`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    Strict,
    ValidationInfo,
    WithJsonSchema,
    model_validator,
)

from clustersim.errors import Problem, join_path
from clustersim.hardware.transport import TCP_MESSAGE_S, TCP_SHARE

from .devices import (
    CPU_DEFAULTS,
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
    _unit,
)
from .nvlink import NVLS_SHARE, nvlink_generation

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


class TcpSpec(_Spec):
    """What the kernel's TCP stack costs on a NIC (``nic.tcp``; defaults from measurements,
    :mod:`clustersim.hardware.transport`)."""

    share: Float = Field(TCP_SHARE, gt=0, le=1)
    """Bandwidth the NIC gives traffic over TCP, as a share of its line rate (0 < share <= 1;
    default 0.5: NCCL socket rings at 25-100 Gb/s)."""
    message_latency_s: TimeSpan = _unit(f"{TCP_MESSAGE_S * 1e6:g}us", "message_latency")
    """Seconds every message pays per TCP NIC it crosses (system calls and socket work of one
    send; default 12us, so 24us between two TCP nodes)."""


class NicSpec(LinkSpec):
    """A network card: its line rate and latency (each direction) and its ``transport``."""

    transport: Literal["rdma", "tcp"] = "rdma"
    """``rdma`` (kernel bypass: line rate, no host CPU; NCCL's NET share for its collectives)
    or ``tcp`` (the kernel's socket stack: a share of the line rate, a per-message latency
    and CPU time per byte; ``tcp`` tunes them)."""
    tcp: TcpSpec | None = None
    """TCP's costs, if not the measured defaults; only with ``transport: tcp``."""
    plugin_latency_s: TimeSpan = _unit("0", "plugin_latency")
    """Seconds NCCL's network plugin reports as the NIC's latency (``ncclNetProperties``'
    ``latency``, NCCL's ``latencyInter``), which NCCL's tuner adds to every network step of
    its latency model, twice with the Simple protocol (src/graph/tuning.cc: the flush):
    collectives across nodes pay it as NCCL prices them.  Default 0: NCCL's own InfiniBand
    and socket plugins report 0; aws-ofi-nccl reports 75us on p4d, p4de, p5 and p5e and 35us
    on p5en and p6 (src/platform-aws.cpp).  ``clustersim calibrate nccl-tests`` fits it."""

    @model_validator(mode="after")
    def _tcp_needs_tcp(self) -> NicSpec:
        if self.tcp is not None and self.transport != "tcp":
            raise Invalid(
                Problem(
                    "tcp",
                    f"TCP costs given for a NIC whose transport is {self.transport}",
                    "transport: tcp (to pay these costs), or no tcp key",
                )
            )
        return self

    def transport_phrase(self) -> str:
        """The transport in words, for the CLI (``NICs over TCP: 50% of 100 Gb/s, +12 us per
        message per NIC``; ``network plugin latency 75 us per network step``); empty over
        RDMA with no plugin latency."""
        phrases = []
        tcp = self.tcp_costs
        if tcp is not None:
            rate = f"{self.bandwidth_Bps * 8 / 1e9:g} Gb/s"
            extra = f"{tcp.message_latency_s * 1e6:g} us"
            phrases.append(
                f"NICs over TCP: {tcp.share:.0%} of {rate}, +{extra} per message per NIC"
            )
        if self.plugin_latency_s > 0:
            plugin = f"{self.plugin_latency_s * 1e6:g} us"
            phrases.append(
                f"network plugin latency {plugin} per network step (NCCL's latencyInter)"
            )
        return "; ".join(phrases)

    @property
    def tcp_costs(self) -> TcpSpec | None:
        """TCP's costs on this NIC (the defaults unless ``tcp`` gives them); None over RDMA."""
        if self.transport != "tcp":
            return None
        return self.tcp if self.tcp is not None else TcpSpec()


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
    nic: NicSpec
    """Each network card: its PCIe switch <-> top-of-rack switch, and its transport."""
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
