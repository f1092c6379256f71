"""Pipeline-parallel training (GPipe, 1F1B, interleaved 1F1B, zero-bubble, PipeDream),
optionally with tensor and data parallelism.

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
  of global_batch / (dp m) samples (an error if below 1; fractions allowed); with
  ``data_parallel.balance`` the dp m micro-batches go to the replicas in different
  numbers, each replica running its own schedule (:mod:`.replica_batches`).
* **Stages.** The layers are split into ``p v`` virtual stages (``v`` chunks
  per device, interleaved only), contiguous: a transformer's blocks evenly, other
  models balanced by forward + backward FLOPs
  (:func:`clustersim.parallel.stages.balanced_split`), by each stage's GPUs with
  ``pipeline.stages: balanced`` (:mod:`.balance`), or as ``pipeline.stage_layers``
  lists; chunk ``c`` of device ``s`` is virtual stage ``c p + s``.
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
  optimizer step and starts the next iteration.  A transformer runs Megatron-Core's
  recipes by default (:mod:`.recipes`): the distributed optimizer (ZeRO-1) with its
  reduce-scatters bucket by bucket beside the last backward and its parameter
  all-gathers beside the next forwards (:mod:`.dp_overlap`).
* **Activation memory.** A forward stores its stage's activation bytes for j
  (with ``recompute`` only the stage input: the previous stage's boundary
  activation, or for the first stage its first layer's activation bytes, a
  stand-in for the batch); the backward frees them.  Stored from the start of
  the forward to the end of the backward; the transient working set of one
  micro-batch during recomputation is reported apart.

Context parallelism (``parallelism.cp``, ring attention) is in
:mod:`~clustersim.strategies.hybrid.context`, offload to CPU memory
(``training.offload``) in :mod:`~clustersim.strategies.hybrid.offload`; with them the
records add ``kv ring``, ``offload activations`` / ``fetch activations`` and
``offload gradients`` / ``fetch parameters`` transfers and CPU ``optimizer`` computes.

Zero-bubble schedules (``zb-h1``, ``zb-v``) split each backward into B and W
(:mod:`.split_backward`: their FLOPs, what each frees); flush-free ones (``pipedream``,
``pipedream-2bw``) run on across iterations (:mod:`.flush_free`) and stash weight
versions, added to the memory plan's weights.

Records: compute ``fwd`` / ``bwd`` (``bwd_input`` / ``bwd_weight`` when split) / ``optimizer``, transfers ``activation`` /
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
replica 0's ``timeline`` of ``[time_s, stored, bytes]`` in iteration 0; ``recipes``: the
production recipes in force and the data-parallel seconds exposed and hidden per stage;
``stage_balance`` (``pipeline.stages: balanced``): each virtual stage's time per micro-batch
and the device setting its pace (:mod:`.balance`).
Units: seconds, bytes, FLOPs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Generator, Sequence
from typing import Any

import simpy

from ...budget import WorkEstimate
from ...collectives import CollectiveCall, hold_group, run_collective
from ...collectives.work import calls_work
from ...engine import Simulation
from ...model.memory import DeviceMemory, ModelStates
from ...parallel.schedules import (
    BACKWARD,
    BACKWARD_INPUT,
    BACKWARD_WEIGHT,
    FORWARD,
    Op,
)
from ...scenario import DataParallelSpec
from .. import training
from . import experts as moe
from . import flush_free, split_backward, tp_overlap
from .accounting import ActivationMemory
from .dp_overlap import REDUCE
from .grad_buckets import gather_calls
from .replica_classes import class_problem, replica_classes
from .report import HybridReport
from .sharded import PARAMETER_STAGE, SHARDED_STAGE, dp_rounds, sharded_buffer_bytes
from .stages import StagePlan


class Pipeline(HybridReport):
    """3D hybrid: pipeline stages of tensor-parallel groups, replicated for data parallelism."""

    name = "pipeline"
    description = (
        "hybrid training: pipeline (clustersim list schedules) x tensor parallel (1-D to 3-D) "
        "x context parallel x data parallel (all-reduce, ZeRO), experts, offload"
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
        counts: dict[int, int] = {}
        for d in self.played:
            m = self.replica_micro_batches[d]
            counts[m] = counts.get(m, 0) + 1
        parts = [self._replica_work(m) * replicas for m, replicas in counts.items()]
        replica = parts[0]
        for part in parts[1:]:
            replica += part
        if self.layout_buckets:  # the overlapped recipes: bucketed collectives, split ops
            return (replica + self.overlap_work()) * self.train.iterations
        calls = [call for calls in self.calls.values() for call in calls]
        sync = calls_work(calls, self.topology, model=self.dp_network_model, channels=self.channels)
        rounds = dp_rounds(self.zero, s.micro_batches * s.chunks) * s.updates_per_iteration()
        per_iteration = replica + sync * rounds
        return per_iteration * self.train.iterations

    def shorter(self) -> list[str]:
        """One iteration, and one replica standing for each class of alike replicas when
        every one is simulated (:mod:`.replica_classes`: up to ``dp`` times fewer events)."""
        hints = super().shorter()
        if self.dp > 1 and not self.stands_in:
            classes = replica_classes(self)
            if len(classes) < self.dp and class_problem(self, classes) is None:
                hints.append("--set parallelism.simulate_replicas=one")
        return hints

    def _replica_work(self, m: int) -> WorkEstimate:
        """One iteration of one replica running ``m`` micro-batches (:meth:`estimate_work`)."""
        s, tp = self.schedule, self.tp
        split = sum(1 for plan in self.plans if plan.split_layers) if tp > 1 else 0
        per_microbatch = 3 if s.split_backward else 2
        computes = per_microbatch * m * s.virtual_stages * tp + 2 * m * split * tp + self.pp * tp
        if self.experts is not None and self.experts.ep > 1:  # the ep all-to-all holds
            computes += 2 * m * sum(1 for n in self.experts.moe_layers if n) * tp
        computes *= self.cp
        transfers = 2 * m * (s.virtual_stages - 1) * tp * self.cp if self.pp > 1 else 0
        if self.ring is not None:  # a K/V flow and an overlapped compute per GPU and op
            transfers += 2 * m * s.virtual_stages * tp * self.cp
            computes += 2 * m * s.virtual_stages * tp * self.cp
        transfers += self._offload_transfers()
        return WorkEstimate(transfers, computes + transfers)

    # -- memory --------------------------------------------------------------

    def memory_plan(self) -> dict[str, DeviceMemory]:
        """Per worker: its stage's model states / t (ZeRO over dp), the activations its
        schedule holds at its peak, the recompute working set and the send/receive buffers."""
        out: dict[str, DeviceMemory] = {}
        for s in range(self.pp):
            by_count = {m: self._stage_memory(s, m) for m in self.micro_batch_counts()}
            for d in range(self.dp):
                memory = by_count[self.replica_micro_batches[d]]
                for device in self.groups[d][s]:
                    out[device] = DeviceMemory.of(
                        memory[0], memory[1], memory[2], self._capacity(device)
                    )
        order = {device: i for i, device in enumerate(self.placement.workers)}
        return dict(sorted(out.items(), key=lambda kv: order[kv[0]]))

    def _stage_states(self, s: int) -> ModelStates:
        """Model states of one GPU of device stage s: ZeRO shards the dense part over
        dp x cp and the routed experts' over their expert-data-parallel ranks
        (:func:`.experts.stage_states`); flush-free schedules add their stashed weight
        versions."""
        states = moe.stage_states(self, s)
        versions = self.schedule.weight_versions(s)
        if versions > 1:  # stashed weights (PipeDream, PipeDream-2BW)
            extra = (versions - 1) * self._stage_weight_bytes(s)
            states = dataclasses.replace(states, weights=states.weights + extra)
        return states

    def _stage_memory(self, s: int, m: int) -> tuple[Any, float, float]:
        """Device stage ``s``'s model states, activations at its peak and working set plus
        buffers on one GPU, in a replica running ``m`` micro-batches (bytes)."""
        states = self._offload_states(self._stage_states(s))
        mb = self.micro_batch / self.cp  # a cp rank holds s/cp of each sample
        ops = self._ops_by_count[m][s]
        if self.schedule.split_backward:
            activations = split_backward.peak_activation_bytes(
                ops,
                lambda c: self.plans[self.schedule.virtual_stage(s, c)].activation_bytes * mb,
            )
        else:
            held = self._resident_pairs(s, self.peak_pairs[m][s])
            activations = sum(
                self.plans[self.schedule.virtual_stage(s, chunk)].activation_bytes * mb
                for _, chunk in held
            )
        working = max(self.plans[k].working_bytes for k in self._chunks_of(s)) * mb
        buffers = 2 * max(self.plans[k].output_bytes for k in self._chunks_of(s)) * mb / self.tp
        if self.pp == 1:
            buffers = 0.0
        layers = [self.model.layers[i] for k in self._chunks_of(s) for i in self._layers_of(k)]
        buffers += sharded_buffer_bytes(
            self.zero,
            [x.params for x in layers],
            self.param_shards,
            self.options.bytes_per_value,
            self.sync.bucket,
        )
        if self.ring is not None:  # two K/V receive buffers (double-buffered ring steps)
            buffers += 2 * self.ring.step_bytes * self.micro_batch
        return states, activations, working + buffers

    def _capacity(self, device: str) -> float:
        return self.topology.devices[device].memory_bytes

    # -- running -------------------------------------------------------------

    def start(self, sim: Simulation) -> None:
        self.clock = training.IterationClock.new()
        self._sim = sim
        self._arrivals: dict[tuple[int, int, str, int, int], simpy.Event] = {}
        self._flush: dict[tuple[Any, ...], tuple[list[int], simpy.Event]] = {}
        self.memory = {
            (d, s): ActivationMemory(record=d == 0) for d in range(self.dp) for s in range(self.pp)
        }
        self.stage_times = self._build_stage_times()
        self.weight_flops = [  # W's FLOPs per sample of each virtual stage (split schedules)
            split_backward.weight_gradient_flops(self.model, plan)
            if self.schedule.split_backward
            else 0.0
            for plan in self.plans
        ]
        self._plan_overlap()
        self._start_overlap()
        for d in self.played:
            for s in range(self.pp):
                sim.process(self._stage(sim, d, s))

    def _arrival(self, key: tuple[int, int, str, int, int]) -> simpy.Event:
        """The event of an activation or gradient reaching its virtual stage: made by the
        first of its two askers (the op that waits for it, the send that triggers it) and
        handed to the second, which takes it out (a run keeps none it has used)."""
        event = self._arrivals.pop(key, None)
        if event is None:
            event = self._arrivals[key] = self._sim.event()
        return event

    def _stage(self, sim: Simulation, d: int, s: int) -> Generator[Any, Any, None]:
        """The process of stage ``s`` of replica ``d``: its operations, flush, step."""
        if not self.schedule.flush:
            yield from flush_free.run_stage(self, sim, d, s)
            return
        group = self.groups[d][s]
        if self.recipes.overlap_param_gather and self.layout_buckets and s == 0:
            self._issue_gathers(sim, d, s, 0)  # the previous step's, in flight at time 0
        for it in range(self.train.iterations):
            for device in group:
                self.clock.start(device, it, sim.now)
            for i, op in enumerate(self.ops_of(d)[s]):
                self._prefetch(sim, d, s, it, i)
                yield from self._run_op(sim, d, s, it, op, i)
            yield from self._update(sim, d, s, it)
            for device in group:
                self.clock.end(device, it, sim.now)

    def _update(
        self, sim: Simulation, d: int, s: int, it: int, key: str = ""
    ) -> Generator[Any, Any, None]:
        """Stage ``s``'s weight update: gradient sync with its dp peers, optimizer step,
        ZeRO-1/2's parameter all-gather.  ``key`` tells apart several updates of one
        iteration (PipeDream's per micro-batch)."""
        group = self.groups[d][s]
        dense, routed = moe.device_params(self, s)
        shards = (self.grad_ranks, self.grad_ranks // (self.experts.ep if routed else 1))
        params = dense / shards[0] + routed / shards[1] if self.zero >= 1 else dense + routed
        step_bytes = params * training.OPTIMIZER_BYTES_PER_PARAM[self.train.optimizer]
        overlapped = bool(self.layout_buckets)
        if self.grad_ranks > 1 and self.zero < SHARDED_STAGE:  # ZeRO-2/3: reduced per pass
            if overlapped and self.recipes.overlap_grad_reduce:  # launched bucket by bucket
                reduced = self._reduced_event(sim, d, s, it)
            else:
                reduced = self._dp_sync(sim, "grad" + key, s, it, d)
            yield from self._wait_dp(sim, d, s, it, reduced)
        if self._offloads_optimizer():
            yield from self._optimizer_step_offloaded(sim, d, s, it)
        else:
            yield self._on_group(
                sim,
                group,
                lambda device, it=it: sim.book_compute(
                    device,
                    bytes=step_bytes,
                    label="optimizer",
                    iteration=it,
                    stage=s,
                    phase="optimizer",
                ),
            )
        if self.grad_ranks > 1 and 1 <= self.zero < PARAMETER_STAGE:  # ZeRO-3 gathers per pass
            if overlapped and self.recipes.overlap_param_gather:  # beside the next forwards
                self._gathers_after_step(sim, d, s, it)
            else:
                yield from self._wait_dp(sim, d, s, it, self._dp_sync(sim, "param" + key, s, it, d))

    @staticmethod
    def _on_group(sim: Simulation, group: Sequence[str], book: Any) -> simpy.Event:
        """``book(device)`` (a :meth:`~Simulation.book_compute`: the end, s) on every device
        of ``group``; one event when all are done."""
        return Pipeline._on_ends(sim, [book(device) for device in group])

    @staticmethod
    def _on_ends(sim: Simulation, ends: Sequence[float]) -> simpy.Event:
        """One event when the work booked to end at ``ends`` (s, one per device) is done."""
        if len(ends) == 1:
            return sim.timeout(ends[0] - sim.now, "a compute")
        return sim.compute_ends(ends)

    def _run_op(
        self, sim: Simulation, d: int, s: int, it: int, op: Op, index: int = -1
    ) -> Generator[Any, Any, None]:
        """Wait for the op's input, compute it (and its tensor-parallel collectives), send on."""
        k = self.schedule.virtual_stage(s, op.chunk)
        plan, last = self.plans[k], self.schedule.virtual_stages - 1
        j, mb, memory = op.microbatch, self.micro_batch, self.memory[d, s]
        tag = f"chunk{op.chunk}" if self.schedule.chunks > 1 else ""
        group = self.groups[d][s]
        if self.zero >= PARAMETER_STAGE and self.dp > 1 and op.kind != BACKWARD_WEIGHT:
            gathered = self._dp_sync(sim, "gather", s, it, d, (j, op.kind, op.chunk))
            yield from self._wait_dp(sim, d, s, it, gathered)
        if op.kind == FORWARD:
            if k > 0:
                yield self._arrival((d, it, "activation", j, k))
            memory.store((j, op.chunk), plan.activation_bytes * mb / self.cp, sim.now, it)
            passes = 1
            flops = self._pass_flops(k, True) * mb
        else:
            if k < last and op.kind != BACKWARD_WEIGHT:
                yield self._arrival((d, it, "gradient", j, k))
            if self.offload is not None:
                yield from self._await_fetch(sim, d, s, it, (j, op.chunk))
                self._backward_started(sim, d, s, it, index)
            passes = 2 if self.recompute_of(k) == "full" else 1
            if op.kind == BACKWARD:
                flops = self._pass_flops(k, False) * mb
            else:
                extra = moe.extra_flops(self, k, True, passes)
                w = self.weight_flops[k]
                flops = split_backward.split_flops(plan, op.kind, w, extra) * mb
        forward = op.kind == FORWARD
        mode, buckets = self._op_parts(d, s, it, index)  # bucket by bucket (:mod:`.dp_overlap`)
        parts = [(b.forward_share if forward else b.backward_share, b) for b in buckets]
        if parts:  # the first bucket's gathered parameters, before any of the op's compute
            yield from self._before_part(sim, d, s, it, mode, parts[0][1])
        per_device = flops / (self.tp * self.cp)
        per_flop, devices = self.stage_times.seconds_per_flop, self.topology.devices
        cast = forward and j == 0  # the chunk's first forward casts its fp8 weights, once a step
        started = sim.now
        if self.ring is not None and op.kind != BACKWARD_WEIGHT:  # dK/dV travel with B
            per_device -= yield from self._ring_attention(sim, d, s, it, j, plan, not forward)
        for n, (share, bucket) in enumerate(parts or [(1.0, None)]):
            if n:
                yield from self._before_part(sim, d, s, it, mode, bucket)
            work = per_device * share if len(parts) > 1 else per_device
            part_start = sim.now
            first = cast and n == 0
            ends = sim.book_computes(
                group,
                [
                    _scaled(
                        work,
                        per_flop(devices[device], k, forward, mb),
                        self.stage_times.weight_seconds(devices[device], k) if first else 0.0,
                    )
                    for device in group
                ],
                flops=work,
                label=op.kind,
                iteration=it,
                microbatch=j,
                stage=s,
                op=tag,
                phase="forward" if forward else "backward",
            )
            yield self._on_ends(sim, ends)
            if self.tp > 1 and plan.split_layers and op.kind != BACKWARD_WEIGHT:
                phase = FORWARD if forward else BACKWARD
                part = (share if len(parts) > 1 else 1.0, part_start)
                yield self._tensor_parallel(sim, d, s, it, j, plan, phase, passes, part)
            if mode == REDUCE and bucket is not None and n < len(parts) - 1:
                self._grads_ready(sim, d, s, it, bucket)
        if op.kind != BACKWARD_WEIGHT:  # W sends nothing; B carries the backward all-to-alls
            alltoalls = moe.hold_alltoalls(self, sim, (d, s, it, j, k, passes), started)
            if alltoalls is not None:
                yield alltoalls
        if mode == REDUCE:  # the chunk's first layers: ready when the whole op has ended
            self._grads_ready(sim, d, s, it, buckets[-1])
        weights_done = op.kind in (BACKWARD, BACKWARD_WEIGHT)
        if weights_done and self.zero >= SHARDED_STAGE and self.dp > 1:
            yield from self._wait_dp(
                sim, d, s, it, self._dp_sync(sim, "grad", s, it, d, (j, op.chunk))
            )
        if op.kind == BACKWARD_INPUT:
            memory.shrink((j, op.chunk), split_backward.HELD_FOR_W, sim.now, it)
        if weights_done:
            memory.free((j, op.chunk), sim.now, it)
        if op.kind in (BACKWARD, BACKWARD_INPUT):
            if k > 0:
                self._send(sim, d, it, "gradient", j, k, k - 1, tag)
        elif op.kind == FORWARD:
            if k < last:
                self._send(sim, d, it, "activation", j, k, k + 1, tag)
            if self.offload is not None:
                self._offload_out(sim, d, s, it, (j, op.chunk))

    def _tensor_parallel(
        self,
        sim: Simulation,
        d: int,
        s: int,
        it: int,
        j: int,
        plan: StagePlan,
        kind: str,
        passes: int,
        part: tuple[float, float] = (1.0, -1.0),
    ) -> simpy.Event:
        """Hold the tensor group for its collectives' alpha-beta time, recorded per device
        (a backward with full recomputation also runs the forward's collectives); ``part``:
        (share of the op, its compute's start) when the op runs in bucket parts.  With
        ``tp_comm_overlap`` only what the matrix products leave exposed is held
        (:mod:`.tp_overlap`), the collectives recorded as ending then."""
        key = (d, s, plan.first_layer, kind, passes)
        cost = self._tp_costs.get(key)
        if cost is None:
            ops = self._tp_ops(plan, kind) + self._tp_ops(plan, FORWARD) * (passes - 1)
            seconds = self.tp_timers[d, s].seconds(ops)
            exposed = seconds
            if self.recipes.tp_comm_overlap:
                exposed = tp_overlap.exposed_seconds(
                    self, d, s, self._layers_of(plan.index), kind, passes
                )
            cost = self._tp_costs[key] = (seconds, sum(c.size_bytes for c in ops), exposed)
        share, compute_start = part
        seconds, nbytes, exposed = (x * share for x in cost) if share != 1.0 else cost
        self._note_tp(d, s, seconds, exposed)
        label = "tp " + self.tp_label
        if not self.recipes.tp_comm_overlap:
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
        end = sim.now + exposed
        start = max(end - seconds, compute_start)
        sim.book_collective(self.groups[d][s], label, start, end, nbytes, it, j, s)
        return sim.timeout(exposed, f"the exposed time of collective '{label}'")

    def _send(
        self, sim: Simulation, d: int, it: int, what: str, j: int, src: int, dst: int, tag: str
    ) -> None:
        """Send ``what`` of micro-batch j from virtual stage ``src`` to ``dst``: tensor rank i
        to tensor rank i, 1/t of the tensor each (Megatron's scatter/gather)."""
        boundary = min(src, dst)
        nbytes = self.plans[boundary].output_bytes * self.micro_batch / (self.tp * self.cp)
        event = self._arrival((d, it, what, j, dst))
        src_stage = self.schedule.device_of(src)[0]
        senders = self.groups[d][src_stage]
        receivers = self.groups[d][self.schedule.device_of(dst)[0]]
        if senders == receivers:
            event.succeed()
            return
        sim.transfer_lanes(
            list(zip(senders, receivers, strict=True)),
            nbytes,
            event.succeed,
            label=what,
            iteration=it,
            microbatch=j,
            stage=src_stage,
            op=tag,
        )

    def _dp_sync(
        self,
        sim: Simulation,
        what: str,
        s: int,
        it: int,
        d: int,
        step: tuple[Any, ...] = (),
        calls: Sequence[CollectiveCall] | None = None,
        part: str = "",
    ) -> simpy.Event:
        """Stage ``s``'s gradient sync (``grad``), ZeRO-1/2 parameter all-gather after the step
        (``param``) or ZeRO-3 gather before a pass (``gather``) among its dp peers, one
        collective per tensor rank (the whole stage's, or ``calls``: a bucket's), started by
        the last replica; ``step`` tells apart the per-micro-batch syncs of ZeRO-2/3
        (:mod:`.sharded`) and the buckets (:mod:`.dp_overlap`), ``part`` names a bucket in
        the records' labels."""
        arrived, done = self._flush.setdefault((what, s, it, step), ([], sim.event()))
        arrived.append(d)
        if len(arrived) == self.simulated:
            if calls is None:
                calls = self.calls[s]
                if what.startswith("param") or what == "gather":
                    calls = gather_calls(self, calls)
            events = [
                run_collective(
                    sim,
                    call,
                    model=self.dp_network_model,
                    label=f"{call.op} stage{s}{part}",
                    iteration=it,
                    channels=self.channels,
                )
                for call in calls
            ]
            start = sim.now

            def ended(_event: Any) -> None:
                self._note_flight(s, it, start, sim.now)
                done.succeed()

            sim.all_of(events).callbacks.append(ended)
            del self._flush[what, s, it, step]
        return done


def _scaled(flops: float, seconds_per_flop: float | None, extra: float = 0.0) -> float | None:
    """Seconds of ``flops`` at a shape-aware rate, and ``extra`` seconds (a stage's fp8 weight
    casts); None (price the FLOPs) without a rate."""
    return None if seconds_per_flop is None else flops * seconds_per_flop + extra
