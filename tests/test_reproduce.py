"""``clustersim reproduce``: the shipped validation suite, its table and reproduce.md."""

from __future__ import annotations

import dataclasses
import re

import pytest

from clustersim import validation
from clustersim.cli import main
from clustersim.validation.case import Tolerance, format_value

from .conftest import SCENARIOS

FAMILY_SIZES = {
    "worked": 8,
    "alpha-beta": 7,
    "bubbles": 9,
    "memory": 40,
    "megatron": 11,
    "moe": 6,
    "nccl": 26,
    "production": 68,
    "maxmin": 7,
}
"""Cases per family of the shipped suite."""


HEAVY = ("memory", "megatron", "moe", "nccl", "production")
"""Families whose runs take most of the suite's minute (Table 1's 1T row alone 20 s): the
tests here run the others; ``make test`` runs the whole suite with ``clustersim
reproduce`` (exit 1 on a failed case), and tests/test_megatron_validation.py,
tests/test_moe_validation.py, tests/test_nccl_tests.py and tests/test_memory_validation.py
hold the same numbers (the production family: tests/test_production.py its structure,
``make test`` its numbers)."""
LIGHT = [arg for name in FAMILY_SIZES if name not in HEAVY for arg in ("--only", name)]


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, bytes]:
    """Exit code, stdout and reproduce.md of one run of the suite's light families."""
    import contextlib
    import io

    folder = tmp_path_factory.mktemp("reproduce")
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = main(["reproduce", "-q", *LIGHT, "-o", str(folder)])
    return code, stdout.getvalue(), (folder / "reproduce.md").read_bytes()


def _rows(text: str) -> dict[str, str]:
    """Case id -> its line in the printed table (between the header and the verdict)."""
    lines = text.splitlines()
    end = next(i for i, line in enumerate(lines) if line.endswith("cases pass"))
    return {line.split()[0]: line for line in lines[1:end]}


def test_the_shipped_suite_passes(full_run: tuple[int, str, bytes]) -> None:
    """Every case of the light families passes: exit 0, one `pass` row per case, and the
    verdict line."""
    code, text, report = full_run
    total = sum(n for name, n in FAMILY_SIZES.items() if name not in HEAVY)
    assert code == 0
    assert f"{total} of {total} cases pass" in text
    rows = _rows(text)
    light = [case for case in validation.all_cases() if case.family not in HEAVY]
    assert all(rows[case.id].endswith("pass") for case in light)
    assert report.decode().count("| pass |") == total


def test_families_have_their_cases() -> None:
    """The suite holds the families the issue names, with these many cases each."""
    assert {name: len(cases) for name, cases in validation.FAMILIES.items()} == FAMILY_SIZES
    ids = [case.id for case in validation.all_cases()]
    assert len(ids) == len(set(ids))


def test_every_worked_example_and_table_row_is_a_case() -> None:
    """Every scenario of scenarios/validation and scenarios/megatron is run by a case; D1-D3,
    N1-N4, Z0-Z3, R1-R3 and B1-B5 all appear; the bubbles cover each schedule."""
    how = " ".join(case.how for case in validation.all_cases())
    for folder in ("validation", "megatron"):
        for path in sorted((SCENARIOS / folder).glob("*.yaml")):
            assert f"scenarios/{folder}/{path.name}" in how, path.name
    ids = {case.id.split("-")[0] for case in validation.all_cases()}
    wanted = {"D1", "D2", "D3", "N1", "N2", "N3", "N4", "R1", "R2", "R3"}
    assert wanted | {f"Z{i}" for i in range(4)} | {f"B{i}" for i in range(1, 6)} <= ids
    bubbles = " ".join(case.how for case in validation.FAMILIES["bubbles"])
    for schedule in ("naive", "gpipe", "1f1b", "interleaved"):
        assert f"{schedule} schedule" in bubbles


def test_reproduce_md_is_byte_identical_across_runs(
    tmp_path, full_run: tuple[int, str, bytes]
) -> None:
    """A second run writes the same bytes: no times or paths in the report (the light
    families; test_golden holds the heavy ones' summaries)."""
    assert main(["reproduce", "-q", *LIGHT, "-o", str(tmp_path)]) == 0
    assert (tmp_path / "reproduce.md").read_bytes() == full_run[2]


