"""``clustersim compare``: run scenarios over a grid of values and compare one metric."""

from __future__ import annotations

import argparse

from ..errors import Problem, ScenarioError
from .base import EXIT_OK, Command, add_limit_arguments, add_scheduler_argument, out
from .overrides import add_override_arguments, override_settings
from .progress import QUIET_NOTICE_HELP, Progress, notice, wanted


class CompareCommand(Command):
    name = "compare"
    order = 60
    help = "run scenarios over a grid of values and compare one summary metric"
    description = (
        "Simulate every SCENARIO for every value of the --set key paths (several --set make a "
        "grid; --network MODEL is --set network.model=MODEL), in parallel on local cores or "
        "on a Dask cluster (--scheduler), and write DIR/compare.csv, DIR/compare.md, "
        "DIR/compare.png and DIR/compare.svg (the metric against the first swept key, one "
        "line per scenario); DIR is checked before simulating and replaced as a unit. "
        "The metric is a top-level numeric key of summary.json (default iteration_time_s; "
        "scenarios without iterations show makespan_s, and the table says so). Simulations "
        "estimated longer than about 10 s together (on the -j processes) are announced on "
        "stderr before they start, with what shortens them."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("-q", "--quiet", action="store_true", help=QUIET_NOTICE_HELP)
        parser.add_argument("scenarios", metavar="SCENARIO", nargs="+", help="scenario YAML files")
        add_override_arguments(parser, sweep=True)
        parser.add_argument(
            "--metric",
            default="iteration_time_s",
            help="summary key to compare (default: iteration_time_s)",
        )
        parser.add_argument(
            "-j",
            "--jobs",
            type=int,
            metavar="N",
            help="simulations run at once, at least 1 (default: number of cores)",
        )
        add_scheduler_argument(parser)
        parser.add_argument(
            "-o",
            "--output",
            metavar="DIR",
            required=True,
            help="output folder, replaced as a whole; refused if it holds files clustersim "
            "does not write",
        )
        add_limit_arguments(parser)

    def run(self, args: argparse.Namespace) -> int:
        from ..outputs.paths import check_output_folder
        from ..studies import sweep
        from ..studies.dask_runner import check_scheduler

        check_output_folder(args.output, "-o")
        if args.jobs is not None and args.jobs < 1:
            raise ScenarioError(Problem("-j", f"expected a whole number >= 1, got {args.jobs}"))
        check_scheduler(args.scheduler, args.jobs)
        settings = override_settings(args, sweep=True)
        jobs = sweep.build_jobs(args.scenarios, settings, args.max_events, args.max_memory)
        if not args.quiet:
            notice(sweep.jobs_notice(jobs, args.jobs, args.scheduler))
        progress = Progress(wanted(args.quiet), "compare")
        try:
            results = sweep.run_jobs(jobs, args.jobs, progress, args.scheduler)
        finally:
            progress.close()
        rows = sweep.table_rows(jobs, results, args.metric)
        keys = [s.key for s in settings]
        written = sweep.write_outputs(rows, args.output, keys, args.metric, flag="-o")
        out(f"{len(jobs)} simulation(s) of {len(args.scenarios)} scenario(s)")
        out(f"wrote {', '.join(str(p) for p in written)}")
        return EXIT_OK
