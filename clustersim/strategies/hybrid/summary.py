"""The hybrid's part of summary.json (:class:`HybridSummary`, registered under the workload
``pipeline``; :class:`~.report.HybridReport` builds it) and the blocks it holds: bubbles per
device and iteration, stored activations and weight versions per stage, the communication
block (stage boundaries, data-parallel sync, tensor parallelism), mixture of experts,
context parallelism, offload and Megatron-Core's recipes.  Units: seconds, bytes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...metrics import (
    OPTIONAL,
    BatchShares,
    CollectivesRan,
    DeviceTimes,
    FlopTrainingSummary,
    SummaryPart,
)
from ...metrics.parts import plain


@dataclass(frozen=True)
class IterationBubble(SummaryPart):
    """One device in one iteration of a pipeline run (seconds, and idle share)."""

    compute_s: float
    exposed_communication_s: float
    idle_s: float
    bubble_fraction: float


@dataclass(frozen=True)
class ReplicaClass(SummaryPart):
    """A class of data-parallel replicas that run alike (one-replica mode)."""

    replica: int
    """The replica played for the class (its first)."""
    replicas: int
    """How many replicas the class holds (the played one among them)."""
    devices: str
    """Its devices' types, stage by stage (``H100-SXM``, ``A100-SXM+H100-SXM``)."""


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
class StageBalanceBlock(SummaryPart):
    """A hybrid run's ``stage_balance`` block (``pipeline.stages: balanced``,
    :mod:`clustersim.strategies.hybrid.balance`): what the split was chosen by.  Seconds are
    the compute of one micro-batch (forward + backward, with recomputation) on one GPU of
    the stage's pace-setting devices, one value per virtual stage."""

    stage_seconds: list[float]
    pace_devices: list[str]
    """Per virtual stage: the device whose speed sets its pace (the first of the slowest
    kind among every replica's GPUs of that stage)."""
    pace_types: list[str]
    """Their GPU types ("" for a GPU naming no preset)."""
    memory_bound: bool
    """Memory kept layers off a stage the time-optimal split would give them."""
    fits: bool
    """Some split fits every stage's memory (false: the time-optimal split, over capacity)."""
    even_stage_seconds: list[float] | None = field(default=None, metadata=OPTIONAL)
    """The same seconds for ``stages: even`` (left out where the blocks do not divide)."""


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
    """Some stage recomputes."""
    recompute_mode: str
    """none, selective or full: every stage's, or where the stages differ the most
    recomputing one (``stage_recompute`` lists them)."""
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
    """One-replica mode: the workers simulated (the played replicas', ``len(workers)``)."""
    workers_total: int | None = field(default=None, metadata=OPTIONAL)
    """One-replica mode: the workers of the job, every replica's (dp x tp x pp)."""
    replica_classes: list[ReplicaClass] | None = field(default=None, metadata=OPTIONAL)
    """One-replica mode with replicas that differ: one entry per class of alike replicas,
    the replica played for it and how many it stands for
    (:mod:`~clustersim.strategies.hybrid.replica_classes`)."""
    played_replicas: int | None = field(default=None, metadata=OPTIONAL)
    """``simulate_replicas: all`` played as one replica per class of alike replicas, where that
    is exactly every replica (the analytical network, 4,096 GPUs or more: see
    :func:`~clustersim.strategies.hybrid.replica_classes.fold_classes`): how many were
    played; the summary is every replica's (``simulated_replicas`` is dp)."""
    replicas_exact: bool | None = field(default=None, metadata=OPTIONAL)
    """One-replica mode: whether one replica per class is exactly every replica with the
    same data-parallel collectives (:func:`~clustersim.strategies.hybrid.replica_classes.
    inexact_reason`: no link can carry own flows of two replicas, each replica's own flows
    laid out as its played replica's, data-parallel rings); false names why in
    ``replicas_inexact_reason``."""
    replicas_inexact_reason: str | None = field(default=None, metadata=OPTIONAL)
    """One-replica mode, ``replicas_exact`` false: why (``own flows of two replicas can
    share rack0/tor->spine1 (replicas 0 and 4)``)."""
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
    batch_shares: BatchShares | None = field(default=None, metadata=OPTIONAL)
    """Micro-batches per replica by type (``data_parallel.balance`` not ``even``; then
    ``micro_batches`` is the mean per replica)."""
    stage_balance: StageBalanceBlock | None = field(default=None, metadata=OPTIONAL)
    """``pipeline.stages: balanced``: each stage's compute time and pace-setter."""
    stage_recompute: list[str] | None = field(default=None, metadata=OPTIONAL)
    """Per device stage, input first: its recomputation, where the stages differ
    (``training.recompute`` as a list, or ``auto``'s choice)."""

    def job_workers(self) -> int:
        return self.workers_total or len(self.workers or [])

    def device_bubbles(self) -> Mapping[str, Any]:
        return self.per_device_bubble or {}

    def stage_activations(self) -> Mapping[str, Any]:
        return plain(self.activation_memory or {})

    def replicas(self) -> list[list[str]]:
        """Replica d's devices: its stage groups (``tensor_groups[d]``), stage by stage."""
        return [[d for group in replica for d in group] for replica in self.tensor_groups or []]
