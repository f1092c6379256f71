"""A validation case: a published number, where it comes from, how the simulator
computes it, and how close it must come.

A :class:`Case` is data: its ``compute`` is a function of no arguments that runs
a shipped scenario (or a document built in code) and returns the simulated value
in the case's unit.  :func:`check` runs one case and returns its :class:`Outcome`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import ClustersimError
from ..units import format_flop_rate, format_size, format_time

CALIBRATION = "calibration"
"""A case that was used to fit or choose something in the model (:attr:`Case.split`)."""
HELD_OUT = "held-out"
"""A case that shaped nothing in the model: its error is a fair test (:attr:`Case.split`)."""
SPLITS = (CALIBRATION, HELD_OUT)

Value = float | tuple[float, ...]
"""A case's value: one number, or several (the rates of the flows of a max-min case)."""

SCENARIOS = Path(__file__).resolve().parent.parent.parent / "scenarios"
"""The shipped scenarios folder of a source checkout (``scenarios/`` beside the package)."""


@dataclass(frozen=True)
class Tolerance:
    """How far the simulated value may be from the expected one: ``rel`` of the expected
    value or ``abs`` in the case's unit, whichever is larger (both 0: exactly equal)."""

    rel: float = 0.0
    abs: float = 0.0

    def allows(self, expected: float, got: float) -> bool:
        """Whether ``got`` is within this tolerance of ``expected``."""
        return math.isfinite(got) and abs(got - expected) <= max(self.abs, self.rel * abs(expected))

    def describe(self, unit: str) -> str:
        """``0.1%``, ``rel 1e-09``, ``1e-09 s`` or ``exact``."""
        parts = []
        if self.rel:
            parts.append(f"{self.rel * 100:.3g}%" if self.rel >= 1e-4 else f"rel {self.rel:g}")
        if self.abs:
            parts.append(f"{self.abs:g} {unit}".rstrip())
        return " or ".join(parts) or "exact"


@dataclass(frozen=True)
class Case:
    """One published number the simulator must reproduce."""

    id: str
    """Short name, unique in the suite: ``D1``, ``B2-bubble``, ``megatron-39.1b``."""
    family: str
    """The family the case belongs to (worked, alpha-beta, bubbles, memory, megatron, moe, nccl, production, maxmin)."""
    title: str
    """What is measured, in a few words."""
    source: str
    """The paper, chapter or table and where in it, or the formula's origin."""
    expected: Value
    unit: str
    """Unit of ``expected`` and of the simulated value: ``s``, ``B``, ``B/s``, ``FLOP/s``,
    ``micro-batches``, or empty for a fraction."""
    tolerance: Tolerance
    compute: Callable[[], Value]
    """Runs the simulator and returns the value in ``unit``."""
    how: str = ""
    """How the value is simulated: the scenario file, or the document built in code."""
    split: str | None = None
    """For a measured run: :data:`CALIBRATION` (it was used to fit or choose a constant,
    default or curve of the model) or :data:`HELD_OUT` (it shaped nothing); None for a
    formula or a worked example, which the model implements rather than fits."""
    known_gap: str = ""
    """Why a measured run is known to miss its tolerance (what the model does not price yet):
    ``reproduce`` shows it as a known gap, counts it in every mean, and does not fail on it
    while it misses; once it is within its tolerance, ``reproduce`` fails until the mark is
    removed (a strict expected failure)."""
    also: tuple[str, ...] = ()
    """Other family names ``reproduce --only`` selects the case by: a family it was in
    before (ZeRO's cases answer to ``zero``, their family before ``memory``)."""


@dataclass(frozen=True)
class Outcome:
    """A case and what the simulator gave for it."""

    case: Case
    got: Value
    error: float
    """Largest relative error over the values (absolute when an expected value is 0)."""
    passed: bool
    """Within the case's tolerance."""

    @property
    def verdict(self) -> str:
        """``pass``, ``FAIL``, ``known gap`` (a known gap still missing) or ``FIXED`` (a known
        gap now within its tolerance: remove the mark)."""
        return expected_verdict(self.passed, self.case.known_gap)[0]

    @property
    def as_expected(self) -> bool:
        """Passed, or a known gap that still misses."""
        return expected_verdict(self.passed, self.case.known_gap)[1]


def expected_verdict(met: bool, gap: str, fixed: str = "FIXED") -> tuple[str, bool]:
    """The verdict of a target ``met`` or not, and whether that is as expected: ``pass`` /
    ``FAIL``; with a known ``gap``, ``known gap`` (still missed: as expected) / ``fixed`` (met:
    the mark is to be removed)."""
    if gap:
        return (fixed, False) if met else ("known gap", True)
    return ("pass", True) if met else ("FAIL", False)


def _values(value: Value) -> tuple[float, ...]:
    return value if isinstance(value, tuple) else (value,)


def check(case: Case) -> Outcome:
    """Run ``case`` and compare its value with the expected one."""
    got = case.compute()
    expected, values = _values(case.expected), _values(got)
    if len(values) != len(expected):
        return Outcome(case, got, math.inf, False)
    errors = [abs(g - e) / abs(e) if e else abs(g - e) for e, g in zip(expected, values)]
    passed = all(case.tolerance.allows(e, g) for e, g in zip(expected, values))
    return Outcome(case, got, max(errors, default=0.0), passed)


_FORMATS = {"s": format_time, "B": format_size, "FLOP/s": format_flop_rate}


def format_value(value: Value, unit: str) -> str:
    """``5.185 ms``, ``31.4 GB``, ``0.2727``, ``0.5 / 0.5 / 1.5 B/s`` (several values share
    the unit): 4 significant digits."""
    if isinstance(value, tuple):
        return f"{' / '.join(f'{v:.4g}' for v in value)} {unit}".rstrip()
    if unit in _FORMATS:
        return _FORMATS[unit](value)
    return f"{value:.4g} {unit}".rstrip()


def format_error(error: float) -> str:
    """A relative error in percent: ``0.02%``; ``0`` when exact."""
    if not math.isfinite(error):
        return "n/a"
    return "0" if error == 0 else f"{error * 100:.2g}%"


def scenario(*parts: str) -> Path:
    """The shipped scenario ``scenarios/<parts>``; a ClustersimError when it is missing (an
    installed package without the source checkout's ``scenarios/`` folder)."""
    path = SCENARIOS.joinpath(*parts)
    if not path.is_file():
        raise ClustersimError(
            f"validation scenario {path} not found: clustersim reproduce runs the scenarios "
            "shipped in a source checkout (scenarios/ beside the clustersim package)"
        )
    return path


def ids(cases: Sequence[Case]) -> list[str]:
    """The ids of ``cases``, in order."""
    return [case.id for case in cases]
