"""``timeline.csv``: one row per record, in :func:`clustersim.records.sorted_records` order.

Columns :data:`clustersim.records.TIMELINE_COLUMNS`; cells as
:meth:`clustersim.records.Record.csv_row` gives them (floats in their
shortest exact form, tags that do not apply empty).  :func:`read_timeline`
gives the records back, so every chart and ``trace.json`` can be redrawn from
a finished run folder.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..records import TIMELINE_COLUMNS, Record, sorted_records
from .tables import csv_text, file_problem, read_csv_table


def timeline_csv(records: Iterable[Record]) -> str:
    """The text of ``timeline.csv`` for ``records``."""
    return csv_text(TIMELINE_COLUMNS, map(Record.csv_row, sorted_records(records)))


def read_timeline(path: str | os.PathLike[str]) -> list[Record]:
    """Records from a ``timeline.csv`` (pandas); empty tag cells become -1 or ''."""
    frame = read_csv_table(path, [c for c in TIMELINE_COLUMNS if c != "phase"])
    try:
        return [_record(row) for row in frame.itertuples(index=False)]
    except (TypeError, ValueError) as exc:
        raise file_problem(Path(path), f"a row cannot be read: {exc}") from None


def _time(values: dict[str, Any], key: str) -> float:
    """The time in column ``key``: a finite number of seconds (a chart cannot place NaN)."""
    seconds = float(values[key])
    if not math.isfinite(seconds):
        raise ValueError(f"{key} is {values[key]!r}, not a finite time")
    return seconds


def _record(row: Any) -> Record:
    values = row._asdict()
    text = {k: "" if _blank(values[k]) else str(values[k]) for k in ("resource", "kind", "label")}
    text.update({k: "" if _blank(values[k]) else str(values[k]) for k in ("src", "dst", "op")})
    number = {k: 0.0 if _blank(values[k]) else float(values[k]) for k in ("bytes", "flops")}
    tag = {
        k: -1 if _blank(values[k]) else int(values[k]) for k in ("iteration", "microbatch", "stage")
    }
    return Record(
        resource=text["resource"],
        kind=text["kind"],
        label=text["label"],
        start_s=_time(values, "start_s"),
        end_s=_time(values, "end_s"),
        bytes=number["bytes"],
        flops=number["flops"],
        src=text["src"],
        dst=text["dst"],
        iteration=tag["iteration"],
        microbatch=tag["microbatch"],
        stage=tag["stage"],
        op=text["op"],
        phase="" if _blank(values.get("phase")) else str(values["phase"]),
    )


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value == ""
