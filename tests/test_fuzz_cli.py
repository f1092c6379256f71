"""Fuzzing the command line: every command's flags, read from the argparse parser, with
valid and invalid values, and scenario documents of every strategy, valid and mutated,
run through ``clustersim run`` and ``validate``.

The oracle (:func:`tests.fuzzing.findings_of`): exit code 0, 1 or 2, never a traceback,
never a hang, and exit code 2 with a message naming the file or flag.  Each sample is
small and derandomised (the same examples every run); ``make fuzz`` runs thousands.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from clustersim.cli import Command, build_parser

from . import fuzzing

LIMIT_S = fuzzing.HANG_S
"""Wall seconds a run may take before it counts as a hang."""


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> fuzzing.Workspace:
    return fuzzing.Workspace(tmp_path_factory.mktemp("fuzz-cli"), LIMIT_S)


def _assert_clean(tally: fuzzing.Tally) -> None:
    """No findings at all: every class the fuzzer once found is fixed, so a finding is a
    regression (or a new class) and fails with the tally's report."""
    assert not tally.findings, tally.report()


# --------------------------------------------------------------------------- the generator


def test_every_registered_command_is_generated() -> None:
    """The command lines come from the parser: every registered command is among them
    (golden as its two actions)."""
    words = {" ".join(w) for w in fuzzing.commands()}
    for name in Command.registry.names():
        assert name in words or any(w.startswith(f"{name} ") for w in words), name


def test_every_flag_has_a_value_domain() -> None:
    """Each flag that takes a value gets values of its own domain (numbers, sizes,
    paths ...), not arbitrary text: a new flag must be given one in fuzzing.DOMAINS."""
    untyped = [
        f"{' '.join(words)} {flag.options or flag.dest}"
        for words, flags in fuzzing.commands(build_parser()).items()
        for flag in flags
        if flag.takes_value and flag.domain == "text"
    ]
    assert not untyped
    assert set(fuzzing.VALID) == set(fuzzing.VALUES)
    for domain, good in fuzzing.VALID.items():
        assert set(good) <= set(fuzzing.VALUES[domain]), domain


