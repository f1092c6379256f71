"""Recursive halving/doubling algorithms: closed forms, flow-level agreement, bytes moved."""

from __future__ import annotations

import math

import pytest

from clustersim.collectives import CollectiveCall, analytical_time, run_collective
from clustersim.collectives.algorithm import algorithm
from clustersim.collectives.halving_doubling import (
    HalvingDoubling,
    RecursiveDoubling,
    ceil_log2,
    largest_power_of_two,
)
from clustersim.engine import Simulation
from clustersim.topology import Topology

from .conftest import flat_topology

BANDWIDTH = 25e9  # bytes/s
LATENCY = 1e-6  # seconds per link; a switch route crosses two links
MEMORY_BW = 2e12  # bytes/s, the GPU default: reductions cost bytes / this

SIZES = [1e3, 1e6, 1e9]
GROUPS = [2, 3, 4, 5, 7, 8, 16]
KINDS = ["switch", "fully_connected"]
OPS = ["allreduce", "reducescatter", "allgather", "barrier", "broadcast", "reduce"]


def topology(kind: str, n: int) -> Topology:
    """A flat cluster of n GPUs, 25 GB/s and 1 us per link (cached)."""
    return flat_topology(kind, n)


def alpha(kind: str) -> float:
    """Route latency between two devices (seconds)."""
    return 2 * LATENCY if kind == "switch" else LATENCY


def make_call(op: str, n: int, size: float, kind: str = "switch", **kw) -> CollectiveCall:
    """A call over all n devices of ``topology(kind, n)``."""
    kw.setdefault("algorithm", "halving_doubling")
    return CollectiveCall(op, tuple(topology(kind, n).devices), size, **kw)


def flow_time(call: CollectiveCall, topo: Topology) -> float:
    """Seconds the call takes in the flow-level simulation."""
    sim = Simulation(topo)
    run_collective(sim, call)
    sim.run()
    return sim.now


