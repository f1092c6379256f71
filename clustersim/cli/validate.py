"""``clustersim validate``: check scenario files without running them."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..errors import ClustersimError
from .base import EXIT_BAD_INPUT, EXIT_OK, Command, add_max_events_argument, out


class ValidateCommand(Command):
    name = "validate"
    order = 20
    help = "check scenario files without running them"
    description = (
        "Check each FILE: YAML, keys, units, devices named in the workload, and the run's "
        "estimated work (events) against its limit. Exit 2 if any is invalid or too large."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("files", metavar="FILE", nargs="+", help="scenario YAML files")
        add_max_events_argument(parser)

    def run(self, args: argparse.Namespace) -> int:
        from ..api import prepare

        bad = 0
        for path in args.files:
            try:
                prepared = prepare(path, max_events=args.max_events)
            except ClustersimError as exc:
                bad += 1
                print(str(exc), file=sys.stderr)
                continue
            topo = prepared.topology.describe()
            out(
                f"ok  {path}: {topo.get('devices', 0)} devices, {topo.get('links', 0)} links; {prepared.strategy.describe()}"
            )
            out(f"    {_work_line(prepared)}")
        if bad:
            print(f"{bad} of {len(args.files)} file(s) invalid", file=sys.stderr)
            return EXIT_BAD_INPUT
        return EXIT_OK


def _work_line(prepared: Any) -> str:
    """``estimated work: 1.2 M events (...), limit 20,000,000 events``."""
    from ..budget import limit_text

    work = prepared.work
    limit = limit_text(prepared.strategy.max_events)
    if work is None:
        return f"estimated work: unknown (this workload does not estimate it), limit {limit}"
    return f"estimated work: {work.describe(output=True)}, limit {limit}"
