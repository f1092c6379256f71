"""The ``clustersim`` command line.

Each subcommand is a :class:`Command` subclass that registers itself by
defining ``name``; ``main`` builds the parser from the registry.  Bad input
(any :class:`~clustersim.errors.ClustersimError`) prints one clear message per
problem and exits with code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from . import __version__
from .errors import ClustersimError, SimulationError
from .units import format_bandwidth, format_size, format_time

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2

_COMMANDS: dict[str, type[Command]] = {}


class Command:
    """A subcommand: ``name``, one-line ``help``, its arguments and ``run``."""

    name: ClassVar[str]
    help: ClassVar[str]
    description: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            _COMMANDS[cls.name] = cls

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add this command's arguments to ``parser``."""

    def run(self, args: argparse.Namespace) -> int:
        """Do the work; return the exit code."""
        raise NotImplementedError


def _out(text: str = "") -> None:
    print(text, flush=True)


class _Progress:
    """Prints simulated time on stderr while a long run goes on (only on a terminal)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.started = time.monotonic()
        self.shown = False

    def __call__(self, now_s: float) -> None:
        if not self.enabled:
            return
        elapsed = time.monotonic() - self.started
        if elapsed < 1.0:
            return
        sys.stderr.write(
            f"\r  simulating... t = {format_time(now_s)} simulated, {elapsed:.0f} s wall"
        )
        sys.stderr.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\r" + " " * 72 + "\r")
            sys.stderr.flush()


class RunCommand(Command):
    name = "run"
    help = "simulate a scenario and write summary.json, timeline.csv and links.csv"
    description = (
        "Simulate SCENARIO and write DIR/summary.json, DIR/timeline.csv and DIR/links.csv "
        "(each written to a temporary name first, then moved into place). Prints a short summary."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("scenario", metavar="SCENARIO", help="scenario YAML file")
        parser.add_argument(
            "-o", "--output", metavar="DIR", help="output folder (default: reports/<scenario name>)"
        )
        parser.add_argument("--seed", type=int, help="override the scenario's seed")
        parser.add_argument(
            "-q", "--quiet", action="store_true", help="print only the output folder"
        )

    def run(self, args: argparse.Namespace) -> int:
        from .api import simulate
        from .scenario import load_scenario

        scenario = load_scenario(args.scenario)
        if args.seed is not None:
            scenario = scenario.model_copy(update={"seed": args.seed})
        progress = _Progress(sys.stderr.isatty() and not args.quiet)
        started = time.monotonic()
        try:
            result = simulate(scenario, progress=progress if progress.enabled else None)
        finally:
            progress.close()
        wall = time.monotonic() - started
        out_dir = Path(args.output) if args.output else Path("reports") / _safe_name(scenario.name)
        written = result.write(out_dir)
        if args.quiet:
            _out(str(out_dir))
        else:
            _print_summary(result, wall)
            _out(f"wrote {', '.join(str(p) for p in written)}")
        return EXIT_OK


def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "run"


def _print_summary(result: Any, wall_s: float) -> None:
    s = result.summary
    topo = result.topology.describe()
    _out(f"scenario  {s['scenario']} (seed {s['seed']}, workload {s['workload']})")
    _out(f"cluster   {topo.get('devices', 0)} devices, {topo.get('links', 0)} links")
    _out(f"makespan  {format_time(s['makespan_s'])}")
    engine = s["engine"]
    _out(
        f"engine    {engine['records']} records, {engine['flows_completed']} flows, "
        f"{engine['rate_recomputations']} rate recomputations in {wall_s:.2f} s wall"
    )
    if result.links:
        _out("busiest links:")
        for row in result.links[:5]:
            _out(
                f"  {row['link']:<48} {100 * row['utilisation']:6.1f}% of {format_bandwidth(row['bandwidth_Bps'])}, "
                f"{format_size(row['bytes'])}, peak {row['peak_flows']} flows"
            )


class ValidateCommand(Command):
    name = "validate"
    help = "check scenario files without running them"
    description = "Check each FILE: YAML, keys, units, devices named in the workload. Exit 2 if any is invalid."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("files", metavar="FILE", nargs="+", help="scenario YAML files")

    def run(self, args: argparse.Namespace) -> int:
        from .api import prepare

        bad = 0
        for path in args.files:
            try:
                prepared = prepare(path)
            except ClustersimError as exc:
                bad += 1
                print(str(exc), file=sys.stderr)
                continue
            topo = prepared.topology.describe()
            _out(
                f"ok  {path}: {topo.get('devices', 0)} devices, {topo.get('links', 0)} links; {prepared.strategy.describe()}"
            )
        if bad:
            print(f"{bad} of {len(args.files)} file(s) invalid", file=sys.stderr)
            return EXIT_BAD_INPUT
        return EXIT_OK


class SchemaCommand(Command):
    name = "schema"
    help = "print the JSON Schema of the scenario format"
    description = (
        "Print the JSON Schema of scenario files, for editors that check and complete YAML."
    )

    def run(self, args: argparse.Namespace) -> int:
        from .api import json_schema

        _out(json.dumps(json_schema(), indent=2))
        return EXIT_OK


class ListCommand(Command):
    name = "list"
    help = "list registered plugins (strategies)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("what", choices=["strategies", "commands"], help="what to list")

    def run(self, args: argparse.Namespace) -> int:
        if args.what == "commands":
            for name, cls in sorted(_COMMANDS.items()):
                _out(f"{name:<12} {cls.help}")
            return EXIT_OK
        from .strategies import registered_strategies

        for name, cls in registered_strategies().items():
            _out(f"{name:<12} {cls.description}")
        return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every registered command."""
    parser = argparse.ArgumentParser(
        prog="clustersim",
        description="Discrete-event simulator of distributed deep-learning training clusters.",
        epilog="Bad input exits with code 2 and a message naming the file, the key path and what is allowed.",
    )
    parser.add_argument("--version", action="version", version=f"clustersim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, cls in _COMMANDS.items():
        p = sub.add_parser(name, help=cls.help, description=cls.description or cls.help)
        p.set_defaults(_command=cls)
        cls().add_arguments(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``clustersim`` console script; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        return args._command().run(args)
    except SimulationError as exc:
        print(f"clustersim: simulation error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ClustersimError as exc:
        print(
            f"clustersim: error: {exc}" if "\n" not in str(exc) else f"clustersim: error:\n{exc}",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("clustersim: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
