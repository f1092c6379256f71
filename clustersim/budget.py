"""Work budgets: what a run will cost, estimated before it runs, and the limit it must keep.

The unit of work is the *event*: one **transfer** (a flow the network carries: a
program's transfer, a pipeline's activation, one send of a collective played in the
flow-level model, one weighted flow of a collective in the analytical model) or one
**record** (a row of timeline.csv: a compute, a recorded transfer, a collective's row
per rank).  Records and transfers are what a run spends its time on, and the engine
counts both (summary.json's ``engine`` block: ``records``, ``flows_completed``).  A
third, smaller part are the sends of schedules the analytical model builds only to
price a collective (:attr:`WorkEstimate.priced_sends`), about an event's cost each.

Every strategy estimates its work from its configuration before anything runs
(:meth:`clustersim.strategies.Strategy.estimate_work`, within a small factor of what
the run counts: ``tests/test_work_limits.py`` holds the factor); :func:`enforce`
refuses an estimate over the limit (:class:`WorkLimitError`, exit code 2) with the
estimate, the limit and how to raise it.  The limit is the scenario's
``engine.max_events`` (default :data:`DEFAULT_MAX_EVENTS`); the commands that
simulate take ``--max-events N``, which overrides it.  Should an estimate be wrong,
the engine stops a run whose counted work (:func:`counted_work`: records, transfers and
flow re-ratings) passes :data:`HARD_STOP_FACTOR` times the limit
(:class:`clustersim.engine.Simulation`), checked once per batch of SimPy steps.

Beside the events, the simulator's own **memory** (the bytes of RAM the Python process
will need at its peak; not the simulated GPUs' memory, which is the summary's ``memory``
block) is estimated from the same counts and the cluster's size
(:func:`estimate_memory`: records kept, collective schedules built at once, devices and
links with their cached routes, and the run folder built in memory by ``clustersim run``)
and refused over ``engine.max_memory`` (default: :data:`DEFAULT_MEMORY_FRACTION` of this
machine's memory, :func:`machine_memory_bytes`) with :class:`MemoryLimitError`, exit 2;
``--max-memory SIZE`` overrides it.  The machine-dependent limit never enters summary.json;
the estimate (a function of the scenario alone) does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import Problem, ScenarioError
from .host import machine_memory_bytes

DEFAULT_MAX_EVENTS = 200_000_000
"""Events a run may take unless told otherwise (``engine.max_events``, ``--max-events``).

The event limit guards time; memory has its own limit (``engine.max_memory``), so the
default is what about an hour of simulation allows: the larger shipped scenarios run at
55,000-70,000 events/s on the 2-core machine this was written on (commit e712558,
:data:`EVENTS_PER_S`; megatron/table1_1t 57,000/s, gpt3_175b_1024 with every replica
68,000/s, mosaic_mpt70b_a100_64 58,000/s; collective schedules and ring all-reduces up to
170,000/s), so 200 M events are 50-60 minutes for most runs.  GPT-3 175B on 16,384 GPUs
with global batch 8,192 (tp 8 x pp 8 x dp 256, interleaved, every replica simulated)
estimates 88 M events on that commit: accepted with room to spare wherever its memory
fits, and the limit does not depend on any one scenario's count, so it stays right
as the engine takes fewer or cheaper events per iteration (raise it with the engine's
speed: an hour at :data:`EVENTS_PER_S`).  The contended parameter-server runs that spend
most of their time re-rating flows (up to 500 re-ratings per transfer, 3,300 events/s)
are stopped by the engine's hard stop, which counts the re-ratings
(:data:`RERATINGS_PER_EVENT`).  Before memory was estimated the default was 20 M (2-6
minutes, and at most about 5 GB of records)."""

EVENTS_PER_S = 60_000
"""Events per wall-clock second of the larger shipped scenarios on 2 cores (the median,
commit e712558): what :data:`DEFAULT_MAX_EVENTS` is an hour of, and how
:func:`wall_time_s` turns an estimate into seconds for a long run's notice.  Measured
again after commit 9008a53 on a 2-core machine shared with other work (load 2 to 7), as
``bench/bench_estimates.py`` does (a fresh process per run; the events the run counted
over the wall time of simulating it): megatron/table1_1t 53,000/s (2.08 M events, 39.5 s
against 34.7 s estimated), gpt3_175b_1024 with every replica 46,000/s (17.5 s against
13.3 s), ``clustersim collective --op allreduce --devices 4 --bytes 1MB --chunk 1B`` (a
double tree of 6 M sends) 68,000/s (88 s against 100 s); smaller and simpler runs go
faster (a ZeRO-1 run 100,000/s, rings 165,000-190,000/s: their notice says up to 3 times
too long) and a parameter server's contended links slower (42,000/s)."""

