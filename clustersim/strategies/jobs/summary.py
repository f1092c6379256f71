"""The summary part of a multi-job run (``jobs:``, :mod:`.strategy`): each job's own part and
its slowdown.

``jobs`` maps each job's name to a :class:`JobSummary`: ``workload`` (the job's
strategy), then that strategy's part exactly as a run of the job alone as a single-job
scenario gives it, then where and when it ran and what sharing cost it:
``job_devices``, ``start_s``, ``job_time_s`` (its first record's start to its last
record's end, measured from ``start_s``), ``alone_time_s`` (the same, the job run alone
on the same cluster by the same engine) and ``slowdown`` = ``job_time_s / alone_time_s``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...metrics import SPLICE, StrategySummary, SummaryPart
from ...metrics.parts import typed_value


@dataclass(frozen=True)
class JobSummary(SummaryPart):
    """One job of a multi-job run."""

    workload: str
    """The job's strategy (its registered name)."""
    part: StrategySummary = field(metadata=SPLICE)
    """The strategy's part, as a single-job run of the job gives it."""
    job_devices: list[str]
    """The devices the job owned (its glob's, or those its placement chose)."""
    start_s: float
    """When the job started, seconds."""
    job_time_s: float
    """From ``start_s`` to the end of the job's last record, seconds (sharing the cluster)."""
    alone_time_s: float
    """The same for the job run alone on the cluster, seconds."""
    slowdown: float
    """``job_time_s / alone_time_s`` (1 when the job ran no time alone)."""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], lenient: bool = False) -> JobSummary:
        part = StrategySummary.kind(data.get("workload")).from_dict(data, lenient)
        own = {k: data.get(k) for k in ("job_devices", "start_s", "job_time_s", "alone_time_s")}
        return cls(
            str(data.get("workload")),
            part,
            list(own["job_devices"] or []),
            own["start_s"],
            own["job_time_s"],
            own["alone_time_s"],
            data.get("slowdown"),  # type: ignore[arg-type]
        )


@dataclass(frozen=True)
class JobsSummary(StrategySummary):
    """Several jobs sharing one cluster."""

    name = "jobs"
    description = "max_slowdown, jobs: each job's own part, job_time_s, alone_time_s, slowdown"
    max_slowdown: float
    """The largest slowdown of the jobs."""
    jobs: dict[str, JobSummary]
    """Per job name, in the scenario's order."""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], lenient: bool = False) -> JobsSummary:
        jobs = typed_value(dict[str, JobSummary], data.get("jobs") or {}, lenient, "jobs")
        return cls(data.get("max_slowdown"), jobs)  # type: ignore[arg-type]

    def job_of_device(self) -> dict[str, str]:
        """The job each device ran (the devices of no job left out)."""
        return {d: name for name, job in self.jobs.items() for d in job.job_devices}
