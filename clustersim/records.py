"""Records: what happened during a run, one row per compute or transfer.

Everything a user sees (summary, timeline, charts) is derived from records.
The timeline columns are part of the output contract; add columns, never
rename them.  :mod:`clustersim.outputs.timeline` writes ``timeline.csv``
(each record's :meth:`Record.csv_row`) and reads it back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

TIMELINE_COLUMNS = (
    "resource",
    "kind",
    "label",
    "start_s",
    "end_s",
    "bytes",
    "flops",
    "src",
    "dst",
    "iteration",
    "microbatch",
    "stage",
    "op",
    "phase",
)
"""Columns of ``timeline.csv``, in order."""


class RecordLog(list):  # type: ignore[type-arg]  # of Record
    """A run's records: a list of :class:`Record` that keeps what is derived from all of them
    once (:meth:`derived`), for the summaries that read the same totals (the run's device
    breakdown, and each training family's per-iteration one)."""

    def derived(self, key: str, make: Callable[[RecordLog], Any]) -> Any:
        """``make(self)``, computed the first time ``key`` is asked for and kept while the log
        keeps its length (records are appended while a run plays; afterwards the log is
        read, not changed)."""
        memo: dict[str, tuple[int, Any]] = self.__dict__.setdefault("_derived", {})
        kept = memo.get(key)
        if kept is None or kept[0] != len(self):
            kept = memo[key] = (len(self), make(self))
        return kept[1]


PHASES = ("forward", "backward", "recompute", "optimizer", "communication")
"""Values of :attr:`Record.phase` ("" for work that is none of these)."""

COMMUNICATION_KINDS = frozenset({"transfer", "collective"})
"""Record kinds that are communication (their phase is ``communication``)."""


class Record(NamedTuple):
    """One compute or transfer.

    ``resource`` is the device that did the work (for a transfer, its source
    device); ``kind`` is ``compute`` or ``transfer``; times are simulated
    seconds; ``bytes`` is the transfer size or the bytes of memory-bound
    work; integer tags are -1 where they do not apply.
    """

    resource: str
    kind: str
    label: str
    start_s: float
    end_s: float
    bytes: float = 0.0
    flops: float = 0.0
    src: str = ""
    dst: str = ""
    iteration: int = -1
    microbatch: int = -1
    stage: int = -1
    op: str = ""
    phase: str = ""
    """What the work is part of: one of :data:`PHASES`, or "" (see :func:`phase_of`)."""

    @property
    def duration_s(self) -> float:
        """Length of the record in seconds."""
        return self.end_s - self.start_s

    def csv_row(self) -> list[str]:
        """The record as timeline.csv cells: floats in their shortest exact form (whole ones
        without ``.0``), tags that do not apply (-1) empty."""
        (resource, kind, label, start, end, nbytes, flops, src, dst, it, mb, stage, op, _) = self
        return [
            resource,
            kind,
            label,
            _number(start),
            _number(end),
            _number(nbytes),
            _number(flops),
            src,
            dst,
            _tag(it),
            _tag(mb),
            _tag(stage),
            op,
            phase_of(self),
        ]


def _cell(value: object) -> str:
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, int) and value == -1:
        return ""
    return str(value)


def _number(value: float) -> str:
    """A float as a cell: integral values without a fraction, others in repr's shortest form
    (an int, e.g. SimPy's start time 0, as itself)."""
    if value.__class__ is not float:
        if not isinstance(value, float):
            return _cell(value)
        value = float(value)  # a float subclass (numpy.float64): its plain float value
    if value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return repr(value)


def _tag(value: int) -> str:
    return "" if value == -1 else str(value)


def sorted_records(records: Iterable[Record]) -> list[Record]:
    """Records in a stable order: by start, end, resource, kind, label."""
    return sorted(records, key=lambda r: (r.start_s, r.end_s, r.resource, r.kind, r.label, r.op))


def timeline_frame(records: Iterable[Record]):  # -> pandas.DataFrame
    """Records as a pandas DataFrame with the timeline columns."""
    import pandas as pd

    return pd.DataFrame(sorted_records(records), columns=list(TIMELINE_COLUMNS))


def iter_kind(records: Iterable[Record], kind: str) -> Iterator[Record]:
    """Records of one kind."""
    return (r for r in records if r.kind == kind)


def phase_of(record: Record) -> str:
    """The record's phase: its ``phase`` field, else ``communication`` for transfers and
    collectives, else what an older run's label says (``fwd``/``forward``,
    ``bwd``/``backward``, ``recomp...``), else ""."""
    if record.phase:
        return record.phase
    if record.kind in COMMUNICATION_KINDS:
        return "communication"
    label = record.label.lower()
    if label.startswith(("fwd", "forward")):
        return "forward"
    if label.startswith(("bwd", "backward")):
        return "backward"
    if label.startswith("recomp"):
        return "recompute"
    return ""
