"""Data-parallel training with gradient all-reduce (PyTorch DDP / Horovod semantics).

```yaml
model: {preset: resnet50}                 # or layers: [{name: fc, params: 4e6, flops: 8e6}]
training: {global_batch: 256, iterations: 3, precision: fp32, optimizer: sgd}
data_parallel:
  sync: allreduce
  workers: "*/gpu*"                       # default: every GPU
  allreduce: {algorithm: ring, bucket: 25MB, overlap: true}
```

Every worker holds the whole model and trains on its share of the global
batch: as even as whole samples allow
(:func:`~clustersim.strategies.training.split_batch`), or by speed or weights
(``data_parallel.balance``, :func:`share_batch`).  Per iteration a worker runs
the forward pass, then the backward pass in reverse layer order.  Gradients
are grouped into buckets in backward order
(:func:`~clustersim.strategies.training.make_buckets`); a worker's bucket is complete
when the backward of every layer in it has run.

Synchronisation (the modelling choices):

* a bucket's all-reduce over all workers starts when the **last** worker has
  completed that bucket -- a collective needs every rank, so the slowest
  worker's gradient sets the start (NCCL/Gloo ranks block in the collective
  until their peers join; we count the collective from the moment all have);
* buckets are launched **in order**: bucket k starts no earlier than bucket
  k-1 started (DDP's ordered buckets); several may be in flight at once and
  then share the network (flow model) -- the analytical model prices each one
  alone, without contention;
* with ``overlap: false`` no bucket starts before every worker has finished
  its whole backward pass; then all are launched, in order, at that instant;
* ``training.recompute`` adds its recomputation to each layer's backward
  (:func:`~clustersim.strategies.training.with_recompute`) and shrinks the stored
  activations of the memory report;
* a layer's forward or backward takes its FLOPs x the worker's samples at the device's
  rate -- under the ``roofline`` compute model (the default), for a transformer, each
  layer's kernels at their shapes for the worker's samples, recomputation included,
  exactly as the pipeline strategy prices a stage of the same layers with tp = 1
  (:class:`~clustersim.strategies.kernel_times.LayerTimes`, docs/compute.md); under
  ``flat``, and for other models, FLOPs / (peak x efficiency);
* once every bucket's all-reduce has ended, each worker runs its optimizer
  step (memory-bound, :func:`~clustersim.strategies.training.optimizer_step`) and
  starts the next iteration.

An iteration of a worker therefore takes forward + backward + the exposed part
of the all-reduces + the optimizer step; stragglers stretch it for everyone.
Units: seconds, bytes, FLOPs.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..budget import WorkEstimate
from ..collectives import CollectiveCall, check_call
from ..collectives.work import calls_work
from ..devices import work_seconds
from ..engine import Simulation
from ..errors import SimulationError
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
from ..model import activations, memory
from ..parallel.batch_shares import Ranks, rank_label, share_out
from ..scenario import DataParallelSpec
from ..units import format_size
from . import training
from .auto import choose_recompute
from .base import TrainingStrategy
from .buckets import BucketSizes, BucketSync
from .kernel_times import LayerTimes
from .written_keys import ALLREDUCE_READS, DATA_PARALLEL_READS

if TYPE_CHECKING:
    from ..scenario.training import Balance
    from ..topology import Device


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
    batch_shares: BatchShares | None = field(default=None, metadata=OPTIONAL)
    """How the global batch was shared out (``data_parallel.balance`` not ``even``)."""


class DataParallel(TrainingStrategy):
    """Synchronous data parallelism: bucketed gradient all-reduce, optionally overlapped."""

    name = "data_parallel"
    description = "data-parallel training: bucketed gradient all-reduce (DDP/Horovod), overlap"
    config_model = DataParallelSpec
    reads = DATA_PARALLEL_READS | ALLREDUCE_READS | {"data_parallel.balance"}
    analytical_shortens = True

    # -- checks --------------------------------------------------------------

    def check(self) -> None:
        """Workers match devices, batch >= workers, the all-reduce algorithm applies."""
        spec: DataParallelSpec = self.config  # type: ignore[assignment]
        self.load_training()
        self.workers = self._select_workers(spec)
        self.check_batch_covers(len(self.workers))
        self.sync = spec.allreduce
        self.buckets = training.make_buckets(self.model, self.sync.bucket, self.train.precision)
        step_s = optimizer_seconds(self.model.params, self.train.optimizer)
        self.samples, self.batch_shares = share_batch(self, spec.balance, fixed_s=step_s)
        self.calls = [self._call(b.nbytes) for b in self.buckets]
        largest = max(self.calls, key=lambda c: c.size_bytes)
        check_call(largest, self.topology, "data_parallel.allreduce.algorithm")
        choose_recompute(self)  # on the shares without recomputation; by speed: shared again
        if spec.balance == "speed" and self.train.recompute != "none":
            self.samples, self.batch_shares = share_batch(self, spec.balance, fixed_s=step_s)

    def _select_workers(self, spec: DataParallelSpec) -> tuple[str, ...]:
        """Devices of ``data_parallel.workers``; when not given, every GPU (else every device)."""
        if "workers" in spec.model_fields_set:
            found = self.topology.select(spec.workers, "data_parallel.workers")
        else:
            devices = list(self.topology.devices.values())
            found = [d for d in devices if d.kind == "gpu"] or devices
        return tuple(d.name for d in found)

    def _call(self, nbytes: float) -> CollectiveCall:
        return CollectiveCall(
            "allreduce",
            self.workers,
            nbytes,
            algorithm=self.sync.algorithm,
            options=dict(self.sync.options),
            protocol=self.scenario.network.protocol,
        )

    def continues_without_workers(self) -> bool:
        """Elastic data parallel: the others go on with the global batch re-split."""
        return True

    @property
    def network_model(self) -> str:
        """``flow`` or ``analytical``, from the scenario's ``network.model``."""
        return self.scenario.network.model

    def describe(self) -> str:
        mode = "overlapped" if self.sync.overlap else "after backward"
        return (
            f"data-parallel training of {self.model.name} ({self.model.params:.4g} params) "
            f"on {len(self.workers)} workers, batch {self.train.global_batch}"
            f"{shares_text(self.batch_shares)}, "
            f"{len(self.buckets)} bucket(s) of <= {format_size(self.sync.bucket)} "
            f"all-reduced by {self.sync.algorithm}, {mode}"
        )

    def estimate_work(self) -> WorkEstimate:
        """Per iteration: every worker's forward, backward and optimizer records, and each
        bucket's all-reduce (:func:`~clustersim.collectives.work.call_work`)."""
        return iteration_work(self, self.calls) * self.train.iterations

    # -- memory --------------------------------------------------------------

    def memory_plan(self) -> dict[str, memory.DeviceMemory]:
        """Per worker: the whole model's states, stored activations, one bucket (bytes)."""
        bucket = max(b.nbytes for b in self.buckets)
        return workers_memory(self, zero_stage=0, buffers=bucket)

    # -- running -------------------------------------------------------------

    def start(self, sim: Simulation) -> None:
        self.clock = training.IterationClock.new()
        self._sync = BucketSync(sim, self)
        self.layer_times = LayerTimes.of_workers(self, self.train.recompute)
        for rank, device in enumerate(self.workers):
            sim.process(self._worker(sim, rank, device))

    def _worker(self, sim: Simulation, rank: int, device: str) -> Generator[Any, Any, None]:
        model = self.layer_times.run_model
        samples = self.samples[rank]
        times = self.layer_times.passes(self.topology.devices[device], samples)
        for it in range(self.train.iterations):
            self.clock.start(device, it, sim.now)
            yield from training.forward_pass(sim, device, model, samples, it, times.forward)
            on_gradient = self._sync.gradient_callback(rank, it)
            yield from training.backward_pass(
                sim, device, model, samples, it, on_gradient, times.backward
            )
            yield self._sync.synced(it)
            yield training.optimizer_step(sim, device, model.params, self.train.optimizer, it)
            self.clock.end(device, it, sim.now)

    # -- summary -------------------------------------------------------------

    def summarize(self, sim: Simulation) -> DataParallelSummary:
        """Iteration times, throughput, model, workers, buckets, bytes all-reduced per iteration."""
        iterations = self.train.iterations
        ended = len(self.clock.iteration_ends(iterations))
        if ended != iterations:
            raise SimulationError(f"data_parallel finished {ended} of {iterations} iterations")
        measured = training_summary(
            self.clock, sim.records, iterations, self.train.global_batch, self.workers
        )
        nbytes = [b.nbytes for b in self.buckets]
        flops = training.flops_per_iteration(
            self.model, self.train.global_batch, self.train.recompute
        )
        return DataParallelSummary(
            times=measured.times,
            flops=flop_rates(*flops, measured.times.iteration_time_s, len(self.workers)),
            model=ModelInfo(self.model.name, self.model.params),
            workers=list(self.workers),
            global_batch=self.train.global_batch,
            buckets=BucketSizes(len(nbytes), nbytes),
            communication=AllReduceTraffic(
                op="allreduce",
                algorithm=self.sync.algorithm,
                overlap=self.sync.overlap,
                network_model=self.network_model,
                bytes_per_iteration=sum(nbytes),
                ran=self.collectives_ran(self.calls, model=self.network_model),
            ),
            shares=measured.shares,
            batch_shares=self.batch_shares,
        )


