"""Ranking plan outcomes, the verdict, the table, plan.csv/md/png/svg (the plot in :mod:`.figure`)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ...outputs import tables
from ...outputs.atomic import write_atomic
from ...outputs.figures import save_png_svg
from ...outputs.folder import replace_folder
from ...parallel.rules import SHARDED_STAGE
from .candidates import shorten
from .figure import plot_figure
from .options import PlanOptions
from .runs import Outcome, Verification
from .space import dash

GB = 1e9
"""Bytes per GB, the unit of the table's memory columns."""

# --------------------------------------------------------------------------- ranking


def rank(outcomes: Iterable[Outcome]) -> list[Outcome]:
    """Highest throughput first, ties by enumeration order; failed runs last (no rank)."""
    done = list(outcomes)
    ran = sorted(
        (o for o in done if o.ok),
        key=lambda o: (-(o.throughput_samples_per_s or 0.0), o.candidate.index),
    )
    for i, outcome in enumerate(ran, start=1):
        outcome.rank = i
    failed = sorted((o for o in done if not o.ok), key=lambda o: o.candidate.index)
    return ran + failed


def shown(
    ranked: Sequence[Outcome], fit_only: bool = False, top: int | None = None
) -> list[Outcome]:
    """The rows to print: without those that do not fit (``fit_only``), the first ``top``."""
    rows = [o for o in ranked if not (fit_only and o.fits is False)]
    return rows[:top] if top is not None else rows


def best_fitting(ranked: Sequence[Outcome]) -> Outcome | None:
    """The highest-throughput outcome known to fit in memory (None if none)."""
    return next((o for o in ranked if o.ok and o.fits is True), None)


def verdict(ranked: Sequence[Outcome], options: PlanOptions, recompute: str | None) -> str:
    """One line naming the best configuration that fits, or why none does and what would help."""
    best = best_fitting(ranked)
    ran = [o for o in ranked if o.ok]
    if best is not None:
        return f"best that fits: {best.point.label()}: {_performance(best)}"
    if not ran:
        return "no configuration ran: every simulation failed (see the rows)"
    unknown = [o for o in ran if o.fits is None]
    if unknown:
        top = unknown[0]
        return (
            f"best: {top.point.label()}: {_performance(top)} "
            "(its strategy models no memory: whether it fits is unknown)"
        )
    closest = min(ran, key=lambda o: ((o.peak_bytes or 0) / (o.capacity_bytes or 1), o.rank or 0))
    return (
        f"none fits in device memory: the closest, {closest.point.label()}, needs "
        f"{_size(closest.peak_bytes)} of {_size(closest.capacity_bytes)}; might help: "
        + "; ".join(_help(options, recompute))
    )


def recompute_of(doc: dict[str, Any]) -> str | None:
    """The scenario's activation recomputation: ``training.recompute``, else ``full`` when
    ``pipeline.recompute`` is true, else None."""
    chosen = (doc.get("training") or {}).get("recompute")
    if chosen is None and (doc.get("pipeline") or {}).get("recompute"):
        return "full"
    return chosen


def _performance(outcome: Outcome) -> str:
    from ...units import format_time

    text = (
        f"{outcome.throughput_samples_per_s:,.1f} samples/s, iteration "
        f"{format_time(outcome.iteration_time_s or 0.0)}"
    )
    if outcome.peak_bytes is not None:
        text += f", peak {_size(outcome.peak_bytes)} of {_size(outcome.capacity_bytes)}"
    return text


def _help(options: PlanOptions, recompute: str | None) -> list[str]:
    """What was not tried that lowers memory per device."""
    tips = []
    if options.tp is not None or options.pp is not None:
        tips.append("more tensor/pipeline parallelism (leave out --tp/--pp to try every degree)")
    if not any(z >= SHARDED_STAGE for z in options.zero):
        tips.append("ZeRO stage 2 or 3 (--zero 0,1,2,3)")
    if recompute in (None, "none", "selective"):
        tips.append("activation recomputation (training.recompute: full)")
    if 1 not in options.micro_batch:
        tips.append("smaller micro-batches (--micro-batch 1)")
    tips.append("more GPUs (--devices) or GPUs with more memory (the cluster's gpu.memory)")
    return tips


