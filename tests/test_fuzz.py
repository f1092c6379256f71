"""Fuzzed scenario documents: valid ones of every strategy run and keep the invariants,
broken ones get a clean error (exit code 2, the file and a key path, never a traceback),
and hostile files (huge clusters, deep nesting, alias bombs, huge files, bad bytes) are
refused quickly.  The generators are :mod:`tests.fuzzing`'s; ``test_fuzz_cli.py`` runs
the same documents, mutated too, through the command line."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clustersim import scenario as scenario_module
from clustersim.api import simulate
from clustersim.cli import main
from clustersim.scenario import parse_scenario
from clustersim.strategies import strategy_for_scenario

from . import fuzzing

FUZZ = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
"""Few examples, the same ones every run, no per-example deadline: the whole file stays
well under 30 s."""
PER_STRATEGY = settings(FUZZ, max_examples=6)
"""Examples per strategy label of :data:`fuzzing.DOCUMENTS`."""

QUICK_S = 5.0
"""Wall seconds within which a hostile input must be refused."""


def _check_finite_non_negative(value: Any, where: str = "summary") -> None:
    """Every number in ``value`` (nested) is finite and, unless a difference, non-negative."""
    if isinstance(value, dict):
        for key, item in value.items():
            _check_finite_non_negative(item, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_finite_non_negative(item, f"{where}[{i}]")
    elif isinstance(value, float):
        assert math.isfinite(value), where
        assert value >= 0, where


@pytest.mark.parametrize("label", list(fuzzing.DOCUMENTS))
@PER_STRATEGY
@given(data=st.data())
def test_valid_documents_of_every_strategy_run_and_keep_the_invariants(
    label: str, data: st.DataObject
) -> None:
    """Each strategy, parameter-server mode and pipeline schedule: generated documents are
    run by that strategy, to a finite makespan, with every invariant checked."""
    scenario = parse_scenario(data.draw(fuzzing.DOCUMENTS[label]))
    assert strategy_for_scenario(scenario).name == fuzzing.STRATEGY_OF[label]
    result = simulate(scenario, check=True)
    assert math.isfinite(result.makespan_s) and result.makespan_s >= 0
    for record in result.records:
        assert 0 <= record.start_s <= record.end_s <= result.makespan_s
    _check_finite_non_negative(result.summary["devices"], "devices")
    _check_finite_non_negative(result.summary["makespan_s"], "makespan_s")


def test_documents_cover_every_strategy_and_schedule() -> None:
    """The generators reach every registered strategy a workload key or the training
    sections select, every parameter-server mode and every registered pipeline schedule
    (the jobs strategy, which a ``jobs:`` section selects, has tests of its own: test_jobs.py)."""
    from clustersim.parallel.schedules import Schedule
    from clustersim.scenario.training import ParameterServerSpec
    from clustersim.strategies import registered_strategies

    builtin = {
        name
        for name, cls in registered_strategies().items()
        if cls.__module__.startswith("clustersim.")  # not the plugins other tests register
        and cls.section is None
    }
    assert set(fuzzing.STRATEGY_OF.values()) == builtin
    modes = ParameterServerSpec.model_fields["mode"].annotation.__args__
    assert {f"parameter_server/{m}" for m in modes} <= set(fuzzing.DOCUMENTS)
    assert {f"pipeline/{s}" for s in Schedule.registry.names()} <= set(fuzzing.DOCUMENTS)


# --------------------------------------------------------------------------- broken documents


def _validate(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Run ``clustersim validate PATH`` in-process; return the exit code and stderr."""
    capsys.readouterr()
    code = main(["validate", str(path)])
    return code, capsys.readouterr().err


