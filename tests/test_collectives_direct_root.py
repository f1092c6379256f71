"""Direct (one-shot) and via-root collectives: cases D1-D3, formulas, flow == analytical."""

from __future__ import annotations

import pytest

from clustersim.collectives import CollectiveCall, analytical_time, check_call, run_collective
from clustersim.collectives.direct import Direct
from clustersim.collectives.ops import OPERATIONS
from clustersim.collectives.root import ViaRoot
from clustersim.engine import Simulation
from clustersim.errors import ScenarioError
from clustersim.scenario import parse_scenario
from clustersim.scenario.shorthand import flat_cluster, scenario_of
from clustersim.topology import Topology, build_topology

from .conftest import flat_topology, flow_time, one_node

KB, MB, GB = 1e3, 1e6, 1e9
OPS = tuple(OPERATIONS)
"""Every collective operation."""
ALGORITHMS = {"direct": Direct, "root": ViaRoot}


def flat(kind: str, n: int, bandwidth: str = "25GB/s", latency: str = "1us") -> Topology:
    """A flat cluster of ``n`` GPUs built from a scenario document."""
    return flat_topology(kind, n, bandwidth, latency)


def pcie_node(gpus: int, pcie: str = "16GB/s") -> Topology:
    """One node: ``gpus`` GPUs and a CPU on one PCIe switch (cases D1-D3)."""
    return build_topology(parse_scenario(one_node(gpus, pcie, [])).cluster)


def gpus_of(topo: Topology) -> tuple[str, ...]:
    return tuple(d for d in topo.devices if "gpu" in d)


# -- validation cases D1-D3 ---------------------------------------------------------


def test_d1_one_gpu_aggregates() -> None:
    """D1: 4 GPUs on 16 GB/s PCIe, 160 MB, GPU 0 sums and sends back: 30 + 30 = 60 ms."""
    topo = pcie_node(4)
    call = CollectiveCall("allreduce", gpus_of(topo), 160 * MB, algorithm="root")
    assert flow_time(call, topo) == pytest.approx(0.060, rel=1e-3)
    assert analytical_time(call, topo) == pytest.approx(0.060, rel=1e-3)


def test_d2_cpu_aggregates() -> None:
    """D2: the 4 GPUs send to the CPU, which sends the sum back: 40 + 40 = 80 ms."""
    topo = pcie_node(4)
    devices = (*gpus_of(topo), "rack0/node0/cpu")
    call = CollectiveCall("allreduce", devices, 160 * MB, algorithm="root", root=4)
    assert flow_time(call, topo) == pytest.approx(0.080, rel=1e-3)
    assert analytical_time(call, topo) == pytest.approx(0.080, rel=1e-3)


def test_d3_direct_allreduce_is_sharded_aggregation() -> None:
    """D3: direct all-reduce = each GPU sums a 40 MB part, then shares it: 7.5 + 7.5 = 15 ms."""
    topo = pcie_node(4)
    call = CollectiveCall("allreduce", gpus_of(topo), 160 * MB, algorithm="direct")
    assert flow_time(call, topo) == pytest.approx(0.015, rel=1e-3)
    assert analytical_time(call, topo) == pytest.approx(0.015, rel=1e-3)


# -- closed forms ---------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 5, 8, 16])
def test_direct_allgather_on_switch_shares_the_uplink(n: int) -> None:
    """Switch: a rank's uplink carries n-1 flows: alpha + (n-1)(S/n) beta."""
    size = 32 * MB
    topo = flat("switch", n, "25GB/s", "1us")
    call = CollectiveCall("allgather", gpus_of(topo), size, algorithm="direct")
    expected = 2e-6 + (n - 1) * size / n / 25e9
    assert flow_time(call, topo) == pytest.approx(expected, rel=1e-9)
    assert analytical_time(call, topo) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("n", [2, 3, 5, 8, 16])
def test_direct_allgather_fully_connected_uses_every_pair_link(n: int) -> None:
    """Fully connected: each pair has its own link: alpha + (S/n) beta."""
    size = 32 * MB
    topo = flat("fully_connected", n, "25GB/s", "1us")
    call = CollectiveCall("allgather", gpus_of(topo), size, algorithm="direct")
    expected = 1e-6 + size / n / 25e9
    assert flow_time(call, topo) == pytest.approx(expected, rel=1e-9)
    assert analytical_time(call, topo) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("n", [2, 3, 5, 8, 16])
def test_root_allreduce_on_switch_serialises_at_the_root(n: int) -> None:
    """Via root on a switch: 2 (alpha + (n-1) S beta)."""
    size = 16 * MB
    topo = flat("switch", n, "25GB/s", "1us")
    call = CollectiveCall("allreduce", gpus_of(topo), size, algorithm="root", root=n - 1)
    expected = 2 * (2e-6 + (n - 1) * size / 25e9)
    assert flow_time(call, topo) == pytest.approx(expected, rel=1e-9)
    assert analytical_time(call, topo) == pytest.approx(expected, rel=1e-9)