def _gb(value: float | None) -> str:
    """Bytes as GB for the table: three significant digits, whole numbers from 100 GB."""
    if value is None:
        return "-"
    gb = value / GB
    return f"{gb:.0f}" if gb >= 100 else f"{gb:.3g}"


def _size(value: float | None) -> str:
    from ...units import format_size

    return "-" if value is None else format_size(value)


# --------------------------------------------------------------------------- tables


COLUMNS = (
    "rank",
    "dp",
    "tp",
    "pp",
    "micro_batch",
    "micro-batches",
    "chunks",
    "zero",
    "iteration",
    "samples/s",
    "TFLOP/s/GPU",
    "peak GB",
    "capacity GB",
    "fits",
)
"""Columns of the printed table (and plan.md); a failed run adds its error after them.
:func:`table_columns` adds ``placement`` on a mixed cluster and ``time to train`` and
``cost`` when the scenario gives the job's length and a GPU-hour price."""
PLACEMENT = "placement"
TO_TRAIN = ("time to train", "cost")
RIGHT_ALIGNED = (set(COLUMNS) | set(TO_TRAIN)) - {"fits"}


def table_columns(rows: Sequence[Outcome]) -> tuple[str, ...]:
    """The columns of a table of ``rows``: :data:`COLUMNS`, with ``placement`` after
    ``zero`` when a row has one, and :data:`TO_TRAIN` before ``fits`` when a row has a cost
    or a time to train."""
    columns = list(COLUMNS)
    if any(o.point.arrangement for o in rows):
        columns.insert(columns.index("zero") + 1, PLACEMENT)
    if any(o.time_to_train_s is not None for o in rows):
        columns[-1:-1] = TO_TRAIN
    return tuple(columns)


def table_cells(outcome: Outcome, columns: Sequence[str] = COLUMNS) -> list[str]:
    """One row of the printed table, ``columns`` of it; "-" where a value is unknown or
    does not apply."""
    from ...units import format_time

    p = outcome.point
    fits = {True: "yes", False: "NO", None: "-"}[outcome.fits]
    cells = {
        "rank": "-" if outcome.rank is None else str(outcome.rank),
        "dp": str(p.dp),
        "tp": str(p.tp),
        "pp": str(p.pp),
        "micro_batch": dash(p.micro_batch),
        "micro-batches": dash(p.micro_batches),
        "chunks": str(p.chunks),
        "zero": str(p.zero),
        PLACEMENT: p.arrangement or "-",
        "iteration": "-"
        if outcome.iteration_time_s is None
        else format_time(outcome.iteration_time_s),
        "samples/s": "-"
        if outcome.throughput_samples_per_s is None
        else f"{outcome.throughput_samples_per_s:,.1f}",
        "TFLOP/s/GPU": "-" if outcome.tflops_per_gpu is None else f"{outcome.tflops_per_gpu:.1f}",
        "peak GB": _gb(outcome.peak_bytes),
        "capacity GB": _gb(outcome.capacity_bytes),
        "time to train": _days(outcome.time_to_train_s),
        "cost": "-" if outcome.cost is None else f"{outcome.cost:,.0f}",
        "fits": fits if outcome.ok else "failed",
    }
    return [cells[c] for c in columns]


def _days(seconds: float | None) -> str:
    """``12.3 days`` (``5.2 h`` under a day); "-" when unknown."""
    if seconds is None:
        return "-"
    return f"{seconds / 86400:.1f} days" if seconds >= 86400 else f"{seconds / 3600:.1f} h"


def format_table(rows: Sequence[Outcome]) -> list[str]:
    """The rows as aligned text lines, a header first; failed rows end with their error."""
    columns = table_columns(rows)
    cells = [table_cells(o, columns) for o in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if name in RIGHT_ALIGNED else v.ljust(w)
            for v, w, name in zip(values, widths, columns)
        ]
        return "  ".join(parts).rstrip()

    lines = [line(columns)]
    for outcome, row in zip(rows, cells):
        text = line(row)
        lines.append(f"{text}  {shorten(outcome.error)}" if outcome.error else text)
    return lines


