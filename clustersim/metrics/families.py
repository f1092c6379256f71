"""The strategy part of summary.json, one typed class per strategy family.

Each class registers itself under the workload name its strategy writes in
``workload`` (``clustersim list summaries``); :meth:`StrategySummary.kind`
finds the class for a summary read back from disk.  A strategy without a class
of its own (a third-party plugin returning a dict) gets :class:`UntypedSummary`,
which keeps its keys as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..registry import Registered, Registry
from .parts import OPTIONAL, SPLICE, SummaryPart
from .training import DeviceShares, FlopRates, IterationTimes, ModelInfo

FAMILY_MODULES = (
    "clustersim.strategies.hybrid.summary",
    "clustersim.strategies.jobs.summary",
    "clustersim.strategies.parameter_server.summary",
)
"""The modules of the families' summary types that live beside their strategies (dotted
names: the registry imports them on its first lookup; this layer never imports them)."""


class StrategySummary(SummaryPart, Registered):
    """Base of the strategy parts; a subclass defining ``name`` (the workload) registers."""

    registry: ClassVar[Registry[type[StrategySummary]]] = Registry(
        "summaries", "summary layout", sort=True, builtins=FAMILY_MODULES
    )

    @classmethod
    def kind(cls, workload: object) -> type[StrategySummary]:
        """The registered class for ``workload`` (:class:`UntypedSummary` if none)."""
        found = cls.registry.get(workload) if isinstance(workload, str) else None
        return found if found is not None else UntypedSummary

    # What the outputs draw, for every family (empty where a family has none of it).

    def iteration_times(self) -> list[float]:
        """Seconds per iteration, in order ([] for a workload without iterations)."""
        return []

    def device_bubbles(self) -> Mapping[str, Any]:
        """Bubble fraction per device, where the strategy measures one ({} otherwise)."""
        return {}

    def stage_activations(self) -> Mapping[str, Any]:
        """Stored activations per pipeline stage, as summary.json holds them ({} if none)."""
        return {}

    def replicas(self) -> list[list[str]]:
        """The devices of each data-parallel replica, replica 0 first ([] for a workload
        without replicas); the simulated replica is replica 0 in one-replica mode."""
        return []


FRAME_KEYS = frozenset(
    ("scenario", "seed", "workload", "clustersim_version", "makespan_s")
    + ("mfu", "tokens_per_s", "time_to_train_s", "gpu_hours", "cost")
    + ("memory", "devices", "busiest_links", "engine", "folded")
)
"""Keys of the summary that are not the strategy's (the frame :class:`.summary.Summary`
puts around a strategy's part): what :class:`UntypedSummary` leaves out."""


@dataclass(frozen=True)
class UntypedSummary(StrategySummary):
    """A strategy part with no class of its own: its keys, kept as given."""

    keys: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.keys)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], lenient: bool = False) -> UntypedSummary:
        return cls({k: v for k, v in data.items() if k not in FRAME_KEYS})

    def __getattr__(self, name: str) -> Any:
        keys = self.__dict__.get("keys", {})
        if name in keys:
            return keys[name]
        raise AttributeError(name)

    def iteration_times(self) -> list[float]:
        return list(self.keys.get("iteration_times_s") or [])

    def device_bubbles(self) -> Mapping[str, Any]:
        return self.keys.get("per_device_bubble") or {}

    def stage_activations(self) -> Mapping[str, Any]:
        return self.keys.get("activation_memory") or {}


@dataclass(frozen=True)
class TrainingSummary(StrategySummary):
    """Base of the training families: their summaries start with the iteration times."""

    times: IterationTimes = field(metadata=SPLICE)

    def iteration_times(self) -> list[float]:
        return list(self.times.iteration_times_s or [])

    def job_workers(self) -> int:
        """Devices the job trains on: its ``workers`` (every replica's in one-replica mode)."""
        return len(getattr(self, "workers", None) or [])


@dataclass(frozen=True)
class FlopTrainingSummary(TrainingSummary):
    """Base of the training families that count FLOPs: after the times come the FLOP
    rates, the model, the workers and the global batch."""

    flops: FlopRates = field(metadata=SPLICE)
    model: ModelInfo
    workers: list[str]
    global_batch: float

    def replicas(self) -> list[list[str]]:
        """Each worker holds a whole replica (data parallelism, ZeRO)."""
        return [[w] for w in self.workers or []]


# ------------------------------------------------------------------ collective


@dataclass(frozen=True)
class CollectiveSummary(StrategySummary):
    """One collective repeated ``iterations`` times, as nccl-tests reports it."""

    name = "collective"
    description = "op, algorithm, ranks, bytes, time_s, algbw_GBps, busbw_GBps"

    op: str
    algorithm: str
    chosen: str
    """The algorithm (and protocol) that ran, ``auto`` resolved (``double_tree/LL``)."""
    ranks: int
    group: list[str]
    bytes: float
    iterations: int
    model: str
    """The network model that priced it (``flow`` or ``analytical``)."""
    time_s: float
    """Mean seconds per iteration."""
    times_s: list[float]
    algbw_GBps: float
    busbw_GBps: float
    bytes_sent_per_device: float
    protocol: str | None = field(default=None, metadata=OPTIONAL)
    """The protocol that ran (``auto`` resolved; ``none``: line rates, no protocol)."""
    channels: int | None = field(default=None, metadata=OPTIONAL)
    """Channels it ran in (``auto``: NCCL's count for the group)."""
    channels_played: int | None = field(default=None, metadata=OPTIONAL)
    """Slices simulated: the channels' distinct rotations when copies merge."""
    link_bandwidths_GBps: dict[str, float] | None = field(default=None, metadata=OPTIONAL)
    """Per link kind (NVLink, PCIe, NET), the bandwidth links were priced at: NCCL's figure
    where a protocol runs on a cluster of nodes (absent: line rates)."""


