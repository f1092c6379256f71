"""The shipped validation suite: published numbers the simulator must reproduce.

One module per family holds its cases as data (:class:`~.case.Case`): the seeds' worked
examples (:mod:`.worked`), the alpha-beta formulas (:mod:`.alpha_beta`), the pipeline
bubble formulas (:mod:`.bubbles`), memory (:mod:`.memory`: Korthikanti et al.'s activation
table, ZeRO's model-state tables, measured peaks of real runs), Megatron-LM's
Table 1 (:mod:`.megatron`), DeepSeek-V3's training cost (:mod:`.moe`), nccl-tests' bus
bandwidth on DGX A100 and DGX H100 with the defaults (:mod:`.nccl_tests`), published
measurements of real training runs built from the catalog (:mod:`.production`) and reference
max-min cases (:mod:`.maxmin`).  A family may also hold its mean error to a target
(:data:`MEAN_TARGETS`; :func:`family_lines`) and print the mean of its held-out and its
calibration cases apart (:attr:`~.case.Case.split`).
``clustersim reproduce`` runs them (:func:`run`) and prints :func:`table`; the same
rows go to ``reproduce.md`` (:func:`markdown`).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Sequence

from . import alpha_beta, bubbles, maxmin, megatron, memory, moe, nccl_tests, production, worked
from .case import (
    CALIBRATION,
    HELD_OUT,
    Case,
    Outcome,
    check,
    expected_verdict,
    format_error,
    format_value,
)

FAMILIES: dict[str, tuple[Case, ...]] = {
    module.FAMILY: module.CASES
    for module in (
        worked,
        alpha_beta,
        bubbles,
        memory,
        megatron,
        moe,
        nccl_tests,
        production,
        maxmin,
    )
}
"""Family name -> its cases, in the order the suite runs them."""
MEAN_TARGETS: dict[str, float] = {production.FAMILY: production.MEAN_TARGET}
"""Family name -> the largest mean absolute relative error its cases may have together."""
SPLIT_MEAN_TARGETS: dict[str, dict[str, float]] = {production.FAMILY: production.SPLIT_MEAN_TARGETS}
"""Family name -> split -> the largest mean absolute relative error of that split's cases
(the production family's held-out cases: the accuracy users can expect on runs that shaped
nothing)."""
MEAN_GAPS: dict[tuple[str, str | None], str] = {
    (production.FAMILY, split): why for split, why in production.MEAN_GAPS.items()
}
"""(family, split or None for the whole family) -> why its mean is known to miss its target:
a strict expected failure, as a case's known gap (:attr:`Case.known_gap`) -- reported as
``known gap`` while it misses, a failure once it is met, until the mark is removed."""


def target_verdict(mean: float, target: float, gap: str) -> tuple[str, bool]:
    """The verdict of a mean against its target, and whether it is as expected: ``pass`` /
    ``FAIL``, or with a known gap ``known gap`` (still missing: as expected) / ``FIXED``
    (met: remove the mark)."""
    return expected_verdict(mean <= target, gap, "FIXED, remove the mark")


COLUMNS = ("case", "source", "expected", "got", "error", "tolerance", "pass/fail")

__all__ = [
    "COLUMNS",
    "FAMILIES",
    "Case",
    "Outcome",
    "all_cases",
    "family_lines",
    "passed",
    "markdown",
    "run",
    "select",
    "table",
]


def all_cases() -> list[Case]:
    """Every case of the suite, family by family."""
    return [case for cases in FAMILIES.values() for case in cases]


def select(cases: Sequence[Case], patterns: Sequence[str]) -> list[Case]:
    """The cases whose id or family matches one of the shell-style ``patterns``
    (case-insensitive); all of them when there is no pattern."""
    if not patterns:
        return list(cases)
    wanted = [p.lower() for p in patterns]
    return [
        case
        for case in cases
        if any(
            fnmatch.fnmatchcase(name.lower(), p)
            for p in wanted
            for name in (case.id, case.family, *case.also)
        )
    ]


def run(cases: Sequence[Case], progress: Callable[[int, int], None] | None = None) -> list[Outcome]:
    """Check every case in order; ``progress(done, total)`` after each."""
    outcomes = []
    for done, case in enumerate(cases, 1):
        outcomes.append(check(case))
        if progress is not None:
            progress(done, len(cases))
    return outcomes


def rows(outcomes: Sequence[Outcome]) -> list[tuple[str, ...]]:
    """One row of :data:`COLUMNS` per outcome, values formatted with their units."""
    return [
        (
            o.case.id,
            o.case.source,
            format_value(o.case.expected, o.case.unit),
            format_value(o.got, o.case.unit),
            format_error(o.error),
            o.case.tolerance.describe(o.case.unit),
            o.verdict,
        )
        for o in outcomes
    ]


def verdict(outcomes: Sequence[Outcome]) -> str:
    """``N of M cases pass``."""
    text = f"{sum(o.passed for o in outcomes)} of {len(outcomes)} cases pass"
    gaps = sum(o.verdict == "known gap" for o in outcomes)
    fixed = sum(o.verdict == "FIXED" for o in outcomes)
    if gaps:
        text += f", {gaps} known gap{'s' if gaps > 1 else ''} miss{'es' if gaps == 1 else ''}"
    if fixed:
        text += f", {fixed} known gap{'s' if fixed > 1 else ''} now pass (remove the mark)"
    return text


def family_errors(outcomes: Sequence[Outcome]) -> dict[str, list[float]]:
    """Family -> the relative errors of its cases, in order (a family with several cases)."""
    errors: dict[str, list[float]] = {}
    for o in outcomes:
        errors.setdefault(o.case.family, []).append(o.error)
    return {family: e for family, e in errors.items() if len(e) > 1}


def family_lines(outcomes: Sequence[Outcome]) -> list[str]:
    """One line per family of several cases: its mean and largest absolute relative error,
    and against :data:`MEAN_TARGETS` where the family has a target, e.g. ``production: 14
    cases, mean |error| 5.1% (target <= 10%: pass), largest 11.3%``; then, for a family whose
    measured cases are split (:attr:`Case.split`), one line per split, held out first, e.g.
    ``memory, held out: 3 cases, mean |error| 4.2%, largest 6.9%``."""
    lines = []
    for family, errors in family_errors(outcomes).items():
        mean = sum(errors) / len(errors)
        line = f"{family}: {len(errors)} cases, mean |error| {format_error(mean)}"
        target = MEAN_TARGETS.get(family)
        if target is not None:
            verdict = target_verdict(mean, target, MEAN_GAPS.get((family, None), ""))[0]
            line += f" (target <= {target:.0%}: {verdict})"
        lines.append(f"{line}, largest {format_error(max(errors))}")
        lines += _split_lines(family, [o for o in outcomes if o.case.family == family])
    return lines


def _split_lines(family: str, outcomes: Sequence[Outcome]) -> list[str]:
    """``family, held out: ...`` and ``family, calibration: ...`` for the splits present."""
    lines = []
    for split in (HELD_OUT, CALIBRATION):
        errors = [o.error for o in outcomes if o.case.split == split]
        if errors:
            mean, cases = sum(errors) / len(errors), "case" if len(errors) == 1 else "cases"
            line = (
                f"{family}, {split.replace('-', ' ')}: {len(errors)} {cases}, mean |error| "
                f"{format_error(mean)}"
            )
            target = SPLIT_MEAN_TARGETS.get(family, {}).get(split)
            if target is not None:
                verdict = target_verdict(mean, target, MEAN_GAPS.get((family, split), ""))[0]
                line += f" (target <= {target:.0%}: {verdict})"
            lines.append(f"{line}, largest {format_error(max(errors))}")
    return lines


def split_means(outcomes: Sequence[Outcome]) -> dict[tuple[str, str], float]:
    """(family, split) -> the mean absolute relative error of that split's cases."""
    errors: dict[tuple[str, str], list[float]] = {}
    for o in outcomes:
        if o.case.split is not None:
            errors.setdefault((o.case.family, o.case.split), []).append(o.error)
    return {key: sum(e) / len(e) for key, e in errors.items()}


