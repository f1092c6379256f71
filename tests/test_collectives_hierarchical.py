"""The hierarchical algorithm, contention between collectives, and the hierarchical/ring crossover."""

from __future__ import annotations

from typing import Any

import pytest

from clustersim.collectives import (
    CollectiveCall,
    analytical_time,
    check_call,
    registered_algorithms,
    run_collective,
)
from clustersim.collectives.call import node_groups
from clustersim.collectives.hierarchical import Hierarchical, SharedLinks
from clustersim.engine import Simulation
from clustersim.errors import ScenarioError
from clustersim.scenario import parse_scenario
from clustersim.topology import Topology, build_topology

MB = 1e6


def topology_of(cluster: dict[str, Any]) -> Topology:
    doc = {"name": "t", "cluster": cluster, "workload": {"program": []}}
    return build_topology(parse_scenario(doc).cluster)


def two_tier(
    racks: int = 2,
    nodes: int = 2,
    gpus: int = 4,
    nic: str = "100Gb/s",
    nvlink: str | None = "300GB/s",
    pcie: str = "64GB/s",
    oversubscription: float = 1,
    latency: str = "0us",
) -> Topology:
    node: dict[str, Any] = {
        "gpus": gpus,
        "pcie": {"bandwidth": pcie, "latency": latency},
        "nic": {"bandwidth": nic, "latency": latency},
    }
    if nvlink:
        node["nvlink"] = {"bandwidth": nvlink, "latency": latency}
    return topology_of(
        {
            "kind": "two_tier",
            "racks": racks,
            "nodes_per_rack": nodes,
            "node": node,
            "rack_uplink": {"oversubscription": oversubscription},
            "spines": 1,
        }
    )


def gpus(topo: Topology, glob: str = "*/gpu*") -> tuple[str, ...]:
    return tuple(d.name for d in topo.select(glob))


def flow_time(topo: Topology, *calls: CollectiveCall) -> list[float]:
    """Run ``calls`` at once on one simulation; seconds each took."""
    sim = Simulation(topo)
    ends: list[float] = [0.0] * len(calls)

    def run(i: int, call: CollectiveCall):
        yield run_collective(sim, call)
        ends[i] = sim.now

    for i, call in enumerate(calls):
        sim.process(run(i, call))
    sim.run()
    return ends


def sent(topo: Topology, call: CollectiveCall) -> list[float]:
    return Hierarchical().schedule(call, topo).bytes_sent()


# -- flow == analytical -------------------------------------------------------


SHAPES = [
    dict(racks=1, nodes=2, gpus=4),
    dict(racks=2, nodes=2, gpus=4, latency="2us"),
    dict(racks=2, nodes=3, gpus=3, nvlink=None, pcie="32GB/s"),
    dict(racks=3, nodes=1, gpus=8, nic="400Gb/s", oversubscription=1),
    dict(racks=1, nodes=5, gpus=2, latency="1us"),
    dict(racks=2, nodes=2, gpus=1),
    dict(racks=1, nodes=1, gpus=8),
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "-".join(map(str, s.values())))
@pytest.mark.parametrize("op", ["allreduce", "allgather", "reducescatter"])
def test_flow_matches_analytical_when_uncontended(shape: dict[str, Any], op: str) -> None:
    topo = two_tier(**shape)
    call = CollectiveCall(op, gpus(topo), 96 * MB, algorithm="hierarchical")
    (t,) = flow_time(topo, call)
    assert t > 0
    assert t == pytest.approx(analytical_time(call, topo), rel=1e-9)


LOAD_AWARE = {"ring", "direct", "root"}
"""Inter algorithms whose formula counts their own flows per link: exact behind any uplink."""


