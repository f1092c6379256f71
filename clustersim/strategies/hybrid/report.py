"""The 3D hybrid's report: its FLOPs, summary, activation memory and traffic.

:class:`HybridReport` reads what a run of :class:`~clustersim.strategies.hybrid.strategy.Pipeline`
left (its iteration clock, activation-memory tracks and records) and builds the
:class:`~.summary.HybridSummary`.  Units: seconds, bytes, FLOPs.
"""

from __future__ import annotations

from dataclasses import replace

from ...collectives import CollectiveCall
from ...engine import Simulation
from ...errors import SimulationError
from ...metrics import ModelInfo, flop_rates, training_summary, weighted_mean
from ...parallel.batch_shares import rank_label
from .accounting import ActivationMemory, bubble_by_iteration, iteration_windows
from .dp_overlap import DataParallelOverlap
from .experts import summary_block
from .layout import HybridLayout
from .replica_classes import inexact_reason, link_stand_ins, stands_for
from .summary import (
    HybridSummary,
    HybridTraffic,
    IterationBubble,
    ReplicaClass,
    StageActivations,
    StageBalanceBlock,
    StageWeightVersions,
    TensorParallelTraffic,
)


class HybridReport(DataParallelOverlap, HybridLayout):
    """The summary side of the 3D hybrid; :class:`Pipeline` adds the running side."""

    memory: dict[tuple[int, int], ActivationMemory]
    """Activation memory of (replica, device stage), filled while running."""

    # -- summary -------------------------------------------------------------

    def flops_per_iteration(self) -> tuple[float, float]:
        """(model FLOPs, hardware FLOPs) of one iteration over all replicas: forward +
        backward, and the same plus recomputation (what Megatron-LM's 96 B s l h^2 formula
        counts)."""
        batch = self.train.global_batch
        model = sum(p.forward_flops + p.backward_flops for p in self.plans) * batch
        hardware = model + sum(p.recompute_flops for p in self.plans) * batch
        return model, hardware

    def summarize(self, sim: Simulation) -> HybridSummary:
        """Training keys plus schedule, bubbles (measured and theoretical), stages, memory."""
        iterations = self.train.iterations
        ended = len(self.clock.iteration_ends(iterations))
        if ended != iterations:
            raise SimulationError(
                f"pipeline finished {ended} of {iterations} iterations (schedule deadlock?)"
            )
        workers = self.workers
        weights = stands_for(self) if len(self.replica_classes) > 1 else None
        measured = training_summary(
            self.clock, sim.records, iterations, self.train.global_batch, workers, weights=weights
        )
        windows = iteration_windows(self.clock.iteration_ends(iterations))
        per_iteration = bubble_by_iteration(sim.records, workers, windows)
        run_s = windows[-1][1] if windows else 0.0
        per_device = {
            device: sum(row["idle_s"] for row in rows) / run_s if run_s > 0 else 0.0
            for device, rows in per_iteration.items()
        }
        shares = measured.shares.per_iteration
        if self.folded:  # every replica's result: each device not played as its stand-in
            stand = self.stand_ins()
            workers = [x for d in range(self.dp) for group in self.groups[d] for x in group]
            per_device = {x: per_device[stand.get(x, x)] for x in workers}
            per_iteration = {x: per_iteration[stand.get(x, x)] for x in workers}
            shares = {x: shares[stand.get(x, x)] for x in workers if stand.get(x, x) in shares}
        s = self.schedule
        gpus = len(self.placement.workers)
        exact = None if self.folded else self._replicas_exact()
        partial = self.stands_in and not self.folded
        return HybridSummary(
            times=measured.times,
            flops=flop_rates(*self.flops_per_iteration(), measured.iteration_time_s, gpus),
            model=ModelInfo(self.model.name, self.model.params),
            workers=workers,
            global_batch=self.train.global_batch,
            schedule=s.name,
            stages=s.stages,
            micro_batches=s.micro_batches,
            chunks=s.chunks,
            recompute=any(mode != "none" for mode in self.stage_recompute),
            recompute_mode=self.recompute,
            dp=self.dp,
            tp=self.tp,
            pp=self.pp,
            order=list(self.placement.order),
            sequence_parallel=self.parallelism.sequence_parallel,
            zero_stage=self.zero,
            simulated_replicas=self.dp if self.folded else self.simulated,
            micro_batch_size=self.micro_batch,
            stage_devices=[list(r) for r in self.grid],
            tensor_groups=[[list(g) for g in r] for r in self.groups],
            stage_layers=list(self.stage_layers),
            stage_layer_names=[
                [
                    self.model.layers[p.first_layer].name,
                    self.model.layers[p.first_layer + p.layers - 1].name,
                ]
                for p in self.plans
            ],
            theoretical_bubble_fraction=s.theoretical_bubble(),
            idle_fraction=measured.shares.bubble_fraction,
            bubble_fraction=weighted_mean(per_device, None if self.folded else weights),
            non_compute_fraction=measured.shares.non_compute_fraction,
            per_device_bubble=per_device,
            per_device_iteration={
                device: [IterationBubble(**row) for row in rows]
                for device, rows in per_iteration.items()
            },
            activation_memory=self._memory_summary(),
            communication=self._communication(),
            per_iteration=shares,
            workers_simulated=len(workers) if partial else None,
            workers_total=gpus if partial else None,
            replica_classes=self._replica_classes_summary() if partial else None,
            played_replicas=self.simulated if self.folded else None,
            replicas_exact=None if exact is None else exact[0],
            replicas_inexact_reason=None if exact is None else exact[1],
            moe=summary_block(self),
            weight_versions=None if s.flush else self._weight_versions(),
            cp=self.cp if self.cp > 1 else None,
            context_parallel=self._context_parallel_traffic(),
            offload=self._offload_traffic(),
            recipes=self._recipes_summary(),
            batch_shares=self.batch_shares,
            stage_balance=self._stage_balance(),
            stage_recompute=list(self.stage_recompute)
            if len(set(self.stage_recompute)) > 1
            else None,
        )

    def link_stand_ins(self) -> dict[int, int]:
        """Folded ``simulate_replicas: all``: each link own flows of a replica not played can
        cross -> its place on the played replica (:meth:`Strategy.link_stand_ins`)."""
        return link_stand_ins(self, self.replica_classes) if self.folded else {}

    def stand_ins(self) -> dict[str, str]:
        """Where one replica per class is played (one-replica mode, or ``all`` folded): each
        device of a replica not played -> the device in its place in the played replica of
        its class (:meth:`Strategy.stand_ins`)."""
        out: dict[str, str] = {}
        for members in self.replica_classes:
            played = self.groups[members[0]]
            for d in members[1:]:
                for group, standing in zip(self.groups[d], played, strict=True):
                    out.update(zip(group, standing, strict=True))
        return out

    def _replicas_exact(self) -> tuple[bool, str | None] | None:
        """One-replica mode: whether one replica per class is exactly every replica, and why
        not when it is not (:func:`inexact_reason`)."""
        if not self.stands_in:
            return None
        reason = inexact_reason(self)
        return (reason is None, reason)

    def _replica_classes_summary(self) -> list[ReplicaClass] | None:
        """The ``replica_classes`` block: where one replica of each class of alike replicas
        stands for the others (:mod:`.replica_classes`) and there is more than one class."""
        if len(self.replica_classes) < 2:
            return None
        return [
            ReplicaClass(members[0], len(members), rank_label(self._replica_devices(members[0])))
            for members in self.replica_classes
        ]

    def _stage_balance(self) -> StageBalanceBlock | None:
        """The ``stage_balance`` block (None unless ``pipeline.stages: balanced``)."""
        found = self.balance
        if found is None:
            return None
        devices = self.topology.devices
        return StageBalanceBlock(
            stage_seconds=list(found.seconds),
            pace_devices=list(found.pace_devices),
            pace_types=[devices[x].type for x in found.pace_devices],
            memory_bound=found.memory_bound,
            fits=found.fits,
            even_stage_seconds=found.even_seconds,
        )

    def _weight_versions(self) -> dict[str, StageWeightVersions]:
        """Per device stage: its weight versions and their bytes on one device."""
        out: dict[str, StageWeightVersions] = {}
        for s in range(self.pp):
            versions = self.schedule.weight_versions(s)
            one = self._stage_weight_bytes(s)
            out[str(s)] = StageWeightVersions(versions, one, (versions - 1) * one)
        return out

    def _memory_summary(self) -> dict[str, StageActivations]:
        """Per device stage: peak stored activations (max over replicas) and replica 0's timeline."""
        out: dict[str, StageActivations] = {}
        for s in range(self.pp):
            tracks = [self.memory[d, s] for d in self.played]
            working = None
            if self.stage_recompute[s] != "none":
                working = max(
                    self.plans[k].working_bytes * self.micro_batch / self.cp
                    for k in self._chunks_of(s)
                )
            out[str(s)] = StageActivations(
                peak_bytes=max(t.peak_bytes for t in tracks),
                peak_microbatches=max(t.peak_count for t in tracks),
                recompute_working_bytes=working,
                timeline=tracks[0].timeline,
            )
        return out

    def _communication(self) -> HybridTraffic:
        """Bytes per micro-batch at each stage boundary, the dp sync, the tensor-parallel bytes."""
        return HybridTraffic(
            boundary_bytes=[p.output_bytes * self.micro_batch for p in self.plans[:-1]],
            allreduce_bytes=[calls[0].size_bytes for calls in self.calls.values()],
            dp_op="reducescatter+allgather" if self.zero >= 1 else "allreduce",
            algorithm=self.sync.algorithm if self.grad_ranks > 1 else None,
            network_model=self.scenario.network.model,
            dp_network_model=self.dp_network_model,
            dp_link_sharing=[self.dp_sharing.get(s, 1) for s in range(self.pp)],
            tensor_parallel=self._tensor_parallel_traffic() if self.tp > 1 else None,
            ran=self.collectives_ran(self._dp_iteration_calls(), model=self.dp_network_model),
        )

    def _dp_iteration_calls(self) -> list[CollectiveCall]:
        """The data-parallel collectives of one replica's stages (with ZeRO, each
        reduce-scatter's all-gather too)."""
        calls = [call for stage in self.calls.values() for call in stage]
        if self.zero >= 1:
            calls += [replace(call, op="allgather") for call in calls]
        return calls

    def _tensor_parallel_traffic(self) -> TensorParallelTraffic:
        """The tensor-parallel ops, their bytes per layer and per block, and the seconds of
        one micro-batch's forward per stage (priced analytically).  Per layer: the mean
        over the first stage with split layers (attention and MLP layers differ in 2-D,
        2.5-D and 3-D); other modes than 1d add the mode, grid and backward bytes."""
        first = next((p for p in self.plans if p.split_layers), None)
        ops = self._tp_ops(first, "fwd")
        layers = max(first.split_layers, 1) if first else 1
        per_layer = sum(c.size_bytes for c in ops) / layers if first else 0.0
        megatron = self.tp_mode.name == "1d"
        backward = sum(c.size_bytes for c in self._tp_ops(first, "bwd")) / layers
        return TensorParallelTraffic(
            algorithm=self.parallelism.tp_algorithm,
            ops=(
                [c.op for c in ops[: 2 if self.options.sequence_parallel else 1]]
                if megatron
                else sorted({f"{c.op} {c.axis}" for c in ops + self._tp_ops(first, "bwd")})
            ),
            bytes_per_layer_per_pass=per_layer,
            bytes_per_block_per_pass=2 * per_layer,
            seconds_per_microbatch_forward=[
                self.tp_timers[0, s].seconds(
                    tuple(
                        op for k in self._chunks_of(s) for op in self._tp_ops(self.plans[k], "fwd")
                    )
                )
                for s in range(self.pp)
            ],
            priced="analytical",
            mode=None if megatron else self.tp_mode.name,
            grid=None if megatron else self.tp_mode.grid,
            bytes_per_layer_backward=None if megatron else backward,
            ran=self.collectives_ran(
                [self.tp_timers[0, 0].call_of(c) for c in ops + self._tp_ops(first, "bwd")],
                self.scenario.network.channels,
            ),
        )