def test_a_wrong_expectation_fails_and_exits_1(tmp_path, capsys, monkeypatch) -> None:
    """Z1 expected at 40 GB (the model gives 31.4 GB): its row says FAIL, 3 of 4 pass, exit 1."""
    memory = [
        dataclasses.replace(case, expected=40e9) if case.id == "Z1" else case
        for case in validation.FAMILIES["memory"]
    ]
    monkeypatch.setitem(validation.FAMILIES, "memory", tuple(memory))
    assert main(["reproduce", "--only", "Z?", "-q", "-o", str(tmp_path)]) == 1
    text = capsys.readouterr().out
    rows = _rows(text)
    assert rows["Z1"].endswith("FAIL") and "40 GB" in rows["Z1"] and "31.41 GB" in rows["Z1"]
    assert re.search(r"\b21%", rows["Z1"])  # |31.41 - 40| / 40
    assert all(rows[f"Z{i}"].endswith("pass") for i in (0, 2, 3))
    assert "3 of 4 cases pass" in text
    report = (tmp_path / "reproduce.md").read_text()
    assert "| Z1 |" in report and "| FAIL |" in report


def test_only_selects_by_id_or_family(tmp_path, capsys) -> None:
    """--only takes shell-style patterns on ids or families, case-insensitive, repeatable."""
    assert main(["reproduce", "--only", "z?", "--only", "MAXMIN", "-q", "-o", str(tmp_path)]) == 0
    rows = _rows(capsys.readouterr().out)
    assert sorted(rows) == sorted(
        [f"Z{i}" for i in range(4)] + [f"MM{i}" for i in range(1, 7)] + ["MM-444"]
    )


def test_the_zero_family_name_still_selects_zeros_cases() -> None:
    """ZeRO's model-state cases moved into the memory family; ``--only zero`` (a user's
    script of before) still selects exactly them."""
    chosen = validation.select(validation.all_cases(), ["zero"])
    assert {case.id for case in chosen} >= {f"Z{i}" for i in range(4)}
    assert all(case.family == "memory" and case.id.lower().startswith("z") for case in chosen)


def test_only_matching_nothing_is_bad_input(tmp_path, capsys) -> None:
    """An --only that matches no case exits 2 with one line naming the families."""
    assert main(["reproduce", "--only", "nothing*", "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "matches no case" in err and "megatron" in err and "Traceback" not in err
    assert not (tmp_path / "reproduce.md").exists()


def test_an_output_that_is_a_file_is_bad_input(tmp_path, capsys) -> None:
    """-o naming a file exits 2 before any case runs."""
    (tmp_path / "file").write_text("x")
    assert main(["reproduce", "--only", "Z0", "-o", str(tmp_path / "file")]) == 2
    assert "-o" in capsys.readouterr().err


def test_tolerance_is_relative_or_absolute_whichever_is_larger() -> None:
    assert Tolerance(rel=1e-3).allows(1.0, 1.0009)
    assert not Tolerance(rel=1e-3).allows(1.0, 1.0011)
    assert Tolerance(rel=1e-3, abs=0.01).allows(1.0, 1.009)
    assert not Tolerance().allows(1.0, float("nan"))
    assert Tolerance(rel=5e-3).describe("s") == "0.5%"
    assert Tolerance(rel=1e-12).describe("s") == "rel 1e-12"
    assert Tolerance().describe("B") == "exact"


def test_values_are_shown_with_their_units() -> None:
    assert format_value(5.185185e-3, "s") == "5.185 ms"
    assert format_value(31.4e9, "B") == "31.4 GB"
    assert format_value(134.9e12, "FLOP/s") == "134.9 TFLOP/s"
    assert format_value(3 / 11, "") == "0.2727"
    assert format_value((0.5, 2.5), "B/s") == "0.5 / 2.5 B/s"


def test_the_bottleneck_certificate_can_fail() -> None:
    """MM-444's check refuses rates that are not max-min fair: scaled down (a flow's
    bottleneck no longer saturated) or up (a link over capacity), or one flow favoured."""
    from clustersim.network import max_min_rates
    from clustersim.validation.maxmin import is_max_min_fair, random_platform

    refused = 0
    for seed in range(20):
        flows, caps = random_platform(seed)
        rates = max_min_rates(flows, caps)
        assert is_max_min_fair(flows, caps, rates)
        finite = [r for r in rates if 0 < r < float("inf")]
        if not finite:
            continue
        assert not is_max_min_fair(flows, caps, [r * 0.9 for r in rates])
        assert not is_max_min_fair(flows, caps, [r * 1.1 for r in rates])
        refused += 1
    assert refused >= 15
