"""Multi-level aggregation of parameter-server traffic (``data_parallel.ps.hierarchy``).

Clusters: one rack of nodes of ``g`` GPUs and a CPU on one PCIe switch (16 GB/s each
way per device link, as in Dive into Deep Learning, "Parameter Servers"), zero latency,
memory bandwidths so high that aggregation and updates cost under 2 us per iteration,
collectives at line rate (``network.protocol: none``), and one fp32 layer of 40e6 parameters: S = 160 MB of gradients per GPU, the chapter's
figure.  Times are then transfers only, exact to 0.1%.
"""

from __future__ import annotations

from typing import Any

import pytest

from clustersim import simulate
from clustersim.errors import ScenarioError
from clustersim.scenario import parse_scenario

S = 160e6  # bytes of gradients per GPU (the chapter's 160 MB)
PCIE = 16e9  # bytes/s each way per device link (the chapter's 16x Gen3)
TOL = 1e-3


def doc(
    nodes: int,
    gpus: int,
    hierarchy: list[str] | None,
    *,
    placement: str = "dedicated",
    nic_Bps: float = 10e9,
    layers: list[dict[str, Any]] | None = None,
    iterations: int = 1,
    **ps: Any,
) -> dict[str, Any]:
    """``nodes`` nodes of ``gpus`` GPUs (dedicated: the last node's CPU serves)."""
    spec: dict[str, Any] = {"placement": placement, "servers": 1, **ps}
    if hierarchy is not None:
        spec["hierarchy"] = hierarchy
    workers = (nodes - (placement == "dedicated")) * gpus
    return {
        "name": "ps-hierarchy",
        "cluster": {
            "racks": 1,
            "nodes_per_rack": nodes,
            "node": {
                "gpus": gpus,
                "gpu": {"flops": "100TFLOPS", "memory_bandwidth": "1000TB/s"},
                "cpu": {"memory_bandwidth": "1000TB/s"},
                "pcie": {"bandwidth": f"{PCIE / 1e9:g}GB/s", "latency": 0},
                "nic": {"bandwidth": f"{nic_Bps / 1e9:g}GB/s", "latency": 0},
            },
        },
        "model": {"layers": layers or [{"name": "fc", "params": 40e6, "flops": 0}]},
        "training": {
            "global_batch": workers,
            "iterations": iterations,
            "precision": "fp32",
            "optimizer": "sgd",
        },
        "data_parallel": {"sync": "ps", "ps": spec},
        "network": {"protocol": "none"},  # the chapter's line rates
    }


def run(d: dict[str, Any]) -> Any:
    return simulate(parse_scenario(d))


def link_bytes(result: Any, name: str) -> float:
    return next((row["bytes"] for row in result.links if row["link"] == name), 0.0)


# --------------------------------------------------------------------------- the chapter


def collective_s(result: Any, op: str) -> float:
    """Longest ``collective`` row of op ``op`` (seconds)."""
    return max(r.end_s - r.start_s for r in result.records if r.op == op)


def test_d1_gpu_level_splits_the_gradient_on_one_node() -> None:
    """D1 (d2l, "Parameter Servers"): 4 GPUs on one PCIe switch at 16 GB/s, 160 MB of
    gradients.  The chapter's split strategy -- 4 parts of 40 MB, each summed on its own
    GPU, 2.5 ms x 3 = 7.5 ms, and 7.5 ms back, 15 ms -- is the level ``gpu`` now: a
    reduce-scatter of 7.5 ms (op ``ps_reducescatter``) and an all-gather of 7.5 ms
    (``ps_allgather``).  ``[gpu, server]`` with GPU 0 the server (placement gpu) adds the
    server's fan-in and fan-out of the 3 other GPUs' 40 MB shards over its link, 7.5 ms
    each way: 30 ms (the chapter's leader GPU, the old model, took 60 ms)."""
    result = run(doc(1, 4, ["gpu", "server"], placement="gpu"))
    assert result.summary["iteration_time_s"] == pytest.approx(30e-3, rel=TOL)
    assert collective_s(result, "ps_reducescatter") == pytest.approx(7.5e-3, rel=TOL)
    assert collective_s(result, "ps_allgather") == pytest.approx(7.5e-3, rel=TOL)


def test_d2_node_cpu_aggregates_on_one_node() -> None:
    """D2: all 4 GPUs send 160 MB to the CPU, which sums and sends back: the CPU's link
    carries 4 x 160 MB each way, 40 + 40 = 80 ms.  ``[cpu, server]`` with the node CPU
    the server (placement cpu) is that case.  ``[gpu, cpu, server]`` reduce-scatters first
    (7.5 ms), so the CPU's link carries the 160 MB once (4 shards of 40 MB, 10 ms), and
    back: 35 ms."""
    for chain, want in ((["cpu", "server"], 80e-3), (["gpu", "cpu", "server"], 35e-3)):
        summary = run(doc(1, 4, chain, placement="cpu")).summary
        assert summary["iteration_time_s"] == pytest.approx(want, rel=TOL), chain


