"""Gantt charts, plots and report.html moved to :mod:`clustersim.outputs`; these names stay
importable here (``clustersim report`` and ``clustersim.report.read_timeline`` keep working)."""

from .outputs.atomic import save_figure
from .outputs.gantt import (
    COLOURS,
    COMM_LANE,
    COMPUTE_LANE,
    KINDS,
    LEGEND,
    MAX_BOXES,
    MAX_ROWS,
    MAX_TEXT_LABELS,
    Box,
    GanttData,
    box_kind,
    draw_gantt,
    gantt_counts,
    gantt_data,
    gantt_figure,
    write_gantt,
)
from .outputs.html import report_html, write_report
from .outputs.links import read_links
from .outputs.plots import BUSIEST_LINKS, links_figure, memory_figure, memory_peaks, memory_series
from .outputs.run_folder import read_summary
from .outputs.timeline import read_timeline

__all__ = [
    "BUSIEST_LINKS",
    "COLOURS",
    "COMM_LANE",
    "COMPUTE_LANE",
    "KINDS",
    "LEGEND",
    "MAX_BOXES",
    "MAX_ROWS",
    "MAX_TEXT_LABELS",
    "Box",
    "GanttData",
    "box_kind",
    "draw_gantt",
    "gantt_counts",
    "gantt_data",
    "gantt_figure",
    "links_figure",
    "memory_figure",
    "memory_peaks",
    "memory_series",
    "read_links",
    "read_summary",
    "read_timeline",
    "report_html",
    "save_figure",
    "write_gantt",
    "write_report",
]