# -- flow-level run == closed form -------------------------------------------------------


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("n", [2, 3, 4, 5, 7, 8, 16])
@pytest.mark.parametrize("kind", ["switch", "fully_connected"])
@pytest.mark.parametrize("name", ["direct", "root"])
def test_flow_equals_analytical(name: str, kind: str, n: int, op: str) -> None:
    """Every operation of both algorithms: simulated sends take exactly the cost, 1 KB .. 1 GB."""
    topo = flat(kind, n, "25GB/s", "2us")
    for size in (1 * KB, 3 * MB, 1 * GB):
        call = CollectiveCall(op, gpus_of(topo), size, algorithm=name, root=n // 2)
        assert flow_time(call, topo) == pytest.approx(analytical_time(call, topo), rel=1e-9)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("name", ["direct", "root"])
def test_flow_equals_analytical_with_reduce_cost_on_pcie(name: str, op: str) -> None:
    """One PCIe node with reductions costed: flow and formula agree."""
    topo = pcie_node(5)
    call = CollectiveCall(op, gpus_of(topo), 50 * MB, algorithm=name, root=2, reduce_cost=True)
    assert flow_time(call, topo) == pytest.approx(analytical_time(call, topo), rel=1e-9)


@pytest.mark.parametrize("n", [128, 256])
def test_analytical_large_group(n: int) -> None:
    """Large groups (analytical only): direct all-to-all on a switch = alpha + (n-1) S/n beta."""
    topo = flat("switch", n, "50GB/s", "1us")
    call = CollectiveCall("alltoall", gpus_of(topo), 1 * GB, algorithm="direct")
    assert analytical_time(call, topo) == pytest.approx(2e-6 + (n - 1) * GB / n / 50e9, rel=1e-9)


# -- bytes ---------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["allgather", "alltoall", "reducescatter"])
@pytest.mark.parametrize("n", [2, 3, 7])
def test_direct_bytes_each_rank_sends(op: str, n: int) -> None:
    """Direct all-gather, all-to-all, reduce-scatter: every rank sends (n-1)/n S."""
    topo = flat("switch", n)
    call = CollectiveCall(op, gpus_of(topo), 21 * MB, algorithm="direct")
    sent = Direct().schedule(call, topo).bytes_sent()
    assert sent == pytest.approx([(n - 1) / n * 21 * MB] * n, rel=1e-12)


@pytest.mark.parametrize("n", [2, 4, 9])
def test_root_allreduce_bytes(n: int) -> None:
    """Via root: each other rank sends S, the root sends (n-1) S."""
    topo = flat("switch", n)
    call = CollectiveCall("allreduce", gpus_of(topo), 10 * MB, algorithm="root", root=1)
    sent = ViaRoot().schedule(call, topo).bytes_sent()
    assert sent == pytest.approx([10 * MB if r != 1 else (n - 1) * 10 * MB for r in range(n)])


def test_root_sends_back_only_after_every_arrival() -> None:
    """The root's out-sends depend on all in-sends (the reduction needs every buffer)."""
    topo = flat("switch", 4)
    call = CollectiveCall("allreduce", gpus_of(topo), MB, algorithm="root")
    schedule = ViaRoot().schedule(call, topo)
    parents = schedule.parents()
    into = [i for i in range(len(schedule)) if schedule.dst[i] == 0]
    out = [i for i in range(len(schedule)) if schedule.src[i] == 0]
    assert len(into) == len(out) == 3
    assert all(sorted(parents[i]) == sorted(into) for i in out)


# -- small cases and reduction cost -----------------------------------------------------------


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("name", ["direct", "root"])
def test_single_rank_is_a_no_op(name: str, op: str) -> None:
    """n = 1: no sends, zero time in both models."""
    topo = flat("switch", 1)
    call = CollectiveCall(op, gpus_of(topo), GB, algorithm=name)
    assert len(ALGORITHMS[name]().schedule(call, topo)) == 0
    assert analytical_time(call, topo) == 0.0
    assert flow_time(call, topo) == 0.0


@pytest.mark.parametrize("name", ["direct", "root"])
def test_barrier_is_two_latencies_per_phase(name: str) -> None:
    """Barrier carries no bytes: direct = one route latency, via root = two."""
    topo = flat("switch", 6, "25GB/s", "1us")
    call = CollectiveCall("barrier", gpus_of(topo), GB, algorithm=name)
    expected = 2e-6 if name == "direct" else 4e-6
    assert flow_time(call, topo) == pytest.approx(expected, rel=1e-9)


def test_root_reduce_cost_by_hand() -> None:
    """Via root, 4 GPUs on a 20 GB/s switch, 40 MB, 2 TB/s memory, 1 us links.

    In: 2 us + 3 x 40 MB / 20 GB/s = 6.002 ms; root sums 3 x 40 MB / 2 TB/s = 60 us;
    out: 6.002 ms. Total 12.064 ms.
    """
    topo = flat("switch", 4, "20GB/s", "1us")
    call = CollectiveCall("allreduce", gpus_of(topo), 40 * MB, algorithm="root", reduce_cost=True)
    assert analytical_time(call, topo) == pytest.approx(12.064e-3, rel=1e-12)
    assert flow_time(call, topo) == pytest.approx(12.064e-3, rel=1e-9)


def test_direct_reduce_cost_by_hand() -> None:
    """Direct reduce-scatter, 4 GPUs, 40 MB: 2 us + 3 x 10 MB / 20 GB/s + 3 x 10 MB / 2 TB/s = 1.517 ms."""
    topo = flat("switch", 4, "20GB/s", "1us")
    call = CollectiveCall(
        "reducescatter", gpus_of(topo), 40 * MB, algorithm="direct", reduce_cost=True
    )
    assert analytical_time(call, topo) == pytest.approx(1.517e-3, rel=1e-12)
    assert flow_time(call, topo) == pytest.approx(1.517e-3, rel=1e-9)


# -- pairwise-exchange all-to-all ---------------------------------------------------


def switch_group(n: int, latency: str = "2us") -> tuple[Topology, tuple[str, ...]]:
    """A switch of n GPUs at 25 GB/s and its GPU names."""
    topo = build_topology(scenario_of(flat_cluster("switch", n, "25GB/s", latency)).cluster)
    return topo, tuple(d.name for d in topo.select("gpu*"))


def simulated_s(topo: Topology, call: CollectiveCall, model: str) -> float:
    """Seconds ``call`` takes alone in ``model``."""
    sim = Simulation(topo)
    run_collective(sim, call, model=model, record_transfers=False)
    sim.run()
    return sim.now


@pytest.mark.parametrize("n", [2, 3, 5, 8, 16])
@pytest.mark.parametrize("size", [0.0, 8.0, 1e6, 3.3e8])
@pytest.mark.parametrize("model", ["flow", "analytical"])
def test_pairwise_alltoall_is_n_minus_1_exchange_steps(n: int, size: float, model: str) -> None:
    """On a switch (25 GB/s, 2 us per link): (n-1)(alpha + S/n beta), alpha = 2 hops of
    2 us; every rank sends (n-1) S/n; both network models give it (1e-9)."""
    topo, devices = switch_group(n)
    call = CollectiveCall("alltoall", devices, size, algorithm="pairwise")
    expected = (n - 1) * (4e-6 + size / n / 25e9)
    assert analytical_time(call, topo) == pytest.approx(expected, rel=1e-9)
    schedule = check_call(call, topo).schedule(call, topo)
    assert schedule.bytes_sent() == pytest.approx([(n - 1) * size / n] * n)
    assert len(schedule) == n * (n - 1)
    assert simulated_s(topo, call, model) == pytest.approx(expected, rel=1e-9)


def test_pairwise_is_for_alltoall_only() -> None:
    topo, devices = switch_group(4, "0us")
    with pytest.raises(ScenarioError, match="pairwise does not implement allreduce"):
        check_call(CollectiveCall("allreduce", devices, 1e6, algorithm="pairwise"), topo)


# -- broadcast as scatter + all-gather ------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 5, 8, 16])
@pytest.mark.parametrize("size", [0.0, 8.0, 1e6, 3.3e8])
@pytest.mark.parametrize("root", [0, 1])
@pytest.mark.parametrize("model", ["flow", "analytical"])
def test_scatter_allgather_broadcast_on_a_switch(
    n: int, size: float, root: int, model: str
) -> None:
    """alpha + (n-1)(S/n) beta for the scatter (the root's port carries n-1 blocks), then
    (n-1)(alpha + (S/n) beta) for the ring all-gather; alpha = 2 hops of 2 us (1e-9)."""
    topo, devices = switch_group(n)
    call = CollectiveCall("broadcast", devices, size, algorithm="scatter_allgather", root=root % n)
    block = size / n
    expected = (4e-6 + (n - 1) * block / 25e9) + (n - 1) * (4e-6 + block / 25e9)
    assert analytical_time(call, topo) == pytest.approx(expected, rel=1e-9)
    schedule = check_call(call, topo).schedule(call, topo)
    received = schedule.bytes_received()
    assert received[root % n] == pytest.approx((n - 1) * block)
    assert sum(received) == pytest.approx((n - 1) * block + n * (n - 1) * block)
    assert simulated_s(topo, call, model) == pytest.approx(expected, rel=1e-9)


def test_scatter_allgather_beats_direct_broadcast_for_large_messages() -> None:
    """1 GB to 16 ranks on a switch: about 2 S beta against (n-1) S beta for direct."""
    topo, devices = switch_group(16, "0us")
    fast = analytical_time(
        CollectiveCall("broadcast", devices, 1e9, algorithm="scatter_allgather"), topo
    )
    direct = analytical_time(CollectiveCall("broadcast", devices, 1e9, algorithm="direct"), topo)
    assert fast == pytest.approx(2 * 15 / 16 * 1e9 / 25e9, rel=1e-9)
    assert direct == pytest.approx(15 * 1e9 / 25e9, rel=1e-9)
