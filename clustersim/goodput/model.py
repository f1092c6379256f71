"""The inputs of the goodput model: failure processes, scheduled failures, the job.

Every input validates itself when built and refuses a bad value with a
:class:`~clustersim.errors.ScenarioError` whose key path is the field name
(``mtbf_s``, ``checkpoint_every``); a caller that knows where the value came from
adds its prefix with :meth:`ScenarioError.prefixed` (``failures[2]``).

Units are seconds throughout.  Progress is counted in *work seconds*: one
iteration is ``iteration_s`` work seconds, whatever the wall time it took.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import Problem, ScenarioError

DISTRIBUTIONS = ("exponential", "weibull")
"""Distributions of the time between two failures of one component."""


def _problem(path: str, message: str, allowed: str = "") -> ScenarioError:
    return ScenarioError(Problem(path, message, allowed))


def _number(path: str, value: object, *, low: float, strict: bool, allow_inf: bool = False) -> None:
    """``value`` is a real number (not a bool), at least (or above, ``strict``) ``low``."""
    bound = f"> {low:g}" if strict else f">= {low:g}"
    finite = "" if allow_inf else "finite "
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _problem(path, f"must be a number, got {value!r}", f"a {finite}number {bound}")
    if math.isnan(value) or (math.isinf(value) and not allow_inf):
        raise _problem(path, f"must be a finite number, got {value!r}", f"a number {bound}")
    if value < low or (strict and value == low):
        raise _problem(path, f"must be {bound}, got {value!r}", f"a {finite}number {bound}")


def _integer(path: str, value: object, *, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _problem(path, f"must be a whole number, got {value!r}", f"an integer >= {low}")
    if value < low:
        raise _problem(path, f"must be at least {low}, got {value}", f"an integer >= {low}")


def _label(path: str, value: object) -> None:
    if not isinstance(value, str) or not value:
        raise _problem(path, f"must be a non-empty label, got {value!r}", "a text such as 'gpu'")


@dataclass(frozen=True)
class FailureProcess:
    """One class of component failing at random, each component on its own.

    Each of ``components`` components fails after a random lifetime (mean
    ``mtbf_s`` seconds, exponential or Weibull) and is then replaced by a new one
    whose lifetime starts at once (``stops_job``) or after ``repair_s``: a renewal
    process per component, all components new at the start of the job.  The
    failures of the job are the superposition of them all; for exponential
    lifetimes that is a Poisson process of rate ``components / mtbf_s``.
    """

    cause: str
    """Label of these failures in ``time_lost_by_cause_s`` and ``interruptions`` (``"gpu"``)."""
    components: int
    """How many such components the job uses (>= 1)."""
    mtbf_s: float
    """Mean time between failures of ONE component, seconds (> 0)."""
    distribution: str = "exponential"
    """``"exponential"`` or ``"weibull"``."""
    shape: float = 1.0
    """Weibull shape k (> 0; 1 is exponential, < 1 infant mortality, > 1 wear-out).  The
    scale is chosen so that the mean lifetime is ``mtbf_s``.  Ignored for exponential."""
    stops_job: bool = True
    """True: a failure interrupts the job (restart from the last durable checkpoint).
    False: the job runs on without the component, ``elastic_slowdown`` times slower per
    component down, until it is back ``repair_s`` later (elastic data parallelism, a
    parameter-server backup)."""
    repair_s: float = 0.0
    """Seconds until the component is back.  Matters only when ``stops_job`` is False: a
    job-stopping failure restarts on spare hardware (``TrainingJob.restart_s``)."""

    def __post_init__(self) -> None:
        _label("cause", self.cause)
        _integer("components", self.components, low=1)
        _number("mtbf_s", self.mtbf_s, low=0.0, strict=True)
        if self.distribution not in DISTRIBUTIONS:
            raise _problem(
                "distribution",
                f"unknown distribution {self.distribution!r}",
                ", ".join(DISTRIBUTIONS),
            )
        _number("shape", self.shape, low=0.0, strict=True)
        if not isinstance(self.stops_job, bool):
            raise _problem("stops_job", f"must be true or false, got {self.stops_job!r}")
        _number("repair_s", self.repair_s, low=0.0, strict=False)

    @property
    def weibull_shape(self) -> float:
        """The Weibull shape k of the lifetimes (1 for exponential)."""
        return 1.0 if self.distribution == "exponential" else float(self.shape)

    @property
    def weibull_scale_s(self) -> float:
        """Weibull scale, seconds: ``mtbf_s / Gamma(1 + 1/k)``, so the mean is ``mtbf_s``."""
        return self.mtbf_s / math.gamma(1.0 + 1.0 / self.weibull_shape)

    @property
    def rate_per_s(self) -> float:
        """Long-run failures per second of all the components: ``components / mtbf_s``
        (renewal theorem; exact at every time for exponential lifetimes)."""
        return self.components / self.mtbf_s


@dataclass(frozen=True)
class ScheduledFailure:
    """A failure at a fixed wall-clock time, the same in every sample (planned
    maintenance, a firmware upgrade, a known outage)."""

    cause: str
    """Label in ``interruptions`` and ``time_lost_by_cause_s`` (``"maintenance"``)."""
    at_s: float
    """Seconds of wall-clock time from the start of the job (>= 0)."""
    repair_s: float = 0.0
    """Seconds the hardware is away.  When ``stops_job``: the job waits this long before
    its restart begins (the maintenance window; counted under ``restarts``).  Otherwise
    the job runs ``elastic_slowdown`` times slower for this long."""
    stops_job: bool = True
    """Whether the job stops (see :attr:`FailureProcess.stops_job`)."""

    def __post_init__(self) -> None:
        _label("cause", self.cause)
        _number("at_s", self.at_s, low=0.0, strict=False)
        _number("repair_s", self.repair_s, low=0.0, strict=False)
        if not isinstance(self.stops_job, bool):
            raise _problem("stops_job", f"must be true or false, got {self.stops_job!r}")


@dataclass(frozen=True)
class TrainingJob:
    """The job: how much work, how often it checkpoints, what a restart costs.

    The work is ``iterations`` iterations of ``iteration_s`` seconds each (the time the
    simulator measured for one iteration).  A checkpoint is taken after every
    ``checkpoint_every`` iterations, except after the last one (the job is then done):
    ``(iterations - 1) // checkpoint_every`` checkpoints.  Each pauses training for
    ``checkpoint_blocking_s`` seconds and becomes durable ``checkpoint_drain_s`` seconds
    after the pause ends, while the next iterations already run (asynchronous
    checkpointing).  A checkpoint is never started while the previous one still drains:
    training then waits (counted as checkpoint time).
    """

    iteration_s: float
    """Seconds of one iteration (> 0), as simulated."""
    iterations: int
    """Iterations to train (>= 1), from the training duration or token count."""
    checkpoint_every: int
    """Iterations between checkpoints (>= 1); ``>= iterations`` means no checkpoint."""
    checkpoint_blocking_s: float
    """Seconds training pauses per checkpoint (>= 0)."""
    checkpoint_drain_s: float = 0.0
    """Seconds after the pause until the checkpoint is durable (>= 0); a job-stopping
    failure before then rolls back to the checkpoint before it."""
    restart_s: float = 0.0
    """Seconds from a job-stopping failure to training again: detection, rescheduling,
    loading the checkpoint, warm-up (>= 0).  A failure during a restart starts it again."""
    elastic_slowdown: float = 1.0
    """Multiplier (>= 1) of the iteration time per component down while the job runs
    without failed components (``stops_job`` False): with d down it is
    ``elastic_slowdown ** d`` (``n / (n - 1)`` for elastic data parallelism over n replicas
    gives about ``n / (n - d)``)."""

    def __post_init__(self) -> None:
        _number("iteration_s", self.iteration_s, low=0.0, strict=True)
        _integer("iterations", self.iterations, low=1)
        _integer("checkpoint_every", self.checkpoint_every, low=1)
        _number("checkpoint_blocking_s", self.checkpoint_blocking_s, low=0.0, strict=False)
        _number("checkpoint_drain_s", self.checkpoint_drain_s, low=0.0, strict=False)
        _number("restart_s", self.restart_s, low=0.0, strict=False)
        _number("elastic_slowdown", self.elastic_slowdown, low=1.0, strict=False)

    @property
    def useful_s(self) -> float:
        """Seconds of useful training: ``iterations * iteration_s``."""
        return self.iterations * self.iteration_s

    @property
    def checkpoints(self) -> int:
        """Checkpoints of a run without failures: ``(iterations - 1) // checkpoint_every``."""
        return (self.iterations - 1) // self.checkpoint_every

    @property
    def checkpoint_interval_s(self) -> float:
        """Work seconds between two checkpoints: ``checkpoint_every * iteration_s``."""
        return self.checkpoint_every * self.iteration_s


def young_daly_interval_s(checkpoint_s: float, mtbf_s: float) -> float:
    """Young's optimum time between checkpoints, seconds: ``sqrt(2 * checkpoint_s * mtbf_s)``
    (Young 1974; Daly 2006 to first order), for a checkpoint costing ``checkpoint_s``
    seconds and job-level failures ``mtbf_s`` seconds apart on average.  Infinite when
    ``mtbf_s`` is (never checkpoint); 0 when a checkpoint costs nothing."""
    _number("checkpoint_s", checkpoint_s, low=0.0, strict=False)
    _number("mtbf_s", mtbf_s, low=0.0, strict=True, allow_inf=True)
    if math.isinf(mtbf_s):
        return math.inf
    return math.sqrt(2.0 * checkpoint_s * mtbf_s)


def job_mtbf_s(failures: Sequence[FailureProcess]) -> float:
    """Mean seconds between job-stopping failures of all ``failures`` together:
    ``1 / sum(components / mtbf_s)`` over those with ``stops_job`` (long-run rate for
    Weibull lifetimes); infinite when none stops the job.  Scheduled failures are not
    counted (they are not random)."""
    rate = sum(f.rate_per_s for f in failures if f.stops_job)
    return math.inf if rate == 0 else 1.0 / rate
