"""The whole training job under failures and checkpoints: what ``clustersim run`` adds to
a training run's summary when its scenario has ``failures``, ``checkpoint``, or a job
length (``training.duration`` / ``tokens``).

The simulation plays the representative iterations (``training.iterations``); the
failures that only reroute or stall traffic are played there too
(:func:`clustersim.topology.failures.play_link_failures`).  Everything that stops the job -- a worker's GPU or node, a
link, NIC or switch failure that cuts a worker off for good, every random failure -- is
priced by the goodput model (:mod:`clustersim.goodput`) from the simulated iteration
time, the simulated checkpoint cost and ``recovery``, advanced analytically over the
whole job, over ``recovery.samples`` sampled failure histories (:func:`goodput_of`).

Modelling choices, all documented in docs/writing-scenarios.md, ``failures``:

* ``training.duration`` is the job's length without failures or checkpoints: its
  iterations are ``ceil(duration / iteration time)``; ``tokens`` gives them directly;
  with neither, the job is ``training.iterations`` long.
* A job-stopping scheduled failure whose ``repair`` is never restarts on spares at once;
  with a ``repair``, the job waits for it before restarting.
* ``recovery.elastic``: where the strategy can go on without workers (data parallel, a
  parameter server in backup mode), failures of workers do not stop the job; each
  component down slows iterations by ``n / (n - k)`` (n workers, k the most workers one
  component holds: 1 for a GPU, 8 for a node of 8).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import Problem, ScenarioError
from ..goodput import (
    FailureProcess,
    ScheduledFailure,
    TrainingJob,
    best_checkpoint_interval,
    monte_carlo,
)
from ..metrics.goodput import GoodputSummary
from ..metrics.training import IterationTimes
from ..topology.failures import ResolvedFailures, stops_in_simulation
from .checkpoint import checkpoint_cost, rank_state, training_with_drain
from .length import job_length

Progress = Callable[[int, int], None]
"""``progress(done, total)``: Monte Carlo runs done (the job's own interval, then each
candidate interval of the search)."""


def wanted(scenario: Any) -> bool:
    """Whether a training scenario asks for the whole-job outlook."""
    if scenario.training is None:
        return False
    training = scenario.training
    length = training.duration_s is not None or training.tokens is not None
    return bool(scenario.failures) or scenario.checkpoint is not None or length


def goodput_of(
    scenario: Any,
    strategy: Any,
    topology: Any,
    failures: ResolvedFailures | None,
    times: IterationTimes,
    progress: Progress | None = None,
) -> GoodputSummary | None:
    """The summary's goodput keys for a training run whose mean iteration took
    ``times.iteration_time_s`` (None when the scenario asks for none)."""
    if not wanted(scenario):
        return None
    iteration_s = times.iteration_time_s
    iterations = _iterations(scenario, iteration_s)
    pause_s, drain_s, contention_s, every = _checkpoints(
        scenario, topology, iteration_s, iterations
    )
    restart_s = 600.0 if failures is None else failures.restart_s
    processes, slowdown = _processes(failures, strategy, scenario.source)
    scheduled = _scheduled(failures)
    job = TrainingJob(
        iteration_s,
        iterations,
        every,
        pause_s + contention_s,
        drain_s,
        restart_s,
        elastic_slowdown=slowdown,
    )
    samples = 1000 if scenario.recovery is None else scenario.recovery.samples
    seed = _seed(scenario, failures)
    stopping = any(p.stops_job for p in processes) or bool(scheduled)
    planned = [1]

    def overall(done: int, total: int, offset: int = 0) -> None:
        if progress is not None:
            planned[0] = max(planned[0], offset + total)
            progress(offset + done, planned[0])

    result = monte_carlo(job, processes, scheduled, samples=samples, seed=seed)
    overall(1, 1)
    best_s = best_every = None
    if stopping:
        search = best_checkpoint_interval(
            job,
            processes,
            scheduled,
            samples=samples,
            seed=seed,
            progress=lambda d, t: overall(d, t, offset=1),
        )
        best_s, best_every = search.best_checkpoint_interval_s, search.best_checkpoint_every
    return _summary(result, job, pause_s, contention_s, best_s, best_every)


def check(scenario: Any, strategy: Any, failures: ResolvedFailures | None) -> None:
    """Refuse, before the simulation, what :func:`goodput_of` could not do afterwards: an
    elastic recovery the strategy does not allow, a checkpoint of a strategy that does not
    say what each rank holds (ScenarioError naming the file and key)."""
    if not wanted(scenario):
        return
    if failures is not None and failures.elastic:
        _refuse_elastic(strategy, scenario.source)
    if scenario.checkpoint is not None:
        rank_state(strategy, scenario.source)


def _refuse_elastic(strategy: Any, source: str) -> None:
    if not strategy.continues_without_workers():
        raise ScenarioError(
            Problem(
                "recovery.elastic",
                f"the {strategy.name} strategy cannot go on without a failed worker",
                "false, or data_parallel training, or a parameter server in backup mode",
            ),
            source,
        )


def _iterations(scenario: Any, iteration_s: float) -> int:
    length = job_length(scenario)
    if length.iterations is not None:
        return length.iterations
    assert length.duration_s is not None
    if not iteration_s > 0:
        raise ScenarioError(
            Problem("training.duration", "the simulated iterations took no time"),
            scenario.source,
        )
    return max(1, math.ceil(length.duration_s / iteration_s))


def _checkpoints(
    scenario: Any, topology: Any, iteration_s: float, iterations: int
) -> tuple[float, float, float, int]:
    """(pause s, drain s, contention s, iterations between checkpoints); nothing without a
    section.  The pause the goodput model takes is the simulated pause plus the
    contention: for an async checkpoint to storage, the training run is simulated again
    with the drain beside it, and while the drain lasts iterations slow down by
    ``slowdown``: ``drain x (1 - 1 / slowdown)`` seconds of work lost per checkpoint."""
    spec = scenario.checkpoint
    if spec is None:
        return 0.0, 0.0, 0.0, iterations
    cost = checkpoint_cost(scenario, topology)
    if spec.every.iterations is not None:
        every = spec.every.iterations
    else:
        every = max(1, math.ceil(spec.every.time_s / iteration_s)) if iteration_s > 0 else 1
    drain_s, contention_s = cost.drain_s, 0.0
    if cost.is_async and cost.to_storage and iteration_s > 0:
        with_drain_s, drain_s = training_with_drain(scenario, topology)
        slowdown = max(1.0, with_drain_s / iteration_s)
        contention_s = drain_s * (1.0 - 1.0 / slowdown)
    return cost.blocking_s, drain_s, contention_s, every


def _processes(
    failures: ResolvedFailures | None, strategy: Any, source: str
) -> tuple[list[FailureProcess], float]:
    """The random failure processes, and the iteration slowdown per component down when
    the job goes on without failed workers (``recovery.elastic``)."""
    if failures is None:
        return [], 1.0
    elastic = failures.elastic
    if elastic:
        _refuse_elastic(strategy, source)
    workers = set(getattr(strategy, "workers", ()) or ())
    found, held = [], 1
    for p in failures.random:
        stops = p.stops_job
        if elastic and stops:
            stops = False
            held = max(held, _workers_held(p.names, workers))
        found.append(
            FailureProcess(
                p.cause, p.components, p.mtbf_s, p.distribution, p.shape, stops, p.repair_s
            )
        )
    n = len(workers)
    slowdown = n / (n - held) if elastic and n > held else 1.0
    return found, slowdown


def _workers_held(names: Sequence[str], workers: set[str]) -> int:
    """The most workers one of the components ``names`` holds (a GPU 1, a node its GPUs)."""
    most = 1
    for name in names:
        inside = sum(1 for w in workers if w == name or w.startswith(name + "/"))
        most = max(most, inside)
    return most


def _scheduled(failures: ResolvedFailures | None) -> list[ScheduledFailure]:
    if failures is None:
        return []
    found = []
    for f in (*failures.scheduled_devices, *failures.scheduled_links):
        if stops_in_simulation(f):
            wait = 0.0 if math.isinf(f.repair_s) else f.repair_s
            found.append(ScheduledFailure(f.path, f.at_s, wait, True))
    return found


def _seed(scenario: Any, failures: ResolvedFailures | None) -> int:
    """The Monte Carlo's seed: from the scenario's and each random entry's seed."""
    seeds = [scenario.seed] + [p.seed for p in (failures.random if failures else ())]
    return zlib.crc32(",".join(map(str, seeds)).encode())


