"""Rail-optimized clusters (kind: rail_optimized): rail switches, PXN, spines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import clustersim
from clustersim.collectives import CollectiveCall, analytical_time
from clustersim.errors import ScenarioError
from clustersim.scenario import parse_scenario
from clustersim.topology import Topology, build_topology

from .conftest import flow_time

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def cluster(**extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "kind": "rail_optimized",
        "groups": 2,
        "nodes_per_group": 2,
        "node": {
            "gpus": 4,
            "nics": 4,
            "pcie": {"bandwidth": "32GB/s"},
            "nvlink": {"bandwidth": "300GB/s"},
            "nic": {"bandwidth": "200Gb/s"},
        },
        "spines": 2,
    }
    doc.update(extra)
    return doc


def topology(**extra: Any) -> Topology:
    doc = {"name": "rails", "cluster": cluster(**extra), "workload": {"program": []}}
    return build_topology(parse_scenario(doc).cluster)


def names(topo: Topology, src: str, dst: str, k: int = 0) -> list[str]:
    return [link.name for link in topo.routes(src, dst)[k].links]


def test_same_rail_stays_on_its_rail_switch() -> None:
    topo = topology()
    assert names(topo, "group0/node0/gpu2", "group0/node1/gpu2") == [
        "group0/node0/gpu2->group0/node0/pcie2",
        "group0/node0/pcie2->group0/node0/nic2",
        "group0/node0/nic2->group0/rail2",
        "group0/rail2->group0/node1/nic2",
        "group0/node1/nic2->group0/node1/pcie2",
        "group0/node1/pcie2->group0/node1/gpu2",
    ]


def test_cross_rail_goes_over_nvlink_first_pxn() -> None:
    """GPU 0 to GPU 3 of another node: NVLink to GPU 3 of its own node, then rail 3."""
    topo = topology()
    route = names(topo, "group0/node0/gpu0", "group0/node1/gpu3")
    assert route[:3] == [
        "group0/node0/gpu0->group0/node0/nvswitch",
        "group0/node0/nvswitch->group0/node0/gpu3",
        "group0/node0/gpu3->group0/node0/pcie3",
    ]
    assert "group0/node0/nic3->group0/rail3" in route


def test_between_groups_through_the_spines_on_the_same_rail() -> None:
    topo = topology()
    routes = topo.routes("group0/node0/gpu1", "group1/node1/gpu1")
    assert len(routes) == 2
    assert names(topo, "group0/node0/gpu1", "group1/node1/gpu1", 1)[3:5] == [
        "group0/rail1->spine1",
        "spine1->group1/rail1",
    ]


def test_without_nvlink_cross_rail_goes_through_a_spine() -> None:
    doc = cluster()
    del doc["node"]["nvlink"]
    topo = build_topology(
        parse_scenario({"name": "r", "cluster": doc, "workload": {"program": []}}).cluster
    )
    route = names(topo, "group0/node0/gpu0", "group0/node1/gpu3")
    assert "group0/rail0->spine0" in route and "spine0->group0/rail3" in route


@pytest.mark.parametrize("ratio", [1, 4])
def test_rail_uplink_bandwidth(ratio: float) -> None:
    """Each rail switch: nodes_per_group x 25 GB/s / ratio to the spines, split over them."""
    topo = topology(rail_uplink={"oversubscription": ratio})
    (up,) = topo.select_links("group1/rail3->spine0")
    assert up.bandwidth_Bps == pytest.approx(2 * 25e9 / ratio / 2)


@pytest.mark.parametrize("model", ["flow", "analytical"])
@pytest.mark.parametrize(("nodes", "size"), [(4, 64e6), (2, 16e6)])
def test_hierarchical_all_reduce_uses_one_rail_per_gpu(model: str, nodes: int, size: float) -> None:
    """8 GPUs, 8 rails: NVSwitch reduce-scatter and all-gather, each rail's ring on its own
    NIC: 2 x 7/8 S / 300 GB/s + 2 (N-1)/N (S/8) / 25 GB/s (1e-9)."""
    node = {
        "gpus": 8,
        "nics": 8,
        "pcie": {"bandwidth": "32GB/s"},
        "nvlink": {"bandwidth": "300GB/s"},
        "nic": {"bandwidth": "200Gb/s"},
    }
    topo = topology(groups=1, nodes_per_group=nodes, node=node)
    devices = tuple(d.name for d in topo.select("*gpu*"))
    call = CollectiveCall("allreduce", devices, size, algorithm="hierarchical")
    expected = 2 * 7 / 8 * size / 300e9 + 2 * (nodes - 1) / nodes * size / 8 / 25e9
    assert analytical_time(call, topo) == pytest.approx(expected, rel=1e-9)
    assert flow_time(call, topo, model) == pytest.approx(expected, rel=1e-9)


def test_one_nic_per_gpu_is_required() -> None:
    doc = cluster()
    doc["node"]["nics"] = 1
    with pytest.raises(ScenarioError) as info:
        parse_scenario({"name": "r", "cluster": doc, "workload": {"program": []}})
    (problem,) = info.value.problems
    assert problem.path == "cluster.node.nics"
    assert problem.allowed == "nics: 4"


def test_shipped_scenario_hand_worked_number() -> None:
    """scenarios/clusters/rail_optimized_2groups.yaml: its comment's 0.853 ms."""
    summary = clustersim.simulate(SCENARIOS / "clusters" / "rail_optimized_2groups.yaml").summary
    assert summary["time_s"] == pytest.approx(2 * 7 / 8 * 64e6 / 300e9 + 2 * 3 / 4 * 8e6 / 25e9)


def test_plan_resizes_by_whole_groups() -> None:
    from clustersim.studies.plan import resize_cluster

    doc = {"name": "r", "cluster": cluster(), "workload": {"program": []}}
    assert resize_cluster(doc, 32)["cluster"]["groups"] == 4
    with pytest.raises(ScenarioError, match="whole rail groups of 8 GPUs"):
        resize_cluster(doc, 12)