def share_batch(
    strategy: Any,
    balance: Balance,
    micro_batches: int = 1,
    fixed_s: Callable[[Device], float] | None = None,
) -> tuple[list[float], BatchShares | None]:
    """Samples per worker of a data-parallel ``strategy`` (``workers``, ``train``, ``model``,
    ``topology``, ``scenario``) by ``data_parallel.balance``, and the summary's block (None
    when ``even``: :func:`~clustersim.strategies.training.split_batch`, as always).

    ``micro_batches`` m: each worker runs m micro-batches of its share / m samples (ZeRO's
    gradient accumulation), so the shares are of one micro-batch round, global_batch / m
    samples, each worker's times m.  ``speed``: the shares that end the workers' compute
    together (:func:`~clustersim.parallel.batch_shares.balanced_shares`), each worker's
    time the forward and backward of its samples on its device
    (:func:`~clustersim.strategies.training.compute_seconds`, priced by the layer-time
    model the run uses) plus ``fixed_s(device)`` (what else it does between two
    synchronisations: plain data parallelism's optimizer step)."""
    workers, total = strategy.workers, strategy.train.global_batch // micro_batches
    if balance == "even":
        return training.split_batch(strategy.train.global_batch, workers), None
    devices = [strategy.topology.devices[w] for w in workers]
    recompute = strategy.train.recompute
    times = LayerTimes.of_workers(strategy, "none" if recompute == "auto" else recompute)

    def seconds_of(rank: int) -> Callable[[int], float]:
        device, model = devices[rank], times.run_model
        fixed = fixed_s(device) if fixed_s is not None else 0.0
        return lambda n: (
            micro_batches * training.compute_seconds(device, model, n, times.passes(device, n))
            + fixed
        )

    ranks = Ranks([[d] for d in devices], workers, "worker", "samples")
    fix = "a larger global batch, or weights closer together"
    shares = share_out(balance, total, ranks, strategy.topology, seconds_of, fix=fix)
    how = "speed" if balance == "speed" else "weights"
    samples = [float(n * micro_batches) for n in shares]
    labels = [rank_label([d]) for d in devices]
    return samples, BatchShares.of(how, "sample", labels, [n * micro_batches for n in shares])


