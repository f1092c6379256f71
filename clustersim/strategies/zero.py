"""ZeRO stages 1-3 / FSDP: data parallelism with sharded model states.

```yaml
model: {preset: bert-large}
training: {global_batch: 64, iterations: 2, precision: bf16, optimizer: adam}
data_parallel:
  sync: allreduce                         # ZeRO shards over all-reduce ranks (not ps)
  workers: "*/gpu*"                       # default: every GPU
  allreduce: {algorithm: ring, bucket: 25MB, overlap: true}
zero: {stage: 3, prefetch: true}          # stage 1, 2, 3 or fsdp (= 3)
```

ZeRO (Rajbhandari et al. 2020) keeps plain data parallelism's arithmetic --
every one of the N workers trains ``global_batch / N`` samples
(:func:`~clustersim.strategies.training.split_batch`; by speed or weights with
``data_parallel.balance``, :func:`~.data_parallel.share_batch`), one forward and one backward pass
per iteration -- but shards the model states over the workers.  Collectives
use ``data_parallel.allreduce.algorithm`` (it must implement reducescatter and
allgather) and the scenario's ``network.model``.  Sizes are nccl-tests' S (see
:mod:`clustersim.collectives.ops`): the whole buffer; each rank contributes to,
or ends with, S / N of it.

Stage 1 and 2 (optimizer states, then also gradients, sharded):

* the gradients are grouped into DDP's buckets in backward order
  (:func:`~clustersim.strategies.training.make_buckets`, ``allreduce.bucket``); a bucket
  is **reduce-scattered** over the N workers when the last worker has
  completed it, buckets launched in order, overlapping backward when
  ``allreduce.overlap`` (exactly as :mod:`.data_parallel` launches its
  all-reduces);
* once every reduce-scatter has ended, each worker runs the optimizer step on
  its params / N parameters (memory-bound,
  :data:`~clustersim.strategies.training.OPTIMIZER_BYTES_PER_PARAM`);
* when the last worker has stepped, the updated parameters are
  **all-gathered** over the same buckets, all launched at once, in order; the
  iteration ends when every all-gather has.

A ring reduce-scatter plus a ring all-gather is a ring all-reduce, so the
bytes on the wire equal plain data parallelism's.  Stages 1 and 2 take the
same time; they differ in memory only.

Stage 3 / ``fsdp`` (parameters sharded too):

* before layer i's forward, and again before its backward, its parameters are
  all-gathered: one allgather of ``params_i x bytes per value`` over the N
  workers (layers without parameters need none).  A gather starts when the
  last worker asks for it;
* the gradients are reduce-scattered bucket by bucket as in stages 1-2; the
  optimizer step covers params / N; no all-gather follows it (the next
  forward gathers what it needs);
* ``zero.prefetch: true`` (default): when a layer's compute starts, the worker
  asks for the next gather in the order forward, then backward (the last
  forward layer prefetches the first backward layer), so the gather overlaps
  compute; ``prefetch: false``: a gather is asked for when its layer is about
  to compute.  The first gather of an iteration is never hidden.

Bytes: two all-gathers and one reduce-scatter of Psi, 1.5 x an all-reduce.

Gradient accumulation (``training.micro_batch``: each worker's samples in m
micro-batches, each a forward and a backward): stage 1 accumulates the full gradients
and reduce-scatters once, with the last micro-batch's backward; stage 2 reduce-scatters
every micro-batch's buckets (DeepSpeed's stage-2 optimizer reduces each micro-batch's
gradients, as a rank keeps only its shard), the worker waiting for all of them before
its step; stage 3 also gathers every layer again before each micro-batch's forward and
backward (DeepSpeed releases gathered parameters after use).  m = 1 without the key.

``training.recompute: full`` makes the backward of every attention and MLP
layer cost one more forward (folded into its ``bwd`` record, as the pipeline
strategy does); in stage 3 the backward gather serves the recomputation.
Selective recomputation adds the attention scores and their product with V
(:func:`~clustersim.strategies.training.with_recompute`).  Each layer's time is priced as
plain data parallelism prices it: its kernels at their shapes for the samples of
one pass under the ``roofline`` compute model, for a transformer
(:class:`~clustersim.strategies.kernel_times.LayerTimes`); FLOPs / (peak x
efficiency) under ``flat`` and for other models.

Memory (:meth:`Zero.memory_plan`): model states by
:func:`clustersim.model.memory.model_states`; activations by
:func:`clustersim.model.activations.layer_activation_bytes`; buffers: stage 1-2 one
bucket for the reduce-scatter and one for the all-gather; stage 3 one bucket
plus the gathered parameters of the two largest consecutive layers (prefetch)
or of the largest layer (no prefetch).  Units: seconds, bytes, FLOPs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator
from typing import Any

import simpy

from ..budget import WorkEstimate
from ..collectives import CollectiveCall, check_call, run_collective
from ..engine import Simulation
from ..errors import Problem, ScenarioError, SimulationError
from ..metrics import (
    OPTIONAL,
    SPLICE,
    BatchShares,
    CollectivesRan,
    DeviceShares,
    FlopTrainingSummary,
    ModelInfo,
    SummaryPart,
    flop_rates,
    training_summary,
)
from ..model import memory
from ..parallel import rules
from ..scenario import DataParallelSpec
from ..units import format_size
from . import training
from .auto import choose_recompute
from .base import TrainingStrategy
from .buckets import BucketSizes, BucketSync
from .data_parallel import DataParallel, iteration_work, share_batch, shares_text, workers_memory
from .kernel_times import LayerTimes
from .written_keys import ALLREDUCE_READS, DATA_PARALLEL_READS

"""Layer kinds whose forward full recomputation re-runs in backward."""

ALGORITHM_KEY = "data_parallel.allreduce.algorithm"


@dataclasses.dataclass(frozen=True)
class Step:
    """One layer's compute in an iteration: ``fwd`` or ``bwd`` of layer ``layer``."""

    phase: str
    layer: int
    gather: int | None
    """Position of this step's parameter all-gather in the iteration's gathers (stage 3),
    None if the layer has no parameters."""
    prefetch: int | None
    """Position of the next gather after this step (what prefetch asks for), or None."""