def passed(outcomes: Sequence[Outcome]) -> bool:
    """Every case within its tolerance (a known gap: still missing it, :attr:`Case.known_gap`),
    every family within its mean target, and every split with a target
    (:data:`SPLIT_MEAN_TARGETS`) within it; the means count every case, known gaps too."""
    means = {f: sum(e) / len(e) for f, e in family_errors(outcomes).items()}
    splits = split_means(outcomes)
    split_ok = all(
        target_verdict(splits[(family, split)], target, MEAN_GAPS.get((family, split), ""))[1]
        for family, targets in SPLIT_MEAN_TARGETS.items()
        for split, target in targets.items()
        if (family, split) in splits
    )
    family_ok = all(
        target_verdict(means[f], target, MEAN_GAPS.get((f, None), ""))[1]
        for f, target in MEAN_TARGETS.items()
        if f in means
    )
    return all(o.as_expected for o in outcomes) and family_ok and split_ok


def table(outcomes: Sequence[Outcome], source_width: int = 44) -> str:
    """The outcomes as an aligned text table (sources cut to ``source_width`` characters)."""
    body = [(r[0], _cut(r[1], source_width), *r[2:]) for r in rows(outcomes)]
    widths = [max(len(str(x)) for x in column) for column in zip(COLUMNS, *body)]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip()
        for line in (COLUMNS, *body)
    ]
    return "\n".join(lines)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def markdown(outcomes: Sequence[Outcome]) -> str:
    """``reproduce.md``: the table, the verdict, then each case's source and how it runs.
    Deterministic: no times, no paths outside the repository."""
    lines = [
        "# clustersim reproduce",
        "",
        "Published numbers the simulator reproduces (`clustersim reproduce`).  Error: "
        "largest relative error over the case's values; tolerance: relative to the "
        "expected value.",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    lines += ["| " + " | ".join(_cell(x) for x in row) + " |" for row in rows(outcomes)]
    lines += ["", verdict(outcomes) + ".", ""]
    lines += [f"* {line}" for line in family_lines(outcomes)]
    lines += ["", "## Cases", ""]
    family = None
    for o in outcomes:
        if o.case.family != family:
            family = o.case.family
            lines += [f"### {family}", ""]
        split = f" ({o.case.split.replace('-', ' ')})" if o.case.split else ""
        gap = f" Known gap: {o.case.known_gap}." if o.case.known_gap else ""
        lines.append(
            f"* **{o.case.id}**{split}: {o.case.title}. Source: {o.case.source}. "
            f"Run: {o.case.how}.{gap}"
        )
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")
