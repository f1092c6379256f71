"""Pipeline-parallel training (GPipe, 1F1B, interleaved 1F1B), optionally with data parallelism.

```yaml
model: {preset: gpt2-1.5b}
training: {global_batch: 64, iterations: 3}
parallelism: {pp: 4, dp: 2}               # dp default: workers / pp
pipeline: {schedule: 1f1b, micro_batches: 8, chunks: 1, recompute: false}
data_parallel: {workers: "*/gpu*", allreduce: {algorithm: ring}}
```

The model (chosen when ``parallelism.pp > 1`` or a ``pipeline`` section is
given):

* **Ranks.** The workers (``data_parallel.workers``, default every GPU) form a
  ``dp x pp`` grid: stage ``s`` of replica ``d`` is worker ``d pp + s``, so
  consecutive devices form one pipeline and its stages share a node when
  ``pp`` <= GPUs per node.  ``dp`` defaults to workers / pp (an error unless
  it divides); a given ``dp`` uses the first ``dp pp`` workers.
* **Batch.** Each replica trains global_batch / dp samples in ``m`` micro-batches
  of global_batch / (dp m) samples (an error if below 1; fractions allowed).
* **Stages.** The layers are split into ``p v`` virtual stages (``v`` chunks
  per device, interleaved only), contiguous, balanced by forward + backward
  FLOPs (:func:`clustersim.pipeline.balanced_split`) or as
  ``pipeline.stage_layers`` lists; chunk ``c`` of device ``s`` is virtual
  stage ``c p + s``.
* **Operations.** Each stage device runs its schedule's operations in order
  on its compute stream.  Forward of micro-batch j on virtual stage k costs
  the stage's forward FLOPs x micro-batch samples and waits for the
  activation of j from virtual stage k-1; backward costs the backward FLOPs
  (plus one more forward with ``recompute``, folded into the same record)
  and waits for the gradient from k+1 (the last virtual stage for its own
  forward).
* **Inter-stage transfers.** An activation (and its gradient, the same size)
  is the last layer of the sending stage's ``activation_bytes`` per sample x
  micro-batch samples -- an upper estimate of the boundary tensor, as a
  layer's stored activations include its output.  A transfer between two
  chunks on one device (p = 1) costs nothing.
* **Flush.** After its last backward of an iteration a stage device
  all-reduces its stages' gradients (their parameters x bytes per value) with
  its ``dp`` peers (same stage, other replicas; the collective starts when the
  last peer arrives, algorithm ``data_parallel.allreduce.algorithm``), runs its
  optimizer step and starts the next iteration.
* **Activation memory.** A forward stores its stage's activation bytes for j
  (with ``recompute`` only the stage input: the previous stage's boundary
  activation, or for the first stage its first layer's activation bytes, a
  stand-in for the batch); the backward frees them.  Stored from the start of
  the forward to the end of the backward; the transient working set of one
  micro-batch during recomputation is reported apart.

Records: compute ``fwd`` / ``bwd`` / ``optimizer``, transfers ``activation`` /
``gradient``, all tagged ``iteration``, ``microbatch`` and ``stage`` = the
*device* stage s (of the sending device for transfers); with ``v > 1`` the
chunk is in ``op`` (``chunk{c}``).

Summary keys besides the training ones: ``schedule``, ``stages`` (p),
``micro_batches`` (m), ``chunks`` (v), ``recompute``, ``dp``,
``micro_batch_size``, ``stage_devices``, ``stage_layers`` (per virtual
stage), ``theoretical_bubble_fraction``; ``per_device_bubble`` = 1 - compute
time / run time of each stage device (the run is iterations x iteration
windows; the bubble holds waiting on other stages, exposed communication and
idle time), ``bubble_fraction`` its mean, ``idle_fraction`` the mean share
with neither compute nor communication; ``per_device_iteration`` the same
split per iteration window; ``activation_memory`` per device stage:
``peak_bytes``, ``peak_microbatches`` (stored (micro-batch, chunk) pairs) and
replica 0's ``timeline`` of ``[time_s, stored, bytes]`` in iteration 0.
Units: seconds, bytes, FLOPs.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

import simpy

from .. import training
from ..activations import layer_activation_bytes
from ..collectives import CollectiveCall, check_call, hold_group, run_collective
from ..engine import Simulation
from ..errors import Problem, ScenarioError, SimulationError
from ..memory import DeviceMemory, model_states
from ..metrics import flop_rates, training_summary, union_length
from ..pipeline import (
    BACKWARD,
    FORWARD,
    Op,
    Schedule,
    balanced_split,
    check_stage_layers,
    make_schedule,
)
from ..placement import place
from ..records import Record
from ..scenario import DataParallelSpec, ParallelismSpec, PipelineSpec
from ..tensor_parallel import SPLIT_KINDS, CollectiveTimer, boundary_bytes, layer_collectives
from .base import TrainingStrategy

Interval = tuple[float, float]


@dataclass(frozen=True)
class StagePlan:
    """One virtual stage: its layers and its cost per sample on one GPU of its tensor group."""

    index: int
    first_layer: int
    layers: int
    forward_flops: float
    """Forward FLOPs per sample (the whole stage; a tensor-parallel GPU does 1/t of it)."""
    backward_flops: float
    """Backward FLOPs per sample."""
    params: float
    activation_bytes: float
    """Activation bytes stored per sample per GPU, with the recomputation chosen."""
    output_bytes: float
    """Bytes per sample sent to the next stage (transformers: the b s h hidden state)."""
    input_bytes: float
    """Bytes per sample of the stage input."""
    recompute_flops: float = 0.0
    """Forward FLOPs per sample re-run in backward by recomputation."""
    split_layers: int = 0
    """Attention and MLP layers: each all-reduces once per direction under tensor parallelism."""
    working_bytes: float = 0.0
    """Per sample: the largest layer's activations without recomputation (the working set
    of one layer while its backward recomputes it)."""


@dataclass(frozen=True)
class StageOptions:
    """How stages store and recompute activations."""

    recompute: str = "none"
    """none, selective or full."""
    tp: int = 1
    sequence_parallel: bool = False
    bytes_per_value: float = 4.0
    """Bytes of a communicated value (the training precision)."""


def plan_stages(
    model: training.Model, counts: Sequence[int], options: StageOptions | None = None
) -> list[StagePlan]:
    """The virtual stages holding ``counts`` consecutive layers each, input first."""
    opt = options or StageOptions()
    plans: list[StagePlan] = []
    first = 0
    for k, count in enumerate(counts):
        layers = model.layers[first : first + count]
        previous = plans[-1].output_bytes if plans else layers[0].activation_bytes
        plans.append(_plan(model, k, first, layers, previous, opt))
        first += count
    return plans


def _plan(
    model: training.Model,
    k: int,
    first: int,
    layers: Sequence[training.Layer],
    previous: float,
    opt: StageOptions,
) -> StagePlan:
    forward = sum(x.forward_flops for x in layers)
    if model.transformer is None:
        full = sum(x.activation_bytes for x in layers)
        stored = previous if opt.recompute == "full" else full
        output = layers[-1].activation_bytes
        recompute_flops = forward if opt.recompute == "full" else 0.0
        working = full if opt.recompute == "full" else 0.0
    else:

        def kept(layer: training.Layer, mode: str) -> float:
            return layer_activation_bytes(
                layer,
                model,
                1.0,
                tp=opt.tp,
                sequence_parallel=opt.sequence_parallel,
                recompute=mode,
            )

        stored = sum(kept(x, opt.recompute) for x in layers)
        output = boundary_bytes(model, 1.0, opt.bytes_per_value) or 0.0
        recompute_flops = _transformer_recompute_flops(model, layers, opt.recompute)
        working = max(kept(x, "none") for x in layers) if opt.recompute != "none" else 0.0
    return StagePlan(
        index=k,
        first_layer=first,
        layers=len(layers),
        forward_flops=forward,
        backward_flops=sum(x.backward_flops for x in layers),
        params=sum(x.params for x in layers),
        activation_bytes=stored,
        output_bytes=output,
        input_bytes=previous,
        recompute_flops=recompute_flops,
        split_layers=sum(1 for x in layers if x.kind in SPLIT_KINDS),
        working_bytes=working,
    )


def _transformer_recompute_flops(
    model: training.Model, layers: Sequence[training.Layer], mode: str
) -> float:
    """Full: the forward of every attention and MLP layer; selective: the attention scores
    and their product with V (4 s^2 h per sample per attention layer)."""
    if mode == "full":
        return sum(x.forward_flops for x in layers if x.kind in SPLIT_KINDS)
    if mode == "selective":
        shape = model.transformer
        per_layer = 4.0 * shape.seq * shape.seq * shape.hidden
        return per_layer * sum(1 for x in layers if x.kind == "attention")
    return 0.0


def peak_stored(ops: Sequence[Op]) -> tuple[int, list[tuple[int, int]]]:
    """Largest number of (micro-batch, chunk) activations a device's ops hold at once, and
    the pairs held at that moment (forward stores, backward frees)."""
    held: list[tuple[int, int]] = []
    best: list[tuple[int, int]] = []
    for op in ops:
        if op.kind == FORWARD:
            held.append((op.microbatch, op.chunk))
            if len(held) > len(best):
                best = list(held)
        else:
            held.remove((op.microbatch, op.chunk))
    return len(best), best


class Pipeline(TrainingStrategy):
    """3D hybrid: pipeline stages of tensor-parallel groups, replicated for data parallelism."""

    name = "pipeline"
    description = (
        "3D hybrid training: pipeline (naive, GPipe, 1F1B, interleaved) x tensor parallel "
        "(Megatron-LM) x data parallel (all-reduce or ZeRO-1)"
    )
    config_model = DataParallelSpec

    # -- checks --------------------------------------------------------------

    def check(self) -> None:
        """Placement, schedule, micro-batches, recomputation, stage split, collectives."""
        spec: DataParallelSpec = self.config  # type: ignore[assignment]
        scenario = self.scenario
        self.load_training()
        self.pipe = scenario.pipeline or PipelineSpec()
        self.parallelism = parallelism = scenario.parallelism or ParallelismSpec()
        self.zero = scenario.zero.level if scenario.zero is not None else 0
        if spec.sync != "allreduce":
            raise ScenarioError(
                Problem(
                    "data_parallel.sync",
                    "pipeline and tensor parallelism sync by all-reduce",
                    "allreduce",
                )
            )
        self._check_zero(parallelism)
        self._check_tensor_parallel(parallelism)
        self.pp, self.tp = parallelism.pp, parallelism.tp
        self.placement = place(self._select_workers(spec), parallelism, self.topology)
        self.dp = self.placement.dp
        self.groups = self.placement.grid()
        self.grid = [[group[0] for group in replica] for replica in self.groups]
        self.schedule = self._make_schedule()
        self.micro_batch = self._micro_batch_size()
        self.recompute = self._recompute_mode()
        self.stage_layers = self._split()
        self.options = StageOptions(
            self.recompute,
            self.tp,
            parallelism.sequence_parallel,
            training.BYTES_PER_VALUE[self.train.precision],
        )
        self.plans = plan_stages(self.model, self.stage_layers, self.options)
        self.ops = [self.schedule.operations(s) for s in range(self.pp)]
        self.sync = spec.allreduce
        self.calls = self._dp_calls() if self.dp > 1 else {}
        for calls in self.calls.values():
            for call in calls:
                check_call(call, self.topology, "data_parallel.allreduce.algorithm")
        self.tp_timers = self._tp_timers()
        self._tp_costs: dict[tuple[int, int, int, int], tuple[float, float]] = {}
        """(replica, stage, first layer, passes) -> (seconds, bytes) of a tensor-parallel hold."""
        self.simulated = self._simulated_replicas(parallelism)
        self.dp_sharing = {
            s: _link_sharing(self.topology, calls) for s, calls in self.calls.items()
        }

    def _simulated_replicas(self, parallelism: ParallelismSpec) -> int:
        """How many replicas run as processes: all, or one (``simulate_replicas: one``)."""
        if parallelism.simulate_replicas == "all":
            return self.dp
        if self.scenario.stragglers:
            raise ScenarioError(
                Problem(
                    "parallelism.simulate_replicas",
                    "one replica stands for all only when they are identical; stragglers make "
                    "them differ",
                    "all (or no stragglers)",
                )
            )
        return 1

    def _check_zero(self, parallelism: ParallelismSpec) -> None:
        if self.zero <= 1:
            return
        if parallelism.pp > 1:
            raise ScenarioError(
                Problem(
                    "zero.stage",
                    f"ZeRO stage {self.zero} shards gradients"
                    f"{' and parameters' if self.zero == 3 else ''}, which pipeline parallelism "
                    "accumulates over micro-batches on each stage (DeepSpeed does not combine "
                    "them either)",
                    "0 or 1 with pp > 1",
                )
            )
        raise ScenarioError(
            Problem(
                "zero.stage",
                f"ZeRO stage {self.zero} is simulated for data parallelism alone "
                "(tp 1, pp 1, no pipeline section)",
                "0 or 1 with tensor or pipeline parallelism; 2, 3 or fsdp with tp 1 and pp 1",
            )
        )

    def _check_tensor_parallel(self, parallelism: ParallelismSpec) -> None:
        tp = parallelism.tp
        if tp == 1:
            return
        shape = self.model.transformer
        if shape is None:
            raise ScenarioError(
                Problem(
                    "parallelism.tp",
                    "tensor parallelism splits transformer layers; this model is a list of layers",
                    "tp: 1, or a transformer model (a preset such as gpt3-1.3b, or model.transformer)",
                )
            )
        if shape.heads % tp:
            raise ScenarioError(
                Problem(
                    "parallelism.tp",
                    f"tp {tp} does not divide the model's {shape.heads} attention heads",
                    f"a divisor of {shape.heads}",
                )
            )

    def _select_workers(self, spec: DataParallelSpec) -> list[str]:
        """Devices of ``data_parallel.workers``; when not given, every GPU (else every device)."""
        if "workers" in spec.model_fields_set:
            found = self.topology.select(spec.workers, "data_parallel.workers")
        else:
            devices = list(self.topology.devices.values())
            found = [d for d in devices if d.kind == "gpu"] or devices
        return [d.name for d in found]

    def _micro_batches(self) -> tuple[int, str]:
        """m and the key that set it: ``training.micro_batch`` or ``pipeline.micro_batches``."""
        b = self.train.micro_batch
        if b is None:
            return self.pipe.micro_batches, "pipeline.micro_batches"
        per_replica = self.train.global_batch / self.dp
        m = per_replica / b
        if m != int(m) or m < 1:
            raise ScenarioError(
                Problem(
                    "training.micro_batch",
                    f"micro-batches of {b} do not divide the {per_replica:g} samples of a "
                    f"replica (global batch {self.train.global_batch} / dp {self.dp})",
                    f"a divisor of {per_replica:g}",
                )
            )
        pipe = self.scenario.pipeline
        if pipe is not None and "micro_batches" in pipe.model_fields_set:
            if pipe.micro_batches != int(m):
                raise ScenarioError(
                    Problem(
                        "pipeline.micro_batches",
                        f"{pipe.micro_batches} micro-batches, but training.micro_batch {b} "
                        f"gives {int(m)}",
                        "one of the two keys, or values that agree",
                    )
                )
        return int(m), "training.micro_batch"

    def _make_schedule(self) -> Schedule:
        m, key = self._micro_batches()
        name = self.pipe.schedule
        if name in ("1f1b", "interleaved") and m < self.pp:
            raise ScenarioError(
                Problem(
                    key,
                    f"{m} micro-batches are fewer than the {self.pp} pipeline stages; "
                    f"{name} needs at least one micro-batch per stage",
                    f">= {self.pp} micro-batches (or schedule gpipe / naive)",
                )
            )
        return make_schedule(name, self.pp, m, self.pipe.chunks)

    def _micro_batch_size(self) -> float:
        """Samples per micro-batch: global batch / dp / m."""
        m = self.schedule.micro_batches
        size = self.train.global_batch / self.dp / m
        if size < 1:
            raise ScenarioError(
                Problem(
                    "training.global_batch",
                    f"global batch {self.train.global_batch} over dp {self.dp} x {m} micro-batches "
                    f"gives {size:.3g} samples per micro-batch",
                    f">= {self.dp * m} (one sample per micro-batch at least)",
                )
            )
        return size

    def _recompute_mode(self) -> str:
        """``training.recompute``, else full when ``pipeline.recompute`` is true, else none."""
        given = self.train.recompute
        legacy = self.pipe.recompute
        if given is None:
            return "full" if legacy else "none"
        if legacy and given != "full":
            raise ScenarioError(
                Problem(
                    "training.recompute",
                    f"{given}, but pipeline.recompute is true (full recomputation)",
                    "one of the two keys, or training.recompute: full",
                )
            )
        if given == "selective" and self.model.transformer is None:
            raise ScenarioError(
                Problem(
                    "training.recompute",
                    "selective recomputation recomputes attention scores; this model is a "
                    "list of layers",
                    "none or full, or a transformer model",
                )
            )
        return given

    def _split(self) -> list[int]:
        """Layers per virtual stage: as listed, equal transformer blocks, or balanced by FLOPs."""
        parts = self.schedule.virtual_stages
        layers = self.model.layers
        if self.pipe.stage_layers is not None:
            check_stage_layers(self.pipe.stage_layers, len(layers), parts)
            return list(self.pipe.stage_layers)
        if self.model.transformer is not None:
            return self._split_blocks(parts)
        if len(layers) < parts:
            raise ScenarioError(
                Problem(
                    "parallelism.pp",
                    f"the model has {len(layers)} layers, fewer than the {parts} (virtual) stages",
                    f"pp x chunks <= {len(layers)}",
                )
            )
        return balanced_split([x.forward_flops + x.backward_flops for x in layers], parts)

    def _split_blocks(self, parts: int) -> list[int]:
        """Megatron-LM's split: l / (p v) blocks per virtual stage, the embedding on the first,
        the head on the last."""
        blocks = self.model.transformer.layers
        if blocks % parts:
            what = (
                f"pp {self.pp} x chunks {self.schedule.chunks}"
                if parts != self.pp
                else f"pp {self.pp}"
            )
            raise ScenarioError(
                Problem(
                    "parallelism.pp",
                    f"the model's {blocks} transformer layers do not divide into {what} = "
                    f"{parts} stages",
                    f"pp x chunks dividing {blocks}, or pipeline.stage_layers",
                )
            )
        kinds = [x.kind for x in self.model.layers]
        per_block = sum(1 for k in kinds if k in SPLIT_KINDS) // blocks
        counts = [per_block * blocks // parts] * parts
        counts[0] += sum(1 for k in kinds[: kinds.index("attention")] if k not in SPLIT_KINDS)
        counts[-1] += len(kinds) - sum(counts)
        return counts

    def _dp_calls(self) -> dict[int, list[CollectiveCall]]:
        """Per device stage: the gradient sync of each tensor rank among its dp peers.

        All-reduce of the stage's gradients (params / t x bytes per value); with ZeRO-1 a
        reduce-scatter (then an all-gather of the updated parameters, see ``_dp_gather``).
        """
        op = "reducescatter" if self.zero >= 1 else "allreduce"
        per_value = training.BYTES_PER_VALUE[self.train.precision]
        out: dict[int, list[CollectiveCall]] = {}
        for s in range(self.pp):
            nbytes = self._stage_params(s) / self.tp * per_value
            out[s] = [
                CollectiveCall(
                    op,
                    self.placement.dp_group(s, t),
                    nbytes,
                    algorithm=self.sync.algorithm,
                    options=dict(self.sync.options),
                    protocol=self.scenario.network.protocol,
                )
                for t in range(self.tp)
            ]
        return out

    def _stage_params(self, stage: int) -> float:
        return sum(self.plans[k].params for k in self._chunks_of(stage))

    def _tp_timers(self) -> dict[tuple[int, int], CollectiveTimer]:
        if self.tp == 1:
            return {}
        algorithm = self.parallelism.tp_algorithm
        timers = {
            (d, s): CollectiveTimer(self.topology, self.groups[d][s], algorithm)
            for d in range(self.dp)
            for s in range(self.pp)
        }
        first = timers[0, 0]
        op = "reducescatter" if self.parallelism.sequence_parallel else "allreduce"
        check_call(first.call(op, 1.0), self.topology, "parallelism.tp_algorithm")
        return timers

    def _chunks_of(self, stage: int) -> list[int]:
        """Virtual stages on device stage ``stage``."""
        return [self.schedule.virtual_stage(stage, c) for c in range(self.schedule.chunks)]

    @property
    def workers(self) -> list[str]:
        """Every simulated worker, replica by replica, stage by stage, tensor rank by rank."""
        replicas = self.groups[: self.simulated]
        return [device for replica in replicas for group in replica for device in group]

    @property
    def dp_network_model(self) -> str:
        """How the data-parallel collectives are priced: the scenario's network model, or
        analytical when one replica stands for all."""
        return "analytical" if self.simulated < self.dp else self.scenario.network.model

    def describe(self) -> str:
        s = self.schedule
        chunks = f", {s.chunks} chunks" if s.chunks > 1 else ""
        recompute = f", {self.recompute} recompute" if self.recompute != "none" else ""
        tp = f" x tp {self.tp}" if self.tp > 1 else ""
        zero = f", ZeRO-{self.zero}" if self.zero else ""
        return (
            f"pipeline training of {self.model.name} ({self.model.params:.4g} params): "
            f"{s.name} over pp {self.pp}{tp} x dp {self.dp}, {s.micro_batches} micro-batches "
            f"of {self.micro_batch:.4g} samples{chunks}{recompute}{zero}, "
            f"stages {self.stage_layers}"
        )

    # -- memory --------------------------------------------------------------

    def memory_plan(self) -> dict[str, DeviceMemory]:
        """Per worker: its stage's model states / t (ZeRO over dp), the activations its
        schedule holds at its peak, the recompute working set and the send/receive buffers."""
        out: dict[str, DeviceMemory] = {}
        for s in range(self.pp):
            memory = self._stage_memory(s)
            for d in range(self.dp):
                for device in self.groups[d][s]:
                    out[device] = DeviceMemory.of(
                        memory[0], memory[1], memory[2], self._capacity(device)
                    )
        order = {device: i for i, device in enumerate(self.placement.workers)}
        return dict(sorted(out.items(), key=lambda kv: order[kv[0]]))

    def _stage_memory(self, s: int) -> tuple[Any, float, float]:
        states = model_states(
            self._stage_params(s) / self.tp,
            zero_stage=self.zero,
            dp=self.dp,
            precision=self.train.precision,
            optimizer=self.train.optimizer,
        )
        _, held = peak_stored(self.ops[s])
        mb = self.micro_batch
        activations = sum(
            self.plans[self.schedule.virtual_stage(s, chunk)].activation_bytes * mb
            for _, chunk in held
        )
        working = max(self.plans[k].working_bytes for k in self._chunks_of(s)) * mb
        buffers = 2 * max(self.plans[k].output_bytes for k in self._chunks_of(s)) * mb / self.tp
        if self.pp == 1:
            buffers = 0.0
        return states, activations, working + buffers

    def _capacity(self, device: str) -> float:
        return self.topology.devices[device].memory_bytes

    # -- running -------------------------------------------------------------

    def start(self, sim: Simulation) -> None:
        self.clock = training.IterationClock.new()
        self._env = sim.env
        self._arrivals: dict[tuple[int, int, str, int, int], simpy.Event] = {}
        self._flush: dict[tuple[str, int, int], tuple[list[int], simpy.Event]] = {}
        self.memory = {
            (d, s): _Memory(record=d == 0) for d in range(self.dp) for s in range(self.pp)
        }
        for d in range(self.simulated):
            for s in range(self.pp):
                sim.process(self._stage(sim, d, s))

    def _arrival(self, key: tuple[int, int, str, int, int]) -> simpy.Event:
        """The event of an activation or gradient reaching its virtual stage (created on demand)."""
        event = self._arrivals.get(key)
        if event is None:
            event = self._arrivals[key] = simpy.Event(self._env)
        return event

    def _stage(self, sim: Simulation, d: int, s: int) -> Generator[Any, Any, None]:
        """The process of stage ``s`` of replica ``d``: its operations, flush, step."""
        group = self.groups[d][s]
        params = self._stage_params(s) / self.tp / (self.dp if self.zero >= 1 else 1)
        step_bytes = params * training.OPTIMIZER_BYTES_PER_PARAM[self.train.optimizer]
        for it in range(self.train.iterations):
            for device in group:
                self.clock.start(device, it, sim.now)
            for op in self.ops[s]:
                yield from self._run_op(sim, d, s, it, op)
            if self.dp > 1:
                yield self._dp_sync(sim, "grad", s, it, d)
            yield self._on_group(
                sim,
                group,
                lambda device, it=it: sim.compute(
                    device,
                    bytes=step_bytes,
                    label="optimizer",
                    iteration=it,
                    stage=s,
                    phase="optimizer",
                ),
            )
            if self.dp > 1 and self.zero >= 1:
                yield self._dp_sync(sim, "param", s, it, d)
            for device in group:
                self.clock.end(device, it, sim.now)

    @staticmethod
    def _on_group(sim: Simulation, group: Sequence[str], work: Any) -> simpy.Event:
        """``work(device)`` on every device of ``group``; one event when all are done."""
        if len(group) == 1:
            return work(group[0])
        return sim.all_of([work(device) for device in group])

    def _run_op(
        self, sim: Simulation, d: int, s: int, it: int, op: Op
    ) -> Generator[Any, Any, None]:
        """Wait for the op's input, compute it (and its tensor-parallel collectives), send on."""
        k = self.schedule.virtual_stage(s, op.chunk)
        plan, last = self.plans[k], self.schedule.virtual_stages - 1
        j, mb, memory = op.microbatch, self.micro_batch, self.memory[d, s]
        tag = f"chunk{op.chunk}" if self.schedule.chunks > 1 else ""
        group = self.groups[d][s]
        if op.kind == FORWARD:
            if k > 0:
                yield self._arrival((d, it, "activation", j, k))
            memory.store((j, op.chunk), plan.activation_bytes * mb, sim.now, it)
            flops = plan.forward_flops * mb
            passes = 1
        else:
            if k < last:
                yield self._arrival((d, it, "gradient", j, k))
            flops = (plan.backward_flops + plan.recompute_flops) * mb
            passes = 2 if self.recompute == "full" else 1
        per_device = flops / self.tp
        yield self._on_group(
            sim,
            group,
            lambda device: sim.compute(
                device,
                flops=per_device,
                label=op.kind,
                iteration=it,
                microbatch=j,
                stage=s,
                op=tag,
                phase="forward" if op.kind == FORWARD else "backward",
            ),
        )
        if self.tp > 1 and plan.split_layers:
            yield self._tensor_parallel(sim, d, s, it, j, plan, passes)
        if op.kind == BACKWARD:
            memory.free((j, op.chunk), sim.now, it)
            if k > 0:
                self._send(sim, d, it, "gradient", j, k, k - 1, tag)
        elif k < last:
            self._send(sim, d, it, "activation", j, k, k + 1, tag)

    def _tp_ops(self, plan: StagePlan) -> tuple[tuple[str, float], ...]:
        """One pass's collectives of a stage's attention/MLP layers for one micro-batch."""
        layer = next(
            x
            for x in self.model.layers[plan.first_layer : plan.first_layer + plan.layers]
            if x.kind in SPLIT_KINDS
        )
        per_layer = layer_collectives(
            layer,
            self.model,
            self.micro_batch,
            bytes_per_value=self.options.bytes_per_value,
            sequence_parallel=self.options.sequence_parallel,
        )
        return per_layer * plan.split_layers

    def _tensor_parallel(
        self, sim: Simulation, d: int, s: int, it: int, j: int, plan: StagePlan, passes: int
    ) -> simpy.Event:
        """Hold the tensor group for its collectives' alpha-beta time, recorded per device."""
        key = (d, s, plan.first_layer, passes)
        cost = self._tp_costs.get(key)
        if cost is None:
            ops = self._tp_ops(plan) * passes
            cost = self._tp_costs[key] = (
                self.tp_timers[d, s].seconds(ops),
                sum(size for _, size in ops),
            )
        seconds, nbytes = cost
        label = "tp " + (
            "reducescatter+allgather" if self.options.sequence_parallel else "allreduce"
        )
        return hold_group(
            sim,
            self.groups[d][s],
            seconds,
            label,
            iteration=it,
            nbytes=nbytes,
            microbatch=j,
            stage=s,
        )

    def _send(
        self, sim: Simulation, d: int, it: int, what: str, j: int, src: int, dst: int, tag: str
    ) -> None:
        """Send ``what`` of micro-batch j from virtual stage ``src`` to ``dst``: tensor rank i
        to tensor rank i, 1/t of the tensor each (Megatron's scatter/gather)."""
        boundary = min(src, dst)
        nbytes = self.plans[boundary].output_bytes * self.micro_batch / self.tp
        event = self._arrival((d, it, what, j, dst))
        senders, receivers = self.groups[d][src % self.pp], self.groups[d][dst % self.pp]
        if senders == receivers:
            event.succeed()
            return
        left = [len(senders)]

        def arrived() -> None:
            left[0] -= 1
            if left[0] == 0:
                event.succeed()

        for a, b in zip(senders, receivers, strict=True):
            sim.transfer_then(
                a,
                b,
                nbytes,
                arrived,
                label=what,
                iteration=it,
                microbatch=j,
                stage=src % self.pp,
                op=tag,
            )

    def _dp_sync(self, sim: Simulation, what: str, s: int, it: int, d: int) -> simpy.Event:
        """Stage ``s``'s gradient sync (``grad``) or ZeRO-1 parameter all-gather (``param``)
        among its dp peers, one collective per tensor rank, started by the last replica."""
        arrived, done = self._flush.setdefault((what, s, it), ([], sim.env.event()))
        arrived.append(d)
        if len(arrived) == self.simulated:
            calls = self.calls[s]
            if what == "param":
                calls = [
                    CollectiveCall(
                        "allgather",
                        c.devices,
                        c.size_bytes,
                        c.algorithm,
                        options=c.options,
                        protocol=c.protocol,
                    )
                    for c in calls
                ]
            events = [
                run_collective(
                    sim,
                    call,
                    model=self.dp_network_model,
                    label=f"{call.op} stage{s}",
                    iteration=it,
                    channels=self.channels,
                )
                for call in calls
            ]
            sim.all_of(events).callbacks.append(lambda _e: done.succeed())
            del self._flush[what, s, it]
        return done

    # -- summary -------------------------------------------------------------

    def flops_per_iteration(self) -> tuple[float, float]:
        """(model FLOPs, hardware FLOPs) of one iteration over all replicas: forward +
        backward, and the same plus recomputation (what Megatron-LM's 96 B s l h^2 formula
        counts)."""
        batch = self.train.global_batch
        model = sum(p.forward_flops + p.backward_flops for p in self.plans) * batch
        hardware = model + sum(p.recompute_flops for p in self.plans) * batch
        return model, hardware

    def summarize(self, sim: Simulation) -> dict[str, Any]:
        """Training keys plus schedule, bubbles (measured and theoretical), stages, memory."""
        iterations = self.train.iterations
        ended = len(self.clock.iteration_ends(iterations))
        if ended != iterations:
            raise SimulationError(
                f"pipeline finished {ended} of {iterations} iterations (schedule deadlock?)"
            )
        workers = self.workers
        summary = training_summary(
            self.clock, sim.records, iterations, self.train.global_batch, workers
        )
        windows = _windows(self.clock.iteration_ends(iterations))
        per_iteration = bubble_by_iteration(sim.records, workers, windows)
        run_s = windows[-1][1] if windows else 0.0
        per_device = {
            device: 1.0 - sum(row["compute_s"] for row in rows) / run_s if run_s > 0 else 0.0
            for device, rows in per_iteration.items()
        }
        s = self.schedule
        iteration_s = summary.pop("iteration_time_s")
        gpus = len(self.placement.workers)
        return {
            "iteration_time_s": iteration_s,
            "iteration_times_s": summary.pop("iteration_times_s"),
            "throughput_samples_per_s": summary.pop("throughput_samples_per_s"),
            **flop_rates(*self.flops_per_iteration(), iteration_s, gpus),
            "model": {"name": self.model.name, "params": self.model.params},
            "workers": workers,
            "global_batch": self.train.global_batch,
            "schedule": s.name,
            "stages": s.stages,
            "micro_batches": s.micro_batches,
            "chunks": s.chunks,
            "recompute": self.recompute != "none",
            "recompute_mode": self.recompute,
            "dp": self.dp,
            "tp": self.tp,
            "pp": self.pp,
            "order": list(self.placement.order),
            "sequence_parallel": self.parallelism.sequence_parallel,
            "zero_stage": self.zero,
            "simulated_replicas": self.simulated,
            "micro_batch_size": self.micro_batch,
            "stage_devices": [list(r) for r in self.grid],
            "tensor_groups": [[list(g) for g in r] for r in self.groups],
            "stage_layers": list(self.stage_layers),
            "stage_layer_names": [
                [
                    self.model.layers[p.first_layer].name,
                    self.model.layers[p.first_layer + p.layers - 1].name,
                ]
                for p in self.plans
            ],
            "theoretical_bubble_fraction": s.theoretical_bubble(),
            "idle_fraction": summary.pop("bubble_fraction"),
            "bubble_fraction": sum(per_device.values()) / len(per_device) if per_device else 0.0,
            "per_device_bubble": per_device,
            "per_device_iteration": per_iteration,
            "activation_memory": self._memory_summary(),
            "communication": self._communication(),
            **summary,
        }

    def _memory_summary(self) -> dict[str, Any]:
        """Per device stage: peak stored activations (max over replicas) and replica 0's timeline."""
        out: dict[str, Any] = {}
        for s in range(self.pp):
            tracks = [self.memory[d, s] for d in range(self.simulated)]
            row: dict[str, Any] = {
                "peak_bytes": max(t.peak_bytes for t in tracks),
                "peak_microbatches": max(t.peak_count for t in tracks),
            }
            if self.recompute != "none":
                row["recompute_working_bytes"] = max(
                    self.plans[k].working_bytes * self.micro_batch for k in self._chunks_of(s)
                )
            row["timeline"] = tracks[0].timeline
            out[str(s)] = row
        return out

    def _communication(self) -> dict[str, Any]:
        """Bytes per micro-batch at each stage boundary, the dp sync, the tensor-parallel bytes."""
        out: dict[str, Any] = {
            "boundary_bytes": [p.output_bytes * self.micro_batch for p in self.plans[:-1]],
            "allreduce_bytes": [calls[0].size_bytes for calls in self.calls.values()],
            "dp_op": "reducescatter+allgather" if self.zero >= 1 else "allreduce",
            "algorithm": self.sync.algorithm if self.dp > 1 else None,
            "network_model": self.scenario.network.model,
            "dp_network_model": self.dp_network_model,
            "dp_link_sharing": [self.dp_sharing.get(s, 1) for s in range(self.pp)],
        }
        if self.tp > 1:
            first = next((p for p in self.plans if p.split_layers), None)
            ops = self._tp_ops(first) if first is not None else ()
            per_layer = sum(size for _, size in ops) / max(first.split_layers, 1) if first else 0.0
            out["tensor_parallel"] = {
                "algorithm": self.parallelism.tp_algorithm,
                "ops": [op for op, _ in ops[: 2 if self.options.sequence_parallel else 1]],
                "bytes_per_layer_per_pass": per_layer,
                "bytes_per_block_per_pass": 2 * per_layer,
                "seconds_per_microbatch_forward": [
                    self.tp_timers[0, s].seconds(
                        tuple(
                            op
                            for k in self._chunks_of(s)
                            if self.plans[k].split_layers
                            for op in self._tp_ops(self.plans[k])
                        )
                    )
                    for s in range(self.pp)
                ],
                "priced": "analytical",
            }
        return out


