"""The figure of a ``clustersim compare`` sweep (compare.png): the metric against the
first swept key, one line per scenario, one panel per model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

LOG_SPAN = 8.0
"""A numeric x axis is drawn logarithmic when its values span at least this factor."""
LOG_SPAN_Y = 100.0
"""The metric's axis is drawn logarithmic when its values span at least this factor."""
FALLBACK_METRIC = "makespan_s"
NOTE_COLUMN = "note"
MODEL_COLUMN = "model"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _series(rows: Sequence[dict[str, Any]], keys: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """Rows grouped into lines: one per scenario and values of the keys after the first."""
    lines: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        rest = ", ".join(f"{k}={row[k]}" for k in keys[1:])
        lines.setdefault(f"{row['scenario']}{f' ({rest})' if rest else ''}", []).append(row)
    return lines


def plot_figure(
    rows: Sequence[dict[str, Any]], keys: Sequence[str], metric: str, title: str = ""
) -> Figure:
    """The metric against the first swept key, one line per scenario (x the other keys' values);
    rows of several models (training sweeps): one panel per model, side by side.

    Numeric x values spanning >= 8x get a log axis; other values are categories.
    Metric values spanning >= 100x (in a panel) get a log y axis.  Lines past the tenth of
    a panel are dashed, so no two share a colour and a style.
    Titles are wrapped to fit the canvas (constrained layout).
    Built on the Agg canvas without pyplot (no global state).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from ..outputs.figures import fit_title

    panels: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        panels.setdefault(str(row.get(MODEL_COLUMN, "")), []).append(row)
    if len(panels) < 2:
        panels = {"": list(rows)}
    width = 11 if len(panels) == 1 else 7.5 * len(panels)
    fig = Figure(figsize=(width, 5.5), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    x_key = keys[0] if keys else "scenario"
    for i, (model, group) in enumerate(panels.items()):
        ax = fig.add_subplot(1, len(panels), i + 1)
        _plot_panel(ax, group, keys, metric, x_key)
        fit_title(fig, model or title or f"{metric} against {x_key}", share=1 / len(panels), ax=ax)
        ax.legend(
            fontsize="small",
            loc="upper left" if len(panels) == 1 else "best",
            bbox_to_anchor=(1.01, 1.0) if len(panels) == 1 else None,
        )
    if len(panels) > 1:
        fit_title(fig, title or f"{metric} against {x_key}", fontsize=13)
    return fig


def _plot_panel(
    ax: Any, rows: Sequence[dict[str, Any]], keys: Sequence[str], metric: str, x_key: str
) -> None:
    """One panel of :func:`plot_figure`: its lines, axes and labels."""
    xs = list(dict.fromkeys(row[x_key] for row in rows))
    numeric = all(_is_number(x) for x in xs)
    position = {x: (x if numeric else i) for i, x in enumerate(xs)}
    for index, (label, points) in enumerate(_series(rows, keys).items()):
        ax.plot(
            [position[p[x_key]] for p in points],
            [p[metric] for p in points],
            marker="o",
            linestyle="-" if index < 10 else "--",
            label=label,
        )
    if numeric and min(xs) > 0 and max(xs) / min(xs) >= LOG_SPAN:
        ax.set_xscale("log")
        ax.set_xticks(xs, [f"{x:g}" for x in xs])
        ax.minorticks_off()
    elif not numeric:
        ax.set_xticks(range(len(xs)), [str(x) for x in xs])
    ax.set_xlabel(x_key)
    fallback = any(NOTE_COLUMN in row for row in rows)
    ax.set_ylabel(f"{metric} (else {FALLBACK_METRIC})" if fallback else metric)
    ys = [row[metric] for row in rows]
    if ys and min(ys) > 0 and max(ys) / min(ys) >= LOG_SPAN_Y:
        ax.set_yscale("log")
    else:
        ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
