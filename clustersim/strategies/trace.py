"""The ``trace`` workload: replay one rank's recorded trace on every simulated rank.

```yaml
workload:
  trace: traces/step.json      # relative to the scenario file
  format: auto                 # auto | kineto | chakra
  ranks: "rack0/*/gpu*"        # devices that replay it (default every GPU)
  algorithm: auto              # algorithm of the replayed collectives (NCCL's choice)
  compute_scale: 1.0           # replayed compute = recorded duration x this
  group: recorded              # recorded group sizes as rank blocks, or all: every rank
  order: recorded              # Kineto: recorded | streams (clustersim.workload_trace.kineto)
```

Every rank replays the same trace (SPMD, as ASTRA-sim does with one rank's trace
copied).  A compute op holds its rank's compute stream for its recorded duration
times ``compute_scale`` (all of a rank's compute streams share the device's one
stream, in the order their ops become ready).  A collective starts when its
dependencies have ended on every rank of its group; it runs as clustersim's
collective (``algorithm``, ``network.protocol``, the network model) over them.

Process groups: a collective whose recorded group size is absent or equals the number
of ranks runs over all of them; a group size k that divides the ranks runs as
ranks / k collectives over consecutive blocks of k ranks (ranks 0..k-1, k..2k-1, ...,
in device order); any other size is refused.  ``group: all`` runs every collective over
all the ranks, whatever size was recorded (a trace of 8 ranks replayed on 64 as if
recorded there).
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import simpy
from pydantic import BaseModel, ConfigDict, Field

from ..budget import WorkEstimate
from ..collectives import CollectiveCall, check_call, run_collective
from ..collectives.work import call_work
from ..engine import Simulation
from ..errors import Problem, ScenarioError, SimulationError
from ..metrics import StrategySummary, SummaryPart
from ..scenario import Float, Glob
from ..scenario.training import AlgorithmName
from ..workload_trace import FORMATS, TraceOp, WorkloadTrace, load_trace
from .base import Strategy


class TraceWorkload(BaseModel):
    """``workload: {trace: FILE, ...}``."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    trace: str = Field(
        min_length=1, description="trace file (Kineto or Chakra JSON), relative to the scenario"
    )
    format: Literal[FORMATS] = Field(  # type: ignore[valid-type]  (the readers' names)
        "auto", description="trace format; auto reads it from the file's keys"
    )
    ranks: Glob | None = Field(
        None, description="glob over device names that replay the trace (default: every GPU)"
    )
    algorithm: AlgorithmName = Field(
        "auto", description="algorithm of the replayed collectives (auto: NCCL's choice)"
    )
    compute_scale: Float = Field(
        1.0, ge=1e-6, le=1e6, description="replayed compute time = recorded duration x this"
    )
    group: Literal["recorded", "all"] = Field(
        "recorded",
        description="collective groups: the recorded group sizes as rank blocks, or all ranks",
    )
    order: Literal["recorded", "streams"] = Field(
        "recorded", description="Kineto dependencies: streams alone, or also the recorded order"
    )


def _base_dir(source: str) -> Path:
    """The folder of the scenario file ``source`` names (``a.yaml with --set ...`` too);
    the working directory for a scenario not read from a file."""
    for candidate in (source, source.split(" with --set ", 1)[0]):
        if candidate and Path(candidate).is_file():
            return Path(candidate).parent
    return Path()


def anchor_trace_paths(doc: dict[str, Any], source: str) -> dict[str, Any]:
    """``doc`` with each relative ``workload.trace`` (top level and in ``jobs``) made
    absolute from the folder of the scenario file ``source``: what
    ``scenario.resolved.yaml`` holds, so that it runs from its own folder too."""
    base = _base_dir(source).resolve()

    def anchored(section: Any) -> Any:
        workload = section.get("workload") if isinstance(section, dict) else None
        trace = workload.get("trace") if isinstance(workload, dict) else None
        if not isinstance(trace, str) or not trace or Path(trace).is_absolute():
            return section
        return {**section, "workload": {**workload, "trace": str(base / trace)}}

    doc = anchored(doc)
    if isinstance(doc.get("jobs"), list):
        doc = {**doc, "jobs": [anchored(job) for job in doc["jobs"]]}
    return doc


@dataclass
class _Meeting:
    """Ranks of one collective group that have reached it, and its end event."""

    arrived: int
    done: simpy.Event


@dataclass(frozen=True)
class ReplayedCollective(SummaryPart):
    """One collective of a replayed trace: as recorded, and as simulated (seconds)."""

    op: str
    name: str
    """The kernel's or node's name in the trace."""
    bytes: float
    group_size: int
    groups: int
    """Collectives it ran as (ranks / group_size blocks)."""
    start_s: float
    end_s: float
    time_s: float
    """Simulated seconds, mean over its groups."""
    trace_time_s: float
    """Its duration in the trace."""


@dataclass(frozen=True)
class TraceSummary(StrategySummary):
    """A replayed trace: its own span and compute next to the simulated ones."""

    name = "trace"
    description = "trace_span_s vs makespan_s, compute and communication, each collective"

    trace: str
    format: str
    ranks: int
    ops: int
    trace_span_s: float
    """The recorded rank's span (compare with makespan_s)."""
    trace_compute_s: float
    compute_s: float
    """Replayed compute per rank: trace_compute_s x compute_scale."""
    trace_communication_s: float
    communication_s: float
    """Simulated collective seconds, summed over the collectives."""
    collectives: dict[str, ReplayedCollective]


