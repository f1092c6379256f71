"""``clustersim golden``: record scenarios' key timings as golden files, or check runs
against them."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import ClustersimError, Problem, ScenarioError
from .base import (
    EXIT_FAILED,
    EXIT_OK,
    Command,
    add_limit_arguments,
    add_scheduler_argument,
    out,
)
from .overrides import add_override_arguments, override_settings
from .progress import notice


class GoldenCommand(Command):
    name = "golden"
    order = 90
    help = "record scenarios' key timings as golden files, or check runs against them"
    description = (
        "`golden record SCENARIO... --dir DIR` runs each scenario and writes DIR/<path with / "
        "as __>.json: iteration time, throughput, bubble fraction, collective times, peak "
        "activation memory, per-device breakdown and busiest link, with the clustersim version "
        "and the scenario file's SHA-256; with --set KEY=VALUE (or --network MODEL) every "
        "scenario runs with those overrides and the file records them. `golden check SCENARIO... --dir DIR [--rtol 0.01]` "
        "runs them again and prints metric, golden, now and relative change; exit 1 if any "
        "metric moved beyond its tolerance (per-metric globs in the file's `tolerances`), 2 on "
        "bad input. Check applies the overrides each golden file records. Without SCENARIO, "
        "check takes every golden file's `scenario_file`. Runs estimated longer than about "
        "10 s together (on the -j processes) are announced on stderr before they start."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="golden_action", metavar="ACTION")
        sub.required = True
        record = sub.add_parser("record", help="run scenarios and write their golden files")
        check = sub.add_parser("check", help="run scenarios and compare with their golden files")
        record.add_argument("scenarios", metavar="SCENARIO", nargs="+", help="scenario YAML files")
        check.add_argument(
            "scenarios",
            metavar="SCENARIO",
            nargs="*",
            help="scenario YAML files (default: the scenario_file of every golden in DIR)",
        )
        for p in (record, check):
            p.add_argument(
                "--dir",
                default="tests/golden",
                metavar="DIR",
                help="folder of golden files (default: tests/golden)",
            )
            p.add_argument(
                "-j",
                "--jobs",
                type=int,
                metavar="N",
                help="simulations at once, at least 1 (default: cores)",
            )
            add_scheduler_argument(p)
            add_limit_arguments(p)
        record.add_argument(
            "--rtol",
            type=float,
            help="default relative tolerance written into the files, a finite number >= 0 (0.01)",
        )
        check.add_argument(
            "--rtol",
            type=float,
            help="relative tolerance of metrics the file names no tolerance for, a finite "
            "number >= 0 (default: the file's rtol, 0.01)",
        )
        add_override_arguments(record)
        check.add_argument(
            "-v", "--verbose", action="store_true", help="show every metric, per device too"
        )

    def run(self, args: argparse.Namespace) -> int:
        from ..studies import golden
        from ..studies.dask_runner import check_scheduler

        if args.jobs is not None and args.jobs < 1:
            raise ScenarioError(Problem("-j", f"expected a whole number >= 1, got {args.jobs}"))
        check_scheduler(args.scheduler, args.jobs)
        run = {
            "max_events": args.max_events,
            "max_memory": args.max_memory,
            "scheduler": args.scheduler,
            "announce": notice,
        }
        if args.golden_action == "record":
            overrides = [s.text() for s in override_settings(args)]
            written = golden.record(
                args.scenarios, args.dir, args.rtol, args.jobs, overrides=overrides, **run
            )
            out(f"recorded {len(written)} golden file(s): {', '.join(str(p) for p in written)}")
            return EXIT_OK
        scenarios = args.scenarios or _golden_scenarios(args.dir)
        reports = golden.check(scenarios, args.dir, args.rtol, args.jobs, **run)
        for report in reports:
            _print_golden_report(report, args.verbose)
        failed = [r for r in reports if not r.passed]
        out(
            f"{len(failed)} of {len(reports)} scenario(s) changed beyond tolerance"
            if failed
            else f"all {len(reports)} scenario(s) match their golden timings"
        )
        return EXIT_FAILED if failed else EXIT_OK


def _golden_scenarios(golden_dir: str) -> list[str]:
    """The ``scenario_file`` of every golden file in ``golden_dir``."""
    from ..studies import golden

    files = list(golden.goldens_in(golden_dir))
    if not files:
        raise ClustersimError(f"{golden_dir}: no golden files (*.json) to check")
    names = [golden.load_golden(f).get("scenario_file") for f in files]
    missing = [str(f) for f, n in zip(files, names) if not isinstance(n, str)]
    if missing:
        raise ClustersimError(f"{missing[0]}: no scenario_file; name the scenarios to check")
    return names


def _print_golden_report(report: Any, verbose: bool) -> None:
    """Status line, notes and the metric table (timings and failures; every row if verbose)."""
    from ..studies.golden import report_lines

    for line in report_lines(report, all_rows=verbose):
        out(line)
