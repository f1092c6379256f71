"""The ``clustersim`` command line.

Each subcommand is a :class:`~clustersim.cli.base.Command` subclass in its own
module (``cli/run.py``, ``cli/plan.py``, ``cli/choose.py``, ...) that registers itself by
defining ``name``; ``main`` builds the parser from the registry.  Bad input
(any :class:`~clustersim.errors.ClustersimError`) prints one clear message per
problem and exits with code 2, never a traceback.  Output paths are checked
before the work (code 2 too); an output that cannot be written after the work
(:class:`~clustersim.errors.WriteError`: disk full, ...) or any other
:class:`OSError` exits with code 1 and one line; Ctrl-C with code 130.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ..errors import ClustersimError, SimulationError, WriteError
from ..registry import changes
from .base import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, Command, build_parser

# Importing a command's module registers the command.
from .calibrate import CalibrateCommand
from .choose import ChooseCommand
from .collective import CollectiveCommand
from .compare import CompareCommand
from .golden import GoldenCommand
from .import_configs import ImportCommand
from .list import ListCommand
from .plan import PlanCommand
from .report import ReportCommand
from .reproduce import ReproduceCommand
from .run import RunCommand
from .schema import SchemaCommand
from .validate import ValidateCommand

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_FAILED",
    "EXIT_OK",
    "CalibrateCommand",
    "ChooseCommand",
    "CollectiveCommand",
    "Command",
    "CompareCommand",
    "GoldenCommand",
    "ImportCommand",
    "ListCommand",
    "PlanCommand",
    "ReportCommand",
    "ReproduceCommand",
    "RunCommand",
    "SchemaCommand",
    "ValidateCommand",
    "build_parser",
    "main",
]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``clustersim`` console script; returns the exit code."""
    args = _parser().parse_args(argv)
    try:
        return args._command().run(args)
    except WriteError as exc:
        print(f"clustersim: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
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
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"clustersim: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAILED


_PARSER: list[tuple[int, argparse.ArgumentParser]] = []
"""The parser :func:`main` uses and :func:`clustersim.registry.changes` when it was built:
kept while no registry changes (a program that calls ``main`` many times, a test suite or
a notebook, builds it once; parsing changes nothing in it)."""


def _parser() -> argparse.ArgumentParser:
    """:func:`build_parser`, built again only when a registry's entries have changed (the
    parser lists commands, network models and calibration sources)."""
    if _PARSER and _PARSER[0][0] == changes():
        return _PARSER[0][1]
    parser = build_parser()  # loads the registries it reads first
    _PARSER[:] = [(changes(), parser)]
    return parser
