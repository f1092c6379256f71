"""What a calibration prints and plots: every measured point against clustersim's prediction
at the calibrated figures, the error per point and on the held-out points, the figures fitted
and kept, and a plot of measured and predicted bus bandwidth over size.

Bus bandwidth is nccl-tests' (GB/s = 1e9 bytes/s): size / time x the operation's bus factor
(2(n-1)/n all-reduce, (n-1)/n the gathers and scatters, 1 the others), for the measured and
the predicted time alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..collectives.ops import OPERATIONS
from ..units import size_flag
from .fit import Calibration, forced_choice
from .holdout import Point
from .logs import Run
from .node_file import consecutive_spans, error_summary

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def bus_GBps(point: Point, time_s: float) -> float:
    """nccl-tests' bus bandwidth (GB/s) of ``point``'s size moved in ``time_s``."""
    op = point.run.op
    factor = OPERATIONS[op].bus_factor(point.run.ranks) if op else 1.0
    return point.row.size_bytes / time_s * factor / 1e9


def errors(calibration: Calibration, held_out: bool) -> list[float]:
    """Relative errors of the calibration points (or of the held-out ones)."""
    return [
        calibration.error(i)
        for i, point in enumerate(calibration.points)
        if point.held_out == held_out
    ]


def table_lines(calibration: Calibration) -> list[str]:
    """One line per point, grouped by run, with a heading per run."""
    lines: list[str] = []
    current = None
    for i, point in enumerate(calibration.points):
        run = point.run
        if run is not current:
            current = run
            lines += ["", f"# {run.file}: {run.describe()}{_nccl(run)}"]
            lines.append(
                f"#{'size(B)':>13} {'measured(us)':>13} {'predicted(us)':>14} {'error':>8} "
                f"{'busbw(GB/s)':>12} {'predicted':>10}  {'set':<9} {'NCCL ran':<13} ran"
            )
        predicted = calibration.predictions[i]
        nccl = run.nccl.algorithms.get(point.row.size_bytes, "")
        lines.append(
            f"{point.row.size_bytes:>14} {point.row.time_s * 1e6:>13.2f} "
            f"{predicted.time_s * 1e6:>14.2f} {calibration.error(i):>+8.1%} "
            f"{bus_GBps(point, point.row.time_s):>12.2f} "
            f"{bus_GBps(point, predicted.time_s):>10.2f}  "
            f"{'held out' if point.held_out else 'fit':<9} {nccl:<13} "
            f"{predicted.chosen} x{predicted.channels}"
        )
    return lines


def _nccl(run: Run) -> str:
    info = run.nccl
    said = [
        f"NCCL {info.version}" if info.version else "",
        f"{info.channels} channels" if info.channels else "",
        f"network {info.network}" if info.network else "",
        f"{info.nics_per_node} NICs per node" if info.nics_per_node else "",
        *(f"{name}={value} set" for name, value in sorted(info.environment.items())),
    ]
    said = [s for s in said if s]
    return f" ({', '.join(said)})" if said else ""


def summary_lines(calibration: Calibration) -> list[str]:
    """The fit's errors and the figures, fitted or kept, with why."""
    lines = [
        "",
        f"# fit on clustersim's {calibration.model} model"
        + (f" ({calibration.passes} flow plays)" if calibration.passes else ""),
        f"calibration points: {error_summary(errors(calibration, False))}",
        f"held-out points:    {error_summary(errors(calibration, True))}",
        "",
        f"# {'figure':<50} {'base':>12} {'calibrated':>12}  how",
    ]
    for result in calibration.figures:
        unit = result.figure.unit
        how = "fitted" if result.determined else f"kept: {result.reason}"
        lines.append(
            f"  {result.figure.label:<50} {result.base:>9.4g} {unit:<2} "
            f"{result.value:>9.4g} {unit:<2}  {how}"
        )
    lines += forced_lines(calibration)
    logged = sum(1 for p in calibration.points if p.row.size_bytes in p.run.nccl.algorithms)
    if logged:
        lines.append(
            f"  ({logged} of {len(calibration.points)} points with what NCCL ran at their size "
            "in the logs' NCCL_DEBUG lines: the fit runs the same algorithm and protocol where "
            "clustersim has them, the column 'NCCL ran' beside what it ran)"
        )
    plugins = sorted({p.run.nccl.plugin for p in calibration.points if p.run.nccl.plugin})
    lines += [f"  (the logs' network plugin: {plugin}; {PLUGIN_SAYS})" for plugin in plugins]
    return lines + spread_lines(calibration) + unknown_choice_lines(calibration)


