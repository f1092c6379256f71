"""The congestion-aware analytical model (clustersim.collectives.fluid).

Alone, a collective costs exactly its algorithm's alpha-beta formula; beside other
collectives and transfers it shares links, and then it is held to the flow-level
model it stands in for.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from clustersim.collectives import CollectiveCall, analytical_time, run_collective, slices
from clustersim.collectives.algorithm import check_call
from clustersim.collectives.fluid import EXPOSED_LATENCY, call_phases, schedule_flows
from clustersim.engine import Simulation
from clustersim.scenario.shorthand import flat_cluster, scenario_of, two_tier_cluster
from clustersim.topology import Topology, build_topology


def topology_of(cluster: dict) -> Topology:
    return build_topology(scenario_of(cluster).cluster)


def run_calls(
    topology: Topology,
    calls: list[tuple[float, CollectiveCall]],
    model: str,
    one_group: bool = False,
) -> list[float]:
    """Completion time of each ``(start_s, call)``, all on one network, each on a
    communicator of its own (``one_group``: all on the group of their devices)."""
    sim = Simulation(topology)
    ends = [float("nan")] * len(calls)

    def one(i: int, start: float, call: CollectiveCall):
        if start > 0:
            yield sim.timeout(start)
        group = None if one_group else ("test", i)
        yield run_collective(sim, call, model=model, record_transfers=False, group=group)
        ends[i] = sim.now

    for i, (start, call) in enumerate(calls):
        sim.process(one(i, start, call))
    sim.run()
    return ends


def gpus(topology: Topology, n: int | None = None) -> tuple[str, ...]:
    names = tuple(d.name for d in topology.select("*gpu*"))
    return names if n is None else names[:n]


CLUSTERS = {
    "switch": flat_cluster("switch", 16, "25GB/s", "2us"),
    "two_tier_4to1": two_tier_cluster(
        racks=2, nodes_per_rack=2, gpus_per_node=4, nic_latency="2us", oversubscription=4
    ),
}

ALONE_CASES = [
    ("allreduce", "ring"),
    ("allreduce", "tree"),
    ("allreduce", "double_tree"),
    ("allreduce", "halving_doubling"),
    ("allreduce", "direct"),
    ("allgather", "ring"),
    ("reducescatter", "ring"),
    ("broadcast", "ring"),
    ("alltoall", "direct"),
    ("reduce", "root"),
]


@pytest.mark.parametrize("cluster", sorted(CLUSTERS))
@pytest.mark.parametrize(("op", "algorithm"), ALONE_CASES)
@pytest.mark.parametrize("size", [0.0, 8.0, 1e6, 256e6])
@pytest.mark.parametrize("n", [2, 5, 16])
def test_alone_a_collective_takes_its_alpha_beta_cost(
    cluster: str, op: str, algorithm: str, size: float, n: int
) -> None:
    """Uncontended, the congestion-aware analytical time is the algorithm's cost (1e-12)."""
    topology = topology_of(CLUSTERS[cluster])
    call = CollectiveCall(op, gpus(topology, n), size, algorithm=algorithm)
    (t,) = run_calls(topology, [(0.0, call)], "analytical")
    assert t == pytest.approx(analytical_time(call, topology), rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("ratio", [1, 4])
@pytest.mark.parametrize("size", [1e6, 64e6])
def test_hierarchical_alone_takes_its_cost(ratio: int, size: float) -> None:
    """The hierarchical all-reduce's three phases add up to its cost (1e-12)."""
    topology = topology_of(
        two_tier_cluster(racks=2, nodes_per_rack=2, gpus_per_node=4, oversubscription=ratio)
    )
    call = CollectiveCall("allreduce", gpus(topology), size, algorithm="hierarchical")
    (t,) = run_calls(topology, [(0.0, call)], "analytical")
    assert t == pytest.approx(analytical_time(call, topology), rel=1e-12)


@pytest.mark.parametrize("interleave", [False, True])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_ring_link_flows_match_the_schedule_measurement(
    interleave: bool, bidirectional: bool
) -> None:
    """The ring's closed-form flows per link equal what the generic measurement finds on its
    schedule (rack-major and interleaved rank orders, one or two rings)."""
    topology = topology_of(two_tier_cluster(racks=2, nodes_per_rack=2, gpus_per_node=4))
    devices = gpus(topology)
    if interleave:
        devices = devices[0::2] + devices[1::2]
    call = CollectiveCall("allreduce", devices, 1e6, bidirectional=bidirectional)
    algo = check_call(call, topology)
    measured = schedule_flows(algo.schedule(call, topology), devices, topology)
    assert algo.link_flows(call, topology) == pytest.approx(measured, rel=1e-12)


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("connections", [(0,), (0, 1, 2, 3)])
def test_a_groups_operations_on_the_same_hops_route_once(
    bidirectional: bool, connections: tuple[int, ...]
) -> None:
    """A data-parallel group's reduce-scatter, all-gather and all-reduce take the same hops:
    the ring routes them once and hands every call the same flows (what the schedule
    measures for each); a barrier both ways takes other hops and routes its own."""
    topology = topology_of(two_tier_cluster(racks=2, nodes_per_rack=2, gpus_per_node=4))
    devices = gpus(topology)[1:] + gpus(topology)[:1]  # a group no other test asked for
    flows = {}
    for op in ("reducescatter", "allgather", "allreduce", "barrier"):
        call = CollectiveCall(
            op, devices, 1e6, bidirectional=bidirectional, connections=connections
        )
        algo = check_call(call, topology)
        flows[op] = algo.link_flows(call, topology)
        if op != "barrier":  # a barrier's schedule moves no bytes for the measurement
            schedule = algo.schedule(call, topology)
            measured = schedule_flows(schedule, devices, topology, connections)
            assert flows[op] == pytest.approx(measured, rel=1e-12), op
    assert flows["allgather"] is flows["reducescatter"] is flows["allreduce"]
    assert (flows["barrier"] is flows["allreduce"]) is not bidirectional


@pytest.mark.parametrize("k", [2, 3, 8])
@pytest.mark.parametrize("size", [1e5, 1e7, 1e8])
def test_k_rings_at_once_share_their_links(k: int, size: float) -> None:
    """k identical rings started together: each waits the exposed part e of its latency
    term L, then they share the ring, each capped so that alone it would take the rest:
    e L + max((1 - e) L + B, k B) for bandwidth term B (1e-9); the flow-level model, whose
    rings here keep in step (their latencies add up in full: L + k B), is never faster, and
    at most the hidden part (1 - e) L slower -- within 6% once bandwidth dominates."""
    topology = topology_of(flat_cluster("switch", 8, "25GB/s", "2us"))
    call = CollectiveCall("allreduce", gpus(topology), size)
    alone = analytical_time(call, topology)
    latency = analytical_time(replace(call, size_bytes=0.0), topology)
    bandwidth = alone - latency
    e = EXPOSED_LATENCY
    ends = run_calls(topology, [(0.0, call)] * k, "analytical")
    expected = e * latency + max((1 - e) * latency + bandwidth, k * bandwidth)
    assert ends == pytest.approx([expected] * k, rel=1e-9)
    flow = run_calls(topology, [(0.0, call)] * k, "flow")
    assert max(flow) == pytest.approx(latency + k * bandwidth, rel=1e-9)
    assert max(flow) - (1 - e) * latency <= max(ends) * (1 + 1e-9)
    assert max(ends) <= max(flow) * (1 + 1e-9)
    if bandwidth > latency:
        assert max(ends) == pytest.approx(max(flow), rel=0.06)


@pytest.mark.parametrize("ratio", [1, 2, 4, 8])
@pytest.mark.parametrize("stagger_s", [0.0, 2e-4])
def test_overlapping_collectives_under_oversubscription_track_the_flow_model(
    ratio: int, stagger_s: float
) -> None:
    """Two ring all-reduces over all GPUs of a two-tier cluster and a hierarchical one,
    started together or staggered, at 1:1 to 8:1 uplinks: the last end is within 10% of
    the flow-level model's."""
    topology = topology_of(
        two_tier_cluster(
            racks=2, nodes_per_rack=2, gpus_per_node=4, nic_latency="2us", oversubscription=ratio
        )
    )
    devices = gpus(topology)
    calls = [
        (0.0, CollectiveCall("allreduce", devices, 32e6)),
        (stagger_s, CollectiveCall("allreduce", devices, 8e6)),
        (2 * stagger_s, CollectiveCall("allreduce", devices, 16e6, algorithm="hierarchical")),
    ]
    fast = run_calls(topology, calls, "analytical")
    flow = run_calls(topology, calls, "flow")
    assert max(fast) == pytest.approx(max(flow), rel=0.10)


@pytest.mark.parametrize("size", [4e6, 64e6])
def test_a_ring_shares_a_nic_with_a_point_to_point_transfer(size: float) -> None:
    """A bulk transfer out of node 0 beside a ring all-reduce over every node: both slow
    down as in the flow-level model (ring end and transfer end within 10%)."""
    topology = topology_of(
        two_tier_cluster(racks=1, nodes_per_rack=4, gpus_per_node=1, nic_latency="2us")
    )
    devices = gpus(topology)
    call = CollectiveCall("allreduce", devices, size)

    def run(model: str) -> tuple[float, float]:
        sim = Simulation(topology)
        ends = {}

        def ring():
            yield run_collective(sim, call, model=model, record_transfers=False)
            ends["ring"] = sim.now

        def bulk():
            yield sim.transfer(devices[0], devices[2], size)
            ends["bulk"] = sim.now

        sim.process(ring())
        sim.process(bulk())
        sim.run()
        return ends["ring"], ends["bulk"]

    fast, flow = run("analytical"), run("flow")
    assert fast == pytest.approx(flow, rel=0.10)
    alone = analytical_time(call, topology)
    assert fast[0] > alone * 1.05  # the transfer really slowed the ring down


@pytest.mark.parametrize("model", ["analytical", "flow"])
@pytest.mark.parametrize("k", [1, 3])
def test_collectives_of_one_group_run_one_after_another(model: str, k: int) -> None:
    """k all-reduces issued at once on one communicator end at 1, 2, ..., k times one alone
    (both models; 1e-9)."""
    topology = topology_of(flat_cluster("switch", 8, "25GB/s", "2us"))
    call = CollectiveCall("allreduce", gpus(topology), 8e6)
    alone = analytical_time(call, topology)
    ends = run_calls(topology, [(0.0, call)] * k, model, one_group=True)
    assert ends == pytest.approx([alone * (i + 1) for i in range(k)], rel=1e-9)


@pytest.mark.parametrize("model", ["analytical", "flow"])
@pytest.mark.parametrize("channels", [2, 4])
def test_channels_split_a_collective_into_slices_that_run_at_once(
    model: str, channels: int
) -> None:
    """A ring all-reduce in c channels on an idle switch: c rings of S / c at once share
    each hop, so the bandwidth term is unchanged and the latency term too (1e-9).  On a
    switch the c rings are copies of one, played as one slice (collectives/channels.py):
    the analytical model then takes the formula's time, as the flow model does."""
    topology = topology_of(flat_cluster("switch", 8, "25GB/s", "2us"))
    call = CollectiveCall("allreduce", gpus(topology), 8e6)
    sim = Simulation(topology)
    done = run_collective(sim, call, model=model, channels=channels, record_transfers=False)
    sim.run()
    assert done.processed
    latency = analytical_time(replace(call, size_bytes=0.0), topology)
    bandwidth = analytical_time(call, topology) - latency
    assert sim.now == pytest.approx(latency + bandwidth, rel=1e-9)


def _spine_cluster(spines: int, ratio: float = 1.0) -> Topology:
    """Four racks of two 4-GPU nodes (one NIC per GPU) under ``spines`` ECMP spines."""
    cluster = two_tier_cluster(
        racks=4, nodes_per_rack=2, gpus_per_node=4, nics=4, oversubscription=ratio
    )
    cluster["spines"] = spines
    return topology_of(cluster)


@pytest.mark.parametrize("spines", [2, 4])
@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("algorithm", ["ring", "tree"])
def test_a_slice_standing_for_k_channels_spreads_over_their_routes(
    spines: int, k: int, algorithm: str
) -> None:
    """A call standing for k channels (``connections``) puts on each link the mean of what
    each channel's call alone puts there (its connection's ECMP route): the load the flow
    model's k sends per pair make, one per connection; for the ring the closed form equals
    the generic measurement on its schedule (1e-12)."""
    topology = _spine_cluster(spines)
    devices = tuple(f"rack{r}/node{n}/gpu0" for r in range(4) for n in range(2))
    call = CollectiveCall("allreduce", devices, 1e6, algorithm=algorithm)
    merged = replace(call, connections=tuple(range(k)))
    algo = check_call(call, topology)
    mean: dict[int, float] = {}
    for c in range(k):
        for link, flows in algo.link_flows(replace(call, connections=(c,)), topology).items():
            mean[link] = mean.get(link, 0.0) + flows / k
    assert algo.link_flows(merged, topology) == pytest.approx(mean, rel=1e-12)
    assert sum(mean.values()) == pytest.approx(sum(algo.link_flows(call, topology).values()))
    if algorithm == "ring":
        measured = schedule_flows(algo.schedule(merged, topology), devices, topology, (*range(k),))
        assert algo.link_flows(merged, topology) == pytest.approx(measured, rel=1e-12)


@pytest.mark.parametrize("model", ["analytical", "flow"])
@pytest.mark.parametrize("channels", [1, 2, 4])
@pytest.mark.parametrize("per_node", [1, 4])
def test_the_slices_stand_for_every_channel_once(model: str, channels: int, per_node: int) -> None:
    """The slices of a call over c channels stand for channels 0 .. c-1, each once: one
    slice a channel where each is played (the flow model on ECMP routes), one slice for all
    the copies of a rotation where they merge (the analytical model), whose flows then spread
    over every copy's route."""
    topology = _spine_cluster(4)
    devices = tuple(
        f"rack{r}/node{n}/gpu{g}" for r in range(4) for n in range(2) for g in range(per_node)
    )
    parts = slices(CollectiveCall("allreduce", devices, 8e6), topology, channels, model)
    stood_for = sorted(c for part in parts for c in part.connections)
    assert stood_for == list(range(channels))
    if model == "flow" or len(parts) == channels:
        assert [part.connections for part in parts] == [(c,) for c in range(channels)]


@pytest.mark.parametrize("channels", [2, 4])
@pytest.mark.parametrize("size", [0.0, 1e6, 256e6])
def test_alone_a_spread_slice_still_takes_its_cost(channels: int, size: float) -> None:
    """On 8 ECMP spines whose links are narrower than a NIC (2:1 uplinks), a ring of one GPU a
    rack in c channels merges into one slice whose flows spread over c spines; its cost prices
    each pair on one route, and alone it still takes that cost (1e-9): its units are the
    cost's, only its share of contended links follows the spread."""
    cluster = two_tier_cluster(
        racks=8, nodes_per_rack=1, gpus_per_node=8, nics=8, oversubscription=2
    )
    cluster["spines"] = 8
    topology = topology_of(cluster)
    call = CollectiveCall("allreduce", tuple(f"rack{r}/node0/gpu0" for r in range(8)), size)
    (part,) = slices(call, topology, channels, "analytical")
    assert part.connections == tuple(range(channels))
    sim = Simulation(topology)
    run_collective(sim, call, model="analytical", channels=channels, record_transfers=False)
    sim.run()
    assert sim.now == pytest.approx(analytical_time(part, topology), rel=1e-9)


@pytest.mark.parametrize("channels", [2, 4])
def test_rings_of_spread_slices_share_narrow_spines_as_the_flow_model_does(channels: int) -> None:
    """Eight rings at once (GPU g of every node, one node a rack) in c channels on 8 ECMP
    spines at 2:1, each spine link half a NIC: the analytical model's merged slices spread
    over their channels' spines and move their cost's units, and the last ring ends where the
    flow model's does (1e-6; measured equal).  Units taken from the spread rate instead of the
    cost's made it twice as slow."""
    cluster = two_tier_cluster(
        racks=8, nodes_per_rack=1, gpus_per_node=8, nics=8, oversubscription=2
    )
    cluster["spines"] = 8
    topology = topology_of(cluster)
    rings = [
        (0.0, CollectiveCall("allreduce", tuple(f"rack{r}/node0/gpu{g}" for r in range(8)), 64e6))
        for g in range(8)
    ]

    def last_end(model: str) -> float:
        sim = Simulation(topology)
        for i, (_start, call) in enumerate(rings):
            run_collective(
                sim, call, model=model, channels=channels, record_transfers=False, group=("r", i)
            )
        sim.run()
        return sim.now

    assert last_end("analytical") == pytest.approx(last_end("flow"), rel=1e-6)


@pytest.mark.parametrize("size", [1e6, 64e6])
@pytest.mark.parametrize("name", ["ring", "double_tree", "halving_doubling"])
def test_a_call_priced_again_gets_the_phases_of_its_first_pricing(name: str, size: float) -> None:
    """run_fluid keeps a call's phases from its second pricing on (call_phases): the kept
    phases are the algorithm's own for that call, another size is priced anew, and a call
    whose options cannot be a key is priced every time."""
    topology = topology_of(two_tier_cluster(racks=2, nodes_per_rack=2, gpus_per_node=4))
    call = CollectiveCall("allreduce", gpus(topology, 8), size, name)
    algo = check_call(call, topology)
    first = call_phases(algo, call, topology)
    second = call_phases(algo, replace(call), topology)  # an equal call, another object
    third = call_phases(algo, replace(call), topology)
    assert first == second == third == algo.fluid_phases(call, topology)
    assert third is second  # kept from the second pricing
    other = call_phases(algo, replace(call, size_bytes=2 * size), topology)
    assert other != first and other == algo.fluid_phases(
        replace(call, size_bytes=2 * size), topology
    )
    odd = replace(call, options={"not_a_key": [1, 2]})
    assert call_phases(algo, odd, topology) is not call_phases(algo, odd, topology)


def _dgx_a100_nodes(nodes: int) -> tuple[object, Topology]:
    scenario = scenario_of(
        {"kind": "two_tier", "racks": 1, "nodes_per_rack": nodes, "node": {"preset": "dgx-a100"}}
    )
    return scenario, build_topology(scenario.cluster)


@pytest.mark.parametrize("size", [2.0**30, 2.0**31])
def test_double_tree_slices_bound_in_nvlink_share_it_as_the_flow_model_does(size: float) -> None:
    """A 1-2 GiB double-tree all-reduce (Simple) on two DGX A100 nodes in NCCL's 16
    channels: each GPU sends 2 S over its NVLink port, which NCCL's figures price at 0.8 of
    its line rate (collectives/bus.py), so the slices are bound there together.  The fluid
    weights count each stream's wire as the flow-level play puts wire x bytes on the links,
    and the analytical time is within 5% of the flow-level one (measured +3.5% at 1 GiB,
    +1.8% at 2 GiB, slow side; LL128 +0.4% at 1 GiB); weights of one per stream made it
    14-15% fast (the links shared at their line rate)."""
    from clustersim.studies.collective_sweep import group_devices, run_point

    scenario, topology = _dgx_a100_nodes(2)
    call = CollectiveCall(
        "allreduce", group_devices(topology), size, "double_tree", protocol="Simple"
    )
    times = {
        model: run_point(scenario, topology, call, model, 1, "auto")["time_s"]
        for model in ("analytical", "flow")
    }
    assert times["analytical"] == pytest.approx(times["flow"], rel=0.05)


def test_a_streams_wire_is_its_routes_line_over_priced_bottleneck() -> None:
    """pair_flows' ``wired`` weights on a protocol's view of two DGX A100 nodes: an NVLink
    hop counts 1 / 0.8 on both its links (NVLink priced at 0.8 of 300 GB/s), a hop across
    the nodes the NIC's 1 / 0.96 on every link of its route (the NIC is its line bottleneck,
    25 GB/s; PCIe priced at 24 of 32 GB/s and the NIC at 24 make 24 its priced one), as the
    flow-level model's bus routes carry; unwired, one flow a link."""
    from clustersim.collectives.bus import bus_view
    from clustersim.collectives.fluid import pair_flows

    _scenario, topology = _dgx_a100_nodes(2)
    view = bus_view(topology)
    names = gpus(topology)
    for src, dst, wire in ((names[0], names[1], 1 / 0.8), (names[0], names[8], 300 / 288)):
        wired: dict[int, float] = {}
        pair_flows(view, src, dst, wired, 1.0, wired=True)
        plain: dict[int, float] = {}
        pair_flows(view, src, dst, plain, 1.0)
        assert set(plain.values()) == {1.0}
        assert wired == pytest.approx({link: wire for link in plain}, rel=1e-12)
