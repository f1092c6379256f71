"""``--set KEY=VALUE`` and ``--network`` on run, plan, golden record and compare
(:mod:`clustersim.scenario.overrides`), and the run folder's scenario.resolved.yaml."""

from __future__ import annotations

import copy
import csv
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from clustersim.cli import main
from clustersim.errors import ScenarioError
from clustersim.scenario import overrides

from .conftest import SCENARIOS
from .test_plan import training_doc, write_doc

OVERLAP = SCENARIOS / "data_parallel" / "overlap.yaml"
"""4 GPUs on one 100 GB/s switch, data parallel with overlap: 14.7 ms per iteration."""
RTOL = 1e-9
"""Relative tolerance of simulated times compared with a hand-derived value."""


def edited_copy(tmp_path: Path, changes: dict[tuple, Any], name: str = "edited.yaml") -> Path:
    """overlap.yaml with each key path of ``changes`` set by hand, written to ``tmp_path``."""
    doc = yaml.safe_load(OVERLAP.read_text())
    for path, value in changes.items():
        node = doc
        for part in path[:-1]:
            node = node.setdefault(part, {}) if isinstance(part, str) else node[part]
        node[path[-1]] = value
    target = tmp_path / name
    target.write_text(yaml.safe_dump(doc, sort_keys=False))
    return target


def run_summary(tmp_path: Path, scenario: Path, *args: str, out: str = "out") -> bytes:
    assert main(["run", str(scenario), "-o", str(tmp_path / out), "-q", *args]) == 0
    return (tmp_path / out / "summary.json").read_bytes()


# --------------------------------------------------------------------------- run


@pytest.mark.parametrize(
    ("flags", "changes"),
    [
        (["--set", "cluster.link.bandwidth=50GB/s"], {("cluster", "link", "bandwidth"): "50GB/s"}),
        (["--set", "training.iterations=2"], {("training", "iterations"): 2}),
        (["--network", "analytical"], {("network", "model"): "analytical"}),
        (["--set", "model.layers[0].params=5e6"], {("model", "layers", 0, "params"): "5e6"}),
        (
            ["--set", "+network.channels=2", "--set", "data_parallel.allreduce.bucket=50MB"],
            {("network", "channels"): 2, ("data_parallel", "allreduce", "bucket"): "50MB"},
        ),
    ],
)
def test_run_with_set_is_the_run_of_the_edited_file(
    tmp_path: Path, flags: list[str], changes: dict[tuple, Any]
) -> None:
    """Each override gives summary.json byte for byte as the file edited by hand does, and a
    summary that differs from the unchanged scenario's (the override took effect)."""
    overridden = run_summary(tmp_path, OVERLAP, *flags, out="set")
    edited = run_summary(tmp_path, edited_copy(tmp_path, changes), out="edited")
    plain = run_summary(tmp_path, OVERLAP, out="plain")
    assert overridden == edited
    assert overridden != plain


def test_half_the_bandwidth_exposes_the_allreduce(tmp_path: Path) -> None:
    """At 50 GB/s each 100 MB bucket's ring all-reduce takes 2 x 3/4 x 100 MB / 50 GB/s =
    3 ms, longer than a layer's 2 ms backward: the four run back to back from 6 ms (the first
    layer's backward done) to 18 ms, then the 1.2 ms optimizer: 19.2 ms, not 14.7 ms."""
    summary = json.loads(run_summary(tmp_path, OVERLAP, "--set", "cluster.link.bandwidth=50GB/s"))
    assert summary["iteration_time_s"] == pytest.approx(19.2e-3, rel=RTOL)
    plain = json.loads(run_summary(tmp_path, OVERLAP, out="plain"))
    assert plain["iteration_time_s"] == pytest.approx(14.7e-3, rel=RTOL)


