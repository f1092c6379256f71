"""The goodput keys of a training run with failures, checkpoints or a long job length
(``failures:``, ``checkpoint:``, ``training.duration`` / ``tokens``): what the Monte Carlo
of :mod:`clustersim.goodput` predicts for the whole job, spliced into summary.json after
the strategy's keys.  Seconds throughout."""

from __future__ import annotations

from dataclasses import dataclass

from .parts import SummaryPart


@dataclass(frozen=True)
class GoodputSummary(SummaryPart):
    """The whole job under failures and checkpoints (issue 16's keys first)."""

    goodput: float
    """Useful time / wall time: ``ideal_time_to_train_s / expected_time_to_train_s``."""
    expected_time_to_train_s: float
    """Mean wall time to finish every iteration of the job, over the sampled histories."""
    expected_time_to_train_stderr_s: float
    """Standard error of that mean."""
    ideal_time_to_train_s: float
    """``iterations_to_train x iteration_time_s``: no failure, no checkpoint."""
    iterations_to_train: int
    """Iterations of the whole job (``training.iterations``, or from ``duration`` or
    ``tokens``)."""
    time_lost_s: dict[str, float]
    """Mean seconds lost by kind: ``failures`` (work redone since the last durable
    checkpoint), ``restarts``, ``checkpoints`` (training paused), ``degraded`` (running
    without failed workers, elastic)."""
    time_lost_by_cause_s: dict[str, float]
    """Mean seconds lost (work redone and time down) per failure entry."""
    interruptions: dict[str, float]
    """Mean number of job-stopping failures per failure entry."""
    checkpoints: float
    """Mean number of checkpoints written."""
    checkpoint_interval_s: float
    """Work seconds between checkpoints (``checkpoint.every`` in iterations x iteration time)."""
    checkpoint_every: int
    """Iterations between checkpoints."""
    checkpoint_blocking_s: float
    """Seconds training pauses for one checkpoint (simulated on the cluster's network)."""
    checkpoint_drain_s: float
    """Seconds an async checkpoint takes to reach storage after the pause, beside the
    training traffic (0: sync)."""
    checkpoint_contention_s: float
    """Seconds of work an async checkpoint's drain costs training by sharing its links:
    the drain's length x (1 - 1 / the iterations' slowdown while it runs), simulated."""
    restart_s: float
    """``recovery.restart_time``: from a failure until training runs again."""
    best_checkpoint_interval_s: float | None
    """The checkpoint interval with the least expected time to train (None: no failures
    to trade against)."""
    best_checkpoint_every: int | None
    """The same in iterations."""
    job_mtbf_s: float | None
    """Mean seconds between random job-stopping failures (None: none)."""
    young_daly_interval_s: float | None
    """``sqrt(2 x checkpoint_blocking_s x job_mtbf_s)``, for comparison (None: no failures)."""
    goodput_samples: int
    """Failure histories sampled (``recovery.samples``)."""