@FUZZ
@given(case=fuzzing.broken_documents())
def test_broken_documents_get_a_clean_error_with_a_key_path(
    case: tuple[dict[str, Any], str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc, key_path = case
    path = tmp_path / "broken.yaml"
    path.write_text(fuzzing.document_text(doc), encoding="utf-8")
    code, err = _validate(path, capsys)
    assert code == 2, err
    assert "Traceback" not in err
    assert f"{path}: " in err
    top = key_path.split(".")[0].split("[")[0]
    assert f"{path}: {top}" in err, (key_path, err)
    assert key_path in err, (key_path, err)


# --------------------------------------------------------------------------- specific cases


def _base() -> dict[str, Any]:
    return {
        "name": "base",
        "cluster": {"kind": "switch", "devices": 2, "link": {"bandwidth": "10GB/s"}},
        "workload": {
            "program": [{"id": "t", "transfer": {"src": "gpu0", "dst": "gpu1", "bytes": "1MB"}}]
        },
    }


@pytest.mark.parametrize("key", ["flops", "seconds", "bytes"])
def test_a_null_compute_amount_is_named_by_its_key(
    key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``compute: {flops: null}`` is an error at ``...compute.flops``, not a missing amount."""
    doc = _base()
    doc["workload"]["program"] = [{"id": "c", "compute": {"device": "gpu0", key: None}}]
    path = tmp_path / "null.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    code, err = _validate(path, capsys)
    assert code == 2
    assert f"workload.program[0].compute.{key}: expected an amount, got null" in err


def _two_tier(racks: int, nodes: int, gpus: int) -> dict[str, Any]:
    doc = _base()
    doc["cluster"] = {
        "racks": racks,
        "nodes_per_rack": nodes,
        "node": {"gpus": gpus, "pcie": {"bandwidth": "32GB/s"}, "nic": {"bandwidth": "100Gb/s"}},
    }
    doc["workload"]["program"][0]["transfer"] = {
        "src": "rack0/node0/cpu",
        "dst": "rack0/node0/gpu0",
        "bytes": "1MB",
    }
    return doc


def _write(tmp_path: Path, doc: dict[str, Any] | str | bytes, name: str = "case.yaml") -> Path:
    path = tmp_path / name
    if isinstance(doc, bytes):
        path.write_bytes(doc)
    else:
        path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc), encoding="utf-8")
    return path


def _rejected(path: Path, capsys: pytest.CaptureFixture[str], *expected: str) -> str:
    """Assert that validating ``path`` fails cleanly, naming each of ``expected`` (a hang
    shows as a test that never ends; tests/test_fuzz_cli.py's runner kills and classes
    them)."""
    code, err = _validate(path, capsys)
    assert code == 2, err
    assert "Traceback" not in err
    assert str(path) in err
    for text in expected:
        assert text in err, err
    return err


@pytest.mark.parametrize(
    "bandwidth, expected",
    [
        ("-1GB/s", "negative"),
        (-5, "negative"),
        (".nan", "not a number"),
        ("nanGB/s", "does not start with a number"),
        ("1e308GB/s", "too large"),
        ("1e400GB/s", "infinite"),
        (1e308, "no unit"),
        ("", "empty text"),
        ("10GB", "a size"),
    ],
)
def test_bad_bandwidths_are_rejected(
    bandwidth: Any, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = _base()
    doc["cluster"]["link"]["bandwidth"] = bandwidth
    text = yaml.safe_dump(doc)
    if bandwidth == ".nan":
        text = text.replace("'.nan'", ".nan")  # a real YAML NaN, not the string
    _rejected(_write(tmp_path, text), capsys, "cluster.link.bandwidth", expected)


def test_zero_bandwidth_is_refused_at_its_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A link of 0 B/s would never deliver a byte: refused when the scenario is read."""
    doc = _base()
    doc["cluster"]["link"]["bandwidth"] = 0
    path = _write(tmp_path, doc)
    capsys.readouterr()
    code = main(["run", str(path), "-o", str(tmp_path / "out"), "-q"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "cluster.link.bandwidth: must be greater than 0, got 0" in err


@pytest.mark.parametrize(
    "cluster, key",
    [
        ({"kind": "switch", "devices": 0, "link": {"bandwidth": "1GB/s"}}, "cluster.devices"),
        ({"kind": "ring", "devices": -3, "link": {"bandwidth": "1GB/s"}}, "cluster.devices"),
        (
            {"racks": 0, "node": {"pcie": {"bandwidth": "1GB/s"}, "nic": {"bandwidth": "1GB/s"}}},
            "cluster.racks",
        ),
        ({"kind": "custom", "devices": [], "links": []}, "cluster.devices"),
        ({}, "cluster.node"),
    ],
)
def test_empty_clusters_are_rejected(
    cluster: dict[str, Any], key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = _base()
    doc["cluster"] = cluster
    _rejected(_write(tmp_path, doc), capsys, key)


@pytest.mark.parametrize(
    "doc, what",
    [
        (_two_tier(1000, 1000, 1), "2,000,000 devices"),
        (_two_tier(1, 1, 10**7), "10,000,001 devices"),
        (_two_tier(10**12, 10**12, 10**12), "devices"),
        (
            {
                **_base(),
                "cluster": {"kind": "switch", "devices": 10**6, "link": {"bandwidth": "1GB/s"}},
            },
            "1,000,000 devices",
        ),
        (
            {
                **_base(),
                "cluster": {
                    "kind": "fully_connected",
                    "devices": 2000,
                    "link": {"bandwidth": "1GB/s"},
                },
            },
            "3,998,000 links",
        ),
    ],
)
def test_huge_clusters_are_refused_before_building(
    doc: dict[str, Any], what: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _rejected(_write(tmp_path, doc), capsys, "cluster:", what, "262,144")
    assert "3,000,000 links" in err


def test_cluster_at_the_limit_is_accepted() -> None:
    limit = scenario_module.MAX_DEVICES
    doc = {
        **_base(),
        "cluster": {"kind": "switch", "devices": limit, "link": {"bandwidth": "1GB/s"}},
    }
    assert parse_scenario(doc).cluster.devices == limit
    doc["cluster"]["devices"] = limit + 1
    with pytest.raises(scenario_module.ScenarioError, match="262,145 devices"):
        parse_scenario(doc)


@pytest.mark.parametrize("depth", [101, 10_000, 200_000])
def test_deeply_nested_lists_are_refused(
    depth: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = "name: deep\nworkload: " + "[" * depth + "]" * depth + "\n"
    _rejected(_write(tmp_path, text), capsys, "nested more than 100 levels")


def test_deeply_nested_mappings_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = "name: deep\nworkload:\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(150))
    _rejected(_write(tmp_path, text), capsys, "nested more than 100 levels")


def test_nesting_through_aliases_is_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = "a: &a " + "[" * 60 + "]" * 60 + "\nb: " + "[" * 60 + "*a" + "]" * 60 + "\n"
    _rejected(_write(tmp_path, text), capsys, "nested more than 100 levels")


def test_alias_bomb_is_refused_quickly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]")
    _rejected(_write(tmp_path, "\n".join(lines) + "\n"), capsys, "through aliases")


def test_recursive_alias_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _rejected(_write(tmp_path, "name: &n [*n]\n"), capsys, "recursive alias")


@pytest.mark.parametrize(
    "data, expected",
    [
        (b"name: caf\xe9\n", "not UTF-8"),
        (b"\xff\xfe\x00n\x00a", "not UTF-8"),
        (b"name: x\x00y\n", "invalid YAML"),
        (b"", "empty"),
        (b"- just\n- a list\n", "must be a mapping"),
        (b"name: [unclosed\n", "invalid YAML"),
    ],
)
def test_bad_bytes_are_rejected(
    data: bytes, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _rejected(_write(tmp_path, data), capsys, expected)


def test_a_20_mb_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "big.yaml"
    with path.open("w", encoding="utf-8") as fh:
        fh.write("name: big\n")
        fh.write(("# " + "x" * 1022 + "\n") * (20 * 1024))
    _rejected(path, capsys, "larger than 16 MiB")


def test_a_fifo_nobody_writes_to_is_refused_quickly(tmp_path: Path) -> None:
    """A named pipe nobody writes to gets a clean exit 2 naming it, never a hang."""
    os.mkfifo(tmp_path / "fifo")
    outcome = fuzzing.run_cli(["validate", "fifo"], tmp_path, limit_s=QUICK_S)
    assert outcome.exit_code == 2, outcome.stderr
    assert "fifo: " in outcome.stderr and fuzzing.TRACEBACK not in outcome.stderr


def test_duplicate_keys_are_rejected(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = yaml.safe_dump(_base()) + "cluster: {kind: ring}\n"
    _rejected(_write(tmp_path, text), capsys, "cluster: duplicate key")


def test_huge_transfer_runs_to_a_finite_time() -> None:
    doc = _base()
    doc["workload"]["program"][0]["transfer"]["bytes"] = "1e300B"
    result = simulate(parse_scenario(doc))
    assert math.isfinite(result.makespan_s) and result.makespan_s > 1e280