def stage3_steps(model: training.Model) -> list[Step]:
    """Forward then backward steps with their gather positions and prefetch targets."""
    order = [("fwd", i) for i in range(len(model.layers))]
    order += [("bwd", i) for i in reversed(range(len(model.layers)))]
    gathers: list[int | None] = []
    count = 0
    for _phase, i in order:
        has_params = model.layers[i].params > 0
        gathers.append(count if has_params else None)
        count += has_params
    # The next gather after each step, found walking back once (not a scan per step).
    following: list[int | None] = [None] * len(order)
    upcoming: int | None = None
    for k in reversed(range(len(order))):
        following[k] = upcoming
        if gathers[k] is not None:
            upcoming = gathers[k]
    return [Step(phase, i, gathers[k], following[k]) for k, (phase, i) in enumerate(order)]


@dataclasses.dataclass(frozen=True)
class ZeroSettings(SummaryPart):
    """The ``zero`` block: the stage, and whether stage 3 gathers ahead (``prefetch``)."""

    stage: int
    prefetch: bool


@dataclasses.dataclass(frozen=True)
class ShardedTraffic(SummaryPart):
    """A ZeRO run's ``communication`` block (bytes per iteration)."""

    bytes_per_iteration: float
    allgather_bytes: float
    reducescatter_bytes: float
    algorithm: str
    overlap: bool
    network_model: str
    ran: CollectivesRan | None = dataclasses.field(default=None, metadata=OPTIONAL)
    """What the ZeRO (reduce-scatter, all-gather) collectives ran as (algorithm/protocol counts, channels)."""


@dataclasses.dataclass(frozen=True)
class ZeroSummary(FlopTrainingSummary):
    """ZeRO stages 1-3 / FSDP."""

    name = "zero"
    description = "training keys, zero settings, buckets, reduce-scatter and all-gather bytes"

    zero: ZeroSettings
    zero_stage: int
    buckets: BucketSizes
    communication: ShardedTraffic
    shares: DeviceShares = dataclasses.field(metadata=SPLICE)
    batch_shares: BatchShares | None = dataclasses.field(default=None, metadata=OPTIONAL)
    """How the global batch was shared out (``data_parallel.balance`` not ``even``)."""