def test_resolved_scenario_reruns_to_the_same_summary(tmp_path: Path) -> None:
    """scenario.resolved.yaml holds the file with every override, the seed and the work
    limit applied, in the file's key order; running it gives the same summary.json."""
    flags = ["--set", "training.iterations=2", "--network", "analytical", "--seed", "7"]
    first = run_summary(tmp_path, OVERLAP, *flags, "--max-events", "1e7")
    resolved = tmp_path / "out" / "scenario.resolved.yaml"
    doc = yaml.safe_load(resolved.read_text())
    assert doc["training"]["iterations"] == 2
    assert doc["network"] == {"protocol": "none", "channels": 1, "model": "analytical"}
    assert doc["seed"] == 7 and doc["engine"] == {"max_events": 10_000_000}
    assert list(doc)[:4] == ["name", "seed", "cluster", "model"]
    assert (
        "with --set training.iterations=2 --set network.model=analytical"
        in (resolved.read_text().splitlines()[0])
    )
    assert run_summary(tmp_path, resolved, out="again") == first


def test_resolved_scenario_without_overrides_is_the_file(tmp_path: Path) -> None:
    """A run without overrides writes the file's document unchanged (and it is the same
    text each time)."""
    run_summary(tmp_path, OVERLAP)
    text = (tmp_path / "out" / "scenario.resolved.yaml").read_text()
    assert yaml.safe_load(text) == yaml.safe_load(OVERLAP.read_text())
    run_summary(tmp_path, OVERLAP, out="two")
    assert (tmp_path / "two" / "scenario.resolved.yaml").read_text() == text


@pytest.mark.parametrize(
    ("flags", "wanted"),
    [
        (
            ["--set", "network.modle=flow"],
            "with --set network.modle=flow: network.modle: unknown key; did you mean 'model'? "
            "(allowed: model, channels, protocol)",
        ),
        (["--set", "cluster.devices=-1"], "with --set cluster.devices=-1: cluster.devices: "),
        (["--set", "nokey.x=1"], "with --set nokey.x=1: nokey: unknown key"),
        (["--set", "training.iterations"], "overlap.yaml: --set: expected KEY=VALUE"),
        (["--set", "training.iterations=1,2"], "one value per key here"),
        (["--set", "model.layers[3].params=1"], "model.layers[3]: index 3 out of range"),
        (["--set", "stragglers[0].slowdown=2"], "stragglers: no such list in the document"),
        (["--set", "seed=1", "--set", "seed=2"], "seed is given twice"),
        (["--network", "flow", "--set", "network.model=flow"], "(--network sets it too)"),
        (["--seed", "1", "--set", "seed=2"], "overlap.yaml: --seed: the seed is given twice"),
    ],
)
def test_bad_overrides_exit_2_naming_file_set_and_key(
    tmp_path: Path, capsys, flags: list[str], wanted: str
) -> None:
    assert main(["run", str(OVERLAP), "-o", str(tmp_path / "out"), *flags]) == 2
    err = capsys.readouterr().err
    assert wanted in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_null_leaves_an_optional_section_out() -> None:
    """``null`` is None (Hydra's convention): an optional section set to null is absent."""
    doc = yaml.safe_load(OVERLAP.read_text())
    setting = overrides.parse_set("data_parallel=null", sweep=False)
    assert overrides.apply_settings(doc, [setting])["data_parallel"] is None
    assert setting.text() == "data_parallel=null"


def test_parse_set_one_value_or_a_sweep() -> None:
    """Run takes one value; compare a list; ``+`` and ``++`` prefixes are Hydra's, dropped."""
    one = overrides.parse_set("++cluster.link.bandwidth=50GB/s", sweep=False)
    assert (one.key, one.path, one.values) == (
        "cluster.link.bandwidth",
        ("cluster", "link", "bandwidth"),
        ("50GB/s",),
    )
    assert overrides.parse_set("a[1].b=1,2.5,true").values == (1, 2.5, True)
    with pytest.raises(ScenarioError, match="clustersim compare sweeps"):
        overrides.parse_set("a=1,2", sweep=False)


# --------------------------------------------------------------------------- compare


