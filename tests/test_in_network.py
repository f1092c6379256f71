"""In-network all-reduce (switches reduce, SHARP / NVLS): times, link loads, refusals.

Units: seconds, bytes, bytes/s.  Flat clusters: 25 GB/s and 1 us per link.
Two-tier clusters (:func:`two_tier`): PCIe-only nodes, PCIe 32 GB/s and 0.5 us per
link, NIC 25 GB/s and 1 us, rack uplink (one spine) nodes_per_rack x 25 GB/s /
oversubscription and 1 us; one GPU per node for in_network across nodes (a node's
PCIe switch does not reduce, so several GPUs of a node cannot merge there), their
switches reducing each port's data at SHARP = 0.8 of its line rate (InfiniBand SHARP,
NVIDIA/nccl#320: ~20 GB/s per 25 GB/s NIC).
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

import clustersim
from clustersim.collectives import (
    CollectiveCall,
    analytical_time,
    applicable_algorithms,
    check_call,
    run_collective,
)
from clustersim.collectives.fluid import schedule_flows
from clustersim.collectives.in_network import IN_NETWORK_CHUNK_BYTES, InNetwork
from clustersim.collectives.ops import bandwidths
from clustersim.collectives.ring import pieces
from clustersim.engine import Simulation
from clustersim.errors import ScenarioError
from clustersim.scenario import parse_scenario
from clustersim.topology import Topology, build_topology

from .conftest import flat_topology

B = 25e9  # bytes/s: flat links, NICs
LINK_LATENCY = 1e-6  # s: one flat link (a switch route crosses two)

RANKS = [2, 3, 8, 64, 256]
SIZES = [8.0, 1e6, 3e7, 1e9]
SHARP = 0.8  # IB_SHARP_SHARE: a reducing network switch's share of each port's line rate
SHAPES = {2: (2, 1, 1), 3: (3, 1, 1), 8: (2, 4, 1), 64: (4, 16, 1), 256: (16, 16, 1)}
"""Ranks -> (racks, nodes_per_rack, gpus_per_node) of the two-tier clusters."""


@functools.cache
def two_tier(
    racks: int,
    nodes: int,
    gpus: int,
    oversubscription: float = 1.0,
    nvlink: bool = False,
    sharp: bool | float = True,
    nvls: bool = False,
) -> Topology:
    """A two-tier cluster as in the module docstring (``nvlink``: NVSwitch in each node,
    reducing with ``nvls``; ``sharp``: ``cluster.sharp``)."""
    node = {
        "gpus": gpus,
        "pcie": {"bandwidth": "32GB/s", "latency": "0.5us"},
        "nic": {"bandwidth": "25GB/s", "latency": "1us"},
    }
    if nvlink:
        node["nvlink"] = {"bandwidth": "450GB/s" if nvls else "300GB/s", "sharp": nvls}
    doc = {
        "name": "t",
        "cluster": {
            "kind": "two_tier",
            "racks": racks,
            "nodes_per_rack": nodes,
            "node": node,
            "rack_uplink": {"oversubscription": oversubscription, "latency": "1us"},
            "sharp": sharp,
        },
        "workload": {"program": []},
    }
    return build_topology(parse_scenario(doc).cluster)


def gpus(topo: Topology) -> tuple[str, ...]:
    return tuple(d.name for d in topo.devices.values() if d.kind == "gpu")


def call_on(topo: Topology, size: float, **kw) -> CollectiveCall:
    return CollectiveCall("allreduce", gpus(topo), size, algorithm="in_network", **kw)


def flow(topo: Topology, call: CollectiveCall, model: str = "flow") -> Simulation:
    """The finished simulation of ``call`` alone on ``topo``."""
    sim = Simulation(topo)
    run_collective(sim, call, model=model)
    sim.run()
    return sim


@functools.cache
def flow_seconds(topo: Topology, size: float, algorithm: str = "in_network") -> float:
    """When :func:`flow`'s run of an all-reduce of ``size`` bytes over every GPU of ``topo``
    by ``algorithm`` ends (s), run once per module for the tests that time the same call:
    the 256-rank in-network all-reduce of 1 GB on one switch is 490,000 sends, timed against
    the closed form and against the ring's bus bandwidth."""
    return flow(topo, CollectiveCall("allreduce", gpus(topo), size, algorithm=algorithm)).now


def piece_bytes(size: float) -> float:
    """p = S / c, c = ceil(S / 1 MiB) (1 for S <= 1 MiB)."""
    return size / pieces(size, IN_NETWORK_CHUNK_BYTES)


