"""The ``collective`` workload: through clustersim.simulate, the CLI, and its errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

import clustersim
from clustersim.api import prepare
from clustersim.cli import main
from clustersim.errors import ScenarioError
from clustersim.scenario import parse_scenario

from .conftest import SCENARIOS, TEXTBOOK

MB = 1e6

SUMMARY_KEYS = {
    "op",
    "algorithm",
    "ranks",
    "group",
    "bytes",
    "iterations",
    "model",
    "time_s",
    "times_s",
    "algbw_GBps",
    "busbw_GBps",
    "bytes_sent_per_device",
}


def ring8(**workload: Any) -> dict[str, Any]:
    """R1: 8 GPUs in a ring of 54 GB/s hops, a 160 MB ring all-reduce (overridable)."""
    return {
        "name": "r1",
        "cluster": {"kind": "ring", "devices": 8, "link": {"bandwidth": "54GB/s"}},
        "workload": {"collective": "allreduce", "algorithm": "ring", "bytes": "160MB", **workload},
        "network": dict(TEXTBOOK),
    }


def two_tier(**workload: Any) -> dict[str, Any]:
    return {
        "name": "tt",
        "cluster": {
            "racks": 2,
            "nodes_per_rack": 2,
            "node": {
                "gpus": 4,
                "pcie": {"bandwidth": "64GB/s"},
                "nvlink": {"bandwidth": "300GB/s"},
                "nic": {"bandwidth": "100Gb/s"},
            },
        },
        "workload": {"collective": "allreduce", "bytes": "64MB", **workload},
        "network": dict(TEXTBOOK),
    }


def simulate(doc: dict[str, Any]) -> clustersim.api.Result:
    return clustersim.simulate(parse_scenario(doc))


R1_TIME = 2 * 7 / 8 * 160e6 / 54e9


def test_r1_through_simulate() -> None:
    s = simulate(ring8()).summary
    assert SUMMARY_KEYS <= set(s)
    assert s["workload"] == "collective"
    assert s["op"] == "allreduce" and s["algorithm"] == "ring" and s["ranks"] == 8
    assert s["time_s"] == pytest.approx(R1_TIME, rel=1e-9)
    assert s["time_s"] == pytest.approx(5.185e-3, rel=5e-3)
    assert s["times_s"] == [s["time_s"]]
    assert s["algbw_GBps"] == pytest.approx(160e6 / R1_TIME / 1e9, rel=1e-9)
    assert s["busbw_GBps"] == pytest.approx(54.0, rel=1e-9)
    assert s["bytes_sent_per_device"] == pytest.approx(2 * 7 / 8 * 160e6, rel=1e-12)  # R3
    assert s["makespan_s"] == pytest.approx(R1_TIME, rel=1e-9)


def test_iterations_run_back_to_back() -> None:
    s = simulate(ring8(iterations=3)).summary
    assert len(s["times_s"]) == 3
    assert s["times_s"] == pytest.approx([R1_TIME] * 3, rel=1e-9)
    assert s["makespan_s"] == pytest.approx(3 * R1_TIME, rel=1e-9)


@pytest.mark.parametrize("algorithm", ["ring", "hierarchical"])
def test_analytical_mode_matches_flow(algorithm: str) -> None:
    doc = two_tier(algorithm=algorithm, iterations=2)
    flow = simulate(doc).summary
    doc["network"] = {**doc.get("network", {}), "model": "analytical"}
    ana = simulate(doc).summary
    assert ana["model"] == "analytical" and flow["model"] == "flow"
    assert ana["time_s"] == pytest.approx(flow["time_s"], rel=1e-9)
    assert ana["bytes_sent_per_device"] == flow["bytes_sent_per_device"]
    assert ana["makespan_s"] == pytest.approx(2 * flow["time_s"], rel=1e-9)


def test_options_group_aliases_and_defaults() -> None:
    s = simulate(
        two_tier(
            collective="all-reduce",
            algorithm="hierarchical",
            group="rack0/*/gpu*",
            options={"inter": "ring"},
            chunk="4MB",
        )
    ).summary
    assert s["op"] == "allreduce" and s["ranks"] == 8
    assert all(name.startswith("rack0/") for name in s["group"])
    # default group: every GPU (not the CPUs)
    s = simulate(two_tier(collective="all_gather")).summary
    assert s["op"] == "allgather" and s["ranks"] == 16
    assert s["busbw_GBps"] == pytest.approx(s["algbw_GBps"] * 15 / 16, rel=1e-12)


def test_rooted_broadcast() -> None:
    s = simulate(ring8(collective="broadcast", root=3, bytes="16MB")).summary
    assert s["op"] == "broadcast" and s["time_s"] > 0
    assert s["busbw_GBps"] == pytest.approx(s["algbw_GBps"], rel=1e-12)


@pytest.mark.parametrize(
    ("workload", "path", "words"),
    [
        ({"collective": "alreduce"}, "workload.collective", "did you mean"),
        ({"algorithm": "rign"}, "workload.algorithm", "unknown algorithm"),
        ({"algorithm": "hierarchical"}, "workload.algorithm", "two_tier"),
        ({"group": "gpu9*"}, "workload.group", "no device matches"),
        ({"collective": "reduce", "root": 8}, "workload.root", "not a rank"),
        ({"bytes": "160"}, "workload.bytes", ""),
        ({"iterations": 0}, "workload.iterations", ""),
        ({"colour": "red"}, "workload.colour", ""),
    ],
)
def test_errors_name_the_key_path(workload: dict[str, Any], path: str, words: str) -> None:
    with pytest.raises(ScenarioError) as info:
        simulate(ring8(**workload))
    text = str(info.value)
    assert path in text
    assert words.lower() in text.lower()


def write(tmp_path: Path, doc: dict[str, Any], name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


def test_cli_run_writes_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, ring8(iterations=2))
    out = tmp_path / "out"
    assert main(["run", str(path), "-o", str(out), "-q"]) == 0
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert SUMMARY_KEYS <= set(summary)
    assert summary["time_s"] == pytest.approx(R1_TIME, rel=1e-9)
    assert (out / "timeline.csv").exists() and (out / "links.csv").exists()


@pytest.mark.parametrize(
    ("workload", "path"),
    [
        ({"collective": "allreduse"}, "workload.collective"),
        ({"algorithm": "hierarchical"}, "workload.algorithm"),
        ({"group": "nothing*"}, "workload.group"),
    ],
)
def test_cli_bad_input_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], workload: dict[str, Any], path: str
) -> None:
    file = write(tmp_path, ring8(**workload))
    assert main(["run", str(file), "-o", str(tmp_path / "out"), "-q"]) == 2
    assert path in capsys.readouterr().err
    assert main(["validate", str(file)]) == 2
    assert path in capsys.readouterr().err


# -- shipped scenarios --------------------------------------------------------

SHIPPED = sorted((SCENARIOS / "collectives").glob("*.yaml")) + [
    SCENARIOS / "clusters" / "dgx-a100-4nodes.yaml"
]


QUICK_EVENTS = 100_000
"""A shipped collective example stays a quick run: at most this many events (transfers and
records; the engine plays about a million a second on 2 cores, docs/benchmarks.md)."""


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_scenarios_validate_and_run_fast(path: Path) -> None:
    assert path.read_text(encoding="utf-8").startswith("#")  # says what it shows
    assert main(["validate", str(path)]) == 0
    work = prepare(path).work
    assert work is not None and work.events <= QUICK_EVENTS  # fast by its size, not a clock
    result = clustersim.simulate(path)
    assert result.summary["time_s"] > 0
    assert result.summary["engine"]["records"] <= work.events


def test_shipped_numbers() -> None:
    r1 = clustersim.simulate(SCENARIOS / "collectives" / "ring_allreduce_r1.yaml").summary
    assert r1["time_s"] == pytest.approx(5.185e-3, rel=5e-3)
    ring = clustersim.simulate(SCENARIOS / "collectives" / "oversubscribed_ring.yaml").summary
    hier = clustersim.simulate(
        SCENARIOS / "collectives" / "oversubscribed_hierarchical.yaml"
    ).summary
    assert ring["time_s"] == pytest.approx(12.60e-3, rel=1e-3)
    assert hier["time_s"] == pytest.approx(12.133e-3, rel=1e-3)
    dgx = clustersim.simulate(SCENARIOS / "clusters" / "dgx-a100-4nodes.yaml").summary
    expected = 2 * 7 / 8 * 64e6 / 300e9 + 2 * 3 / 4 * 8e6 / (25e9 / 8)
    assert dgx["time_s"] == pytest.approx(expected, rel=1e-9)
    assert dgx["time_s"] == pytest.approx(4.21e-3, rel=1e-3)


@pytest.mark.parametrize("algorithm", ["ring", "tree", "double_tree", "hierarchical", "auto"])
def test_analytical_bytes_sent_scale_to_any_size(algorithm: str) -> None:
    """The analytical model prices a call without playing it, so a petabyte all-reduce
    runs at once; its bytes sent per device are measured on a smaller copy when the
    pipeline of pieces would be too large to build, and scale exactly with the size: the
    ratio to the size is the flow model's at 1 MB, for sizes from 1 MB to 1e24 B (the
    pipelined trees cut 1 PB into millions of pieces).  Ring: 2 (n - 1) / n."""
    small = two_tier(algorithm=algorithm, bytes="1MB")
    flow_ratio = simulate(small).summary["bytes_sent_per_device"] / MB
    if algorithm == "ring":
        assert flow_ratio == pytest.approx(2 * 15 / 16, rel=1e-12)
    for size in (1e6, 1e9, 1e15, 1e24):
        doc = {
            **two_tier(algorithm=algorithm, bytes=f"{size:g}B"),
            "network": {"model": "analytical", **TEXTBOOK},
        }
        s = simulate(doc).summary
        assert s["bytes_sent_per_device"] / size == pytest.approx(flow_ratio, rel=1e-9), size
