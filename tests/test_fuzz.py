"""Fuzzed scenario documents: valid ones run and keep the invariants, broken ones get a
clean error (exit code 2, the file and a key path, never a traceback), and hostile files
(huge clusters, deep nesting, alias bombs, huge files, bad bytes) are refused quickly."""

from __future__ import annotations

import copy
import math
import time
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

FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
"""Few examples, no per-example deadline: the whole file stays well under 30 s."""

QUICK_S = 5.0
"""Wall seconds within which a hostile input must be refused."""

# --------------------------------------------------------------------------- documents


def _bandwidth() -> st.SearchStrategy[str]:
    return st.builds(lambda v, u: f"{v}{u}", st.integers(1, 400), st.sampled_from(["GB/s", "Gb/s"]))


def _latency() -> st.SearchStrategy[Any]:
    return st.one_of(st.just(0), st.builds(lambda v: f"{v}us", st.integers(0, 20)))


@st.composite
def flat_clusters(draw: st.DrawFn) -> tuple[dict[str, Any], list[str]]:
    """A switch, ring or fully connected cluster of 2-8 GPUs, and its device names."""
    n = draw(st.integers(2, 8))
    kind = draw(st.sampled_from(["switch", "ring", "fully_connected"]))
    cluster = {
        "kind": kind,
        "devices": n,
        "link": {"bandwidth": draw(_bandwidth()), "latency": draw(_latency())},
    }
    return cluster, [f"gpu{i}" for i in range(n)]


@st.composite
def two_tier_clusters(draw: st.DrawFn) -> tuple[dict[str, Any], list[str]]:
    """Racks of nodes of 1-2 GPUs (2 to 8 GPUs in all), and the GPU names."""
    racks, nodes, gpus = draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(1, 2))
    gpus = 2 if racks * nodes == 1 else gpus  # at least 2 GPUs in all
    node: dict[str, Any] = {
        "gpus": gpus,
        "pcie": {"bandwidth": draw(_bandwidth())},
        "nic": {"bandwidth": draw(_bandwidth()), "latency": draw(_latency())},
    }
    if gpus > 1 and draw(st.booleans()):
        node["nvlink"] = {"bandwidth": draw(_bandwidth())}
    cluster = {
        "racks": racks,
        "nodes_per_rack": nodes,
        "node": node,
        "rack_uplink": {"oversubscription": draw(st.sampled_from([1, 2, 4.5]))},
    }
    names = [
        f"rack{r}/node{n}/gpu{g}" for r in range(racks) for n in range(nodes) for g in range(gpus)
    ]
    return cluster, names


clusters = st.one_of(flat_clusters(), two_tier_clusters())


@st.composite
def programs(draw: st.DrawFn, devices: list[str]) -> list[dict[str, Any]]:
    """1-5 transfers and computes with random sizes, each after some earlier ones."""
    ops: list[dict[str, Any]] = []
    for i in range(draw(st.integers(1, 5))):
        if draw(st.booleans()):
            src, dst = draw(st.permutations(devices))[:2]
            size = f"{draw(st.integers(0, 500))}{draw(st.sampled_from(['kB', 'MB', 'KiB']))}"
            op: dict[str, Any] = {"transfer": {"src": src, "dst": dst, "bytes": size}}
        else:
            amount = draw(
                st.sampled_from(
                    [
                        {"flops": f"{draw(st.integers(0, 900))}GFLOP"},
                        {"seconds": f"{draw(st.integers(0, 900))}us"},
                        {"bytes": f"{draw(st.integers(0, 900))}MB"},
                    ]
                )
            )
            op = {"compute": {"device": draw(st.sampled_from(devices)), **amount}}
        after = (
            draw(st.lists(st.sampled_from([f"op{j}" for j in range(i)]), unique=True)) if i else []
        )
        ops.append({"id": f"op{i}", **op, **({"after": after} if after else {})})
    return ops


@st.composite
def collectives(draw: st.DrawFn) -> dict[str, Any]:
    """One collective over every GPU."""
    op = draw(st.sampled_from(["allreduce", "allgather", "reducescatter", "broadcast"]))
    algorithm = draw(st.sampled_from(["ring", "direct", "root"]))
    return {
        "collective": op,
        "algorithm": algorithm,
        "bytes": f"{draw(st.integers(1, 64))}MB",
        "iterations": draw(st.integers(1, 2)),
    }


@st.composite
def workload_documents(draw: st.DrawFn) -> dict[str, Any]:
    """A valid scenario with a program or a collective workload."""
    cluster, devices = draw(clusters)
    if draw(st.booleans()):
        workload: dict[str, Any] = {"program": draw(programs(devices))}
    else:
        workload = draw(collectives())
    return {
        "name": "fuzz",
        "seed": draw(st.integers(0, 9)),
        "cluster": cluster,
        "workload": workload,
    }


@st.composite
def training_documents(draw: st.DrawFn) -> dict[str, Any]:
    """A tiny data-parallel training run of explicit layers on a flat cluster."""
    cluster, devices = draw(flat_clusters())
    layers = [
        {
            "name": f"l{i}",
            "params": f"{draw(st.integers(1, 50))}e5",
            "flops": f"{draw(st.integers(1, 50))}e8",
            "repeat": draw(st.integers(1, 3)),
        }
        for i in range(draw(st.integers(1, 3)))
    ]
    return {
        "name": "fuzz-training",
        "cluster": cluster,
        "model": {"layers": layers},
        "training": {
            "global_batch": len(devices) * draw(st.integers(1, 8)),
            "iterations": draw(st.integers(1, 2)),
            "precision": draw(st.sampled_from(["fp32", "fp16"])),
        },
        "data_parallel": {
            "allreduce": {
                "bucket": f"{draw(st.integers(1, 20))}MB",
                "overlap": draw(st.booleans()),
            }
        },
    }


