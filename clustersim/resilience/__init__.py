"""Checkpoints, the job's length and its goodput under failures, priced.

The failures themselves, resolved against the cluster (:func:`resolve_failures`) and played
by a simulation, are the topology's (:mod:`clustersim.topology.failures`): a strategy that
runs them needs nothing of this package, which stands above the strategies.

* :mod:`.checkpoint` -- :func:`checkpoint_cost`: a checkpoint written over the cluster's
  network, simulated (blocking and background drain seconds);
* :mod:`.length` -- :func:`job_length`: the job's length from ``training.iterations``,
  ``duration`` or ``tokens`` (:func:`iterations_for` the iterations that train on a number
  of tokens, :func:`tokens_per_iteration` a scenario's tokens per iteration).
"""

from .checkpoint import (
    CheckpointCost,
    DrainSlowdown,
    checkpoint_bytes,
    checkpoint_cost,
    checkpoint_topology,
    drain_slowdown,
)
from .length import JobLength, iterations_for, job_length, tokens_per_iteration

__all__ = [
    "CheckpointCost",
    "DrainSlowdown",
    "checkpoint_bytes",
    "checkpoint_cost",
    "checkpoint_topology",
    "drain_slowdown",
    "JobLength",
    "iterations_for",
    "job_length",
    "tokens_per_iteration",
]
