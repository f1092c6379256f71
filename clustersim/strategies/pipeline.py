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
from ..collectives import CollectiveCall, check_call, run_collective
from ..engine import Simulation
from ..errors import Problem, ScenarioError, SimulationError
from ..metrics import training_summary, union_length
from ..pipeline import BACKWARD, FORWARD, Op, balanced_split, check_stage_layers, make_schedule
from ..records import Record
from ..scenario import DataParallelSpec, ParallelismSpec, PipelineSpec
from .base import TrainingStrategy

Interval = tuple[float, float]


@dataclass(frozen=True)
class StagePlan:
    """One virtual stage: its layers and its cost per sample."""

    index: int
    first_layer: int
    layers: int
    forward_flops: float
    """Forward FLOPs per sample."""
    backward_flops: float
    """Backward FLOPs per sample."""
    params: float
    activation_bytes: float
    """Activation bytes stored per sample (every layer of the stage)."""
    output_bytes: float
    """Bytes per sample sent to the next stage: the last layer's activation bytes."""
    input_bytes: float
    """Bytes per sample of the stage input (what recomputation stores)."""


def plan_stages(model: training.Model, counts: Sequence[int]) -> list[StagePlan]:
    """The virtual stages holding ``counts`` consecutive layers each, input first."""
    plans: list[StagePlan] = []
    first = 0
    for k, count in enumerate(counts):
        layers = model.layers[first : first + count]
        previous = plans[-1].output_bytes if plans else layers[0].activation_bytes
        plans.append(
            StagePlan(
                index=k,
                first_layer=first,
                layers=count,
                forward_flops=sum(x.forward_flops for x in layers),
                backward_flops=sum(x.backward_flops for x in layers),
                params=sum(x.params for x in layers),
                activation_bytes=sum(x.activation_bytes for x in layers),
                output_bytes=layers[-1].activation_bytes,
                input_bytes=previous,
            )
        )
        first += count
    return plans


