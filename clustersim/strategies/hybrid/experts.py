"""Expert parallelism in the 3D hybrid: where experts live, what their all-to-alls cost.

```yaml
model: {preset: mixtral-8x7b, moe: {capacity_factor: 1.25, skew: {zipf: 0.5}}}
parallelism: {tp: 1, pp: 4, ep: 8}          # ep divides dp and the number of experts
```

The model follows Megatron-Core's MoE (Shoeybi et al.; the Megatron-Core MoE guide):

* **Groups.** ``ep`` divides ``dp``: the data-parallel ranks of one stage and tensor
  rank form dp / ep *expert-parallel groups* of ``ep`` consecutive ranks (replicas
  ``d0 .. d0 + ep - 1``, ``d0`` a multiple of ep).  The world size is unchanged.  Each
  GPU of a group holds ``E / ep`` of every MoE layer's routed experts (``ep`` must
  divide E); attention, router, shared experts and dense layers stay replicated over
  dp.  Experts split over the tensor-parallel group like MLPs (expert tensor
  parallelism = tp).
* **Gradients.** Dense gradients sync over the dp group as before; routed-expert
  gradients (1/ep of them per GPU) over the *expert-data-parallel* group: the dp / ep
  ranks holding the same experts (ranks ``d mod ep`` alike).  ZeRO-1 shards dense
  optimizer states over dp and expert states over dp / ep.
* **All-to-all.** Per MoE layer and micro-batch, a dispatch all-to-all sends each
  token's ``k`` copies to the GPUs of its experts and a combine all-to-all brings the
  results back; backward runs both again (full recomputation: again in the recomputed
  forward).  A rank's buffer is ``S = b s k h x bytes per value / t`` (its 1/t of the
  tokens under tensor parallelism, as Megatron-Core's dispatcher after sequence
  splitting) padded by the capacity factor: it sends ``S L_j / ep`` bytes to rank j,
  ``L_j`` the load factor of rank j (:mod:`clustersim.model.moe`; ``c`` without skew,
  so ``S c / ep`` each, the direct all-to-all of size ``S c``).  The combine sends the
  same bytes back.  Priced by the direct algorithm's phase cost
  (:func:`clustersim.collectives.direct.phase_time`: the largest route latency + the
  largest link load, every link of every route counted), with the all-to-alls of the
  t tensor ranks in one phase, as they run at once and share NICs: uniform and t = 1,
  ``alpha + (ep - 1) S c / ep / B`` over a switch, the alpha-beta all-to-all.
* **Compute.** A stage's forward is its layers' FLOPs (the active experts) plus, per
  MoE layer, ``(L_max - 1)`` x the routed experts' FLOPs: the busiest GPU's padding
  and extra tokens (``L_max`` = the largest load factor; with skew its GPU sets the
  pace, the others wait for it in the combine).  Backward: 2 x that extra.
* **Timeline.** The all-to-alls of a stage pass are one ``ep alltoall`` collective
  record per device of the tensor group, held for their priced time after the
  compute (as the tensor-parallel collectives); the other replicas of the group run
  the same schedule, so they are not waited for.
* **Overlap** (``parallelism.ep_overlap: true``).  Schedules that interleave one
  micro-batch's all-to-alls with another's compute (DeepSeek-V3's DualPipe, Megatron-Core's
  ``--overlap-moe-expert-parallel-comm``) hide them behind compute: the all-to-alls of
  an op then run from the start of its compute, and only the part longer than the
  compute (and tensor-parallel collectives) is waited for.  Steady state of such a
  schedule, with the op's own compute standing for its partner micro-batch's.

Units: seconds, bytes, FLOPs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...collectives import CollectiveCall
from ...collectives.direct import phase_time
from ...errors import Problem, ScenarioError
from ...model.memory import ModelStates, model_states
from .summary import MoESummary

if TYPE_CHECKING:
    from ...model.moe import MoE
    from ...parallel.placement import Placement
    from .stages import StagePlan

DISPATCH_AND_COMBINE = 2
"""All-to-alls per MoE layer per pass: the dispatch and the combine."""


def ep_problem(ep: int, dp: int, moe: MoE | None) -> Problem | None:
    """Why ``parallelism.ep`` cannot be used, or None."""
    if ep == 1:
        return None
    if moe is None:
        return Problem(
            "parallelism.ep",
            f"{ep} expert-parallel ranks, but the model has no experts",
            "1, or a mixture of experts (model.moe or a preset such as mixtral-8x7b)",
        )
    if dp % ep:
        return Problem(
            "parallelism.ep",
            f"{ep} does not divide the {dp} data-parallel replicas (expert-parallel groups "
            "are made of data-parallel ranks)",
            f"a divisor of dp {dp}",
        )
    if moe.experts % ep:
        return Problem(
            "parallelism.ep",
            f"{ep} does not divide the {moe.experts} experts of a layer",
            f"a divisor of {moe.experts}",
        )
    return None


@dataclass(frozen=True)
class ExpertParallel:
    """Where the experts of a hybrid run live and what they cost (module docstring)."""

    moe: MoE
    ep: int
    dp: int
    tp: int
    seq: int
    hidden: int
    expert_params: float
    """Parameters of one routed expert."""
    routed_flops: float
    """Forward FLOPs per sample of the routed experts of one MoE layer (k x one expert)."""
    moe_layers: tuple[int, ...]
    """MoE layers per virtual stage."""
    bytes_per_value: float
    micro_batch: float

    @property
    def busiest_load(self) -> float:
        """L_max: the busiest GPU's expert work over the mean."""
        return self.moe.busiest_load(self.ep)

    @property
    def expert_dp(self) -> int:
        """Ranks of an expert-data-parallel group (dp / ep)."""
        return self.dp // self.ep

    # -- parameters ----------------------------------------------------------

    def routed_params(self, k: int) -> float:
        """Routed-expert parameters of virtual stage ``k`` (all experts, whole layers)."""
        return self.moe_layers[k] * self.moe.experts * self.expert_params

    # -- compute -------------------------------------------------------------

    def extra_forward_flops(self, k: int) -> float:
        """Forward FLOPs per sample virtual stage ``k``'s busiest GPU adds: (L_max - 1) x
        the routed experts (whole stage, before the 1/t of tensor parallelism)."""
        return (self.busiest_load - 1.0) * self.routed_flops * self.moe_layers[k]

    # -- all-to-all ------------------------------------------------------------

    @property
    def alltoall_bytes(self) -> float:
        """A rank's padded buffer of one all-to-all per micro-batch: ``S c`` bytes."""
        tokens = self.micro_batch * self.seq * self.moe.top_k / self.tp
        return tokens * self.hidden * self.bytes_per_value * self.moe.capacity_factor

    def sends(self) -> list[list[float]]:
        """``sends[i][j]``: bytes rank i of an ep group sends rank j in the dispatch."""
        raw = self.alltoall_bytes / self.moe.capacity_factor
        loads = self.moe.load_factors(self.ep)
        return [
            [0.0 if i == j else raw * loads[j] / self.ep for j in range(self.ep)]
            for i in range(self.ep)
        ]

    def alltoall_seconds(self, topology: Any, groups: Sequence[Sequence[str]]) -> float:
        """Seconds of one dispatch (= one combine) of the ep ``groups`` running at once."""
        sends = self.sends()
        devices: list[str] = []
        phase = []
        for group in groups:
            base = len(devices)
            devices += list(group)
            phase += [
                (base + i, base + j, sends[i][j], 0.0)
                for i in range(self.ep)
                for j in range(self.ep)
                if i != j
            ]
        call = CollectiveCall("alltoall", tuple(devices), self.alltoall_bytes, "direct")
        return phase_time(call, topology, phase)

    def alltoalls(self, k: int, passes: int) -> int:
        """All-to-alls of virtual stage ``k`` in one pass (x ``passes`` with recomputation)."""
        return DISPATCH_AND_COMBINE * self.moe_layers[k] * passes