def _link_sharing(topology: Any, calls: Sequence[CollectiveCall]) -> int:
    """The largest number of ``calls`` (run at once) whose ring-neighbour routes cross one link.

    The data-parallel collectives of a stage, one per tensor rank, start together;
    with tensor groups inside nodes each of them crosses the same NICs.
    """
    if len(calls) < 2:
        return 1
    users: dict[int, int] = {}
    for call in calls:
        devices = call.devices
        links = {
            link.index
            for a, b in zip(devices, devices[1:] + devices[:1], strict=True)
            for link in topology.routes(a, b)[0].links
        }
        for index in links:
            users[index] = users.get(index, 0) + 1
    return max(users.values(), default=1)


class _Memory:
    """Activations stored on one stage device: bytes and micro-batches, their peaks over time."""

    def __init__(self, record: bool) -> None:
        self.held: dict[tuple[int, int], float] = {}
        self.bytes = 0.0
        self.peak_bytes = 0.0
        self.peak_count = 0
        self.record = record
        self.timeline: list[list[float]] = []
        """``[time_s, micro-batches stored, bytes stored]`` at each change, iteration 0 only."""

    def store(self, key: tuple[int, int], nbytes: float, now: float, it: int) -> None:
        self.held[key] = nbytes
        self.bytes += nbytes
        self.peak_bytes = max(self.peak_bytes, self.bytes)
        self.peak_count = max(self.peak_count, len(self.held))
        self._note(now, it)

    def free(self, key: tuple[int, int], now: float, it: int) -> None:
        self.bytes -= self.held.pop(key)
        if not self.held:
            self.bytes = 0.0
        self._note(now, it)

    def _note(self, now: float, it: int) -> None:
        if self.record and it == 0:
            self.timeline.append([now, len(self.held), self.bytes])


