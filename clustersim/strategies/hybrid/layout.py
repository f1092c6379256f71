"""The 3D hybrid's configuration: checks and the layout of ranks, stages and collectives."""

from __future__ import annotations

from ...collectives import CollectiveCall, check_call
from ...errors import Problem, ScenarioError
from ...parallel import rules
from ...parallel.placement import place
from ...parallel.schedules import Schedule
from ...parallel.stages import balanced_split, check_stage_layers
from ...parallel.tensor_parallel import SPLIT_KINDS, CollectiveTimer
from ...scenario import DataParallelSpec, ParallelismSpec, PipelineSpec
from .. import training
from ..base import TrainingStrategy
from .accounting import link_sharing
from .context import ContextParallel
from .offload import Offload
from .stages import StageOptions, plan_stages


class HybridLayout(ContextParallel, Offload, TrainingStrategy):
    """The configuration of the 3D hybrid, checked: placement of the dp x pp x tp (x cp) grid,
    schedule, micro-batches, recomputation, stage split and the collectives it needs.
    :class:`~clustersim.strategies.hybrid.strategy.Pipeline` runs it."""

    # -- checks --------------------------------------------------------------

    def check(self) -> None:
        """Placement, schedule, micro-batches, recomputation, stage split, collectives."""
        spec: DataParallelSpec = self.config  # type: ignore[assignment]
        scenario = self.scenario
        self.load_training()
        self.pipe = scenario.pipeline or PipelineSpec()
        self.parallelism = parallelism = scenario.parallelism or ParallelismSpec()
        self.zero = scenario.zero.level if scenario.zero is not None else 0
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
        self.recompute = self._recompute_mode()
        self.stage_layers = self._split()
        self.options = StageOptions(
            self.recompute,
            self.tp,
            parallelism.sequence_parallel,
            training.BYTES_PER_VALUE[self.train.precision],
        )
        self.plans = plan_stages(self.model, self.stage_layers, self.options)
        self.sync = spec.allreduce
        self.calls = self._dp_calls() if self.grad_ranks > 1 else {}
        for calls in self.calls.values():
            for call in calls:
                check_call(call, self.topology, "data_parallel.allreduce.algorithm")
        self.tp_timers = self._tp_timers()
        self._tp_costs: dict[tuple[int, int, int, int], tuple[float, float]] = {}
        """(replica, stage, first layer, passes) -> (seconds, bytes) of a tensor-parallel hold."""
        self.simulated = self._simulated_replicas(parallelism)
        self.enforce_work_limit()  # before the operation lists, O(micro-batches) each
        self.ops = [self.schedule.operations(s) for s in range(self.pp)]
        self._check_offload()
        self.dp_sharing = {s: link_sharing(self.topology, calls) for s, calls in self.calls.items()}

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
        rules.enforce(rules.sharded_zero_problem(self.zero, parallelism.tp, parallelism.pp, True))

    def _check_tensor_parallel(self, parallelism: ParallelismSpec) -> None:
        shape = self.model.transformer
        rules.enforce(rules.tensor_parallel_problem(parallelism.tp, shape.heads if shape else None))

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
        """The schedule, after its rule of one micro-batch per stage if it has one."""
        m, key = self._micro_batches()
        name = self.pipe.schedule
        kind = Schedule.registry.lookup(name, "pipeline.schedule")
        if kind.micro_batch_per_stage:
            rules.enforce(rules.micro_batch_per_stage_problem(name, self.pp, m, key))
        return kind(self.pp, m, self.pipe.chunks)

    def _micro_batch_size(self) -> float:
        """Samples per micro-batch: global batch / dp / m."""
        m = self.schedule.micro_batches
        rules.enforce(rules.micro_batch_size_problem(self.train.global_batch, self.dp, m))
        return self.train.global_batch / self.dp / m

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
        shape = self.model.transformer
        blocks = shape.layers if shape is not None else len(layers)
        split = rules.stage_split_problem(blocks, self.pp, self.schedule.chunks, shape is not None)
        rules.enforce(split)
        if shape is not None:
            return self._split_blocks(parts)
        return balanced_split([x.forward_flops + x.backward_flops for x in layers], parts)

    def _split_blocks(self, parts: int) -> list[int]:
        """Megatron-LM's split: l / (p v) blocks per virtual stage, the embedding on the first,
        the head on the last."""
        blocks = self.model.transformer.layers
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
            (d, s): CollectiveTimer(self.topology, self.placement.tp_group(d, s), algorithm)
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
        tp += f" x cp {self.cp}" if self.cp > 1 else ""
        zero = f", ZeRO-{self.zero}" if self.zero else ""
        offload = self.offload
        if offload is not None:
            kinds = [k for k in ("optimizer", "activations") if getattr(offload, k) == "cpu"]
            zero += f", {'+'.join(kinds) or 'nothing'} offloaded to CPU"
        return (
            f"pipeline training of {self.model.name} ({self.model.params:.4g} params): "
            f"{s.name} over pp {self.pp}{tp} x dp {self.dp}, {s.micro_batches} micro-batches "
            f"of {self.micro_batch:.4g} samples{chunks}{recompute}{zero}, "
            f"stages {self.stage_layers}"
        )