def optimizer_seconds(params: float, optimizer: str) -> Callable[[Device], float]:
    """Seconds of a worker's optimizer step over ``params`` parameters, on each device (as
    :func:`~clustersim.strategies.training.optimizer_step` books it)."""
    nbytes = params * training.OPTIMIZER_BYTES_PER_PARAM[optimizer]
    return lambda device: work_seconds(device, bytes=nbytes)


def shares_text(shares: BatchShares | None) -> str:
    """`` balanced by speed (8 x a100 5-6 samples, ...)`` for describe(); "" when even."""
    if shares is None:
        return ""
    how = "by speed" if shares.balance == "speed" else "by weights"
    return f" balanced {how} ({shares.describe()})"


def iteration_work(strategy: Any, calls: list[CollectiveCall]) -> WorkEstimate:
    """One iteration of a data-parallel ``strategy`` (``workers``, ``model``, ``topology``,
    ``network_model``, ``channels``): a record per layer and pass and an optimizer record
    per worker, and ``calls`` run once."""
    computes = len(strategy.workers) * (2 * len(strategy.model.layers) + 1)
    model, channels = strategy.network_model, strategy.channels
    return WorkEstimate(records=computes) + calls_work(
        calls, strategy.topology, model=model, channels=channels
    )


def workers_memory(
    strategy: Any, *, zero_stage: int, buffers: float
) -> dict[str, memory.DeviceMemory]:
    """Per data-parallel worker of ``strategy`` (``workers``, ``samples``, ``model``,
    ``train``, ``topology``, ``micro_batches`` if it accumulates gradients): model states
    sharded by ZeRO ``zero_stage`` over the workers (ZeRO's accounting unless
    ``training.memory.states`` says otherwise), the activations one micro-batch of its samples
    stores (with ``training.recompute``; the micro-batches run one after another), ``buffers``
    bytes."""
    train = strategy.train
    states = memory.model_states(
        strategy.model.params,
        zero_stage=zero_stage,
        dp=len(strategy.workers),
        precision=train.precision,
        optimizer=train.optimizer,
        accounting=memory.state_accounting(train.memory.states, memory.ZERO),
    )
    recompute = train.recompute or "none"
    value_bytes = activations.activation_value_bytes(train.precision)
    micro_batches = getattr(strategy, "micro_batches", 1)  # a worker holds one micro-batch's
    return {
        device: memory.DeviceMemory.of(
            states,
            stored_activation_bytes(
                strategy.model, samples / micro_batches, recompute, value_bytes
            ),
            buffers,
            strategy.topology.device(device).memory_bytes,
        )
        for device, samples in zip(strategy.workers, strategy.samples, strict=True)
    }


def stored_activation_bytes(
    model: training.Model, samples: float, recompute: str, value_bytes: float = 2.0
) -> float:
    """Activation bytes a data-parallel worker keeps for its backward pass over ``samples``
    samples, with ``recompute`` (none, selective, full) and activation values of
    ``value_bytes`` bytes: the sum over layers of
    :func:`clustersim.model.activations.layer_activation_bytes`."""
    return sum(
        activations.layer_activation_bytes(
            layer, model, samples, recompute=recompute, value_bytes=value_bytes
        )
        for layer in model.layers
    )
