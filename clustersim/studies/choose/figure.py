"""frontier.png and frontier.svg: every cluster as a point of cost and time to train.

Cost (the GPU-hours' price and the energy's) runs along x, time to train along y (days),
both lower-is-better.  Each cluster is a labelled point; the Pareto-optimal ones are filled
and joined by the frontier's step line (the boundary of what some cluster beats), the others
hollow.  Clusters where nothing fits are named under the plot.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...outputs.figures import fit_title
from .frontier import frontier_steps

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from .study import ClusterResult

DAY_S = 86400.0
MILLION = 1e6
"""From a cost of a million on, the axis counts millions."""
THOUSANDS = 1e4
"""From costs of ten thousand on (up to a million), the axis shows whole amounts with
thousands separators; below, matplotlib's own ticks (a toy cluster's fractions)."""


def frontier_figure(
    results: Sequence[ClusterResult], title: str = "", currency: str = ""
) -> Figure:
    """The cost/time plot of the priced clusters (see the module docstring), on the Agg
    canvas without pyplot (no global state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    priced = [r for r in results if r.bill is not None]
    points = [(r.bill.total_cost, r.bill.time_to_train_s / DAY_S) for r in priced]  # type: ignore[union-attr]
    fig = Figure(figsize=(9.0, 6.0), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for result, (x, y) in zip(priced, points):
        style = (
            {
                "color": "tab:green",
                "label": "Pareto-optimal: no other is as cheap and as fast, better on one",
            }
            if result.pareto
            else {
                "facecolors": "none",
                "edgecolors": "tab:gray",
                "label": "dominated by another",
            }
        )
        ax.scatter([x], [y], s=60, zorder=3, **style)
        ax.annotate(
            result.name,
            (x, y),
            xytext=(6, 6),
            textcoords="offset points",
            fontsize="small",
            fontweight="bold" if result.pareto else "normal",
        )
    ax.margins(x=0.15, y=0.12)
    _frontier(ax, frontier_steps(points))
    millions = bool(points) and max(p[0] for p in points) >= MILLION
    if millions:
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v / MILLION:,.1f}"))
    elif points and min(p[0] for p in points) >= THOUSANDS:
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    unit = " ".join(part for part in ("millions" if millions else "", currency) if part)
    ax.set_xlabel(f"cost to train ({unit})" if unit else "cost to train")
    ax.set_ylabel("time to train (days)")
    ax.grid(True, alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    if unique:
        ax.legend(unique.values(), unique.keys(), fontsize="small", loc="best")
    unfit = [r.name for r in results if r.bill is None]
    if unfit:
        fig.supxlabel(f"not shown, nothing fits: {', '.join(unfit)}", fontsize="small")
    fit_title(fig, title or "cost and time to train per cluster", ax=ax)
    return fig


def _frontier(ax: Any, steps: Sequence[tuple[float, float]]) -> None:
    """The frontier's step line from the top of the axes down through the Pareto-optimal
    points (cost rising, time falling) to its right edge, and the region it bounds above and
    to the right (what some Pareto-optimal cluster beats) shaded."""
    if not steps:
        return
    (left, right), (bottom, top) = ax.get_xlim(), ax.get_ylim()
    xs = [steps[0][0], *(x for x, _ in steps), right]
    ys = [top, *(y for _, y in steps), steps[-1][1]]
    ax.step(
        xs,
        ys,
        where="post",
        color="tab:green",
        alpha=0.7,
        label="Pareto frontier (shaded: what it beats)",
    )
    ax.fill_between(xs, ys, top, step="post", color="tab:green", alpha=0.07, linewidth=0)
    ax.set_xlim(left, right)
    ax.set_ylim(bottom, top)
