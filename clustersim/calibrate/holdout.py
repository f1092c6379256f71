"""Which measured points the fit uses and which it holds out to judge the fit.

``--hold-out`` takes:

* ``default`` -- in each log, every other size (the 2nd, 4th, ... smallest) and the largest;
* a fraction in [0, 1) -- that share of each log's sizes, evenly spread over its sizes
  (``0`` holds nothing out);
* a size range ``MIN:MAX`` (``1GiB:16GiB``) -- every size from MIN to MAX, both included;
* ``none`` -- nothing.

Logs given with ``--check`` are held out whole (another node count, say).  The choice is
deterministic: it depends on the sizes alone.  A profiler trace's kernels are held out the
same way by their shapes, ordered by FLOPs (:func:`hold_out_rule`; its range is in FLOPs).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
    chosen = hold_out_rule(hold_out)
    out = []
    for run in runs:
        sizes = sorted(row.size_bytes for row in run.rows)
        held = {sizes[i] for i in chosen(sizes)}
        out += [Point(run, row, row.size_bytes in held) for row in run.rows]
    out += [Point(run, row, True) for run in checks for row in run.rows]
    return out


def hold_out_rule(
    text: str, parse: Callable[[str], float] | None = None, allowed: str = ALLOWED
) -> Callable[[Sequence[float]], set[int]]:
    """The hold-out rule ``text`` names (see the module docstring) as a function of the
    ascending values of one set of measurements (a log's sizes, a trace's FLOPs per shape)
    -> the indices held out.  ``parse`` reads the ends of a range ``MIN:MAX`` (default: a
    size in bytes); ``allowed`` is what an error says is allowed.  ScenarioError at
    ``--hold-out`` for a value it cannot read."""
    spec = text.strip()
    if spec.lower() == "default":
        return lambda values: set(range(1, len(values), 2)) | set(range(len(values))[-1:])
    if spec.lower() == "none":
        return lambda values: set()
    if ":" in spec:
        low, high = (_end(part, parse or parse_size, allowed) for part in spec.split(":", 1))
        return lambda values: {i for i, v in enumerate(values) if low <= v <= high}
    try:
        share = float(spec)
    except ValueError:
        share = float("nan")
    if not 0 <= share < 1:
        raise ScenarioError(Problem("--hold-out", f"cannot read {text!r}", allowed))
    return lambda values: _spread(len(values), share)


def _spread(count: int, share: float) -> set[int]:
    """``share`` of ``count`` values (rounded), evenly spread: the middle index of each of k
    equal slices."""
    k = round(share * count)
    return {min(count - 1, int((i + 0.5) * count / k)) for i in range(k)}


def _end(text: str, parse: Callable[[str], float], allowed: str) -> float:
    try:
        return parse(text.strip())
    except UnitError as exc:
        raise ScenarioError(Problem("--hold-out", exc.message, allowed)) from None