def _windows(ends: Sequence[float]) -> list[Interval]:
    """Iteration windows: from the end of the previous iteration (or 0) to its end."""
    return [(ends[i - 1] if i else 0.0, end) for i, end in enumerate(ends)]


def _clip(intervals: Sequence[Interval], window: Interval) -> list[Interval]:
    lo, hi = window
    return [(max(a, lo), min(b, hi)) for a, b in intervals if b > lo and a < hi]


def bubble_by_iteration(
    records: Sequence[Record], devices: Sequence[str], windows: Sequence[Interval]
) -> dict[str, list[dict[str, float]]]:
    """Per device and iteration window: compute, exposed communication, idle (s), bubble fraction.

    ``bubble_fraction`` = 1 - compute / window: the share of the iteration the
    device's compute stream is not busy -- waiting on another stage, exposed
    communication (inter-stage transfers, the gradient all-reduce) and idle.
    """
    wanted = set(devices)
    compute: dict[str, list[Interval]] = {d: [] for d in devices}
    comm: dict[str, list[Interval]] = {d: [] for d in devices}
    for r in records:
        if r.kind == "compute" and r.resource in wanted:
            compute[r.resource].append((r.start_s, r.end_s))
        elif r.kind in ("transfer", "collective"):
            for end in {r.src, r.dst} & wanted:
                comm[end].append((r.start_s, r.end_s))
    out: dict[str, list[dict[str, float]]] = {}
    for device in devices:
        rows = []
        for window in windows:
            length = window[1] - window[0]
            c = _clip(compute[device], window)
            m = _clip(comm[device], window)
            compute_s, busy_s = union_length(c), union_length(c + m)
            rows.append(
                {
                    "compute_s": compute_s,
                    "exposed_communication_s": busy_s - compute_s,
                    "idle_s": max(length - busy_s, 0.0),
                    "bubble_fraction": 1.0 - compute_s / length if length > 0 else 0.0,
                }
            )
        out[device] = rows
    return out
