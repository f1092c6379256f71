"""The ``trace`` workload: replay recorded traces, one rank's on every rank or each rank's own.

```yaml
workload:
  trace: traces/step.json      # relative to the scenario file; or trace.%d.json, or a folder
  format: auto                 # auto | kineto | chakra
  ranks: "rack0/*/gpu*"        # devices that replay it (default every GPU)
  algorithm: auto              # algorithm of the replayed collectives (NCCL's choice)
  compute_scale: 1.0           # replayed compute = recorded duration x this
  group: recorded              # recorded group sizes as rank blocks, or all: every rank
  order: recorded              # Kineto: recorded | streams (clustersim.workload_trace.kineto)
```

**One file** (SPMD, as ASTRA-sim does with one rank's trace copied): every rank replays
it.  **One trace per rank** (a pattern with ``%d`` or ``{rank}``, or a folder of
``trace.N.json`` / ``workload.N.et``: :mod:`clustersim.workload_trace.ranks`): rank r
replays its own, on the r-th device of ``ranks`` (default: the first N GPUs, N the
traces).  A compute op holds its rank's compute stream for its recorded duration times
``compute_scale`` (all of a rank's compute streams share the device's one stream, in the
order their ops become ready).  A collective starts when its dependencies have ended on
every rank of its group; it runs as clustersim's collective (``algorithm``,
``network.protocol``, the network model) over them.

Process groups, one file: a collective whose recorded group size is absent or equals the
number of ranks runs over all of them; a group size k that divides the ranks runs as
ranks / k collectives over consecutive blocks of k ranks (ranks 0..k-1, k..2k-1, ...,
in device order); any other size is refused.  ``group: all`` runs every collective over
all the ranks, whatever size was recorded (a trace of 8 ranks replayed on 64 as if
recorded there).

Process groups, a trace per rank: the i-th collective of process group G on one rank meets
the i-th collective of G on every other rank that records one (G: the recorded group name,
else the group size's blocks as above; i counts in each trace's dependency order); those
ranks are the call's group.  They must agree on the operation and the size, and a recorded
group size must be the number of ranks that met; otherwise the scenario is refused, naming
the ranks and the nodes.
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
from ..workload_trace.ranks import is_per_rank
from .base import Strategy
from .trace_groups import (
    Exchange,
    match_collectives,
    match_point_to_point,
    meeting_key,
    never_finished,
    ranks_for_traces,
    read_rank_traces,
    spmd_meetings,
    summary_groups,
)


class TraceWorkload(BaseModel):
    """``workload: {trace: FILE, ...}``."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    trace: str = Field(
        min_length=1,
        description="trace file (Kineto or Chakra), relative to the scenario; a pattern with "
        "%d or {rank} (trace.%d.json) or a folder of rank traces: rank r replays its own",
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
    """The recorded rank's span (compare with makespan_s); the longest of the ranks'."""
    trace_compute_s: float
    """Recorded compute of the rank (the busiest rank's, with a trace per rank)."""
    compute_s: float
    """Replayed compute of that rank: trace_compute_s x compute_scale."""
    trace_communication_s: float
    communication_s: float
    """Simulated collective seconds, summed over the collectives."""
    collectives: dict[str, ReplayedCollective]
    """By the op's id (one trace), or ``GROUP#i``, the i-th collective of process group GROUP
    (a trace per rank)."""
    traces: int = 1
    """Trace files replayed: 1 (every rank replays it) or one per rank."""