def test_a_run_that_never_ends_is_killed_and_counted_as_a_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner's guard: a command still running at the limit is stopped, and the hang
    is classed by where it was (faulthandler's stack of the child)."""
    from clustersim.cli import validate

    def forever(self: object, args: object) -> int:
        time.sleep(100)
        return 0

    monkeypatch.setattr(validate.ValidateCommand, "run", forever)
    outcome = fuzzing.run_cli(["validate", "x.yaml"], tmp_path, limit_s=1)
    assert outcome.exit_code is None  # killed: it would have slept 100 s
    found = fuzzing.findings_of(fuzzing.Invocation(("validate", "x.yaml")), outcome, 1)
    assert [f.cls for f in found] == [
        "hang: validate in clustersim/cli/__init__.py:main (still running after 1 s)"
    ]


def test_a_traceback_is_a_finding_with_its_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The oracle's other half: an exception escaping main is classed by its type and the
    innermost clustersim function it went through."""
    from clustersim.cli import validate

    def broken(self: object, args: object) -> int:
        raise ZeroDivisionError("x")

    monkeypatch.setattr(validate.ValidateCommand, "run", broken)
    outcome = fuzzing.run_cli(["validate", "x.yaml"], tmp_path, limit_s=10)
    found = fuzzing.findings_of(fuzzing.Invocation(("validate", "x.yaml")), outcome)
    assert outcome.exit_code == 1 and fuzzing.TRACEBACK in outcome.stderr
    assert [f.cls for f in found] == [
        "traceback: ZeroDivisionError in clustersim/cli/__init__.py:main"
    ]


# --------------------------------------------------------------------------- the samples


def test_command_lines_of_every_command_end_cleanly(workspace: fuzzing.Workspace) -> None:
    tally = fuzzing.sample(workspace, 40, fuzzing.command_lines())
    assert tally.runs >= 30
    _assert_clean(tally)


def test_mutated_documents_are_refused_or_run_cleanly(workspace: fuzzing.Workspace) -> None:
    documents = fuzzing.mutated_documents()
    tally = fuzzing.sample(workspace, 40, fuzzing.document_runs(documents))
    assert tally.runs >= 30
    _assert_clean(tally)


@pytest.mark.parametrize("label", list(fuzzing.DOCUMENTS))
def test_a_valid_document_of_every_strategy_runs_through_the_cli(
    label: str, workspace: fuzzing.Workspace
) -> None:
    tally = fuzzing.sample(workspace, 1, fuzzing.document_runs(fuzzing.DOCUMENTS[label]))
    _assert_clean(tally)
    assert tally.exit_codes == {"0": tally.runs}, tally.report()


# --------------------------------------------------------------------------- fixed findings


@pytest.mark.parametrize(
    "argv, message",
    [
        (["run", ""], "'': <top level>: no file named (an empty path)"),
        (["golden", "record", "", "--dir", "g"], "'': <top level>: no file named (an empty path)"),
        (["golden", "record", ".", "--dir", "g"], ".: <top level>: is a folder, not a scenario"),
        (["golden", "check", ".", "--dir", "g"], ".: <top level>: is a folder, not a scenario"),
    ],
)
def test_paths_that_name_no_scenario_file_get_one_clear_message(
    argv: list[str], message: str, workspace: fuzzing.Workspace
) -> None:
    """Found by the fuzzer: a folder or an empty path given to golden (pathlib's ValueError
    from golden_path) is refused with exit code 2 and a message naming the path."""
    outcome = workspace.run(fuzzing.Invocation(tuple(argv)))
    assert outcome.exit_code == 2, outcome.stderr
    assert fuzzing.TRACEBACK not in outcome.stderr
    assert message in outcome.stderr
    assert not fuzzing.findings_of(fuzzing.Invocation(tuple(argv)), outcome)


@pytest.mark.parametrize(
    "run_dir, message",
    [
        ("runs/odd_summary", "summary.json: summary key 'devices': expected a mapping, got int"),
        ("runs/nan_times", "timeline.csv: a row cannot be read: start_s is nan, not a finite time"),
    ],
)
def test_report_of_a_garbled_run_folder_names_the_file(
    run_dir: str, message: str, workspace: fuzzing.Workspace
) -> None:
    """Found by the fuzzer: summary.json values of the wrong shape (AttributeError in the
    report's device table) and NaN times in timeline.csv (matplotlib's ValueError drawing
    the Gantt chart) are exit 2 naming the file, like other unreadable run folders."""
    invocation = fuzzing.Invocation(("report", run_dir))
    outcome = workspace.run(invocation)
    assert outcome.exit_code == 2, outcome.stderr
    assert f"{run_dir}/{message}" in outcome.stderr
    assert not fuzzing.findings_of(invocation, outcome)


def test_summary_sections_of_the_wrong_shape_are_format_errors() -> None:
    """What report's check of summary.json rests on: a section that must be a mapping or
    a list and is not is a SummaryFormatError naming its key; null reads as empty."""
    from clustersim.metrics import Summary, SummaryFormatError

    base = {"scenario": "s", "seed": 0, "workload": "program", "makespan_s": 1.0}
    with pytest.raises(SummaryFormatError, match="'busiest_links': expected a list, got dict"):
        Summary.from_dict({**base, "busiest_links": {"x": 1}}, lenient=True)
    with pytest.raises(SummaryFormatError, match=r"'devices.gpu0': expected a mapping, got int"):
        Summary.from_dict({**base, "devices": {"gpu0": 5}}, lenient=True)
    with pytest.raises(SummaryFormatError, match=r"'busiest_links\[0\]': expected a mapping, got"):
        Summary.from_dict({**base, "busiest_links": ["link"]}, lenient=True)
    assert Summary.from_dict({**base, "devices": None}, lenient=True).devices == {}
