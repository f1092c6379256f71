"""The lines of a run a person reads first: how long an iteration takes, how much of it the
workers sit idle (against the schedule's theory), and whether it fits in device memory.

What ``auto`` chose for the keys the scenario left to it is a line each (:func:`auto_lines`).
``clustersim run`` prints them among its summary; ``clustersim report`` prints them again
after writing report.html, read back from summary.json, with where the page is.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..metrics import AutoChoice, MemoryBlock, Summary, TrainingSummary, UsageSummary
from ..units import format_size, format_time


def auto_lines(choices: Mapping[str, AutoChoice] | None) -> list[str]:
    """``auto      training.recompute = selective: ...``, one line per choice ``auto`` made
    (:mod:`clustersim.strategies.auto`; none when the scenario left nothing to choose)."""
    return [f"auto      {choice.line(key)}" for key, choice in (choices or {}).items()]


def iteration_line(part: TrainingSummary, usage: UsageSummary | None) -> str:
    """``iteration 1.378 s mean over 1, 5.8 samples/s, 23,774 tokens/s, MFU 43.9%``."""
    times = part.times
    return (
        f"iteration {format_time(times.iteration_time_s)} mean over "
        f"{len(times.iteration_times_s)}, {times.throughput_samples_per_s:,.1f} samples/s"
        + _rates(usage)
    )


def _rates(usage: UsageSummary | None) -> str:
    """``, 98,591 tokens/s, MFU 33.2%`` for the iteration line (the parts that exist)."""
    text = ""
    if usage is not None and usage.tokens_per_s is not None:
        text += f", {usage.tokens_per_s:,.0f} tokens/s"
    if usage is not None and usage.mfu is not None:
        text += f", MFU {100 * usage.mfu:.1f}%"
    return text


def bubble_fraction(part: TrainingSummary) -> float | None:
    """The summary's ``bubble_fraction`` (mean over the workers of idle time / run time),
    wherever the family keeps it; None for a family without one."""
    shares = getattr(part, "shares", None)
    value = getattr(shares if shares is not None else part, "bubble_fraction", None)
    return float(value) if isinstance(value, (int, float)) else None


def bubble_line(part: TrainingSummary) -> str | None:
    """``bubble    29.5% of the workers' time idle (theory 27.3% for 1f1b, p = 4, m = 8)``:
    the measured bubble and, for a pipeline of two stages or more, its schedule's
    theoretical one (equal stages, free communication)."""
    from ..strategies.hybrid.summary import HybridSummary  # loaded with its strategy

    measured = bubble_fraction(part)
    if measured is None:
        return None
    text = f"bubble    {100 * measured:.1f}% of the workers' time idle"
    if isinstance(part, HybridSummary) and part.stages > 1:
        split = f"p = {part.stages}, m = {part.micro_batches}"
        if (part.chunks or 1) > 1:
            split += f", v = {part.chunks}"
        theory = 100 * part.theoretical_bubble_fraction
        text += f" (theory {theory:.1f}% for {part.schedule}, {split})"
    return text


def memory_line(memory: MemoryBlock) -> str:
    """``memory    peak 27.3 GB of 80 GB on rack0/node0/gpu0 (fits)``: the device that needs
    most (on a cluster of several memory sizes, also the fullest against its own, when the
    summary has its row)."""
    verdict = "fits" if memory.fits else f"DOES NOT FIT on {memory.devices_over_capacity} device(s)"
    fullest = memory.fullest_device
    row = memory.per_device.get(fullest) if fullest is not None else None
    if row is not None:  # devices of several memory sizes (a folded summary may lack its row)
        verdict = (
            f"fullest {fullest}: {format_size(row.peak_bytes)} of "
            f"{format_size(row.capacity_bytes)}; {verdict}"
        )
    return (
        f"memory    peak {format_size(memory.peak_bytes)} of "
        f"{format_size(memory.capacity_bytes)} on {memory.peak_device} ({verdict})"
    )


def headline(summary: Summary) -> list[str]:
    """The iteration, bubble and memory lines of a run (those it has): a training run's
    iteration and bubble, else its makespan; the memory line where memory was counted."""
    part = summary.strategy
    lines = []
    if isinstance(part, TrainingSummary):
        lines.append(iteration_line(part, summary.usage))
        bubble = bubble_line(part)
        if bubble is not None:
            lines.append(bubble)
    else:
        lines.append(f"makespan  {format_time(summary.header.makespan_s)}")
    if summary.memory is not None:
        lines.append(memory_line(summary.memory))
    return lines
