"""The 3D hybrid's configuration: checks and the layout of ranks, stages and collectives."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from ...collectives import CollectiveCall, check_call
from ...errors import Problem, ScenarioError
from ...parallel import rules
from ...parallel.placement import place
from ...parallel.schedules import Schedule
from ...parallel.stages import balanced_split, check_stage_layers, megatron_blocks
from ...parallel.tensor_parallel import SPLIT_KINDS
from ...parallel.tp_modes import GridCollective, GridTimer, TensorParallelMode, tp_mode
from ...scenario import DataParallelSpec, ParallelismSpec, PipelineSpec
from .. import auto, training
from ..base import TrainingStrategy
from ..written_keys import unread_problems
from . import experts as moe
from . import recipes
from .accounting import stage_link_sharing
from .auto import choose, chunk_candidates, heaviest, micro_batch_of, record_split, stage_modes
from .balance import StageBalance, balance_stages, units_of
from .context import ContextParallel
from .grad_buckets import GradBucket, plan_buckets
from .offload import Offload
from .replica_batches import ReplicaBatches
from .replica_classes import fold_classes, raise_if_unclassable, replica_classes
from .stages import StageOptions, StagePlan, peak_stored, plan_stages


class HybridLayout(ReplicaBatches, ContextParallel, Offload, TrainingStrategy):
    """The configuration of the 3D hybrid, checked: placement of the dp x pp x tp (x cp) grid,
    schedule, micro-batches, recomputation, stage split and the collectives it needs.
    :class:`~clustersim.strategies.hybrid.strategy.Pipeline` runs it."""

    supports_param_gather_overlap = True
    pins: dict[str, Any] = MappingProxyType({})  # type: ignore[assignment]
    """What ``auto`` chose (``chunks``, ``recompute`` per stage), pinned for the layout's
    next checks (:func:`.auto.choose`); empty until it chooses."""
    chunk_candidates: list[int]
    """The depths ``pipeline.chunks`` may take (one: nothing to choose)."""
    recompute_left: bool = False
    """``training.recompute`` was left to ``auto``."""
    balance: StageBalance | None = None
    """``pipeline.stages: balanced``: the split found and its stage times (None: not asked,
    or not found yet)."""
    reads = frozenset(
        {
            "parallelism",
            "pipeline",
            "zero.stage",
            "zero.overlap_param_gather",
            "data_parallel.sync",
            "data_parallel.workers",
            "data_parallel.allreduce",
            "data_parallel.balance",
        }
    )

    def written_key_problems(self) -> list[Problem]:
        """The keys written that the hybrid would ignore (it checks its layout, dp included,
        itself)."""
        return unread_problems(self.scenario, self.name, self.reads)

    # -- checks --------------------------------------------------------------

    def check(self) -> None:
        """Placement, schedule, micro-batches, recomputation, stage split, collectives."""
        spec: DataParallelSpec = self.config  # type: ignore[assignment]
        scenario = self.scenario
        self.load_training()
        self.pipe = scenario.pipeline or PipelineSpec()
        parallelism = scenario.parallelism or ParallelismSpec()
        mode = TensorParallelMode.registry.lookup(parallelism.tp_mode, "parallelism.tp_mode")
        on, chosen = auto.sequence_parallel(
            parallelism.sequence_parallel, parallelism.tp, mode.name, mode.sequence_parallel
        )
        self.parallelism = parallelism = parallelism.model_copy(update={"sequence_parallel": on})
        """``parallelism`` with ``sequence_parallel`` resolved (``auto``: on where tp > 1)."""
        if chosen is not None:
            self.auto_choices[auto.SEQUENCE_PARALLEL_KEY] = chosen
        transformer = self.model.transformer is not None
        self.zero = recipes.default_zero_stage(scenario, transformer, spec.allreduce.algorithm)
        self.state_accounting = recipes.state_accounting(self.train, transformer, self.zero)
        """How model states are kept (:mod:`.recipes`): Megatron's for its transformers."""
        if self.model.embedding is not None:
            raise ScenarioError(
                Problem(
                    "model.embedding",
                    "pipeline and tensor parallelism do not model a sparse embedding table",
                    "data parallelism (data_parallel.sync: ps or allreduce), or no embedding",
                )
            )
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
        self._check_context_parallel()
        self.placement = place(self._select_workers(spec), parallelism, self.topology)
        self.dp = self.placement.dp
        self.grad_ranks = self.dp * self.cp
        """Ranks each gradient shard is reduced over: dp x cp (Megatron)."""
        self.groups = self.placement.grid()
        self.grid = [[group[0] for group in replica] for replica in self.groups]
        self.schedule = self._make_schedule()
        self.micro_batch = self._micro_batch_size()
        self.stage_recompute = self._recompute_modes()
        """Per device stage: its recomputation (none, selective, full)."""
        self.recompute = heaviest(self.stage_recompute)
        """The most recomputing stage's mode (every stage's, unless they differ)."""
        self.stage_layers = self._split()
        self.options = StageOptions(
            self.recompute,
            self.tp,
            parallelism.sequence_parallel,
            training.BYTES_PER_VALUE[self.train.precision],
            self.tp_mode,
        )
        self.plans = plan_stages(
            self.model, self.stage_layers, self.options, self.virtual_recompute()
        )
        self.experts = moe.plan_experts(self)
        self._ep_costs: dict[tuple[int, int], float] = {}
        """(first replica of an ep group, stage) -> seconds of one dispatch all-to-all."""
        self.sync = spec.allreduce
        self.grad_bytes_per_value = recipes.grad_bytes_per_value(self.sync, self.train.precision)
        """Bytes of a gradient value in the dp collectives (``allreduce.precision``)."""
        self.calls = self._dp_calls() if self.grad_ranks > 1 else {}
        for calls in self.calls.values():
            for call in calls:
                check_call(call, self.topology, "data_parallel.allreduce.algorithm")
        self.recipes = recipes.resolve(self)
        self.layout_buckets = self._grad_buckets()
        self.tp_timers = self._tp_timers()
        self._tp_costs: dict[tuple[int, int, int, str, int], tuple[float, float, float]] = {}
        """(replica, stage, first layer, pass, passes) -> (seconds, bytes, exposed seconds) of
        a tensor-parallel hold."""
        self._share_micro_batches()
        self.played = self._simulated_replicas(parallelism)
        self.simulated = len(self.played)
        self.enforce_work_limit()  # before the operation lists, O(micro-batches) each
        self.ops = [self.schedule.operations(s) for s in range(self.pp)]
        self._replica_ops()
        split = self.schedule.split_backward  # counts shares: split_backward.peak_activation_bytes
        self.peak_pairs = {
            m: [[] if split else peak_stored(ops)[1] for ops in by_stage]
            for m, by_stage in self._ops_by_count.items()
        }
        """Per micro-batch count, per device stage: the (micro-batch, chunk) pairs stored at
        its peak."""
        self._check_combinations()
        self._check_offload()
        self.dp_sharing = stage_link_sharing(self.topology, self.calls)
        self._balance()
        choose(self)  # pipeline.chunks and training.recompute left to auto: check again if pinned

    def _grad_buckets(self) -> dict[int, list[GradBucket]]:
        """Per device stage, the gradient buckets the overlapped recipes sync (none when
        neither overlap is on or nothing syncs)."""
        chosen = self.recipes
        if self.grad_ranks < 2 or not (chosen.overlap_grad_reduce or chosen.overlap_param_gather):
            return {}
        return plan_buckets(self, chosen.bucket_params, chosen.overlap_grad_reduce)

    def _check_combinations(self) -> None:
        """Refuse the pairings of context parallelism, expert parallelism, the 2-D/3-D tensor
        modes, offload and the split-backward or flush-free schedules that are not modelled
        together (each works on its own)."""
        par, offload = self.parallelism, self.train.offload
        ep, mode, cp = par.ep, self.tp_mode.name, self.cp
        flush_free = not self.schedule.flush or self.schedule.split_backward
        pairs = [
            (cp > 1 and ep > 1, "parallelism.ep", "expert parallelism with context parallelism"),
            (cp > 1 and mode != "1d", "parallelism.tp_mode", f"tp_mode {mode} with cp > 1"),
            (cp > 1 and self.zero >= 2, "zero.stage", "ZeRO-2/3 with context parallelism"),
            (offload is not None and ep > 1, "training.offload", "offload with ep > 1"),
            (offload is not None and mode != "1d", "training.offload", f"offload with {mode}"),
            (
                offload is not None and offload.activations == "cpu" and flush_free,
                "training.offload.activations",
                f"activation offload with the {self.schedule.name} schedule",
            ),
        ]
        for refused, key, what in pairs:
            if refused:
                raise ScenarioError(
                    Problem(
                        key,
                        f"{what} is not modelled (each works on its own)",
                        "activation offload with naive, gpipe, 1f1b or interleaved"
                        if key.endswith("activations")
                        else "one of the two features, not both",
                    )
                )

    def _simulated_replicas(self, parallelism: ParallelismSpec) -> list[int]:
        """The replicas run as processes: all, or one of each class of replicas that run
        alike (``simulate_replicas: one``, or ``all`` where that is every replica's run:
        ``folded``; :mod:`.replica_classes`); ``replica_classes`` is [] when all run."""
        self.stands_in = parallelism.simulate_replicas == "one" and self.dp > 1
        folded = None if self.stands_in else fold_classes(self)
        self.folded = folded is not None
        if not self.stands_in and folded is None:
            self.replica_classes: list[list[int]] = []
            return list(range(self.dp))
        self.replica_classes = folded or replica_classes(self)
        self.stands_in = True
        raise_if_unclassable(self, self.replica_classes)
        return [members[0] for members in self.replica_classes]

    def take_link_failures(self, failures: Any) -> None:
        """Refuse links that go down while one replica stands for all: replica 0 does not
        cross every link the others do, and the collectives it plays for all of them run on
        the analytical network, whose flows have no other route (they would stall for good).
        Every replica is played (``simulate_replicas: all``) or none of the links fails."""
        if not failures or not self.stands_in:
            return
        first = failures[0]
        raise ScenarioError(
            Problem(
                "parallelism.simulate_replicas",
                f"one replica stands for all only when they are identical; {first.path} takes "
                f"down {len(first.links)} link(s) during the run (from {first.at_s:g} s), "
                "which the replicas do not all cross",
                "all (every replica played, the flows rerouted), or no scheduled failure of "
                "links, NICs or switches",
            )
        )

    def _check_zero(self, parallelism: ParallelismSpec) -> None:
        rules.enforce(rules.sharded_zero_problem(self.zero, parallelism.tp, parallelism.pp, True))

    def _check_tensor_parallel(self, parallelism: ParallelismSpec) -> None:
        shape = self.model.transformer
        heads = shape.heads if shape else None
        problems = rules.tensor_mode_problems(
            parallelism.tp_mode,
            parallelism.tp,
            parallelism.tp_depth,
            heads,
            parallelism.sequence_parallel,
        )
        if problems:
            raise ScenarioError(problems)
        self.tp_mode: TensorParallelMode = tp_mode(
            parallelism.tp_mode, parallelism.tp, parallelism.tp_depth
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
            b = micro_batch_of(self)
        if b is None:
            return self.pipe.micro_batches, "pipeline.micro_batches"
        rules.enforce(rules.micro_batch_problem(self.train.global_batch, self.dp, b))
        m = self.train.global_batch / self.dp / b
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
        """The schedule, after its rule of one micro-batch per stage if it has one; its chunks
        as written, pinned by ``auto`` (:mod:`.auto`), or the first candidate until then."""
        m, key = self._micro_batches()
        name = self.pipe.schedule
        kind = Schedule.registry.lookup(name, "pipeline.schedule")
        if kind.micro_batch_per_stage:
            rules.enforce(rules.micro_batch_per_stage_problem(name, self.pp, m, key))
        chunks = self.pipe.chunks
        if chunks == auto.AUTO:
            self.chunk_candidates = chunk_candidates(self, kind, m)
            chunks = self.pins.get("chunks", self.chunk_candidates[0])
        else:
            self.chunk_candidates = [chunks]
        return kind(self.pp, m, chunks)

    def _micro_batch_size(self) -> float:
        """Samples per micro-batch: global batch / dp / m."""
        m = self.schedule.micro_batches
        rules.enforce(rules.micro_batch_size_problem(self.train.global_batch, self.dp, m))
        return self.train.global_batch / self.dp / m

    def _recompute_modes(self) -> list[str]:
        """Per device stage: ``training.recompute`` as written, or ``auto``'s (:func:`.auto.stage_modes`)."""
        return stage_modes(self)

    def recompute_of(self, k: int) -> str:
        """The recomputation of virtual stage ``k`` (its device stage's)."""
        return self.stage_recompute[self.schedule.device_of(k)[0]]

    def virtual_recompute(self) -> list[str]:
        """Per virtual stage, input first: its recomputation."""
        return [self.recompute_of(k) for k in range(self.schedule.virtual_stages)]

    def _split(self) -> list[int]:
        """Layers per virtual stage: as listed, balanced on the stages' devices
        (``pipeline.stages: balanced``), equal transformer blocks, or balanced by FLOPs."""
        parts = self.schedule.virtual_stages
        layers = self.model.layers
        if self.pipe.stage_layers is not None:
            check_stage_layers(self.pipe.stage_layers, len(layers), parts)
            return list(self.pipe.stage_layers)
        if self.pipe.stages == auto.AUTO and parts > 1:
            return self._auto_split(parts)
        return self._given_split(parts)

    def _auto_split(self, parts: int) -> list[int]:
        """``pipeline.stages: auto``: Megatron-Core's split of a transformer's blocks (even
        where they divide), any other model's layers balanced by FLOPs."""
        shape = self.model.transformer
        layers = self.model.layers
        blocks = shape.layers if shape is not None else len(layers)
        rules.enforce(
            rules.stage_split_problem(
                blocks, self.pp, self.schedule.chunks, shape is not None, True
            )
        )
        if shape is not None:
            per_stage = megatron_blocks(blocks, parts)
            return record_split(self, per_stage, self._split_blocks(per_stage))
        flops = [x.forward_flops + x.backward_flops for x in layers]
        return record_split(self, None, balanced_split(flops, parts))

    def _given_split(self, parts: int) -> list[int]:
        """``pipeline.stages: even`` or ``balanced`` (and any one stage)."""
        layers = self.model.layers
        shape = self.model.transformer
        blocks = shape.layers if shape is not None else len(layers)
        balanced = self.pipe.stages == "balanced"
        uneven = self.pipe.stages != "even"
        split = rules.stage_split_problem(
            blocks, self.pp, self.schedule.chunks, shape is not None, uneven
        )
        rules.enforce(split)
        if balanced:
            return self._split_balanced(parts)
        if shape is not None:
            return self._split_blocks([blocks // parts] * parts)
        return balanced_split([x.forward_flops + x.backward_flops for x in layers], parts)

    def _split_balanced(self, parts: int) -> list[int]:
        """The balanced split once found; before (the first check), the units (blocks, or
        layers) balanced by FLOPs, a provisional split the costs are read from."""
        if self.balance is not None:
            return list(self.balance.counts)
        units = units_of(self.model)
        flops = [x.forward_flops + x.backward_flops for x in self.model.layers]
        first, costs = 0, []
        for count in units:
            costs.append(sum(flops[first : first + count]))
            first += count
        counts, first = [], 0
        for n in balanced_split(costs, parts):
            counts.append(sum(units[first : first + n]))
            first += n
        return counts

    def _even_split(self) -> list[int] | None:
        """The split of ``pipeline.stages: even`` (None where the blocks do not divide)."""
        parts = self.schedule.virtual_stages
        shape = self.model.transformer
        if shape is None:
            flops = [x.forward_flops + x.backward_flops for x in self.model.layers]
            return balanced_split(flops, parts)
        return (
            self._split_blocks([shape.layers // parts] * parts)
            if shape.layers % parts == 0
            else None
        )

    def _balance(self) -> None:
        """``pipeline.stages: balanced``: price the stages on their devices (the layout
        checked on the provisional split), then check the layout again on the split found."""
        if self.pipe.stages != "balanced" or self.balance is not None:
            return
        self.balance = balance_stages(self, self._even_split())
        if self.balance.counts != self.stage_layers:
            self.check()

    def _split_blocks(self, block_counts: list[int]) -> list[int]:
        """Layers per virtual stage holding ``block_counts`` transformer blocks each
        (Megatron-LM's even split, l / (p v) each, or Megatron-Core's uneven one), the
        embedding on the first, the head on the last."""
        blocks = self.model.transformer.layers
        kinds = [x.kind for x in self.model.layers]
        per_block = sum(1 for k in kinds if k in SPLIT_KINDS) // blocks
        counts = [per_block * n for n in block_counts]
        counts[0] += sum(1 for k in kinds[: kinds.index("attention")] if k not in SPLIT_KINDS)
        counts[-1] += len(kinds) - sum(counts)
        return counts

    def _dp_calls(self) -> dict[int, list[CollectiveCall]]:
        """Per device stage: the gradient sync of each tensor rank among its dp peers.

        All-reduce of the stage's gradients (params / t x :attr:`grad_bytes_per_value`); with
        ZeRO-1 a reduce-scatter (then :func:`.grad_buckets.gather_calls`).  Under expert
        parallelism the routed experts' gradients sync apart (:func:`.experts.expert_calls`).
        """
        per_value = self.grad_bytes_per_value
        return {
            s: self.sync_calls(s, self.dp_op, moe.device_params(self, s)[0] * per_value)
            for s in range(self.pp)
        }

    @property
    def dp_op(self) -> str:
        """The gradient collective: a reduce-scatter with ZeRO (the distributed optimizer),
        else an all-reduce."""
        return "reducescatter" if self.zero >= 1 else "allreduce"

    def sync_calls(
        self, s: int, op: str, dense_bytes: float, routed: float | None = None
    ) -> list[CollectiveCall]:
        """Device stage ``s``'s ``op`` over its dp groups: ``dense_bytes`` per tensor rank,
        and the routed experts' (all of the stage's, or ``routed`` parameters) over their
        expert-data-parallel groups, at :attr:`grad_bytes_per_value`."""
        return [
            CollectiveCall(
                op,
                self.placement.dp_group(s, t),
                dense_bytes,
                algorithm=self.sync.algorithm,
                options=dict(self.sync.options),
                protocol=self.scenario.network.protocol,
            )
            for t in range(self.tp)
        ] + moe.expert_calls(self, s, op, self.grad_bytes_per_value, routed)

    def _tp_ops(self, plan: StagePlan | None, phase: str) -> tuple[GridCollective, ...]:
        """One pass's (``fwd`` / ``bwd``) tensor-parallel collectives of a stage's attention
        and MLP layers for one micro-batch, from ``parallelism.tp_mode``, layer by layer."""
        if plan is None or not plan.split_layers:
            return ()
        layers = self.model.layers[plan.first_layer : plan.first_layer + plan.layers]
        out: list[GridCollective] = []
        for layer in layers:
            out += self.tp_mode.layer_collectives(
                layer,
                self.model,
                self.micro_batch / self.cp,  # a cp rank holds s/cp of each sequence
                phase=phase,
                bytes_per_value=self.options.bytes_per_value,
                sequence_parallel=self.options.sequence_parallel,
            )
        return tuple(out)

    def _pass_flops(self, k: int, forward: bool) -> float:
        """FLOPs per sample of virtual stage ``k``'s forward, or its whole backward (with
        recomputation: ``passes`` 2 under full), the busiest expert's extra included."""
        plan = self.plans[k]
        if forward:
            return plan.forward_flops + moe.extra_flops(self, k, False, 1)
        passes = 2 if self.recompute_of(k) == "full" else 1
        extra = moe.extra_flops(self, k, True, passes)
        return plan.backward_flops + plan.recompute_flops + extra

    def _stage_params(self, stage: int) -> float:
        return sum(self.plans[k].params for k in self._chunks_of(stage))

    def _stage_weight_bytes(self, stage: int) -> float:
        """One weight version of ``stage`` on one of its devices (bytes, unsharded by ZeRO:
        the flush-free schedules run without ZeRO-3)."""
        per_value = training.BYTES_PER_VALUE[self.train.precision]
        return self._stage_params(stage) / self.param_shards * per_value

    @property
    def tp_label(self) -> str:
        """The tensor-parallel holds' label: Megatron's ops, or the mode's name."""
        if self.tp_mode.name != "1d":
            return f"{self.tp_mode.name} grid collectives"
        return "reducescatter+allgather" if self.options.sequence_parallel else "allreduce"

    @property
    def param_shards(self) -> float:
        """A tensor rank holds its stage's parameters / this (t; q^2 for 2.5-D)."""
        return self.tp_mode.param_shards

    def _tp_timers(self) -> dict[tuple[int, int], GridTimer]:
        """The grid timer of each (replica, stage) tensor group; the algorithm is checked on
        the first group's ops (:mod:`clustersim.parallel.tp_modes`)."""
        if self.tp == 1:
            return {}
        algorithm = self.parallelism.tp_algorithm
        axes = self.tp_mode.axes()
        protocol = self.scenario.network.protocol
        timers = {
            (d, s): GridTimer(
                self.topology, self.placement.tp_group(d, s), algorithm, axes, protocol
            )
            for d in range(self.dp)
            for s in range(self.pp)
        }
        first = timers[0, 0]
        plan = next((p for p in self.plans if p.split_layers), None)
        ops = {(c.op, c.axis) for c in self._tp_ops(plan, "fwd") + self._tp_ops(plan, "bwd")}
        for op, axis in sorted(ops) if plan is not None else ():
            call = first.first(axis).call(op, 1.0)
            check_call(call, self.topology, "parallelism.tp_algorithm")
        return timers

    def _layers_of(self, k: int) -> range:
        """Indices of the layers of virtual stage ``k``."""
        plan = self.plans[k]
        return range(plan.first_layer, plan.first_layer + plan.layers)

    def _chunks_of(self, stage: int) -> list[int]:
        """Virtual stages on device stage ``stage``."""
        return [self.schedule.virtual_stage(stage, c) for c in range(self.schedule.chunks)]

    @property
    def workers(self) -> list[str]:
        """Every simulated worker, replica by replica, stage by stage, tensor rank by rank."""
        replicas = [self.groups[d] for d in self.played]
        return [device for replica in replicas for group in replica for device in group]

    @property
    def dp_network_model(self) -> str:
        """How the data-parallel collectives are priced: the scenario's network model, or
        analytical when replicas stand for others (``simulate_replicas: one``)."""
        return "analytical" if self.stands_in else self.scenario.network.model

    def describe(self) -> str:
        s = self.schedule
        chunks = f", {s.chunks} chunks" if s.chunks > 1 else ""
        recompute = f", {self.recompute} recompute" if self.recompute != "none" else ""
        if len(set(self.stage_recompute)) > 1:
            recompute = f", recompute by stage {'/'.join(self.stage_recompute)}"
        tp = f" x tp {self.tp}" if self.tp > 1 else ""
        tp += f" x cp {self.cp}" if self.cp > 1 else ""
        zero = f", ZeRO-{self.zero}" if self.zero else ""
        chosen = self.recipes
        overlaps = [
            what
            for what, on in (
                ("gradient reduce", chosen.overlap_grad_reduce),
                ("parameter gather", chosen.overlap_param_gather),
                ("tensor-parallel", chosen.tp_comm_overlap),
            )
            if on and (what == "tensor-parallel" or self.grad_ranks > 1)
        ]
        zero += f", overlapped {' + '.join(overlaps)}" if overlaps else ""
        zero += f", ep {self.experts.ep}" if self.experts is not None else ""
        zero += f", {self.simulated} of {self.dp} replicas played for all" if self.folded else ""
        offload = self.offload
        if offload is not None:
            kinds = [k for k in ("optimizer", "activations") if getattr(offload, k) == "cpu"]
            zero += f", {'+'.join(kinds) or 'nothing'} offloaded to CPU"
        return (
            f"pipeline training of {self.model.name} ({self.model.params:.4g} params): "
            f"{s.name} over pp {self.pp}{tp} x dp {self.dp}, {self.balance_text()}"
            f"{chunks}{recompute}{zero}, "
            f"stages {self.stage_layers}{self._balance_note()}"
        )

    def _balance_note(self) -> str:
        """How ``stages: balanced`` chose the split, for :meth:`describe`."""
        found = self.balance
        if found is None:
            return ""
        slowest = max(range(len(found.seconds)), key=lambda k: found.seconds[k])
        note = (
            f" (balanced on the stages' devices: slowest stage {found.seconds[slowest] * 1e3:.4g}"
            f" ms per micro-batch on {found.pace_devices[slowest]}"
        )
        if found.even_seconds is not None:
            note += f", even split {max(found.even_seconds) * 1e3:.4g} ms"
        if not found.fits:
            note += "; no split fits the memory"
        elif found.memory_bound:
            note += "; memory-bound"
        return note + ")"
