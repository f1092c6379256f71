"""Splitting a model's layers into pipeline stages (balanced by cost) and checking a split.

* :func:`balanced_split` -- stages of one speed: contiguous layers balanced by their cost;
* :func:`minimax_split` -- stages of their own speed and memory (``pipeline.stages:
  balanced`` on a mixed cluster): each stage prices a run of layers with its own cost
  function, and the split minimises the slowest stage, within each stage's memory;
* :func:`megatron_blocks` -- a transformer's blocks as Megatron-Core splits them where they
  do not divide (``pipeline.stages: auto``): the first and last stage take fewer;
* :func:`check_stage_layers` -- a split given as ``pipeline.stage_layers`` fits the model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .rules import enforce, stage_layers_problem


def balanced_split(costs: Sequence[float], parts: int) -> list[int]:
    """Layer counts of ``parts`` contiguous stages, balanced by cost, input first.

    ``costs`` are per-layer costs (e.g. forward + backward FLOPs per sample);
    every stage gets at least one layer, so ``len(costs) >= parts``.  Two
    candidates are built and the one whose costliest stage is cheaper wins
    (the first on a tie): stage ends placed where the running cost is nearest
    to ``i / parts`` of the total (even stages), and the split that minimises
    the costliest stage (bisection on a greedy packing).
    """
    n = len(costs)
    if parts < 1 or n < parts:
        raise ValueError(f"cannot split {n} layers into {parts} stages")
    candidates = [_proportional(costs, parts), _minimax(costs, parts)]
    return min(candidates, key=lambda counts: _heaviest(costs, counts) * (1 - 1e-12))


def _heaviest(costs: Sequence[float], counts: Sequence[int]) -> float:
    """Cost of the costliest stage of a split."""
    heaviest, first = 0.0, 0
    for count in counts:
        heaviest = max(heaviest, sum(costs[first : first + count]))
        first += count
    return heaviest


def _proportional(costs: Sequence[float], parts: int) -> list[int]:
    """Stage ends where the running cost is nearest to equal shares of the total."""
    n, total = len(costs), sum(costs)
    prefix = [0.0]
    for cost in costs:
        prefix.append(prefix[-1] + cost)
    ends = [0]
    for i in range(1, parts):
        lo, hi = ends[-1] + 1, n - (parts - i)
        target = total * i / parts
        ends.append(min(range(lo, hi + 1), key=lambda e: (abs(prefix[e] - target), e)))
    ends.append(n)
    return [b - a for a, b in zip(ends, ends[1:])]


def _minimax(costs: Sequence[float], parts: int) -> list[int]:
    """A split minimising the costliest stage; missing stages split off the largest."""
    lo = max(max(costs), sum(costs) / parts)
    hi = max(sum(costs), lo)
    if _stages_needed(costs, lo) <= parts:
        hi = lo
    for _ in range(100):
        if hi - lo <= 1e-12 * max(hi, 1e-300):
            break
        mid = (lo + hi) / 2
        if _stages_needed(costs, mid) <= parts:
            hi = mid
        else:
            lo = mid
    counts = _pack_from_end(costs, hi)
    while len(counts) < parts:
        i = max(range(len(counts)), key=lambda x: (counts[x], -x))
        half = counts[i] // 2
        counts[i : i + 1] = [counts[i] - half, half]
    return counts


def _stages_needed(costs: Sequence[float], limit: float) -> int:
    """Stages a greedy packing with at most ``limit`` per stage needs."""
    needed, filled = 1, 0.0
    for cost in costs:
        if filled + cost > limit and filled > 0:
            needed += 1
            filled = 0.0
        filled += cost
    return needed


def _pack_from_end(costs: Sequence[float], limit: float) -> list[int]:
    """Greedy packing from the last layer backwards; layer counts input first."""
    counts: list[int] = []
    filled, count = 0.0, 0
    for cost in reversed(costs):
        if filled + cost > limit and count:
            counts.append(count)
            filled, count = 0.0, 0
        filled += cost
        count += 1
    counts.append(count)
    return counts[::-1]


StageSeconds = Callable[[int, int, int], float]
"""``seconds(stage, first, count)``: the time of stage ``stage`` holding the ``count`` units
from unit ``first`` on (any unit of time; it must not decrease as the run grows)."""
StageFits = Callable[[int, int, int], bool]
"""``fits(stage, first, count)``: whether those units fit the stage's memory (a run that
fits must keep fitting when it shrinks)."""

BISECTION_STEPS = 200
"""Bisection steps on the time limit at most (it stops at a relative width of 1e-12)."""


def minimax_split(
    units: int, parts: int, seconds: StageSeconds, fits: StageFits | None = None
) -> list[int] | None:
    """Unit counts of ``parts`` contiguous stages (input first, at least one unit each) whose
    slowest stage is as fast as can be, each stage priced by its own ``seconds``; None when
    no split fits the memory (``fits``; None: memory is not a constraint).

    Two steps.  The minimax time ``T*``: bisection on a time limit ``T``, each step asking
    whether the stages can pack the units within ``T`` and their memory (:func:`_packs`;
    times and memory only grow with a stage's run of units).  Then, among the splits whose
    every stage is within ``T*`` and fits, the most even one (:func:`_most_even`).
    """
    if parts < 1 or units < parts:
        raise ValueError(f"cannot split {units} units into {parts} stages")
    fit = fits or (lambda _stage, _first, _count: True)
    if not _packs(units, parts, seconds, fit, float("inf")):
        return None
    hi = max(seconds(k, 0, units) for k in range(parts))
    lo = 0.0
    for _ in range(BISECTION_STEPS):
        if hi - lo <= 1e-12 * hi:
            break
        mid = (lo + hi) / 2
        if _packs(units, parts, seconds, fit, mid):
            hi = mid
        else:
            lo = mid
    return _most_even(units, parts, seconds, fit, hi)


def split_seconds(counts: Sequence[int], seconds: StageSeconds) -> tuple[float, list[float]]:
    """The slowest stage's time of a split, and every stage's."""
    times, first = [], 0
    for k, count in enumerate(counts):
        times.append(seconds(k, first, count))
        first += count
    return max(times), times


def _packs(units: int, parts: int, seconds: StageSeconds, fits: StageFits, limit: float) -> bool:
    """Whether some split keeps every stage within ``limit`` and its memory.

    From the last stage back, the set of units where stage k may start: for each end e
    where stages k+1.. may start, stage k may start anywhere from the earliest unit it can
    reach within the limit (a binary search: a run's time and memory grow as it does) to
    e - 1, and at unit k or later (a unit for each stage before it).  A greedy that lets
    each stage take all it can is not enough when stages differ in speed: units costing
    [0, 1, 0, 0] on stages of speeds 3, 1, 3 split [2, 1, 1] within 1/3, but a last stage
    taking all it can (units 2 and 3) leaves the slow stage unit 1, a second's work."""
    starts = [False] * units + [True]  # stages k+1.. can start at unit e
    for k in range(parts - 1, -1, -1):
        marks = [0] * (units + 1)
        for end in range(k + 1, units + 1):
            earliest = _earliest(k, end, seconds, fits, limit) if starts[end] else None
            if earliest is not None:
                marks[earliest] += 1
                marks[end] -= 1
        running, starts = 0, [False] * (units + 1)
        for first in range(units):
            running += marks[first]
            starts[first] = running > 0
    return starts[0]


def _earliest(k: int, end: int, seconds: StageSeconds, fits: StageFits, limit: float) -> int | None:
    """The first unit (k or later) from which stage k can run to ``end`` within ``limit``
    and its memory; None if not even from ``end`` - 1."""
    if not _within(k, end - 1, end, seconds, fits, limit):
        return None
    lo, hi = k, end - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if _within(k, mid, end, seconds, fits, limit):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _within(
    k: int, first: int, end: int, seconds: StageSeconds, fits: StageFits, limit: float
) -> bool:
    """Stage k holding units [first, end) is within ``limit`` and fits."""
    return seconds(k, first, end - first) <= limit and fits(k, first, end - first)


Run = tuple[int, int, float]
"""One stage's candidate run of units: (first, end, seconds)."""


def _runs(
    units: int, parts: int, seconds: StageSeconds, fits: StageFits, limit: float
) -> list[list[Run]]:
    """Per stage: every run of units within ``limit`` that fits and leaves a unit for each
    other stage (stage 0 starts at unit 0; a run grows until it passes the limit)."""
    out: list[list[Run]] = []
    for k in range(parts):
        runs: list[Run] = []
        ends = [units] if k == parts - 1 else range(k + 1, units - (parts - k - 1) + 1)
        for end in ends:
            for first in range(end - 1, k - 1, -1) if k else [0]:
                t = seconds(k, first, end - first)
                if t > limit or not fits(k, first, end - first):
                    break
                runs.append((first, end, t))
        out.append(runs)
    return out


def _most_even(
    units: int, parts: int, seconds: StageSeconds, fits: StageFits, limit: float
) -> list[int]:
    """Among the splits whose stages are all within ``limit`` and fit: those whose shortest
    stage is longest (the stage times as even as the units allow), and of them the one with
    the least total time (on stages of different speeds, the fast ones take what they can;
    the first found on ties).  Two dynamic programmes over the stages' ends."""
    runs = _runs(units, parts, seconds, fits, limit)
    shortest: dict[int, float] = {0: float("inf")}  # stages so far ending at unit e
    for stage in runs:
        reached: dict[int, float] = {}
        for first, end, t in stage:
            if first in shortest:
                reached[end] = max(reached.get(end, -1.0), min(shortest[first], t))
        shortest = reached
    floor = shortest[units]
    best: dict[int, tuple[float, list[int]]] = {0: (0.0, [])}  # least total, counts
    for stage in runs:
        following: dict[int, tuple[float, list[int]]] = {}
        for first, end, t in stage:
            before = best.get(first)
            if t < floor or before is None:
                continue
            total = before[0] + t
            if end not in following or total < following[end][0]:
                following[end] = (total, [*before[1], end - first])
        best = following
    return best[units][1]


def megatron_blocks(blocks: int, parts: int) -> list[int]:
    """Transformer blocks per (virtual) stage, input first, as Megatron-Core splits ``blocks``
    over ``parts`` stages where they need not divide (``pipeline.stages: auto``).

    Megatron-Core gives every middle stage the same count ``m`` and the first and last stage
    their own (``num_layers_in_first_pipeline_stage``, ``num_layers_in_last_pipeline_stage``),
    or counts the embedding and the loss as one layer each on those stages
    (``account_for_embedding_in_pipeline_split``, ``account_for_loss_in_pipeline_split``);
    Llama 3 405B ran its 126 blocks over 16 stages as [7, 8 x 14, 7] (Llama 3 paper,
    section 3.3.2).  Here: the smallest ``m`` >= blocks / parts that leaves the first and last
    stage between 1 and ``m`` blocks, their sum split as evenly as it goes, the first the
    smaller (it holds the most micro-batches in flight under 1F1B).  Blocks that divide
    give equal stages; blocks + 2 that divide give Megatron-Core's accounted split.  Where no
    such ``m`` exists (fewer than about two blocks per stage), the blocks as even as they go,
    the extra ones on the middle stages nearest the end.  ValueError below one block per
    stage.
    """
    if parts < 1 or blocks < parts:
        raise ValueError(f"cannot split {blocks} blocks into {parts} stages")
    if parts == 1:
        return [blocks]
    middle = parts - 2
    least = -(-blocks // parts)  # ceil(blocks / parts)
    most = (blocks - 2) // middle if middle else blocks
    if least <= most:
        ends = blocks - least * middle
        first = ends // 2
        return [first, *[least] * middle, ends - first]
    counts = [blocks // parts] * parts
    order = [*range(parts - 2, 0, -1), parts - 1, 0]  # middle stages from the end, then the ends
    for i in order[: blocks % parts]:
        counts[i] += 1
    return counts


def check_stage_layers(stage_layers: Sequence[int], layers: int, stages: int) -> None:
    """ScenarioError unless ``stage_layers`` has ``stages`` entries summing to ``layers``
    (:func:`~clustersim.parallel.rules.stage_layers_problem`)."""
    enforce(stage_layers_problem(stage_layers, layers, stages))
