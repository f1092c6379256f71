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
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .errors import Problem, ScenarioError

DEFAULT_MAX_EVENTS = 20_000_000
"""Events a run may take unless told otherwise (``engine.max_events``, ``--max-events``).

Measured on the 2-core machine this was written on, shared with other jobs (bare SimPy
0.2-0.9 M timeouts/s, bench/bench_engine.py): the shipped scenarios of 10^4 events and
more run at a median of about 55,000 events/s, from 0.17 M/s (ring all-reduces: sends
without SimPy events, bench/bench_allreduce.py 0.1 M transfers/s) down to 3,300/s
(parameter servers sharded on every worker: thousands of flows share each link and
every rate recomputation walks them).  So 20 M events are 2-6 minutes of simulation for
most runs.  The contended parameter-server ones spend most of their time re-rating flows
(up to 500 re-ratings per transfer), which the estimate before the run cannot foresee:
the engine counts them as work (:data:`RERATINGS_PER_EVENT`) and stops such a run at
the hard stop, so it too ends within minutes.  Memory: a transfer is freed when it ends, a record
stays (about 250 bytes: megatron/table1_76.1b's 0.38 M records peak at 174 MB), so a
run that is all records stays near 5 GB.  The largest shipped scenario takes 0.53 M
events (megatron/table1_76.1b) and bench_allreduce 2.1 M: the default leaves them ten
times room and refuses what would run for hours."""

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
        )

    def __mul__(self, times: float) -> WorkEstimate:
        return WorkEstimate(self.transfers * times, self.records * times, self.priced_sends * times)

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
            parts.append(f"about {_format_bytes(self.output_bytes)} of output")
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


def _format_bytes(size: float) -> str:
    from .units import format_size

    return format_size(size) if math.isfinite(size) else str(size)


def limit_text(limit: int) -> str:
    """How the limit reads in messages: ``20,000,000 events``."""
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


def with_limit(doc: dict[str, Any], max_events: int | None) -> dict[str, Any]:
    """A scenario document with ``engine.max_events`` set to ``max_events`` (``doc`` itself
    if None): how the studies pass ``--max-events`` on to the runs they start."""
    if max_events is None:
        return doc
    engine = doc.get("engine")
    return {
        **doc,
        "engine": {**(engine if isinstance(engine, dict) else {}), "max_events": max_events},
    }


def over_limit_reason(errors: Sequence[WorkLimitError]) -> str:
    """One line for several runs refused for their work (the largest estimate): what
    ``clustersim plan`` says of the candidates it leaves out."""
    largest = max((e.estimate.events for e in errors if e.estimate is not None), default=0.0)
    return (
        f"estimated work over the limit of {limit_text(errors[0].limit)} (up to "
        f"{format_count(largest)} events); {LIMIT_FLAG} N raises it"
    )


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
