"""``clustersim import astra-sim``: write a scenario from ASTRA-sim's input files."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .base import EXIT_BAD_INPUT, EXIT_OK, Command, out


class ImportCommand(Command):
    name = "import"
    order = 95
    help = "write a scenario from another simulator's inputs (astra-sim)"
    description = (
        "Write a clustersim scenario from another simulator's input files. `import astra-sim` "
        "reads ASTRA-sim's network YAML (topology, npus_count, bandwidth, latency per "
        "dimension), system JSON (collective algorithms) and, with --workload, its Chakra "
        "traces PREFIX.{i}.et; it prints and writes into the scenario's header what mapped "
        "and what does not map. Exit 2 for unreadable or invalid inputs."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="source", metavar="SOURCE", required=True)
        astra = sub.add_parser(
            "astra-sim",
            help="ASTRA-sim's network YAML, system JSON and Chakra workload",
            description="Write a scenario from ASTRA-sim's inputs (analytical backend).",
        )
        astra.add_argument("--network", required=True, metavar="FILE", help="network YAML")
        astra.add_argument("--system", required=True, metavar="FILE", help="system JSON")
        astra.add_argument(
            "--workload",
            metavar="PREFIX",
            help="Chakra traces PREFIX.{i}.et, one per NPU, relative to the current folder "
            "(default: a 1 GiB all-reduce over every NPU, to replace)",
        )
        astra.add_argument(
            "-o", "--output", required=True, metavar="FILE", help="the scenario YAML to write"
        )

    def run(self, args: argparse.Namespace) -> int:
        from ..errors import ScenarioError
        from ..importers.astra_sim import scenario_from_astra_sim
        from ..outputs.atomic import write_atomic
        from ..scenario import parse_scenario

        target = Path(args.output)
        if target.is_dir():
            print(f"clustersim: error: -o {target}: is a folder, not a file", file=sys.stderr)
            return EXIT_BAD_INPUT
        workload = args.workload
        if workload is not None and not workload.strip():
            print("clustersim: error: --workload: empty (give the traces' prefix)", file=sys.stderr)
            return EXIT_BAD_INPUT
        if workload is not None and not Path(workload).is_absolute():
            workload = str(Path(workload).resolve())
        imported = scenario_from_astra_sim(Path(args.network), Path(args.system), workload)
        try:
            parse_scenario(imported.document, str(target))
        except ScenarioError as exc:  # an importer bug, or inputs beyond clustersim's limits
            print(f"clustersim: error: the imported scenario is not valid: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        text = imported.yaml_text(
            [args.network, args.system, *([args.workload] if args.workload else [])]
        )
        write_atomic(target, text)
        for line in imported.mapped:
            out(f"mapped      {line}")
        for line in imported.unmapped:
            out(f"not mapped  {line}")
        out(f"wrote {target}")
        return EXIT_OK
