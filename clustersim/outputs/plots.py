"""The report's other plots: activation memory over time, and the busiest links' utilisation.

Both are drawn from a run's summary and ``links.csv`` rows only; each returns
None when the run has nothing to show.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from matplotlib.figure import Figure

from ..metrics import Summary
from .figures import fit_title
from .gantt import COLOURS, time_unit

BUSIEST_LINKS = 20
"""Links shown in the link utilisation plot (summary.json lists fewer: see :data:`clustersim.api.BUSIEST_LINKS`)."""


def memory_series(activation_memory: Any) -> list[tuple[str, list[float], list[float]]]:
    """(name, times_s, bytes) step series found in a summary's ``activation_memory``.

    Accepted shapes, per stage or device name: ``{"times_s": [...], "bytes": [...]}``
    (any key with ``time`` and any list key with ``bytes``), or a list of
    ``[time_s, ..., bytes]`` points (first item the time, last the bytes), alone or
    under any key of the entry (the pipeline's ``{"timeline": [[t, count, bytes]]}``).
    """
    if not isinstance(activation_memory, Mapping):
        return []
    for key in ("timeline", "series", "per_stage", "stages", "devices"):
        inner = activation_memory.get(key)
        if isinstance(inner, Mapping) and memory_series(inner):
            return memory_series(inner)
    out = []
    for name, value in activation_memory.items():
        series = _one_series(value)
        if series:
            out.append((str(name), *series))
    return out


def _one_series(value: Any) -> tuple[list[float], list[float]] | None:
    if isinstance(value, Mapping):
        times = next(
            (v for k, v in value.items() if "time" in k and isinstance(v, list) and v), None
        )
        sizes = next(
            (
                v
                for k, v in value.items()
                if "bytes" in k and "peak" not in k and isinstance(v, list) and v
            ),
            None,
        )
        if times is not None and sizes is not None and len(times) == len(sizes):
            return [float(t) for t in times], [float(b) for b in sizes]
        for v in value.values():
            if isinstance(v, list):
                found = _one_series(v)
                if found:
                    return found
        return None
    if (
        isinstance(value, list)
        and value
        and all(isinstance(p, (list, tuple)) and len(p) >= 2 for p in value)
    ):
        return [float(p[0]) for p in value], [float(p[-1]) for p in value]
    return None


def memory_peaks(activation_memory: Any) -> dict[str, float]:
    """Peak bytes per stage or device: a ``peak`` key of each entry, else the series' maximum."""
    peaks: dict[str, float] = {}
    if not isinstance(activation_memory, Mapping):
        return peaks
    for name, value in activation_memory.items():
        if isinstance(value, Mapping):
            peak = next(
                (v for k, v in value.items() if "peak" in k and isinstance(v, (int, float))), None
            )
            if peak is not None:
                peaks[str(name)] = float(peak)
    if not peaks:
        peaks = {name: max(sizes) for name, _, sizes in memory_series(activation_memory) if sizes}
    return peaks


def memory_figure(summary: Summary | Mapping[str, Any]) -> Figure | None:
    """Activation memory over time per stage (step lines), or peaks as bars; None without data."""
    memory = Summary.of(summary).strategy.stage_activations()
    series = memory_series(memory)
    peaks = memory_peaks(memory)
    if not series and not peaks:
        return None
    fig = Figure(figsize=(10, 4), layout="constrained")
    ax = fig.add_subplot()
    if series:
        span = max((t for _, times, _ in series for t in times), default=0.0)
        seconds, unit = time_unit(span)
        for name, times, sizes in series[:32]:
            label = f"stage {name}" if name.isdigit() else name
            peak = peaks.get(name, max(sizes))
            xs, ys = [t / seconds for t in times], [b / 1e9 for b in sizes]
            ax.step(xs, ys, where="post", label=f"{label} (peak {peak / 1e9:.3g} GB)")
        ax.set_xlabel(f"simulated time ({unit})")
        if len(series) <= 16:
            ax.legend(fontsize=8, ncol=2)
    else:
        names = list(peaks)
        ax.bar(names, [peaks[n] / 1e9 for n in names], color=COLOURS["forward"])
        ax.tick_params(axis="x", rotation=60, labelsize=7)
    ax.set_ylabel("activation memory (GB)")
    fit_title(fig, "Activation memory" + ("" if series else " (peak)"), ax=ax)
    ax.grid(alpha=0.3)
    return fig


def links_figure(links: Sequence[Mapping[str, Any]]) -> Figure | None:
    """Utilisation and busy fraction of the busiest links (horizontal bars); None without links."""
    rows = sorted(
        links, key=lambda r: (-float(r["utilisation"]), -float(r["bytes"]), str(r["link"]))
    )[:BUSIEST_LINKS]
    if not rows:
        return None
    fig = Figure(figsize=(10, 1.2 + 0.3 * len(rows)), layout="constrained")
    ax = fig.add_subplot()
    ys = range(len(rows))
    ax.barh(
        [y - 0.2 for y in ys],
        [100 * float(r["utilisation"]) for r in rows],
        height=0.4,
        color=COLOURS["communication"],
        label="utilisation (bytes / capacity)",
    )
    ax.barh(
        [y + 0.2 for y in ys],
        [100 * float(r["busy_fraction"]) for r in rows],
        height=0.4,
        color="#c0c0c0",
        label="busy (a flow on it)",
    )
    ax.set_yticks(list(ys), [str(r["link"]) for r in rows], fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlabel("% of the run")
    fit_title(fig, f"Busiest {len(rows)} links", ax=ax)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    return fig
