"""How long the whole training job is: ``training.iterations``, ``duration`` or ``tokens``.

The run simulates ``training.iterations`` (a few); ``duration`` (wall-clock time of the job)
or ``tokens`` (the work it must do) give the job's length, which the goodput model reaches by
extrapolating from the simulated iterations, never by simulating them all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..errors import Problem, ScenarioError
from ..model.presets import build_model


@dataclass(frozen=True)
class JobLength:
    """The length of the training job: a number of iterations, or a wall-clock duration."""

    iterations: int | None
    """Iterations the job must complete (from ``tokens``, or ``iterations`` when neither
    ``duration`` nor ``tokens`` is given); None when the job runs for ``duration_s``."""
    duration_s: float | None
    """Wall-clock seconds the job runs (``training.duration``), or None."""
    tokens_per_iteration: float | None
    """global_batch x sequence length (transformer models), or None."""


def job_length(scenario: Any) -> JobLength:
    """The job length of a training scenario; ScenarioError at ``training.tokens`` when the
    model has no sequence length (not a transformer), naming the scenario's file."""
    training = scenario.training
    per_iteration = tokens_per_iteration(scenario)
    if training.duration_s is not None:
        return JobLength(None, training.duration_s, per_iteration)
    if training.tokens is None:
        return JobLength(training.iterations, None, per_iteration)
    if per_iteration is None:
        raise ScenarioError(
            Problem(
                "training.tokens",
                "tokens need a transformer model (its sequence length gives the tokens per sample)",
                "a transformer preset or model.transformer, or training.duration",
            ),
            scenario.source,
        )
    return JobLength(iterations_for(training.tokens, per_iteration), None, per_iteration)


def iterations_for(tokens: float, tokens_per_iteration: float) -> int:
    """Iterations that train on ``tokens``: ``ceil(tokens / tokens_per_iteration)`` (the last
    iteration runs whole)."""
    return math.ceil(tokens / tokens_per_iteration)


def tokens_per_iteration(scenario: Any) -> float | None:
    """Tokens one iteration of a training scenario trains on: global_batch x sequence length
    (transformer models), else None."""
    shape = build_model(scenario.model).transformer
    if shape is None:
        return None
    return float(scenario.training.global_batch) * float(shape.seq)