@pytest.mark.parametrize("inter", sorted(set(registered_algorithms()) - {"hierarchical"}))
@pytest.mark.parametrize("oversubscription", [1, 4])
def test_inter_algorithms(inter: str, oversubscription: float) -> None:
    """Every registered inter algorithm that applies runs.

    ring, direct, root: flow == analytical, also behind a 4:1 uplink (their formulas count
    their own flows per link); halving_doubling: exact at 1:1, a lower bound at 4:1.
    """
    topo = two_tier(racks=2, nodes=2, gpus=4, nic="400Gb/s", oversubscription=oversubscription)
    for op in ("allreduce", "allgather", "reducescatter"):
        call = CollectiveCall(
            op, gpus(topo), 32 * MB, algorithm="hierarchical", options={"inter": inter}
        )
        try:
            check_call(call, topo)
        except ScenarioError:
            continue  # the algorithm does not apply to the rails
        (t,) = flow_time(topo, call)
        formula = analytical_time(call, topo)
        assert t > 0 and formula > 0
        if inter in LOAD_AWARE or (oversubscription == 1 and inter == "halving_doubling"):
            assert t == pytest.approx(formula, rel=1e-9), op
        elif inter == "halving_doubling":
            assert formula <= t * (1 + 1e-9), op


@pytest.mark.parametrize("routing", ["split", "ecmp"])
def test_several_spines(routing: str) -> None:
    """2 spines, 4:1 uplinks (25 GB/s per rack, 12.5 per spine link), 400 Gb/s NICs.

    split: each rail flow is halved over the spines, as if one 25 GB/s uplink: exact.
    ecmp: the formula assumes every flow on one spine, an upper bound of the flow run.
    """
    doc_topo = topology_of(
        {
            "racks": 4,
            "nodes_per_rack": 2,
            "node": {
                "gpus": 8,
                "pcie": {"bandwidth": "64GB/s"},
                "nvlink": {"bandwidth": "300GB/s"},
                "nic": {"bandwidth": "400Gb/s"},
            },
            "rack_uplink": {"oversubscription": 4},
            "spines": 2,
            "spine_routing": routing,
        }
    )
    call = CollectiveCall("allreduce", gpus(doc_topo), 160 * MB, algorithm="hierarchical")
    (t,) = flow_time(doc_topo, call)
    formula = analytical_time(call, doc_topo)
    if routing == "split":
        assert t == pytest.approx(2 * 7 / 8 * 160e6 * (1 / 300e9 + 1 / 25e9), rel=1e-9)
        assert formula == pytest.approx(t, rel=1e-9)
    else:
        assert t <= formula * (1 + 1e-9)


def test_cost_formula_by_hand() -> None:
    """2 racks x 2 nodes x 4 GPUs, NVSwitch 300 GB/s, NIC 100 Gb/s = 12.5 GB/s, 1 us per link.

    Intra ring reduce-scatter and all-gather: each 3 steps of S/4 over 2 NVLink hops
    (gpu->nvswitch->gpu, alpha 2 us).  Inter ring all-reduce of S/4 across N = 4 nodes
    per rail, 4 rails sharing every NIC: 6 steps of S/16 at 12.5/4 GB/s, alpha of a route
    across racks = 8 links = 8 us (the slowest hop).
    """
    topo = two_tier(racks=2, nodes=2, gpus=4, latency="1us")
    for link in topo.links:
        if "spine" in link.name:
            assert link.latency_s == 0.0  # uplink latency is its own setting (0)
    S = 64 * MB
    intra = 2 * 3 * (2e-6 + S / 4 / 300e9)
    inter = 6 * (6e-6 + S / 16 / (12.5e9 / 4))
    call = CollectiveCall("allreduce", gpus(topo), S, algorithm="hierarchical")
    assert analytical_time(call, topo) == pytest.approx(intra + inter, rel=1e-12)
    assert flow_time(topo, call)[0] == pytest.approx(intra + inter, rel=1e-9)