def thakur_rabenseifner(p: int, size: float, a: float, b: float, g: float = 0.0) -> float:
    """Thakur, Rabenseifner & Gropp (2005), all-reduce, p a power of two:
    2 lg(p) alpha + 2 (p-1)/p n beta + (p-1)/p n gamma."""
    return 2 * math.log2(p) * a + 2 * (p - 1) / p * size * b + (p - 1) / p * size * g


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", GROUPS)
@pytest.mark.parametrize("op", OPS)
def test_cost_matches_flow_level(kind: str, n: int, op: str) -> None:
    """Every operation's alpha-beta cost is the flow-level time (rel 1e-9), 1 KB .. 1 GB."""
    topo = topology(kind, n)
    for size in SIZES:
        call = make_call(op, n, size, kind, root=n // 2)
        assert flow_time(call, topo) == pytest.approx(analytical_time(call, topo), rel=1e-9)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", GROUPS)
def test_recursive_doubling_matches_flow_level(kind: str, n: int) -> None:
    """Recursive-doubling all-reduce: cost equals the flow-level time, 1 KB .. 1 GB."""
    topo = topology(kind, n)
    for size in SIZES:
        call = make_call("allreduce", n, size, kind, algorithm="recursive_doubling")
        assert flow_time(call, topo) == pytest.approx(analytical_time(call, topo), rel=1e-9)


@pytest.mark.parametrize("n", [3, 5, 8])
@pytest.mark.parametrize(
    ("algo", "op"),
    [
        ("halving_doubling", "allreduce"),
        ("halving_doubling", "reducescatter"),
        ("halving_doubling", "reduce"),
        ("recursive_doubling", "allreduce"),
    ],
)
def test_reduction_cost_matches_flow_level(algo: str, n: int, op: str) -> None:
    """With reduce_cost the summing at the receivers is priced exactly too."""
    topo = topology("switch", n)
    call = make_call(op, n, 64e6, algorithm=algo, reduce_cost=True)
    assert flow_time(call, topo) == pytest.approx(analytical_time(call, topo), rel=1e-9)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("p", [2, 4, 8, 16, 64])
@pytest.mark.parametrize("size", [1e3, 1e6, 1e9])
def test_rabenseifner_is_thakur_formula(kind: str, p: int, size: float) -> None:
    """Power-of-two all-reduce = 2 lg(p) alpha + 2 (p-1)/p n beta (Thakur et al. 2005)."""
    call = make_call("allreduce", p, size, kind)
    expected = thakur_rabenseifner(p, size, alpha(kind), 1 / BANDWIDTH)
    assert analytical_time(call, topology(kind, p)) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("p", [2, 8, 64])
def test_rabenseifner_with_reduce_cost_is_thakur_formula(p: int) -> None:
    """With reductions priced: + (p-1)/p n gamma, gamma = 1 / memory bandwidth."""
    call = make_call("allreduce", p, 1e8, reduce_cost=True)
    expected = thakur_rabenseifner(p, 1e8, alpha("switch"), 1 / BANDWIDTH, 1 / MEMORY_BW)
    assert analytical_time(call, topology("switch", p)) == pytest.approx(expected, rel=1e-9)


def test_rabenseifner_64_ranks_flow_level_is_thakur_formula() -> None:
    """The flow-level run of 64 ranks reproduces Thakur's formula."""
    call = make_call("allreduce", 64, 1e8)
    expected = thakur_rabenseifner(64, 1e8, alpha("switch"), 1 / BANDWIDTH)
    assert flow_time(call, topology("switch", 64)) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("n", [3, 5, 6, 7, 12])
def test_non_power_of_two_allreduce_adds_fold_steps(n: int) -> None:
    """n not a power of two: one step of S in (summed), Rabenseifner on p', one step of S out."""
    size, a, b, g = 1e8, alpha("switch"), 1 / BANDWIDTH, 1 / MEMORY_BW
    p = largest_power_of_two(n)
    call = make_call("allreduce", n, size, reduce_cost=True)
    expected = (a + size * (b + g)) + thakur_rabenseifner(p, size, a, b, g) + (a + size * b)
    assert analytical_time(call, topology("switch", n)) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("n", [2, 3, 4, 5, 7, 8, 16])
def test_recursive_doubling_formula(n: int) -> None:
    """lg(p) (alpha + S beta + S gamma), plus the fold-in/fold-out steps when n != p."""
    size, a, b, g = 1e6, alpha("switch"), 1 / BANDWIDTH, 1 / MEMORY_BW
    p = largest_power_of_two(n)
    expected = math.log2(p) * (a + size * (b + g))
    if p != n:
        expected += (a + size * (b + g)) + (a + size * b)
    call = make_call("allreduce", n, size, algorithm="recursive_doubling", reduce_cost=True)
    assert analytical_time(call, topology("switch", n)) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("p", [2, 4, 8, 16])
@pytest.mark.parametrize("op", ["reducescatter", "allgather"])
def test_halving_and_doubling_formulas(p: int, op: str) -> None:
    """Reduce-scatter and all-gather: lg(p) alpha + (p-1)/p S beta."""
    size = 1e8
    expected = math.log2(p) * alpha("switch") + (p - 1) / p * size / BANDWIDTH
    call = make_call(op, p, size)
    assert analytical_time(call, topology("switch", p)) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("n", GROUPS)
def test_barrier_is_ceil_log2_rounds_of_latency(n: int) -> None:
    """Dissemination barrier: ceil(lg n) rounds of zero-byte messages, alpha each."""
    call = make_call("barrier", n, 0.0)
    expected = ceil_log2(n) * alpha("switch")
    assert analytical_time(call, topology("switch", n)) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("n", GROUPS)
@pytest.mark.parametrize("op", ["broadcast", "reduce"])
def test_binomial_tree_is_ceil_log2_steps_of_s(n: int, op: str) -> None:
    """Binomial broadcast and reduce: ceil(lg n) (alpha + S beta)."""
    size = 1e7
    call = make_call(op, n, size, root=n - 1)
    expected = ceil_log2(n) * (alpha("switch") + size / BANDWIDTH)
    assert analytical_time(call, topology("switch", n)) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("p", [2, 4, 8, 16, 64])
def test_rabenseifner_bytes_sent_per_rank(p: int) -> None:
    """Every rank sends (p-1)/p S in the reduce-scatter and again in the all-gather."""
    size = 1e6
    call = make_call("allreduce", p, size)
    sched = HalvingDoubling().schedule(call, topology("switch", p))
    assert sched.bytes_sent() == pytest.approx([2 * (p - 1) / p * size] * p, rel=1e-12)
    assert sched.bytes_received() == pytest.approx([2 * (p - 1) / p * size] * p, rel=1e-12)


@pytest.mark.parametrize("p", [2, 4, 8, 16])
def test_rabenseifner_has_2_lg_p_steps(p: int) -> None:
    """Rabenseifner takes 2 lg(p) steps, each one message out and one in per rank."""
    sched = HalvingDoubling().schedule(make_call("allreduce", p, 1e6), topology("switch", p))
    assert sched.steps() == 2 * int(math.log2(p))
    assert len(sched) == 2 * int(math.log2(p)) * p


@pytest.mark.parametrize("n", [3, 5, 6, 7, 12])
def test_non_power_of_two_bytes_sent(n: int) -> None:
    """Fold-in ranks send S once and get S back; the others send 2 (p'-1)/p' S (+ S if they fold out)."""
    size = 1e6
    p = largest_power_of_two(n)
    r = n - p
    sched = HalvingDoubling().schedule(make_call("allreduce", n, size), topology("switch", n))
    core = 2 * (p - 1) / p * size
    expected = [size if q < 2 * r and q % 2 == 0 else core for q in range(n)]
    expected = [e + size if q < 2 * r and q % 2 == 1 else e for q, e in enumerate(expected)]
    assert sched.bytes_sent() == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("n", GROUPS)
def test_reducescatter_leaves_each_rank_its_block(n: int) -> None:
    """Reduce-scatter moves (n-1)/n S per rank in total when n is a power of two, and
    every rank receives data (nobody is left out of a non-power-of-two group)."""
    size = 1e6
    sched = HalvingDoubling().schedule(make_call("reducescatter", n, size), topology("switch", n))
    assert all(b > 0 for b in sched.bytes_received())
    if n == largest_power_of_two(n):
        assert sched.bytes_sent() == pytest.approx([(n - 1) / n * size] * n, rel=1e-12)


@pytest.mark.parametrize("n", GROUPS)
def test_allgather_delivers_everything(n: int) -> None:
    """All-gather: each rank receives the (n-1)/n S it lacks (power of two) or more."""
    size = 1e6
    sched = HalvingDoubling().schedule(make_call("allgather", n, size), topology("switch", n))
    for received in sched.bytes_received():
        assert received >= (n - 1) / n * size * (1 - 1e-12)


@pytest.mark.parametrize("algo", ["halving_doubling", "recursive_doubling"])
def test_single_rank_sends_nothing(algo: str) -> None:
    """n = 1: no sends and zero time."""
    topo = topology("switch", 1)
    call = make_call("allreduce", 1, 1e6, algorithm=algo)
    assert len(algorithm(algo).schedule(call, topo)) == 0
    assert analytical_time(call, topo) == 0.0
    assert flow_time(call, topo) == 0.0


def test_algorithms_are_registered() -> None:
    """Both algorithms are found by name with the operations they implement."""
    assert isinstance(algorithm("halving_doubling"), HalvingDoubling)
    assert isinstance(algorithm("recursive_doubling"), RecursiveDoubling)
    assert RecursiveDoubling.ops == frozenset({"allreduce"})
    assert set(OPS) <= HalvingDoubling.ops


def test_unsupported_operation_is_refused() -> None:
    """Operations outside ``ops`` are reported, not silently run."""
    call = make_call("alltoall", 4, 1e6)
    assert HalvingDoubling().unsupported(call, topology("switch", 4))


@pytest.mark.parametrize("n", [4, 5, 8])
def test_no_link_carries_two_flows(n: int) -> None:
    """On a switch a rank never has two messages on its uplink or downlink at once."""
    topo = topology("switch", n)
    sim = Simulation(topo)
    run_collective(sim, make_call("allreduce", n, 1e7))
    sim.run()
    assert max(s.peak_flows for s in sim.network.link_stats()) == 1
