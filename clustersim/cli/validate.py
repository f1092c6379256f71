"""``clustersim validate``: check scenario files without running them."""

from __future__ import annotations

import argparse
import sys

from ..errors import ClustersimError
from .base import EXIT_BAD_INPUT, EXIT_OK, Command, out


class ValidateCommand(Command):
    name = "validate"
    order = 20
    help = "check scenario files without running them"
    description = "Check each FILE: YAML, keys, units, devices named in the workload. Exit 2 if any is invalid."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("files", metavar="FILE", nargs="+", help="scenario YAML files")

    def run(self, args: argparse.Namespace) -> int:
        from ..api import prepare

        bad = 0
        for path in args.files:
            try:
                prepared = prepare(path)
            except ClustersimError as exc:
                bad += 1
                print(str(exc), file=sys.stderr)
                continue
            topo = prepared.topology.describe()
            out(
                f"ok  {path}: {topo.get('devices', 0)} devices, {topo.get('links', 0)} links; {prepared.strategy.describe()}"
            )
        if bad:
            print(f"{bad} of {len(args.files)} file(s) invalid", file=sys.stderr)
            return EXIT_BAD_INPUT
        return EXIT_OK
