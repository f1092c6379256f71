"""Tables as CSV and Markdown text, and CSV files read back.

Every table clustersim writes (``links.csv``, ``timeline.csv``, ``compare.csv``
and ``compare.md``, ``plan.csv`` and ``plan.md``, the collective benchmark's
CSV) goes through these functions, so a number reads the same way in each:
floats in the shortest text that gives them back exactly (``repr``), missing
values as empty cells.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from typing import Any

from ..errors import Problem, ScenarioError


def cell(value: Any, whole_below: float = 0.0) -> str:
    """A value as a table cell: None empty, a float by ``repr`` (its shortest exact form),
    without ``.0`` when it is whole and its magnitude below ``whole_below``; anything else by ``str``."""
    if value is None:
        return ""
    if isinstance(value, float):
        if value.is_integer() and abs(value) < whole_below:
            return str(int(value))
        return repr(value)
    return str(value)


def csv_text(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A header line and one line per row, ``\\n`` line ends, through :mod:`csv`: a cell
    holding a comma, a quote or a line break is quoted (its quotes doubled), any other
    cell is written as it is."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue()


def markdown_table(
    header: Sequence[str], rows: Iterable[Sequence[str]], right_aligned: Collection[int] = ()
) -> list[str]:
    """Lines of a Markdown table; the columns at the indexes ``right_aligned`` align right.

    Cells are written as given: escape a ``|`` in them with :func:`markdown_escape`.
    """
    rule = ["---:" if i in right_aligned else "---" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(rule) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def markdown_escape(text: str) -> str:
    """``text`` with each ``|`` escaped, to stay inside its Markdown table cell."""
    return text.replace("|", "\\|")


TEXT_COLUMNS = ("resource", "kind", "label", "src", "dst", "op", "phase", "link")
"""Columns read as text, even when every cell is empty or looks like a number."""


def file_problem(path: Path, message: str, allowed: str = "") -> ScenarioError:
    """The error for a file of a run folder that is missing or cannot be read."""
    return ScenarioError(Problem(str(path), message, allowed))


def read_csv_table(path: str | os.PathLike[str], columns: Sequence[str]) -> Any:
    """A CSV file with (at least) ``columns`` as a pandas DataFrame; text columns
    (:data:`TEXT_COLUMNS`) stay text.

    A missing or unreadable file, or a missing column, is a ScenarioError naming the file.
    """
    import pandas as pd

    path = Path(path)
    try:
        frame = pd.read_csv(path, dtype=dict.fromkeys(TEXT_COLUMNS, str))
    except FileNotFoundError:
        raise file_problem(path, "missing (is this a clustersim run folder?)") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise file_problem(path, f"cannot be read as CSV: {exc}") from None
    return with_columns(frame, path, columns)


def with_columns(frame: Any, path: Path, columns: Sequence[str]) -> Any:
    """``frame`` when it has every one of ``columns``; else a ScenarioError naming the file."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise file_problem(
            path, f"missing column(s) {', '.join(missing)}", "columns " + ", ".join(columns)
        )
    return frame
