"""Links at the bandwidth NCCL reaches on them (clustersim/collectives/bus.py): NCCL's per-link
figures (src/graph/topo.h, topo.cc, search.cc) wherever a protocol is priced on a cluster of
nodes; line rates with ``protocol: none`` and on flat clusters."""

from __future__ import annotations

import pytest

from clustersim.collectives import CollectiveCall, run_collective
from clustersim.collectives.bus import BusRoute, figures_GBps, link_kind
from clustersim.collectives.ops import bandwidths
from clustersim.engine import Simulation
from clustersim.errors import ScenarioError
from clustersim.network import Network
from clustersim.scenario import parse_scenario
from clustersim.topology import Topology, build_topology

from .conftest import flat_topology

GB = 1e9


def node_cluster(
    nodes: int = 1,
    nvlink: str | None = "300GB/s",
    pcie: str = "32GB/s",
    nic: str = "200Gb/s",
    nics: int = 8,
    **nvlink_keys: object,
) -> Topology:
    """``nodes`` nodes of 8 GPUs (NVSwitch of ``nvlink`` per GPU, or none), ``nics`` NICs."""
    node: dict[str, object] = {
        "gpus": 8,
        "nics": nics,
        "pcie": {"bandwidth": pcie},
        "nic": {"bandwidth": nic},
    }
    if nvlink is not None:
        node["nvlink"] = {"bandwidth": nvlink, **nvlink_keys}
    doc = {
        "name": "nodes",
        "cluster": {"kind": "two_tier", "nodes_per_rack": nodes, "node": node},
        "workload": {"program": []},
    }
    return build_topology(parse_scenario(doc).cluster)


def gpus(topo: Topology) -> tuple[str, ...]:
    return tuple(d for d in topo.devices if topo.device(d).kind == "gpu")


def busbw_GBps(
    topo: Topology, algorithm: str, size: float, protocol: str | None, model: str, channels=1
) -> float:
    call = CollectiveCall("allreduce", gpus(topo), size, algorithm, protocol=protocol)
    sim = Simulation(topo)
    run_collective(sim, call, model=model, channels=channels)
    sim.run()
    return bandwidths("allreduce", call.n, size, sim.now)[1] / GB


def test_links_of_a_node_are_told_apart_by_kind() -> None:
    """NVSwitch ports are NVLink, cables to a PCIe switch or root PCIe, NIC ports NET."""
    topo = node_cluster(nodes=2)
    kinds = {link.name: link_kind(link, topo) for link in topo.links}
    assert kinds["rack0/node0/gpu0->rack0/node0/nvswitch"] == "NVLink"
    assert kinds["rack0/node0/gpu0->rack0/node0/pcie0"] == "PCIe"
    assert kinds["rack0/node0/pcie0->rack0/node0/root"] == "PCIe"
    assert kinds["rack0/node0/nic0->rack0/node0/pcie0"] == "PCIe"
    assert kinds["rack0/node0/nic0->rack0/tor"] == "NET"


@pytest.mark.parametrize(
    ("nvlink", "generation", "figure"),
    [("300GB/s", 3, 240.0), ("450GB/s", 4, 370.8), ("900GB/s", 5, 721.8)],
)
def test_nvlink_runs_at_nccls_figure_per_generation(
    nvlink: str, generation: int, figure: float
) -> None:
    """A100 12 x 20 GB/s, H100 18 x 20.6, B200 18 x 40.1 (NCCL's topo.h per-link figures):
    the generation comes from the bandwidth, and the summary's figure is NCCL's."""
    topo = node_cluster(nvlink=nvlink)
    assert topo.nvlink_generation == generation
    assert figures_GBps(topo)["NVLink"] == pytest.approx(figure)


@pytest.mark.parametrize("model", ["flow", "analytical"])
@pytest.mark.parametrize(("nvlink", "figure"), [("300GB/s", 240.0), ("450GB/s", 370.8)])
def test_ring_on_nvswitch_reaches_nccls_nvlink_bandwidth(
    model: str, nvlink: str, figure: float
) -> None:
    """Ring all-reduce of 4 GiB with Simple on 8 GPUs of an NVSwitch: bus bandwidth NCCL's
    NVLink figure (measured 230-235 GB/s on DGX A100, 365-370 with NCCL_ALGO=RING on H100,
    nccl#1455), within the protocol's latency (1%); without a protocol, the line rate."""
    topo = node_cluster(nvlink=nvlink)
    assert busbw_GBps(topo, "ring", 2.0**32, "Simple", model) == pytest.approx(figure, rel=0.01)
    line = float(nvlink.removesuffix("GB/s"))
    assert busbw_GBps(topo, "ring", 2.0**32, None, model) == pytest.approx(line, rel=1e-9)