def test_compare_sweeps_a_key_the_file_lacks(tmp_path: Path) -> None:
    """overlap.yaml has no network section; compare --set network.model=flow,analytical
    runs both, and both price the uncontended ring at 14.7 ms."""
    out = tmp_path / "cmp"
    args = ["compare", str(OVERLAP), "--set", "network.model=flow,analytical", "-j", "1"]
    assert main([*args, "-o", str(out)]) == 0
    with open(out / "compare.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["network.model"] for r in rows] == ["flow", "analytical"]
    for row in rows:
        assert float(row["iteration_time_s"]) == pytest.approx(14.7e-3, rel=RTOL)


def test_compare_network_shortcut(tmp_path: Path) -> None:
    """--network MODEL is one more key of the grid, network.model."""
    out = tmp_path / "cmp"
    args = ["compare", str(OVERLAP), "--network", "analytical", "--set", "training.iterations=1,2"]
    assert main([*args, "-j", "1", "-o", str(out)]) == 0
    with open(out / "compare.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["training.iterations"], r["network.model"]) for r in rows] == [
        ("1", "analytical"),
        ("2", "analytical"),
    ]


# --------------------------------------------------------------------------- plan


def test_plan_with_set_plans_the_edited_file(tmp_path: Path) -> None:
    """plan --set NIC bandwidth writes plan.csv byte for byte as the edited file does."""
    base = training_doc()
    edited = copy.deepcopy(base)
    edited["cluster"]["node"]["nic"]["bandwidth"] = "50Gb/s"
    search = ["--tp", "1,2", "--pp", "1", "--micro-batch", "4", "--zero", "0", "-j", "1"]
    set_flag = ["--set", "cluster.node.nic.bandwidth=50Gb/s"]
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    assert main(["plan", write_doc(tmp_path, base), *set_flag, *search, "-o", str(a)]) == 0
    assert main(["plan", write_doc(tmp_path, edited, "e.yaml"), *search, "-o", str(b)]) == 0
    assert main(["plan", write_doc(tmp_path, base, "p.yaml"), *search, "-o", str(c)]) == 0
    assert (a / "plan.csv").read_bytes() == (b / "plan.csv").read_bytes()
    assert (a / "plan.csv").read_bytes() != (c / "plan.csv").read_bytes()


def test_plan_takes_its_network_from_set(tmp_path: Path, capsys) -> None:
    """--set network.model=flow is the plan's network, as --network flow would be."""
    search = ["--tp", "1", "--pp", "1", "--micro-batch", "4", "--zero", "0", "-j", "1"]
    path = write_doc(tmp_path, training_doc())
    assert main(["plan", path, "--set", "network.model=flow", *search]) == 0
    assert "network flow: flow-level network" in capsys.readouterr().out


# --------------------------------------------------------------------------- golden


def test_golden_records_its_overrides_and_check_replays_them(tmp_path: Path, capsys) -> None:
    """A golden recorded with --set names them; check applies them again (and passes); the
    same golden with other overrides written in fails: check did replay the file's."""
    gold = tmp_path / "gold"
    record = ["golden", "record", str(OVERLAP), "--dir", str(gold), "-j", "1"]
    assert main([*record, "--set", "cluster.link.bandwidth=50GB/s"]) == 0
    (path,) = gold.glob("*.json")
    doc = json.loads(path.read_text())
    assert doc["overrides"] == ["cluster.link.bandwidth=50GB/s"]
    assert doc["metrics"]["iteration_time_s"] == pytest.approx(19.2e-3, rel=RTOL)
    check = ["golden", "check", str(OVERLAP), "--dir", str(gold), "-j", "1"]
    assert main(check) == 0
    assert "note: run with --set cluster.link.bandwidth=50GB/s" in capsys.readouterr().out
    doc["overrides"] = ["cluster.link.bandwidth=100GB/s"]
    path.write_text(json.dumps(doc))
    assert main(check) == 1


def test_golden_without_overrides_has_no_overrides_key(tmp_path: Path) -> None:
    """Goldens recorded without --set keep their former format."""
    gold = tmp_path / "gold"
    assert main(["golden", "record", str(OVERLAP), "--dir", str(gold), "-j", "1"]) == 0
    (path,) = gold.glob("*.json")
    assert "overrides" not in json.loads(path.read_text())


def test_golden_with_bad_overrides_exits_2(tmp_path: Path, capsys) -> None:
    gold = tmp_path / "gold"
    assert main(["golden", "record", str(OVERLAP), "--dir", str(gold), "-j", "1"]) == 0
    (path,) = gold.glob("*.json")
    doc = json.loads(path.read_text())
    doc["overrides"] = ["nokey"]
    path.write_text(json.dumps(doc))
    assert main(["golden", "check", str(OVERLAP), "--dir", str(gold)]) == 2
    err = capsys.readouterr().err
    assert "overrides[0]: not a KEY=VALUE override" in err and "Traceback" not in err
