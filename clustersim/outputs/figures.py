"""Figures that read: titles wrapped to fit their canvas, and each chart as PNG and SVG.

Every figure clustersim writes uses constrained layout and sets its titles
through :func:`fit_title`, so a long title (a long scenario name) is wrapped
onto several lines instead of running past the canvas' edges.  Wherever a
command writes ``X.png`` it writes ``X.svg`` beside it (:func:`save_png_svg`),
both reproducible: the same figure gives the same bytes.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .atomic import save_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

TITLE_WIDTH = 0.94
"""Share of the available width a title line may take."""
LONG_TITLE = 0.5
"""An axes' title wider than this share of the figure is wrapped to the axes' place."""


def text_width_pt(text: str, fontsize: float, bold: bool = False) -> float:
    """Width of ``text`` in points, as the Agg renderer draws it (its widest line)."""
    from matplotlib.backends.backend_agg import RendererAgg
    from matplotlib.font_manager import FontProperties

    renderer = RendererAgg(1, 1, 72)  # 72 dpi: one pixel per point
    prop = FontProperties(size=fontsize, weight="bold" if bold else "normal")
    return max(
        renderer.get_text_width_height_descent(line, prop, ismath=False)[0]
        for line in text.split("\n")
    )


def wrap_to_width(text: str, width_pt: float, fontsize: float, bold: bool = False) -> str:
    """``text`` with each of its lines wrapped (at spaces, else inside long words) so that no
    line is wider than ``width_pt`` points at ``fontsize``."""
    out: list[str] = []
    for line in text.split("\n"):
        if text_width_pt(line, fontsize, bold) <= width_pt:
            out.append(line)
            continue
        lo, hi = 1, len(line)  # the widest wrap (characters) whose lines all fit
        while lo < hi:
            mid = (lo + hi + 1) // 2
            wrapped = textwrap.wrap(line, mid)
            if all(text_width_pt(w, fontsize, bold) <= width_pt for w in wrapped):
                lo = mid
            else:
                hi = mid - 1
        out += textwrap.wrap(line, lo)
    return "\n".join(out)


def fit_title(
    fig: Figure, text: str, fontsize: float = 12.0, share: float = 1.0, ax: Any = None
) -> str:
    """Set ``text`` as the title of ``ax`` (else the figure's suptitle), wrapped to fit
    ``share`` of the figure's width; return the wrapped text.

    An axes' title is centred on the axes, not the figure: when it is long, the figure's
    layout is run once to find the axes' place and the title is wrapped to the room left
    on its narrower side.
    """
    width_pt = fig.get_figwidth() * 72 * share * TITLE_WIDTH
    wrapped = wrap_to_width(text, width_pt, fontsize)
    if ax is None:
        fig.suptitle(wrapped, fontsize=fontsize)
        return wrapped
    ax.set_title(wrapped, fontsize=fontsize)
    engine = fig.get_layout_engine()
    if engine is not None and text_width_pt(text, fontsize) > LONG_TITLE * width_pt:
        engine.execute(fig)
        box = ax.get_position()
        centre = (box.x0 + box.x1) / 2
        room_pt = 2 * min(centre, 1 - centre) * fig.get_figwidth() * 72 * TITLE_WIDTH
        wrapped = wrap_to_width(text, min(width_pt, room_pt), fontsize)
        ax.set_title(wrapped, fontsize=fontsize)
    return wrapped


def bus_bandwidth_axes(fig: Figure, ax: Any, title: str) -> None:
    """``ax`` as nccl-tests' plots are read: size (bytes) on a log axis, bus bandwidth (GB/s)
    from 0, a grid, and ``title`` fitted (:func:`fit_title`)."""
    ax.set_xscale("log")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    fit_title(fig, title, ax=ax)
    ax.grid(True, which="both", alpha=0.3)


def svg_beside(path: str | os.PathLike[str]) -> tuple[Path, Path]:
    """The PNG and SVG paths of a chart named ``path`` (``X.png`` -> ``X.png``, ``X.svg``;
    ``X.svg`` -> ``X.png``, ``X.svg``; any other name gets ``.svg`` in place of its suffix)."""
    target = Path(path)
    if target.suffix.lower() == ".svg":
        return target.with_suffix(".png"), target
    return target, target.with_suffix(".svg")


def save_png_svg(fig: Figure, path: str | os.PathLike[str]) -> list[Path]:
    """Write ``fig`` as PNG and SVG (:func:`svg_beside`), each atomically and reproducibly
    (:func:`~.atomic.save_figure`); return both paths, PNG first."""
    png, svg = svg_beside(path)
    return [save_figure(fig, png, "png"), save_figure(fig, svg, "svg")]
