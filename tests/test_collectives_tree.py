"""Pipelined binary and double binary trees: schedules, closed forms, flow-level agreement."""

from __future__ import annotations

import math

import pytest

from clustersim.collectives import CollectiveCall, analytical_time, run_collective
from clustersim.collectives.algorithm import algorithm
from clustersim.collectives.tree import (
    TREE_CHUNK_BYTES,
    BinaryTree,
    DoubleBinaryTree,
    binary_tree,
    double_trees,
    inorder_tree,
    pieces_of,
    tree_broadcast_closed_form,
)
from clustersim.engine import Simulation
from clustersim.topology import Topology

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


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", GROUPS)
@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("op", OPS)
def test_cost_matches_flow_level(kind: str, n: int, algo: str, op: str) -> None:
    """Cost = flow-level time (rel 1e-9) for 1 KB .. 100 MB in 1 to 20 pieces."""
    topo = topology(kind, n)
    for size, chunk in [(1e3, None), (1e6, 1e5), (1e8, 5e6)]:
        call = make_call(op, n, size, algo, kind, root=n - 1, chunk_bytes=chunk)
        assert flow(call, topo).now == pytest.approx(analytical_time(call, topo), rel=1e-9)


@pytest.mark.parametrize("n", [3, 5, 8, 16])
@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("op", ["reduce", "allreduce"])
def test_reduction_cost_matches_flow_level(n: int, algo: str, op: str) -> None:
    """With reduce_cost every piece is summed at its receiver; cost still exact."""
    topo = topology("switch", n)
    call = make_call(op, n, 4e7, algo, reduce_cost=True, chunk_bytes=4e6)
    assert flow(call, topo).now == pytest.approx(analytical_time(call, topo), rel=1e-9)


@pytest.mark.parametrize("algo", ALGOS)
def test_default_chunk_1gb_matches_flow_level(algo: str) -> None:
    """1 GB with the default 1 MiB pieces (954 pieces): cost still the flow-level time."""
    topo = topology("switch", 8)
    call = make_call("allreduce", 8, 1e9, algo)
    assert flow(call, topo).now == pytest.approx(analytical_time(call, topo), rel=1e-9)


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 7, 8, 13, 16, 31, 64])
@pytest.mark.parametrize("pieces", [1, 2, 5, 17])
def test_broadcast_closed_form(n: int, pieces: int) -> None:
    """Binary-tree broadcast = (D + f (c - 1)) (alpha + p beta)."""
    piece = 1e6
    call = make_call("broadcast", n, pieces * piece, chunk_bytes=piece)
    expected = tree_broadcast_closed_form(n, pieces, hop_time(piece))
    assert analytical_time(call, topology("switch", n)) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("n", [2, 3, 5, 8, 16, 64])
@pytest.mark.parametrize("pieces", [1, 4, 9])
def test_reduce_closed_form_mirrors_broadcast(n: int, pieces: int) -> None:
    """Binary-tree reduce = (D + f (c - 1)) (alpha + p beta + p gamma)."""
    piece = 1e6
    call = make_call("reduce", n, pieces * piece, chunk_bytes=piece, reduce_cost=True)
    expected = tree_broadcast_closed_form(n, pieces, hop_time(piece) + piece / MEMORY_BW)
    assert analytical_time(call, topology("switch", n)) == pytest.approx(expected, rel=1e-9)


def test_broadcast_depth_offsets_by_hand() -> None:
    """n = 7 (a full tree of depth 2): D = 2 + 2 (last second child of a second child), f = 2."""
    assert tree_broadcast_closed_form(7, 1, 1.0) == 4.0
    assert tree_broadcast_closed_form(7, 10, 1.0) == 4.0 + 2 * 9
    assert tree_broadcast_closed_form(2, 10, 1.0) == 10.0  # a chain of one hop


@pytest.mark.parametrize(
    ("n", "period"), [(2, 1), (3, 2), (4, 2), (5, 3), (8, 3), (16, 3), (64, 3)]
)
def test_allreduce_steady_state_period(n: int, period: int) -> None:
    """Binary-tree all-reduce: after two pieces every further piece adds exactly period x t.

    3t once some rank has a parent and two children (n >= 5): its ports carry
    three pieces per piece of data; 2t for n = 3, 4 and t for n = 2.
    """
    piece = 1e6
    topo = topology("switch", n)
    times = [
        analytical_time(make_call("allreduce", n, c * piece, chunk_bytes=piece), topo)
        for c in (2, 3, 10)
    ]
    t = hop_time(piece)
    assert times[1] - times[0] == pytest.approx(period * t, rel=1e-9)
    assert times[2] - times[0] == pytest.approx(8 * period * t, rel=1e-9)


@pytest.mark.parametrize("n", [8, 16])
@pytest.mark.parametrize("op", ["broadcast", "allreduce"])
def test_double_tree_beats_single_tree_for_large_messages(n: int, op: str) -> None:
    """Two trees share the ports better: a large message finishes sooner."""
    topo = topology("switch", n)
    single = analytical_time(make_call(op, n, 2e8, "tree", chunk_bytes=2e6), topo)
    double = analytical_time(make_call(op, n, 2e8, "double_tree", chunk_bytes=2e6), topo)
    assert double < 0.9 * single


@pytest.mark.parametrize("n", [4, 8, 16, 64])
def test_double_tree_allreduce_bandwidth_term(n: int) -> None:
    """Double-tree all-reduce runs at 5t per pair of half pieces: about 2.5 S beta."""
    half_piece = 1e6
    topo = topology("switch", n)
    times = [
        analytical_time(
            make_call("allreduce", n, 2 * c * half_piece, "double_tree", chunk_bytes=half_piece),
            topo,
        )
        for c in (32, 64)
    ]
    assert (times[1] - times[0]) / 32 == pytest.approx(5 * hop_time(half_piece), rel=1e-9)


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


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("op", ["broadcast", "allreduce"])
def test_single_port_no_link_carries_two_flows(algo: str, op: str) -> None:
    """On a switch a rank never has two pieces on its uplink or its downlink at once."""
    sim = flow(make_call(op, 8, 1e7, algo, chunk_bytes=1e6), topology("switch", 8))
    assert max(s.peak_flows for s in sim.network.link_stats()) == 1


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
    assert analytical_time(call, topo) >= 2 * binary_tree(n).depth() * hop_time(0.0)


def test_algorithms_are_registered() -> None:
    """``tree`` and ``double_tree`` are found by name."""
    assert isinstance(algorithm("tree"), BinaryTree)
    assert isinstance(algorithm("double_tree"), DoubleBinaryTree)
    assert BinaryTree.ops == DoubleBinaryTree.ops == frozenset(OPS)
