"""Pipelined binary and double binary trees as NCCL runs them: children at once, edges as
streams, two complementary trees; closed forms and flow-level agreement."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from clustersim.collectives import CollectiveCall, analytical_time, run_collective
from clustersim.collectives.algorithm import algorithm
from clustersim.collectives.execution import execute
from clustersim.collectives.schedule import Schedule
from clustersim.collectives.tree import (
    TREE_CHUNK_BYTES,
    BinaryTree,
    DoubleBinaryTree,
    binary_tree,
    chained,
    double_trees,
    inorder_tree,
    pieces_of,
)
from clustersim.engine import Simulation
from clustersim.scenario import parse_scenario
from clustersim.scenario.shorthand import two_tier_cluster
from clustersim.topology import Topology, build_topology

from .conftest import flat_topology

BANDWIDTH = 25e9  # bytes/s per link
LATENCY = 1e-6  # seconds per link; a switch route crosses two links
MEMORY_BW = 2e12  # bytes/s, GPU default: a reduction of b bytes costs b / this

GROUPS = [2, 3, 4, 5, 7, 8, 16]
KINDS = ["switch", "fully_connected"]
ALGOS = ["tree", "double_tree"]
OPS = ["broadcast", "reduce", "allreduce", "barrier"]


def topology(kind: str, n: int) -> Topology:
    """A flat cluster of n GPUs, 25 GB/s and 1 us per link (cached)."""
    return flat_topology(kind, n)


def hop_time(nbytes: float, kind: str = "switch") -> float:
    """alpha + nbytes beta of one piece (seconds)."""
    return (2 * LATENCY if kind == "switch" else LATENCY) + nbytes / BANDWIDTH


def make_call(op: str, n: int, size: float, algo: str = "tree", kind: str = "switch", **kw):
    """A call over all n devices of ``topology(kind, n)``."""
    return CollectiveCall(op, tuple(topology(kind, n).devices), size, algorithm=algo, **kw)


def flow(call: CollectiveCall, topo: Topology) -> Simulation:
    """The finished flow-level simulation of ``call``."""
    sim = Simulation(topo)
    run_collective(sim, call)
    sim.run()
    return sim


def hd_time(n: int, size: float) -> float:
    """Flow-level halving-doubling all-reduce of ``size`` bytes on the switch (seconds)."""
    return flow(make_call("allreduce", n, size, "halving_doubling"), topology("switch", n)).now


@pytest.mark.parametrize("n", [4, 16, 64, 256, 1024])
@pytest.mark.parametrize("algo", ALGOS)
def test_latency_bound_allreduce_matches_halving_doubling(n: int, algo: str) -> None:
    """8 B: children send to their parent at once, so a tree all-reduce is 2 log2(n) hops up
    and down, like halving-doubling's 2 log2(n) steps (within 10%; the issue's case is
    n = 1024, 2.5 us per link: tree 185 us and hd 100 us before the fix)."""
    tree = flow(make_call("allreduce", n, 8.0, algo), topology("switch", n)).now
    assert tree == pytest.approx(hd_time(n, 8.0), rel=0.10)


@pytest.mark.parametrize("n", [2, 3, 5, 8, 13, 64])
@pytest.mark.parametrize("algo", ALGOS)
def test_zero_byte_allreduce_is_two_depths_of_latency(n: int, algo: str) -> None:
    """0 B all-reduce = 2 x depth x alpha exactly, in both models (alpha = 2 us a hop)."""
    depth = max(t.depth() for t in algorithm(algo).trees(n))
    call = make_call("allreduce", n, 0.0, algo)
    expected = 2 * depth * hop_time(0.0)
    assert flow(call, topology("switch", n)).now == pytest.approx(expected, rel=1e-12)
    assert analytical_time(call, topology("switch", n)) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("n", [3, 7, 15])
def test_parent_sends_to_both_children_at_once(n: int) -> None:
    """One-piece broadcast on a full tree: siblings share their parent's uplink and
    arrive together, each after alpha + 2 p beta per level (not one after the other)."""
    piece = 1e6
    sim = flow(make_call("broadcast", n, piece, chunk_bytes=piece), topology("switch", n))
    depth = binary_tree(n).depth()
    expected = depth * (hop_time(0.0) + 2 * piece / BANDWIDTH)
    assert sim.now == pytest.approx(expected, rel=1e-12)
    assert max(s.peak_flows for s in sim.network.link_stats()) == 2


@pytest.mark.parametrize("pieces", [1, 2, 10, 100])
def test_a_stream_pays_latency_once(pieces: int) -> None:
    """Two ranks, c pieces down one edge: alpha + S beta, as one message (a FIFO stream
    pays the route latency once, not once per piece)."""
    piece = 1e6
    call = make_call("broadcast", 2, pieces * piece, chunk_bytes=piece)
    expected = hop_time(0.0) + pieces * piece / BANDWIDTH
    assert flow(call, topology("switch", 2)).now == pytest.approx(expected, rel=1e-12)
    assert analytical_time(call, topology("switch", 2)) == pytest.approx(expected, rel=1e-12)


def test_a_stream_that_went_idle_pays_latency_again() -> None:
    """A piece whose data comes after its stream went idle pays the latency again:
    0 -> 1 -> 2 with 1 -> 2's second piece waiting for a slow 0 -> 1 piece."""
    topo = topology("switch", 3)
    sched = Schedule(3)
    a = sched.send(0, 1, 1e6)  # 2 us + 40 us
    b = sched.send(1, 2, 1e3, [a])  # 2 us + 0.04 us, done at 44.04 us
    c = sched.send(0, 1, 1e6, [], stream_after=a)  # continues: 40 us more, at 82 us
    sched.send(1, 2, 1e3, [c], stream_after=b)  # idle since 44.04: 2 us + 0.04 us again
    sim = Simulation(topo)
    execute(sim, tuple(topo.devices), sched)
    sim.run()
    assert sim.now == pytest.approx(82e-6 + 2e-6 + 1e3 / BANDWIDTH, rel=1e-12)


