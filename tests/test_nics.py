"""Nodes with several NICs (node.nics): placement, routes, uplinks, and the hierarchical
all-reduce whose rails each get a NIC of their own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import clustersim
from clustersim.collectives import CollectiveCall, analytical_time
from clustersim.errors import ScenarioError
from clustersim.scenario import parse_scenario
from clustersim.scenario.shorthand import scenario_of
from clustersim.topology import Topology, build_topology

from .conftest import flow_time

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
MB = 1e6


def cluster(nics: int, gpus: int = 8, nodes: int = 4, racks: int = 1, ratio: float = 1) -> dict:
    return {
        "kind": "two_tier",
        "racks": racks,
        "nodes_per_rack": nodes,
        "node": {
            "gpus": gpus,
            "nics": nics,
            "pcie": {"bandwidth": "32GB/s"},
            "nvlink": {"bandwidth": "300GB/s"},
            "nic": {"bandwidth": "200Gb/s"},
        },
        "rack_uplink": {"oversubscription": ratio},
    }


def topology(**kwargs) -> Topology:
    return build_topology(scenario_of(cluster(**kwargs)).cluster)


@pytest.mark.parametrize(("nics", "gpus"), [(1, 8), (2, 8), (4, 8), (8, 8), (3, 6), (2, 3)])
def test_gpu_i_leaves_through_nic_floor_i_n_over_gpus(nics: int, gpus: int) -> None:
    topo = topology(nics=nics, gpus=gpus, nodes=2)
    for i in range(gpus):
        route = topo.routes(f"rack0/node0/gpu{i}", f"rack0/node1/gpu{i}")[0]
        nic = "rack0/node0/nic" if nics == 1 else f"rack0/node0/nic{i * nics // gpus}"
        assert any(link.src == nic and link.dst == "rack0/tor" for link in route.links)


def test_gpus_on_different_switches_meet_at_the_pcie_root_and_the_cpu_uses_nic0() -> None:
    """Without NVLink, GPUs 0 and 7 of a 4-NIC node talk through pcie0 -> root -> pcie3;
    the CPU sits on the root and goes out through nic0."""
    doc = cluster(nics=4, nodes=2)
    del doc["node"]["nvlink"]
    topo = build_topology(scenario_of(doc).cluster)
    names = [link.name for link in topo.routes("rack0/node0/gpu0", "rack0/node0/gpu7")[0].links]
    assert names == [
        "rack0/node0/gpu0->rack0/node0/pcie0",
        "rack0/node0/pcie0->rack0/node0/root",
        "rack0/node0/root->rack0/node0/pcie3",
        "rack0/node0/pcie3->rack0/node0/gpu7",
    ]
    same = [link.name for link in topo.routes("rack0/node0/gpu0", "rack0/node0/gpu1")[0].links]
    assert same == ["rack0/node0/gpu0->rack0/node0/pcie0", "rack0/node0/pcie0->rack0/node0/gpu1"]
    out = [link.name for link in topo.routes("rack0/node0/cpu", "rack0/node1/cpu")[0].links]
    assert out[:4] == [
        "rack0/node0/cpu->rack0/node0/root",
        "rack0/node0/root->rack0/node0/pcie0",
        "rack0/node0/pcie0->rack0/node0/nic0",
        "rack0/node0/nic0->rack0/tor",
    ]


@pytest.mark.parametrize("nics", [1, 2, 8])
@pytest.mark.parametrize("ratio", [1, 4])
def test_rack_uplink_counts_every_nic(nics: int, ratio: float) -> None:
    """uplink = nodes_per_rack x nics x NIC / ratio (2 racks, one spine)."""
    topo = topology(nics=nics, racks=2, nodes=4, ratio=ratio)
    (up,) = topo.select_links("rack0/tor->spine0")
    assert up.bandwidth_Bps == pytest.approx(4 * nics * 25e9 / ratio)


def test_more_nics_than_gpus_is_refused() -> None:
    with pytest.raises(ScenarioError) as info:
        scenario_of(cluster(nics=9))
    (problem,) = info.value.problems
    assert problem.path == "cluster.node.nics"
    assert problem.allowed == "1 to 8"


def hierarchical_s(nodes: int, g: int, N: int, size: float) -> float:
    """Hand formula: NVSwitch reduce-scatter + all-gather of S, and g rails each all-reducing
    S / g over the nodes, ceil(g / N) rails per NIC (25 GB/s)."""
    intra = 2 * (g - 1) / g * size / 300e9
    inter = 2 * (nodes - 1) / nodes * (size / g) / 25e9 * (g // N)
    return intra + inter


@pytest.mark.parametrize("model", ["flow", "analytical"])
@pytest.mark.parametrize("nics", [1, 2, 4, 8])
@pytest.mark.parametrize(("nodes", "size"), [(4, 64 * MB), (2, 16 * MB), (3, 48 * MB)])
def test_hierarchical_rails_share_only_their_nic(
    model: str, nics: int, nodes: int, size: float
) -> None:
    """8 GPUs per node, N NICs: 8 / N rails share each NIC, in both models (1e-9)."""
    topo = topology(nics=nics, nodes=nodes)
    devices = tuple(d.name for d in topo.select("*/gpu*"))
    call = CollectiveCall("allreduce", devices, size, algorithm="hierarchical")
    expected = hierarchical_s(nodes, 8, nics, size)
    assert analytical_time(call, topo) == pytest.approx(expected, rel=1e-9)
    assert flow_time(call, topo, model) == pytest.approx(expected, rel=1e-9)


def test_dgx_scenarios_hand_worked_numbers() -> None:
    """scenarios/clusters: 0.853 ms with 8 NICs per node against 4.21 ms with one."""
    eight = clustersim.simulate(SCENARIOS / "clusters" / "dgx-a100-4nodes-8nics.yaml").summary
    one = clustersim.simulate(SCENARIOS / "clusters" / "dgx-a100-4nodes.yaml").summary
    assert eight["time_s"] == pytest.approx(2 * 7 / 8 * 64e6 / 300e9 + 2 * 3 / 4 * 8e6 / 25e9)
    assert eight["time_s"] == pytest.approx(0.853e-3, rel=1e-3)
    assert one["time_s"] == pytest.approx(4.21e-3, rel=1e-3)


def test_a_one_nic_node_is_built_as_before() -> None:
    """nics: 1 keeps the single PCIe switch and NIC names (goldens rely on them)."""
    topo = build_topology(
        parse_scenario(
            {
                "name": "x",
                "cluster": cluster(nics=1, nodes=1),
                "workload": {"program": []},
            }
        ).cluster
    )
    assert "rack0/node0/pcie" in topo.switches and "rack0/node0/nic" in topo.switches
    assert "rack0/node0/root" not in topo.switches


# -- NVLink domains spanning nodes ------------------------------------------------------


def nvl_cluster(domain: int, nodes: int = 4, gpus: int = 4, nvlink: Any = "300GB/s") -> dict:
    node: dict[str, Any] = {
        "gpus": gpus,
        "nvlink_domain": domain,
        "pcie": {"bandwidth": "32GB/s"},
        "nic": {"bandwidth": "200Gb/s"},
    }
    if nvlink is not None:
        node["nvlink"] = {"bandwidth": nvlink} if isinstance(nvlink, str) else nvlink
    return {"kind": "two_tier", "racks": 1, "nodes_per_rack": nodes, "node": node}


@pytest.mark.parametrize("model", ["flow", "analytical"])
@pytest.mark.parametrize(("nodes", "domain"), [(4, 4), (4, 2), (18, 18), (2, 2)])
def test_a_ring_inside_an_nvlink_domain_runs_at_nvlink_speed(
    model: str, nodes: int, domain: int
) -> None:
    """A ring all-reduce over the GPUs of one NVLink domain (domain nodes x 4 GPUs) never
    leaves NVLink: 2 (n-1)/n S / 300 GB/s (1e-9); a ring over the same GPUs without the
    domain crosses the 25 GB/s NICs."""
    topo = build_topology(scenario_of(nvl_cluster(domain, nodes)).cluster)
    devices = tuple(f"rack0/node{n}/gpu{g}" for n in range(domain) for g in range(4))
    call = CollectiveCall("allreduce", devices, 64 * MB)
    n = len(devices)
    expected = 2 * (n - 1) / n * 64 * MB / 300e9
    assert analytical_time(call, topo) == pytest.approx(expected, rel=1e-9)
    assert flow_time(call, topo, model) == pytest.approx(expected, rel=1e-9)
    plain = build_topology(scenario_of(nvl_cluster(1, nodes)).cluster)
    assert analytical_time(call, plain) > 5 * expected


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (nvl_cluster(3, nodes=4), "3 nodes per domain do not divide nodes_per_rack 4"),
        (nvl_cluster(2, nvlink=None), "an NVLink domain needs nvlink with an NVSwitch"),
        (
            nvl_cluster(2, nvlink={"bandwidth": "300GB/s", "pairs": [[0, 1]]}),
            "an NVLink domain needs nvlink with an NVSwitch",
        ),
    ],
)
def test_bad_nvlink_domains_are_refused(doc: dict, message: str) -> None:
    with pytest.raises(ScenarioError) as info:
        build_topology(scenario_of(doc).cluster)
    (problem,) = info.value.problems
    assert problem.path == "cluster.node.nvlink_domain"
    assert message in problem.message
