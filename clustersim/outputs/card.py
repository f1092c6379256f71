"""What report.html says in words: the header card, the per-device table, the busiest links.

Every number goes through :mod:`clustersim.units` (times, sizes, bandwidths,
FLOP rates) or is a percentage or a count with its unit, so the page never
shows a bare summary value whose unit is a guess.

* :func:`header_card` -- scenario, cluster, strategy, iteration time,
  throughput, MFU, bubble, peak memory against capacity, what ``auto`` chose (each
  scenario key it set, its value and why), and, when the summary has them, tokens/s,
  time to train, GPU-hours and cost.
* :func:`device_table` -- one row per worker, sorted by bubble (most idle
  first) and folded to the top and bottom :data:`DEVICE_ROWS_SHOWN` rows; the
  whole table is ``devices.csv`` beside report.html (:func:`.devices.devices_csv`).
* :func:`link_table` -- the busiest links of ``links.csv`` with units.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..metrics import DeviceTimes, Summary
from ..strategies.hybrid.summary import HybridSummary
from ..units import format_bandwidth, format_flop_rate, format_size, format_time
from .devices import DEVICES_CSV
from .links import COUNT_COLUMN

DEVICE_ROWS_SHOWN = 10
"""Rows of the per-device table shown at its top and at its bottom (the rest in devices.csv)."""
LINK_ROWS_SHOWN = 20
"""Links in the busiest-links table."""
DEVICE_HEADER = ("device", "compute", "communication", "exposed comm.", "idle", "bubble")
LINK_HEADER = ("link", "bandwidth", "bytes", "busy", "busy share", "utilisation", "peak flows")
DAY_S = 86_400.0


def percent(fraction: float) -> str:
    """``0.0816`` -> ``"8.2%"``."""
    return f"{100 * fraction:.1f}%"


def duration(seconds: float) -> str:
    """A time; in days (and hours) past two days, where seconds stop meaning much."""
    if seconds >= 2 * DAY_S:
        return f"{seconds / DAY_S:.1f} days ({format_time(seconds)})"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.1f} hours ({format_time(seconds)})"
    return format_time(seconds)


def rate(value: float, unit: str) -> str:
    """``48.14 samples/s``; thousands grouped past 10,000 (``98,591 tokens/s``)."""
    return f"{value:,.0f} {unit}" if abs(value) >= 1e4 else f"{value:.4g} {unit}"


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def strategy_text(summary: Summary) -> str:
    """The workload and, for a pipeline or hybrid run, its split (p, m, tp, dp, ...)."""
    from .gantt import pipeline_parts

    part = summary.strategy
    words = str(summary.header.workload or "")
    if isinstance(part, HybridSummary) and part.schedule:
        words += ": " + ", ".join(pipeline_parts(part))
    return words


def header_card(
    summary: Summary, description: str = "", cluster: str = ""
) -> list[tuple[str, str]]:
    """(label, text) pairs of the header card, in order; a value the run lacks is left out."""
    data = summary.as_dict()
    get = lambda key: _number(data.get(key))  # noqa: E731
    name = str(summary.header.scenario or "run")
    items = [("scenario", f"{name}: {description}" if description else name)]
    if cluster:
        items.append(("cluster", cluster))
    if summary.gpu_types:
        from ..topology.graph import gpu_mix

        items.append(("GPU types", f"mixed: {gpu_mix(summary.gpu_types)}"))
    items.append(("strategy", strategy_text(summary)))
    if (t := get("iteration_time_s")) is not None:
        items.append(("iteration time", format_time(t)))
    elif (t := get("makespan_s")) is not None:
        items.append(("makespan", format_time(t)))
    if (x := get("throughput_samples_per_s")) is not None:
        items.append(("throughput", rate(x, "samples/s")))
    if (x := get("tokens_per_s")) is not None:
        items.append(("tokens", rate(x, "tokens/s")))
    if (x := get("mfu")) is not None:
        tflops = get("model_tflops_per_gpu")
        per_gpu = f" ({format_flop_rate(1e12 * tflops)} per GPU)" if tflops is not None else ""
        items.append(("MFU", percent(x) + per_gpu))
    if (x := get("bubble_fraction")) is not None:
        items.append(("bubble", percent(x) + " of the workers' time idle"))
    if summary.memory is not None:
        m = summary.memory
        share = m.peak_bytes / m.capacity_bytes if m.capacity_bytes else 0.0
        fits = "fits" if m.fits else f"{m.devices_over_capacity} devices over capacity"
        if m.fullest_device is not None:  # devices of several memory sizes
            fits = f"fullest {m.fullest_device}; {fits}"
        items.append(
            (
                "peak memory",
                f"{format_size(m.peak_bytes)} of {format_size(m.capacity_bytes)} "
                f"({percent(share)}, {m.peak_device}; {fits})",
            )
        )
    for key, choice in (summary.auto_choices or {}).items():  # what auto chose, and why
        items.append((f"auto: {key}", f"{choice.value_text()} ({choice.reason})"))
    simulated, total = data.get("workers_simulated"), data.get("workers_total")
    if isinstance(simulated, int) and isinstance(total, int) and simulated < total:
        classes = data.get("replica_classes")
        how = f"one replica of each of {len(classes)} classes" if classes else "one replica"
        items.append(("simulated", f"{simulated} of {total} workers ({how})"))
    if (x := get("time_to_train_s")) is not None:
        items.append(("time to train", duration(x)))
    if (x := get("gpu_hours")) is not None:
        items.append(("GPU-hours", f"{x:,.0f} GPU-hours"))
    if (x := get("cost")) is not None:
        items.append(("cost", f"{x:,.0f} (in the currency of cluster.gpu_hour_price)"))
    return items


def device_rows(
    summary: Summary, bubbles: Mapping[str, float | None], workers: set[str]
) -> list[tuple[str, DeviceTimes, float | None]]:
    """(device, times, bubble) of each device, most idle first (then by name); only
    ``workers`` when given (one-replica mode: the simulated replica)."""
    rows = [
        (name, times, bubbles.get(name))
        for name, times in summary.devices.items()
        if isinstance(times, DeviceTimes) and (not workers or name in workers)
    ]
    return sorted(rows, key=lambda r: (-(r[2] if r[2] is not None else -1.0), r[0]))


def device_table(
    rows: Sequence[tuple[str, DeviceTimes, float | None]],
) -> tuple[list[list[str]], int]:
    """The shown rows (times formatted, bubble in %) and how many were folded away: the
    top and bottom :data:`DEVICE_ROWS_SHOWN`, with a row saying how many lie between."""

    def text(name: str, t: DeviceTimes, bubble: float | None) -> list[str]:
        times = (t.compute_s, t.communication_s, t.exposed_communication_s, t.idle_s)
        shown = [format_time(float(x or 0.0)) for x in times]
        label = f"{name} [{t.type}]" if t.type else name
        return [label, *shown, "" if bubble is None else percent(bubble)]

    if len(rows) <= 2 * DEVICE_ROWS_SHOWN:
        return [text(*r) for r in rows], 0
    hidden = len(rows) - 2 * DEVICE_ROWS_SHOWN
    middle = [f"... {hidden} more devices (all in {DEVICES_CSV})", "", "", "", "", ""]
    top, bottom = rows[:DEVICE_ROWS_SHOWN], rows[-DEVICE_ROWS_SHOWN:]
    return [text(*r) for r in top] + [middle] + [text(*r) for r in bottom], hidden


def link_table(links: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    """The busiest links (by utilisation, then bytes) of ``links.csv``, with units; a row of
    a folded links.csv named ``link x N`` (the links it stands for)."""
    rows = sorted(
        links, key=lambda r: (-float(r["utilisation"]), -float(r["bytes"]), str(r["link"]))
    )[:LINK_ROWS_SHOWN]
    return [
        [
            _link_name(r),
            format_bandwidth(float(r["bandwidth_Bps"])),
            format_size(float(r["bytes"])),
            format_time(float(r["busy_s"])),
            percent(float(r["busy_fraction"])),
            percent(float(r["utilisation"])),
            _flows(int(float(r["peak_flows"]))),
        ]
        for r in rows
    ]


def _link_name(row: Mapping[str, Any]) -> str:
    count = row.get(COUNT_COLUMN)
    many = isinstance(count, (int, float)) and count == count and count > 1
    return f"{row['link']} x {int(count)}" if many else str(row["link"])


def _flows(n: int) -> str:
    return f"{n} flow" if n == 1 else f"{n} flows"
