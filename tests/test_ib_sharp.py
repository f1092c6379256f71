"""InfiniBand SHARP: network switches reduce at a share of each port's line rate.

Published figure: NCCL's maintainer, "My rule of thumb is ~20 GB/s per NIC" of algorithm
bandwidth through SHARP (CollNet) on 200 Gb/s HDR NICs, 25 GB/s of line rate
(NVIDIA/nccl#320, 2023-01-03): ``cluster.sharp: true`` takes 20 / 25 = 0.8
(:data:`~clustersim.scenario.cluster.IB_SHARP_SHARE`).  The same comment gives 8 NICs x 20
= 160 GB/s per node.  That the share holds at 100 and 400 Gb/s is this model's assumption
(the comment names HDR only); the tests sweep NIC speeds to hold the share, and the
25 GB/s case to hold the figure.

Clusters: one GPU per node (a node's PCIe switch and NIC do not reduce), PCIe 256 GB/s,
no latencies unless named, so times are bandwidth terms.  Units: seconds, bytes, bytes/s.
"""

from __future__ import annotations

import pytest

from clustersim.collectives import CollectiveCall, analytical_time, run_collective
from clustersim.collectives.bus import CappedRoute
from clustersim.collectives.in_network import IN_NETWORK_CHUNK_BYTES
from clustersim.engine import Simulation
from clustersim.errors import ScenarioError
from clustersim.scenario import parse_scenario
from clustersim.scenario.cluster import IB_SHARP_SHARE
from clustersim.topology import Topology, build_topology

GB = 1e9
PUBLISHED_PER_NIC_GBps = 20.0  # NVIDIA/nccl#320: SHARP algorithm bandwidth per HDR NIC
HDR_GBps = 25.0  # 200 Gb/s


def cluster(
    nodes: int, nic: str = "200Gb/s", sharp: object = True, racks: int = 1, nics: int = 1
) -> Topology:
    """``racks`` x ``nodes`` nodes of one GPU (or ``nics`` GPUs with a NIC each) on ToRs."""
    doc = {
        "name": "sharp",
        "cluster": {
            "kind": "two_tier",
            "racks": racks,
            "nodes_per_rack": nodes,
            "sharp": sharp,
            "node": {
                "gpus": nics,
                "nics": nics,
                "pcie": {"bandwidth": "256GB/s"},
                "nic": {"bandwidth": nic},
            },
        },
        "workload": {"program": []},
    }
    return build_topology(parse_scenario(doc).cluster)


def gpus(topo: Topology) -> tuple[str, ...]:
    return tuple(d for d in topo.devices if topo.device(d).kind == "gpu")


def algbw_GBps(topo: Topology, size: float, model: str, protocol: str | None) -> float:
    """Algorithm bandwidth S / T of an in-network all-reduce of ``size`` bytes, GB/s."""
    call = CollectiveCall("allreduce", gpus(topo), size, "in_network", protocol=protocol)
    sim = Simulation(topo)
    run_collective(sim, call, model=model)
    sim.run()
    return size / sim.now / GB


@pytest.mark.parametrize("model", ["flow", "analytical"])
@pytest.mark.parametrize("nodes", [2, 4, 16])
def test_sharp_reaches_the_published_20_GBps_per_hdr_nic(nodes: int, model: str) -> None:
    """Nodes of one GPU and one HDR NIC under one ToR, 4 GiB with NCCL's Simple protocol:
    algorithm bandwidth within 3% of the published ~20 GB/s per NIC (the rest is one
    1 MiB piece of pipeline fill and NCCL's latencies)."""
    got = algbw_GBps(cluster(nodes), 2.0**32, model, "Simple")
    assert got == pytest.approx(PUBLISHED_PER_NIC_GBps, rel=0.03)
    assert got <= PUBLISHED_PER_NIC_GBps