def test_multi_machine_figure_one_push_per_machine() -> None:
    """The chapter's multi-machine figure, with its numbers: 2 machines of 4 GPUs (160 MB
    each, PCIe 16 GB/s), a central server on a third machine, 100GbE "about 10 GB/s".
    Flat: 8 pushes of 160 MB into the server's 10 GB/s link, 128 ms, and 128 ms of pulls:
    256 ms.  ``[cpu, server]``: 40 ms to the CPU, 32 ms to the server, and back: 144 ms.
    ``[gpu, cpu, server]``: reduce-scatter 7.5 ms, shards to the CPU 10 ms, 2 pushes into
    the server 32 ms; down the same: 99 ms."""
    assert run(doc(3, 4, None)).summary["iteration_time_s"] == pytest.approx(256e-3, rel=TOL)
    for chain, want in ((["gpu", "cpu", "server"], 99e-3), (["cpu", "server"], 144e-3)):
        result = run(doc(3, 4, chain))
        assert result.summary["iteration_time_s"] == pytest.approx(want, rel=TOL), chain


# --------------------------------------------------------------------------- sweep


@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
@pytest.mark.parametrize("nic_Bps", [5e9, 10e9])
def test_node_nic_carries_one_push_per_round(gpus: int, nic_Bps: float) -> None:
    """2 training nodes of g GPUs, a dedicated server, NIC B.  Flat: each node's NIC
    carries g x S up and down, the server's 2g x S each way: 4 g S / B.  ``[cpu,
    server]``: each node's NIC carries S each way; g S / PCIe to gather, 2 S / B into the
    server, and back: 2 (g S / PCIe + 2 S / B) (for g = 1 nothing is gathered: 4 S / B)."""
    flat = run(doc(3, gpus, None, nic_Bps=nic_Bps))
    hier = run(doc(3, gpus, ["cpu", "server"], nic_Bps=nic_Bps))
    gather = gpus * S / PCIE if gpus > 1 else 0.0
    assert flat.summary["iteration_time_s"] == pytest.approx(4 * gpus * S / nic_Bps, rel=TOL)
    assert hier.summary["iteration_time_s"] == pytest.approx(
        2 * (gather + 2 * S / nic_Bps), rel=TOL
    )
    for node in ("rack0/node0", "rack0/node1"):
        up, down = f"{node}/nic->rack0/tor", f"rack0/tor->{node}/nic"
        assert link_bytes(flat, up) == pytest.approx(gpus * S)
        assert link_bytes(hier, up) == pytest.approx(S)
        assert link_bytes(hier, down) == pytest.approx(S)
    assert hier.summary["key_pushes"] == 2 * gpus


def test_one_gpu_per_node_is_flat() -> None:
    """With one GPU per node there is nothing to aggregate: every chain gives the flat
    summary exactly (4 nodes, 3 layers with compute, 2 CPU servers, 2 iterations)."""
    layers = [
        {"name": "a", "params": 3e6, "flops": 2e11},
        {"name": "b", "params": 8e6, "flops": 1e11},
        {"name": "c", "params": 1e6, "flops": 3e11},
    ]
    base = dict(placement="cpu", layers=layers, iterations=2, servers=2)
    flat = without_estimates(run(doc(4, 1, None, **base)).summary)
    for chain in (["cpu", "server"], ["gpu", "server"], ["gpu", "cpu", "server"]):
        assert without_estimates(run(doc(4, 1, chain, **base)).summary) == flat, chain


def without_estimates(summary: dict) -> dict:
    """The summary less the estimates made before the run (``engine.estimated_*``): a
    chain's estimate counts the hops a chain may take, which one GPU per node skips."""
    engine = {k: v for k, v in summary["engine"].items() if not k.startswith("estimated_")}
    return {**summary, "engine": engine}


def test_server_chain_is_flat() -> None:
    """``[server]`` is the flat case."""
    assert run(doc(2, 2, ["server"])).summary == run(doc(2, 2, None)).summary


def test_partitions_pipeline_through_the_hierarchy() -> None:
    """``partition_bytes: 40MB`` cuts the 160 MB key in 4: each node's NIC still carries
    S each way, and the levels overlap, so the round is shorter than unpartitioned
    (99 ms, the multi-machine case)."""
    result = run(doc(3, 4, ["gpu", "cpu", "server"], partition_bytes="40MB"))
    assert link_bytes(result, "rack0/node0/nic->rack0/tor") == pytest.approx(S)
    assert result.summary["iteration_time_s"] < 99e-3 * (1 - TOL)


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("mode", ["backup", "async", "ssp", "geo"])
def test_other_modes_are_refused(mode: str) -> None:
    """Only sync is modelled: the error names the key and the mode."""
    with pytest.raises(ScenarioError, match=rf"data_parallel\.ps\.hierarchy.*{mode}"):
        run(doc(3, 2, ["cpu", "server"], mode=mode))


def test_unknown_chain_is_refused() -> None:
    """A chain that is not one of the four forms is an error at the key."""
    with pytest.raises(ScenarioError, match=r"data_parallel\.ps\.hierarchy"):
        parse_scenario(doc(3, 2, ["cpu", "gpu", "server"]))