WHOLE_SENDS_PER_S = 1_000_000
"""Sends per wall-clock second of a ring played whole (its schedule built, its times
computed, its links and records booked): ``bench/bench_allreduce.py``'s 2.1 M sends took
0.41-0.65 s in all on 2 cores (3.2-5.1 M/s, 2026-11-30), taken at a third of that."""

NOTICE_AFTER_S = 10.0
"""Work whose estimate is longer than this, in seconds of wall time (:func:`wall_time_s`),
is announced before it starts (:func:`long_work_notice`): how long, in how many events,
and what would shorten it."""

RERATINGS_PER_EVENT = 10
"""Flow re-ratings (a flow whose rate a recomputation evaluates) that cost about one
event.  Measured on the shipped parameter-server scenarios, where thousands of flows share
each link: about 1.4 us per re-rating against 10-18 us per event.  A run's counted work
(:func:`counted_work`, the engine's hard stop) includes them, so a run slowed by
contention is stopped by its time, not by its events alone."""

HARD_STOP_FACTOR = 4
"""The engine stops a run whose counted events (records + transfers started) pass this
many times the limit: room for an estimate that is low by the factor the tests allow,
and a stop for one that is wrong by more."""

BYTES_PER_RECORD = 495
"""Bytes a record takes in the run folder: timeline.csv (133) and trace.json (361, with
its receive slices, flow arrows and counters), measured on megatron/table1_76.1b."""

LIMIT_KEY = "engine.max_events"
"""The scenario key of the limit."""
LIMIT_FLAG = "--max-events"
"""The command-line flag that overrides it."""


@dataclass(frozen=True)
class WorkEstimate:
    """The work of a run (or part of one), estimated before it runs."""

    transfers: float = 0.0
    """Flows the network will carry."""
    records: float = 0.0
    """Rows of the timeline."""
    priced_sends: float = 0.0
    """Sends of schedules built only to price collectives (analytical model)."""
    held_sends: float = 0.0
    """Memory, not events (:func:`estimate_memory`): the most sends held at once, in sends
    of a collective schedule built whole before it runs (its slices together;
    :func:`clustersim.collectives.work.calls_work` sums the communicators that run at
    once), or their worth (a parameter server's messages).  ``+`` and ``*`` keep the
    larger, as calls of one communicator, and iterations, run one after another."""
    whole_sends: float = 0.0
    """Of :attr:`transfers`, the sends of rings that will be played whole
    (:mod:`clustersim.collectives.ring_replay`): events for the limits like any transfer,
    but timed at :data:`WHOLE_SENDS_PER_S` (:func:`wall_time_s`)."""

    @property
    def events(self) -> float:
        """The whole work in events: transfers + records + priced sends."""
        return self.transfers + self.records + self.priced_sends

    @property
    def output_bytes(self) -> float:
        """About the bytes ``clustersim run`` writes for the records (timeline, trace)."""
        return self.records * BYTES_PER_RECORD

    def __add__(self, other: WorkEstimate) -> WorkEstimate:
        return WorkEstimate(
            self.transfers + other.transfers,
            self.records + other.records,
            self.priced_sends + other.priced_sends,
            max(self.held_sends, other.held_sends),
            self.whole_sends + other.whole_sends,
        )

    def __mul__(self, times: float) -> WorkEstimate:
        return WorkEstimate(
            self.transfers * times,
            self.records * times,
            self.priced_sends * times,
            self.held_sends,
            self.whole_sends * times,
        )

    __rmul__ = __mul__

    def describe(self, output: bool = False) -> str:
        """``1.2 M events (0.9 M transfers, 0.3 M records)``; with ``output``, also
        ``about 112 MB of output`` (what ``clustersim run`` writes for the records)."""
        parts = [
            f"{format_count(self.transfers)} transfers",
            f"{format_count(self.records)} records",
        ]
        if self.priced_sends:
            parts.append(f"{format_count(self.priced_sends)} sends priced")
        if output:
            parts.append(f"about {format_bytes(self.output_bytes)} of output")
        return f"{format_count(self.events)} events ({', '.join(parts)})"


NOTHING = WorkEstimate()
"""No work at all."""


