"""The best checkpoint interval: a search over ``checkpoint_every`` by Monte Carlo.

Every candidate is evaluated with the same seed, so on the same failure histories
(common random numbers, :mod:`.schedule`): the differences between candidates are
far less noisy than the expected times themselves, and the curve is smooth enough
to search.

1. A geometric grid, ratio 2, of nine candidates centred on Young's interval
   ``sqrt(2 C M)`` (in iterations; the whole job when nothing stops it), extended on
   the side of the minimum while the minimum sits at an edge.
2. The neighbours of the grid's minimum are refined at ratio ``2 ** (1/4)``.
3. A parabola in ``log(checkpoint_every)`` is fitted by least squares to the five
   candidates around the minimum; its vertex (kept within them) is the best interval.
   Near its optimum the expected time is flat (quadratic), so the vertex of the fit is
   a much steadier estimate than the noisy argmin.

Candidates that cannot make progress (:class:`SimulationError`) count as infinitely
slow.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import SimulationError
from .model import FailureProcess, ScheduledFailure, TrainingJob, job_mtbf_s, young_daly_interval_s
from .montecarlo import GoodputResult, Progress, check_samples, monte_carlo
from .replay import MAX_FAILURES

GRID_HALF_WIDTH = 4
"""Candidates each side of the starting guess (ratio 2 apart)."""
MAX_CANDIDATES = 60
"""A bound on the Monte Carlo runs of one search."""


@dataclass(frozen=True)
class Candidate:
    """One evaluated checkpoint interval."""

    checkpoint_every: int
    checkpoint_interval_s: float
    expected_time_to_train_s: float
    """``inf`` when the job cannot make progress at this interval."""
    stderr_s: float


@dataclass(frozen=True)
class CheckpointSearch:
    """The outcome of :func:`best_checkpoint_interval`."""

    best_checkpoint_every: int
    """Iterations between checkpoints that minimise the expected time to train."""
    best_checkpoint_interval_s: float
    """The same in work seconds (``best_checkpoint_every * iteration_s``)."""
    young_daly_interval_s: float
    """``sqrt(2 * checkpoint_blocking_s * job_mtbf_s)``, for comparison (inf: no failures)."""
    candidates: tuple[Candidate, ...]
    """Every candidate evaluated, by ``checkpoint_every``."""
    result: GoodputResult
    """The Monte Carlo at the best interval, with ``best_checkpoint_interval_s`` set."""


def best_checkpoint_interval(
    job: TrainingJob,
    failures: Sequence[FailureProcess],
    scheduled: Sequence[ScheduledFailure] = (),
    *,
    samples: int,
    seed: int,
    progress: Progress | None = None,
    max_failures: int = MAX_FAILURES,
) -> CheckpointSearch:
    """Search ``checkpoint_every`` (``job``'s own value is ignored) for the least expected
    time to train, each candidate a :func:`monte_carlo` of ``samples`` samples with
    ``seed`` (see the module docstring).  ``progress(done, total)`` counts candidates;
    the total may grow while the grid extends.  Without job-stopping failures (random or
    scheduled) the best is never to checkpoint: ``checkpoint_every = iterations``."""
    check_samples(samples, seed)
    mtbf = job_mtbf_s(failures)
    young = young_daly_interval_s(job.checkpoint_blocking_s, mtbf)
    results: dict[int, GoodputResult | None] = {}
    planned = 2 * GRID_HALF_WIDTH + 1 + 6  # the grid, then about six refinements

    def time_of(every: int) -> float:
        if every not in results:
            try:
                results[every] = monte_carlo(
                    dataclasses.replace(job, checkpoint_every=every),
                    failures,
                    scheduled,
                    samples=samples,
                    seed=seed,
                    max_failures=max_failures,
                )
            except SimulationError:
                results[every] = None
            if progress is not None:
                progress(len(results), max(len(results), planned))
        found = results[every]
        return math.inf if found is None else found.expected_time_to_train_s

    stops = any(f.stops_job for f in failures) or any(s.stops_job for s in scheduled)
    if not stops:
        best = job.iterations
    else:
        best = _search(job, young, time_of)
    result = results.get(best) or monte_carlo(
        dataclasses.replace(job, checkpoint_every=best),
        failures,
        scheduled,
        samples=samples,
        seed=seed,
        max_failures=max_failures,
    )
    interval = best * job.iteration_s
    result = dataclasses.replace(
        result, best_checkpoint_interval_s=interval, best_checkpoint_every=best
    )
    candidates = tuple(
        Candidate(
            every,
            every * job.iteration_s,
            math.inf if r is None else r.expected_time_to_train_s,
            math.inf if r is None else r.expected_time_to_train_stderr_s,
        )
        for every, r in sorted(results.items())
    )
    return CheckpointSearch(best, interval, young, candidates, result)


def _search(job: TrainingJob, young_s: float, time_of) -> int:
    n = job.iterations
    guess = n if math.isinf(young_s) else young_s / job.iteration_s
    guess = min(max(guess, 1.0), float(n))

    def clamp(x: float) -> int:
        return int(min(max(round(x), 1), n))

    grid = sorted({clamp(guess * 2.0**i) for i in range(-GRID_HALF_WIDTH, GRID_HALF_WIDTH + 1)})
    for _ in range(MAX_CANDIDATES):
        times = [time_of(k) for k in grid]
        i = int(np.argmin(times))
        if i == 0 and grid[0] > 1:
            grid.insert(0, clamp(grid[0] / 2))
        elif i == len(grid) - 1 and grid[-1] < n:
            grid.append(clamp(grid[-1] * 2))
        else:
            break
    low = grid[max(i - 1, 0)]
    high = grid[min(i + 1, len(grid) - 1)]
    fine = {clamp(low * 2.0 ** (j / 4)) for j in range(0, 9) if low * 2.0 ** (j / 4) <= high}
    points = sorted(set(grid) | fine)
    times = [time_of(k) for k in points]
    return _vertex(points, times)


def _vertex(points: list[int], times: list[float]) -> int:
    """The vertex of a parabola in ``log(k)`` fitted to the five points around the
    minimum (the minimum itself when the fit is not convex)."""
    i = int(np.argmin(times))
    lo = max(0, min(i - 2, len(points) - 5))
    near = [(k, t) for k, t in zip(points[lo : lo + 5], times[lo : lo + 5]) if math.isfinite(t)]
    if len(near) < 3:
        return points[i]
    x = np.log([k for k, _ in near])
    y = np.array([t for _, t in near])
    a, b, _ = np.polyfit(x - x.mean(), y / y.mean(), 2)
    if a <= 0:
        return points[i]
    vertex = min(max(-b / (2 * a) + x.mean(), x.min()), x.max())
    return max(1, round(math.exp(vertex)))