def ep_group(placement: Placement, ep: int, d: int, s: int, t: int) -> tuple[str, ...]:
    """The expert-parallel group of replica d, stage s, tensor rank t: ep consecutive replicas."""
    first = d - d % ep
    return tuple(placement.device(first + i, s, t) for i in range(ep))


def expert_dp_group(placement: Placement, ep: int, r: int, s: int, t: int) -> tuple[str, ...]:
    """The ranks holding the experts of ep rank ``r`` (stage s, tensor rank t): every
    ep-th replica from r."""
    return tuple(placement.device(d, s, t) for d in range(r, placement.dp, ep))


def plan_experts(layout: Any) -> ExpertParallel | None:
    """The experts of a checked :class:`~clustersim.strategies.hybrid.layout.HybridLayout`
    (None for a dense model); ScenarioError for an impossible ``parallelism.ep``."""
    shape = layout.model.transformer
    moe = shape.moe if shape is not None else None
    ep = layout.parallelism.ep
    problem = ep_problem(ep, layout.dp, moe)
    if problem is not None:
        raise ScenarioError(problem)
    if moe is None:
        return None
    plans: Sequence[StagePlan] = layout.plans
    kinds = [layer.kind for layer in layout.model.layers]
    counts = tuple(
        sum(1 for kind in kinds[p.first_layer : p.first_layer + p.layers] if kind == "moe")
        for p in plans
    )
    return ExpertParallel(
        moe=moe,
        ep=ep,
        dp=layout.dp,
        tp=layout.tp,
        seq=shape.seq,
        hidden=shape.hidden,
        expert_params=shape.expert_params,
        routed_flops=shape.routed_flops,
        moe_layers=counts,
        bytes_per_value=layout.options.bytes_per_value,
        micro_batch=layout.micro_batch,
    )


