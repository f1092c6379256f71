"""Goodput of a long training job under failures and checkpoints (issue 16).

A pure model (numpy and the standard library, no engine): the simulator measures
one iteration; this package advances weeks of training analytically from failure
to failure, over many sampled failure histories, and searches the checkpoint
interval.  See docs/goodput.md for the model, its assumptions and its validation.

* :mod:`.model` -- the inputs: :class:`FailureProcess`, :class:`ScheduledFailure`,
  :class:`TrainingJob`, and the closed forms :func:`young_daly_interval_s`,
  :func:`job_mtbf_s`;
* :mod:`.schedule` -- failure histories in wall-clock chunks, for all samples at once;
* :mod:`.replay` -- one history of the job, event to event (:func:`replay`);
* :mod:`.montecarlo` -- :func:`monte_carlo` and its :class:`GoodputResult`;
* :mod:`.search` -- :func:`best_checkpoint_interval`.
"""

from .model import (
    DISTRIBUTIONS,
    FailureProcess,
    ScheduledFailure,
    TrainingJob,
    job_mtbf_s,
    young_daly_interval_s,
)
from .montecarlo import GoodputResult, monte_carlo
from .replay import MAX_FAILURES, Replay, replay
from .schedule import sample_failure_times
from .search import Candidate, CheckpointSearch, best_checkpoint_interval

__all__ = [
    "DISTRIBUTIONS",
    "MAX_FAILURES",
    "Candidate",
    "CheckpointSearch",
    "FailureProcess",
    "GoodputResult",
    "Replay",
    "ScheduledFailure",
    "TrainingJob",
    "best_checkpoint_interval",
    "job_mtbf_s",
    "monte_carlo",
    "replay",
    "sample_failure_times",
    "young_daly_interval_s",
]
