"""Failures, recovery and checkpoints of a training job, resolved and priced.

* :mod:`.failures` -- :func:`resolve_failures`: the ``failures:`` and ``recovery:`` sections
  as plain lists (component names, link indices, seconds) for the engine and goodput model;
* :mod:`.checkpoint` -- :func:`checkpoint_cost`: a checkpoint written over the cluster's
  network, simulated (blocking and background drain seconds);
* :mod:`.length` -- :func:`job_length`: the job's length from ``training.iterations``,
  ``duration`` or ``tokens``.
"""

from .checkpoint import (
    CheckpointCost,
    DrainSlowdown,
    checkpoint_bytes,
    checkpoint_cost,
    checkpoint_topology,
    drain_slowdown,
)
from .failures import (
    Component,
    RandomFailureProcess,
    ResolvedFailures,
    ScheduledComponentFailure,
    ScheduledLinkFailureResolved,
    resolve_failures,
)
from .length import JobLength, job_length

__all__ = [
    "CheckpointCost",
    "DrainSlowdown",
    "checkpoint_bytes",
    "checkpoint_cost",
    "checkpoint_topology",
    "drain_slowdown",
    "Component",
    "JobLength",
    "RandomFailureProcess",
    "ResolvedFailures",
    "ScheduledComponentFailure",
    "ScheduledLinkFailureResolved",
    "job_length",
    "resolve_failures",
]
