"""The training times of a parameter-server run (:mod:`.strategy`): rounds in the
synchronous modes, per-worker periods in the asynchronous ones."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...engine import Simulation
from ...errors import SimulationError
from ...metrics import IterationTimes, TrainingTimes, training_summary
from .. import training

if TYPE_CHECKING:
    from .strategy import ParameterServer


def round_summary(self: ParameterServer, sim: Simulation) -> tuple[TrainingTimes, float]:
    """Sync/backup: iteration r ends when its last participant has pulled round r;
    the training times and the updates per second."""
    rounds = self.train.iterations
    if len(self.round_end) != rounds:
        raise SimulationError(f"parameter_server finished {len(self.round_end)} of {rounds}")
    clock = training.IterationClock.new()
    for r, t in self.round_end.items():
        clock.end("rounds", r, t)
    batch = sum(self.round_samples) / len(self.round_samples)
    measured = training_summary(clock, sim.records, rounds, batch, self._devices(), self.workers)
    last = max(self.round_end.values())
    return measured, rounds / last if last > 0 else 0.0


def async_summary(self: ParameterServer, sim: Simulation) -> tuple[TrainingTimes, float]:
    """Async modes: per-worker periods and rates, summed or averaged over workers;
    the training times and the updates per second."""
    iterations = self.train.iterations
    if min(self.completed) != iterations:
        raise SimulationError(
            f"parameter_server: a worker finished {min(self.completed)} of {iterations}"
        )
    measured = training_summary(
        self.clock, sim.records, iterations, self.train.global_batch, self._devices(), self.workers
    )
    ends = [[self.clock.ends[d, i] for i in range(iterations)] for d in self.workers]
    lengths = [[e[i] - (e[i - 1] if i else 0.0) for i in range(iterations)] for e in ends]
    n = len(self.workers)
    times = IterationTimes(
        iteration_time_s=sum(e[-1] / iterations for e in ends) / n,
        iteration_times_s=[sum(x[i] for x in lengths) / n for i in range(iterations)],
        throughput_samples_per_s=sum(
            self.samples[w] * iterations / ends[w][-1] for w in range(n) if ends[w][-1] > 0
        ),
    )
    nkeys = len(self.keys)
    updates_per_s = sum(self.applied[w] / nkeys / ends[w][-1] for w in range(n) if ends[w][-1] > 0)
    return TrainingTimes(times, measured.shares), updates_per_s
