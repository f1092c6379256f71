"""Ring collectives: cases R1-R3, the alpha-beta formulas, chunking, two rings, flow == analytical."""

from __future__ import annotations

import math

import pytest

from clustersim.collectives import CollectiveCall, analytical_time, check_call
from clustersim.collectives.ops import OPERATIONS
from clustersim.collectives.ring import CHAIN_CHUNK_BYTES, Ring, pieces
from clustersim.errors import ScenarioError
from clustersim.scenario import parse_scenario
from clustersim.topology import Topology, build_topology

from .conftest import flat_topology, flow_time, one_node

KB, MB, GB = 1e3, 1e6, 1e9
OPS = tuple(OPERATIONS)
"""Every collective operation."""
FULL = ("allreduce", "reducescatter", "allgather")


def flat(kind: str, n: int, bandwidth: str = "25GB/s", latency: str = "1us") -> Topology:
    """A flat cluster of ``n`` GPUs built from a scenario document."""
    return flat_topology(kind, n, bandwidth, latency)


def ring_call(topo: Topology, op: str, size: float, **kw) -> CollectiveCall:
    """A ring call over every device of ``topo`` (GPUs only)."""
    gpus = tuple(d for d in topo.devices if "gpu" in d)
    return CollectiveCall(op, gpus, size, algorithm="ring", **kw)


# -- validation cases R1-R3 -------------------------------------------------------


def test_r1_eight_gpu_ring_allreduce() -> None:
    """R1: 8 GPUs, 54 GB/s hops, 160 MB: 2 x 7/8 x 160 MB / 54 GB/s = 5.185 ms."""
    topo = flat("ring", 8, "54GB/s", "0us")
    call = ring_call(topo, "allreduce", 160 * MB)
    assert flow_time(call, topo) == pytest.approx(5.185e-3, rel=5e-3)
    assert analytical_time(call, topo) == pytest.approx(2 * 7 / 8 * 160 * MB / 54e9, rel=1e-12)


@pytest.mark.parametrize("n", [2, 3, 4, 5, 7, 8, 16, 31, 64])
@pytest.mark.parametrize("kind", ["ring", "switch"])
def test_r2_ring_allreduce_formula(kind: str, n: int) -> None:
    """R2: 2(n-1)/n S/B + 2(n-1) a, with a the per-hop latency (a switch route has two links)."""
    a, bw, size = 3e-6, 25e9, 64 * MB
    link_latency = a if kind == "ring" else a / 2
    topo = flat(kind, n, "25GB/s", f"{link_latency * 1e6}us")
    call = ring_call(topo, "allreduce", size)
    expected = 2 * (n - 1) / n * size / bw + 2 * (n - 1) * a
    assert flow_time(call, topo) == pytest.approx(expected, rel=5e-3)
    assert analytical_time(call, topo) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("n", [2, 3, 5, 8, 16, 64])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_r3_bytes_each_worker_sends_in_allreduce(n: int, bidirectional: bool) -> None:
    """R3: every worker sends 2(n-1)/n S in a ring all-reduce, one ring or two."""
    size = 100 * MB
    topo = flat("ring", n)
    call = ring_call(topo, "allreduce", size, bidirectional=bidirectional)
    sent = Ring().schedule(call, topo).bytes_sent()
    assert sent == pytest.approx([2 * (n - 1) / n * size] * n, rel=1e-12)


@pytest.mark.parametrize("op", ["allgather", "reducescatter"])
@pytest.mark.parametrize("n", [2, 3, 7, 16])
def test_bytes_each_rank_sends_in_allgather_and_reducescatter(op: str, n: int) -> None:
    """All-gather and reduce-scatter: every rank sends (n-1)/n S."""
    topo = flat("switch", n)
    sent = Ring().schedule(ring_call(topo, op, 10 * MB), topo).bytes_sent()
    assert sent == pytest.approx([(n - 1) / n * 10 * MB] * n, rel=1e-12)