def test_stream_after_must_be_the_same_pair() -> None:
    """A send cannot continue the stream of another pair."""
    sched = Schedule(3)
    a = sched.send(0, 1, 1.0)
    with pytest.raises(ValueError, match="same pair"):
        sched.send(0, 2, 1.0, stream_after=a)


@pytest.mark.parametrize(("n", "load"), [(2, 1), (3, 2), (4, 2), (5, 3), (8, 3), (64, 3)])
def test_tree_allreduce_bandwidth_term(n: int, load: int) -> None:
    """Single tree, large S: every piece crosses an interior rank's ports three times
    (1 up and 2 down each way), so T ~ L S beta with L = 3 (2 for n = 3, 4; 1 for n = 2),
    plus the pipeline fill: 2 x 6 levels of 2 pieces at n = 64, 24 of 600 piece times."""
    size = 2e8
    t = flow(make_call("allreduce", n, size, chunk_bytes=1e6), topology("switch", n)).now
    assert t == pytest.approx(load * size / BANDWIDTH, rel=0.045)


@pytest.mark.parametrize("n", [4, 8, 16, 64])
def test_double_tree_allreduce_is_two_s_beta(n: int) -> None:
    """Double tree: a rank is interior in one tree (3 half pieces each way) and a leaf in
    the other (1), so T ~ 4 x S/2 x beta = 2 S beta for any n, and bus bandwidth
    2 (n-1)/n S / T ~ (n-1)/n of the link's."""
    size = 4e8
    t = flow(make_call("allreduce", n, size, "double_tree"), topology("switch", n)).now
    assert t == pytest.approx(2 * size / BANDWIDTH, rel=0.03)


def test_double_tree_bus_bandwidth_near_ring_at_1gb_on_64_ranks() -> None:
    """The issue's target: 1 GB on a 64-rank switch, double tree >= 85% of ring's bus
    bandwidth (measured 97.6%; before the rework 77%)."""
    topo = topology("switch", 64)
    ring = flow(make_call("allreduce", 64, 1e9, "ring"), topo).now
    double = flow(make_call("allreduce", 64, 1e9, "double_tree"), topo).now
    assert ring / double >= 0.85


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", GROUPS)
@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("op", OPS)
def test_cost_agrees_with_flow_level(kind: str, n: int, algo: str, op: str) -> None:
    """The closed form against the flow-level run: exact at 0 B; at 64 MB within 10%
    (single tree 1%); in between (one to a few pieces) never more than 1% optimistic and
    at most 2.3x (the fill counts every stream of a phase as sharing each hop)."""
    topo = topology(kind, n)
    for size in (0.0, 1e5, 1e6, 4e6, 6.4e7):
        call = make_call(op, n, size, algo, kind, root=n - 1)
        got, want = analytical_time(call, topo), flow(call, topo).now
        if size == 0.0:
            assert got == pytest.approx(want, rel=1e-12)
        elif size >= 6.4e7:
            assert got == pytest.approx(want, rel=0.01 if algo == "tree" else 0.10)
        else:
            assert want * 0.99 <= got <= 2.3 * want