# --------------------------------------------------------------------------- times


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("n", RANKS)
def test_switch_time_is_two_latencies_plus_one_bandwidth_term_plus_one_piece(
    n: int, size: float
) -> None:
    """On one switch a piece goes up one link (alpha = 1 us, p / B) and down one link; the
    c pieces stream behind each other up and down at once, so the last piece arrives after

        T = 2 alpha + c p / B + p / B = 2 alpha + S / B + p / B

    (the pipeline fill is one piece; with one piece, S <= 1 MiB, it is 2 alpha + 2 S / B).
    Exact in the flow-level run and in :meth:`InNetwork.cost` (rel 1e-9)."""
    topo = flat_topology("switch", n)
    call = call_on(topo, size)
    by_hand = 2 * LINK_LATENCY + size / B + piece_bytes(size) / B
    assert analytical_time(call, topo) == pytest.approx(by_hand, rel=1e-9)
    assert flow_seconds(topo, size) == pytest.approx(by_hand, rel=1e-9)


@pytest.mark.parametrize("oversubscription", [1.0, 4.0])
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("n", RANKS)
def test_two_tier_time_is_the_closed_form_and_the_bottleneck_bound(
    n: int, size: float, oversubscription: float
) -> None:
    """Flow-level time = :meth:`InNetwork.cost` (rel 1e-9: each send is alone on its links).

    By hand: every byte crosses the slowest stage of the trees once, so T >= S / B_min,
    B_min = SHARP x min(NIC 25 GB/s, rack uplink nodes x 25 GB/s / oversubscription) when
    there are several racks (the switches sum what a port brings at SHARP of its rate;
    PCIe, 32 GB/s, and the copies down are faster).  The longest way up is a GPU of
    another rack to the top (a ToR or the spine): GPU -> PCIe -> NIC -> ToR -> spine ->
    ToR -> NIC -> PCIe, 3 x 0.5 + 4 x 1 us = 5.5 us at most, and as much down; a way has
    at most 4 segments up and 4 down, each adding one piece of fill, so T <= 11 us +
    S / B_min + 7 p / B_min.  At 1 GB (p = 1 MiB) that is within 0.8% of S / B_min."""
    racks, nodes, g = SHAPES[n]
    topo = two_tier(racks, nodes, g, oversubscription)
    call = call_on(topo, size)
    got = flow(topo, call).now
    assert got == pytest.approx(analytical_time(call, topo), rel=1e-9)
    b_min = SHARP * (min(B, nodes * B / oversubscription) if racks > 1 else B)
    p = piece_bytes(size)
    assert size / b_min <= got * (1 + 1e-12)
    assert got <= 11e-6 + size / b_min + 7 * p / b_min + 1e-15


def slow_cable_switch(slow: str) -> Topology:
    """Four GPUs on one switch, 1 us per link, 25 GB/s cables except gpu3's at ``slow``."""
    links = [
        {"src": f"gpu{i}", "dst": "switch", "bandwidth": slow if i == 3 else "25GB/s"}
        for i in range(4)
    ]
    doc = {
        "name": "t",
        "cluster": {
            "kind": "custom",
            "devices": [{"name": f"gpu{i}"} for i in range(4)],
            "switches": ["switch"],
            "links": [{**link, "latency": "1us"} for link in links],
        },
        "workload": {"program": []},
    }
    return build_topology(parse_scenario(doc).cluster)


@pytest.mark.parametrize("size", [8.0, 1e6, 3e7])
def test_one_slow_rank_holds_back_every_result(size: float) -> None:
    """Every result piece waits for every rank's piece: with gpu3's cable at 5 GB/s the
    pieces reach the switch at 5 GB/s, so every rank gets the sum after
    T = 2 alpha + S / 5 GB/s + p / 5 GB/s (the last piece's way down to gpu3, also at
    5 GB/s), not the 25 GB/s the other ranks' cables allow."""
    topo = slow_cable_switch("5GB/s")
    call = call_on(topo, size)
    by_hand = 2 * LINK_LATENCY + (size + piece_bytes(size)) / 5e9
    assert analytical_time(call, topo) == pytest.approx(by_hand, rel=1e-9)
    sim = flow(topo, call)
    assert sim.now == pytest.approx(by_hand, rel=1e-9)
    done = [r.end_s for r in sim.records if r.kind == "collective"]
    assert min(done) >= LINK_LATENCY + size / 5e9


def test_analytical_mode_takes_the_cost_alone() -> None:
    """network.model analytical: one fluid phase, the cost's latency part then its
    bandwidth part over the trees' links, each at weight 1: exactly the cost alone."""
    for topo in (flat_topology("switch", 16), two_tier(4, 2, 1, 4.0)):
        call = call_on(topo, 1e9)
        assert flow(topo, call, "analytical").now == pytest.approx(
            analytical_time(call, topo), rel=1e-9
        )


# --------------------------------------------------------------------------- link loads


def link_bytes(sim: Simulation) -> dict[str, float]:
    """Link name -> bytes carried, links that carried any."""
    return {s.name: s.bytes for s in sim.network.link_stats() if s.bytes > 0}