def moe_summary(experts: ExpertParallel, shape: Any, seconds: list[float]) -> MoESummary:
    """The ``moe`` block of a hybrid summary."""
    moe = experts.moe
    return MoESummary(
        experts=moe.experts,
        top_k=moe.top_k,
        shared_experts=moe.shared_experts,
        expert_ffn=moe.expert_ffn,
        capacity_factor=moe.capacity_factor,
        skew=f"{moe.skew[0]} {moe.skew[1]:g}" if moe.skew else "none",
        moe_layers=len(moe.blocks),
        ep=experts.ep,
        expert_dp=experts.expert_dp,
        experts_per_gpu=moe.experts // experts.ep,
        total_params=float(shape.params),
        active_params=float(shape.active_params),
        busiest_load=experts.busiest_load,
        alltoall_bytes_per_microbatch=experts.alltoall_bytes,
        alltoalls_per_microbatch=[],
        alltoall_seconds_per_microbatch_forward=seconds,
    )


# -- the hybrid's hooks (layout and strategy call these with themselves) -----------


def stage_routed_params(layout: Any, s: int) -> float:
    """Routed-expert parameters of device stage ``s`` that expert parallelism splits
    (0 for a dense model or ep = 1: then they sync with the dense ones)."""
    experts: ExpertParallel | None = layout.experts
    if experts is None or experts.ep == 1:
        return 0.0
    return sum(experts.routed_params(k) for k in layout._chunks_of(s))


def device_params(layout: Any, s: int) -> tuple[float, float]:
    """(dense, routed-expert) parameters one GPU of device stage ``s`` holds:
    (stage - routed) / t and routed / (t ep), t being the tensor mode's parameter
    shards (tp; q^2 for 2.5-D)."""
    routed = stage_routed_params(layout, s)
    shards = layout.param_shards
    dense = (layout._stage_params(s) - routed) / shards
    return dense, routed / shards / (layout.experts.ep if routed else 1)


def stage_states(layout: Any, s: int) -> ModelStates:
    """Model states of one GPU of device stage ``s`` (``layout.state_accounting``): the
    dense part sharded by ZeRO over dp, the routed experts' over dp / ep."""
    dense, routed = device_params(layout, s)
    train = layout.train
    states = model_states(
        dense,
        zero_stage=layout.zero,
        dp=layout.grad_ranks,
        precision=train.precision,
        optimizer=train.optimizer,
        accounting=layout.state_accounting,
    )
    if not routed:
        return states
    expert = model_states(
        routed,
        zero_stage=layout.zero,
        dp=layout.experts.expert_dp,
        precision=train.precision,
        optimizer=train.optimizer,
        accounting=layout.state_accounting,
    )
    return ModelStates(
        states.weights + expert.weights,
        states.gradients + expert.gradients,
        states.optimizer_states + expert.optimizer_states,
    )


