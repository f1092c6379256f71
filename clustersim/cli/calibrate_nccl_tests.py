"""``clustersim calibrate nccl-tests LOG... -o my_node.yaml``: a node file fitted to nccl-tests
logs (:mod:`clustersim.calibrate`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import Problem, ScenarioError
from .base import out
from .calibrate import (
    CalibrationSource,
    base_preset,
    checked_outputs,
    file_arguments,
    plot_arguments,
    write_outputs,
)
from .progress import QUIET_HELP, Progress, notice, wanted


class NcclTestsSource(CalibrationSource):
    name = "nccl-tests"
    help = "a node file from nccl-tests logs (all_reduce_perf, all_gather_perf, ...)"
    description = (
        "Read nccl-tests' own output (one file or many; all_reduce_perf, all_gather_perf, "
        "reduce_scatter_perf, alltoall_perf, broadcast_perf, reduce_perf; sendrecv_perf is read "
        "but clustersim has no such operation to fit it with), fit the node's figures -- NVLink "
        "(or PCIe) bandwidth and latency from logs of one node, NIC bandwidth and latency from "
        "logs over several nodes, the NVLink SHARP throughput where all-reduce ran it -- to the "
        "measured times (a size's: the faster of its out-of-place and in-place columns) by "
        "least squares on clustersim's own collective model, and write them "
        "as a node file in the catalog's format, each fitted number citing its log and rows. "
        "Figures the logs cannot determine keep the --base node's values, and the file and the "
        "output say why. Prints every point against its prediction, the error on the points "
        "held out of the fit, and writes a plot of measured and predicted bus bandwidth over "
        "size. Sizes predicted more than 10% off whose log does not say which algorithm NCCL "
        "ran there are named, with how to make NCCL say it (NCCL_DEBUG_SUBSYS=TUNING). "
        "Exit 2 for a file that is not nccl-tests output, a row whose #wrong is not 0, a "
        "log of one size only, a run on another number of GPUs per node than the base node."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        from ..calibrate.logs import TOOLS

        parser.add_argument("logs", nargs="+", metavar="LOG", help="nccl-tests output files")
        file_arguments(
            parser,
            "node",
            "NODE",
            "catalog node (clustersim list nodes) or node file whose figures the fit "
            "starts from and which the logs cannot determine (default: the catalog node of the "
            "GPUs the logs name: dgx-a100 for A100, dgx-h100 for H100, ...)",
            "points left out of the fit to judge it: default (the largest size of each "
            "log and every other size), none, a fraction from 0 to 1, or a size range MIN:MAX "
            "such as 1GiB:16GiB",
        )
        parser.add_argument(
            "--check",
            action="append",
            default=[],
            metavar="LOG",
            help="a log predicted but never fitted (another node count, say; one size is "
            "enough); repeatable",
        )
        parser.add_argument(
            "--op",
            choices=sorted(TOOLS),
            help="the nccl-tests tool of logs that do not say which ran (all_gather and "
            "alltoall print alike)",
        )
        parser.add_argument(
            "--nics",
            type=int,
            metavar="N",
            help="NICs per node, where the logs' NCCL_DEBUG lines do not list them (default: "
            "the base node's)",
        )
        parser.add_argument(
            "--model",
            choices=("flow", "analytical"),
            default="flow",
            help="clustersim's network model the fit and the predictions use; use the same "
            "network.model in the scenarios that run on the file (default: flow, a scenario's "
            "default; analytical fits in seconds)",
        )
        plot_arguments(parser, "measured and predicted bus bandwidth", "node")
        parser.add_argument("-q", "--quiet", action="store_true", help=QUIET_HELP)

    def run(self, args: argparse.Namespace) -> int:
        from ..calibrate import base as bases
        from ..calibrate import calibrate, points, read_logs
        from ..calibrate.fit import sweeps_estimate
        from ..calibrate.report import plot_figure, summary_lines, table_lines

        output, plot = checked_outputs(args)
        if args.nics is not None and args.nics < 1:
            raise ScenarioError(Problem("--nics", f"must be 1 or more, got {args.nics}"))
        runs = read_logs(args.logs, args.op)
        checks = read_logs(args.check, args.op, min_sizes=1)
        _refuse_unsimulated(runs)
        if checks:
            _refuse_unsimulated(checks)
        base = base_preset(args.base or _inferred_base(runs), "node")
        spec, notes = bases.prepare(base, [*runs, *checks], args.nics)
        chosen = points(runs, args.hold_out, checks)
        if args.model == "flow" and any(run.nodes > 1 for run in [*runs, *checks]):
            notice(
                "the flow model plays every point two or three times; trees over several "
                "nodes take minutes at the largest sizes (--model analytical fits in seconds)",
                args.quiet,
            )
        progress = Progress(wanted(args.quiet), "fitting", unit="sweep", min_total=1)
        total = sweeps_estimate(4, 2, args.model)
        done = [0]

        def tick() -> None:
            done[0] = min(done[0] + 1, total - 1)
            progress(done[0], total)

        try:
            calibration = calibrate(spec, chosen, args.model, tick)
        finally:
            progress.close()
        name = args.name or output.stem
        header = _header(calibration, base.name, args, output)
        from ..calibrate.node_file import node_file_text

        text = node_file_text(calibration, base, name, notes, header)
        title = f"{name}: nccl-tests measured and clustersim predicted ({args.model} model)"
        lines = table_lines(calibration) + summary_lines(calibration)
        figure = plot_figure(calibration, title)
        return write_outputs(output, text, lines, figure, plot, "cluster.node")


def _refuse_unsimulated(runs: list) -> None:
    """Runs of a tool clustersim cannot simulate (sendrecv) are left out, saying so; refused
    when they are all."""
    usable = [run for run in runs if run.op is not None]
    for run in runs:
        if run.op is None:
            out(
                f"# not fitted: {run.file} line {run.line}, {run.tool}_perf: clustersim has no such operation"
            )
    if not usable:
        run = runs[0]
        raise ScenarioError(
            Problem(
                f"line {run.line}",
                f"{run.tool}_perf: clustersim has no such operation to fit it with",
                "logs of all_reduce_perf, all_gather_perf, reduce_scatter_perf, alltoall_perf, "
                "broadcast_perf or reduce_perf",
            ),
            run.file,
        )
    runs[:] = usable


def _inferred_base(runs: list) -> str:
    from ..calibrate.base import base_for

    names = [name for run in runs for name in run.gpu_names]
    found = base_for(names)
    if found is None:
        raise ScenarioError(
            Problem(
                "--base",
                f"the logs name GPUs clustersim's catalog does not know ({', '.join(names) or 'none'})",
                "--base NODE (clustersim list nodes) or --base ./my_node.yaml",
            )
        )
    return found


def _header(calibration: object, base: str, args: argparse.Namespace, output: Path) -> list[str]:
    from ..calibrate.node_file import error_summary
    from ..calibrate.report import errors
    from ..version import __version__

    return [
        f"{output.name}: calibrated by `clustersim calibrate nccl-tests` (clustersim "
        f"{__version__}) on the base node {base},",
        f"fitted to clustersim's {args.model} collective model (scenarios on this file: "
        f"network.model: {args.model}).",
        f"Calibration points: {error_summary(errors(calibration, False))}.",  # type: ignore[arg-type]
        f"Held-out points ({args.hold_out}): {error_summary(errors(calibration, True))}.",  # type: ignore[arg-type]
        f"Use it: cluster.node: {{preset: ./{output.name}}}",
        "",
    ]
