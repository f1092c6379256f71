"""``links.csv``: every link that carried traffic, busiest first.

One row per row of :func:`clustersim.metrics.link_table`, columns
:data:`LINK_COLUMNS`: the link's name, its nominal bandwidth (bytes/s), the
bytes it carried, the seconds it had a flow (``busy_s``) and that as a share
of the run (``busy_fraction``), bytes / (bandwidth x makespan)
(``utilisation``) and the most flows it carried at once (``peak_flows``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

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


def links_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    """The text of ``links.csv``: floats by ``repr``; a link name holding a comma, a quote
    or a line break is quoted (:func:`~clustersim.outputs.tables.csv_text`)."""
    return csv_text(LINK_COLUMNS, ([cell(r[c]) for c in LINK_COLUMNS] for r in rows))


def read_links(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Rows of a ``links.csv``."""
    frame = read_csv_table(path, LINK_COLUMNS)
    return frame.to_dict("records")