def format_count(count: float) -> str:
    """A count for people: ``950``, ``12,000``, ``0.35 M``, ``1.2 M``, ``3.4 G``, ``2e+15``."""
    if not math.isfinite(count) or count >= 1e15:
        return f"{count:.3g}"
    if count < 100_000:
        return f"{count:,.0f}"
    for scale, prefix in ((1e12, "T"), (1e9, "G")):
        if count >= scale:
            return f"{count / scale:.3g} {prefix}"
    return f"{count / 1e6:.3g} M"


def format_bytes(size: float) -> str:
    """Bytes for people (``1.2 GB``), ``inf`` and ``nan`` as such."""
    from .units import format_size

    return format_size(size) if math.isfinite(size) else str(size)


def wall_time_s(work: WorkEstimate | None, processes: int = 1) -> float:
    """About the wall time (s) ``work`` takes: its events at :data:`EVENTS_PER_S`, shared
    by ``processes`` simulating at once (0 for None, a strategy that cannot estimate)."""
    if work is None:
        return 0.0
    seconds = (work.events - work.whole_sends) / EVENTS_PER_S + work.whole_sends / WHOLE_SENDS_PER_S
    return seconds / max(1, processes)


def format_wall(seconds: float) -> str:
    """A wall time for people, to two figures: ``40 s``, ``2 min``, ``1.5 h``, ``3 d``."""
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= 1.5 * size:
            return f"{seconds / size:.2g} {unit}"
    return f"{seconds:.2g} s"


def is_long(work: WorkEstimate | None, processes: int = 1) -> bool:
    """Whether ``work`` is estimated longer than :data:`NOTICE_AFTER_S` (:func:`wall_time_s`):
    worth a notice before it starts."""
    return wall_time_s(work, processes) > NOTICE_AFTER_S


def long_work_notice(work: WorkEstimate | None, shorter: str, processes: int = 1) -> str:
    """What to say before work estimated longer than :data:`NOTICE_AFTER_S` starts:
    ``about 2 min of simulation (6 M events): --chunk 16B shortens it`` (``shorter``: the
    flags or settings that would, as a phrase), ``on 2 processes`` when ``processes``
    share it; empty for shorter work (:func:`is_long`)."""
    if work is None or not is_long(work, processes):
        return ""
    seconds = wall_time_s(work, processes)
    where = f" on {processes} processes" if processes > 1 else ""
    text = f"about {format_wall(seconds)} of simulation{where} ({format_count(work.events)} events)"
    return f"{text}: {shorter} shortens it" if shorter else text


def long_runs_notice(
    works: Sequence[WorkEstimate | None],
    processes: int = 1,
    shorter: Callable[[int], Sequence[str]] = lambda index: (),
    more: Sequence[str] = (),
) -> str:
    """:func:`long_work_notice` of several runs (``works``, one each) run ``processes`` at
    once, their work added up; what shortens them: ``more`` (the command's own: ``fewer
    --set values``), then ``shorter(i)`` of the longest run ``i`` (asked only when the runs
    are long).  Empty for shorter work."""
    events = [work.events if work is not None else 0.0 for work in works]
    total = sum((work for work in works if work is not None), NOTHING)
    if not works or not is_long(total, processes):
        return ""
    longest = events.index(max(events))
    return long_work_notice(total, either([*more, *shorter(longest)]), processes)


def either(phrases: Sequence[str]) -> str:
    """``a``, ``a or b``, ``a, b or c``: what a notice offers (empty for none)."""
    if len(phrases) < 2:
        return "".join(phrases)
    return f"{', '.join(phrases[:-1])} or {phrases[-1]}"


def limit_text(limit: int) -> str:
    """How the limit reads in messages: ``200,000,000 events``."""
    return f"{limit:,} events"


def how_to_raise(limit: int) -> str:
    """What a refusal allows: the limit and the two ways to raise it."""
    return (
        f"at most {limit_text(limit)}; raise the limit with {LIMIT_FLAG} N on the command "
        f"line or {LIMIT_KEY}: N in the scenario"
    )


class WorkLimitError(ScenarioError):
    """A run would take more work than its limit allows (refused before it runs)."""

    def __init__(
        self,
        problems: Sequence[Problem] | Problem,
        source: str = "",
        estimate: WorkEstimate | None = None,
        limit: int = 0,
    ) -> None:
        super().__init__(problems, source)
        self.estimate = estimate
        """The work estimated."""
        self.limit = limit
        """The limit it is over, events."""

    def with_source(self, source: str) -> WorkLimitError:
        return WorkLimitError(self.problems, source, self.estimate, self.limit)


