"""``report.html``: one self-contained page per run folder.

:func:`write_report` reads a finished run folder (``summary.json``,
``timeline.csv``, ``links.csv``), redraws the Gantt chart and renders
``templates/report.html.j2`` (Jinja2, every value escaped): the summary's
top-level values, the per-device breakdown (compute, communication, exposed
communication, idle, in ms, and the bubble), then the Gantt chart, activation
memory and the busiest links as PNG images embedded in the page.
"""

from __future__ import annotations

import base64
import io
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from matplotlib.figure import Figure

from ..metrics import DeviceTimes, Summary
from ..records import Record
from .atomic import write_atomic
from .gantt import GanttData, as_fraction, gantt_figure, save_gantt
from .paths import check_output_folder
from .plots import links_figure, memory_figure
from .run_folder import read_run_folder

TEMPLATE = "report.html.j2"
"""The page's template, in ``clustersim/outputs/templates`` (package data)."""
DEVICE_HEADER = (
    "device",
    "compute (ms)",
    "communication (ms)",
    "exposed comm. (ms)",
    "idle (ms)",
    "bubble",
)
DEVICE_TIMES = ("compute_s", "communication_s", "exposed_communication_s", "idle_s")
"""Keys of a summary's ``devices`` rows shown (in ms) in the per-device table."""
LIST_SHOWN = 12
"""Items of a list value shown in the summary table before ``... (N in all)``."""

Cell = tuple[str, bool]
"""A table cell: its text, and whether it reads as a number (aligned right)."""


def _environment() -> Environment:
    return Environment(
        loader=PackageLoader("clustersim.outputs", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        keep_trailing_newline=True,
    )


def _png_base64(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list):
        shown = ", ".join(_cell(v) for v in value[:LIST_SHOWN])
        return shown + (f", ... ({len(value)} in all)" if len(value) > LIST_SHOWN else "")
    return str(value)


def _summary_rows(summary: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Top-level scalars (and short lists of scalars) of the summary."""
    rows = []
    for key, value in summary.items():
        if isinstance(value, (str, int, float, bool)) or (
            isinstance(value, list) and all(isinstance(v, (int, float, str)) for v in value)
        ):
            rows.append((key, _cell(value)))
    return rows


def _numeric(text: str) -> bool:
    """Whether a cell reads as a number (right-aligned)."""
    return bool(re.fullmatch(r"[-+0-9.,e%]+", text.replace(", ", ",")))


def _cells(rows: Iterable[Sequence[str]], numeric_from: int = 1) -> list[list[Cell]]:
    """Each text with whether it is aligned right: numbers from column ``numeric_from`` on."""
    return [[(c, i >= numeric_from and _numeric(c)) for i, c in enumerate(row)] for row in rows]


def _device_rows(summary: Summary, data: GanttData | None) -> list[list[str]]:
    bubble = dict(zip(data.rows, data.bubble)) if data else {}
    given = summary.strategy.device_bubbles()
    rows = []
    for name, row in summary.devices.items():
        if not isinstance(row, DeviceTimes):
            continue
        value = as_fraction(given.get(name))
        value = bubble.get(name) if value is None else value
        rows.append(
            [name]
            + [f"{1e3 * float(getattr(row, k) or 0.0):.4g}" for k in DEVICE_TIMES]
            + ["" if value is None else f"{100 * value:.1f}%"]
        )
    return rows


def report_html(
    summary: Summary | Mapping[str, Any],
    records: Sequence[Record],
    links: Sequence[Mapping[str, Any]],
    gantt: Figure | None = None,
) -> str:
    """The text of ``report.html``: summary, per-device table, Gantt, memory and link plots.

    ``summary``: the run's :class:`~clustersim.metrics.Summary` or a mapping of its keys."""
    summary = Summary.of(summary)
    rows = _summary_rows(summary.as_dict())
    tables = [{"heading": "Summary", "header": ("key", "value"), "rows": rows}]
    if gantt is None and records:
        gantt = gantt_figure(records, summary)
    device_rows = _device_rows(summary, getattr(gantt, "gantt_data", None))
    if device_rows:
        tables.append({"heading": "Per device", "header": DEVICE_HEADER, "rows": device_rows})
    figures = [
        ("Gantt chart", gantt, "gantt.svg"),
        ("Activation memory", memory_figure(summary), ""),
        ("Links", links_figure(links), "links.csv"),
    ]
    page = _environment().get_template(TEMPLATE)
    return page.render(
        name=str(summary.header.scenario or "run"),
        tables=[{**t, "rows": _cells(t["rows"])} for t in tables],
        figures=[
            {"heading": heading, "link": link, "png": _png_base64(fig), "wide": fig is gantt}
            for heading, fig, link in figures
            if fig is not None
        ],
    )


def write_report(run_dir: str | os.PathLike[str], flag: str = "run folder") -> list[Path]:
    """Redraw ``gantt.png``/``gantt.svg`` and write ``report.html`` from a finished run folder.

    Reads ``summary.json``, ``timeline.csv`` and ``links.csv``; a missing
    folder or file, or one that cannot be read, is a ScenarioError naming it,
    and so is a folder that cannot be written (at key path ``flag``), checked
    before drawing.  Each file is replaced on its own, atomically: the folder
    keeps the run's other files.
    """
    out = Path(run_dir)
    run = read_run_folder(out)
    check_output_folder(out, flag, whole=False)
    written: list[Path] = []
    gantt = None
    if run.records:
        gantt = gantt_figure(run.records, run.summary)
        written += save_gantt(gantt, out)
    page = report_html(run.summary, run.records, run.links, gantt)
    written.append(write_atomic(out / "report.html", page))
    return written
