"""``clustersim report``: redraw the Gantt chart and write report.html from a run folder."""

from __future__ import annotations

import argparse
from pathlib import Path

from .base import EXIT_OK, Command, out
from .headline import headline


class ReportCommand(Command):
    name = "report"
    order = 80
    help = "redraw the Gantt chart and write report.html from a finished run folder"
    description = (
        "Read DIR/summary.json, DIR/timeline.csv and DIR/links.csv of a finished run (nothing "
        "is simulated again), redraw DIR/gantt.png and DIR/gantt.svg and write DIR/report.html: "
        "summary table, per-device breakdown, Gantt chart, activation memory and link "
        "utilisation plots. A missing or unreadable file, or a DIR that cannot be written, "
        "exits 2 naming it. Each of the three files is replaced on its own, atomically (DIR "
        "itself is kept: it is the run's folder). Then prints the lines to read first: the "
        "iteration time, the bubble (against the schedule's theory), the memory peak against "
        "capacity, and where the page and the chart are."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("run_dir", metavar="DIR", help="output folder of `clustersim run`")

    def run(self, args: argparse.Namespace) -> int:
        from ..outputs.html import write_report

        written = write_report(args.run_dir, flag="DIR")
        out(f"wrote {', '.join(str(p) for p in written)}")
        for line in _headline(Path(args.run_dir) / "summary.json"):
            out(line)
        page = [p for p in written if p.name == "report.html"]
        gantt = [p for p in written if p.name == "gantt.png"]
        out(f"report    {page[0]}" + (f"; Gantt chart {gantt[0]}" if gantt else ""))
        return EXIT_OK


def _headline(path: Path) -> list[str]:
    """The run's iteration, bubble and memory lines (:func:`.headline.headline`); none for
    a summary.json clustersim did not write whole (an older or edited one: the page reads it
    leniently, these lines would guess)."""
    from ..metrics import Summary, SummaryFormatError
    from ..outputs.run_folder import read_summary

    try:
        return headline(Summary.from_dict(read_summary(path)))
    except SummaryFormatError:
        return []