@dataclass(frozen=True)
class CollectivesRan(SummaryPart):
    """What ran for one kind of communicator of a training run (``auto`` resolved)."""

    algorithm: str
    """The algorithm asked for (``auto``: NCCL's choice)."""
    protocol: str
    """The protocol asked for (``auto``, ``LL``, ``LL128``, ``Simple`` or ``none``)."""
    channels: int
    """Channels per collective (``auto``: NCCL's count for the communicators' groups)."""
    chosen: dict[str, int]
    """``algorithm/protocol`` -> how many of one iteration's collectives ran so."""
    channels_played: int | None = field(default=None, metadata=OPTIONAL)
    """Slices simulated per collective, when fewer than ``channels`` (copies merged)."""


# ------------------------------------------------------------------ program


@dataclass(frozen=True)
class OperationTimes(SummaryPart):
    """When one hand-written operation ran (seconds)."""

    start_s: float
    end_s: float


@dataclass(frozen=True)
class ProgramSummary(StrategySummary):
    """Hand-written operations: when each ran."""

    name = "program"
    description = "operations: start_s and end_s of each operation"

    operations: dict[str, OperationTimes]


# ------------------------------------------------------------------ trace


@dataclass(frozen=True)
class ReplayedCollective(SummaryPart):
    """One collective of a replayed trace: as recorded, and as simulated (seconds)."""

    op: str
    name: str
    """The kernel's or node's name in the trace."""
    bytes: float
    group_size: int
    groups: int
    """Collectives it ran as (ranks / group_size blocks)."""
    start_s: float
    end_s: float
    time_s: float
    """Simulated seconds, mean over its groups."""
    trace_time_s: float
    """Its duration in the trace."""


@dataclass(frozen=True)
class TraceSummary(StrategySummary):
    """A replayed trace: its own span and compute next to the simulated ones."""

    name = "trace"
    description = "trace_span_s vs makespan_s, compute and communication, each collective"

    trace: str
    format: str
    ranks: int
    ops: int
    trace_span_s: float
    """The recorded rank's span (compare with makespan_s)."""
    trace_compute_s: float
    compute_s: float
    """Replayed compute per rank: trace_compute_s x compute_scale."""
    trace_communication_s: float
    communication_s: float
    """Simulated collective seconds, summed over the collectives."""
    collectives: dict[str, ReplayedCollective]


# ------------------------------------------------------------------ data parallel


@dataclass(frozen=True)
class BucketSizes(SummaryPart):
    """The gradient buckets: how many, and bytes each."""

    count: int
    bytes: list[float]


@dataclass(frozen=True)
class AllReduceTraffic(SummaryPart):
    """A data-parallel run's ``communication`` block."""

    op: str
    algorithm: str
    overlap: bool
    network_model: str
    bytes_per_iteration: float
    ran: CollectivesRan | None = field(default=None, metadata=OPTIONAL)
    """What the data-parallel collectives ran as (algorithm/protocol counts, channels)."""


@dataclass(frozen=True)
class DataParallelSummary(FlopTrainingSummary):
    """Bucketed gradient all-reduce (DDP/Horovod)."""

    name = "data_parallel"
    description = "training keys, buckets, communication (all-reduce bytes per iteration)"

    buckets: BucketSizes
    communication: AllReduceTraffic
    shares: DeviceShares = field(metadata=SPLICE)


# ------------------------------------------------------------------ ZeRO


@dataclass(frozen=True)
class ZeroSettings(SummaryPart):
    stage: int
    prefetch: bool


@dataclass(frozen=True)
class ShardedTraffic(SummaryPart):
    """A ZeRO run's ``communication`` block (bytes per iteration)."""

    bytes_per_iteration: float
    allgather_bytes: float
    reducescatter_bytes: float
    algorithm: str
    overlap: bool
    network_model: str
    ran: CollectivesRan | None = field(default=None, metadata=OPTIONAL)
    """What the ZeRO (reduce-scatter, all-gather) collectives ran as (algorithm/protocol counts, channels)."""


@dataclass(frozen=True)
class ZeroSummary(FlopTrainingSummary):
    """ZeRO stages 1-3 / FSDP."""

    name = "zero"
    description = "training keys, zero settings, buckets, reduce-scatter and all-gather bytes"

    zero: ZeroSettings
    zero_stage: int
    buckets: BucketSizes
    communication: ShardedTraffic
    shares: DeviceShares = field(metadata=SPLICE)
