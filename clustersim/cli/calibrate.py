"""``clustersim calibrate SOURCE ...``: a node or GPU file in the catalog's format,
fitted to the measurements a user already has.

Each source of measurements is a :class:`CalibrationSource` subclass that registers itself
by defining ``name`` (``nccl-tests``: :mod:`.calibrate_nccl_tests`, a node file; ``profile``:
:mod:`.calibrate_profile`, a GPU file); the command builds one subcommand per registered
source, so a new one is one new module.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from ..errors import Problem, ScenarioError
from ..registry import Registered, Registry
from .base import EXIT_OK, Command, out

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ..hardware import Preset


def base_preset(name: str, kind: str) -> Preset:
    """The base preset (``kind``: ``node`` or ``gpu``) a calibration starts from, its
    problems at ``--base``."""
    from ..hardware import find

    try:
        return find(name, kind, Path.cwd())
    except ScenarioError as exc:
        raise ScenarioError(
            [Problem("--base", p.message, p.allowed) for p in exc.problems], exc.source
        ) from None


def file_arguments(
    parser: argparse.ArgumentParser, written: str, base: str, base_help: str, hold_out_help: str
) -> None:
    """The arguments every source takes first: ``-o`` (the ``written`` file), ``--base``
    (metavar ``base``) and ``--hold-out``, with the source's own help for the last two."""
    parser.add_argument(
        "-o", "--output", required=True, metavar="FILE", help=f"the {written} file to write (YAML)"
    )
    parser.add_argument("--base", metavar=base, help=base_help)
    parser.add_argument(
        "--hold-out",
        default="default",
        metavar="SPEC",
        help=f"{hold_out_help} (default: default)",
    )


def plot_arguments(parser: argparse.ArgumentParser, plotted: str, named: str) -> None:
    """``--plot`` (of ``plotted``) and ``--name`` (of the ``named`` in the file)."""
    parser.add_argument(
        "--plot",
        metavar="FILE.png",
        help=f"the plot of {plotted} (default: the output file with .png)",
    )
    parser.add_argument("--name", help=f"the {named}'s name in the file (default: the file's)")


def checked_outputs(args: argparse.Namespace) -> tuple[Path, Path]:
    """The file (``-o``) and the plot (``--plot``, default beside it) a source writes, each
    checked to be writable before any work."""
    from ..outputs.paths import check_output_file

    output = Path(args.output)
    plot = Path(args.plot) if args.plot else output.with_suffix(".png")
    check_output_file(output, "-o")
    check_output_file(plot, "--plot")
    return output, plot


def write_outputs(
    output: Path, text: str, lines: list[str], figure: Figure, plot: Path, key: str
) -> int:
    """Print ``lines``, write ``text`` to ``output`` and ``figure`` to ``plot`` (each
    atomically, their folders made where missing) and say how the file is used (at
    scenario key ``key``); the exit code."""
    from ..outputs.atomic import save_figure, write_atomic

    for line in lines:
        out(line)
    for path in (output, plot):  # checked makeable before any work (checked_outputs)
        path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(output, text)
    save_figure(figure, plot)
    out("")
    out(f"wrote {output} ({key}: {{preset: ./{output.name}}}) and {plot}")
    return EXIT_OK


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
        builtins=("clustersim.cli.calibrate_nccl_tests", "clustersim.cli.calibrate_profile"),
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
    help = "fit a node or GPU file to your own cluster's measurements (nccl-tests, profiler)"
    description = (
        "Write a hardware file in the catalog's format fitted to measurements of your own "
        "cluster, so that scenarios run on it (cluster.node: {preset: ./my_node.yaml}, "
        "cluster.node.gpu: {preset: ./my_gpu.yaml}). "
        "`calibrate nccl-tests LOG... -o my_node.yaml` reads nccl-tests' output and fits the "
        "node's link bandwidths and latencies to the measured times on clustersim's own "
        "collective model; `calibrate profile TRACE.json -o my_gpu.yaml` reads a PyTorch "
        "profiler trace and fits the GPU's matrix-product curve to its kernel times (with "
        "--scenario RUN.yaml, the run it is a step of, also the memory efficiency of its "
        "element-wise kernels). Each "
        "prints every point against its prediction and the error on points held out of the "
        "fit. Bad input exits with code 2."
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
