"""``links.csv``: every link that carried traffic, busiest first.

One row per row of :func:`clustersim.metrics.link_table`, columns
:data:`LINK_COLUMNS`: the link's name, its nominal bandwidth (bytes/s), the
bytes it carried, the seconds it had a flow (``busy_s``) and that as a share
of the run (``busy_fraction``), bytes / (bandwidth x makespan)
(``utilisation``) and the most flows it carried at once (``peak_flows``).

Folded (:func:`fold_links`; ``--links folded``, the default on a cluster of 4,096 devices
or more), links whose rows are equal in every column but the name are written once, as
the first of them, with one more column: :data:`COUNT_COLUMN`, the links the row stands
for (a 16,384-GPU cluster's 99,328 busy links are 44 such rows).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from ..metrics.link_table import LinkTable
from .tables import cell, csv_text, read_csv_table

LINK_COLUMNS = (
    "link",
    "bandwidth_Bps",
    "bytes",
    "busy_s",
    "busy_fraction",
    "utilisation",
    "peak_flows",
)
"""Columns of ``links.csv``, in order."""
COUNT_COLUMN = "links"
"""The column a folded ``links.csv`` adds: how many links each row stands for."""


def fold_links(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rows equal in every column but ``link`` merged into their first (in the table's
    order, busiest first), each with :data:`COUNT_COLUMN`."""
    if isinstance(rows, LinkTable):  # its columns, grouped in numpy (800,000 rows at scale)
        return rows.fold(COUNT_COLUMN)
    first: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows:
        key = tuple(row[c] for c in LINK_COLUMNS[1:])
        found = first.get(key)
        if found is None:
            first[key] = {**{c: row[c] for c in LINK_COLUMNS}, COUNT_COLUMN: 1}
        else:
            found[COUNT_COLUMN] += 1
    return list(first.values())


def links_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    """The text of ``links.csv``: floats by ``repr``; a link name holding a comma, a quote
    or a line break is quoted (:func:`~clustersim.outputs.tables.csv_text`)."""
    columns = LINK_COLUMNS + ((COUNT_COLUMN,) if rows and COUNT_COLUMN in rows[0] else ())
    return csv_text(columns, ([cell(r[c]) for c in columns] for r in rows))


def read_links(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Rows of a ``links.csv`` (a folded one's with :data:`COUNT_COLUMN`)."""
    frame = read_csv_table(path, LINK_COLUMNS)
    return frame.to_dict("records")
