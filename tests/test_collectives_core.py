"""The collectives core: operations, schedules, their execution, call checks."""

from __future__ import annotations

import pytest

from clustersim.collectives import (
    OPERATIONS,
    Algorithm,
    CollectiveCall,
    HopCost,
    Schedule,
    bandwidths,
    canonical_op,
    check_call,
    execute,
    run_collective,
)
from clustersim.engine import Simulation
from clustersim.errors import ScenarioError
from clustersim.scenario import parse_scenario
from clustersim.topology import build_topology


def topology(
    kind: str = "switch", devices: int = 4, bandwidth: str = "10GB/s", latency: str = "0s", **extra
):
    doc = {
        "name": "t",
        "cluster": {
            "kind": kind,
            "devices": devices,
            "link": {"bandwidth": bandwidth, "latency": latency},
            **extra,
        },
        "workload": {"program": []},
    }
    return build_topology(parse_scenario(doc).cluster)


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("allreduce", "allreduce"),
        ("all-reduce", "allreduce"),
        ("All_Reduce", "allreduce"),
        ("reduce-scatter", "reducescatter"),
        ("all_to_all", "alltoall"),
        ("all-gather", "allgather"),
    ],
)
def test_operation_aliases(name: str, canonical: str) -> None:
    """Operation names accept the usual spellings."""
    assert canonical_op(name) == canonical


def test_unknown_operation_hints() -> None:
    """An unknown operation names the close one and lists all."""
    with pytest.raises(ScenarioError, match="did you mean 'allreduce'"):
        canonical_op("allreduse", "workload.collective")


@pytest.mark.parametrize("n", [2, 3, 8, 64])
def test_bus_bandwidth_factors_are_nccl_tests(n: int) -> None:
    """busbw = algbw x 2(n-1)/n for all-reduce, (n-1)/n for all-gather/reduce-scatter/all-to-all, 1 for broadcast."""
    expected = {
        "allreduce": 2 * (n - 1) / n,
        "allgather": (n - 1) / n,
        "reducescatter": (n - 1) / n,
        "alltoall": (n - 1) / n,
        "broadcast": 1.0,
        "reduce": 1.0,
    }
    for op, factor in expected.items():
        algbw, busbw = bandwidths(op, n, 1e9, 0.5)
        assert algbw == 2e9
        assert busbw == pytest.approx(2e9 * factor)
    assert set(OPERATIONS) >= set(expected) | {"gather", "scatter", "barrier"}


def chain_schedule(n: int, nbytes: float) -> Schedule:
    """rank 0 -> 1 -> ... -> n-1, each send after the previous one."""
    s = Schedule(n)
    prev = -1
    for r in range(n - 1):
        prev = s.send(r, r + 1, nbytes, after=[prev], step=r)
    return s


@pytest.mark.parametrize("n", [2, 3, 5])
@pytest.mark.parametrize("nbytes", [0.0, 1e6, 1e9])
def test_execute_chain_is_sum_of_hops(n: int, nbytes: float) -> None:
    """Sends that wait for each other take the sum of their alpha-beta times."""
    topo = topology(devices=n, latency="1us")
    sim = Simulation(topo)
    done = execute(sim, list(topo.devices), chain_schedule(n, nbytes))
    sim.run()
    assert done.triggered
    assert sim.now == pytest.approx((n - 1) * (2e-6 + nbytes / 10e9), rel=1e-12)
    assert sim.network.flows_completed == n - 1


def test_execute_records_one_collective_row_per_rank() -> None:
    """Each rank gets a collective record from its first to its last send."""
    topo = topology(devices=3)
    sim = Simulation(topo)
    execute(sim, list(topo.devices), chain_schedule(3, 1e9), label="chain")
    sim.run()
    rows = {r.resource: r for r in sim.records if r.kind == "collective"}
    assert rows["gpu0"].start_s == 0.0 and rows["gpu0"].end_s == pytest.approx(0.1)
    assert rows["gpu1"].start_s == 0.0 and rows["gpu1"].end_s == pytest.approx(0.2)
    assert rows["gpu2"].start_s == pytest.approx(0.1) and rows["gpu2"].end_s == pytest.approx(0.2)
    assert sum(1 for r in sim.records if r.kind == "transfer") == 2


