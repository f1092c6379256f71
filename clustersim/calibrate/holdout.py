"""Which measured points the fit uses and which it holds out to judge the fit.

``--hold-out`` takes:

* ``default`` -- in each log, every other size (the 2nd, 4th, ... smallest) and the largest;
* a fraction in [0, 1) -- that share of each log's sizes, evenly spread over its sizes
  (``0`` holds nothing out);
* a size range ``MIN:MAX`` (``1GiB:16GiB``) -- every size from MIN to MAX, both included;
* ``none`` -- nothing.

Logs given with ``--check`` are held out whole (another node count, say).  The choice is
deterministic: it depends on the sizes alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import Problem, ScenarioError
from ..units import UnitError, parse_size
from .logs import Row, Run

ALLOWED = "default, none, a fraction from 0 to 1 (0.25), or a size range MIN:MAX (1GiB:16GiB)"


@dataclass(frozen=True)
class Point:
    """A measured point: a row of a run, and whether the fit may use it."""

    run: Run
    row: Row
    held_out: bool


def points(runs: Sequence[Run], hold_out: str, checks: Sequence[Run] = ()) -> list[Point]:
    """Every row of ``runs`` as a point, held out by ``hold_out`` (see the module
    docstring), then every row of ``checks``, all held out.  ScenarioError at
    ``--hold-out`` for a value it cannot read."""
    chosen = _rule(hold_out)
    out = []
    for run in runs:
        held = chosen(sorted(row.size_bytes for row in run.rows))
        out += [Point(run, row, row.size_bytes in held) for row in run.rows]
    out += [Point(run, row, True) for run in checks for row in run.rows]
    return out


def _rule(text: str):  # noqa: ANN202
    """The hold-out rule ``text`` names: sizes (ascending) -> the sizes held out."""
    spec = text.strip()
    if spec.lower() == "default":
        return lambda sizes: set(sizes[1::2]) | set(sizes[-1:])
    if spec.lower() == "none":
        return lambda sizes: set()
    if ":" in spec:
        low, high = (_size(part) for part in spec.split(":", 1))
        return lambda sizes: {s for s in sizes if low <= s <= high}
    try:
        share = float(spec)
    except ValueError:
        share = float("nan")
    if not 0 <= share < 1:
        raise ScenarioError(Problem("--hold-out", f"cannot read {text!r}", ALLOWED))
    return lambda sizes: _spread(sizes, share)


def _spread(sizes: Sequence[int], share: float) -> set[int]:
    """``share`` of ``sizes`` (rounded), evenly spread: the middle size of each of k equal
    slices."""
    k = round(share * len(sizes))
    return {sizes[min(len(sizes) - 1, int((i + 0.5) * len(sizes) / k))] for i in range(k)}


def _size(text: str) -> float:
    try:
        return parse_size(text.strip())
    except UnitError as exc:
        raise ScenarioError(Problem("--hold-out", exc.message, ALLOWED)) from None
