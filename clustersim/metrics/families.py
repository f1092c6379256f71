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
from .breakdown import DeviceTimes
from .parts import OPTIONAL, SPLICE, SummaryPart, plain
from .training import DeviceShares, FlopRates, IterationTimes, ModelInfo

FAMILY_MODULES = (
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


# ------------------------------------------------------------------ hybrid (pipeline)


@dataclass(frozen=True)
class IterationBubble(SummaryPart):
    """One device in one iteration of a pipeline run (seconds, and idle share)."""

    compute_s: float
    exposed_communication_s: float
    idle_s: float
    bubble_fraction: float


@dataclass(frozen=True)
class StageActivations(SummaryPart):
    """One pipeline stage's stored activations: peaks, and replica 0's timeline."""

    peak_bytes: float
    peak_microbatches: int
    recompute_working_bytes: float | None = field(default=None, metadata=OPTIONAL)
    timeline: list[list[float]] = field(default_factory=list)
    """``[time_s, micro-batches held, bytes]`` at each change."""


@dataclass(frozen=True)
class StageWeightVersions(SummaryPart):
    """One pipeline stage's weight versions under a flush-free schedule (PipeDream's
    weight stashing, PipeDream-2BW's double buffer): how many, and their bytes per device."""

    versions: int
    bytes_per_version: float
    """Weights of the stage on one of its devices (params / tp x bytes per value)."""
    extra_bytes: float
    """The versions beyond the first: (versions - 1) x bytes_per_version, counted in the
    device's ``memory.per_device`` weights."""


@dataclass(frozen=True)
class TensorParallelTraffic(SummaryPart):
    """The tensor-parallel part of a hybrid run's ``communication`` block."""

    algorithm: str
    ops: list[str]
    bytes_per_layer_per_pass: float
    bytes_per_block_per_pass: float
    seconds_per_microbatch_forward: list[float]
    priced: str
    mode: str | None = field(default=None, metadata=OPTIONAL)
    """``parallelism.tp_mode`` when not 1d (2d, 2.5d, 3d)."""
    grid: list[int] | None = field(default=None, metadata=OPTIONAL)
    """The mode's grid: [q, q], [q, q, d] or [q, q, q] (not written for 1d)."""
    bytes_per_layer_backward: float | None = field(default=None, metadata=OPTIONAL)
    """Mean S bytes of one split layer's backward collectives (not written for 1d, where
    backward equals forward)."""
    ran: CollectivesRan | None = field(default=None, metadata=OPTIONAL)
    """What the tensor-parallel collectives ran as (algorithm/protocol counts, channels)."""


@dataclass(frozen=True)
class HybridTraffic(SummaryPart):
    """A hybrid run's ``communication`` block: stage boundaries, dp sync, tensor parallel."""

    boundary_bytes: list[float]
    allreduce_bytes: list[float]
    dp_op: str
    algorithm: str | None
    network_model: str
    dp_network_model: str
    dp_link_sharing: list[int]
    tensor_parallel: TensorParallelTraffic | None = field(default=None, metadata=OPTIONAL)
    ran: CollectivesRan | None = field(default=None, metadata=OPTIONAL)
    """What the data-parallel (gradient sync) collectives ran as (algorithm/protocol counts, channels)."""


@dataclass(frozen=True)
class TrainingRecipes(SummaryPart):
    """A hybrid run's ``recipes`` block: Megatron-Core's production settings in force
    (:mod:`clustersim.strategies.hybrid.recipes`) and what the overlaps hid.  Seconds are per
    iteration (mean), one value per device stage, replica 0."""

    distributed_optimizer: bool
    overlap_grad_reduce: bool
    overlap_param_gather: bool
    tp_comm_overlap: bool
    bucket_bytes: float
    """Gradient bucket size (per GPU) where a model chunk is bucketed."""
    buckets: list[int]
    """Gradient buckets per device stage (over its chunks; 0: nothing to sync)."""
    dp_communication_s: list[float]
    """How long the stage's data-parallel collectives were in flight."""
    dp_exposed_s: list[float]
    """The part of it the stage waited for."""
    dp_hidden_s: list[float]
    """The rest: hidden behind compute (or the pipeline's bubbles)."""
    tp_communication_s: list[float] | None = field(default=None, metadata=OPTIONAL)
    """Seconds of the tensor-parallel collectives (tp > 1)."""
    tp_exposed_s: list[float] | None = field(default=None, metadata=OPTIONAL)
    """The part of them not hidden behind matrix products (all without tp_comm_overlap)."""


@dataclass(frozen=True)
class MoESummary(SummaryPart):
    """A mixture-of-experts run's ``moe`` block (:mod:`clustersim.strategies.hybrid.experts`)."""

    experts: int
    top_k: int
    shared_experts: int
    expert_ffn: int
    capacity_factor: float
    skew: str
    moe_layers: int
    ep: int
    expert_dp: int
    """Ranks of an expert-data-parallel group (dp / ep): where expert gradients sync."""
    experts_per_gpu: int
    total_params: float
    active_params: float
    """Parameters one token uses (top_k routed + shared experts, router, dense layers)."""
    busiest_load: float
    """The busiest GPU's expert tokens over the mean (capacity padding and skew)."""
    alltoall_bytes_per_microbatch: float
    """A rank's padded buffer in one all-to-all (dispatch or combine) of one MoE layer."""
    alltoalls_per_microbatch: list[int]
    """Per device stage: all-to-alls of one micro-batch's forward (2 per MoE layer)."""
    alltoall_seconds_per_microbatch_forward: list[float]
    """Per device stage: their priced seconds."""


@dataclass(frozen=True)
class ContextParallelTraffic(SummaryPart):
    """Ring attention (``parallelism.cp``): the key/value blocks one GPU sends per layer."""

    cp: int
    ring_steps: int
    """cp - 1 steps per attention layer and pass."""
    step_bytes: float
    """Bytes one GPU sends per ring step, forward (K and V of its s/cp block, / tp)."""
    bytes_per_layer_forward: float
    bytes_per_layer_backward: float
    """K/V and dK/dV (twice the forward), plus the forward again when recomputing."""
    compute_step_s: float
    """Seconds of one block of attention-score compute (forward, micro-batch, one GPU)."""
    transfer_step_s: float
    """Seconds of one step's transfer alone on the ring's slowest link (forward)."""
    priced: str
    """How the ring runs: ``flows`` (real flows on the links, sharing them)."""


@dataclass(frozen=True)
class OffloadTraffic(SummaryPart):
    """``training.offload``: what crosses PCIe per iteration, what it costs, CPU memory."""

    optimizer: str
    activations: str
    optimizer_bytes_per_iteration: float
    """Per GPU: gradients GPU->CPU plus parameters CPU->GPU."""
    activation_bytes_per_iteration: float
    """Per GPU: activations GPU->CPU plus their return CPU->GPU."""
    pcie_exposed_s: float
    """Seconds per iteration (mean over iterations, max over GPUs) a GPU waits on offload
    transfers."""
    cpu_optimizer_s: float
    """Seconds per iteration the CPU optimizer step takes (one GPU's share)."""
    cpu_memory_bytes: dict[str, float]
    """Per CPU: the bytes offloaded into it at the peak (optimizer states + activations)."""


@dataclass(frozen=True)
class HybridSummary(FlopTrainingSummary):
    """3D hybrid training: pipeline x tensor parallel x data parallel (ZeRO-1)."""

    name = "pipeline"
    description = "training keys, schedule, stages, bubbles, activation memory, communication"

    schedule: str
    stages: int
    micro_batches: int
    chunks: int
    recompute: bool
    recompute_mode: str
    dp: int
    tp: int
    pp: int
    order: list[str]
    sequence_parallel: bool
    zero_stage: int
    simulated_replicas: int
    micro_batch_size: float
    stage_devices: list[list[str]]
    tensor_groups: list[list[list[str]]]
    stage_layers: list[int]
    stage_layer_names: list[list[str]]
    theoretical_bubble_fraction: float
    idle_fraction: float
    """The same as ``bubble_fraction`` (kept for scripts written before they were one)."""
    bubble_fraction: float
    """Mean over the stage devices of idle time / run time (neither computing nor
    communicating; :data:`clustersim.metrics.training.BUBBLE_FRACTION`)."""
    non_compute_fraction: float
    """Mean over the stage devices of 1 - compute time / run time (idle plus exposed
    communication; the ``bubble_fraction`` of pipeline summaries before)."""
    per_device_bubble: dict[str, float]
    per_device_iteration: dict[str, list[IterationBubble]]
    activation_memory: dict[str, StageActivations]
    communication: HybridTraffic
    per_iteration: dict[str, DeviceTimes]
    workers_simulated: int | None = field(default=None, metadata=OPTIONAL)
    """One-replica mode: the workers simulated (replica 0's, ``len(workers)``)."""
    workers_total: int | None = field(default=None, metadata=OPTIONAL)
    """One-replica mode: the workers of the job, every replica's (dp x tp x pp; the
    replicas are identical)."""
    moe: MoESummary | None = field(default=None, metadata=OPTIONAL)
    """Mixture of experts: experts, expert parallelism, parameters, all-to-alls."""
    weight_versions: dict[str, StageWeightVersions] | None = field(default=None, metadata=OPTIONAL)
    """Flush-free schedules (pipedream, pipedream-2bw): per device stage, its weight
    versions and their bytes."""
    cp: int | None = field(default=None, metadata=OPTIONAL)
    """Context-parallel degree (only when > 1)."""
    context_parallel: ContextParallelTraffic | None = field(default=None, metadata=OPTIONAL)
    offload: OffloadTraffic | None = field(default=None, metadata=OPTIONAL)
    recipes: TrainingRecipes | None = field(default=None, metadata=OPTIONAL)
    """Megatron-Core's production recipes in force, data-parallel time exposed and hidden."""

    def job_workers(self) -> int:
        return self.workers_total or len(self.workers or [])

    def device_bubbles(self) -> Mapping[str, Any]:
        return self.per_device_bubble or {}

    def stage_activations(self) -> Mapping[str, Any]:
        return plain(self.activation_memory or {})

    def replicas(self) -> list[list[str]]:
        """Replica d's devices: its stage groups (``tensor_groups[d]``), stage by stage."""
        return [[d for group in replica for d in group] for replica in self.tensor_groups or []]