def test_execute_reduction_cost_on_compute_stream() -> None:
    """With reduce_cost a reduction takes its bytes over the receiver's memory bandwidth before dependents start."""
    topo = topology(devices=3, device={"memory_bandwidth": "1TB/s"})
    s = Schedule(3)
    a = s.send(0, 1, 1e9, reduce_bytes=1e9)
    s.send(1, 2, 1e9, after=[a])
    sim = Simulation(topo)
    execute(sim, list(topo.devices), s, reduce_cost=True)
    sim.run()
    assert sim.now == pytest.approx(0.1 + 1e9 / 1e12 + 0.1, rel=1e-12)


def test_empty_schedule_finishes_at_once() -> None:
    """A schedule without sends (a group of one) ends immediately."""
    topo = topology(devices=1)
    sim = Simulation(topo)
    done = execute(sim, ["gpu0"], Schedule(1))
    assert done.triggered


def test_embed_chains_phases_per_rank() -> None:
    """embed() maps ranks and makes a phase's first sends wait for each rank's last ones."""
    s = Schedule(4)
    s.embed(chain_schedule(2, 1.0), [0, 1])
    ends = s.rank_ends()
    ids = s.embed(chain_schedule(2, 1.0), [1, 2], after=ends)
    assert s.src[ids[0]] == 1 and s.dst[ids[0]] == 2
    assert s.parents()[ids[0]] == [0]
    assert s.bytes_sent() == [1.0, 1.0, 0.0, 0.0]
    assert s.bytes_received() == [0.0, 1.0, 1.0, 0.0]


class Chain(Algorithm):
    """Test algorithm: broadcast along the group's order."""

    name = "test_chain"
    ops = frozenset({"broadcast"})

    def schedule(self, call, topology):
        return chain_schedule(call.n, call.size_bytes)

    def cost(self, call, topology):
        hops = [
            HopCost.between(topology, a, b)
            for a, b in zip(call.devices, call.devices[1:], strict=False)
        ]
        return sum(h.time(call.size_bytes) for h in hops)


@pytest.mark.parametrize("model", ["flow", "analytical"])
def test_run_collective_flow_and_analytical_agree(model: str) -> None:
    """Without contention the flow-level run and the alpha-beta cost give the same time."""
    topo = topology(devices=4, latency="3us")
    sim = Simulation(topo)
    call = CollectiveCall("broadcast", tuple(topo.devices), 5e8, algorithm="test_chain")
    run_collective(sim, call, model=model)
    sim.run()
    assert sim.now == pytest.approx(3 * (6e-6 + 0.05), rel=1e-12)
    assert [r.resource for r in sim.records if r.kind == "collective"] == list(topo.devices)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (CollectiveCall("broadcast", ("gpu0", "gpu0"), 1.0, "test_chain"), "twice"),
        (CollectiveCall("broadcast", ("gpu0", "gpu1"), 1.0, "test_chain", root=5), "root 5"),
        (CollectiveCall("broadcast", ("gpu0", "gpu1"), 1.0, "no_such_algo"), "unknown algorithm"),
        (
            CollectiveCall("allreduce", ("gpu0", "gpu1"), 1.0, "test_chain"),
            "does not implement allreduce",
        ),
        (CollectiveCall("broadcast", ("gpu0", "gpu1"), -1.0, "test_chain"), "negative"),
    ],
)
def test_bad_calls_are_clear_errors(call: CollectiveCall, message: str) -> None:
    """Calls that cannot run say why, at the given key path."""
    with pytest.raises(ScenarioError, match=message):
        check_call(call, topology(devices=4), "workload")


@pytest.mark.parametrize("model", ["flow", "analytical"])
def test_a_collective_call_names_the_op_of_its_rows(model: str) -> None:
    """``run_collective(..., op=...)`` is the ``op`` of the call's ``collective`` rows in
    either network model (a parameter server's ``ps_reducescatter``); its sends keep their
    ``step<k>``; without it the rows' op is empty, as before."""
    topo = topology(devices=4)
    sim = Simulation(topo)
    call = CollectiveCall("reducescatter", tuple(topo.devices), 4e6)
    run_collective(sim, call, model=model, op="ps_reducescatter")
    run_collective(sim, call, model=model, group="second")
    sim.run()
    rows = [r for r in sim.records if r.kind == "collective"]
    assert sorted(r.op for r in rows) == [""] * 4 + ["ps_reducescatter"] * 4
    sends = {r.op for r in sim.records if r.kind == "transfer"}
    assert sends <= {f"step{k}" for k in range(3)}