def enforce(
    estimate: WorkEstimate | None,
    limit: int,
    source: str = "",
    what: str = "",
    path: str = LIMIT_KEY,
) -> None:
    """Raise :class:`WorkLimitError` at ``path`` when ``estimate`` is over ``limit`` events.

    ``what`` names the run in the message (``"allreduce of 1 PB by ring"``); None (a
    strategy that cannot estimate) passes: the engine's hard stop still holds.
    """
    if estimate is None or estimate.events <= limit:
        return
    subject = f"{what}: " if what else ""
    message = (
        f"{subject}estimated work {estimate.describe()} is over the limit of {limit_text(limit)}"
    )
    raise WorkLimitError(Problem(path, message, how_to_raise(limit)), source, estimate, limit)


def with_limit(
    doc: dict[str, Any], max_events: int | None, max_memory: float | None = None
) -> dict[str, Any]:
    """A scenario document with ``engine.max_events`` set to ``max_events`` and
    ``engine.max_memory`` to ``max_memory`` (bytes; each left as it is if None, ``doc``
    itself if both are): how the studies pass ``--max-events`` and ``--max-memory`` on to
    the runs they start."""
    given = {"max_events": max_events, "max_memory": max_memory}
    given = {key: value for key, value in given.items() if value is not None}
    if not given:
        return doc
    engine = doc.get("engine")
    return {**doc, "engine": {**(engine if isinstance(engine, dict) else {}), **given}}


def over_limit_reason(errors: Sequence[WorkLimitError]) -> str:
    """One line for several runs refused for their work or memory (the largest estimate
    of each kind): what ``clustersim plan`` says of the candidates it leaves out."""
    memory = [e for e in errors if isinstance(e, MemoryLimitError) and e.memory is not None]
    work = [e for e in errors if not isinstance(e, MemoryLimitError)]
    reasons = []
    if work:
        largest = max((e.estimate.events for e in work if e.estimate is not None), default=0.0)
        reasons.append(
            f"estimated work over the limit of {limit_text(work[0].limit)} (up to "
            f"{format_count(largest)} events); {LIMIT_FLAG} N raises it"
        )
    if memory:
        largest = max(e.memory.total for e in memory if e.memory is not None)
        reasons.append(
            f"estimated memory over the limit of {format_bytes(memory[0].limit)} (up to "
            f"{format_bytes(largest)}); {MEMORY_FLAG} SIZE raises it"
        )
    return "; ".join(reasons)


def counted_work(records: int, transfers: int, rerated: int) -> int:
    """The work a run has done so far, in events: its records and transfers, and its flow
    re-ratings at :data:`RERATINGS_PER_EVENT` to the event."""
    return records + transfers + rerated // RERATINGS_PER_EVENT


def hard_stop_message(records: int, transfers: int, rerated: int, limit: int) -> str:
    """The engine's message when a run's counted work passes the hard stop."""
    counted = counted_work(records, transfers, rerated)
    parts = f"{format_count(records)} records, {format_count(transfers)} transfers"
    cause = "its work was estimated lower; please report the scenario"
    if rerated // RERATINGS_PER_EVENT > records + transfers:
        parts += (
            f", {format_count(rerated)} flow re-ratings counted as "
            f"{format_count(rerated // RERATINGS_PER_EVENT)} events"
        )
        cause = (
            "most of it re-rating flows that share links by the thousand, which the "
            "estimate before the run does not foresee"
        )
    return (
        f"the run stopped after {format_count(counted)} events of work ({parts}), "
        f"{HARD_STOP_FACTOR} times its limit of {limit_text(limit)} ({cause}); "
        f"{how_to_raise(limit)}"
    )


# --------------------------------------------------------------------------- memory
# Calibrated on commit e712558 (Python 3.11, Linux, 2 cores) by the peak resident set size
# (ru_maxrss) of a fresh process per scenario, stage by stage: after the imports, after
# prepare (topology and strategy), after simulate, after writing the run folder
# (bench/bench_estimates.py prints estimate against measurement).

MEMORY_BASE = 115e6
"""Bytes of the process before the work: the interpreter with clustersim, numpy, pandas,
matplotlib and SimPy loaded (105 MB measured after the imports ``clustersim run`` makes;
56 MB for ``clustersim collective``, which loads fewer) and a small scenario prepared
(5 MB: pipeline/1f1b_m8 110 MB after prepare)."""

