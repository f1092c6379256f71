"""The answer of ``clustersim choose``: the table (one row per cluster, cheapest first, the
Pareto marks), the verdict line, choose.csv, choose.md, the frontier plot and each cluster's
plan table, written as one folder (:func:`write_outputs`).

Units: the CSV's are SI-like and named (seconds, hours, kWh, the prices' currency); the
printed table rounds for people (days, thousands separators).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from ...outputs import tables
from ...outputs.atomic import write_atomic
from ...outputs.figures import save_png_svg
from ...outputs.folder import replace_folder
from .. import plan
from .costs import types_text
from .figure import frontier_figure
from .study import ClusterResult

PLANS = "plans"
"""The subfolder of the per-cluster plan tables (``plans/NAME.csv``)."""
DAY_S = 86400.0
HOUR_S = 3600.0

CSV_COLUMNS = (
    "cluster",
    "gpus",
    "gpu_types",
    "tp",
    "pp",
    "dp",
    "micro_batch",
    "zero",
    "chunks",
    "iteration_time_s",
    "tokens_per_s",
    "time_to_train_h",
    "gpu_hours",
    "cost",
    "energy_kwh",
    "energy_cost",
    "total_cost",
    "pareto",
    "fits",
    "note",
)
"""choose.csv's columns, in order (stable: new ones go at the end)."""


def count_text(value: float) -> str:
    """A large count as the candidates file writes it: ``2T``, ``300G``, ``1.5M``; below a
    thousand as it is."""
    for suffix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.4g}{suffix}"
    return f"{value:.4g}"


def money(value: float) -> str:
    """An amount for people: whole units with thousands separators from 100 up, three
    significant digits below (a toy cluster's cents still show)."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


Column = tuple[str, str]
"""(key, header) of a printed column."""
LEFT = ("cluster", "layout", "pareto")
"""Columns aligned left."""


def columns(results: Sequence[ClusterResult], currency: str = "") -> list[Column]:
    """The printed table's columns: the energy ones only when some cluster has them."""

    def priced(word: str) -> str:
        return f"{word} {currency}".rstrip()

    energy = any(r.bill is not None and r.bill.energy_kwh is not None for r in results)
    energy_cost = any(r.bill is not None and r.bill.energy_cost is not None for r in results)
    out = [
        ("cluster", "cluster"),
        ("gpus", "GPUs"),
        ("layout", "dp/tp/pp/mb/zero"),
        ("iteration", "iteration"),
        ("tokens_per_s", "tokens/s"),
        ("days", "days"),
        ("gpu_hours", "GPU-hours"),
        ("cost", priced("cost")),
    ]
    out += [("energy_mwh", "energy MWh")] if energy else []
    if energy_cost:
        out += [("energy_cost", priced("energy")), ("total_cost", priced("total"))]
    return [*out, ("pareto", "pareto")]


def row_cells(result: ClusterResult, cols: Sequence[Column]) -> list[str]:
    """One row of the printed table ("-" where nothing fits or a quantity is not given)."""
    from ...units import format_time

    bill, best = result.bill, result.best
    values = {"cluster": result.name, "gpus": f"{result.option.gpus:,}"}
    values["pareto"] = "yes" if result.pareto else "no"
    if bill is not None and best is not None:
        values.update(
            layout=plan.point_label(best.point),
            iteration=format_time(best.iteration_time_s or 0.0),
            tokens_per_s=f"{bill.tokens_per_s:,.0f}",
            days=_tenths(bill.time_to_train_s / DAY_S),
            gpu_hours=money(bill.gpu_hours),
            cost=money(bill.cost),
            total_cost=money(bill.total_cost),
        )
        if bill.energy_kwh is not None:
            values["energy_mwh"] = _tenths(bill.energy_kwh / 1000)
        if bill.energy_cost is not None:
            values["energy_cost"] = money(bill.energy_cost)
    return [values.get(key, "-") for key, _ in cols]


def _tenths(value: float) -> str:
    """Days or MWh for people: tenths from 10 up, three significant digits below."""
    return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.3g}"


