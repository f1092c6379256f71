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
stage), ``theoretical_bubble_fraction``; ``per_device_bubble`` = idle time / run
time of each stage device (the run is iterations x iteration windows; idle: neither
computing nor communicating, i.e. waiting on other stages), ``bubble_fraction`` its
mean (``idle_fraction``, the same number, is kept for older scripts);
``non_compute_fraction`` the mean of 1 - compute time / run time (idle plus exposed
communication: what ``bubble_fraction`` meant here before); ``per_device_iteration`` the same
split per iteration window; ``activation_memory`` per device stage:
``peak_bytes``, ``peak_microbatches`` (stored (micro-batch, chunk) pairs) and
replica 0's ``timeline`` of ``[time_s, stored, bytes]`` in iteration 0.
Units: seconds, bytes, FLOPs.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

import simpy

from ...budget import WorkEstimate
from ...collectives import CollectiveCall, hold_group, run_collective
from ...collectives.work import calls_work
from ...engine import Simulation
from ...model.memory import DeviceMemory, model_states
from ...parallel.schedules import (
    BACKWARD,
    FORWARD,
    Op,
)
from ...scenario import DataParallelSpec
from .. import training
from .accounting import ActivationMemory
from .compute_time import StageTimes, scenario_folder
from .stages import StagePlan, peak_stored
from .summary import HybridReport


class Pipeline(HybridReport):
    """3D hybrid: pipeline stages of tensor-parallel groups, replicated for data parallelism."""

    name = "pipeline"
    description = (
        "3D hybrid training: pipeline (naive, GPipe, 1F1B, interleaved) x tensor parallel "
        "(Megatron-LM) x data parallel (all-reduce or ZeRO-1)"
    )
    config_model = DataParallelSpec

    # -- work ----------------------------------------------------------------

    def estimate_work(self) -> WorkEstimate:
        """Per iteration and simulated replica: a forward and a backward of every
        micro-batch on every virtual stage, each a record per tensor rank (and a
        tensor-parallel hold per tensor rank where the stage has split layers); an
        activation and a gradient across every stage boundary, a transfer and a record per
        tensor rank; an optimizer record per worker; and the data-parallel collectives."""
        s = self.schedule
        m, tp = s.micro_batches, self.tp
        split = sum(1 for plan in self.plans if plan.split_layers) if tp > 1 else 0
        computes = 2 * m * (s.virtual_stages + split) * tp + self.pp * tp
        transfers = 2 * m * (s.virtual_stages - 1) * tp if self.pp > 1 else 0
        replica = WorkEstimate(transfers, computes + transfers) * self.simulated
        calls = [call for calls in self.calls.values() for call in calls]
        sync = calls_work(calls, self.topology, model=self.dp_network_model, channels=self.channels)
        per_iteration = replica + sync * (2 if self.zero >= 1 else 1)
        return per_iteration * self.train.iterations

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
        self._sim = sim
        self._arrivals: dict[tuple[int, int, str, int, int], simpy.Event] = {}
        self._flush: dict[tuple[str, int, int], tuple[list[int], simpy.Event]] = {}
        self.memory = {
            (d, s): ActivationMemory(record=d == 0) for d in range(self.dp) for s in range(self.pp)
        }
        layers = [(plan.first_layer, plan.layers) for plan in self.plans]
        folder = scenario_folder(self.scenario.source or "")
        workers = [self.topology.devices[w] for w in self.placement.workers]
        self.stage_times = StageTimes(self.model, layers, self.tp, self.recompute, folder, workers)
        for d in range(self.simulated):
            for s in range(self.pp):
                sim.process(self._stage(sim, d, s))

    def _arrival(self, key: tuple[int, int, str, int, int]) -> simpy.Event:
        """The event of an activation or gradient reaching its virtual stage (created on demand)."""
        event = self._arrivals.get(key)
        if event is None:
            event = self._arrivals[key] = self._sim.event()
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
        times, devices = self.stage_times, self.topology.devices
        yield self._on_group(
            sim,
            group,
            lambda device: sim.compute(
                device,
                flops=per_device,
                seconds=times.seconds(devices[device], k, op.kind == FORWARD, mb),
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
        arrived, done = self._flush.setdefault((what, s, it), ([], sim.event()))
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
