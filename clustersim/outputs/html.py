"""``report.html``: one self-contained page per run folder.

:func:`write_report` reads a finished run folder (``summary.json``,
``timeline.csv`` or ``timeline.parquet``, ``links.csv``, ``devices.csv`` when summary.json
is folded and, when there, ``scenario.resolved.yaml``),
redraws the Gantt chart and renders ``templates/report.html.j2`` (Jinja2,
every value escaped): a header card with units (:mod:`.card`), the Gantt
chart (identical rows folded, ``x N``), the per-device table folded to its
top and bottom rows (every device's quantities in ``devices.csv``, written beside
the page: :mod:`.devices`), the link-utilisation heatmap (:mod:`.heatmap`), the busiest links
with units, activation memory, and the raw summary in a collapsed section.
Images are PNGs embedded in the page, so it opens without its folder.
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

from ..host import gc_paused
from ..metrics import Summary
from ..records import Record
from .atomic import write_atomic
from .card import DEVICE_HEADER, LINK_HEADER, device_rows, device_table, header_card, link_table
from .devices import DEVICES_CSV, device_bubbles, devices_csv
from .fold import simulated_workers
from .gantt import GanttData, gantt_figure, save_gantt
from .heatmap import ClusterContext, heatmap_figure, link_heatmap, read_cluster
from .paths import check_output_folder
from .plots import links_figure, memory_figure
from .run_folder import read_run_folder

TEMPLATE = "report.html.j2"
"""The page's template, in ``clustersim/outputs/templates`` (package data)."""
LIST_SHOWN = 12
"""Items of a list value shown in the raw summary table before ``... (N in all)``."""

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
    """Whether a cell reads as a number, perhaps with a unit (right-aligned)."""
    text = text.replace(", ", ",")
    return bool(re.fullmatch(r"[-+0-9.,e%]+|[-+]?[0-9][0-9.,e+-]* [A-Za-z/%-]+", text))


def _cells(rows: Iterable[Sequence[str]], numeric_from: int = 1) -> list[list[Cell]]:
    """Each text with whether it is aligned right: numbers from column ``numeric_from`` on."""
    return [[(c, i >= numeric_from and _numeric(c)) for i, c in enumerate(row)] for row in rows]


def _bubbles(summary: Summary, data: GanttData | None) -> dict[str, float | None]:
    """Each device's bubble (:func:`.devices.device_bubbles`), else the Gantt chart's."""
    drawn = dict(zip(data.rows, data.bubble)) if data else {}
    return {
        name: drawn.get(name) if value is None else value
        for name, value in device_bubbles(summary).items()
    }


def _device_rows(summary: Summary, data: GanttData | None) -> list[Any]:
    """The per-device rows (:func:`.card.device_rows`): the simulated workers only."""
    workers, _ = simulated_workers(summary)
    return device_rows(summary, _bubbles(summary, data), workers)


def _png(fig: Figure | None, png: bytes | None = None) -> str:
    if png is not None:
        return base64.b64encode(png).decode("ascii")
    return _png_base64(fig) if fig is not None else ""


def report_html(
    summary: Summary | Mapping[str, Any],
    records: Sequence[Record],
    links: Sequence[Mapping[str, Any]],
    gantt: Figure | None = None,
    context: ClusterContext | None = None,
    gantt_png: bytes | None = None,
) -> str:
    """The text of ``report.html`` (see the module docstring).

    ``summary``: the run's :class:`~clustersim.metrics.Summary` or a mapping of its keys;
    ``context``: the cluster and description of the scenario (the heatmap needs its
    topology); ``gantt_png``: the Gantt chart's PNG when already drawn (else drawn here)."""
    summary = Summary.of(summary)
    context = context or ClusterContext()
    if gantt is None and records:
        gantt = gantt_figure(records, summary)
    data = getattr(gantt, "gantt_data", None)
    workers, _ = simulated_workers(summary)
    devices, folded = device_table(_device_rows(summary, data))
    heatmap = link_heatmap(records, context.topology) if context.topology else None
    images = {
        "gantt": _png(gantt, gantt_png),
        "heatmap": _png(heatmap_figure(heatmap)) if heatmap else "",
        "links": _png(links_figure(links)),
        "memory": _png(memory_figure(summary)),
    }
    page = _environment().get_template(TEMPLATE)
    return page.render(
        name=str(summary.header.scenario or "run"),
        card=header_card(summary, context.description, context.cluster),
        images=images,
        gantt_rows=len(data.rows) if data else 0,
        devices=_cells(devices),
        device_header=DEVICE_HEADER,
        devices_folded=folded,
        devices_csv=DEVICES_CSV,
        left_out=sum(1 for d in summary.devices if workers and d not in workers),
        link_rows=_cells(link_table(links)),
        link_header=LINK_HEADER,
        heatmap_links=len(heatmap.links) if heatmap else 0,
        raw=_cells(_summary_rows(summary.as_dict())),
    )


@gc_paused()
def write_report(run_dir: str | os.PathLike[str], flag: str = "run folder") -> list[Path]:
    """Redraw ``gantt.png``/``gantt.svg``, write ``devices.csv`` (when the summary has
    per-device entries: :func:`.devices.devices_csv`) and ``report.html`` from a finished
    run folder.

    Reads the run folder (:func:`.run_folder.read_run_folder`: a folded summary is made
    whole from ``devices.csv``) and ``scenario.resolved.yaml`` (optional: the cluster, for
    the heatmap); a missing folder or file, or one that cannot be read, is a ScenarioError
    naming it, and so is a folder that cannot be written (at key path ``flag``), checked
    before drawing.  Each file is replaced on its own, atomically: the folder
    keeps the run's other files.  The garbage collector is paused meanwhile (a run's
    records, read back by the million, would be scanned by each collection).
    """
    out = Path(run_dir)
    run = read_run_folder(out)
    check_output_folder(out, flag, whole=False)
    summary = Summary.of(run.summary)
    written: list[Path] = []
    gantt, png = None, None
    if run.records:
        gantt = gantt_figure(run.records, summary)
        written += save_gantt(gantt, out)
        png = written[0].read_bytes()  # gantt.png, not drawn twice
    context = read_cluster(out)
    page = report_html(summary, run.records, run.links, gantt, context, png)
    table = devices_csv(run.summary)
    if table:
        written.append(write_atomic(out / DEVICES_CSV, table))
    written.append(write_atomic(out / "report.html", page))
    return written
