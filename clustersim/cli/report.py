"""``clustersim report``: redraw the Gantt chart and write report.html from a run folder."""

from __future__ import annotations

import argparse

from .base import EXIT_OK, Command, out


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
        "itself is kept: it is the run's folder)."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("run_dir", metavar="DIR", help="output folder of `clustersim run`")

    def run(self, args: argparse.Namespace) -> int:
        from ..outputs.html import write_report

        written = write_report(args.run_dir, flag="DIR")
        out(f"wrote {', '.join(str(p) for p in written)}")
        return EXIT_OK