def test_shared_links_view_splits_only_switch_links() -> None:
    """The across-node phase's view of 4 rails over one NIC per node: the GPUs' own links
    keep their bandwidth, every switch-to-switch link on the route is split 4 ways."""
    topo = two_tier(racks=2, nodes=1, gpus=4)
    call = CollectiveCall("allreduce", tuple(d.name for d in topo.select("*gpu*")), 1e6)
    view = Hierarchical()._shared_view(call, node_groups(call, topo), topo)
    route = view.routes("rack0/node0/gpu0", "rack1/node0/gpu0")[0]
    real = topo.routes("rack0/node0/gpu0", "rack1/node0/gpu0")[0]
    for mine, theirs in zip(route.links, real.links, strict=True):
        own = mine.src in topo.devices or mine.dst in topo.devices
        expected = theirs.bandwidth_Bps if own else theirs.bandwidth_Bps / 4
        assert mine.bandwidth_Bps == expected
    assert route.bottleneck_Bps == 12.5e9 / 4
    assert view.kind == "two_tier"
    assert SharedLinks(topo, {}).routes("rack0/node0/gpu0", "rack1/node0/gpu0")[0] == real


# -- bytes sent ---------------------------------------------------------------


@pytest.mark.parametrize(("nodes", "g"), [(4, 4), (3, 2), (2, 8), (5, 1), (1, 3)])
def test_bytes_sent_per_rank(nodes: int, g: int) -> None:
    topo = two_tier(racks=1, nodes=nodes, gpus=g)
    S = 120 * MB
    N = nodes
    expected = {
        "allreduce": 2 * (g - 1) / g * S + 2 * (N - 1) / N * S / g,
        "allgather": (N - 1) / N * S / g + (g - 1) / g * S,
        "reducescatter": (g - 1) / g * S + (N - 1) / N * S / g,
    }
    for op, each in expected.items():
        call = CollectiveCall(op, gpus(topo), S, algorithm="hierarchical")
        assert sent(topo, call) == pytest.approx([each] * N * g, rel=1e-12)


def test_one_device_and_zero_bytes() -> None:
    topo = two_tier(racks=1, nodes=1, gpus=1)
    call = CollectiveCall("allreduce", gpus(topo), 10 * MB, algorithm="hierarchical")
    assert len(Hierarchical().schedule(call, topo)) == 0
    assert analytical_time(call, topo) == 0.0
    assert flow_time(topo, call) == [0.0]
    topo = two_tier(racks=1, nodes=2, gpus=2, latency="1us")
    zero = CollectiveCall("allreduce", gpus(topo), 0.0, algorithm="hierarchical")
    assert flow_time(topo, zero)[0] == pytest.approx(analytical_time(zero, topo), rel=1e-9)


def test_phases_chain_per_rank_and_steps_add_up() -> None:
    topo = two_tier(racks=1, nodes=3, gpus=4)
    call = CollectiveCall("allreduce", gpus(topo), 12 * MB, algorithm="hierarchical")
    s = Hierarchical().schedule(call, topo)
    assert s.steps() == 3 + 4 + 3  # intra RS, inter ring all-reduce over 3, intra AG
    # every send of a later phase depends (transitively) on its ranks' earlier sends
    parents = s.parents()
    first_inter = next(i for i in range(len(s)) if s.step[i] == 3)
    assert parents[first_inter]


def test_reduce_cost_is_priced() -> None:
    topo = two_tier(racks=1, nodes=2, gpus=4)
    free = CollectiveCall("allreduce", gpus(topo), 64 * MB, algorithm="hierarchical")
    paid = CollectiveCall(
        "allreduce", gpus(topo), 64 * MB, algorithm="hierarchical", reduce_cost=True
    )
    extra = analytical_time(paid, topo) - analytical_time(free, topo)
    # intra: 3 reductions of S/4, inter: 1 of S/8, each at 2 TB/s
    assert extra == pytest.approx((3 * 16e6 + 8e6) / 2e12, rel=1e-9)
    assert flow_time(topo, paid)[0] == pytest.approx(analytical_time(paid, topo), rel=1e-9)


# -- when it does not apply ---------------------------------------------------


def test_unsupported_without_nodes() -> None:
    topo = topology_of({"kind": "switch", "devices": 4, "link": {"bandwidth": "10GB/s"}})
    call = CollectiveCall("allreduce", tuple(topo.devices), MB, algorithm="hierarchical")
    with pytest.raises(ScenarioError, match="two_tier"):
        check_call(call, topo, "workload.algorithm")


