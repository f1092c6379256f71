"""What a profile calibration prints and plots: every shape's measured kernel time against
the calibrated curve's, the error per shape and on the held-out shapes, the curves fitted
and kept, the rest of the trace's GPU work, the memory-bound work measured against the
run's (:mod:`.memory_fit`), and a plot of measured and predicted efficiency (a share of the
peak) over FLOPs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .attention_fit import AttentionFit
from .kernel_fit import KernelFit
from .memory_fit import MemoryFit
from .node_file import error_summary

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def table_lines(fit: KernelFit) -> list[str]:
    """One line per shape, grouped by precision, with a heading per precision."""
    lines: list[str] = []
    current = None
    for i, shape in enumerate(fit.shapes):
        result = fit.curves[shape.precision]
        if shape.precision != current:
            current = shape.precision
            count = sum(1 for s in fit.shapes if s.precision == current)
            lines += [
                "",
                f"# {fit.profile.file}: {current} products, {count} shapes, at "
                f"{fit.base.name}'s {result.peak_flops / 1e12:.4g} TFLOP/s peak",
                f"# {'shape (b x m x n x k)':<32} {'GFLOP':>9} {'count':>5} {'measured(us)':>12} "
                f"{'predicted(us)':>13} {'error':>7} {'TFLOP/s':>8} {'predicted':>9}  set",
            ]
        measured, predicted = shape.time_s, fit.predicted_s(i)
        lines.append(
            f"  {shape.label:<32} {shape.flops / 1e9:>9.4g} {len(shape.times_s):>5} "
            f"{measured * 1e6:>12.2f} {predicted * 1e6:>13.2f} {fit.error(i):>+7.1%} "
            f"{shape.flops / measured / 1e12:>8.2f} {shape.flops / predicted / 1e12:>9.2f}  "
            f"{fit.set_of(i)}"
        )
    return lines


def summary_lines(fit: KernelFit) -> list[str]:
    """The fit's errors, the curves (base and calibrated, fitted or kept, with why), the
    trace's other GPU work and the reader's notes."""
    lines = [
        "",
        "# fit of the matrix-product curve eff(F) = e_max F / (F + F_half), each kernel alone",
        f"calibration shapes: {error_summary(fit.errors(False))}",
        f"held-out shapes:    {error_summary(fit.errors(True))}",
        *(
            [f"memory-bound shapes: {error_summary(fit.memory_errors())} (priced by their bytes)"]
            if any(fit.memory_bound)
            else []
        ),
        _total_line(fit),
        "",
        f"# {'curve':<22} {'base':>10} {'calibrated':>11}  how",
    ]
    for precision, result in fit.curves.items():
        e_how = "fitted" if result.e_max_fitted else f"kept: {result.reason}"
        k_how = "fitted" if result.half_fitted else f"kept: {result.reason}"
        base_us = result.kernel_time_s(result.base) * 1e6
        now_us = result.kernel_time_s(result.curve) * 1e6
        lines += [
            f"  {precision + ' e_max':<22} {result.base.e_max:>10.4g} {result.curve.e_max:>11.4g}"
            f"  {e_how}",
            f"  {precision + ' kernel time (us)':<22} {base_us:>10.4g} {now_us:>11.4g}  {k_how}",
        ]
    profile = fit.profile
    total = profile.product_s + sum(s for _, s in profile.other.values())
    lines += ["", f"# GPU work of the trace ({total * 1e3:.4g} ms)"]
    rows = [("matrix products", len(profile.products), profile.product_s)]
    rows += [(kind, n, s) for kind, (n, s) in profile.other.items()]
    for kind, count, seconds in rows:
        share = seconds / total if total else 0.0
        lines.append(f"  {kind:<52} {count:>7} {seconds * 1e3:>10.3f} ms {share:>6.1%}")
    if profile.unshaped:
        lines.append(f"# {profile.unshaped} products without Input Dims left out")
    lines += [f"# note: {note}" for note in profile.notes + fit.notes]
    return lines


def memory_lines(memory: MemoryFit | None) -> list[str]:
    """The trace's memory-bound kernels against the run's memory-bound work, at the full
    memory bandwidth and at the fitted efficiency; one line saying what it needs without
    ``memory`` (no ``--scenario``)."""
    if memory is None:
        return [
            "",
            "memory efficiency: not fitted (needs --scenario RUN.yaml, the run the trace is a "
            "step of); the base GPU's is kept",
        ]
    step = memory.step

    def row(what: str, seconds: float) -> str:
        return f"  {what:<52} {seconds * 1e3:>10.4g} ms {seconds / memory.measured_s - 1:>+7.1%}"

    return [
        "",
        f"# memory-bound work: {memory.kernels} element-wise/norm/reduction kernels of "
        f"{memory.trace} against {step.scenario} ({memory.steps} step(s) x "
        f"{step.micro_batches} micro-batch(es), {step.passes}: {len(step.operations)} memory-bound "
        "operations each)",
        f"  {'measured (trace)':<52} {memory.measured_s * 1e3:>10.4g} ms",
        row(f"predicted at the full {step.bandwidth_Bps / 1e12:.4g} TB/s", memory.predicted_s),
        *(
            [
                row(
                    f"predicted at the base's memory efficiency {step.base_efficiency:.6g}",
                    memory.predicted_s / step.base_efficiency,
                )
            ]
            if step.base_efficiency != 1
            else []
        ),
        row(
            f"predicted at the fitted memory efficiency {memory.memory_efficiency:.6g}",
            memory.fitted_s,
        ),
        f"  matrix-product FLOPs of the trace over the run's steps: {memory.product_ratio:.4f}",
        *(f"# note: {note}" for note in memory.notes),
    ]


def attention_lines(attention: AttentionFit | None) -> list[str]:
    """The trace's forward attention kernels against the run's, on the base's curve and on
    the fitted one, and its backward kernels against the base's model; one line saying why
    without a fit (no ``--scenario``, or the reason :func:`~.attention_fit.fit_attention`
    gives)."""
    if attention is None or not attention.fitted:
        why = (
            attention.reason
            if attention is not None
            else "needs --scenario RUN.yaml, the run the trace is a step of"
        )
        return ["", f"attention: not fitted ({why}); the base GPU's is kept"]
    core = attention.core

    def row(what: str, seconds: float, measured: float) -> str:
        return f"  {what:<52} {seconds * 1e3:>10.4g} ms {seconds / measured - 1:>+7.1%}"

    return [
        "",
        f"# fused attention: {attention.forward_kernels} forward kernels of {attention.trace} "
        f"against {core.scenario} ({attention.steps} step(s), {len(core.forward)} fused "
        f"kernels per micro-batch x {core.share:g}), at the {core.origin} peak "
        f"{core.peak_flops / 1e12:.4g} TFLOP/s, kernel time {core.kernel_time_s * 1e6:.4g} us",
        f"  {'measured forward kernels (trace)':<52} {attention.measured_s * 1e3:>10.4g} ms",
        row(
            f"predicted at the base's e_max {core.e_max:.6g}",
            attention.predicted_s,
            attention.measured_s,
        ),
        row(
            f"predicted at the fitted e_max {attention.e_max:.6g}",
            attention.fitted_s,
            attention.measured_s,
        ),
        f"  base curve's rate over the measured: {attention.factor:.6g}",
        f"  {'measured backward kernels (trace)':<52} "
        f"{attention.backward_measured_s * 1e3:>10.4g} ms ({attention.backward_kernels} kernels)",
        row(
            "predicted at the base's rate (not fitted)",
            attention.backward_predicted_s,
            attention.backward_measured_s,
        ),
        row(
            f"predicted at the fitted e_max {attention.e_max:.6g}",
            attention.backward_fitted_s,
            attention.backward_measured_s,
        ),
        *(f"# note: {note}" for note in attention.notes),
    ]


def _total_line(fit: KernelFit) -> str:
    """Every product's measured time against the calibrated curve's, summed: the step's
    matrix-product time as a scenario would price it (efficiency 1)."""
    measured = sum(sum(s.times_s) for s in fit.shapes)
    predicted = sum(len(s.times_s) * fit.predicted_s(i) for i, s in enumerate(fit.shapes))
    return (
        f"all products, summed: measured {measured * 1e3:.4g} ms, calibrated "
        f"{predicted * 1e3:.4g} ms ({predicted / measured - 1:+.1%})"
    )


LEGEND = {"fit": "fitted", "held out": "held out", "memory": "memory-bound (by bytes)"}
"""The plot's legend for each set of shapes (:meth:`KernelFit.set_of`)."""
MARKERS = (("fit", "o", "filled"), ("held out", "o", "none"), ("memory", "x", "filled"))
"""Each set's marker and face in the plot."""


