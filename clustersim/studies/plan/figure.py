"""plan.png and plan.svg: each configuration's throughput as a share of the best one.

Close candidates differ by a few percent, so the axis is zoomed to their range
and says so: it starts a little below the smallest value shown (at 0 only when
the values spread wide), a break mark sits where it starts, and the axis label
names that start.  Each bar is labelled with its value; a configuration that
does not fit in device memory is hatched and labelled "does not fit".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...outputs.figures import fit_title
from .runs import Outcome
from .space import point_label

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["PLOT_BARS", "axis_start", "plot_figure", "relative_throughput"]

PLOT_BARS = 60
"""The plot shows at most this many configurations (the best ones)."""

ZOOM_FROM = 0.25
"""The axis starts at 0 when a shown value is below this share of the best; else it is zoomed."""
ZOOM_MARGIN = 0.1
"""Room below the smallest value shown, as a share of the shown range (at least 0.5%)."""
LABEL_ROOM = 0.6
"""Room right of the best bar for the bar labels, as a share of the shown range."""

STYLE: dict[bool | None, dict[str, Any]] = {
    True: {"color": "tab:green", "label": "fits in device memory"},
    False: {
        "facecolor": "#f6c1c1",
        "edgecolor": "tab:red",
        "hatch": "///",
        "label": "does not fit (hatched)",
    },
    None: {"color": "tab:gray", "label": "fit unknown (the strategy models no memory)"},
}
"""How a bar is drawn, by whether its configuration fits."""
FIT_NOTE = {True: "", False: "  does not fit", None: "  fit unknown"}


def relative_throughput(ranked: Sequence[Outcome]) -> list[tuple[Outcome, float]]:
    """The configurations plan.png shows (at most :data:`PLOT_BARS`, best first) with their
    throughput divided by the best throughput of all (1.0 for the best)."""
    ran = [o for o in ranked if o.ok]
    best = max((o.throughput_samples_per_s or 0.0 for o in ran), default=0.0)
    return [
        (o, (o.throughput_samples_per_s or 0.0) / best if best > 0 else 0.0)
        for o in ran[:PLOT_BARS]
    ]


def axis_start(shares: Sequence[float]) -> float:
    """Where the axis starts, in percent of the best: a whole percent below the smallest
    share by :data:`ZOOM_MARGIN` of the range, or 0 when a share is under :data:`ZOOM_FROM`."""
    low = min(shares, default=0.0)
    if low < ZOOM_FROM:
        return 0.0
    margin = max(ZOOM_MARGIN * (1.0 - low), 0.005)
    return max(0.0, float(math.floor(100 * (low - margin))))


def plot_figure(ranked: Sequence[Outcome], title: str = "") -> Figure:
    """Horizontal bars, best at the top: each configuration's throughput in percent of the
    best, on an axis zoomed to their range (see the module docstring).  Built on the Agg
    canvas without pyplot (no global state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import PercentFormatter

    rows = relative_throughput(ranked)
    fig = Figure(figsize=(10.0, 2.4 + 0.26 * len(rows)), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    start = axis_start([share for _, share in rows])
    best_fit = next((o for o, _ in rows if o.fits is True), None)
    drawn: set[bool | None] = set()
    for y, (outcome, share) in enumerate(rows):
        style = dict(STYLE[outcome.fits])
        if outcome.fits in drawn:
            style.pop("label")
        drawn.add(outcome.fits)
        ax.barh(y, 100 * share, height=0.7, **style)
        note = "  best that fits" if outcome is best_fit else FIT_NOTE[outcome.fits]
        ax.annotate(
            f"{100 * share:.1f}%  ({outcome.throughput_samples_per_s:,.1f}/s){note}",
            (100 * share, y),
            xytext=(4, 0),
            textcoords="offset points",
            va="center",
            fontsize="small",
            fontweight="bold" if outcome is best_fit else "normal",
        )
    ax.set_yticks(range(len(rows)), [point_label(o.point) for o, _ in rows], fontsize="small")
    ax.set_ylim(len(rows) - 0.4, -0.6)
    ax.set_xlim(start, 100 + LABEL_ROOM * (100 - start))
    ax.set_xticks([t for t in ax.get_xticks() if start <= t <= 100])
    ax.xaxis.set_major_formatter(PercentFormatter(xmax=100))
    ax.set_ylabel("dp/tp/pp/micro_batch/zero")
    ax.set_xlabel(_axis_label(rows, start))
    if start > 0:
        _break_mark(ax)
    ax.grid(True, axis="x", alpha=0.3)
    if rows:
        fig.legend(loc="outside lower center", ncols=len(drawn), fontsize="small")
    ran = sum(o.ok for o in ranked)
    extra = f" (best {len(rows)} of {ran})" if len(rows) < ran else ""
    fit_title(fig, (title or "throughput per configuration") + extra, ax=ax)
    return fig


def _axis_label(rows: Sequence[tuple[Outcome, float]], start: float) -> str:
    best = max((o.throughput_samples_per_s or 0.0 for o, _ in rows), default=0.0)
    text = f"throughput, % of the best ({best:,.1f} samples/s)"
    if start > 0:
        text += f"\nthe axis starts at {start:g}%, not 0: read the numbers, not bar lengths"
    return text


def _break_mark(ax: Any) -> None:
    """Two short slanted strokes on the x axis where it starts: the axis is broken there."""
    ax.plot(
        [0.0, 0.012],
        [0.0, 0.0],
        transform=ax.transAxes,
        marker=[(-1, -1.5), (1, 1.5)],
        markersize=10,
        linestyle="none",
        color="black",
        clip_on=False,
    )