@pytest.mark.parametrize(("pcie", "figure"), [("16GB/s", 12.0), ("32GB/s", 24.0), ("64GB/s", 48.0)])
def test_pcie_runs_at_nccls_lane_figure(pcie: str, figure: float) -> None:
    """Gen3/4/5 x16 at NCCL's 12/24/48 GB/s (lanes x 120 / 80 per 16 GT/s): a ring over a
    node without NVLink, one NIC (all GPUs on one PCIe switch), reaches the figure."""
    topo = node_cluster(nvlink=None, pcie=pcie, nics=1)
    assert figures_GBps(topo)["PCIe"] == pytest.approx(figure)
    bus = busbw_GBps(topo, "ring", 2.0**31, "Simple", "analytical")
    assert bus == pytest.approx(figure, rel=0.01)


@pytest.mark.parametrize(
    ("nic", "nvlink", "per_nic"),
    [("100Gb/s", "300GB/s", 12.0), ("200Gb/s", "300GB/s", 24.0), ("400Gb/s", "450GB/s", 48.0)],
)
def test_a_nic_carries_nccls_channel_speed(nic: str, nvlink: str, per_nic: float) -> None:
    """NCCL's channel on a NIC runs at its inter-node speed (12, 24, 48 GB/s on 100, 200,
    400 Gb/s): 8 NICs carry 8 x that of ring bus bandwidth at 8 GiB (192 GB/s measured on
    DGX A100, nccl#812), PCIe Gen5 behind them, within the ring's latency (2%)."""
    topo = node_cluster(nodes=4, nvlink=nvlink, pcie="64GB/s", nic=nic)
    bus = busbw_GBps(topo, "ring", 2.0**33, "Simple", "analytical", channels=8)
    assert bus == pytest.approx(8 * per_nic, rel=0.02)


def test_flat_clusters_keep_their_link_rates() -> None:
    """A switch's links are abstract: a protocol prices its latencies and wire share, not
    NCCL's link figures (Simple: the line rate)."""
    topo = flat_topology("switch", 8)
    assert figures_GBps(topo) == {}
    link = topo.links[0].bandwidth_Bps / GB
    assert busbw_GBps(topo, "ring", 2.0**32, "Simple", "analytical") == pytest.approx(
        link, rel=0.01
    )


@pytest.mark.parametrize("wire", [1.0, 1.25, 2.0])
def test_a_route_with_a_wire_factor_moves_its_data_that_much_slower(wire: float) -> None:
    """A transfer of S on a route with wire w puts w S on its links: alone on a link of B it
    takes latency + w S / B, and the link counts w S bytes."""
    import simpy

    topo = flat_topology("ring", 2)
    link = topo.links[0]
    env = simpy.Environment()
    net = Network(env, topo.links)
    route = BusRoute((link,), 1e-6, link.bandwidth_Bps / wire, wire)
    net.transfer(route, 1e9)
    env.run()
    assert env.now == pytest.approx(1e-6 + wire * 1e9 / link.bandwidth_Bps, rel=1e-12)
    assert net.link_stats()[link.index].bytes == pytest.approx(wire * 1e9)


def test_a_wire_factor_below_one_is_refused() -> None:
    """A route cannot carry more data than bytes on its links."""
    import simpy

    from clustersim.errors import SimulationError

    topo = flat_topology("ring", 2)
    link = topo.links[0]
    net = Network(simpy.Environment(), topo.links)
    with pytest.raises(SimulationError, match="wire"):
        net.transfer(BusRoute((link,), 0.0, link.bandwidth_Bps, 0.5), 1.0)


def test_generation_is_given_or_taken_from_the_bandwidth() -> None:
    """``generation`` wins; an unknown bandwidth has none (NCCL's NVLink 2/3 share, 0.8)."""
    assert node_cluster(nvlink="400GB/s").nvlink_generation is None
    assert node_cluster(nvlink="400GB/s", generation=4).nvlink_generation == 4
    assert figures_GBps(node_cluster(nvlink="400GB/s"))["NVLink"] == pytest.approx(320.0)
    with pytest.raises(ScenarioError, match="generation"):
        node_cluster(nvlink="450GB/s", generation=6)


def test_split_routes_take_the_protocols_latency_and_figures() -> None:
    """``spine_routing: split``: a send split over the spines still runs on the protocol's
    routes.  Two racks of one GPU (NIC 400 Gb/s, two spines of 25 GB/s each), ring of
    S: without a protocol S / 50 GB/s; with Simple S / 48 GB/s (NCCL's NIC and fabric
    figure) plus the base latency and two NET hops of 14 us."""
    doc = {
        "name": "split",
        "cluster": {
            "kind": "two_tier",
            "racks": 2,
            "spines": 2,
            "spine_routing": "split",
            "node": {"gpus": 1, "pcie": {"bandwidth": "64GB/s"}, "nic": {"bandwidth": "400Gb/s"}},
        },
        "workload": {"program": []},
    }
    topo = build_topology(parse_scenario(doc).cluster)
    size = 2.0**28
    times = []
    for protocol in (None, "Simple"):
        sim = Simulation(topo)
        run_collective(
            sim, CollectiveCall("allreduce", gpus(topo), size, "ring", protocol=protocol)
        )
        sim.run()
        times.append(sim.now)
    assert times[0] == pytest.approx(size / 50e9, rel=1e-9)
    assert times[1] == pytest.approx(size / 48e9 + 8.4e-6 + 2 * 14e-6, rel=1e-9)