class TraceReplay(Strategy):
    """Replay a Kineto or Chakra trace of one rank on every rank (SPMD), or each rank's own."""

    name = "trace"
    description = "replay Kineto or Chakra traces: one rank's on every rank, or each rank's own"
    config_model = TraceWorkload

    def check(self) -> None:
        """Traces readable, ranks found, every collective's groups valid for its algorithm."""
        cfg = self.config
        base = _base_dir(self.scenario.source)
        self.ranks = self.devices_of(cfg.ranks, "workload.ranks")
        if is_per_rank(cfg.trace, base):
            self.traces = read_rank_traces(cfg.trace, base, cfg.format, cfg.order)
            self.ranks = ranks_for_traces(self.ranks, len(self.traces), cfg.ranks is None)
            self.meetings = match_collectives(self.traces, self.ranks, self._call)
        else:
            self.traces = [load_trace(base / cfg.trace, cfg.format, "workload.trace", cfg.order)]
            self.meetings = spmd_meetings(self.traces[0], self.ranks, self._calls)
        self.exchanges = match_point_to_point(self.traces)
        for meeting in self.meetings.values():
            if meeting.call.n > 1:
                check_call(meeting.call, self.topology, "workload.algorithm")
        self.workload_trace: WorkloadTrace = self.traces[0]

    def trace_of(self, rank: int) -> WorkloadTrace:
        """The trace rank ``rank`` replays."""
        return self.traces[rank if len(self.traces) > 1 else 0]

    def _call(self, op: TraceOp, devices: tuple[str, ...]) -> CollectiveCall:
        """The call of collective ``op`` over ``devices``."""
        protocol = self.scenario.network.protocol
        return CollectiveCall(
            op.op, devices, op.size_bytes, algorithm=self.config.algorithm, protocol=protocol
        )

    def _calls(self, op: TraceOp) -> list[CollectiveCall]:
        """The calls of collective ``op``: one per block of its group size (module docstring)."""
        n = len(self.ranks)
        recorded = op.group_size if self.config.group == "recorded" else None
        k = recorded or n
        if n % k or k < 1:
            raise ScenarioError(
                Problem(
                    "workload.trace",
                    f"{self.traces[0].path}: collective {op.id} ({op.name}) has a process "
                    f"group of {k} ranks, which does not divide the {n} ranks replaying it",
                    "workload.ranks matching a multiple of every group size, or group: all",
                )
            )
        return [self._call(op, self.ranks[start : start + k]) for start in range(0, n, k)]

    @property
    def model(self) -> str:
        """``flow`` or ``analytical``, from the scenario's ``network.model``."""
        return self.scenario.network.model

    def estimate_work(self) -> WorkEstimate:
        """A record per compute op per rank, and each collective's calls' work."""
        channels = self.scenario.network.channels
        ops = sum(len(self.trace_of(r).ops) for r in range(len(self.ranks)))
        work = WorkEstimate(records=float(ops))
        for meeting in self.meetings.values():
            work += call_work(meeting.call, self.topology, model=self.model, channels=channels)
        return work

    def shorter(self) -> list[str]:
        """The analytical network model: a collective a weighted flow or a few, not its
        sends."""
        return ["--network analytical"] if self.model == "flow" else []

    def describe(self) -> str:
        t = self.workload_trace
        if len(self.traces) > 1:
            ops = sum(len(trace.ops) for trace in self.traces)
            return (
                f"{t.format} traces of {len(self.traces)} ranks ({ops} ops, "
                f"{len(self.meetings)} collectives) replayed on {len(self.ranks)} devices"
            )
        return (
            f"{t.format} trace of {len(t.ops)} ops ({len(t.collectives)} collectives) "
            f"replayed on {len(self.ranks)} ranks"
        )

    def start(self, sim: Simulation) -> None:
        self.times: dict[str, list[tuple[float, float]]] = {}
        self._arrived: dict[str, _Meeting] = {}
        for rank, device in enumerate(self.ranks):
            done: dict[str, simpy.Event] = {}
            for op in self.trace_of(rank).ops:
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
        if op.kind in ("send", "recv"):
            yield from self._point_to_point(sim, self.exchanges[(rank, op.id)])
            return
        key = meeting_key(self.meetings, rank, op)
        planned = self.meetings[key]
        meeting = self._arrived.setdefault(key, _Meeting(0, sim.env.event()))
        meeting.arrived += 1
        if meeting.arrived == planned.call.n:
            sim.process(self._collective(sim, planned.summary_key, planned.call, meeting.done))
        yield meeting.done

    def _point_to_point(self, sim: Simulation, exchange: Exchange) -> Generator[Any, Any, None]:
        """A send and its recv: the transfer starts when both are posted (a rendezvous, as
        NCCL's send/recv) and ends both."""
        meeting = self._arrived.setdefault(exchange.key, _Meeting(0, sim.env.event()))
        meeting.arrived += 1
        if meeting.arrived == 2:
            src, dst = self.ranks[exchange.src], self.ranks[exchange.dst]
            label = f"send/{exchange.send.name}"
            moved = sim.transfer(src, dst, exchange.size_bytes, label=label, op=exchange.send.id)
            moved.callbacks.append(lambda _event: meeting.done.succeed())
        yield meeting.done

    def _collective(
        self, sim: Simulation, key: str, call: CollectiveCall, done: simpy.Event
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
        self.times.setdefault(key, []).append((start, sim.now))
        done.succeed()

    def summarize(self, sim: Simulation) -> TraceSummary:
        """The traces' own span and compute against the replay's, and each collective."""
        collectives = {}
        groups = summary_groups(self.meetings)
        for key, (op, calls) in groups.items():
            times = self.times.get(key, [])
            if len(times) != len(calls):
                raise SimulationError(never_finished(key, op, calls, self._arrived))
            collectives[key] = ReplayedCollective(
                op=op.op,
                name=op.name,
                bytes=op.size_bytes,
                group_size=calls[0].n,
                groups=len(times),
                start_s=min(s for s, _ in times),
                end_s=max(e for _, e in times),
                time_s=sum(e - s for s, e in times) / len(times),
                trace_time_s=op.duration_s,
            )
        busiest = max(self.traces, key=lambda t: t.compute_s)
        return TraceSummary(
            trace=self.config.trace,
            format=self.workload_trace.format,
            ranks=len(self.ranks),
            ops=sum(len(t.ops) for t in self.traces),
            trace_span_s=max(t.span_s for t in self.traces),
            trace_compute_s=busiest.compute_s,
            compute_s=busiest.compute_s * self.config.compute_scale,
            trace_communication_s=sum(op.duration_s for op, _ in groups.values()),
            communication_s=sum(c.time_s for c in collectives.values()),
            collectives=collectives,
            traces=len(self.traces),
        )
