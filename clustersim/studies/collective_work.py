"""The collective sweep's work (:mod:`clustersim.budget`): each point's estimate checked
against the limits before the first runs, and the flags that would shorten a sweep
estimated long (its notice, :func:`clustersim.budget.long_work_notice`).

:func:`clustersim.studies.collective_sweep.sweep` calls them; the names are re-exported
there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..budget import (
    DEFAULT_MAX_EVENTS,
    EVENTS_PER_S,
    LIMIT_FLAG,
    MEMORY_FLAG,
    NOTHING,
    NOTICE_AFTER_S,
    WorkEstimate,
    default_max_memory,
    either,
    enforce,
    enforce_memory,
    estimate_memory,
)
from ..collectives.work import call_work, events_by_chunk, larger_chunk
from ..units import format_size, size_flag

if TYPE_CHECKING:
    from ..collectives import CollectiveCall
    from ..topology import Topology


@dataclass(frozen=True)
class Limits:
    """A sweep's limits: events (None: :data:`~clustersim.budget.DEFAULT_MAX_EVENTS`) and
    memory in bytes (None: :func:`~clustersim.budget.default_max_memory`)."""

    events: int | None = None
    memory: float | None = None


def check_sweep_work(
    calls: Sequence[Sequence[CollectiveCall]],
    topology: Topology,
    model: str,
    iterations: int,
    channels: int | str = 1,
    limits: Limits = Limits(),
) -> WorkEstimate:
    """Refuse a sweep before it runs (:func:`check_points_work`); returns the sweep's work."""
    return sum(check_points_work(calls, topology, model, iterations, channels, limits), NOTHING)


def check_points_work(
    calls: Sequence[Sequence[CollectiveCall]],
    topology: Topology,
    model: str,
    iterations: int,
    channels: int | str = 1,
    limits: Limits = Limits(),
) -> list[WorkEstimate]:
    """Refuse a sweep before it runs: every point as :func:`check_point_work` does, then
    the points together against the event limit (they run one after another, so their
    time adds up; memory does not, each point being a fresh simulation).  Returns each
    point's work, in the order they run."""
    points = [call for row_calls in calls for call in row_calls]
    works = [
        check_point_work(call, topology, model, iterations, channels, limits) for call in points
    ]
    what = f"{len(points):,} points of the sweep together"
    total = sum(works, NOTHING)
    enforce(total, limits.events or DEFAULT_MAX_EVENTS, what=what, path=LIMIT_FLAG)
    return works


def check_point_work(
    call: CollectiveCall,
    topology: Topology,
    model: str,
    iterations: int,
    channels: int | str = 1,
    limits: Limits | int | None = None,
) -> WorkEstimate:
    """Refuse (:class:`~clustersim.budget.WorkLimitError`) a point whose estimated work,
    ``call`` run ``iterations`` times as
    :func:`~clustersim.studies.collective_sweep.run_point` runs it, is over the limit's
    events (default :data:`~clustersim.budget.DEFAULT_MAX_EVENTS`), or
    (:class:`~clustersim.budget.MemoryLimitError`) whose peak memory, its schedule built
    whole included, is over its memory (default: 80% of this machine's).  ``limits`` may
    be an event count alone.  Returns the point's work."""
    if not isinstance(limits, Limits):
        limits = Limits(limits)
    once = call_work(
        call, topology, model=model, channels=channels, record_transfers=False, alone=True
    )
    what = f"{call.op} of {format_size(call.size_bytes)} by {call.algorithm}"
    if iterations > 1:
        what += f", {iterations:,} iterations"
    work = once * iterations
    enforce(work, limits.events or DEFAULT_MAX_EVENTS, what=what, path=LIMIT_FLAG)
    memory = estimate_memory(work, len(topology.devices), len(topology.links))
    limit = limits.memory or default_max_memory()
    default = limits.memory is None
    less = "a larger --chunk, fewer --bytes or --iterations, or --model analytical"
    enforce_memory(
        memory, limit, what=what, path=MEMORY_FLAG, default=default, work=work, less=less
    )
    return work


def shorter_sweep(
    points: Sequence[CollectiveCall],
    events: Sequence[float],
    sizes: int,
    topology: Topology,
    model: str,
    iterations: int,
    channels: int | str = 1,
) -> str:
    """The flags that would shorten a sweep of ``points`` (estimated at ``events`` each,
    over ``sizes`` sizes), as a phrase for its notice
    (:func:`~clustersim.budget.long_work_notice`): a larger ``--chunk``, fewer
    ``--iterations``, fewer ``--bytes`` sizes or ``--algorithm`` names, and ``--model
    analytical``, each where it applies.  The chunk offered (flow-level model) is the
    smallest power of two above the one given at which the sweep's largest point shrinks
    by as much as the whole sweep must to take :data:`~clustersim.budget.NOTICE_AFTER_S`
    (only the largest point is estimated again: a call's estimate takes up to 30 ms on
    512 devices, and a sweep may have 1,000 points)."""
    hints = []
    chunk = points[0].chunk_bytes if points else None
    if chunk is not None and model == "flow":
        most = max(events)
        largest = points[events.index(most)]
        share = NOTICE_AFTER_S * EVENTS_PER_S / sum(events)

        events_of = events_by_chunk(
            largest,
            topology,
            model=model,
            channels=channels,
            iterations=iterations,
            record_transfers=False,
        )
        larger = larger_chunk(events_of, chunk, most * share)
        if larger is not None:
            hints.append(f"--chunk {size_flag(larger)}")
    if iterations > 1:
        hints.append("fewer --iterations")
    if sizes > 1:
        hints.append("fewer --bytes sizes")
    if len(points) > sizes:
        hints.append("one --algorithm")
    if model == "flow":
        hints.append("--model analytical")
    return either(hints)