MEMORY_PER_LINK = 450.0
"""Bytes per directed link: the topology's links, devices and switches (prepare took
429 MB for scenarios/scale/dense_131k's 1.36 M links, 63 MB for gpt3_175b_16k's 174,000,
20 MB for megatron/table1_1t's 31,700: about 310 B a link, devices included), and the
network's state of the links a run uses (one replica of dense_131k reaches 800,000 of its
links with its data-parallel rings: 0.90 GB at its peak with 0.12 GB of records).
Re-measured at commit 619e6ce, after links stopped holding their names and the network
its per-link dicts (1,300 B before)."""

MEMORY_PER_DEVICE = 300.0
"""Bytes per device beyond its links: per-device state of the strategy and the engine
(compute streams, clocks, memory plans shared by devices alike) and the routes cached
while it runs (4,000 B before the memory rows, routes and summary rows were shared)."""

MEMORY_PER_RECORD = 400.0
"""Bytes per record kept until the end of the run (a 14-field named tuple, its floats and
labels, and the list holding it), with whatever else grows with the run's work (flows in
flight, their callbacks): the peak less the prepared process was 350 B per record for
gpt3_175b_1024 with every replica (598,016 records, 210 MB), 380 B for table1_76.1b,
350 B for table1_1t (1.57 M records, 550 MB), 415 B for zero/gpt3_1.3b_stage3_prefetch,
500 B for mosaic_mpt70b_a100_64 (1.08 M records)."""

MEMORY_PER_HELD_SEND = 300.0
"""Bytes per send of a collective schedule built whole (:attr:`WorkEstimate.held_sends`):
its parallel lists, its dependents and the execution's state.  ``clustersim collective
--op allreduce --devices 4 --bytes 1MB`` peaked at 243 B per send with ``--chunk 1B``
(ring, 6 M sends, 1.52 GB in 86 s), 280 B with ``--chunk 64B`` (ring, 94,000 sends) and
330 B (tree).  GPT-3 175B on 16,384 GPUs (tp 8 x pp 8 x dp 256, global batch 4,096,
interleaved, both of Megatron-Core's overlaps, every replica) peaked at 7.72 GB: 8.04 GB
estimated, 5.0 GB of it 16.7 M sends held (a reduce-scatter and an all-gather of 130,000
sends on each of 64 data-parallel groups), 2.6 GB records, 0.3 GB topology."""

OUTPUT_MEMORY_BASE = 30e6
"""Bytes ``clustersim run`` adds to write a run folder of any size (the Gantt chart's
figure): 25 MB for pipeline/1f1b_m8."""

OUTPUT_MEMORY_PER_BYTE = 4.5
"""Bytes of memory per byte of the run folder while ``clustersim run`` writes it (every
text is built whole before it is written, from lists of rows and trace events): 4.1 for
gpt3_175b_1024 with every replica (287 MB written, 1.19 GB more at the peak), 4.3 for
table1_76.1b, 4.0 for table1_1t (768 MB written, 3.1 GB), 3.2 for mosaic_mpt70b_a100_64,
5.4 for zero/gpt3_1.3b_stage3_prefetch, 2.7 for ps_vs_ring/bert_large_ps_servers_1x; the
folder's size is :attr:`WorkEstimate.output_bytes`."""

DEFAULT_MEMORY_FRACTION = 0.8
"""The default ``engine.max_memory``: this fraction of the machine's memory
(:func:`machine_memory_bytes`), the rest left to the system and to other programs."""

MEMORY_KEY = "engine.max_memory"
"""The scenario key of the memory limit."""
MEMORY_FLAG = "--max-memory"
"""The command-line flag that overrides it."""


@dataclass(frozen=True)
class MemoryEstimate:
    """The simulator process's peak memory (bytes) for a run, estimated before it runs."""

    process: float = MEMORY_BASE
    """The interpreter and libraries (:data:`MEMORY_BASE`)."""
    topology: float = 0.0
    """Devices, links and cached routes."""
    records: float = 0.0
    """Records kept for the summary and the outputs."""
    held: float = 0.0
    """Sends held at once: collective schedules built whole (each communicator's largest
    call), a parameter server's messages (:attr:`WorkEstimate.held_sends`)."""
    outputs: float = 0.0
    """The run folder built in memory by ``clustersim run`` (0 for the commands that
    write none)."""

    @property
    def total(self) -> float:
        """The peak, bytes."""
        return self.process + self.topology + self.records + self.held + self.outputs

    @property
    def simulation(self) -> float:
        """The peak without the run folder, bytes."""
        return self.total - self.outputs

    def describe(self) -> str:
        """``1.2 GB (records 800 MB, run folder 300 MB, topology 20 MB, process 115 MB)``:
        the parts that are not negligible, largest first, the process last."""
        parts = {
            "records": self.records,
            "sends held": self.held,
            "topology": self.topology,
            "run folder": self.outputs,
        }
        shown = [
            f"{name} {format_bytes(size)}"
            for name, size in sorted(parts.items(), key=lambda kv: -kv[1])
            if size >= 0.01 * self.total
        ]
        shown.append(f"process {format_bytes(self.process)}")
        return f"{format_bytes(self.total)} ({', '.join(shown)})"