class Zero(TrainingStrategy):
    """ZeRO stage 1-3 / FSDP: reduce-scattered gradients, sharded step, gathered parameters."""

    name = "zero"
    description = "ZeRO stages 1-3 / FSDP: sharded optimizer states, gradients and parameters"
    config_model = DataParallelSpec
    analytical_shortens = True
    reads = DATA_PARALLEL_READS | ALLREDUCE_READS | {"data_parallel.balance", "zero.prefetch"}

    # Worker selection and the network model are plain data parallelism's.
    _select_workers = DataParallel._select_workers
    network_model = DataParallel.network_model

    # -- checks --------------------------------------------------------------

    def check(self) -> None:
        """sync is allreduce, workers match devices, batch >= workers, the algorithm applies."""
        spec: DataParallelSpec = self.config  # type: ignore[assignment]
        zero = self.scenario.zero
        assert zero is not None  # the strategy is chosen by zero.stage >= 1
        self.stage, self.prefetch = zero.level, zero.prefetch
        if spec.sync != "allreduce":
            raise ScenarioError(
                Problem(
                    "data_parallel.sync",
                    f"zero stage {zero.stage} shards model states over all-reduce ranks; "
                    f"it does not combine with sync '{spec.sync}'",
                    "allreduce (or zero.stage: 0 for parameter servers)",
                )
            )
        self.load_training()
        self.workers = self._select_workers(spec)
        self._check_batch()
        self.sync = spec.allreduce
        self.buckets = training.make_buckets(self.model, self.sync.bucket, self.train.precision)
        self.samples, self.batch_shares = share_batch(self, spec.balance, self.micro_batches)
        self.calls = [self._call("reducescatter", b.nbytes) for b in self.buckets]
        self.steps = stage3_steps(self.model) if self.stage >= 3 else []
        self.gathers = self._gather_calls()
        self._check_algorithm()
        choose_recompute(self)  # on the shares without recomputation; by speed: shared again
        if spec.balance == "speed" and self.train.recompute != "none":
            self.samples, self.batch_shares = share_batch(self, spec.balance, self.micro_batches)
        self.recompute = self.train.recompute
        self.run_model = training.with_recompute(self.model, self.recompute)

    def _check_batch(self) -> None:
        self.check_batch_covers(len(self.workers))
        self.micro_batches = 1
        """Micro-batches per iteration (gradient accumulation, ``training.micro_batch``)."""
        b = self.train.micro_batch
        if b is not None:
            rules.enforce(rules.micro_batch_problem(self.train.global_batch, len(self.workers), b))
            self.micro_batches = int(self.train.global_batch / len(self.workers) / b)

    def _gather_calls(self) -> list[tuple[str, CollectiveCall]]:
        """The iteration's all-gathers in launch order, with their labels."""
        if self.stage < 3:
            return [
                (f"allgather bucket{b.index}", self._call("allgather", b.nbytes))
                for b in self.buckets
            ]
        per_value = training.BYTES_PER_VALUE[self.train.precision]
        out = []
        for step in self.steps:
            if step.gather is not None:
                layer = self.model.layers[step.layer]
                call = self._call("allgather", layer.params * per_value)
                out.append((f"allgather {step.phase} {layer.name}", call))
        return out

    def _check_algorithm(self) -> None:
        """The algorithm must run the largest reduce-scatter and all-gather on this topology."""
        for calls in (self.calls, [call for _label, call in self.gathers]):
            if not calls:
                continue
            largest = max(calls, key=lambda c: c.size_bytes)
            try:
                check_call(largest, self.topology, ALGORITHM_KEY)
            except ScenarioError as exc:
                needs = f"zero stage {self.stage} runs reducescatter and allgather"
                raise ScenarioError(
                    [Problem(p.path, f"{needs}: {p.message}", p.allowed) for p in exc.problems]
                ) from None

    def _call(self, op: str, nbytes: float) -> CollectiveCall:
        return CollectiveCall(
            op,
            self.workers,
            nbytes,
            algorithm=self.sync.algorithm,
            options=dict(self.sync.options),
            protocol=self.scenario.network.protocol,
        )

    def describe(self) -> str:
        mode = "overlapped" if self.sync.overlap else "after backward"
        gathers = "per layer" + (", prefetched" if self.prefetch else "")
        gathers = gathers if self.stage >= 3 else "per bucket after the step"
        return (
            f"zero stage {self.stage} training of {self.model.name} ({self.model.params:.4g} "
            f"params) on {len(self.workers)} workers, batch {self.train.global_batch}"
            f"{shares_text(self.batch_shares)}, "
            f"{len(self.buckets)} bucket(s) of <= {format_size(self.sync.bucket)} "
            f"reduce-scattered by {self.sync.algorithm}, {mode}; parameters all-gathered {gathers}"
        )

    def estimate_work(self) -> WorkEstimate:
        """Per iteration: the workers' computes, each bucket's reduce-scatter and every
        all-gather (per bucket, or per layer and pass in stage 3)."""
        return iteration_work(self, self._iteration_calls()) * self.train.iterations

    def _iteration_calls(self) -> list[CollectiveCall]:
        """One iteration's reduce-scatters and all-gathers."""
        m = self.micro_batches
        gathers = [call for _label, call in self.gathers]
        return self.calls * (m if self.stage >= 2 else 1) + gathers * (m if self.stage >= 3 else 1)

    # -- memory --------------------------------------------------------------

    def memory_plan(self) -> dict[str, memory.DeviceMemory]:
        """Per worker: sharded model states, stored activations, buffers (bytes)."""
        return workers_memory(self, zero_stage=self.stage, buffers=self.buffer_bytes())

    def buffer_bytes(self) -> float:
        """Communication buffers at the peak: buckets and gathered parameters (bytes)."""
        bucket = max(b.nbytes for b in self.buckets)
        if self.stage < 3:
            return 2 * bucket
        per_value = training.BYTES_PER_VALUE[self.train.precision]
        sizes = [layer.params * per_value for layer in self.model.layers if layer.params > 0]
        if not sizes:
            return bucket
        if self.prefetch and len(sizes) > 1:
            gathered = max(a + b for a, b in zip(sizes, sizes[1:]))
        else:
            gathered = max(sizes)
        return gathered + bucket

    # -- running -------------------------------------------------------------

    def start(self, sim: Simulation) -> None:
        self.clock = training.IterationClock.new()
        self._scatter = _ScatterSync(sim, self)
        self._gather = _Rendezvous(sim, len(self.workers), self._launch_gather)
        self.layer_times = LayerTimes.of_workers(self, self.recompute)
        worker = self._stage3_worker if self.stage >= 3 else self._stage12_worker
        for rank, device in enumerate(self.workers):
            sim.process(worker(sim, rank, device))

    def _scatter_key(self, it: int, j: int) -> Any:
        """The reduce-scatter round of micro-batch ``j``: one per micro-batch from stage 2
        (DeepSpeed reduces every micro-batch's gradients), else one per iteration."""
        return (it, j) if self.stage >= 2 and self.micro_batches > 1 else it

    def _stage12_worker(self, sim: Simulation, rank: int, device: str) -> Generator[Any, Any, None]:
        model, m = self.run_model, self.micro_batches
        samples = self.samples[rank] / m
        times = self.layer_times.passes(self.topology.devices[device], samples)
        for it in range(self.train.iterations):
            self.clock.start(device, it, sim.now)
            rounds = []
            for j in range(m):
                yield from training.forward_pass(sim, device, model, samples, it, times.forward)
                on_gradient = None
                if self.stage >= 2 or j == m - 1:  # ZeRO-1 accumulates, reduces at the end
                    rounds.append(self._scatter_key(it, j))
                    on_gradient = self._scatter.gradient_callback(rank, rounds[-1])
                yield from training.backward_pass(
                    sim, device, model, samples, it, on_gradient, times.backward
                )
            for key in rounds:
                yield self._scatter.synced(key)
            yield self._optimizer_step(sim, device, it)
            yield self._gather.request((it, -1))
            self.clock.end(device, it, sim.now)

    def _stage3_worker(self, sim: Simulation, rank: int, device: str) -> Generator[Any, Any, None]:
        m = self.micro_batches
        for it in range(self.train.iterations):
            self.clock.start(device, it, sim.now)
            rounds = [self._scatter_key(it, j) for j in range(m)]
            for j in range(m):
                yield from self._stage3_pass(sim, rank, device, it, j, rounds[j])
            for key in dict.fromkeys(rounds):
                yield self._scatter.synced(key)
            yield self._optimizer_step(sim, device, it)
            self.clock.end(device, it, sim.now)

    def _stage3_pass(
        self, sim: Simulation, rank: int, device: str, it: int, j: int, key: Any
    ) -> Generator[Any, Any, None]:
        """Forward and backward of micro-batch ``j``: every layer's parameters gathered
        again (DeepSpeed releases them after use), gradients reduce-scattered as round
        ``key``."""
        model, samples = self.run_model, self.samples[rank] / self.micro_batches
        asked = _Asked(self._gather, it, j)
        on_gradient = self._scatter.gradient_callback(rank, key)
        times = self.layer_times.passes(self.topology.devices[device], samples)
        for step in self.steps:
            if step.gather is not None:
                yield asked.upto(step.gather)
            layer = model.layers[step.layer]
            forward = step.phase == "fwd"
            flops = layer.forward_flops if forward else layer.backward_flops
            label = f"{step.phase} {layer.name}"
            work = sim.compute(
                device,
                flops=flops * samples,
                seconds=(times.forward if forward else times.backward)[step.layer],
                label=label,
                iteration=it,
                phase="forward" if step.phase == "fwd" else "backward",
            )
            if self.prefetch and step.prefetch is not None:
                asked.upto(step.prefetch)
            yield work
            if step.phase == "bwd":
                on_gradient(step.layer)

    def _optimizer_step(self, sim: Simulation, device: str, it: int) -> simpy.Event:
        """The step on this worker's shard: params / N parameters."""
        shard = self.model.params / len(self.workers)
        return training.optimizer_step(sim, device, shard, self.train.optimizer, it)

    def _launch_gather(self, key: tuple[int, ...]) -> simpy.Event:
        """Start all-gather ``key`` = (iteration, [micro-batch,] position); position -1:
        every bucket at once."""
        it, position = key[0], key[-1]
        chosen = self.gathers if position < 0 else [self.gathers[position]]
        events = [
            run_collective(
                self._gather.sim,
                call,
                model=self.network_model,
                label=label,
                iteration=it,
                channels=self.channels,
            )
            for label, call in chosen
        ]
        return events[0] if len(events) == 1 else self._gather.sim.all_of(events)

    # -- summary -------------------------------------------------------------

    def summarize(self, sim: Simulation) -> ZeroSummary:
        """Iteration times, throughput, model, workers, zero settings, bytes per iteration."""
        iterations = self.train.iterations
        ended = len(self.clock.iteration_ends(iterations))
        if ended != iterations:
            raise SimulationError(f"zero finished {ended} of {iterations} iterations")
        measured = training_summary(
            self.clock, sim.records, iterations, self.train.global_batch, self.workers
        )
        nbytes = [b.nbytes for b in self.buckets]
        m = self.micro_batches
        scattered = sum(nbytes) * (m if self.stage >= 2 else 1)
        gathered = sum(call.size_bytes for _label, call in self.gathers) * (
            m if self.stage >= 3 else 1
        )
        flops = training.flops_per_iteration(self.model, self.train.global_batch, self.recompute)
        return ZeroSummary(
            times=measured.times,
            flops=flop_rates(*flops, measured.times.iteration_time_s, len(self.workers)),
            model=ModelInfo(self.model.name, self.model.params),
            workers=list(self.workers),
            global_batch=self.train.global_batch,
            zero=ZeroSettings(self.stage, self.prefetch),
            zero_stage=self.stage,
            buckets=BucketSizes(len(nbytes), nbytes),
            communication=ShardedTraffic(
                bytes_per_iteration=(scattered + gathered) / 2,
                allgather_bytes=gathered,
                reducescatter_bytes=scattered,
                algorithm=self.sync.algorithm,
                overlap=self.sync.overlap,
                network_model=self.network_model,
                ran=self.collectives_ran(self._iteration_calls(), model=self.network_model),
            ),
            shares=measured.shares,
            batch_shares=self.batch_shares,
        )


