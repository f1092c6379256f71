"""Several jobs on one cluster: :class:`JobsStrategy`, what runs a ``jobs:`` scenario.

Each job is a single-job scenario of its own (:meth:`Scenario.job_scenario`) whose
strategy is checked against a view of the cluster holding only the job's devices
(:mod:`.placement`), so it places its ranks there; all jobs run in one simulation and
their flows share the links.  A job with ``start`` > 0 starts its strategy then.

The summary gives each job's part as a single-job run of it gives it, and its slowdown:
its time sharing the cluster over its time alone, the alone time measured by running the
job alone on the same cluster (same engine, stragglers, seed and start), after the
shared run.  The work estimate is the jobs' summed twice (the shared run and the alone
runs).
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from ...budget import WorkEstimate
from ...engine import Simulation
from ...errors import ScenarioError, join_path
from ...metrics import StrategySummary, UntypedSummary
from ...model.memory import with_settings
from ...topology.failures import play_link_failures, resolve_failures
from ..base import Strategy, strategy_for_scenario
from .placement import job_devices
from .summary import JobsSummary, JobSummary
from .view import JobSimulation


@dataclass
class Job:
    """One job: its spec, devices, single-job scenario, cluster view and strategy."""

    index: int
    spec: Any
    devices: list[str]
    scenario: Any
    view: Any
    strategy: Strategy
    sim: JobSimulation | None = None


def job_strategy(scenario: Any, index: int, view: Any) -> Strategy:
    """The checked strategy of ``scenario.jobs[index]`` on ``view``; its errors' key paths
    start with ``jobs[index]``."""
    single = scenario.job_scenario(index)
    try:
        return strategy_for_scenario(single).from_scenario(single, view)
    except ScenarioError as exc:
        raise exc.prefixed(join_path("jobs", index)).with_source(scenario.source) from None


class JobsStrategy(Strategy):
    """The jobs of a ``jobs:`` scenario, sharing one cluster (see the module docstring).

    A scenario's ``jobs`` section selects it (:attr:`Strategy.section`), never a workload
    key."""

    name = "jobs"
    section = "jobs"
    description = "several jobs sharing one cluster"

    def __init__(self, scenario: Any, topology: Any, jobs: list[Job]) -> None:
        super().__init__(None, scenario, topology)  # type: ignore[arg-type]
        self.name = "jobs"  # type: ignore[misc]  (an instance name: not in the registry)
        self.jobs = jobs

    @classmethod
    def from_scenario(cls, scenario: Any, topology: Any) -> JobsStrategy:
        """Place the jobs, check each job's strategy on its view, enforce the work limit."""
        try:
            placed = job_devices(scenario, topology)
        except ScenarioError as exc:
            raise exc.with_source(scenario.source) from None
        jobs = []
        for i, devices in enumerate(placed):
            view = topology.restricted(devices)
            strategy = job_strategy(scenario, i, view)
            jobs.append(Job(i, scenario.jobs[i], devices, scenario.job_scenario(i), view, strategy))
        self = cls(scenario, topology, jobs)
        self.enforce_work_limit()
        return self

    def take_link_failures(self, failures: Any) -> None:
        """Every job's strategy's check of the links going down (a job of one replica for
        all refuses them), its errors' key paths under ``jobs[index]``."""
        for job in self.jobs:
            try:
                job.strategy.take_link_failures(failures)
            except ScenarioError as exc:
                raise exc.prefixed(join_path("jobs", job.index)) from None

    def estimate_work(self) -> WorkEstimate | None:
        """The jobs' estimates, summed, twice: the shared run and each job's alone run."""
        total = WorkEstimate()
        for job in self.jobs:
            work = job.strategy.enforce_work_limit()
            if work is not None:
                total = total + work
        return total * 2

    def memory_plan(self) -> dict[str, Any] | None:
        """Every job's devices' memory (the jobs own disjoint devices)."""
        plans: dict[str, Any] = {}
        for job in self.jobs:
            plan = getattr(job.strategy, "memory_plan", lambda: None)()
            training = getattr(job.scenario, "training", None)
            if plan and training is not None:
                plan = with_settings(plan, training.memory)
            plans.update(plan or {})
        return plans or None

    def describe(self) -> str:
        parts = [
            f"{job.spec.name}: {job.strategy.describe()} on {len(job.devices)} device(s)"
            + (f" from {job.spec.start_s:g} s" if job.spec.start_s else "")
            for job in self.jobs
        ]
        return f"{len(self.jobs)} jobs sharing the cluster -- " + "; ".join(parts)

    # -- running -------------------------------------------------------------

    def start(self, sim: Simulation) -> None:
        for job in self.jobs:
            start_job(sim, job)

    def summarize(self, sim: Simulation) -> JobsSummary:
        """Each job's part, then its slowdown against a run of it alone."""
        jobs = {}
        for job in self.jobs:
            assert job.sim is not None
            part = job.strategy.summarize(job.sim)  # type: ignore[arg-type]
            shared_s = job.sim.job_time_s()
            alone_s = self.alone_time_s(job)
            jobs[job.spec.name] = JobSummary(
                workload=job.strategy.name,
                part=part if isinstance(part, StrategySummary) else UntypedSummary(dict(part)),
                job_devices=list(job.devices),
                start_s=job.spec.start_s,
                job_time_s=shared_s,
                alone_time_s=alone_s,
                slowdown=shared_s / alone_s if alone_s > 0 else 1.0,
            )
        worst = max(j.slowdown for j in jobs.values())
        return JobsSummary(max_slowdown=worst, jobs=jobs)

    def alone_time_s(self, job: Job) -> float:
        """The job's time run alone on the cluster (a fresh strategy, a fresh simulation,
        the scenario's link failures played in it too)."""
        alone = Job(
            job.index,
            job.spec,
            job.devices,
            job.scenario,
            job.view,
            job_strategy(self.scenario, job.index, job.view),
        )
        sim = Simulation.from_scenario(self.scenario, self.topology)
        if self.scenario.failures:
            # The same link failures as the shared run: the slowdown is the sharing's alone.
            failures = resolve_failures(self.scenario, self.topology)
            play_link_failures(sim, failures)
        start_job(sim, alone)
        sim.run()
        assert alone.sim is not None
        alone.strategy.summarize(alone.sim)  # type: ignore[arg-type]  (raises if unfinished)
        return alone.sim.job_time_s()


def start_job(sim: Simulation, job: Job) -> None:
    """Start ``job`` on ``sim``: now, or at its ``start`` time."""
    job.sim = JobSimulation(sim, job.view, job.spec.start_s)
    if not job.spec.start_s:
        job.strategy.start(job.sim)  # type: ignore[arg-type]
    else:
        sim.process(_later(sim, job))


def _later(sim: Simulation, job: Job) -> Generator[Any, Any, None]:
    yield sim.timeout(job.spec.start_s, f"the start of job {job.spec.name}")
    assert job.sim is not None
    job.strategy.start(job.sim)  # type: ignore[arg-type]