def estimate_memory(
    work: WorkEstimate | None, devices: int, links: int, outputs: bool = False
) -> MemoryEstimate:
    """The peak memory of simulating ``work`` on a cluster of ``devices`` devices and
    ``links`` directed links; with ``outputs``, writing its run folder too.  ``work`` None
    (a strategy that cannot estimate) counts the process and the cluster only."""
    work = work or NOTHING
    topology = devices * MEMORY_PER_DEVICE + links * MEMORY_PER_LINK
    written = OUTPUT_MEMORY_BASE + work.output_bytes * OUTPUT_MEMORY_PER_BYTE if outputs else 0.0
    return MemoryEstimate(
        MEMORY_BASE,
        topology,
        work.records * MEMORY_PER_RECORD,
        work.held_sends * MEMORY_PER_HELD_SEND,
        written,
    )


def default_max_memory() -> float | None:
    """The default ``engine.max_memory``: :data:`DEFAULT_MEMORY_FRACTION` of
    :func:`machine_memory_bytes` (None, no limit, where the machine's memory is unknown)."""
    size = machine_memory_bytes()
    return None if size is None else DEFAULT_MEMORY_FRACTION * size


def memory_limit_text(limit: float, default: bool = False) -> str:
    """How a memory limit reads in messages: ``18.8 GB``, and for the default
    ``18.8 GB (80% of this machine's 23.5 GB)``."""
    text = format_bytes(limit)
    if default:
        text += (
            f" ({DEFAULT_MEMORY_FRACTION:.0%} of this machine's "
            f"{format_bytes(limit / DEFAULT_MEMORY_FRACTION)})"
        )
    return text


NEED_LESS = "parallelism.simulate_replicas: one, fewer iterations or micro-batches, a larger chunk"
"""What makes a run need less memory (a refusal's last words; the collective command says
its own flags)."""


def how_to_raise_memory(limit: float, less: str = NEED_LESS) -> str:
    """What a memory refusal allows: the limit and the ways to raise it or need ``less``."""
    return (
        f"at most {format_bytes(limit)}; raise the limit with {MEMORY_FLAG} SIZE on the "
        f"command line or {MEMORY_KEY}: SIZE in the scenario (e.g. 64GB), or need less: {less}"
    )


class MemoryLimitError(WorkLimitError):
    """A run would need more memory than its limit allows (refused before it runs)."""

    def __init__(
        self,
        problems: Sequence[Problem] | Problem,
        source: str = "",
        estimate: WorkEstimate | None = None,
        limit: float = 0.0,
        memory: MemoryEstimate | None = None,
    ) -> None:
        super().__init__(problems, source, estimate, int(limit))
        self.memory = memory
        """The memory estimated."""

    def with_source(self, source: str) -> MemoryLimitError:
        return MemoryLimitError(self.problems, source, self.estimate, self.limit, self.memory)


def enforce_memory(
    memory: MemoryEstimate,
    limit: float | None,
    source: str = "",
    what: str = "",
    path: str = MEMORY_KEY,
    default: bool = False,
    work: WorkEstimate | None = None,
    less: str = NEED_LESS,
) -> None:
    """Raise :class:`MemoryLimitError` at ``path`` when ``memory`` is over ``limit`` bytes
    (None: no limit); ``default`` says the limit is the machine's default (the message
    says so), ``what`` names the run, ``less`` what would make it need less."""
    if limit is None or memory.total <= limit:
        return
    subject = f"{what}: " if what else ""
    message = (
        f"{subject}estimated memory {memory.describe()} is over the limit of "
        f"{memory_limit_text(limit, default)}"
    )
    raise MemoryLimitError(
        Problem(path, message, how_to_raise_memory(limit, less)), source, work, limit, memory
    )