@pytest.mark.parametrize("n", [3, 5, 8, 16])
@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("op", ["reduce", "allreduce"])
def test_reduction_cost_is_small_and_counted(n: int, algo: str, op: str) -> None:
    """With reduce_cost every piece is summed at its receiver (2 TB/s against 25 GB/s
    links): the closed form adds depth x fan-in pieces' sums, and stays within 0.99x to 1.3x of the flow level
    (10 pieces: the double tree's fill is counted pessimistically, see above)."""
    topo = topology("switch", n)
    call = make_call(op, n, 4e7, algo, reduce_cost=True, chunk_bytes=4e6)
    plain = make_call(op, n, 4e7, algo, chunk_bytes=4e6)
    summed = flow(call, topo).now
    trees = algorithm(algo).trees(n)
    fan = max(len(kids) for t in trees for kids in t.children)
    depth = max(t.depth() for t in trees)
    piece = 4e6  # the chunk: each tree cuts its share into 4 MB pieces
    added = analytical_time(call, topo) - analytical_time(plain, topo)
    assert added == pytest.approx(depth * fan * piece / MEMORY_BW, rel=1e-9)
    assert summed * 0.99 <= analytical_time(call, topo) <= 1.3 * summed


@pytest.mark.parametrize("n", [8, 16])
@pytest.mark.parametrize("op", ["broadcast", "allreduce"])
def test_double_tree_beats_single_tree_for_large_messages(n: int, op: str) -> None:
    """Two trees share the ports better: a large message finishes sooner."""
    topo = topology("switch", n)
    single = flow(make_call(op, n, 2e8, "tree", chunk_bytes=2e6), topo).now
    double = flow(make_call(op, n, 2e8, "double_tree", chunk_bytes=2e6), topo).now
    assert double < 0.9 * single


@pytest.mark.parametrize("n", list(range(1, 40)) + [64, 100])
def test_inorder_tree_is_a_binary_tree(n: int) -> None:
    """The in-order tree spans all positions, at most 2 children, odd positions are leaves."""
    tree = inorder_tree(n)
    assert sorted(tree.top_down()) == list(range(n))
    assert all(len(kids) <= 2 for kids in tree.children)
    assert all(not tree.children[q] for q in range(1, n, 2))
    assert tree.depth() <= max(1, math.ceil(math.log2(n))) if n > 1 else tree.depth() == 0


@pytest.mark.parametrize("n", [2, 4, 6, 8, 10, 16, 32, 64])
def test_double_trees_are_complementary_for_even_n(n: int) -> None:
    """Even n: every position is a leaf in exactly one of the two trees."""
    first, second = double_trees(n)
    for q in range(n):
        leaf1, leaf2 = not first.children[q], not second.children[q]
        assert leaf1 != leaf2


@pytest.mark.parametrize("n", [3, 5, 7, 9, 15, 33])
def test_double_trees_for_odd_n_overlap_only_at_zero(n: int) -> None:
    """Odd n: position 0 is interior in both trees, every other position a leaf in one."""
    first, second = double_trees(n)
    for q in range(1, n):
        assert (not first.children[q]) != (not second.children[q])
    assert first.children[0] and second.children[0]


@pytest.mark.parametrize("n", [2, 5, 12])
def test_binary_tree_children(n: int) -> None:
    """Complete binary tree: position j has children 2j+1 and 2j+2 (those below n)."""
    tree = binary_tree(n)
    for j in range(n):
        assert tree.children[j] == tuple(c for c in (2 * j + 1, 2 * j + 2) if c < n)


def test_pieces_default_and_rounding() -> None:
    """chunk None -> 1 MiB; c = ceil(m / chunk) equal pieces; zero bytes is one piece."""
    assert pieces_of(3 * TREE_CHUNK_BYTES, None) == (3, TREE_CHUNK_BYTES)
    assert pieces_of(10.0, 4.0) == (3, 10.0 / 3)
    assert pieces_of(0.0, None) == (1, 0.0)


@pytest.mark.parametrize("n", [2, 5, 8])
def test_broadcast_bytes_sent(n: int) -> None:
    """Broadcast: each rank sends S per child, n - 1 copies of S in all."""
    size = 1e6
    call = make_call("broadcast", n, size, chunk_bytes=2.5e5)
    sent = BinaryTree().schedule(call, topology("switch", n)).bytes_sent()
    assert sent == pytest.approx([len(k) * size for k in binary_tree(n).children], rel=1e-12)


@pytest.mark.parametrize("n", [2, 5, 8])
def test_allreduce_bytes_sent(n: int) -> None:
    """All-reduce on one tree: a rank sends S up (but the root) and S to each child."""
    size = 1e6
    call = make_call("allreduce", n, size, chunk_bytes=2.5e5)
    sent = BinaryTree().schedule(call, topology("switch", n)).bytes_sent()
    tree = binary_tree(n)
    expected = [(len(tree.children[q]) + (q != 0)) * size for q in range(n)]
    assert sent == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("n", [4, 8, 16])