class Pipeline(TrainingStrategy):
    """Pipeline parallelism with a pluggable schedule, combined with data parallelism."""

    name = "pipeline"
    description = "pipeline-parallel training: naive, GPipe, 1F1B, interleaved; x data parallel"
    config_model = DataParallelSpec

    # -- checks --------------------------------------------------------------

    def check(self) -> None:
        """Grid, schedule, micro-batch size, stage split and all-reduce algorithm."""
        spec: DataParallelSpec = self.config  # type: ignore[assignment]
        scenario = self.scenario
        self.load_training()
        self.pipe = scenario.pipeline or PipelineSpec()
        parallelism = scenario.parallelism or ParallelismSpec()
        if spec.sync != "allreduce":
            raise ScenarioError(
                Problem(
                    "data_parallel.sync", "pipeline parallelism syncs by all-reduce", "allreduce"
                )
            )
        if parallelism.tp != 1:
            raise ScenarioError(
                Problem("parallelism.tp", "tensor parallelism is not simulated yet", "1")
            )
        self.pp = parallelism.pp
        self.grid = self._grid(self._select_workers(spec), parallelism)
        self.dp = len(self.grid)
        self.schedule = make_schedule(
            self.pipe.schedule, self.pp, self.pipe.micro_batches, self.pipe.chunks
        )
        self.micro_batch = self._micro_batch_size()
        self.stage_layers = self._split()
        self.plans = plan_stages(self.model, self.stage_layers)
        self.ops = [self.schedule.operations(s) for s in range(self.pp)]
        self.sync = spec.allreduce
        self.calls = [self._call(s) for s in range(self.pp)] if self.dp > 1 else []
        for call in self.calls:
            check_call(call, self.topology, "data_parallel.allreduce.algorithm")

    def _select_workers(self, spec: DataParallelSpec) -> list[str]:
        """Devices of ``data_parallel.workers``; when not given, every GPU (else every device)."""
        if "workers" in spec.model_fields_set:
            found = self.topology.select(spec.workers, "data_parallel.workers")
        else:
            devices = list(self.topology.devices.values())
            found = [d for d in devices if d.kind == "gpu"] or devices
        return [d.name for d in found]

    def _grid(self, workers: list[str], parallelism: ParallelismSpec) -> list[list[str]]:
        """Replica d's stage devices: ``workers[d pp : (d + 1) pp]``."""
        n, pp = len(workers), self.pp
        if parallelism.dp is None:
            if n % pp:
                raise ScenarioError(
                    Problem(
                        "parallelism.pp",
                        f"{pp} stages do not divide the {n} workers",
                        f"a divisor of {n}, or set parallelism.dp and data_parallel.workers",
                    )
                )
            dp = n // pp
        else:
            dp = parallelism.dp
            if dp * pp > n:
                raise ScenarioError(
                    Problem(
                        "parallelism.dp",
                        f"dp {dp} x pp {pp} = {dp * pp} workers needed, {n} available",
                        f"dp <= {n // pp}",
                    )
                )
        return [workers[d * pp : (d + 1) * pp] for d in range(dp)]

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

    def _split(self) -> list[int]:
        """Layers per virtual stage: as listed, or balanced by forward + backward FLOPs."""
        parts = self.schedule.virtual_stages
        layers = self.model.layers
        if self.pipe.stage_layers is not None:
            check_stage_layers(self.pipe.stage_layers, len(layers), parts)
            return list(self.pipe.stage_layers)
        if len(layers) < parts:
            raise ScenarioError(
                Problem(
                    "parallelism.pp",
                    f"the model has {len(layers)} layers, fewer than the {parts} (virtual) stages",
                    f"pp x chunks <= {len(layers)}",
                )
            )
        return balanced_split([x.forward_flops + x.backward_flops for x in layers], parts)

    def _call(self, stage: int) -> CollectiveCall:
        """The all-reduce of device stage ``stage``'s gradients among its dp peers."""
        params = sum(self.plans[k].params for k in self._chunks_of(stage))
        return CollectiveCall(
            "allreduce",
            tuple(replica[stage] for replica in self.grid),
            params * training.BYTES_PER_VALUE[self.train.precision],
            algorithm=self.sync.algorithm,
            options=dict(self.sync.options),
        )

    def _chunks_of(self, stage: int) -> list[int]:
        """Virtual stages on device stage ``stage``."""
        return [self.schedule.virtual_stage(stage, c) for c in range(self.schedule.chunks)]

    @property
    def workers(self) -> list[str]:
        """Every stage device, replica by replica."""
        return [device for replica in self.grid for device in replica]

    def describe(self) -> str:
        s = self.schedule
        chunks = f", {s.chunks} chunks" if s.chunks > 1 else ""
        recompute = ", recompute" if self.pipe.recompute else ""
        return (
            f"pipeline training of {self.model.name} ({self.model.params:.4g} params): "
            f"{s.name} over pp {self.pp} x dp {self.dp}, {s.micro_batches} micro-batches "
            f"of {self.micro_batch:.4g} samples{chunks}{recompute}, stages {self.stage_layers}"
        )

    # -- running -------------------------------------------------------------

    def start(self, sim: Simulation) -> None:
        self.clock = training.IterationClock.new()
        self._env = sim.env
        self._arrivals: dict[tuple[int, int, str, int, int], simpy.Event] = {}
        self._flush: dict[tuple[int, int], tuple[list[int], simpy.Event]] = {}
        self.memory = {
            (d, s): _Memory(record=d == 0) for d in range(self.dp) for s in range(self.pp)
        }
        for d in range(self.dp):
            for s in range(self.pp):
                sim.process(self._stage(sim, d, s))

    def _arrival(self, key: tuple[int, int, str, int, int]) -> simpy.Event:
        """The event of an activation or gradient reaching its virtual stage (created on demand)."""
        event = self._arrivals.get(key)
        if event is None:
            event = self._arrivals[key] = simpy.Event(self._env)
        return event

    def _stage(self, sim: Simulation, d: int, s: int) -> Generator[Any, Any, None]:
        """The process of stage device ``s`` of replica ``d``: its operations, flush, step."""
        device = self.grid[d][s]
        params = sum(self.plans[k].params for k in self._chunks_of(s))
        for it in range(self.train.iterations):
            self.clock.start(device, it, sim.now)
            for op in self.ops[s]:
                yield from self._run_op(sim, d, s, it, op)
            if self.dp > 1:
                yield self._allreduce(sim, s, it, d)
            yield sim.compute(
                device,
                bytes=params * training.OPTIMIZER_BYTES_PER_PARAM[self.train.optimizer],
                label="optimizer",
                iteration=it,
                stage=s,
            )
            self.clock.end(device, it, sim.now)

    def _run_op(
        self, sim: Simulation, d: int, s: int, it: int, op: Op
    ) -> Generator[Any, Any, None]:
        """Wait for the op's input, compute it, send its output on."""
        k = self.schedule.virtual_stage(s, op.chunk)
        plan, last = self.plans[k], self.schedule.virtual_stages - 1
        j, mb, memory = op.microbatch, self.micro_batch, self.memory[d, s]
        tag = f"chunk{op.chunk}" if self.schedule.chunks > 1 else ""
        device = self.grid[d][s]
        if op.kind == FORWARD:
            if k > 0:
                yield self._arrival((d, it, "activation", j, k))
            stored = (plan.input_bytes if self.pipe.recompute else plan.activation_bytes) * mb
            memory.store((j, op.chunk), stored, sim.now, it)
            flops = plan.forward_flops * mb
        else:
            if k < last:
                yield self._arrival((d, it, "gradient", j, k))
            flops = (plan.backward_flops + (plan.forward_flops if self.pipe.recompute else 0)) * mb
        yield sim.compute(
            device, flops=flops, label=op.kind, iteration=it, microbatch=j, stage=s, op=tag
        )
        if op.kind == BACKWARD:
            memory.free((j, op.chunk), sim.now, it)
            if k > 0:
                self._send(sim, d, it, "gradient", j, k, k - 1, tag)
        elif k < last:
            self._send(sim, d, it, "activation", j, k, k + 1, tag)

    def _send(
        self, sim: Simulation, d: int, it: int, what: str, j: int, src: int, dst: int, tag: str
    ) -> None:
        """Send ``what`` of micro-batch j from virtual stage ``src`` to ``dst``."""
        boundary = min(src, dst)
        nbytes = self.plans[boundary].output_bytes * self.micro_batch
        event = self._arrival((d, it, what, j, dst))
        a, b = self.grid[d][src % self.pp], self.grid[d][dst % self.pp]
        if a == b:
            event.succeed()
            return
        done = sim.transfer(
            a, b, nbytes, label=what, iteration=it, microbatch=j, stage=src % self.pp, op=tag
        )
        done.callbacks.append(lambda _e: event.succeed())

    def _allreduce(self, sim: Simulation, s: int, it: int, d: int) -> simpy.Event:
        """The event of stage ``s``'s gradient all-reduce in iteration ``it`` (started by the last peer)."""
        arrived, done = self._flush.setdefault((s, it), ([], sim.env.event()))
        arrived.append(d)
        if len(arrived) == self.dp:
            event = run_collective(
                sim,
                self.calls[s],
                model=self.scenario.network.model,
                label=f"allreduce stage{s}",
                iteration=it,
            )
            event.callbacks.append(lambda _e: done.succeed())
            del self._flush[s, it]
        return done

    # -- summary -------------------------------------------------------------

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
        return {
            "iteration_time_s": summary.pop("iteration_time_s"),
            "iteration_times_s": summary.pop("iteration_times_s"),
            "throughput_samples_per_s": summary.pop("throughput_samples_per_s"),
            "model": {"name": self.model.name, "params": self.model.params},
            "workers": workers,
            "global_batch": self.train.global_batch,
            "schedule": s.name,
            "stages": s.stages,
            "micro_batches": s.micro_batches,
            "chunks": s.chunks,
            "recompute": self.pipe.recompute,
            "dp": self.dp,
            "micro_batch_size": self.micro_batch,
            "stage_devices": [list(r) for r in self.grid],
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
            tracks = [self.memory[d, s] for d in range(self.dp)]
            row: dict[str, Any] = {
                "peak_bytes": max(t.peak_bytes for t in tracks),
                "peak_microbatches": max(t.peak_count for t in tracks),
            }
            if self.pipe.recompute:
                row["recompute_working_bytes"] = max(
                    self.plans[k].activation_bytes * self.micro_batch for k in self._chunks_of(s)
                )
            row["timeline"] = tracks[0].timeline
            out[str(s)] = row
        return out

    def _communication(self) -> dict[str, Any]:
        """Bytes per micro-batch at each stage boundary and the per-stage all-reduce."""
        return {
            "boundary_bytes": [p.output_bytes * self.micro_batch for p in self.plans[:-1]],
            "allreduce_bytes": [c.size_bytes for c in self.calls],
            "algorithm": self.sync.algorithm if self.dp > 1 else None,
            "network_model": self.scenario.network.model,
        }


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