WIDE_SPREAD = 1.5
"""Rows whose out-of-place and in-place times are further apart than this (slower / faster)
are named by :func:`spread_lines`."""


def spread_lines(calibration: Calibration) -> list[str]:
    """The rows, per log, whose two columns disagree by more than :data:`WIDE_SPREAD`
    (:attr:`.logs.Row.spread`), and that a row's time is the faster of the two."""
    wide: dict[str, list[str]] = {}
    for point in calibration.points:
        if point.row.spread > WIDE_SPREAD:
            said = f"{size_flag(point.row.size_bytes)} ({point.row.spread:.1f}x)"
            wide.setdefault(point.run.file, []).append(said)
    lines = [
        f"  ({file}: out-of-place and in-place times more than {WIDE_SPREAD}x apart at "
        f"{', '.join(sizes)})"
        for file, sizes in wide.items()
    ]
    if lines:
        lines.append(
            "  (a row's time is the faster of its two columns: both time the same collective, "
            "and nccl-tests times the out-of-place calls first, which pay what NCCL does once "
            "at an algorithm's first call -- connecting its peers, since NCCL 2.22 -- or a "
            "disturbance)"
        )
    return lines


WIDE_ERROR = 0.10
"""A point predicted further off than this (relative) is named by
:func:`unknown_choice_lines`: the 10% a prediction of another size or node count is held to."""


def size_ranges(run: Run, sizes: Sequence[int]) -> str:
    """``sizes`` of ``run`` as runs of consecutive rows of its table (``8B-32B, 8KiB``); a
    size that is not one of its rows stands alone, first."""
    order = {row.size_bytes: i for i, row in enumerate(run.rows)}
    alone = [size_flag(s) for s in sorted(s for s in sizes if s not in order)]
    spans = consecutive_spans(order[s] for s in sizes if s in order)
    flag = [size_flag(row.size_bytes) for row in run.rows]
    return ", ".join(alone + [flag[a] if a == b else f"{flag[a]}-{flag[b]}" for a, b in spans])


def unknown_choice_lines(calibration: Calibration) -> list[str]:
    """Where points miss by more than :data:`WIDE_ERROR` and their log does not say which
    algorithm and protocol NCCL ran at their size (no tuning line there, no forced
    ``NCCL_ALGO``): the sizes, per log, and how to get NCCL to say it.  Such errors are most
    often NCCL running another algorithm than clustersim's choice, which no node figure
    removes (docs/tutorials/calibrate.md, Compare)."""
    wide: dict[str, list[Point]] = {}
    for i, point in enumerate(calibration.points):
        run = point.run
        unsaid = point.row.size_bytes not in run.nccl.algorithms
        if unsaid and forced_choice(run)[0] == "auto" and abs(calibration.error(i)) > WIDE_ERROR:
            wide.setdefault(run.file, []).append(point)
    if not wide:
        return []
    lines = [
        f"  ({file}: off by more than {WIDE_ERROR:.0%} at "
        + size_ranges(missed[0].run, [p.row.size_bytes for p in missed])
        + f"; {sum(p.held_out for p in missed)} of these {len(missed)} held out)"
        for file, missed in wide.items()
    ]
    lines.append(
        "  (the logs do not say which algorithm and protocol NCCL ran at those sizes, and an "
        "error from NCCL running another than clustersim's choice is not a node figure's: "
        "rerun nccl-tests with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING and the log says, "
        "size by size; calibrate then fits and predicts what NCCL ran)"
    )
    return lines