def _summary(
    result: Any,
    job: TrainingJob,
    pause_s: float,
    contention_s: float,
    best_s: float | None,
    best_every: int | None,
) -> GoodputSummary:
    def finite(x: float | None) -> float | None:
        return None if x is None or math.isinf(x) else x

    return GoodputSummary(
        goodput=result.goodput,
        expected_time_to_train_s=result.expected_time_to_train_s,
        expected_time_to_train_stderr_s=result.expected_time_to_train_stderr_s,
        ideal_time_to_train_s=result.ideal_time_to_train_s,
        iterations_to_train=job.iterations,
        time_lost_s=dict(result.time_lost_s),
        time_lost_by_cause_s=dict(result.time_lost_by_cause_s),
        interruptions=dict(result.interruptions),
        checkpoints=result.checkpoints,
        checkpoint_interval_s=result.checkpoint_interval_s,
        checkpoint_every=job.checkpoint_every,
        checkpoint_blocking_s=pause_s,
        checkpoint_drain_s=job.checkpoint_drain_s,
        checkpoint_contention_s=contention_s,
        restart_s=job.restart_s,
        best_checkpoint_interval_s=finite(best_s),
        best_checkpoint_every=best_every,
        job_mtbf_s=finite(result.job_mtbf_s),
        young_daly_interval_s=finite(result.young_daly_interval_s),
        goodput_samples=result.samples,
    )
