"""The Pareto frontier of cost and time to train.

A point (cost, time) is Pareto-optimal when no other point has both a cost and a time lower
or equal, one of them strictly lower: nothing is both cheaper (or as cheap) and faster (or
as fast).  Two points with the same cost and time are both optimal (neither beats the
other).  Units: whatever the points are in (the tables give currency and hours).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Point = tuple[float, float]
"""(cost, time to train)."""


def pareto_optimal(points: Sequence[Point]) -> list[bool]:
    """For each point, whether it is Pareto-optimal among ``points`` (lower is better on both).

    Sorted by cost, then time, a point is beaten exactly when an earlier point other than its
    own duplicates has a time at most its own: one sweep, O(n log n).
    """
    order = sorted(range(len(points)), key=lambda i: points[i])
    optimal = [False] * len(points)
    best_before = math.inf  # least time among the points of earlier (cost, time) groups
    k = 0
    while k < len(order):
        group_end = k
        while group_end < len(order) and points[order[group_end]] == points[order[k]]:
            group_end += 1
        time = points[order[k]][1]
        for i in order[k:group_end]:
            optimal[i] = time < best_before
        best_before = min(best_before, time)
        k = group_end
    return optimal


def frontier_steps(points: Sequence[Point]) -> list[Point]:
    """The Pareto-optimal points by cost, duplicates once: the frontier's corners, joined
    by a step line (cost rises, time falls)."""
    marks = pareto_optimal(points)
    return sorted({p for p, m in zip(points, marks) if m})
