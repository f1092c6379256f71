"""Progress off a terminal: plain lines on stderr, at most one every LINE_EVERY_S seconds
(tests run with stderr captured, which is not a terminal)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from clustersim.cli import main, progress

from .conftest import SCENARIOS

OVERLAP = str(SCENARIOS / "data_parallel" / "overlap.yaml")


def test_off_a_terminal_progress_is_lines() -> None:
    assert progress.wanted() == progress.LINES
    assert progress.wanted(quiet=True) == ""
    assert progress.wanted(forced=True) == progress.BAR
    assert progress.wanted(forced=False) == ""


def test_short_work_prints_no_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Work shorter than LINE_EVERY_S (10 s) leaves stderr as it was."""
    argv = ["compare", OVERLAP, "--set", "seed=1,2", "-j", "1", "-o", str(tmp_path / "c")]
    assert main(argv) == 0
    assert capsys.readouterr().err == ""


def test_lines_count_the_runs_and_say_when_done(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the interval at 0, every run gives a line ``compare: i of 3 runs, T wall``,
    then one ``3 of 3 runs, done`` line; -q gives none."""
    monkeypatch.setattr(progress, "LINE_EVERY_S", 0.0)
    argv = ["compare", OVERLAP, "--set", "seed=1,2,3", "-j", "1", "-o", str(tmp_path / "c")]
    assert main(argv) == 0
    lines = capsys.readouterr().err.splitlines()
    assert [re.sub(r", [^,]* wall$", "", x) for x in lines] == [
        "compare: 0 of 3 runs",
        "compare: 1 of 3 runs",
        "compare: 2 of 3 runs",
        "compare: 3 of 3 runs",
        "compare: 3 of 3 runs, done",
    ][-len(lines) :]
    assert lines[-1].startswith("compare: 3 of 3 runs, done, ")
    assert main([*argv[:-1], str(tmp_path / "d"), "-q"]) == 0
    assert capsys.readouterr().err == ""


def test_a_long_simulation_reports_simulated_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`clustersim run` off a terminal: ``simulating: t = ... simulated, ... wall`` lines."""
    monkeypatch.setattr(progress, "LINE_EVERY_S", 0.0)
    scenario = str(SCENARIOS / "pipeline" / "1f1b_m32.yaml")  # fits: no memory warning
    assert main(["run", scenario, "-o", str(tmp_path / "r")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err and all(re.fullmatch(r"simulating: t = .+ simulated, .+ wall", x) for x in err)