class _ScatterSync(BucketSync):
    """DDP's ordered bucket launches; the calls are reduce-scatters (labelled by their op).
    A round is an iteration, or (iteration, micro-batch) when every micro-batch reduces."""

    @staticmethod
    def _iteration(it: Any) -> int:
        return it[0] if isinstance(it, tuple) else it


class _Rendezvous:
    """Collectives every worker asks for once: each starts when the last of the N asks."""

    def __init__(
        self, sim: Simulation, n: int, launch: Callable[[tuple[int, ...]], simpy.Event]
    ) -> None:
        self.sim = sim
        self.n = n
        self.launch = launch
        self.asked: dict[tuple[int, ...], int] = {}
        """Per collective not yet started: how many workers asked for it."""
        self.done: dict[tuple[int, ...], simpy.Event] = {}
        """Per collective not yet started: the event its askers wait on."""

    def request(self, key: tuple[int, ...]) -> simpy.Event:
        """One worker asks for collective ``key``; the event fires when the collective ends."""
        event = self.done.get(key)
        if event is None:
            event = self.done[key] = self.sim.event()
        count = self.asked[key] = self.asked.get(key, 0) + 1
        if count == self.n:
            del self.asked[key], self.done[key]
            self.launch(key).callbacks.append(lambda _e: event.succeed())
        return event


class _Asked:
    """One worker's stage-3 gathers of one iteration, asked for in order, each once."""

    def __init__(self, rendezvous: _Rendezvous, iteration: int, microbatch: int = 0) -> None:
        self.rendezvous = rendezvous
        self.iteration = iteration
        self.microbatch = microbatch
        self.events: list[simpy.Event] = []

    def upto(self, position: int) -> simpy.Event:
        """Ask for every gather up to ``position`` not asked for yet; the event of ``position``."""
        while len(self.events) <= position:
            key = (self.iteration, self.microbatch, len(self.events))
            self.events.append(self.rendezvous.request(key))
        return self.events[position]