def test_unsupported_uneven_nodes_and_ops() -> None:
    topo = two_tier(racks=1, nodes=2, gpus=4)
    uneven = gpus(topo, "rack0/node0/gpu*") + ("rack0/node1/gpu0",)
    reason = Hierarchical().unsupported(CollectiveCall("allreduce", uneven, MB), topo)
    assert reason and "same number" in reason
    bcast = CollectiveCall("broadcast", gpus(topo), MB, algorithm="hierarchical")
    assert "does not implement broadcast" in Hierarchical().unsupported(bcast, topo)


def test_unknown_inter_algorithm() -> None:
    topo = two_tier(racks=1, nodes=2, gpus=2)
    call = CollectiveCall(
        "allreduce", gpus(topo), MB, algorithm="hierarchical", options={"inter": "rign"}
    )
    with pytest.raises(ScenarioError, match="unknown inter algorithm 'rign'"):
        check_call(call, topo)
    loop = CollectiveCall(
        "allreduce", gpus(topo), MB, algorithm="hierarchical", options={"inter": "hierarchical"}
    )
    with pytest.raises(ScenarioError, match="cannot be hierarchical"):
        check_call(loop, topo)


# -- contention ---------------------------------------------------------------


def switch_ring(uplink: str, n: int = 4) -> Topology:
    """Two 4-rank rings whose every hop shares one switch-to-switch link with the other ring.

    Switches x0..x3 in a one-way ring of ``uplink`` links; a_i and b_i hang off x_i at
    10 GB/s.  Ring A (a0 -> a1 -> a2 -> a3) and ring B (b0 -> ...) both use x_i -> x_{i+1}.
    """
    devices = [{"name": f"{g}{i}"} for i in range(n) for g in "ab"]
    links = [
        {"src": f"{g}{i}", "dst": f"x{i}", "bandwidth": "10GB/s"} for i in range(n) for g in "ab"
    ]
    links += [
        {"src": f"x{i}", "dst": f"x{(i + 1) % n}", "bandwidth": uplink, "duplex": False}
        for i in range(n)
    ]
    return topology_of(
        {
            "kind": "custom",
            "devices": devices,
            "switches": [f"x{i}" for i in range(n)],
            "links": links,
        }
    )


@pytest.mark.parametrize(
    ("uplink", "alone_GBps", "together_GBps"),
    [("20GB/s", 10, 10), ("15GB/s", 10, 7.5), ("10GB/s", 10, 5), ("5GB/s", 5, 2.5)],
)
def test_two_rings_sharing_links_get_their_max_min_share(
    uplink: str, alone_GBps: float, together_GBps: float
) -> None:
    """Two ring all-reduces of S = 40 MB over 4 ranks each, every hop sharing one link.

    Alone, a hop runs at min(10 GB/s, U): time 2 x 3/4 x S / min(10, U).  Together, the
    two flows on each x_i -> x_{i+1} link get U/2 each (max-min; the 10 GB/s device links
    carry one flow): 2 x 3/4 x S / min(10, U/2).  U = 20: no slowdown (1:1);
    U = 15: 10 -> 7.5 GB/s, 4/3 slower; U = 10: 2x slower; U = 5: 5 -> 2.5 GB/s, 2x.
    """
    topo = switch_ring(uplink)
    S = 40 * MB
    a = CollectiveCall("allreduce", ("a0", "a1", "a2", "a3"), S)
    b = CollectiveCall("allreduce", ("b0", "b1", "b2", "b3"), S)
    (alone,) = flow_time(topo, a)
    assert alone == pytest.approx(1.5 * S / (alone_GBps * 1e9), rel=1e-9)
    assert analytical_time(a, topo) == pytest.approx(alone, rel=1e-9)
    together = flow_time(topo, a, b)
    assert together == pytest.approx([1.5 * S / (together_GBps * 1e9)] * 2, rel=1e-9)


