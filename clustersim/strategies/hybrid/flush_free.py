"""Flush-free pipelines (PipeDream, PipeDream-2BW) in the hybrid strategy.

A stage device plays its schedule's ``run_operations``: 1F1B over every micro-batch of the
run, the iterations following each other without draining the pipeline.  Iteration ``i``
of a stage starts at its first op and ends when its weight update has ended:

* **PipeDream** (``update_every_microbatch``): after each backward the stage updates its
  weights -- the gradient all-reduce with its ``dp`` peers for that micro-batch (PipeDream
  syncs each stage's replicas per minibatch, which is our micro-batch), then the optimizer
  step (and ZeRO-1's parameter all-gather) -- before its next op.  An iteration thus costs
  ``m`` optimizer steps and ``m`` all-reduces.
* **PipeDream-2BW**: after the last backward of iteration ``i`` the update (all-reduce,
  optimizer step) runs as a process of its own beside the pipeline; the first op of
  iteration ``i + 2`` waits for it (one-step-delayed weights).

Units: seconds, bytes.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import simpy

from ...engine import Simulation
from ...parallel.schedules import BACKWARD

if TYPE_CHECKING:
    from .strategy import Pipeline


def run_stage(pipe: Pipeline, sim: Simulation, d: int, s: int) -> Generator[Any, Any, None]:
    """The process of stage ``s`` of replica ``d`` under a flush-free schedule."""
    schedule = pipe.schedule
    group = pipe.groups[d][s]
    m, iterations = schedule.micro_batches, pipe.train.iterations
    updates: dict[int, simpy.Event] = {}
    started: set[int] = set()
    for it, op in schedule.run_operations(s, iterations):  # type: ignore[attr-defined]
        if it not in started:
            started.add(it)
            if it >= 2 and it - 2 in updates:
                yield updates[it - 2]
            for device in group:
                pipe.clock.start(device, it, sim.now)
        yield from pipe._run_op(sim, d, s, it, op)
        if op.kind != BACKWARD:
            continue
        last = op.microbatch == m - 1
        if schedule.update_every_microbatch:  # type: ignore[attr-defined]
            yield from pipe._update(sim, d, s, it, f".{op.microbatch}")
            if last:
                _end(pipe, group, it, sim.now)
        elif last:
            updates[it] = sim.process(_update_then_end(pipe, sim, d, s, it))
    yield from updates.values()


def _update_then_end(
    pipe: Pipeline, sim: Simulation, d: int, s: int, it: int
) -> Generator[Any, Any, None]:
    yield from pipe._update(sim, d, s, it)
    _end(pipe, pipe.groups[d][s], it, sim.now)


def _end(pipe: Pipeline, group: Any, it: int, now: float) -> None:
    for device in group:
        pipe.clock.end(device, it, now)