@pytest.mark.parametrize(
    "topo",
    [
        flat_topology("switch", 64),
        two_tier(16, 2, 1, 4.0),
        two_tier(4, 4, 1, 1.0),
        two_tier(3, 1, 1, 4.0),
    ],
    ids=["switch", "two_tier_os4", "two_tier_os1", "two_tier_one_node_per_rack"],
)
def test_every_link_carries_the_data_once_per_direction(topo: Topology) -> None:
    """Each link of the trees carries exactly S (the up tree's summed, the down tree's
    copied), each GPU sends S and receives S, and a rack's uplink carries S up and S
    down -- not once per rank behind it.  A switch summing slower than the line rate
    does not make its links carry more: they carry S, at a lower rate."""
    size = 3e7
    sim = flow(topo, call_on(topo, size))
    loads = link_bytes(sim)
    assert all(b == pytest.approx(size, rel=1e-9) for b in loads.values()), loads
    for device in gpus(topo):
        sent = [b for name, b in loads.items() if name.startswith(device + "->")]
        received = [b for name, b in loads.items() if name.endswith("->" + device)]
        assert sent == [pytest.approx(size)] and received == [pytest.approx(size)]
    if topo.racks > 1:
        uplinks = [name for name in loads if "spine" in name]
        assert len(uplinks) == 2 * topo.racks
    schedule = InNetwork().schedule(call_on(topo, size), topo)
    assert schedule.bytes_sent() == pytest.approx([size] * len(gpus(topo)))
    assert schedule.bytes_received() == pytest.approx([size] * len(gpus(topo)))


@pytest.mark.parametrize("routing", ["ecmp", "split"])
def test_one_tree_over_the_first_of_several_spines(routing: str) -> None:
    """With two spines the trees take the pairs' first route (spine0): its links carry S,
    spine1's nothing."""
    doc = {
        "name": "t",
        "cluster": {
            "kind": "two_tier",
            "racks": 3,
            "nodes_per_rack": 2,
            "spines": 2,
            "spine_routing": routing,
            "node": {"gpus": 1, "pcie": {"bandwidth": "32GB/s"}, "nic": {"bandwidth": "25GB/s"}},
        },
        "workload": {"program": []},
    }
    topo = build_topology(parse_scenario(doc).cluster)
    sim = flow(topo, call_on(topo, 1e7))
    loads = link_bytes(sim)
    assert all(b == pytest.approx(1e7) for b in loads.values())
    assert not any("spine1" in name for name in loads)
    assert sum("spine0" in name for name in loads) == 2 * 3


def test_link_flows_are_the_schedules() -> None:
    """link_flows (1 per link of the trees) is what fluid.schedule_flows measures on the
    schedule, whose sends carry their own routes."""
    for topo in (flat_topology("switch", 8), two_tier(2, 2, 1, 4.0)):
        call = call_on(topo, 3e6)
        algo = InNetwork()
        measured = schedule_flows(algo.schedule(call, topo), call.devices, topo)
        assert measured == pytest.approx(algo.link_flows(call, topo))
        assert set(measured.values()) == {1.0}


# --------------------------------------------------------------------------- bus bandwidth


@pytest.mark.parametrize("n", [8, 64, 256])
def test_bus_bandwidth_is_about_twice_rings_on_a_switch(n: int) -> None:
    """1 GB on one switch.  Ring: T = 2(n-1)(a + S/(n B)) with route latency a = 2 us, so
    busbw = 2(n-1)/n S / T = B / (1 + n a B / S), about B.  in_network: each rank sends S
    once, T ~ S / B, busbw ~ 2(n-1)/n B (within 0.5%: the 2 us and one 1 MiB piece of
    fill).  The ratio is 2(n-1)/n -- 1.75 for 8 ranks, 1.99 for 256 -- within 2% (ring's
    2(n-1) latencies are 1.3% of its time at 256 ranks)."""
    topo = flat_topology("switch", n)
    size = 1e9
    busbw = {}
    for algo in ("ring", "in_network"):
        busbw[algo] = bandwidths("allreduce", n, size, flow_seconds(topo, size, algo))[1]
    factor = 2 * (n - 1) / n
    assert busbw["ring"] == pytest.approx(B / (1 + n * 2 * LINK_LATENCY * B / size), rel=1e-9)
    assert busbw["in_network"] == pytest.approx(factor * B, rel=5e-3)
    assert busbw["in_network"] / busbw["ring"] == pytest.approx(factor, rel=2e-2)