@pytest.mark.parametrize(
    ("oversubscription", "alone_GBps", "together_GBps"),
    [(1, 12.5, 12.5), (2, 12.5, 6.25), (4, 6.25, 3.125)],
)
def test_two_rings_across_one_rack_uplink(
    oversubscription: float, alone_GBps: float, together_GBps: float
) -> None:
    """Two 2-rank ring all-reduces across the same rack uplink (2 racks x 2 nodes x 1 GPU).

    NIC 100 Gb/s = 12.5 GB/s; the rack uplink is 2 x 12.5 / o GB/s each way.  Ring A is
    rack0/node0 <-> rack1/node0, ring B rack0/node1 <-> rack1/node1: both cross the uplink
    each way.  A 2-rank ring all-reduce sends S/2 twice: time S / rate.  Alone rate =
    min(12.5, 25/o); together each gets min(12.5, 25/o / 2): o = 1 -> 12.5 (no slowdown),
    o = 2 -> 6.25 (2x), o = 4 -> 6.25 alone, 3.125 together (2x).
    """
    topo = two_tier(racks=2, nodes=2, gpus=1, oversubscription=oversubscription)
    S = 50 * MB
    a = CollectiveCall("allreduce", ("rack0/node0/gpu0", "rack1/node0/gpu0"), S)
    b = CollectiveCall("allreduce", ("rack0/node1/gpu0", "rack1/node1/gpu0"), S)
    assert flow_time(topo, a) == pytest.approx([S / (alone_GBps * 1e9)], rel=1e-9)
    assert flow_time(topo, a, b) == pytest.approx([S / (together_GBps * 1e9)] * 2, rel=1e-9)


# -- crossover ----------------------------------------------------------------


def sweep(nic: str, ratios: tuple[float, ...] = (1, 2, 4, 8)) -> dict[float, tuple[float, float]]:
    """Flow-level (ring, hierarchical) seconds of a 160 MB all-reduce on 4 racks x 2 nodes x 8 GPUs."""
    out = {}
    for ratio in ratios:
        topo = two_tier(racks=4, nodes=2, gpus=8, nic=nic, oversubscription=ratio)
        group = gpus(topo)
        ring = CollectiveCall("allreduce", group, 160 * MB, algorithm="ring")
        hier = CollectiveCall("allreduce", group, 160 * MB, algorithm="hierarchical")
        t_ring, t_hier = flow_time(topo, ring)[0], flow_time(topo, hier)[0]
        assert t_hier == pytest.approx(analytical_time(hier, topo), rel=1e-9)
        assert t_ring == pytest.approx(analytical_time(ring, topo), rel=1e-9)
        out[ratio] = (t_ring, t_hier)
    return out


def test_crossover_with_400G_nics() -> None:
    """NVSwitch 300 GB/s, one 400 Gb/s (50 GB/s) NIC per node, 2 nodes per rack.

    The ring crosses each rack uplink with one flow, the hierarchical all-reduce with
    8 (one per rail, each carrying 1/8 of the data): both are limited by
    B = min(50, 100/o) GB/s per rack crossing.  ring = 2 x 63/64 x S / B;
    hierarchical = 2 x 7/8 x S / 300 + 2 x 7/8 x S / B.  Hierarchical wins when
    2(63/64 - 7/8) S / B > 2 x 7/8 x S / 300, i.e. B < 37.5 GB/s: from o = 4 on.
    """
    times = sweep("400Gb/s")
    S = 160 * MB
    for ratio, (t_ring, t_hier) in times.items():
        B = min(50e9, 100e9 / ratio)
        assert t_ring == pytest.approx(2 * 63 / 64 * S / B, rel=1e-9)
        assert t_hier == pytest.approx(2 * 7 / 8 * S / 300e9 + 2 * 7 / 8 * S / B, rel=1e-9)
    winners = {ratio: "hierarchical" if h < r else "ring" for ratio, (r, h) in times.items()}
    assert winners == {1: "ring", 2: "ring", 4: "hierarchical", 8: "hierarchical"}


def test_no_crossover_with_100G_nics() -> None:
    """With 100 Gb/s NICs B <= 12.5 GB/s < 37.5 GB/s already at 1:1: hierarchical always wins."""
    times = sweep("100Gb/s", (1, 4))
    assert all(h < r for r, h in times.values())