@pytest.mark.parametrize("nic", ["100Gb/s", "200Gb/s", "400Gb/s", "800Gb/s"])
@pytest.mark.parametrize("share", [True, 0.5, 1.0])
def test_time_is_the_share_of_the_line_rate_closed_form(nic: str, share: object) -> None:
    """Without a protocol (line rates, no latencies): T = S / (share x B) + p / B -- the
    pieces go up at the switch's rate, the last one comes down at the line rate -- exact
    (rel 1e-9) in both models, for every NIC speed; ``true`` is 0.8."""
    topo = cluster(4, nic, share)
    rate = float(nic.removesuffix("Gb/s")) * 1e9 / 8
    s = IB_SHARP_SHARE if share is True else float(share)  # type: ignore[arg-type]
    size = 2.0**30
    expected = size / (s * rate) + IN_NETWORK_CHUNK_BYTES / rate
    for model in ("flow", "analytical"):
        assert size / algbw_GBps(topo, size, model, None) / GB == pytest.approx(expected, rel=1e-9)


def test_every_merging_switch_sums_at_its_share() -> None:
    """Two racks of 4 nodes, rack uplink 4 x 25 GB/s: the ToR sums each NIC's data at 20
    GB/s and the spine each uplink's at 80; the NICs are the bottleneck: T = S / 20 GB/s +
    four pieces of fill (up at 20, 80; down at 100, 25) exactly."""
    topo = cluster(4, racks=2)
    size = 2.0**30
    p = IN_NETWORK_CHUNK_BYTES
    call = CollectiveCall("allreduce", gpus(topo), size, "in_network")
    expected = size / 20e9 + p / 80e9 + p / 100e9 + p / 25e9
    assert analytical_time(call, topo) == pytest.approx(expected, rel=1e-9)


def test_the_switch_rate_is_its_own_capacity_not_the_links() -> None:
    """The switch's rate caps the all-reduce's flows, not the NIC link: its links carry the
    bytes it moves, no more, and share max-min with other traffic.  An all-reduce of 1 GB
    beside a 250 MB transfer from the same GPU to a third node: both on the 25 GB/s NIC
    uplink at 12.5 GB/s until the transfer is done (20 ms), then the all-reduce at the
    switch's 20 GB/s: T = 20 ms + 0.75 GB / 20 GB/s + p / 25 GB/s = 57.54 ms, and the
    uplink carried 1.25 GB (a cap made of extra wire bytes would put 1.5 GB on it)."""
    topo = cluster(3)
    sim = Simulation(topo)
    group = gpus(topo)[:2]
    call = CollectiveCall("allreduce", group, 1e9, "in_network")
    run_collective(sim, call, model="flow")
    other = topo.route(group[0], gpus(topo)[2])
    done = sim.network.transfer(other, 0.25e9)
    sim.run()
    expected = 0.02 + 0.75e9 / 20e9 + IN_NETWORK_CHUNK_BYTES / 25e9
    assert sim.now == pytest.approx(expected, rel=1e-6)
    assert done.processed
    nic_up = next(s for s in sim.network.link_stats() if s.name == "rack0/node0/nic->rack0/tor")
    assert nic_up.bytes == pytest.approx(1e9 + 0.25e9, rel=1e-9)


def test_a_capped_route_books_only_the_bytes_it_moves() -> None:
    """The capped route of a segment into a summing switch: bottleneck the cap, weights 1
    per link, rate cap in wire bytes (cap x wire)."""
    from clustersim.collectives.bus import bus_route

    topo = cluster(2)
    links = topo.route(gpus(topo)[0], gpus(topo)[1]).links[:3]  # GPU -> PCIe -> NIC -> ToR
    route = bus_route(links, 0.0, topo.links, 20e9)
    assert isinstance(route, CappedRoute)
    assert route.bottleneck_Bps == 20e9 and route.wire == 1.0
    assert route.weights == (1.0, 1.0, 1.0) and route.rate_cap == 20e9


def test_sharp_false_refuses_in_network_across_nodes() -> None:
    """``sharp: false`` (Ethernet without in-network aggregation): refused, naming the key."""
    topo = cluster(4, sharp=False)
    call = CollectiveCall("allreduce", gpus(topo), 1e6, "in_network")
    with pytest.raises(ScenarioError, match="cluster.sharp"):
        analytical_time(call, topo)


@pytest.mark.parametrize(("value", "message"), [(0.0, "greater than 0"), (1.5, "at most 1")])
def test_a_share_out_of_range_is_refused_at_its_key(value: float, message: str) -> None:
    with pytest.raises(ScenarioError, match=rf"cluster\.sharp.*{message}"):
        cluster(2, sharp=value)
