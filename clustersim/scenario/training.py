"""The sections of a training scenario that say how the model is trained and split.

``training`` (batch, precision, memory, offload), ``data_parallel`` (all-reduce or
parameter servers), ``parallelism`` (tp, cp, pp, dp, ep), ``zero`` and ``pipeline``;
what is trained, the ``model`` section, is :mod:`.model`'s.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Discriminator, Field, Strict, Tag, model_validator

from clustersim.errors import Problem, hinted

from .devices import Precision
from .fields import (
    Bool,
    Count,
    Float,
    Glob,
    Int,
    Invalid,
    LargeCount,
    PositiveSize,
    PositiveTime,
    Size,
    TimeSpan,
    _Spec,
    _unit,
)
from .model import KeyDistribution
from .network import Channels
from .plugins import plugin_name

ScheduleName = plugin_name("schedules")
"""The name of a registered pipeline schedule (``clustersim list schedules``)."""
AlgorithmName = plugin_name("algorithms")
"""The name of a registered collective algorithm (``clustersim list algorithms``)."""
TpModeName = plugin_name("tp-modes")
"""The name of a registered tensor-parallel mode (``clustersim list tp-modes``)."""


RecomputeMode = Literal["none", "selective", "full"]
"""A recomputation mode, least recomputation first."""
RECOMPUTE_MODES: tuple[RecomputeMode, ...] = ("none", "selective", "full")
"""The recomputation modes in the order ``recompute: auto`` tries them."""
Recompute = Annotated[
    Literal["auto"] | RecomputeMode | Annotated[list[RecomputeMode], Field(min_length=1)],
    BeforeValidator(lambda value: "auto" if value is None else value),
]
"""``training.recompute``: ``auto``, one mode, or one mode per pipeline stage."""
SequenceParallel = Bool | Literal["auto"]
"""``parallelism.sequence_parallel``: true, false or ``auto`` (on wherever tp > 1)."""
Chunks = Count | Literal["auto"]
"""``pipeline.chunks``: a whole number >= 1, or ``auto`` (the fastest that fits)."""


class MemorySpec(_Spec):
    """How device memory is accounted beyond model states and activations."""

    fragmentation: Float = Field(0.10, ge=0, lt=1)
    """Allocator fragmentation allowance: a fraction of the device's other parts added to
    its peak; default 0.10 (PyTorch's caching allocator loses 15% on average on LLMs with
    recomputation and offload, GMLake 2024; see docs/writing-scenarios.md, "Memory"); 0 for the bare sum."""
    buffers: Bool = True
    """Count temporary communication buffers (buckets, gathered ZeRO-3 parameters, staging
    of tensor-parallel grids, pipeline send/receive); false leaves them out."""
    context: Size = _unit("0B", "context")
    """Memory each GPU gives to the CUDA context and libraries outside PyTorch's allocator
    (kernel images, cuBLAS and NCCL workspaces), added to its peak as its own part; default
    0 (what ``torch.cuda.max_memory_allocated`` and ``max_memory_reserved`` count);
    ``nvidia-smi`` counts it too: 1.3 GB for PyTorch on a V100 (Hugging Face's
    "Model training anatomy"), 1.2-1.6 GiB on V100 and A100 (BigScience's tr11 notes)."""
    states: Literal["zero", "megatron"] | None = None
    """How model states are kept (:data:`clustersim.model.memory.STATE_ACCOUNTINGS`): zero
    (the ZeRO paper's: gradients in the training precision, (2 + 2 + K) Psi) or megatron
    (Megatron-LM's fp32 main gradients in bf16: 18 bytes per parameter with Adam, 6 + 12/d
    with the distributed optimizer); default: megatron for a transformer in the pipeline
    strategy at ZeRO stage 0 or 1 (Megatron-Core's optimizers), zero elsewhere."""


class OffloadSpec(_Spec):
    """What moves to the node's CPU memory over PCIe (ZeRO-Offload, Ren et al. 2021;
    ZeRO-R/ZeRO-Infinity activation offload, Rajbhandari et al. 2020/2021)."""

    optimizer: Literal["none", "cpu"] = "none"
    """cpu: the fp32 optimizer states live in CPU memory; gradients go GPU->CPU, the CPU
    runs the optimizer step, updated parameters come back CPU->GPU."""
    activations: Literal["none", "cpu"] = "none"
    """cpu: a micro-batch's stored activations go to CPU memory after its forward and come
    back before its backward, overlapped with the other micro-batches' compute."""
    resident: Count = 2
    """activations: a micro-batch whose backward comes within this many forwards of its own
    forward stays on the GPU (the prefetch window)."""


class TrainingSpec(_Spec):
    """How training runs: batch, iterations, number format, optimizer."""

    global_batch: Count
    """Samples per iteration over all data-parallel workers."""
    iterations: Count = 3
    """Training iterations to simulate."""
    duration_s: PositiveTime | None = Field(None, alias="duration")
    """Length of the whole training job (``30d``), simulated seconds: the goodput model
    extrapolates from the ``iterations`` simulated, never simulating every one."""
    tokens: LargeCount | None = None
    """Tokens the whole job trains on (``2T``): iterations = tokens / (global_batch x sequence
    length), transformer models only; extrapolated like ``duration``."""
    precision: Precision = "fp32"
    """Number format: of gradients and communicated values (fp32, tf32: 4 bytes; fp16, bf16,
    fp8: 2 bytes -- fp8 as Transformer Engine trains, its matrix products in fp8, weights,
    gradients and communication in 16 bits), and the peak a GPU with ``peaks`` runs at."""
    optimizer: Literal["sgd", "momentum", "adam"] = "sgd"
    """Optimizer; its step costs memory traffic (bytes per parameter: sgd 12, momentum 20, adam 28)."""
    micro_batch: Count | None = None
    """Samples per micro-batch (pipeline/tensor parallel: sets micro-batches per iteration to
    global_batch / (dp x micro_batch)); default: from ``pipeline.micro_batches``, and where
    that is not written either, for a transformer in the pipeline strategy, ``auto``'s one sample
    (:func:`clustersim.strategies.auto.micro_batch`)."""
    offload: OffloadSpec | None = None
    """Offload of optimizer states and/or activations to CPU memory (hybrid strategy)."""
    recompute: Recompute = "auto"
    """Activation recomputation: none, selective (attention scores and softmax, Korthikanti
    et al. 2022) or full (each transformer block re-runs its forward in backward; only block
    inputs are stored); in the pipeline strategy also a list of one mode per pipeline stage,
    input first.  ``auto`` (default; null reads as auto): full if ``pipeline.recompute`` is
    true; else for a transformer the least recomputation (none, then selective, then full,
    per pipeline stage) with which every GPU fits its memory, as a tuned production run
    chooses it (``auto_choices`` in summary.json says what was chosen; full where nothing
    fits, and the run is marked as not fitting); a list of layers: none."""
    memory: MemorySpec = MemorySpec()
    """Memory accounting: ``fragmentation`` allowance, communication ``buffers``, the CUDA
    ``context`` and how model ``states`` are kept."""

    @model_validator(mode="before")
    @classmethod
    def _no_null_length(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key in ("duration", "tokens"):
                if key in data and data[key] is None:
                    raise Invalid(Problem(key, "must be given a value (leave the key out)"))
        return data

    @model_validator(mode="after")
    def _one_length(self) -> TrainingSpec:
        if self.duration_s is not None and self.tokens is not None:
            raise Invalid(
                Problem(
                    "tokens",
                    "give the job's length as duration or as tokens, not both",
                    "duration: TIME or tokens: COUNT",
                )
            )
        return self


class AllreduceSyncSpec(_Spec):
    """Gradient all-reduce as PyTorch DDP and Horovod do it."""

    algorithm: AlgorithmName = "auto"
    """Collective algorithm (``clustersim list algorithms``); ``auto`` (default): NCCL's
    choice by its tuner's model (``ring`` for the textbook ring)."""
    bucket: Size = _unit("25MB", "bucket")
    """Gradient bucket size; a full bucket is all-reduced at once (the pipeline strategy's
    default: Megatron-Core's max(40M, 1M x dp) parameters)."""
    overlap: Bool = True
    """All-reduce (or reduce-scatter) buckets while backward goes on (false: after it); the
    pipeline strategy's default: on for transformers, off for lists of layers."""
    options: dict[str, Any] = {}
    """Algorithm options (hierarchical: inter, intra)."""
    channels: Channels | None = None
    """Channels of each gradient collective: equal slices that run at once, at most 64, or
    ``auto`` (default: ``network.channels``)."""
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    """Number format of the gradients the data-parallel collective carries (the 3D hybrid):
    ``fp32`` (4 bytes a value) as Megatron-LM reduces them when training in bf16
    (``--accumulate-allreduce-grads-in-fp32``, forced for bf16 by its
    ``megatron/training/arguments.py``); ``bf16``/``fp16`` (2 bytes) as NeMo's launcher
    recipes sync them (``optim.grad_sync_dtype=bf16``); ``auto`` (default): the training
    precision's bytes (2 in fp16, bf16, fp8; 4 in fp32, tf32).  The distributed optimizer's
    parameter all-gather carries the training precision either way."""


MAX_PS_KEYS = 10_000
"""Most synthetic keys ``data_parallel.ps.keys`` may ask for: every key is a push and a
pull per worker and iteration."""
HIERARCHIES = (["server"], ["cpu", "server"], ["gpu", "server"], ["gpu", "cpu", "server"])
"""The aggregation chains ``data_parallel.ps.hierarchy`` accepts, worker side first."""


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
    partition_bytes: PositiveSize | None = None
    """Per-key pipelining as BytePS does it: cut every key larger than this into equal
    partitions of at most this size, each pushed, aggregated and pulled on its own, and
    send over each worker-server connection one message at a time, in order (default:
    one key per layer, all of a worker's pushes at once)."""
    credit: Count | None = None
    """With ``partition_bytes``: how many pushes a worker keeps on the wire at once across
    all its connections, the rest waiting in the order their gradients were ready (BytePS's
    scheduling credit; default: no limit)."""
    key_distribution: KeyDistribution = "layers"
    """layers: one key per layer (big layers split); uniform: ``keys`` equal keys;
    ``{zipf: s}``: ``keys`` keys, rank i of size and access frequency proportional to 1 / i^s."""
    keys: Annotated[int, Strict(), Field(ge=1, le=MAX_PS_KEYS)] | None = None
    """uniform or zipf: how many keys (default 64)."""
    sharding: Literal["hash", "range", "balanced"] = "balanced"
    """Keys to servers: hash (CRC-32 of the key name mod servers), range (contiguous runs of
    equal count), balanced (largest expected traffic first to the least-loaded server)."""
    backup_cancel: Bool = True
    """backup: cancel the workers left out of a round when it closes (their compute and
    in-flight pushes stop; they pull the new parameters); false: they finish their stale
    round and their late pushes are dropped at the server."""

    hierarchy: list[Literal["gpu", "cpu", "server"]] | None = None
    """Multi-level aggregation (d2l, "Parameter Servers", multi-machine figure), sync mode:
    ``[gpu, cpu, server]`` -- BytePS's CPU-assisted aggregation: a node's GPUs
    reduce-scatter each key (per PCIe switch), copy their shards to the node CPU, which
    sums and pushes once per node; ``[gpu, server]`` -- the GPUs reduce-scatter and each
    pushes its shard; ``[cpu, server]`` -- the GPUs send whole gradients to the node CPU,
    which sums and pushes; pulls come back the same way, then an all-gather.  Unset or
    ``[server]``: every worker pushes on its own."""

    replicas: Count = 1
    """Chain replication (Li et al. OSDI 2014, section 4.3): each server's keys are held by
    it and the next ``replicas - 1`` servers in ring order; every update is forwarded along
    the chain before it is acknowledged.  1 (default): no replication; at most ``servers``."""
    failover_timeout_s: TimeSpan = _unit("1s", "failover_timeout")
    """With ``replicas`` above 1: how long after a server fails the workers notice it and turn
    to the next replica of its keys (seconds, default 1 s)."""

    @model_validator(mode="after")
    def _hierarchy_levels(self) -> ParameterServerSpec:
        if self.hierarchy is not None and self.hierarchy not in HIERARCHIES:
            raise Invalid(
                Problem(
                    "hierarchy",
                    f"{list(self.hierarchy)} is not a chain of aggregation levels",
                    ", ".join(str(list(h)) for h in HIERARCHIES),
                )
            )
        return self

    @model_validator(mode="after")
    def _credit_needs_partitions(self) -> ParameterServerSpec:
        if self.credit is not None and self.partition_bytes is None:
            raise Invalid(
                Problem(
                    "credit",
                    "a scheduling credit needs per-key pipelining",
                    "set partition_bytes too (e.g. 4MB), or leave credit out",
                )
            )
        return self

    @model_validator(mode="after")
    def _keys_need_synthetic(self) -> ParameterServerSpec:
        if self.keys is not None and self.key_distribution == "layers":
            raise Invalid(
                Problem(
                    "keys",
                    "a key count needs synthetic keys; with key_distribution layers the keys "
                    "are the layers",
                    "key_distribution: uniform or {zipf: s}, or leave keys out",
                )
            )
        return self


def _balance_form(data: Any) -> str:
    """``weights`` for a mapping, ``named`` otherwise."""
    return "weights" if isinstance(data, dict) else "named"


BALANCE_NAMES = ("even", "speed")
"""The named ways of ``data_parallel.balance`` (a mapping of weights is the third)."""


def _balance_name(value: Any) -> Any:
    """``value`` if it names a balance, else a problem saying what is allowed."""
    if value in BALANCE_NAMES and isinstance(value, str):
        return value
    raise Invalid(
        Problem(
            "",
            hinted(f"unknown value {value!r}", value, BALANCE_NAMES),
            "even, speed or weights by device pattern {GLOB: weight, ...}",
        )
    )


BalanceWeight = Annotated[float, Strict(), Field(gt=0, allow_inf_nan=False)]
"""A rank's relative weight in ``data_parallel.balance``: a number above 0."""
Balance = Annotated[
    Annotated[Literal["even", "speed"], BeforeValidator(_balance_name), Tag("named")]
    | Annotated[dict[Glob, BalanceWeight], Field(min_length=1), Tag("weights")],
    Discriminator(_balance_form),
]
"""``even``, ``speed`` or ``{GLOB: weight, ...}``: a name is checked as a name, a mapping
as weights."""


class DataParallelSpec(_Spec):
    """Data parallelism: how gradients are synchronised."""

    sync: Literal["allreduce", "ps"] = "allreduce"
    """allreduce or ps (parameter servers)."""
    workers: Glob = "*/gpu*"
    """Devices that train (data-parallel ranks)."""
    balance: Balance = "even"
    """Each data-parallel rank's share of the global batch, in whole samples (a worker of
    ``data_parallel`` and ``zero``; in the pipeline strategy a replica, whose share is a number
    of micro-batches of one size): ``even`` (default) as even as whole samples allow;
    ``speed`` in proportion to each rank's speed on its own hardware, so that the ranks end
    their compute together (docs/mixed-clusters.md, "Balancing data parallelism");
    ``{GLOB: weight, ...}`` in proportion to the weight of the pattern matching the rank's
    devices (largest remainder), every rank matched by one pattern or by several of one
    weight."""
    allreduce: AllreduceSyncSpec = AllreduceSyncSpec()
    """Settings of sync: allreduce."""
    ps: ParameterServerSpec = ParameterServerSpec()
    """Settings of sync: ps."""


ParallelAxis = Literal["tp", "cp", "pp", "dp"]


class ParallelismSpec(_Spec):
    """How the workers are split into data-, tensor- and pipeline-parallel groups."""

    dp: Count | None = None
    """Data-parallel replicas (default: workers / (pp x tp x cp)); dp x tp x cp x pp must equal
    the workers."""
    pp: Count = 1
    """Pipeline stages."""
    tp: Count = 1
    """Tensor-parallel degree (Megatron-LM 1-D): GPUs that split each layer."""
    cp: Count = 1
    """Context-parallel degree (ring attention, Megatron-Core's CP): GPUs that split each
    sequence, passing key/value blocks around a ring; transformers only, dividing ``seq``."""
    order: list[ParallelAxis] = ["tp", "pp", "dp"]
    """How ranks map onto the workers, innermost first: consecutive workers form a group of the
    first axis (default: tensor groups inside a node, then pipeline stages, then replicas).
    ``cp`` may be listed; when it is not it comes right after ``tp``."""
    allow_cross_node_tp: Bool = False
    """Allow a tensor-parallel group to span nodes (normally an error: TP needs NVLink)."""
    sequence_parallel: SequenceParallel = "auto"
    """Megatron sequence parallelism (Korthikanti et al. 2022): reduce-scatter + all-gather in
    place of each TP all-reduce; layer-norm and dropout activations are split over the TP
    group.  ``auto`` (default): on wherever tp > 1 with the 1-D mode, as Megatron-Core's and
    NeMo's recipes run it; ``false`` keeps it off."""
    ep: Count = 1
    """Expert-parallel degree (Megatron-Core): the experts of an MoE model spread over ep
    ranks of each data-parallel group; must divide dp and the number of experts."""
    ep_overlap: Bool = False
    """Hide each op's expert-parallel all-to-alls behind its compute (DualPipe-like
    schedules); only the part longer than the compute is exposed."""
    tp_comm_overlap: Bool = False
    """Megatron-Core's ``--tp-comm-overlap``: each sequence-parallel all-gather and
    reduce-scatter runs beside the matrix product next to it; only what outlasts it is
    exposed (needs ``sequence_parallel``)."""
    tp_algorithm: AlgorithmName = "auto"
    """Collective algorithm of the tensor-parallel collectives (``clustersim list algorithms``);
    ``auto`` (default): NCCL's choice (``ring`` for the textbook ring)."""
    tp_mode: TpModeName = "1d"
    """How the tp GPUs split a layer (``clustersim list tp-modes``): 1d (Megatron-LM), 2d
    (Optimus, tp = q^2), 2.5d (Tesseract, tp = q^2 x tp_depth) or 3d (tp = q^3)."""
    tp_depth: Count = 1
    """tp_mode 2.5d: Tesseract's depth d (tp = q^2 d)."""
    simulate_replicas: Literal["all", "one"] = "all"
    """``one``: simulate one data-parallel replica of each class of replicas that run alike
    (replica 0 alone when all do; a slow node's or another GPU type's replicas are classes
    of their own) and run the data-parallel collectives in the congestion-aware analytical
    model -- up to dp times fewer events; what ``clustersim plan`` uses."""

    @model_validator(mode="after")
    def _order_is_permutation(self) -> ParallelismSpec:
        if sorted(self.order) not in (["dp", "pp", "tp"], ["cp", "dp", "pp", "tp"]):
            raise Invalid(
                Problem(
                    "order",
                    f"{list(self.order)} is not an order of the axes",
                    "each of tp, pp, dp once (and cp once, or left out: then it follows tp), "
                    "innermost first, e.g. [tp, pp, dp] or [tp, cp, pp, dp]",
                )
            )
        return self


class ZeroSpec(_Spec):
    """ZeRO (Rajbhandari et al. 2020) / FSDP: sharding model states over data-parallel ranks."""

    stage: Literal[0, 1, 2, 3, "fsdp"] = 0
    """0: plain data parallel; 1: optimizer states sharded; 2: + gradients; 3 (or fsdp):
    + parameters, all-gathered layer by layer before forward and backward (not given: 1 for
    a transformer in the pipeline strategy, Megatron-Core's distributed optimizer)."""
    prefetch: Bool = True
    """Stage 3: all-gather the next layer's parameters while the current layer computes."""
    overlap_param_gather: Bool | None = None
    """Stage 1, pipeline strategy: all-gather the updated parameters bucket by bucket beside
    the next forward (``--overlap-param-gather``; false: after the step); default: on for
    transformers with ``data_parallel.allreduce.overlap``."""

    @property
    def level(self) -> int:
        """The stage as a number (fsdp is 3)."""
        return 3 if self.stage == "fsdp" else int(self.stage)


class PipelineSpec(_Spec):
    """Pipeline parallelism: schedule, micro-batches, stage split."""

    schedule: ScheduleName = "1f1b"
    """naive: one micro-batch through all stages; gpipe: all forwards then all backwards;
    1f1b: PipeDream-Flush; interleaved: 1F1B over ``chunks`` model chunks per device."""
    micro_batches: Count = 8
    """Micro-batches per iteration (the global batch is split among them)."""
    chunks: Chunks = "auto"
    """interleaved: model chunks per device (v).  ``auto`` (default): the schedule's own count
    where it has one (1; zb-v 2); interleaved: the depth (2 or more) dividing the model's
    blocks over the stages that is fastest by the simulator's analytical pipeline timeline
    and fits memory (``pipeline.stage_layers`` given: its length / pp)."""
    recompute: Bool = False
    """Activation recomputation, the older key: true is ``training.recompute: full``, false
    (written) ``none``; not written: ``training.recompute`` decides."""
    stage_layers: list[Count] | None = None
    """Layers per stage (virtual stage for interleaved), input first, any counts adding up to
    the model's layers (a layer with ``repeat: n`` counts n times); default: as ``stages``
    says."""
    stages: Literal["auto", "even", "balanced"] = "auto"
    """How the layers are split over the stages when ``stage_layers`` is not given.  auto
    (default): as even where a transformer's blocks divide into pp x chunks; where they do
    not, Megatron-Core's split: the embedding and the head count as one block each on the
    first and last stage (``account_for_embedding_in_pipeline_split``,
    ``account_for_loss_in_pipeline_split``), so those take fewer blocks -- Llama 3 405B's
    126 blocks over 16 stages are [7, 8 x 14, 7] (:func:`~clustersim.parallel.stages.megatron_blocks`).
    even: a transformer's blocks l / (pp x chunks) per stage, the embedding on the
    first, the head on the last (Megatron-LM), refused where they do not divide; any other
    model's layers balanced by FLOPs.
    balanced: whole blocks (layers) by the speed and memory of each stage's devices -- the
    slowest stage as fast as it can be, within each stage's memory (the slowest replica's
    GPUs set a stage's pace; docs/mixed-clusters.md, "Balancing pipeline stages")."""

    @model_validator(mode="after")
    def _one_split(self) -> PipelineSpec:
        if self.stages == "balanced" and self.stage_layers is not None:
            raise Invalid(
                Problem(
                    "stages",
                    "balanced, but stage_layers lists the split",
                    "one of the two: stages: balanced, or stage_layers (with stages: even)",
                )
            )
        return self