def plot_figure(fit: KernelFit, title: str) -> Figure:
    """Measured efficiency (dots; hollow where held out, crosses where memory-bound) and the
    calibrated curve (line; the base's dashed) over FLOPs, one colour per precision; Agg
    canvas, no pyplot."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 5), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for k, (precision, result) in enumerate(fit.curves.items()):
        color = f"C{k % 10}"
        idx = [i for i, s in enumerate(fit.shapes) if s.precision == precision]
        flops = [fit.shapes[i].flops for i in idx]
        grid = np.geomspace(min(flops) / 2, max(flops) * 2, 200)
        ax.plot(grid, [result.curve(f) for f in grid], color=color, label=f"{precision}: fitted")
        ax.plot(grid, [result.base(f) for f in grid], color=color, linestyle="--", alpha=0.6)
        for which, marker, face in MARKERS:
            face = color if face == "filled" else face
            chosen = [i for i in idx if fit.set_of(i) == which]
            if chosen:
                ax.scatter(
                    [fit.shapes[i].flops for i in chosen],
                    [
                        fit.shapes[i].flops / fit.shapes[i].time_s / result.peak_flops
                        for i in chosen
                    ],
                    marker=marker,
                    facecolors=face,
                    edgecolors=color if marker == "o" else None,
                    color=color if marker == "x" else None,
                    label=f"{precision}: measured, {LEGEND[which]}",
                    zorder=3,
                )
    ax.set_xscale("log")
    ax.set_xlabel("FLOPs of one product (2 batch m n k)")
    ax.set_ylabel(f"share of {fit.base.name}'s peak (dashed: its catalog curve)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    return fig