class TraceReplay(Strategy):
    """Replay a Kineto or Chakra trace of one rank on every rank (SPMD)."""

    name = "trace"
    description = "replay one rank's Kineto or Chakra JSON trace on every rank"
    config_model = TraceWorkload

    def check(self) -> None:
        """Trace readable, ranks found, every collective's groups valid for its algorithm."""
        cfg = self.config
        path = _base_dir(self.scenario.source) / cfg.trace
        self.workload_trace: WorkloadTrace = load_trace(
            path, cfg.format, "workload.trace", cfg.order
        )
        self.ranks = self.devices_of(cfg.ranks, "workload.ranks")
        self.calls: dict[str, list[CollectiveCall]] = {
            op.id: self._calls(op) for op in self.workload_trace.collectives
        }

    def _calls(self, op: TraceOp) -> list[CollectiveCall]:
        """The calls of collective ``op``: one per block of its group size (module docstring)."""
        n = len(self.ranks)
        recorded = op.group_size if self.config.group == "recorded" else None
        k = recorded or n
        if n % k or k < 1:
            raise ScenarioError(
                Problem(
                    "workload.trace",
                    f"{self.workload_trace.path}: collective {op.id} ({op.name}) has a process "
                    f"group of {k} ranks, which does not divide the {n} ranks replaying it",
                    "workload.ranks matching a multiple of every group size, or group: all",
                )
            )
        protocol = self.scenario.network.protocol
        calls = []
        for start in range(0, n, k):
            call = CollectiveCall(
                op.op,
                self.ranks[start : start + k],
                op.size_bytes,
                algorithm=self.config.algorithm,
                protocol=protocol,
            )
            if k > 1:
                check_call(call, self.topology, "workload.algorithm")
            calls.append(call)
        return calls

    @property
    def model(self) -> str:
        """``flow`` or ``analytical``, from the scenario's ``network.model``."""
        return self.scenario.network.model

    def estimate_work(self) -> WorkEstimate:
        """A record per compute op per rank, and each collective's calls' work."""
        channels = self.scenario.network.channels
        work = WorkEstimate(records=float(len(self.workload_trace.ops) * len(self.ranks)))
        for calls in self.calls.values():
            for call in calls:
                work += call_work(call, self.topology, model=self.model, channels=channels)
        return work

    def describe(self) -> str:
        t = self.workload_trace
        return (
            f"{t.format} trace of {len(t.ops)} ops ({len(t.collectives)} collectives) "
            f"replayed on {len(self.ranks)} ranks"
        )

    def start(self, sim: Simulation) -> None:
        self.times: dict[str, list[tuple[float, float]]] = {}
        self._meetings: dict[tuple[str, int], _Meeting] = {}
        for rank, device in enumerate(self.ranks):
            done: dict[str, simpy.Event] = {}
            for op in self.workload_trace.ops:
                deps = [done[d] for d in op.after]
                done[op.id] = sim.process(self._run(sim, rank, device, op, deps))

    def _run(
        self, sim: Simulation, rank: int, device: str, op: TraceOp, deps: list[simpy.Event]
    ) -> Generator[Any, Any, None]:
        if deps:
            yield sim.all_of(deps)
        if op.kind == "compute":
            seconds = op.duration_s * self.config.compute_scale
            yield sim.compute(device, seconds=seconds, label=op.name, op=op.id)
            return
        calls = self.calls[op.id]
        block = rank // calls[0].n
        meeting = self._meetings.setdefault((op.id, block), _Meeting(0, sim.env.event()))
        meeting.arrived += 1
        if meeting.arrived == calls[block].n:
            sim.process(self._collective(sim, op, calls[block], meeting.done))
        yield meeting.done

    def _collective(
        self, sim: Simulation, op: TraceOp, call: CollectiveCall, done: simpy.Event
    ) -> Generator[Any, Any, None]:
        start = sim.now
        if call.n > 1:
            yield run_collective(
                sim,
                call,
                model=self.model,
                label=f"{call.op}/{call.algorithm}",
                channels=self.scenario.network.channels,
            )
        self.times.setdefault(op.id, []).append((start, sim.now))
        done.succeed()

    def summarize(self, sim: Simulation) -> TraceSummary:
        """The trace's own span and compute against the replay's, and each collective."""
        t = self.workload_trace
        collectives = {}
        for op in t.collectives:
            times = self.times.get(op.id, [])
            if len(times) != len(self.calls[op.id]):
                raise SimulationError(f"collective {op.id} ({op.name}) never finished")
            collectives[op.id] = ReplayedCollective(
                op=op.op,
                name=op.name,
                bytes=op.size_bytes,
                group_size=self.calls[op.id][0].n,
                groups=len(times),
                start_s=min(s for s, _ in times),
                end_s=max(e for _, e in times),
                time_s=sum(e - s for s, e in times) / len(times),
                trace_time_s=op.duration_s,
            )
        return TraceSummary(
            trace=self.config.trace,
            format=t.format,
            ranks=len(self.ranks),
            ops=len(t.ops),
            trace_span_s=t.span_s,
            trace_compute_s=t.compute_s,
            compute_s=t.compute_s * self.config.compute_scale,
            trace_communication_s=sum(op.duration_s for op in t.collectives),
            communication_s=sum(c.time_s for c in collectives.values()),
            collectives=collectives,
        )