def test_double_tree_allreduce_bytes_sent(n: int) -> None:
    """Double tree, even n: every rank sends (1 + 2) S/2 as interior + S/2 as leaf, ~2S."""
    size = 1e6
    call = make_call("allreduce", n, size, "double_tree", chunk_bytes=2.5e5)
    sent = DoubleBinaryTree().schedule(call, topology("switch", n)).bytes_sent()
    first, second = double_trees(n)
    for q in range(n):
        up = sum(1 for t in (first, second) if t.parent[q] >= 0)
        down = len(first.children[q]) + len(second.children[q])
        assert sent[q] == pytest.approx((up + down) * size / 2, rel=1e-12)
    assert max(sent) <= 2 * size


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("op", OPS)
def test_single_rank_is_free(algo: str, op: str) -> None:
    """n = 1: no sends, zero time."""
    topo = topology("switch", 1)
    call = make_call(op, 1, 1e6, algo)
    assert len(algorithm(algo).schedule(call, topo)) == 0
    assert analytical_time(call, topo) == 0.0


@pytest.mark.parametrize("n", [2, 3, 8])
def test_barrier_is_a_zero_byte_round_trip(n: int) -> None:
    """Barrier: zero-byte messages up to the root and back, latency only."""
    topo = topology("switch", n)
    call = make_call("barrier", n, 1e9)
    sched = BinaryTree().schedule(call, topo)
    assert sum(sched.bytes_sent()) == 0.0
    expected = 2 * binary_tree(n).depth() * hop_time(0.0)
    assert analytical_time(call, topo) == pytest.approx(expected, rel=1e-12)
    assert flow(call, topo).now == pytest.approx(expected, rel=1e-12)


def test_algorithms_are_registered() -> None:
    """``tree`` and ``double_tree`` are found by name."""
    assert isinstance(algorithm("tree"), BinaryTree)
    assert isinstance(algorithm("double_tree"), DoubleBinaryTree)
    assert BinaryTree.ops == DoubleBinaryTree.ops == frozenset(OPS)


def test_chained_tree_links_node_heads_and_chains_each_node() -> None:
    """Three nodes of ranks [0,1,2], [3,4,5], [6,7,8] on the in-order tree over nodes
    (node 0 -> node 1 -> node 2): heads 0, 3, 6 link up, each node a chain below its head;
    reversed, the heads are the last ranks 2, 5, 8."""
    over_nodes = inorder_tree(3)
    groups = [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    tree = chained(over_nodes, groups)
    assert tree.parent == (-1, 0, 1, 6, 3, 4, 0, 6, 7)
    back = chained(over_nodes, groups, reverse=True)
    assert back.parent == (1, 2, -1, 4, 5, 8, 7, 8, 2)


def two_tier(racks: int, nodes: int, gpus: int, oversubscription: float = 1.0) -> Topology:
    """A two-tier cluster: 25 GB/s NICs with 1 us latency, NVLink inside nodes."""
    spec = two_tier_cluster(
        racks=racks,
        nodes_per_rack=nodes,
        gpus_per_node=gpus,
        nic_latency="1us",
        oversubscription=oversubscription,
    )
    doc = {"name": "t", "cluster": spec, "workload": {"program": []}}
    return build_topology(parse_scenario(doc).cluster)


@pytest.mark.parametrize(("racks", "nodes", "gpus"), [(1, 2, 4), (2, 4, 8), (4, 4, 8)])
def test_allreduce_across_nodes_chains_inside_and_trees_across(
    racks: int, nodes: int, gpus: int
) -> None:
    """As NCCL: the double tree across nodes, a chain in each node, so a node's NIC carries
    four half-message streams each way (interior in one node tree, leaf in the other):
    at 128 MB it is at most 10% slower than the ring (before: 2.6x slower).  On two nodes
    each NIC carries S/2 down one tree and S/2 up the other, S in all against the ring's
    2 (n-1)/n S: T = S / 25 GB/s, faster than the ring, as NCCL's tree is on two nodes.
    Depth: the node tree's, plus the chain of g - 1 ranks below each head."""
    topo = two_tier(racks, nodes, gpus)
    devices = tuple(d for d in topo.devices if topo.device(d).kind == "gpu")
    call = CollectiveCall("allreduce", devices, 1.28e8, algorithm="double_tree")
    ring = replace(call, algorithm="ring")
    sim_ring, sim_tree = Simulation(topo), Simulation(topo)
    run_collective(sim_ring, ring)
    run_collective(sim_tree, call)
    sim_ring.run()
    sim_tree.run()
    assert sim_tree.now <= 1.10 * sim_ring.now
    if racks * nodes == 2:
        assert sim_tree.now == pytest.approx(1.28e8 / 25e9, rel=0.03)
    trees = DoubleBinaryTree().trees_of(call, topo)
    assert [t.depth() for t in trees] == [gpus - 1 + t.depth() for t in double_trees(racks * nodes)]