@pytest.mark.parametrize("n", [2, 4, 7])
def test_ring_alltoall_relay_bytes(n: int) -> None:
    """Ring all-to-all relays blocks: each rank sends sum_k k S/n = (n-1) S / 2."""
    topo = flat("ring", n)
    sent = Ring().schedule(ring_call(topo, "alltoall", 7 * MB), topo).bytes_sent()
    assert sent == pytest.approx([(n - 1) * 7 * MB / 2] * n, rel=1e-12)


def test_ring_order_is_group_order() -> None:
    """Rank i sends only to rank i+1 (mod n), whatever the devices' names."""
    topo = flat("switch", 5)
    devices = tuple(reversed([d for d in topo.devices if "gpu" in d]))
    call = CollectiveCall("allreduce", devices, MB, algorithm="ring")
    schedule = Ring().schedule(call, topo)
    assert {(s, d) for s, d in zip(schedule.src, schedule.dst, strict=True)} == {
        (i, (i + 1) % 5) for i in range(5)
    }
    assert schedule.steps() == 2 * (5 - 1)


# -- flow-level run == closed form -------------------------------------------------


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("n", [2, 3, 4, 5, 7, 8, 16])
@pytest.mark.parametrize("kind", ["ring", "switch", "fully_connected"])
def test_flow_equals_analytical(kind: str, n: int, op: str) -> None:
    """Every ring operation: the simulated sends take exactly the alpha-beta cost, 1 KB .. 1 GB."""
    topo = flat(kind, n, "25GB/s", "2us")
    for size in (1 * KB, 3 * MB, 1 * GB):
        call = ring_call(topo, op, size, root=n // 2)
        assert flow_time(call, topo) == pytest.approx(analytical_time(call, topo), rel=1e-9)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("chunk", [1 * MB, 7 * MB])
def test_flow_equals_analytical_chunked(op: str, chunk: float) -> None:
    """With pieces pipelining, the flow run still matches the cost exactly."""
    topo = flat("ring", 6, "25GB/s", "2us")
    call = ring_call(topo, op, 40 * MB, root=4, chunk_bytes=chunk)
    assert flow_time(call, topo) == pytest.approx(analytical_time(call, topo), rel=1e-9)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("chunk", [None, 8 * MB])
def test_flow_equals_analytical_across_nodes(op: str, chunk: float | None) -> None:
    """Heterogeneous hops (NVSwitch inside a node, NIC between): exact while hops share no links."""
    doc = {
        "name": "t",
        "cluster": {
            "racks": 1,
            "nodes_per_rack": 2,
            "node": {
                "gpus": 4,
                "pcie": {"bandwidth": "32GB/s", "latency": "1us"},
                "nvlink": {"bandwidth": "300GB/s", "latency": "0.5us"},
                "nic": {"bandwidth": "25GB/s", "latency": "2us"},
            },
        },
        "workload": {"program": []},
    }
    topo = build_topology(parse_scenario(doc).cluster)
    call = ring_call(topo, op, 100 * MB, root=2, chunk_bytes=chunk)
    assert flow_time(call, topo) == pytest.approx(analytical_time(call, topo), rel=1e-9)


@pytest.mark.parametrize("n", [128, 1024])
@pytest.mark.parametrize("op", ["allgather", "reducescatter"])
def test_analytical_large_groups(op: str, n: int) -> None:
    """Large groups (analytical only): (n-1)(alpha + S/n beta) on a uniform ring."""
    topo = flat("ring", n, "50GB/s", "1us")
    call = ring_call(topo, op, 1 * GB)
    assert analytical_time(call, topo) == pytest.approx((n - 1) * (1e-6 + GB / n / 50e9), rel=1e-9)


# -- chunking ---------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 4, 7])
@pytest.mark.parametrize("c", [1, 3, 10])
@pytest.mark.parametrize("op", ["broadcast", "reduce"])
def test_chunked_chain_formula(op: str, c: int, n: int) -> None:
    """Chain broadcast/reduce in c pieces: (n - 1 + c - 1)(alpha + piece beta)."""
    size, alpha, bw = 30 * MB, 1e-6, 25e9
    topo = flat("ring", n, "25GB/s", "1us")
    call = ring_call(topo, op, size, root=n - 1, chunk_bytes=size / c)
    expected = (n - 1 + c - 1) * (alpha + size / c / bw)
    assert flow_time(call, topo) == pytest.approx(expected, rel=1e-9)
    assert analytical_time(call, topo) == pytest.approx(expected, rel=1e-9)


def test_chain_default_chunk_is_4MiB() -> None:
    """Broadcast without a chunk pipelines 4 MiB pieces: 160 MB -> 39 pieces."""
    size, n = 160 * MB, 8
    topo = flat("ring", n, "25GB/s", "1us")
    c = math.ceil(size / CHAIN_CHUNK_BYTES)
    assert CHAIN_CHUNK_BYTES == 4 * 2**20 and c == 39 and pieces(size, None) == 1
    expected = (n - 1 + c - 1) * (1e-6 + size / c / 25e9)
    assert analytical_time(ring_call(topo, "broadcast", size), topo) == pytest.approx(expected)


@pytest.mark.parametrize("op", FULL)
def test_chunked_ring_pays_latency_per_piece(op: str) -> None:
    """All ranks busy every step: pieces queue per link, steps x c x (alpha + piece beta)."""
    n, c, size = 5, 4, 20 * MB
    topo = flat("ring", n, "25GB/s", "1us")
    steps = 2 * (n - 1) if op == "allreduce" else n - 1
    call = ring_call(topo, op, size, chunk_bytes=size / n / c)
    expected = steps * c * (1e-6 + size / n / c / 25e9)
    assert flow_time(call, topo) == pytest.approx(expected, rel=1e-9)


def test_pieces_are_equal_and_at_most_chunk() -> None:
    """A message splits into ceil(bytes / chunk) pieces; no chunk means one piece."""
    assert pieces(10 * MB, 4 * MB) == 3
    assert pieces(12 * MB, 4 * MB) == 3
    assert pieces(1 * MB, 4 * MB) == 1
    assert pieces(0.0, 4 * MB) == 1
    assert pieces(10 * MB, None) == 1


def test_non_positive_chunk_is_rejected() -> None:
    """A zero chunk is an error that names the problem."""
    topo = flat("ring", 3)
    with pytest.raises(ScenarioError, match="chunk"):
        check_call(ring_call(topo, "broadcast", MB, chunk_bytes=0.0), topo)


# -- two rings --------------------------------------------------------------------


@pytest.mark.parametrize("n", [3, 4, 8])
@pytest.mark.parametrize("op", FULL)
def test_bidirectional_halves_bandwidth_term_on_ring(op: str, n: int) -> None:
    """Two opposite rings on full-duplex hops: the S/n beta term halves, alpha terms stay."""
    size, alpha, bw = 80 * MB, 1e-6, 25e9
    topo = flat("ring", n, "25GB/s", "1us")
    steps = 2 * (n - 1) if op == "allreduce" else n - 1
    call = ring_call(topo, op, size, bidirectional=True)
    expected = steps * (alpha + size / n / 2 / bw)
    assert flow_time(call, topo) == pytest.approx(expected, rel=1e-9)
    assert analytical_time(call, topo) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("op", ["broadcast", "gather", "scatter"])
def test_bidirectional_rooted_ops_on_ring(op: str) -> None:
    """Rooted operations run both ways round a ring, half the data each way, exactly priced."""
    topo = flat("ring", 6, "25GB/s", "1us")
    one = ring_call(topo, op, 60 * MB, root=1)
    two = ring_call(topo, op, 60 * MB, root=1, bidirectional=True)
    assert flow_time(two, topo) == pytest.approx(analytical_time(two, topo), rel=1e-9)
    assert analytical_time(two, topo) < analytical_time(one, topo)


def test_bidirectional_gains_nothing_on_a_switch() -> None:
    """On a switch both rings leave through one uplink: same time as one ring."""
    topo = flat("switch", 6)
    one = ring_call(topo, "allreduce", 60 * MB)
    two = ring_call(topo, "allreduce", 60 * MB, bidirectional=True)
    assert analytical_time(two, topo) == pytest.approx(analytical_time(one, topo), rel=1e-12)
    assert flow_time(two, topo) == pytest.approx(flow_time(one, topo), rel=1e-9)


# -- small cases and reduction cost ---------------------------------------------------


@pytest.mark.parametrize("op", OPS)
def test_single_rank_is_a_no_op(op: str) -> None:
    """n = 1: no sends, zero time in both models."""
    topo = flat("switch", 1)
    call = ring_call(topo, op, GB)
    assert len(Ring().schedule(call, topo)) == 0
    assert analytical_time(call, topo) == 0.0
    assert flow_time(call, topo) == 0.0


@pytest.mark.parametrize("n", [2, 5, 9])
def test_barrier_is_n_minus_1_latencies(n: int) -> None:
    """Barrier: n-1 rounds of zero-byte messages round the ring, whatever the size."""
    topo = flat("ring", n, "25GB/s", "3us")
    call = ring_call(topo, "barrier", GB)
    assert flow_time(call, topo) == pytest.approx((n - 1) * 3e-6, rel=1e-9)
    assert sum(Ring().schedule(call, topo).bytes_sent()) == 0.0


@pytest.mark.parametrize("op", ["gather", "scatter"])
@pytest.mark.parametrize("n", [2, 5, 8])
def test_gather_scatter_formula(op: str, n: int) -> None:
    """Ring gather/scatter: n-1 steps of S/n, (n-1)(alpha + S/n beta); the root moves (n-1) S/n."""
    size = 16 * MB
    topo = flat("ring", n, "25GB/s", "1us")
    call = ring_call(topo, op, size, root=1)
    assert flow_time(call, topo) == pytest.approx((n - 1) * (1e-6 + size / n / 25e9), rel=1e-9)
    schedule = Ring().schedule(call, topo)
    moved = schedule.bytes_received() if op == "gather" else schedule.bytes_sent()
    assert moved[1] == pytest.approx((n - 1) * size / n)


def test_reduce_cost_by_hand() -> None:
    """Reduce-scatter, 4 GPUs, 40 MB, 20 GB/s, 2 TB/s memory: each of 3 steps adds 10 MB / 2 TB/s.

    Step = 1 us + 10 MB / 20 GB/s + 10 MB / 2 TB/s = 1 + 500 + 5 us = 506 us; 3 steps = 1.518 ms.
    """
    topo = flat("ring", 4, "20GB/s", "1us")
    call = ring_call(topo, "reducescatter", 40 * MB, reduce_cost=True)
    assert analytical_time(call, topo) == pytest.approx(1.518e-3, rel=1e-12)
    assert flow_time(call, topo) == pytest.approx(1.518e-3, rel=1e-9)


@pytest.mark.parametrize("op", ["allreduce", "reduce"])
def test_reduce_cost_matches_flow(op: str) -> None:
    """With reductions costed, flow and formula agree (one PCIe node, chunked chain)."""
    topo = build_topology(parse_scenario(one_node(4, "16GB/s", [])).cluster)
    call = ring_call(topo, op, 64 * MB, root=3, reduce_cost=True, chunk_bytes=8 * MB)
    assert flow_time(call, topo) == pytest.approx(analytical_time(call, topo), rel=1e-9)


@pytest.mark.parametrize("op", ["allreduce", "reducescatter", "allgather", "barrier"])
@pytest.mark.parametrize("n", [2, 3, 4, 7, 16])
def test_bulk_built_ring_equals_send_by_send(op: str, n: int) -> None:
    """The bulk-built one-ring schedule has exactly the sends and dependencies of the general builder."""
    from clustersim.collectives.ring import _orders, _plan, _play, _regular_ring
    from clustersim.collectives.schedule import Schedule

    call = CollectiveCall(op, tuple(f"gpu{i}" for i in range(n)), 1e6, algorithm="ring")
    order, share = _orders(call)[0]
    plan = _plan(call, n, 0, share)
    general = Schedule(n)
    _play(general, order, plan)
    bulk = _regular_ring(order, plan)
    for field in ("src", "dst", "nbytes", "reduce_bytes", "n_deps", "step"):
        assert getattr(bulk, field) == getattr(general, field), field
    assert [tuple(bulk.kids(i)) for i in range(len(bulk))] == [
        tuple(general.kids(i)) for i in range(len(general))
    ]
    assert bulk.parents() == general.parents()