def expert_calls(
    layout: Any, s: int, op: str, per_value: float, routed: float | None = None
) -> list[CollectiveCall]:
    """The expert gradients' syncs of device stage ``s`` (or of ``routed`` of its routed-expert
    parameters: a gradient bucket's): per tensor rank and ep rank, among the dp / ep ranks
    holding the same experts (none when dp = ep)."""
    if routed is None:
        routed = stage_routed_params(layout, s)
    experts: ExpertParallel | None = layout.experts
    if not routed or experts is None or experts.expert_dp < 2:
        return []
    nbytes = routed / layout.tp / experts.ep * per_value
    return [
        CollectiveCall(
            op,
            expert_dp_group(layout.placement, experts.ep, r, s, t),
            nbytes,
            algorithm=layout.sync.algorithm,
            options=dict(layout.sync.options),
            protocol=layout.scenario.network.protocol,
        )
        for t in range(layout.tp)
        for r in range(experts.ep)
    ]


def alltoall_seconds(layout: Any, d: int, s: int) -> float:
    """Seconds of one dispatch of device stage ``s``'s ep groups holding replica ``d``
    (its t tensor ranks' all-to-alls at once), cached per group."""
    experts: ExpertParallel = layout.experts
    key = (d - d % experts.ep, s)
    cost = layout._ep_costs.get(key)
    if cost is None:
        groups = [ep_group(layout.placement, experts.ep, d, s, t) for t in range(layout.tp)]
        cost = layout._ep_costs[key] = experts.alltoall_seconds(layout.topology, groups)
    return cost


def hold_alltoalls(
    layout: Any, sim: Any, op: tuple[int, int, int, int, int, int], compute_start_s: float
) -> Any:
    """Hold stage ``s``'s tensor group of replica ``d`` for virtual stage ``k``'s
    all-to-alls of one pass of micro-batch ``j``; ``op`` is (d, s, it, j, k, passes).
    None when the stage has no MoE layer, or ep = 1.

    With ``parallelism.ep_overlap`` the all-to-alls run from ``compute_start_s``, alongside
    the op's compute, and only what outlasts it is waited for."""
    d, s, it, j, k, passes = op
    experts: ExpertParallel | None = layout.experts
    if experts is None or experts.ep == 1 or not experts.moe_layers[k]:
        return None
    count = experts.alltoalls(k, passes)
    seconds = count * alltoall_seconds(layout, d, s)
    start = compute_start_s if layout.parallelism.ep_overlap else sim.now
    sim.book_collective(
        layout.groups[d][s],
        "ep alltoall",
        start,
        start + seconds,
        count * experts.alltoall_bytes,
        it,
        j,
        s,
    )
    wait = max(start + seconds - sim.now, 0.0)
    return sim.timeout(wait, "the priced time of the expert-parallel all-to-alls")


def extra_flops(layout: Any, k: int, backward: bool, passes: int) -> float:
    """Expert FLOPs per sample the busiest GPU of virtual stage ``k`` adds in one op:
    forward x1, backward x2 (+1 with full recomputation, ``passes`` = 2)."""
    experts: ExpertParallel | None = layout.experts
    if experts is None:
        return 0.0
    per_forward = experts.extra_forward_flops(k)
    return per_forward * ((2 + (passes - 1)) if backward else 1)


def summary_block(layout: Any) -> MoESummary | None:
    """The ``moe`` summary block of a hybrid run (None for a dense model)."""
    experts: ExpertParallel | None = layout.experts
    if experts is None:
        return None
    seconds, counts = [], []
    for s in range(layout.pp):
        count = sum(experts.alltoalls(k, 1) for k in layout._chunks_of(s))
        counts.append(count)
        each = alltoall_seconds(layout, 0, s) if experts.ep > 1 else 0.0
        seconds.append(count * each)
    block = moe_summary(experts, layout.model.transformer, seconds)
    return dataclasses.replace(block, alltoalls_per_microbatch=counts)