def format_table(results: Sequence[ClusterResult], currency: str = "") -> list[str]:
    """The results as aligned text lines, a header first; a cluster where nothing fits ends
    with why."""
    cols = columns(results, currency)
    rows = [row_cells(r, cols) for r in results]
    widths = [max([len(h)] + [len(row[i]) for row in rows]) for i, (_, h) in enumerate(cols)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(
            v.ljust(w) if key in LEFT else v.rjust(w)
            for v, w, (key, _) in zip(values, widths, cols)
        ).rstrip()

    lines = [line([h for _, h in cols])]
    for result, row in zip(results, rows):
        note = result.why_none()
        lines.append(f"{line(row)}  {note}" if note else line(row))
    return lines


def verdict(results: Sequence[ClusterResult], currency: str = "") -> str:
    """One line: the cheapest cluster, the fastest, and what the cheapest saves against the
    next cheapest and the most expensive."""
    priced = [r for r in results if r.bill is not None]
    if not priced:
        return "no cluster has a configuration that fits: see the rows"
    unit = f" {currency}" if currency else ""

    def spent(r: ClusterResult) -> str:
        assert r.bill is not None
        return f"{money(r.bill.total_cost)}{unit} in {_tenths(r.bill.time_to_train_s / DAY_S)} days"

    cheapest = priced[0]
    fastest = min(priced, key=lambda r: (r.bill.time_to_train_s, r.bill.total_cost))  # type: ignore[union-attr]
    if len(priced) == 1:
        return f"only {cheapest.name} has a configuration that fits: {spent(cheapest)}"
    text = f"cheapest: {cheapest.name}, {spent(cheapest)}; "
    if fastest is cheapest:
        text += "it is the fastest too; "
    else:
        text += f"fastest: {fastest.name}, {spent(fastest)}; "
    others = [priced[1]] + ([priced[-1]] if len(priced) > 2 else [])
    savings = [
        _saving(cheapest, r, "next cheapest" if r is priced[1] else "most expensive", unit)
        for r in others
    ]
    return text + f"{cheapest.name} saves " + ", and ".join(savings)


def _saving(cheap: ClusterResult, other: ClusterResult, what: str, unit: str) -> str:
    """``1,234 USD (12.3%) against the next cheapest (NAME)``."""
    assert cheap.bill is not None and other.bill is not None
    saved = other.bill.total_cost - cheap.bill.total_cost
    share = saved / other.bill.total_cost if other.bill.total_cost > 0 else 0.0
    return f"{money(saved)}{unit} ({share:.1%}) against the {what} ({other.name})"


def csv_text(results: Sequence[ClusterResult]) -> str:
    """choose.csv: one row per cluster in the table's order (:data:`CSV_COLUMNS`); empty
    cells where nothing fits or a quantity is not given."""
    rows = []
    for r in results:
        bill, best = r.bill, r.best
        p = best.point if best is not None and bill is not None else None
        values = [
            r.name,
            r.option.gpus,
            types_text(r.option.gpu_types),
            *((p.tp, p.pp, p.dp, p.micro_batch, p.zero, p.chunks) if p else (None,) * 6),
            best.iteration_time_s if p and best else None,
            *(
                (
                    bill.tokens_per_s,
                    bill.time_to_train_s / HOUR_S,
                    bill.gpu_hours,
                    bill.cost,
                    bill.energy_kwh,
                    bill.energy_cost,
                    bill.total_cost,
                )
                if bill
                else (None,) * 7
            ),
            "yes" if r.pareto else "no",
            "yes" if r.fits else "no",
            r.why_none(),
        ]
        rows.append([tables.cell(v) for v in values])
    return tables.csv_text(CSV_COLUMNS, rows)


def markdown_text(
    results: Sequence[ClusterResult], title: str, notes: Sequence[str], currency: str = ""
) -> str:
    """choose.md: the table under ``# title``, the notes (verdict, workload, network) after,
    then what each cluster is and its prices."""
    cols = columns(results, currency)
    rows = [row_cells(r, cols) + [tables.markdown_escape(r.why_none())] for r in results]
    right = [i for i, (key, _) in enumerate(cols) if key not in LEFT]
    lines = [f"# {title}", ""]
    lines += tables.markdown_table([*(h for _, h in cols), "note"], rows, right_aligned=right)
    lines += [""] + [str(note) for note in notes] + ["", "## The clusters", ""]
    unit = f" ({currency})" if currency else ""
    header = ["cluster", "GPUs by type", f"GPU-hour price{unit}", "GPU power", "what"]
    lines += tables.markdown_table(header, [_input_cells(r) for r in results])
    return "\n".join(lines).rstrip() + "\n"


def _input_cells(result: ClusterResult) -> list[str]:
    from ...units import format_power

    choice = result.option.choice
    price, power = result.option.price, choice.gpu_power

    def per_type(value: object, show: object) -> str:
        if isinstance(value, dict):
            return ", ".join(f"{k}: {show(v)}" for k, v in value.items())  # type: ignore[operator]
        return "-" if value is None else str(show(value))  # type: ignore[operator]

    return [
        result.name,
        types_text(result.option.gpu_types).replace(";", ", "),
        per_type(price, lambda v: f"{v:g}"),
        per_type(power, format_power),
        tables.markdown_escape(choice.description),
    ]


def write_outputs(
    results: Sequence[ClusterResult],
    out_dir: str | os.PathLike[str],
    title: str,
    notes: Sequence[str],
    currency: str = "",
    flag: str = "output folder",
) -> list[Path]:
    """Replace the folder ``out_dir`` by one holding choose.csv, choose.md, frontier.png,
    frontier.svg and ``plans/NAME.csv`` (each cluster's configurations, plan.csv's columns)
    (:func:`clustersim.outputs.folder.replace_folder`: as a unit, and only a folder of
    clustersim's outputs; ``flag`` names ``out_dir`` in errors)."""

    def fill(out: Path) -> list[str]:
        names = [
            write_atomic(out / "choose.csv", csv_text(results)).name,
            write_atomic(out / "choose.md", markdown_text(results, title, notes, currency)).name,
            *(
                p.name
                for p in save_png_svg(
                    frontier_figure(results, title, currency), out / "frontier.png"
                )
            ),
        ]
        (out / PLANS).mkdir()
        for r in sorted(results, key=lambda r: r.option.index):
            if r.ranked:
                write_atomic(out / PLANS / f"{r.name}.csv", plan.csv_text(r.ranked))
                names.append(f"{PLANS}/{r.name}.csv")
        return names

    return replace_folder(out_dir, fill, flag)
