"""Communicators: collectives of one process group run in issue order, one at a time;
channels split a collective into slices that run at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clustersim.api import simulate
from clustersim.scenario import parse_scenario
from clustersim.studies.sweep import load_document

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"

COLLECTIVE_SCENARIOS = [
    "data_parallel/no_overlap.yaml",
    "data_parallel/overlap.yaml",
    "ps_vs_ring/resnet50_ring.yaml",
    "ps_vs_ring/resnet50_hierarchical.yaml",
    "zero/gpt3_1.3b_stage1.yaml",
    "zero/gpt3_1.3b_stage2.yaml",
    "zero/gpt3_1.3b_stage3_prefetch.yaml",
    "zero/gpt3_1.3b_stage3_no_prefetch.yaml",
]


@pytest.mark.parametrize("model", ["flow", "analytical"])
@pytest.mark.parametrize("name", COLLECTIVE_SCENARIOS)
def test_no_two_collectives_of_one_group_overlap_on_a_device(name: str, model: str) -> None:
    """Every data-parallel collective of these scenarios runs over all workers: on each
    device, the collective rows of different collectives never overlap in time."""
    doc = load_document(SCENARIOS / name)
    doc["network"] = {**(doc.get("network") or {}), "model": model}
    rows = simulate(parse_scenario(doc, name)).timeline()
    rows = rows[rows.kind == "collective"]
    assert len(rows) > 0
    for _device, mine in rows.groupby("resource"):
        spans = (
            mine.groupby(["iteration", "label"])
            .agg(start=("start_s", "min"), end=("end_s", "max"))
            .sort_values("start")
        )
        starts, ends = spans.start.tolist(), spans.end.tolist()
        for k in range(1, len(starts)):
            assert starts[k] >= ends[k - 1] - 1e-15, (name, spans.index[k])


def switch_collective(channels: int, model: str) -> dict[str, Any]:
    return {
        "name": "channels",
        "cluster": {"kind": "switch", "devices": 8, "link": {"bandwidth": "25GB/s"}},
        "network": {"model": model, "channels": channels, "protocol": "none"},
        "workload": {"collective": "allreduce", "algorithm": "ring", "bytes": "8MB"},
    }


@pytest.mark.parametrize("model", ["flow", "analytical"])
@pytest.mark.parametrize("channels", [1, 2, 4])
def test_network_channels_run_slices_at_once_in_the_same_time(model: str, channels: int) -> None:
    """network.channels: c rings of S / c share every hop, the time of one ring of S
    (latency 0: 2 (n-1)/n S / B).  On a switch the c rings are copies of one (no node to
    rotate), played as one slice: one flow on a GPU's link, the summary says so."""
    result = simulate(parse_scenario(switch_collective(channels, model)))
    assert result.summary["time_s"] == pytest.approx(2 * 7 / 8 * 8e6 / 25e9, rel=1e-9)
    assert result.summary["channels"] == channels
    assert result.summary["channels_played"] == 1
    if model == "flow":
        peak = {row["link"]: row["peak_flows"] for row in result.links}
        assert peak["gpu0->switch"] == 1


def test_data_parallel_channels_override_the_network_default() -> None:
    """data_parallel.allreduce.channels (2) wins over network.channels (4): the summary's
    ``communication.ran.channels``."""
    doc = load_document(SCENARIOS / "data_parallel/overlap.yaml")
    doc["network"] = {"channels": 4}
    doc["data_parallel"]["allreduce"]["channels"] = 2
    result = simulate(parse_scenario(doc, "override"))
    assert result.summary["communication"]["ran"]["channels"] == 2
    doc["data_parallel"]["allreduce"].pop("channels")
    result = simulate(parse_scenario(doc, "network"))
    assert result.summary["communication"]["ran"]["channels"] == 4


def two_rack_ring(channels: int, routing: str = "ecmp") -> dict[str, Any]:
    return {
        "name": "ecmp-connections",
        "cluster": {
            "racks": 2,
            "nodes_per_rack": 1,
            "node": {"gpus": 2, "pcie": {"bandwidth": "32GB/s"}, "nic": {"bandwidth": "100Gb/s"}},
            "spines": 2,
            "spine_routing": routing,
        },
        "network": {"channels": channels, "protocol": "none"},
        "workload": {"collective": "allreduce", "algorithm": "ring", "bytes": "64MB"},
    }


def spine_bytes(doc: dict[str, Any]) -> dict[str, float]:
    result = simulate(parse_scenario(doc))
    return {r["link"]: r["bytes"] for r in result.links if "spine" in r["link"]}


def test_a_connection_keeps_its_ecmp_route_for_every_send() -> None:
    """A ring over 2 racks crosses each way once: with ECMP every send of that hop takes the
    one spine its connection hashes to (per-message hashing would spread its 6 sends), so of
    rack0's two uplinks one carries the hop's 2 (n-1)/n x 64 MB and the other nothing (it is
    not among the links that carried traffic)."""
    carried = spine_bytes(two_rack_ring(1))
    up = [v for k, v in carried.items() if k.startswith("rack0/tor->")]
    assert up == pytest.approx([2 * 3 / 4 * 64e6])


def test_channels_are_connections_of_their_own() -> None:
    """With 8 channels the hop's connections hash independently: both spines carry some of
    it, and together all of it."""
    carried = spine_bytes(two_rack_ring(8))
    up = [v for k, v in carried.items() if k.startswith("rack0/tor->")]
    assert len(up) == 2 and min(up) > 0.0
    assert sum(up) == pytest.approx(2 * 3 / 4 * 64e6)
    split = spine_bytes(two_rack_ring(1, "split"))
    assert sorted(v for k, v in split.items() if k.startswith("rack0/tor->")) == pytest.approx(
        [3 / 4 * 64e6] * 2
    )


@pytest.mark.parametrize("key", ["network", "data_parallel"])
def test_channels_are_bounded(key: str) -> None:
    """At most 64 channels (NCCL's limit): more is refused at its key path, not run."""
    from clustersim.errors import ScenarioError

    doc = load_document(SCENARIOS / "data_parallel/overlap.yaml")
    if key == "network":
        doc["network"] = {"channels": 10**9}
        path = "network.channels"
    else:
        doc["data_parallel"]["allreduce"]["channels"] = 65
        path = "data_parallel.allreduce.channels"
    with pytest.raises(ScenarioError) as info:
        parse_scenario(doc, "bounded")
    assert info.value.problems[0].path == path
