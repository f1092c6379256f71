"""The memory family of ``clustersim reproduce``: Korthikanti et al.'s activation table,
ZeRO's model-state tables and measured peaks of real runs, each read from a scenario's
summary memory (clustersim/validation/memory/).

Tolerances are the cases' own: the closed forms to 1e-9, ZeRO's tables to the paper's
printed digits (0.5% or 0.005 GB), Section 5's savings to half a point, the measured runs to
10%.
"""

from __future__ import annotations

import re

import pytest

from clustersim import validation
from clustersim.cli import main
from clustersim.validation.case import CALIBRATION, HELD_OUT, SCENARIOS, check
from clustersim.validation.memory import activations, measured, states

MEMORY = validation.FAMILIES["memory"]


@pytest.mark.parametrize("case", MEMORY, ids=[case.id for case in MEMORY])
def test_every_memory_case_is_within_its_tolerance(case: validation.Case) -> None:
    outcome = check(case)
    assert outcome.passed, (case.id, case.expected, outcome.got, outcome.error)


def test_the_family_holds_what_the_issue_names() -> None:
    """Korthikanti's six rows for three shapes and its two published savings, ZeRO's
    Figure 1 (Z0-Z3) and Table 1 (3 models x 3 stages), and at least four measured peaks."""
    ids = [case.id for case in MEMORY]
    assert len(ids) == len(set(ids)) == 40
    assert len(activations.CASES) == 3 * 6 + 2
    assert [case.id for case in states.CASES[:4]] == ["Z0", "Z1", "Z2", "Z3"]
    assert len(states.CASES) == 4 + 9
    peaks = [case for case in measured.CASES if case.id.endswith(("-peak", "b4", "b1", "gc"))]
    assert len(peaks) >= 4


def test_measured_cases_are_split_and_held_to_ten_percent() -> None:
    """Every measured case is calibration or held out (at least two held out), has a 10%
    tolerance, and runs a shipped scenario whose header names the figure it reproduces."""
    splits = [case.split for case in measured.CASES]
    assert set(splits) == {CALIBRATION, HELD_OUT}
    assert splits.count(HELD_OUT) >= 2
    for case in measured.CASES:
        assert case.tolerance.rel == measured.CASE_TOLERANCE == 0.10
        path = SCENARIOS / case.how.split(",")[0].removeprefix("scenarios/")
        header = path.read_text()
        figure = re.sub(r"\D", "", f"{case.expected:.0f}")
        digits = re.sub(r"\D", "", header)
        mib = f"{case.expected / 2**20:.0f}"
        assert figure in digits or f"{mib} MB" in header, case.id
    formula = [case for case in MEMORY if case not in measured.CASES]
    assert all(case.split is None for case in formula)


def test_the_closed_forms_are_independent_of_the_model() -> None:
    """The expected values are Table 2's formulas, not clustersim's: GPT-3 175B at t = 8
    with sequence parallelism keeps sbh(34/t + 5as/(ht)) = 0.3586 GB per layer at b = 1."""
    shape = activations.SHAPES[0]
    row = next(r for r in activations.ROWS if r.id == "tp-sp")
    sbh = 2048 * 12288
    assert activations.expected_bytes(shape, row, 8) == pytest.approx(
        sbh * (34 / 8 + 5 * 96 * 2048 / (12288 * 8)), rel=1e-15
    )


def test_reproduce_prints_held_out_and_calibration_apart(tmp_path, capsys) -> None:
    """The family line, then one line per split with its mean and largest error; the report
    marks each measured case's split."""
    assert main(["reproduce", "--only", "hf-bert-*", "-q", "-o", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert re.search(r"^memory: 3 cases, mean \|error\| [\d.]+%, largest", text, re.M)
    assert re.search(r"^memory, held out: 2 cases, mean \|error\| [\d.]+%, largest", text, re.M)
    assert re.search(r"^memory, calibration: 1 case, mean \|error\| [\d.]+%", text, re.M)
    report = (tmp_path / "reproduce.md").read_text()
    assert "**hf-bert-b1** (held out)" in report and "**hf-bert-b4** (calibration)" in report


def test_a_measured_case_off_by_more_than_ten_percent_fails(tmp_path, capsys, monkeypatch) -> None:
    """The 10% tolerance can fail: hf-bert-b1 expected 25% higher (the model 1.3% over the real figure) is a FAIL, exit 1."""
    import dataclasses

    family = [
        dataclasses.replace(case, expected=case.expected * 1.25)
        if case.id == "hf-bert-b1"
        else case
        for case in MEMORY
    ]
    monkeypatch.setitem(validation.FAMILIES, "memory", tuple(family))
    assert main(["reproduce", "--only", "hf-bert-b1", "-q", "-o", str(tmp_path)]) == 1
    assert "FAIL" in capsys.readouterr().out
