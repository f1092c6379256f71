"""The timeline: one row per record, in :func:`clustersim.records.sorted_records` order.

Columns :data:`clustersim.records.TIMELINE_COLUMNS`; cells as
:meth:`clustersim.records.Record.csv_row` gives them (floats in their
shortest exact form, tags that do not apply empty).  It is written as

* ``timeline.csv`` (:func:`timeline_csv`), or
* ``timeline.parquet`` (:func:`timeline_parquet`, ``--timeline parquet``): the DataFrame
  pandas reads from that CSV (:func:`timeline_frame`: the text columns as strings, the
  others as pandas infers them), zstd-compressed by pyarrow, so
  ``pandas.read_parquet`` gives the same DataFrame as ``pandas.read_csv`` of the CSV.

:func:`read_timeline` gives the records back from either, so every chart and
``trace.json`` can be redrawn from a finished run folder.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..records import TIMELINE_COLUMNS, Record, sorted_records
from .atomic import atomic_file
from .tables import TEXT_COLUMNS, csv_text, file_problem, read_csv_table, with_columns

PARQUET_COMPRESSION = "zstd"
"""Compression of ``timeline.parquet`` (pyarrow's zstd; pandas reads it with no option)."""


def timeline_csv(records: Iterable[Record]) -> str:
    """The text of ``timeline.csv`` for ``records``."""
    return csv_text(TIMELINE_COLUMNS, map(Record.csv_row, sorted_records(records)))


def timeline_frame(records: Iterable[Record]) -> Any:
    """The DataFrame ``pandas.read_csv`` gives for the ``timeline.csv`` of ``records``, text
    columns (:data:`.tables.TEXT_COLUMNS`) read as strings."""
    import pandas as pd

    text = io.StringIO(timeline_csv(records))
    return pd.read_csv(text, dtype=dict.fromkeys(set(TEXT_COLUMNS) & set(TIMELINE_COLUMNS), str))


def write_timeline_parquet(path: str | os.PathLike[str], records: Iterable[Record]) -> Path:
    """Write ``timeline.parquet`` (:func:`timeline_frame`) atomically; return its path."""
    frame = timeline_frame(records)
    target = Path(path)
    with atomic_file(target, "wb") as fh:
        frame.to_parquet(fh, engine="pyarrow", compression=PARQUET_COMPRESSION, index=False)
    return target


def read_timeline(path: str | os.PathLike[str]) -> list[Record]:
    """Records from a ``timeline.csv``, or a ``timeline.parquet`` (by its suffix); empty
    tag cells become -1 or ''."""
    path = Path(path)
    if path.suffix == ".parquet":
        frame = with_columns(_read_parquet(path), path, TIMELINE_COLUMNS[:-1])
    else:
        frame = read_csv_table(path, [c for c in TIMELINE_COLUMNS if c != "phase"])
    try:
        return [_record(row) for row in frame.itertuples(index=False)]
    except (TypeError, ValueError) as exc:
        raise file_problem(Path(path), f"a row cannot be read: {exc}") from None


def _read_parquet(path: Path) -> Any:
    """``pandas.read_parquet``; a missing or unreadable file is a ScenarioError naming it."""
    import pandas as pd

    try:
        return pd.read_parquet(path, engine="pyarrow")
    except FileNotFoundError:
        raise file_problem(path, "missing (is this a clustersim run folder?)") from None
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise file_problem(path, f"cannot be read as Parquet: {exc}") from None


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
    """An empty cell: None, NaN, pandas' NA or an empty string."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return True
    if type(value).__name__ == "NAType":  # pandas.NA, without importing pandas here
        return True
    return isinstance(value, str) and value == ""
