"""The ``jobs:`` section: several workloads sharing one cluster.

Each job holds what a single-job scenario holds at its top level (``workload``, or
``model`` + ``training`` with ``data_parallel``, ``parallelism``, ``pipeline``, ``zero``),
a ``start`` time and where it runs: ``devices`` (a glob over full device names) or a
``placement`` policy (``packed``, ``spread`` or ``random``) with a count of ``gpus``.
The cluster, its stragglers, ``network`` and ``engine`` stay at the top level: the jobs
share them.  Nothing here knows about devices; :mod:`clustersim.strategies.jobs` places
the jobs and runs them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from clustersim.errors import Problem

from .fields import Count, Glob, Invalid, TimeSpan, _Spec, _unit
from .model import ModelSpec
from .training import (
    DataParallelSpec,
    ParallelismSpec,
    PipelineSpec,
    TrainingSpec,
    ZeroSpec,
)

PLACEMENTS = ("packed", "spread", "random")
"""Values of ``jobs[i].placement``: how a job's ``gpus`` are chosen among the free ones."""

JOB_SECTIONS = ("model", "training", "data_parallel", "parallelism", "pipeline", "zero", "workload")
"""The keys of a job that a single-job scenario holds at its top level."""


class JobSpec(_Spec):
    """One job: its name, start, devices (or placement) and what it runs."""

    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]
    """The job's name: its key under ``jobs`` in summary.json, its row prefix in the Gantt
    chart and its process in trace.json (letters, digits, ``_ . -``)."""
    start_s: TimeSpan = _unit("0", "start")
    """When the job starts, seconds of simulated time (its times are measured from it)."""
    devices: Glob | None = None
    """Which devices the job owns: a glob over full device names (GPUs and CPUs)."""
    placement: Literal["packed", "spread", "random"] | None = None
    """How the job's ``gpus`` are chosen among the GPUs no other job owns: ``packed`` (in
    build order: whole nodes, then racks), ``spread`` (one per rack in turn) or ``random``
    (seeded by the scenario's seed and the job's name)."""
    gpus: Count | None = None
    """How many GPUs ``placement`` gives the job."""
    model: ModelSpec | None = None
    """The model trained (training jobs)."""
    training: TrainingSpec | None = None
    """Batch, iterations, precision, optimizer (training jobs)."""
    data_parallel: DataParallelSpec | None = None
    """Gradient synchronisation (training jobs)."""
    parallelism: ParallelismSpec | None = None
    """dp x tp x pp split of the job's workers (training jobs)."""
    pipeline: PipelineSpec | None = None
    """Pipeline schedule (training jobs)."""
    zero: ZeroSpec | None = None
    """ZeRO stage (training jobs)."""
    workload: dict[str, Any] | None = Field(None, min_length=1)
    """What runs, for jobs that are not training (program, collective, trace)."""

    @model_validator(mode="after")
    def _where_and_what(self) -> JobSpec:
        problems = _where_problems(self) + _what_problems(self)
        if problems:
            raise Invalid(problems)
        return self

    def sections(self) -> dict[str, Any]:
        """The job's top-level sections, as a single-job scenario holds them."""
        return {key: getattr(self, key) for key in JOB_SECTIONS}


def _where_problems(job: JobSpec) -> list[Problem]:
    """``devices`` or ``placement`` with ``gpus``, not both."""
    if job.devices is not None and job.placement is not None:
        return [Problem("devices", "give devices or placement, not both")]
    if job.devices is None and job.placement is None:
        return [
            Problem(
                "devices",
                "required: where the job runs",
                "devices: GLOB, or placement: packed | spread | random with gpus: N",
            )
        ]
    if job.placement is not None and job.gpus is None:
        return [Problem("gpus", "required with placement: how many GPUs the job gets")]
    if job.placement is None and job.gpus is not None:
        return [Problem("gpus", "only with placement (devices already says which)")]
    return []


def _what_problems(job: JobSpec) -> list[Problem]:
    """``workload``, or ``model`` and ``training``: as at a scenario's top level."""
    given = [key for key in JOB_SECTIONS[:-1] if getattr(job, key) is not None]
    if job.workload is not None:
        if given:
            return [
                Problem(
                    "workload",
                    f"a job runs either a workload or training, not both (it also has {given[0]})",
                )
            ]
        return []
    missing = [key for key in ("model", "training") if getattr(job, key) is None]
    if len(missing) == 2:
        return [
            Problem(
                "",
                "nothing to run: give workload (program, collective, trace) or model and training",
                "workload: {...} or model: {...} with training: {...}",
            )
        ]
    return [Problem(missing[0], "required key missing for a training job")] if missing else []


def job_names_problems(jobs: list[JobSpec]) -> list[Problem]:
    """A problem at ``jobs[i].name`` for each name used by an earlier job."""
    seen: dict[str, int] = {}
    problems = []
    for i, job in enumerate(jobs):
        if job.name in seen:
            problems.append(
                Problem(
                    f"jobs[{i}].name", f"job name {job.name!r} is already jobs[{seen[job.name]}]"
                )
            )
        seen.setdefault(job.name, i)
    return problems
