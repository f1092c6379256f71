"""``clustersim calibrate SOURCE ...``: a node (or, later, GPU) file in the catalog's format,
fitted to the measurements a user already has.

Each source of measurements is a :class:`CalibrationSource` subclass that registers itself
by defining ``name`` (``nccl-tests``: :mod:`.calibrate_nccl_tests`); the command builds one
subcommand per registered source, so a new one (a profiler trace) is one new module.
"""

from __future__ import annotations

import argparse
from typing import ClassVar

from ..registry import Registered, Registry
from .base import Command


def _source_line(name: str, source: type[CalibrationSource]) -> str:
    return f"{name:<12} {source.help}"


class CalibrationSource(Registered):
    """One kind of measurement ``clustersim calibrate`` reads: ``name``, one-line ``help``,
    its arguments and ``run``."""

    registry: ClassVar[Registry[type[CalibrationSource]]] = Registry(
        "calibrations",
        "calibration source",
        sort=True,
        describe=_source_line,
        builtins=("clustersim.cli.calibrate_nccl_tests",),
    )
    name: ClassVar[str]
    help: ClassVar[str]
    description: ClassVar[str] = ""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add this source's arguments to its subcommand's ``parser``."""

    def run(self, args: argparse.Namespace) -> int:
        """Calibrate; return the exit code."""
        raise NotImplementedError


class CalibrateCommand(Command):
    name = "calibrate"
    order = 60
    help = "fit a node file to your own cluster's measurements (nccl-tests logs)"
    description = (
        "Write a hardware file in the catalog's format fitted to measurements of your own "
        "cluster, so that scenarios run on it (cluster.node: {preset: ./my_node.yaml}). "
        "`calibrate nccl-tests LOG... -o my_node.yaml` reads nccl-tests' output and fits the "
        "node's link bandwidths and latencies to the measured times on clustersim's own "
        "collective model; it prints every point against its prediction and the error on "
        "points held out of the fit. Bad input exits with code 2."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="calibration", metavar="SOURCE", required=True)
        for name, source in CalibrationSource.registry.entries().items():
            child = sub.add_parser(
                name, help=source.help, description=source.description or source.help
            )
            child.set_defaults(_source=source)
            source().add_arguments(child)

    def run(self, args: argparse.Namespace) -> int:
        return args._source().run(args)
