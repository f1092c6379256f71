"""Golden timings: `clustersim golden record/check`, the pytest plugin, the project's goldens."""

from __future__ import annotations

import fnmatch
import json
import shutil
from pathlib import Path

import pytest

from clustersim.cli import main
from clustersim.studies import golden
from clustersim.version import __version__

from . import shared_runs
from .conftest import ROOT, SCENARIOS, shipped_scenarios

pytest_plugins = ["pytester"]

GOLDEN_DIR = ROOT / "tests" / "golden"
SLOW_FIRST = (
    "scale/dense_131k.yaml",
    "scale/gpt3_175b_16k.yaml",
    "ps_vs_ring/bert_large_ps_servers_*.yaml",
    "ps_vs_ring/bert_large_ring.yaml",
    "ps_vs_ring/bert_large_hierarchical.yaml",
    "ps_vs_ring/*_ps_sharded.yaml",
    "parameter_server/geo.yaml",
    "ps_vs_ring/*_ps_cpu.yaml",
    "parameter_server/ssp.yaml",
    "ps_vs_ring/*_ps_dedicated.yaml",
    "ps_vs_ring/resnet50_ps_servers_*.yaml",
)
"""Scenarios that take seconds each (slowest first): started first so the two processes
finish together."""
OVERLAP = SCENARIOS / "data_parallel" / "overlap.yaml"


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    """A copy of data_parallel/overlap.yaml (100 GB/s links) to edit."""
    path = tmp_path / "scenarios" / "overlap.yaml"
    path.parent.mkdir()
    shutil.copy(OVERLAP, path)
    return path


def _halve_bandwidth(path: Path) -> None:
    text = path.read_text()
    assert "link: {bandwidth: 100GB/s}" in text
    path.write_text(text.replace("link: {bandwidth: 100GB/s}", "link: {bandwidth: 50GB/s}"))


def _golden_file(tmp_path: Path, scenario: Path) -> Path:
    return golden.golden_path(scenario, tmp_path / "golden")


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _record(tmp_path: Path, scenario: Path, capsys: pytest.CaptureFixture[str]) -> dict:
    code, out, _ = _run(
        ["golden", "record", str(scenario), "--dir", str(tmp_path / "golden")], capsys
    )
    assert code == 0, out
    return json.loads(_golden_file(tmp_path, scenario).read_text())


