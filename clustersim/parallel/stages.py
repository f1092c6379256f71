"""Splitting a model's layers into pipeline stages (balanced by cost) and checking a split."""

from __future__ import annotations

from collections.abc import Sequence

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


def check_stage_layers(stage_layers: Sequence[int], layers: int, stages: int) -> None:
    """ScenarioError unless ``stage_layers`` has ``stages`` entries summing to ``layers``
    (:func:`~clustersim.parallel.rules.stage_layers_problem`)."""
    enforce(stage_layers_problem(stage_layers, layers, stages))
