"""A seeded Monte Carlo over failure histories: expected time to train and goodput.

``monte_carlo`` draws ``samples`` failure histories with
``numpy.random.default_rng(seed)`` (all samples at once, chunk by chunk: see
:mod:`.schedule`) and replays the job through each (:mod:`.replay`).  Same inputs and
seed give the same floats.  The figures are means over the samples; the goodput is
the ratio of the useful time to the *expected* time to train (a ratio of means).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import Problem, ScenarioError
from .model import FailureProcess, ScheduledFailure, TrainingJob, job_mtbf_s, young_daly_interval_s
from .replay import LOST_PARTS, MAX_FAILURES, run_histories, summarise

Progress = Callable[[int, int], None]
"""``progress(done, total)``: samples (or candidates, in a search) done so far."""


@dataclass(frozen=True)
class GoodputResult:
    """What a Monte Carlo over failure histories predicts for one job (seconds)."""

    expected_time_to_train_s: float
    """Mean wall time from the start until the last iteration ends."""
    expected_time_to_train_stderr_s: float
    """Standard error of that mean (sample standard deviation / sqrt(samples))."""
    ideal_time_to_train_s: float
    """``iterations * iteration_s``: the useful time, no checkpoint, no failure."""
    goodput: float
    """``ideal_time_to_train_s / expected_time_to_train_s`` (useful iterations x
    iteration_s / wall time), in (0, 1]."""
    time_lost_s: dict[str, float]
    """Mean seconds lost, by kind: ``failures`` (work redone since the last durable
    checkpoint), ``restarts`` (down), ``checkpoints`` (paused), ``degraded`` (extra time
    running slowed down).  ``ideal + sum(time_lost_s) == expected_time_to_train_s``."""
    time_lost_by_cause_s: dict[str, float]
    """Mean seconds lost per failure cause: work redone plus time down after its
    interruptions (a part of ``failures + restarts``)."""
    interruptions: dict[str, float]
    """Mean number of job-stopping failures per cause."""
    checkpoints: float
    """Mean number of checkpoint pauses begun."""
    checkpoint_interval_s: float
    """Work seconds between checkpoints: ``checkpoint_every * iteration_s``."""
    job_mtbf_s: float
    """Mean seconds between random job-stopping failures (:func:`job_mtbf_s`)."""
    young_daly_interval_s: float
    """``sqrt(2 * checkpoint_blocking_s * job_mtbf_s)``, for comparison."""
    samples: int
    seed: int
    best_checkpoint_interval_s: float | None = None
    """Set by :func:`~clustersim.goodput.search.best_checkpoint_interval` (``None``
    otherwise); ``dataclasses.replace(result, best_checkpoint_interval_s=...)`` adds it."""
    best_checkpoint_every: int | None = None
    """The same in iterations."""

    def as_dict(self) -> dict[str, Any]:
        """The keys summary.json carries (issue 16's names; infinities become None)."""

        def finite(x: float | None) -> float | None:
            return None if x is None or math.isinf(x) else x

        return {
            "goodput": self.goodput,
            "expected_time_to_train_s": self.expected_time_to_train_s,
            "expected_time_to_train_stderr_s": self.expected_time_to_train_stderr_s,
            "ideal_time_to_train_s": self.ideal_time_to_train_s,
            "time_lost_s": dict(self.time_lost_s),
            "time_lost_by_cause_s": dict(self.time_lost_by_cause_s),
            "interruptions": dict(self.interruptions),
            "checkpoints": self.checkpoints,
            "checkpoint_interval_s": self.checkpoint_interval_s,
            "best_checkpoint_interval_s": finite(self.best_checkpoint_interval_s),
            "best_checkpoint_every": self.best_checkpoint_every,
            "job_mtbf_s": finite(self.job_mtbf_s),
            "young_daly_interval_s": finite(self.young_daly_interval_s),
            "samples": self.samples,
            "seed": self.seed,
        }


def check_samples(samples: object, seed: object) -> None:
    """``samples`` >= 1 and ``seed`` >= 0 are whole numbers, or a ScenarioError."""
    for path, value, low in (("samples", samples, 1), ("seed", seed, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ScenarioError(
                Problem(
                    path, f"must be a whole number >= {low}, got {value!r}", f"an integer >= {low}"
                )
            )


def monte_carlo(
    job: TrainingJob,
    failures: Sequence[FailureProcess],
    scheduled: Sequence[ScheduledFailure] = (),
    *,
    samples: int = 1000,
    seed: int = 0,
    progress: Progress | None = None,
    max_failures: int = MAX_FAILURES,
) -> GoodputResult:
    """Expected time to train ``job`` under ``failures`` (random) and ``scheduled`` (fixed),
    over ``samples`` failure histories drawn from ``numpy.random.default_rng(seed)``.

    ``progress(done, samples)`` is called as samples finish (about 100 times).  Raises
    :class:`~clustersim.errors.SimulationError` when the job cannot make progress (more
    than ``max_failures`` job-stopping failures in a sample, or that many expected).
    """
    check_samples(samples, seed)
    rng = np.random.default_rng(seed)
    histories, causes = run_histories(
        job, failures, scheduled, samples, rng, progress, max_failures
    )
    wall = np.array([h.t for h in histories])
    lost = [summarise(h, job.useful_s) for h in histories]
    mtbf = job_mtbf_s(failures)
    mean = float(wall.mean())
    return GoodputResult(
        expected_time_to_train_s=mean,
        expected_time_to_train_stderr_s=_stderr(wall),
        ideal_time_to_train_s=job.useful_s,
        goodput=job.useful_s / mean,
        time_lost_s={k: float(np.mean([x[k] for x in lost])) for k in LOST_PARTS},
        time_lost_by_cause_s={
            c: float(np.mean([h.lost_by_cause[i] for h in histories])) for i, c in enumerate(causes)
        },
        interruptions={
            c: float(np.mean([h.interruptions[i] for h in histories])) for i, c in enumerate(causes)
        },
        checkpoints=float(np.mean([h.checkpoints for h in histories])),
        checkpoint_interval_s=job.checkpoint_interval_s,
        job_mtbf_s=mtbf,
        young_daly_interval_s=young_daly_interval_s(job.checkpoint_blocking_s, mtbf),
        samples=samples,
        seed=seed,
    )


def _stderr(values: np.ndarray) -> float:
    if values.size < 2:
        return 0.0
    return float(values.std(ddof=1) / math.sqrt(values.size))