def test_record_writes_named_file_with_key_metrics(
    tmp_path: Path, scenario: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    doc = _record(tmp_path, Path("scenarios/overlap.yaml"), capsys)
    assert (tmp_path / "golden" / "scenarios__overlap.json").is_file()
    assert doc["clustersim_version"] == __version__
    assert doc["scenario"] == "dp-overlap"
    assert doc["scenario_file"] == "scenarios/overlap.yaml"
    assert doc["scenario_sha256"] == golden.scenario_sha256(scenario)
    assert doc["seed"] == 0 and doc["rtol"] == 0.01 and doc["tolerances"] == {}
    metrics = doc["metrics"]
    assert metrics["iteration_time_s"] == pytest.approx(14.7e-3, rel=1e-6)
    assert metrics["throughput_samples_per_s"] == pytest.approx(400 / 14.7e-3, rel=1e-6)
    assert {"makespan_s", "bubble_fraction", "busiest_link.utilisation"} <= set(metrics)
    assert {f"devices.gpu{i}.compute_s" for i in range(4)} <= set(metrics)


def test_round_trip_passes_and_prints_table(
    tmp_path: Path, scenario: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _record(tmp_path, scenario, capsys)
    code, out, _ = _run(
        ["golden", "check", str(scenario), "--dir", str(tmp_path / "golden")], capsys
    )
    assert code == 0, out
    assert "metric" in out and "golden" in out and "now" in out and "change" in out
    assert "iteration_time_s" in out and "+0.000%" in out
    assert "all 1 scenario(s) match" in out


def test_changed_timing_exits_1_listing_metrics(
    tmp_path: Path, scenario: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _record(tmp_path, scenario, capsys)
    _halve_bandwidth(scenario)
    code, out, _ = _run(
        ["golden", "check", str(scenario), "--dir", str(tmp_path / "golden")], capsys
    )
    assert code == 1, out
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("iteration_time_s"))
    assert "CHANGED" in line and "+30.612%" in line  # 14.7 ms -> 19.2 ms
    assert "note: the scenario file changed" in out
    assert "1 of 1 scenario(s) changed" in out


def test_per_metric_tolerances_in_file_are_honoured(
    tmp_path: Path, scenario: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = _record(tmp_path, scenario, capsys)
    _halve_bandwidth(scenario)
    argv = ["golden", "check", str(scenario), "--dir", str(tmp_path / "golden")]
    doc["tolerances"] = {"*": 5.0}
    _golden_file(tmp_path, scenario).write_text(json.dumps(doc))
    assert _run(argv, capsys)[0] == 0
    doc["tolerances"] = {"*": 5.0, "iteration_time_s": 0.05}  # exact key beats the glob
    _golden_file(tmp_path, scenario).write_text(json.dumps(doc))
    code, out, _ = _run(argv, capsys)
    assert code == 1
    failed = [ln.split()[0] for ln in out.splitlines() if "CHANGED (rtol" in ln]
    assert failed == ["iteration_time_s"]
    doc["tolerances"] = {"*": 5.0, "iteration_*": 0.5}  # longer glob beats the shorter one
    _golden_file(tmp_path, scenario).write_text(json.dumps(doc))
    assert _run(argv, capsys)[0] == 0


def test_rtol_flag_sets_the_default_tolerance(
    tmp_path: Path, scenario: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _record(tmp_path, scenario, capsys)
    _halve_bandwidth(scenario)
    argv = ["golden", "check", str(scenario), "--dir", str(tmp_path / "golden")]
    assert _run([*argv, "--rtol", "0.01"], capsys)[0] == 1
    assert _run([*argv, "--rtol", "10"], capsys)[0] == 0


def test_record_keeps_tolerances_of_existing_golden(
    tmp_path: Path, scenario: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = _record(tmp_path, scenario, capsys)
    doc["tolerances"] = {"devices.*": 0.5}
    doc["rtol"] = 0.02
    _golden_file(tmp_path, scenario).write_text(json.dumps(doc))
    _halve_bandwidth(scenario)
    again = _record(tmp_path, scenario, capsys)
    assert again["tolerances"] == {"devices.*": 0.5} and again["rtol"] == 0.02
    assert again["metrics"]["iteration_time_s"] == pytest.approx(19.2e-3, rel=1e-6)


def test_bad_input_exits_2(
    tmp_path: Path, scenario: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = str(tmp_path / "golden")
    code, _, err = _run(["golden", "check", str(scenario), "--dir", folder], capsys)
    assert code == 2 and "no golden file" in err
    code, _, err = _run(["golden", "record", str(tmp_path / "nope.yaml"), "--dir", folder], capsys)
    assert code == 2 and "no such scenario file" in err
    doc = _record(tmp_path, scenario, capsys)
    code, _, err = _run(["golden", "check", str(scenario), "--dir", folder, "--rtol", "-1"], capsys)
    assert code == 2 and "--rtol" in err
    doc["metrics"]["makespan_s"] = "fast"
    doc["tolerances"] = {"*": -1}
    _golden_file(tmp_path, scenario).write_text(json.dumps(doc))
    code, _, err = _run(["golden", "check", str(scenario), "--dir", folder], capsys)
    assert code == 2 and "metrics.makespan_s" in err and "tolerances.*" in err
    _golden_file(tmp_path, scenario).write_text("{not json")
    code, _, err = _run(["golden", "check", str(scenario), "--dir", folder], capsys)
    assert code == 2 and "JSON" in err
    scenario.write_text("name: broken\ncluster: {kind: nope}\nworkload: {}\n")
    code, _, err = _run(["golden", "record", str(scenario), "--dir", folder], capsys)
    assert code == 2 and "cluster" in err


@pytest.mark.parametrize(
    "edit, named",
    [
        (lambda doc: doc["metrics"].update(makespan_s=float("nan")), "metrics.makespan_s"),
        (lambda doc: doc["metrics"].update(makespan_s=float("inf")), "metrics.makespan_s"),
        (lambda doc: doc.update(rtol=float("inf")), "rtol"),
        (lambda doc: doc.update(rtol=float("nan")), "rtol"),
        (lambda doc: doc.update(tolerances={"devices.*": float("inf")}), "tolerances.devices.*"),
        (lambda doc: doc.update(tolerances={"*": -0.5}), "tolerances.*"),
    ],
)
def test_non_finite_golden_numbers_are_refused(
    edit, named: str, tmp_path: Path, scenario: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A golden file holding NaN or Infinity (Python's json reads both) as a metric or a
    tolerance is bad input naming the file and the key: a NaN metric used to pass every
    check and an infinite rtol to accept anything."""
    doc = _record(tmp_path, scenario, capsys)
    edit(doc)
    target = _golden_file(tmp_path, scenario)
    target.write_text(json.dumps(doc))  # NaN / Infinity literals
    code, _, err = _run(["golden", "check", str(scenario), "--dir", str(target.parent)], capsys)
    assert code == 2 and f"{target}: {named}: expected a finite number" in err


def test_a_nan_measurement_never_passes() -> None:
    """A metric measured as NaN compares false with everything: it is a change, not ok."""
    rows = golden.compare_metrics({"t": 1.0}, {"t": float("nan")}, rtol=10.0)
    assert [r.status for r in rows] == ["changed"]


def test_check_without_scenarios_uses_golden_files(
    tmp_path: Path, scenario: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _record(tmp_path, Path("scenarios/overlap.yaml"), capsys)
    code, out, _ = _run(["golden", "check", "--dir", "golden"], capsys)
    assert code == 0 and "scenarios/overlap.yaml: ok" in out
    code, _, err = _run(["golden", "check", "--dir", "empty"], capsys)
    assert code == 2 and "no golden files" in err


def test_golden_path_and_zero_metrics() -> None:
    assert golden.golden_path("/r/scenarios/a/b.yaml", "g", root="/r") == Path(
        "g/scenarios__a__b.json"
    )
    assert golden.golden_path("/elsewhere/c.yml", "g", root="/r") == Path("g/c.json")
    rows = golden.compare_metrics({"a": 0.0, "b": 0.0, "c": 1.0}, {"a": 1e-13, "b": 1e-9, "d": 2})
    assert [(r.metric, r.status) for r in rows] == [
        ("a", "ok"),
        ("b", "changed"),
        ("c", "missing"),
        ("d", "new"),
    ]


def test_many_devices_are_capped() -> None:
    devices = {f"gpu{i}": {"compute_s": 1.0, "idle_s": 0.0} for i in range(100)}
    metrics = golden.metrics_of({"makespan_s": 1.0, "devices": devices})
    assert len([k for k in metrics if k.startswith("devices.")]) == 2 * golden.MAX_DEVICES


PLUGIN_TEST = """
def test_cluster(clustersim_golden):
    clustersim_golden.check("scenarios/overlap.yaml")
"""


def test_pytest_fixture_checks_and_updates(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user's pytest finds the ``clustersim_golden`` fixture by clustersim's entry point
    (``make test`` names its plugins instead and turns that search off: the inner runs here
    search as a user's do)."""
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    folder = pytester.path / "scenarios"
    folder.mkdir()
    shutil.copy(OVERLAP, folder / "overlap.yaml")
    pytester.makepyfile(test_cluster=PLUGIN_TEST)
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*no golden file*", "*--clustersim-update-golden*"])
    result = pytester.runpytest("--clustersim-update-golden")
    result.assert_outcomes(passed=1)
    assert (pytester.path / "tests" / "golden" / "scenarios__overlap.json").is_file()
    pytester.runpytest().assert_outcomes(passed=1)
    _halve_bandwidth(folder / "overlap.yaml")
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*iteration_time_s*CHANGED*", "*--clustersim-update-golden*"])
    pytester.runpytest("--clustersim-update-golden").assert_outcomes(passed=1)


def _slow_first(path: Path) -> tuple[int, str]:
    name = path.relative_to(SCENARIOS).as_posix()
    rank = [i for i, glob in enumerate(SLOW_FIRST) if fnmatch.fnmatchcase(name, glob)]
    return (rank[0] if rank else len(SLOW_FIRST), name)


SHIPPED = sorted(shipped_scenarios(), key=_slow_first)


def test_every_scenario_has_one_golden_file() -> None:
    """Every shipped scenario has a golden file in tests/golden, and every golden file there
    a scenario."""
    expected = {golden.golden_path(s, GOLDEN_DIR, ROOT) for s in SHIPPED}
    stale = sorted(p.name for p in set(golden.goldens_in(GOLDEN_DIR)) - expected)
    missing = sorted(str(p.name) for p in expected if not p.is_file())
    assert not missing, f"scenarios without a golden file: {missing}"
    assert not stale, f"golden files without a scenario: {stale}"


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.relative_to(SCENARIOS).as_posix())
def test_every_scenario_matches_its_golden(path: Path) -> None:
    """Every shipped scenario still matches its golden file in tests/golden.

    A change that moves a timing fails here until the golden is deliberately
    updated: `clustersim golden record scenarios/**/*.yaml --dir tests/golden`.
    The run is the one every test reading this scenario shares (tests/shared_runs.py), with
    the invariants checked where test_invariants checks them
    (``shared_runs.checked``); checking never changes a run's numbers.  The metrics of a
    run only this test reads come from its typed summary (``shared_runs.GOLDEN_ONLY``; the
    same numbers: test_golden_metrics_are_the_same_from_the_summary_text).
    """
    target = golden.golden_path(path, GOLDEN_DIR, ROOT)
    doc = golden.load_golden(target)
    assert not doc.get("overrides"), "shared runs simulate the file as it is"
    measured = shared_runs.golden_measured(path, check=shared_runs.checked(path))
    measured["scenario_sha256"] = golden.scenario_sha256(path)
    report = golden.compare(doc, measured, scenario_file=str(path), golden_file=str(target))
    text = "\n".join(golden.report_lines(report))
    assert report.passed, (
        f"timings moved (update deliberately with clustersim golden record):\n{text}"
    )


@pytest.mark.parametrize(
    "name",
    [
        "pipeline/1f1b_m8.yaml",
        "jobs/shared_uplinks.yaml",
        "ps_vs_ring/tcp/resnet50_ring.yaml",
        "parameter_server/backup_straggler.yaml",
    ],
)
def test_golden_metrics_are_the_same_from_the_summary_text(name: str) -> None:
    """The golden metrics of a run's typed summary (what ``golden check`` and the golden walk
    of ``shared_runs.GOLDEN_ONLY`` read) are those of summary.json's text read back: a
    hybrid run's stages, a multi-job run's jobs, a TCP run's CPU, a parameter server's."""
    from clustersim.api import simulate

    result = simulate(SCENARIOS / name)
    typed = golden.metrics_of(result.typed_summary)
    assert typed == golden.metrics_of(json.loads(result.summary_json()))
    assert len(typed) > 5


def test_golden_check_on_two_processes_matches_the_shipped_goldens() -> None:
    """``golden check`` of several scenarios runs them on a process pool: the shipped goldens
    of a pipeline, a data-parallel and a collective scenario still match that way."""
    scenarios = [
        SCENARIOS / "pipeline" / "1f1b_m8.yaml",
        SCENARIOS / "data_parallel" / "overlap.yaml",
        SCENARIOS / "collectives" / "ring_allreduce_r1.yaml",
    ]
    reports = golden.check(scenarios, GOLDEN_DIR, jobs=2, root=ROOT)
    assert [r.passed for r in reports] == [True, True, True]
    assert [len(r.rows) > 3 for r in reports] == [True, True, True]


@pytest.mark.parametrize("scenario", ["-", "no/such/scenario.yaml"])
def test_check_names_an_unreadable_scenario_before_its_golden_file(
    scenario: str, tmp_path, capsys
) -> None:
    """``golden check SCENARIO`` with a scenario that cannot be read: exit 2 naming the
    scenario as given, not the golden file derived from it (found by the fuzzer)."""
    assert main(["golden", "check", scenario, "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"clustersim: error: {scenario}: ")
    assert ".json" not in err
