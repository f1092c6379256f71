"""Three-tier clusters (kind: three_tier): pods of racks under pod spines, pods under cores."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import clustersim
from clustersim.errors import ScenarioError
from clustersim.scenario import parse_scenario
from clustersim.studies.plan import resize_cluster
from clustersim.topology import Topology, build_topology

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def cluster(**extra: Any) -> dict[str, Any]:
    doc = {
        "kind": "three_tier",
        "pods": 2,
        "racks_per_pod": 2,
        "nodes_per_rack": 2,
        "node": {"gpus": 2, "pcie": {"bandwidth": "32GB/s"}, "nic": {"bandwidth": "100Gb/s"}},
    }
    doc.update(extra)
    return doc


def scenario(**extra: Any) -> dict[str, Any]:
    return {"name": "tt", "cluster": cluster(**extra), "workload": {"program": []}}


def topology(**extra: Any) -> Topology:
    return build_topology(parse_scenario(scenario(**extra)).cluster)


def test_routes_climb_only_as_high_as_they_must() -> None:
    """Same rack: through the ToR; same pod: a pod spine; other pod: pod spine, core, pod
    spine -- one route per (spine, core) plane."""
    topo = topology(spines=2, cores=3)
    a = "pod0/rack0/node0/gpu0"
    in_rack = [x.name for x in topo.routes(a, "pod0/rack0/node1/gpu0")[0].links]
    assert "pod0/rack0/tor->pod0/spine0" not in in_rack
    in_pod = topo.routes(a, "pod0/rack1/node0/gpu0")
    assert len(in_pod) == 2
    assert [x.name for x in in_pod[1].links][3:5] == [
        "pod0/rack0/tor->pod0/spine1",
        "pod0/spine1->pod0/rack1/tor",
    ]
    across = topo.routes(a, "pod1/rack1/node1/gpu1")
    assert len(across) == 2 * 3
    assert [x.name for x in across[5].links][3:7] == [
        "pod0/rack0/tor->pod0/spine1",
        "pod0/spine1->core2",
        "core2->pod1/spine1",
        "pod1/spine1->pod1/rack1/tor",
    ]


@pytest.mark.parametrize("rack_ratio", [1, 2])
@pytest.mark.parametrize("pod_ratio", [1, 4])
@pytest.mark.parametrize(("spines", "cores"), [(1, 1), (2, 2), (4, 1)])
def test_uplink_bandwidths_follow_the_ratios(
    rack_ratio: float, pod_ratio: float, spines: int, cores: int
) -> None:
    """ToR -> each spine: 2 nodes x 12.5 GB/s / rack ratio / spines; spine -> each core:
    2 racks x that total / pod ratio / (spines x cores)."""
    topo = topology(
        spines=spines,
        cores=cores,
        rack_uplink={"oversubscription": rack_ratio},
        pod_uplink={"oversubscription": pod_ratio},
    )
    rack_Bps = 2 * 12.5e9 / rack_ratio
    (tor_up,) = topo.select_links("pod1/rack0/tor->pod1/spine0")
    assert tor_up.bandwidth_Bps == pytest.approx(rack_Bps / spines)
    (core_up,) = topo.select_links(f"pod0/spine0->core{cores - 1}")
    assert core_up.bandwidth_Bps == pytest.approx(2 * rack_Bps / pod_ratio / (spines * cores))


def test_pod_oversubscription_worked_example() -> None:
    """scenarios/clusters/three_tier_pods.yaml: 4 cross-pod flows share pod 0's 12.5 GB/s core
    uplink: 1 GB at 3.125 GB/s = 0.32 s."""
    summary = clustersim.simulate(SCENARIOS / "clusters" / "three_tier_pods.yaml").summary
    assert summary["makespan_s"] == pytest.approx(1e9 / 3.125e9, rel=1e-9)


def test_one_pod_needs_no_core() -> None:
    topo = topology(pods=1)
    assert not [s for s in topo.switches if s.startswith("core")]
    assert len(topo.routes("pod0/rack0/node0/gpu0", "pod0/rack1/node0/gpu0")) == 1


def test_plan_resizes_by_whole_pods() -> None:
    doc = scenario()
    assert resize_cluster(doc, 64)["cluster"]["pods"] == 8
    with pytest.raises(ScenarioError) as info:
        resize_cluster(doc, 12)
    assert info.value.problems[0].path == "--devices"
    assert "whole pods of 8 GPUs" in info.value.problems[0].message


def test_unknown_key_and_too_large_name_the_path() -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(scenario(corez=2))
    assert info.value.problems[0].path == "cluster.corez"
    with pytest.raises(ScenarioError) as info:
        parse_scenario(scenario(pods=100_000))
    assert "too many" in info.value.problems[0].message
