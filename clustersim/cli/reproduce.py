"""``clustersim reproduce``: run the shipped validation suite and say how close it comes."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import ClustersimError
from .base import EXIT_FAILED, EXIT_OK, Command, out
from .progress import QUIET_HELP, Progress, wanted

DEFAULT_OUTPUT = "reports/reproduce"
REPORT_NAME = "reproduce.md"


class ReproduceCommand(Command):
    name = "reproduce"
    order = 95
    help = "run the shipped validation suite against published numbers"
    description = (
        "Run the validation suite shipped with clustersim: the seeds' worked examples "
        "(D1-D3, N1-N4), the alpha-beta formulas of ring all-reduce (R1-R3), the pipeline "
        "bubble formulas (B1-B5), memory (Korthikanti et al.'s activation table, ZeRO's "
        "model-state tables Z0-Z3 and Table 1, measured peaks of real runs), the rows of "
        "Megatron-LM's Table 1, DeepSeek-V3's training cost, nccl-tests' bus bandwidth on DGX "
        "nodes, "
        "published measurements of real training runs built from the hardware catalog "
        "(production) and reference max-min fair sharing cases. Print one row per case "
        "(case, source, expected, got, error, tolerance, pass/fail), 'N of M cases pass' and "
        "each family's mean and largest error (the production family's mean must stay within "
        "10%), the mean of a family's held-out and calibration cases apart, and write the "
        "same to DIR/reproduce.md. Exit codes: 0 every case and family target passes, 1 "
        "otherwise, 2 bad input (an --only pattern that matches no case, an output folder "
        "that cannot be written)."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "-o",
            "--output",
            metavar="DIR",
            default=DEFAULT_OUTPUT,
            help=f"folder of {REPORT_NAME}, made if missing; only {REPORT_NAME} is replaced "
            f"(default {DEFAULT_OUTPUT}/)",
        )
        parser.add_argument(
            "--only",
            metavar="PATTERN",
            action="append",
            default=[],
            help="run only the cases whose id or family matches the shell-style PATTERN, "
            "case-insensitive (e.g. 'B*', 'memory', 'megatron-*'); repeat to add more",
        )
        parser.add_argument("-q", "--quiet", action="store_true", help=QUIET_HELP)

    def run(self, args: argparse.Namespace) -> int:
        from .. import validation
        from ..outputs.atomic import write_atomic
        from ..outputs.paths import check_output_file

        report = check_output_file(Path(args.output) / REPORT_NAME, "-o")
        cases = validation.select(validation.all_cases(), args.only)
        if not cases:
            families = ", ".join(validation.FAMILIES)
            raise ClustersimError(
                f"--only: {', '.join(args.only)} matches no case "
                f"(allowed: a case id such as D1 or B2-bubble, or a family: {families})"
            )
        progress = Progress(wanted(args.quiet), "reproduce", unit="case")
        try:
            outcomes = validation.run(cases, progress)
        finally:
            progress.close()
        out(validation.table(outcomes))
        out(validation.verdict(outcomes))
        for line in validation.family_lines(outcomes):
            out(line)
        report.parent.mkdir(parents=True, exist_ok=True)
        out(f"wrote {write_atomic(report, validation.markdown(outcomes))}")
        return EXIT_OK if validation.passed(outcomes) else EXIT_FAILED