def test_hierarchical_reduces_across_nodes_in_the_network() -> None:
    """NVLink nodes behind oversubscribed uplinks: hierarchical with inter in_network (each
    rail's S/g crosses a rack uplink once each way) is exact against its cost and beats
    inter ring (2(N-1)/N S/g per rail) at 1 GB."""
    topo = two_tier(4, 2, 8, 4.0, nvlink=True)
    times = {}
    for inter in ("ring", "in_network"):
        call = CollectiveCall(
            "allreduce", gpus(topo), 1e9, algorithm="hierarchical", options={"inter": inter}
        )
        times[inter] = flow(topo, call).now
        assert times[inter] == pytest.approx(analytical_time(call, topo), rel=1e-9)
    assert times["in_network"] < 0.7 * times["ring"]


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("topo", "op", "kw", "message"),
    [
        (flat_topology("ring", 8), "allreduce", {}, "crosses none"),
        (flat_topology("fully_connected", 8), "allreduce", {}, "crosses none"),
        (two_tier(2, 2, 8, nvlink=True), "allreduce", {}, "share none; hierarchical"),
        (two_tier(1, 1, 4), "allreduce", {}, "meet only in rack0/node0/pcie: a node's PCIe"),
        (two_tier(1, 1, 8, nvlink=True), "allreduce", {}, "nvswitch: an NVSwitch reduces with"),
        (two_tier(1, 4, 1, sharp=False), "allreduce", {}, "rack0/tor: cluster.sharp is false"),
        (flat_topology("switch", 8), "allgather", {}, "does not implement allgather"),
        (flat_topology("switch", 8), "broadcast", {}, "does not implement broadcast"),
        (flat_topology("switch", 8), "allreduce", {"chunk_bytes": 0.0}, "chunk must be positive"),
    ],
    ids=[
        "ring",
        "fully_connected",
        "nvlink_and_nic",
        "pcie_only",
        "nvswitch_without_sharp",
        "tor_without_sharp",
        "allgather",
        "broadcast",
        "chunk",
    ],
)
def test_refusals_say_why(topo: Topology, op: str, kw: dict, message: str) -> None:
    call = CollectiveCall(op, gpus(topo), 1e6, algorithm="in_network", **kw)
    with pytest.raises(ScenarioError, match=message):
        check_call(call, topo)
    if not kw:
        assert "in_network" not in applicable_algorithms(op, call.devices, topo)


def test_data_of_one_node_cannot_merge_in_its_pcie_switch() -> None:
    """Two GPUs of node 1 with one GPU of node 0: their ways up to the ToR merge at node 1's
    PCIe switch, which cannot sum -- refused, pointing at hierarchical."""
    topo = two_tier(1, 2, 2)
    group = ("rack0/node0/gpu0", "rack0/node1/gpu0", "rack0/node1/gpu1")
    call = CollectiveCall("allreduce", group, 1e6, algorithm="in_network")
    with pytest.raises(ScenarioError, match="would merge in rack0/node1/pcie, which does not"):
        check_call(call, topo)


def test_applicable_where_the_routes_meet_in_a_switch() -> None:
    """--algorithm all includes in_network on a switch, across nodes of one GPU each (their
    ToRs and spine reduce) and within one NVLink node whose NVSwitch reduces; one rank is a
    no-op."""
    nvlink_node = two_tier(1, 1, 8, nvlink=True, nvls=True)
    for topo in (flat_topology("switch", 8), two_tier(2, 2, 1), nvlink_node):
        assert "in_network" in applicable_algorithms("allreduce", gpus(topo), topo)
    one = CollectiveCall("allreduce", ("gpu0",), 1e6, algorithm="in_network")
    assert analytical_time(one, flat_topology("switch", 4)) == 0.0
    assert len(InNetwork().schedule(one, flat_topology("switch", 4))) == 0


def test_sharp_scenario_hand_worked_number() -> None:
    """scenarios/clusters/sharp_dgx_4nodes.yaml: NVSwitch reduce-scatter and all-gather of
    64 MB around an in-network all-reduce of 8 MB per rail (8 pieces of 1 MB), the ToR
    summing each NIC's data at 0.8 x 25 GB/s (SHARP), the last piece copied down at 25:
    2 x 7/8 x 64 MB / 300 GB/s + 8 MB / 20 GB/s + 1 MB / 25 GB/s = 0.813 ms, below the
    0.853 ms of rings across the nodes (dgx-a100-4nodes-8nics.yaml)."""
    root = Path(__file__).resolve().parent.parent / "scenarios" / "clusters"
    sharp = clustersim.simulate(root / "sharp_dgx_4nodes.yaml").summary["time_s"]
    ring = clustersim.simulate(root / "dgx-a100-4nodes-8nics.yaml").summary["time_s"]
    assert sharp == pytest.approx(2 * 7 / 8 * 64e6 / 300e9 + 8e6 / 20e9 + 1e6 / 25e9, rel=1e-9)
    assert sharp == pytest.approx(0.813e-3, rel=1e-3)
    assert sharp < 0.96 * ring
