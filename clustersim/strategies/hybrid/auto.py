"""The 3D hybrid's ``auto`` choices: interleaving depth, recomputation per stage, stage split.

What the pipeline strategy chooses when the scenario leaves it (:mod:`clustersim.strategies.auto`
states the whole set and how each choice is reported):

* **Stage split** (``pipeline.stages: auto``): Megatron-Core's, by rule
  (:func:`~clustersim.parallel.stages.megatron_blocks`: even where the blocks divide, else the
  first and last stage, which hold the embedding and the head, take fewer); recorded as the
  ``pipeline.stage_layers`` it gives (:func:`record_split`).
* **Candidates.** ``pipeline.chunks: auto`` on a schedule of several chunks (interleaved):
  every depth v >= 2 the schedule allows for (p, m, v) whose p v virtual stages divide the
  transformer's blocks (or the blocks + 2, Megatron-Core's split counting the embedding and
  the head as one block each; ``stages: even``: the blocks; ``balanced`` and lists of layers:
  at least one per stage) -- :func:`chunk_candidates`; one candidate elsewhere (the written
  count, the schedule's own, or ``stage_layers``' length / p).
* **Memory.** For each candidate, each device stage takes the least recomputation (none,
  selective, full) with which its fullest GPU fits, by the strategy's own memory plan
  (:meth:`~clustersim.strategies.hybrid.strategy.Pipeline.memory_plan`: model states, the
  activations its schedule keeps in flight at its peak, working set, buffers,
  ``training.memory``'s fragmentation) of that stage under that candidate's schedule and
  split; a written ``training.recompute`` is kept.  With ``stages: balanced`` one mode for
  every stage, the split balanced again for each mode tried.
* **Time.** Each candidate is priced by the analytical pipeline timeline
  (:func:`~clustersim.parallel.schedules.played_timeline`): every stage device runs its
  schedule's operations in order, each operation as long as replica 0's stage computes it
  (its kernels under the GPU's compute model, or its FLOPs at peak x efficiency, plus its
  tensor-parallel collectives' alpha-beta time, as the run holds them), each activation and
  gradient travelling between stage devices at the alpha-beta cost of their route.  The
  data-parallel sync and the contention between transfers are left out: they barely depend
  on the depth.
* **Choice.** The fastest candidate whose every stage fits (the smaller depth on a tie);
  where none fits, the one that overfills least.  Its depth and modes are pinned and the
  layout is checked again with them (:func:`choose`).

Units: seconds, bytes.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...collectives.call import HopCost
from ...errors import Problem, ScenarioError
from ...metrics import AutoChoice
from ...model.memory import DeviceMemory
from ...parallel.schedules import BACKWARD, FORWARD, Op, Schedule, played_timeline
from ...scenario.training import RECOMPUTE_MODES
from ...units import format_time
from ..auto import (
    AUTO,
    CHUNKS_KEY,
    MICRO_BATCH_KEY,
    RECOMPUTE_KEY,
    STAGE_LAYERS_KEY,
    fits_or_not,
    least_recompute,
    micro_batch,
    recompute_modes,
)
from ..training import work_duration
from . import experts as moe
from . import tp_overlap
from .compute_time import StageTimes, run_casts, scenario_folder
from .stages import peak_stored, plan_stages

ORDER = {mode: rank for rank, mode in enumerate(RECOMPUTE_MODES)}
"""The recomputation modes from least to most."""


def heaviest(modes: Sequence[str]) -> str:
    """The most recomputing of ``modes`` (one mode's name for the summary and describe)."""
    return max(modes, key=ORDER.__getitem__)


# -- the stage split ---------------------------------------------------------------------


def record_split(layout: Any, blocks: Sequence[int] | None, counts: list[int]) -> list[int]:
    """``counts`` (layers per virtual stage), recorded as ``auto``'s ``pipeline.stage_layers``
    with the rule that gave them (``blocks``: a transformer's blocks per virtual stage; None:
    a list of layers balanced by FLOPs)."""
    parts = len(counts)
    if blocks is None:
        reason = (
            f"the {sum(counts)} layers balanced by forward + backward FLOPs over {parts} stages"
        )
    elif len(set(blocks)) == 1:
        reason = f"{sum(blocks)} transformer layers divide into {parts} stages of {blocks[0]}"
    else:
        others = f", the others {_spread(blocks[1:-1])}" if parts > 2 else ""
        reason = (
            f"{sum(blocks)} transformer layers do not divide into {parts} stages: "
            f"Megatron-Core's split, the first and last stage (embedding, head) "
            f"{blocks[0]} and {blocks[-1]}{others}"
        )
    layout.auto_choices[STAGE_LAYERS_KEY] = AutoChoice(list(counts), reason)
    return counts


def _spread(values: Sequence[int]) -> str:
    """``8`` or ``8 to 9``."""
    least, most = min(values), max(values)
    return str(least) if least == most else f"{least} to {most}"


# -- the micro-batch ----------------------------------------------------------------------


def micro_batch_of(layout: Any) -> int | None:
    """``auto``'s micro-batch (:func:`clustersim.strategies.auto.micro_batch`) for a
    transformer whose scenario writes neither ``training.micro_batch`` nor
    ``pipeline.micro_batches``, recorded in ``layout.auto_choices``; None elsewhere (then
    ``pipeline.micro_batches``' default)."""
    pipe = layout.scenario.pipeline
    written = pipe is not None and "micro_batches" in pipe.model_fields_set
    global_batch = layout.train.global_batch
    if written or layout.model.transformer is None or global_batch % layout.dp:
        return None
    kind = Schedule.registry.lookup(layout.pipe.schedule, "pipeline.schedule")
    chunks = kind.default_chunks if layout.pipe.chunks == AUTO else layout.pipe.chunks

    def allowed(m: int) -> bool:
        per_stage = not kind.micro_batch_per_stage or m >= layout.pp
        return per_stage and not kind.problems(layout.pp, m, chunks)

    chosen = micro_batch(global_batch // layout.dp, layout.pp, allowed)
    if chosen is None:
        return None
    layout.auto_choices[MICRO_BATCH_KEY] = chosen[1]
    return chosen[0]


# -- recomputation as written ------------------------------------------------------------


def stage_modes(layout: Any) -> list[str]:
    """Per device stage: ``training.recompute`` (one mode, or one per stage), else full
    when ``pipeline.recompute`` is true (none when written false), else ``auto``'s pinned
    choice (:mod:`.auto`), none until it is made."""
    given = layout.train.recompute
    legacy = layout.pipe.recompute
    layout.recompute_left = given == AUTO and "recompute" not in layout.pipe.model_fields_set
    if given == AUTO:
        if not layout.recompute_left:  # the older key, written
            return ["full" if legacy else "none"] * layout.pp
        return list(layout.pins.get("recompute", ["none"] * layout.pp))
    modes = [given] * layout.pp if isinstance(given, str) else list(given)
    if len(modes) != layout.pp:
        raise ScenarioError(
            Problem(
                "training.recompute",
                f"lists {len(modes)} modes, the pipeline has {layout.pp} stages",
                f"one mode, or {layout.pp} (one per stage, input first), or auto",
            )
        )
    if legacy and set(modes) != {"full"}:
        raise ScenarioError(
            Problem(
                "training.recompute",
                f"{given}, but pipeline.recompute is true (full recomputation)",
                "one of the two keys, or training.recompute: full",
            )
        )
    if "selective" in modes and layout.model.transformer is None:
        raise ScenarioError(
            Problem(
                "training.recompute",
                "selective recomputation recomputes attention scores; this model is a "
                "list of layers",
                "none or full, or a transformer model",
            )
        )
    if len(set(modes)) > 1 and layout.pipe.stages == "balanced":
        raise ScenarioError(
            Problem(
                "training.recompute",
                f"one mode per stage ({given}) with pipeline.stages: balanced is not "
                "modelled (the balanced split prices one mode)",
                "one mode, or auto",
            )
        )
    return modes


# -- candidates --------------------------------------------------------------------------


def chunk_candidates(layout: Any, kind: type[Schedule], m: int) -> list[int]:
    """The depths ``pipeline.chunks: auto`` chooses among (module docstring), smallest first;
    the schedule's own count where it has no choice."""
    pp = layout.pp
    listed = layout.pipe.stage_layers
    if listed is not None:
        return [len(listed) // pp] if len(listed) % pp == 0 else [kind.default_chunks]
    shape = layout.model.transformer
    blocks = shape.layers if shape is not None else len(layout.model.layers)
    found = [
        v
        for v in range(1, blocks // pp + 1)
        if not kind.problems(pp, m, v) and _divides(layout, blocks, pp * v)
    ]
    deeper = [v for v in found if v > 1]
    if kind.multi_chunk and deeper:
        found = deeper
    return found or [kind.default_chunks]


SPLITS = {
    "auto": lambda blocks, parts: blocks % parts == 0 or (blocks + 2) % parts == 0,
    "even": lambda blocks, parts: blocks % parts == 0,
    "balanced": lambda blocks, parts: parts <= blocks,
}
"""Per ``pipeline.stages``: whether ``parts`` virtual stages split a transformer's ``blocks``
as it splits them (auto: evenly, or with Megatron-Core's embedding and loss counted as a
block each; even: evenly; balanced: a block at least each)."""


def _divides(layout: Any, blocks: int, parts: int) -> bool:
    """Whether ``parts`` virtual stages split the model as its ``pipeline.stages`` asks (a
    list of layers: one layer at least each)."""
    if layout.model.transformer is None:
        return parts <= blocks
    return SPLITS[layout.pipe.stages](blocks, parts)


# -- the choice --------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """One depth priced: its modes per stage, memory and time."""

    chunks: int
    modes: tuple[str, ...]
    """Per device stage: the recomputation taken."""
    overfill: float
    """The fullest stage's peak / capacity (at most 1: every stage fits)."""
    seconds: float
    """The analytical iteration time (0 when there was nothing to compare)."""
    reasons: tuple[str, ...]
    """Per device stage: why its mode."""
    peaks: tuple[float, ...] = ()
    """Per device stage: its peak with its mode / its capacity."""

    @property
    def fits(self) -> bool:
        return self.overfill <= 1.0


def choose(layout: Any) -> None:
    """Decide what ``auto`` leaves to a checked ``layout`` (module docstring), record it in
    ``layout.auto_choices``, and check the layout again with the choice pinned when it is not
    what the layout was checked with.  Once per layout: a pinned check does not choose."""
    if layout.pins:
        return
    depths = layout.chunk_candidates
    left = layout.recompute_left and layout.model.transformer is not None
    if len(depths) == 1 and not left:
        _record_depth(layout, None)
        return
    candidates: list[Candidate] = []
    if layout.pipe.stages == "balanced":  # the split is searched per depth: the first depth
        best = _balanced(layout) if left else _candidate(layout, depths[0], False)
    else:
        candidates = [_candidate(layout, v, len(depths) > 1) for v in depths]
        best = min(
            candidates, key=lambda c: (c.overfill if not c.fits else 0.0, c.seconds, c.chunks)
        )
    layout.pins = {"chunks": best.chunks, "recompute": list(best.modes)}
    if left:
        _record_modes(layout, best)
    _record_depth(layout, best if len(depths) > 1 else None, candidates)
    current = (layout.schedule.chunks, list(layout.stage_recompute))
    if current != (best.chunks, list(best.modes)) or layout.pipe.stages == "balanced":
        layout.balance = None
        layout.check()


def _record_modes(layout: Any, best: Candidate) -> None:
    """``training.recompute``: one mode when the stages agree, else one per stage; the reason
    groups consecutive stages of one mode."""
    modes = list(best.modes)
    value: Any = modes[0] if len(set(modes)) == 1 else modes
    layout.auto_choices[RECOMPUTE_KEY] = AutoChoice(value, _stages_reason(best))


def _stages_reason(best: Candidate) -> str:
    """``stage 0 selective: ...; stages 1-7 none: ...``: runs of stages of one mode, each
    with the peaks of its fullest stage (one stage: its reason as it is)."""
    if len(best.modes) == 1:
        return best.reasons[0]
    runs: list[list[int]] = []
    for s, mode in enumerate(best.modes):
        if runs and best.modes[runs[-1][0]] == mode:
            runs[-1].append(s)
        else:
            runs.append([s])
    parts = []
    for stages in runs:
        name = f"stage {stages[0]}" if len(stages) == 1 else f"stages {stages[0]}-{stages[-1]}"
        fullest = max(stages, key=lambda s: best.peaks[s])
        parts.append(f"{name} {best.modes[fullest]}: {best.reasons[fullest]}")
    return "; ".join(parts)


def _record_depth(
    layout: Any, best: Candidate | None, candidates: Sequence[Candidate] = ()
) -> None:
    """``pipeline.chunks`` where ``auto`` had several depths to choose from (``candidates``
    priced; none: ``stages: balanced``, whose split is searched for one depth, the smallest)."""
    if best is None or layout.pipe.chunks != AUTO:
        return
    if not candidates:
        reason = "the smallest depth that splits the layers (stages: balanced prices one depth)"
        layout.auto_choices[CHUNKS_KEY] = AutoChoice(best.chunks, reason)
        return
    priced = ", ".join(
        f"{c.chunks}: {format_time(c.seconds)}" + ("" if c.fits else " (over memory)")
        for c in candidates
    )
    what = "fastest that fits" if best.fits else "none fits; the least over memory"
    reason = f"the {what} by the analytical pipeline timeline ({priced})"
    layout.auto_choices[CHUNKS_KEY] = AutoChoice(best.chunks, reason)


def _balanced(layout: Any) -> Candidate:
    """``stages: balanced``: one mode for every stage, the least with which the balanced
    split fits (each mode tried with the split balanced again)."""
    modes = recompute_modes(True)
    peaks: dict[str, float] = {}
    capacity = 0.0
    for mode in modes:
        layout.pins = {"chunks": layout.schedule.chunks, "recompute": [mode] * layout.pp}
        layout.balance = None
        layout.check()
        worst = max(range(layout.pp), key=lambda s: _stage_peak(layout, s) / _capacity(layout, s))
        capacity = _capacity(layout, worst)
        peaks[mode] = _stage_peak(layout, worst)
        if peaks[mode] <= capacity:
            break
    layout.pins = {}
    chosen = list(peaks)[-1]
    reason = fits_or_not(chosen, peaks, capacity) + " (the split balanced for each mode)"
    return Candidate(
        layout.schedule.chunks,
        (chosen,) * layout.pp,
        peaks[chosen] / capacity if capacity > 0 else 0.0,
        0.0,
        (reason,) * layout.pp,
        (peaks[chosen] / capacity if capacity > 0 else 0.0,) * layout.pp,
    )


def _candidate(layout: Any, chunks: int, price: bool) -> Candidate:
    """Depth ``chunks`` with each stage's least recomputation that fits (or the written
    modes), priced when ``price``."""
    view = _view(layout, chunks)
    left = layout.recompute_left and layout.model.transformer is not None
    if left:
        plans = {
            mode: plan_stages(view.model, view.stage_layers, view.options, [mode] * _parts(view))
            for mode in recompute_modes(True)
        }
    modes, reasons, fills = [], [], []
    for s in range(layout.pp):
        capacity = _capacity(layout, s)
        if left:

            def peak(mode: str, s: int = s) -> float:
                view.plans = plans[mode]
                return _stage_peak(view, s)

            mode, tried = least_recompute(recompute_modes(True), peak, capacity)
            reasons.append(fits_or_not(mode, tried, capacity))
            used = tried[mode]
        else:  # the modes as written (the view's plans are made with them)
            mode = layout.stage_recompute[s]
            used = _stage_peak(view, s)
            reasons.append("")
        modes.append(mode)
        fills.append(used / capacity if capacity > 0 else 0.0)
    seconds = _iteration_seconds(view, modes) if price else 0.0
    return Candidate(chunks, tuple(modes), max(fills), seconds, tuple(reasons), tuple(fills))


def _parts(view: Any) -> int:
    return view.schedule.virtual_stages


def _modes(view: Any) -> list[str]:
    return [view.stage_recompute[view.schedule.device_of(k)[0]] for k in range(_parts(view))]


def _view(layout: Any, chunks: int) -> Any:
    """The layout as it would be with ``chunks`` per device: its schedule, split, plans and
    operations (a shallow copy; the layout is not changed)."""
    view = copy.copy(layout)
    view.auto_choices = {}  # a candidate's split is not the layout's choice
    view.balance = None
    m = layout.schedule.micro_batches
    view.schedule = type(layout.schedule)(layout.pp, m, chunks)
    view.stage_layers = view._split()
    view.plans = plan_stages(view.model, view.stage_layers, view.options, _modes(view))
    counts = set(layout.micro_batch_counts()) | {m}
    view._ops_by_count = {
        n: [type(layout.schedule)(layout.pp, n, chunks).operations(s) for s in range(layout.pp)]
        for n in counts
    }
    split = view.schedule.split_backward
    view.peak_pairs = {
        n: [[] if split else peak_stored(ops)[1] for ops in by_stage]
        for n, by_stage in view._ops_by_count.items()
    }
    if layout.experts is not None:
        view.experts = moe.plan_experts(view)
    return view


def _capacity(layout: Any, s: int) -> float:
    """The smallest memory of device stage ``s``'s GPUs over the replicas (bytes)."""
    devices = layout.topology.devices
    return min(devices[x].memory_bytes for group in _stage_groups(layout, s) for x in group)


def _stage_groups(layout: Any, s: int) -> list[Sequence[str]]:
    """Stage ``s``'s tensor groups, one per replica."""
    return [layout.groups[d][s] for d in range(layout.dp)]


def _stage_peak(layout: Any, s: int) -> float:
    """Peak bytes of one GPU of device stage ``s`` (the replica holding the most
    micro-batches), as the memory plan counts it with ``training.memory``."""
    settings = layout.train.memory
    most = max(layout.micro_batch_counts())
    states, activations, other = layout._stage_memory(s, most)
    device = DeviceMemory.of(states, activations, other, 0.0)
    return device.with_settings(settings.fragmentation, settings.buffers, settings.context).peak


def _iteration_seconds(view: Any, modes: Sequence[str]) -> float:
    """Seconds of one iteration of replica 0 by the analytical pipeline timeline (module
    docstring) with each device stage's recomputation ``modes``."""
    view.stage_recompute = list(modes)
    view.plans = plan_stages(view.model, view.stage_layers, view.options, _modes(view))
    layers = [(plan.first_layer, plan.layers) for plan in view.plans]
    folder = scenario_folder(view.scenario.source or "")
    view.stage_times = StageTimes(
        view.model,
        layers,
        view.tp,
        _modes(view),
        folder,
        fp8=run_casts(view),
        ep=view.parallelism.ep,
    )
    devices, group = view.topology.devices, view.groups[0]
    schedule, mb = view.schedule, view.micro_batch
    seconds: dict[tuple[int, bool], float] = {}
    for k in range(len(view.plans)):
        s = schedule.device_of(k)[0]
        device = devices[group[s][0]]
        for forward in (True, False):
            flops = view._pass_flops(k, forward) * mb / (view.tp * view.cp)
            rate = view.stage_times.seconds_per_flop(device, k, forward, mb)
            work = {"flops": flops} if rate is None else {"seconds": flops * rate}
            seconds[k, forward] = work_duration(device, work) + _tp_seconds(view, s, k, forward)

    def op_seconds(stage: int, op: Op) -> float:
        k = schedule.virtual_stage(stage, op.chunk)
        return seconds[k, op.kind == FORWARD]

    hops: dict[tuple[int, int], float] = {}

    def hop(src: int, dst: int) -> float:
        if (src, dst) not in hops:
            a, b = schedule.device_of(src)[0], schedule.device_of(dst)[0]
            boundary = view.plans[min(src, dst)].output_bytes * mb / (view.tp * view.cp)
            hops[src, dst] = (
                0.0
                if a == b
                else HopCost.between(view.topology, group[a][0], group[b][0]).time(boundary)
            )
        return hops[src, dst]

    timeline = played_timeline(schedule, op_seconds, hop)
    return max(end for _start, end in timeline.values())


def _tp_seconds(view: Any, s: int, k: int, forward: bool) -> float:
    """Seconds virtual stage ``k`` holds its tensor group for one micro-batch's pass (the
    backward with full recomputation runs the forward's collectives again), as the run
    holds it."""
    plan = view.plans[k]
    if view.tp == 1 or not plan.split_layers:
        return 0.0
    passes = 2 if view.recompute_of(k) == "full" and not forward else 1
    kind = FORWARD if forward else BACKWARD
    if view.recipes.tp_comm_overlap:
        return tp_overlap.exposed_seconds(view, 0, s, view._layers_of(k), kind, passes)
    ops = view._tp_ops(plan, kind) + view._tp_ops(plan, FORWARD) * (passes - 1)
    return view.tp_timers[0, s].seconds(ops)


__all__ = [
    "choose",
    "chunk_candidates",
    "heaviest",
    "record_split",
    "stage_modes",
]
