"""Records: what happened during a run, one row per compute or transfer.

Everything a user sees (summary, timeline, charts) is derived from records.
The timeline columns are part of the output contract; add columns, never
rename them.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Iterator
from typing import NamedTuple

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
)
"""Columns of ``timeline.csv``, in order."""


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

    @property
    def duration_s(self) -> float:
        """Length of the record in seconds."""
        return self.end_s - self.start_s

    def csv_row(self) -> list[str]:
        """The record as timeline.csv cells (floats in their shortest exact form)."""
        return [_cell(v) for v in self]


def _cell(value: object) -> str:
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer() and abs(value) < 1e16:
            return str(int(value))
        return repr(value)
    if isinstance(value, int) and value == -1:
        return ""
    return str(value)


def sorted_records(records: Iterable[Record]) -> list[Record]:
    """Records in a stable order: by start, end, resource, kind, label."""
    return sorted(records, key=lambda r: (r.start_s, r.end_s, r.resource, r.kind, r.label, r.op))


def timeline_csv(records: Iterable[Record]) -> str:
    """The text of ``timeline.csv`` for ``records``."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(TIMELINE_COLUMNS)
    for record in sorted_records(records):
        writer.writerow(record.csv_row())
    return buf.getvalue()


def timeline_frame(records: Iterable[Record]):  # -> pandas.DataFrame
    """Records as a pandas DataFrame with the timeline columns."""
    import pandas as pd

    return pd.DataFrame(sorted_records(records), columns=list(TIMELINE_COLUMNS))


def iter_kind(records: Iterable[Record], kind: str) -> Iterator[Record]:
    """Records of one kind."""
    return (r for r in records if r.kind == kind)