valid_documents = st.one_of(workload_documents(), training_documents())


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


@FUZZ
@given(doc=valid_documents)
def test_valid_documents_run_and_keep_the_invariants(doc: dict[str, Any]) -> None:
    result = simulate(parse_scenario(doc), check=True)
    assert math.isfinite(result.makespan_s) and result.makespan_s >= 0
    for record in result.records:
        assert 0 <= record.start_s <= record.end_s <= result.makespan_s
    _check_finite_non_negative(result.summary["devices"], "devices")
    _check_finite_non_negative(result.summary["makespan_s"], "makespan_s")


# --------------------------------------------------------------------------- broken documents


def _leaves(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths (keys and indices) of every scalar in ``doc``."""
    if isinstance(doc, dict):
        return [p for k, v in doc.items() for p in _leaves(v, (*path, k))]
    if isinstance(doc, list):
        return [p for i, v in enumerate(doc) for p in _leaves(v, (*path, i))]
    return [path]


def _mappings(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths of every mapping in ``doc`` (the document itself included)."""
    found = [path] if isinstance(doc, dict) else []
    items = (
        doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else []
    )
    return found + [p for k, v in items for p in _mappings(v, (*path, k))]


def _key_path(path: tuple[Any, ...]) -> str:
    """``('cluster', 'link', 'bandwidth')`` as the CLI writes it: ``cluster.link.bandwidth``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def _at(doc: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        doc = doc[part]
    return doc


UNIT_KEYS = {"bandwidth", "latency", "bytes", "seconds", "memory", "bucket"}
"""Keys whose values are quantities with units."""

REQUIRED = [
    ("name",),
    ("cluster",),
    ("cluster", "link"),
    ("cluster", "node"),
    ("cluster", "node", "pcie"),
    ("cluster", "node", "nic"),
    ("cluster", "link", "bandwidth"),
    ("cluster", "node", "nic", "bandwidth"),
    ("workload", "bytes"),
    ("training", "global_batch"),
]
"""Keys that a valid document cannot do without (those present in it are dropped)."""

ALWAYS_BAD = [float("nan"), -1, -2.5, ["x"], {"bogus": 1}, None]
"""Values that no scalar of a scenario accepts."""
BAD_QUANTITIES = ["1e308GB/s", "1e400B", "", "12 parsecs", 1e308, "-3MB", "nanGB/s"]
"""Values that no quantity accepts (a size given a bandwidth, a bandwidth a size ...)."""


@st.composite
def broken_documents(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    """A valid document with one thing broken, and the key path the error must name."""
    doc = copy.deepcopy(draw(valid_documents))
    mutation = draw(st.sampled_from(["drop", "unknown", "value"]))
    if mutation == "drop":
        present = [p for p in REQUIRED if _has(doc, p)]
        path = draw(st.sampled_from(present))
        del _at(doc, path[:-1])[path[-1]]
        return doc, _key_path(path)
    if mutation == "unknown":
        parent = draw(st.sampled_from(_mappings(doc)))
        _at(doc, parent)["zz_unknown"] = 1
        return doc, _key_path((*parent, "zz_unknown"))
    leaves = [p for p in _leaves(doc) if p[-1] not in ("name", "seed") or len(p) > 1]
    path = draw(st.sampled_from(leaves))
    is_quantity = isinstance(path[-1], str) and path[-1] in UNIT_KEYS
    bad = draw(st.sampled_from(ALWAYS_BAD + (BAD_QUANTITIES if is_quantity else [])))
    _at(doc, path[:-1])[path[-1]] = bad
    return doc, _key_path(path)


def _has(doc: Any, path: tuple[Any, ...]) -> bool:
    for part in path:
        if not isinstance(doc, dict) or part not in doc:
            return False
        doc = doc[part]
    return True


def _validate(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Run ``clustersim validate PATH`` in-process; return the exit code and stderr."""
    capsys.readouterr()
    code = main(["validate", str(path)])
    return code, capsys.readouterr().err


@FUZZ
@given(case=broken_documents())
def test_broken_documents_get_a_clean_error_with_a_key_path(
    case: tuple[dict[str, Any], str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc, key_path = case
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
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
    """Assert that validating ``path`` fails quickly and cleanly, naming each of ``expected``."""
    started = time.monotonic()
    code, err = _validate(path, capsys)
    assert time.monotonic() - started < QUICK_S
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
    assert "1,000,000 links" in err


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


def test_duplicate_keys_are_rejected(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = yaml.safe_dump(_base()) + "cluster: {kind: ring}\n"
    _rejected(_write(tmp_path, text), capsys, "cluster: duplicate key")


def test_huge_transfer_runs_to_a_finite_time() -> None:
    doc = _base()
    doc["workload"]["program"][0]["transfer"]["bytes"] = "1e300B"
    result = simulate(parse_scenario(doc))
    assert math.isfinite(result.makespan_s) and result.makespan_s > 1e280