CSV_COLUMNS = (
    "rank",
    "dp",
    "tp",
    "pp",
    "micro_batch",
    "micro_batches",
    "chunks",
    "zero",
    "iteration_time_s",
    "throughput_samples_per_s",
    "tflops_per_gpu",
    "peak_memory_bytes",
    "capacity_bytes",
    "fits",
    "error",
    "flow_iteration_time_s",
    "flow_rank",
    "placement",
    "time_to_train_s",
    "cost",
    "verify_network",
    "verified_iteration_time_s",
    "verified_rank",
)


def csv_text(ranked: Sequence[Outcome], verified: Sequence[Verification] = ()) -> str:
    """Every outcome as CSV, SI units (seconds, samples/s, bytes); empty cells where unknown.
    ``verify_network``, ``verified_iteration_time_s`` and ``verified_rank`` are filled for
    the ``verified`` ones, and ``flow_iteration_time_s`` and ``flow_rank`` too where the
    flow-level model verified them."""
    by_index = {v.fast.candidate.index: v for v in verified}
    rows = []
    for o in ranked:
        p = o.point
        values = (
            o.rank,
            p.dp,
            p.tp,
            p.pp,
            p.micro_batch,
            p.micro_batches,
            p.chunks,
            p.zero,
            o.iteration_time_s,
            o.throughput_samples_per_s,
            o.tflops_per_gpu,
            o.peak_bytes,
            o.capacity_bytes,
            None if o.fits is None else ("yes" if o.fits else "no"),
            o.error,
            *_flow_cells(by_index.get(o.candidate.index)),
            p.arrangement or None,
            o.time_to_train_s,
            o.cost,
            *_verified_cells(by_index.get(o.candidate.index)),
        )
        rows.append([tables.cell(v) for v in values])
    return tables.csv_text(CSV_COLUMNS, rows)


def _flow_cells(v: Verification | None) -> tuple[float | None, int | None]:
    """``flow_iteration_time_s`` and ``flow_rank``: of a flow-level verification only."""
    if v is None or v.network != "flow":
        return (None, None)
    return (v.flow.iteration_time_s if v.flow.ok else None, v.flow_rank)


def _verified_cells(v: Verification | None) -> tuple[str | None, float | None, int | None]:
    """``verify_network``, ``verified_iteration_time_s`` and ``verified_rank``."""
    if v is None:
        return (None, None, None)
    return (v.network, v.flow.iteration_time_s if v.flow.ok else None, v.flow_rank)


def markdown_text(ranked: Sequence[Outcome], title: str, notes: Sequence[str]) -> str:
    """Every outcome as a Markdown table under ``# title``, the notes (verdict, network) after."""
    lines = [f"# {title}", ""]
    columns = table_columns(ranked)
    right = [i for i, c in enumerate(columns) if c in RIGHT_ALIGNED]
    rows = [table_cells(o, columns) + [tables.markdown_escape(o.error)] for o in ranked]
    lines += tables.markdown_table([*columns, "error"], rows, right_aligned=right)
    lines += [""] + [f"{note}" for note in notes]
    return "\n".join(lines).rstrip() + "\n"


def write_outputs(
    ranked: Sequence[Outcome],
    out_dir: str | os.PathLike[str],
    title: str,
    notes: Sequence[str],
    verified: Sequence[Verification] = (),
    flag: str = "output folder",
) -> list[Path]:
    """Replace the folder ``out_dir`` by one holding plan.csv, plan.md, plan.png and
    plan.svg: every outcome, and the verified times of the ``verified`` ones
    (:func:`clustersim.outputs.folder.replace_folder`: as a unit, and only a folder of
    clustersim's outputs; ``flag`` names ``out_dir`` in errors)."""

    def fill(out: Path) -> list[str]:
        return [
            write_atomic(out / "plan.csv", csv_text(ranked, verified)).name,
            write_atomic(out / "plan.md", markdown_text(ranked, title, notes)).name,
            *(p.name for p in save_png_svg(plot_figure(ranked, title), out / "plan.png")),
        ]

    return replace_folder(out_dir, fill, flag)