def forced_lines(calibration: Calibration) -> list[str]:
    """What the fit ran where a log's launch forced NCCL's algorithm or protocol: the same
    (:func:`.fit.forced_choice`), or clustersim's own choice where the setting names no one
    algorithm of clustersim's, saying so."""
    lines = []
    runs = {id(point.run): point.run for point in calibration.points}
    for run in runs.values():
        environment = run.nccl.environment
        if not environment:
            continue
        algorithm, protocol = forced_choice(run)
        said = ", ".join(f"{name}={value}" for name, value in sorted(environment.items()))
        ran = [
            f"clustersim's {algorithm}" if algorithm != "auto" else "",
            f"protocol {protocol}" if protocol != "auto" else "",
        ]
        ran = [r for r in ran if r]
        unmatched = [
            name
            for name, value in (("NCCL_ALGO", algorithm), ("NCCL_PROTO", protocol))
            if name in environment and value == "auto"
        ]
        text = f"  ({run.file}: {said} set by its environment; "
        text += f"the fit runs {' and '.join(ran)}" if ran else "the fit runs clustersim's choice"
        if unmatched:
            text += f"; {' and '.join(unmatched)} names no one algorithm or protocol of "
            text += f"clustersim's for {run.op or 'this operation'}: its own choice there"
        lines.append(text + ")")
    return lines


PLUGIN_SAYS = (
    "it reports 75 us of latency to NCCL on p4d, p4de, p5 and p5e and 35 us on p5en and p6: "
    "aws-ofi-nccl src/platform-aws.cpp, compare the network plugin latency above"
)
"""What the report says beside an aws-ofi-nccl log (the only plugin whose reported latency
is known here; NCCL's own InfiniBand and socket plugins report 0)."""


def plot_figure(calibration: Calibration, title: str) -> Figure:
    """Measured (dots; hollow where held out) and predicted (line) bus bandwidth over size,
    one colour per run, and a row's slower column (a grey cross) where it is more than
    :data:`WIDE_SPREAD` times the faster; built on the Agg canvas without pyplot (no global
    state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from ..outputs.figures import bus_bandwidth_axes

    fig = Figure(figsize=(8, 5), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    runs: list[Run] = []
    for point in calibration.points:
        if point.run not in runs:
            runs.append(point.run)
    for k, run in enumerate(runs):
        color = f"C{k % 10}"
        idx = [i for i, p in enumerate(calibration.points) if p.run is run]
        idx.sort(key=lambda i: calibration.points[i].row.size_bytes)
        sizes = [calibration.points[i].row.size_bytes for i in idx]
        predicted = [
            bus_GBps(calibration.points[i], calibration.predictions[i].time_s) for i in idx
        ]
        label = f"{run.nodes} node(s), {run.tool}"
        ax.plot(sizes, predicted, color=color, label=f"{label}: clustersim")
        for held, face in ((False, color), (True, "none")):
            chosen = [i for i in idx if calibration.points[i].held_out == held]
            if not chosen:
                continue
            ax.scatter(
                [calibration.points[i].row.size_bytes for i in chosen],
                [bus_GBps(calibration.points[i], calibration.points[i].row.time_s) for i in chosen],
                facecolors=face,
                edgecolors=color,
                label=f"{label}: measured, {'held out' if held else 'fitted'}",
                zorder=3,
            )
    parted = [p for p in calibration.points if p.row.spread > WIDE_SPREAD]
    if parted:
        ax.scatter(
            [p.row.size_bytes for p in parted],
            [bus_GBps(p, p.row.time_s * p.row.spread) for p in parted],
            marker="x",
            color="0.4",
            label=f"the slower column, where more than {WIDE_SPREAD}x the faster",
            zorder=3,
        )
    bus_bandwidth_axes(fig, ax, title)
    ax.legend(fontsize="small")
    return fig
