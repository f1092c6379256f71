"""The node-local step of ``data_parallel.ps.hierarchy`` as a collective (issue 33, item 4).

A node's GPUs reduce-scatter each key and send their summed shards up, over every GPU's
link, instead of sending whole gradients onto one GPU's link
(:mod:`clustersim.strategies.parameter_server.hierarchy`).  Clusters: racks of PCIe-only
nodes (no NVLink) of ``g`` GPUs and a CPU on one PCIe switch (``nics: 2``: two switches of
``g / 2`` GPUs, each with its NIC, joined by the PCIe root where the CPU sits, as the
scenario builder makes them), PCIe 3.0 x16 at 16 GB/s each way (BytePS's "128 Gbps
theoretical"; d2l's "16 GB/s"), a 100 Gb/s NIC (12.5 GB/s), one dedicated server (the
CPU of the last node), memory so fast that sums and updates cost under 0.1% of a round,
one fp32 layer of ``S`` bytes of gradients, one iteration.
"""

from __future__ import annotations

from typing import Any

import pytest

from clustersim import simulate
from clustersim.scenario import parse_scenario

PCIE = 16e9  # bytes/s each way, PCIe 3.0 x16 (BytePS OSDI'20 section 4.2.1: 128 Gbps)
NIC = 12.5e9  # bytes/s, 100 Gb/s
SIZES = (100e6, 500e6, 2e9)  # bytes of gradients per GPU: "large models"
TOL = 1e-3  # alpha-beta against the flow-level network: exact up to the near-free sums
PAPER_TOL = 0.15  # the tolerance against BytePS's published figure


def doc(
    nodes: int,
    gpus: int,
    size: float,
    hierarchy: list[str] | None,
    *,
    nics: int = 1,
    placement: str = "dedicated",
    pcie_latency_s: float = 0.0,
    nic_latency_s: float = 0.0,
    **ps: Any,
) -> dict[str, Any]:
    """``nodes`` training nodes of ``gpus`` GPUs (and, dedicated, one server node)."""
    spec: dict[str, Any] = {"placement": placement, "servers": 1, **ps}
    if hierarchy is not None:
        spec["hierarchy"] = hierarchy
    return {
        "name": "ps-hierarchy-collective",
        "cluster": {
            "racks": 1,
            "nodes_per_rack": nodes + (placement == "dedicated"),
            "node": {
                "gpus": gpus,
                "nics": nics,
                "gpu": {"flops": "100TFLOPS", "memory_bandwidth": "1000TB/s"},
                "cpu": {"memory_bandwidth": "1000TB/s"},
                "pcie": {
                    "bandwidth": f"{PCIE / 1e9:g}GB/s",
                    "latency": f"{pcie_latency_s * 1e6:g}us",
                },
                "nic": {"bandwidth": f"{NIC / 1e9:g}GB/s", "latency": f"{nic_latency_s * 1e6:g}us"},
            },
        },
        "model": {"layers": [{"name": "fc", "params": size / 4, "flops": 0}]},
        "training": {
            "global_batch": nodes * gpus,
            "iterations": 1,
            "precision": "fp32",
            "optimizer": "sgd",
        },
        "data_parallel": {"sync": "ps", "ps": spec},
        "network": {"protocol": "none"},  # line rates: the textbook's alpha-beta
    }


def run(d: dict[str, Any]) -> Any:
    return simulate(parse_scenario(d))


def seconds(d: dict[str, Any]) -> float:
    return run(d).summary["iteration_time_s"]


def link_bytes(result: Any, name: str) -> float:
    return next((row["bytes"] for row in result.links if row["link"] == name), 0.0)


# --------------------------------------------------------------------------- alpha-beta


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("gpus", [2, 4, 8])
@pytest.mark.parametrize("nodes", [1, 2])
@pytest.mark.parametrize("cpu", [False, True])
def test_round_is_reduce_scatter_plus_shard_pushes(
    size: float, gpus: int, nodes: int, cpu: bool
) -> None:
    """The round is the alpha-beta sum of its stages, up and down alike (``a_p`` = 1 us
    per PCIe link, ``a_n`` = 2 us per NIC link):

    * ring reduce-scatter: ``(g - 1)(2 a_p + S / (g P))`` (a step crosses two PCIe links);
    * ``[gpu, cpu, server]``: the shards to the CPU, ``S`` in all over its link:
      ``2 a_p + S / P``, then its push ``4 a_p + 2 a_n + N S / B``;
    * ``[gpu, server]``: the shards pushed by their GPUs, the node's ``S`` through its
      NIC and ``N`` nodes' ``S`` into the server's: ``4 a_p + 2 a_n + N S / B``.
    """
    a_p, a_n = 1e-6, 2e-6
    chain = ["gpu", "cpu", "server"] if cpu else ["gpu", "server"]
    d = doc(nodes, gpus, size, chain, pcie_latency_s=a_p, nic_latency_s=a_n)
    ring = (gpus - 1) * (2 * a_p + size / (gpus * PCIE))
    copy = 2 * a_p + size / PCIE if cpu else 0.0
    push = 4 * a_p + 2 * a_n + nodes * size / NIC
    assert seconds(d) == pytest.approx(2 * (ring + copy + push), rel=TOL)


@pytest.mark.parametrize("gpus", [4, 8])
def test_node_collectives_are_priced_as_every_nccl_collective(gpus: int) -> None:
    """The reduce-scatter and all-gather follow ``network``: under either network model,
    with ``protocol: none`` a ring of ``(g - 1) S / (g P)``, and with the default
    ``protocol: auto`` at the bandwidth NCCL reaches on PCIe, 12 of 16 GB/s
    (``clustersim/collectives/bus.py``, NCCL's ``kvDictPciGen``): ``(g - 1) S / (0.75 g P)``
    within 0.5% (NCCL's per-step latencies, microseconds).  The flow-level and analytical
    models give the round the same time."""
    size = 500e6
    for protocol, share, rel in (("none", 1.0, TOL), ("auto", 0.75, 5e-3)):
        times = []
        for model in ("flow", "analytical"):
            d = doc(1, gpus, size, ["gpu", "server"])
            d["network"] = {"model": model, "protocol": protocol}
            result = run(d)
            want = (gpus - 1) * size / (gpus * share * PCIE)
            for op in ("ps_reducescatter", "ps_allgather"):
                rows = [r for r in result.records if r.op == op and r.kind == "collective"]
                assert len(rows) == gpus
                assert all(r.end_s - r.start_s == pytest.approx(want, rel=rel) for r in rows)
            times.append(result.summary["iteration_time_s"])
        assert times[1] == pytest.approx(times[0], rel=1e-6), protocol


# --------------------------------------------------------------------------- vs flat


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("gpus", [2, 4, 8])
@pytest.mark.parametrize("nodes", [1, 2])
def test_hierarchy_is_never_slower_than_the_flat_push(size: float, gpus: int, nodes: int) -> None:
    """On PCIe-only nodes, for 100 MB to 2 GB of gradients, 2, 4 and 8 GPUs a node and 1
    or 2 nodes, no hierarchy is slower than every GPU pushing on its own (``2 N g S /
    B``): ``[gpu, server]`` as it is, and ``[gpu, cpu, server]`` pipelined as BytePS
    pipelines it (``partition_bytes``, here 16 partitions a key).  The old model (every
    gradient onto GPU 0's link) took ``2 ((g - 1) S / P + S / P + N S / B)``: slower
    than flat with 2 GPUs on one node.  Unpipelined, the CPU level adds ``S / P`` of
    store-and-forward each way (test above): it still wins with 4 or 8 GPUs a node or 2
    nodes, and loses with 2 GPUs on one node (``2 (S / 2P + S / P + S / B)`` against
    ``4 S / B``)."""
    flat = seconds(doc(nodes, gpus, size, None))
    assert flat == pytest.approx(2 * nodes * gpus * size / NIC, rel=TOL)
    gpu_server = seconds(doc(nodes, gpus, size, ["gpu", "server"]))
    partitions = f"{size / 16 / 1e6:g}MB"
    byteps = seconds(doc(nodes, gpus, size, ["gpu", "cpu", "server"], partition_bytes=partitions))
    assert gpu_server < flat
    assert byteps < flat
    relay = seconds(doc(nodes, gpus, size, ["gpu", "cpu", "server"]))
    assert (relay < flat) == (gpus >= 4 or nodes == 2)
    old = 2 * ((gpus - 1) * size / PCIE + size / PCIE + nodes * size / NIC)
    assert byteps < old and gpu_server < old


@pytest.mark.parametrize("size", SIZES)
def test_two_switch_node_is_never_slower_than_flat(size: float) -> None:
    """BytePS's PCIe-only machine: 8 GPUs under two PCIe switches (``nics: 2``, a NIC on
    each); 2 such nodes.  Flat, each NIC carries 4 pushes: ``2 x 2 x 8 S / B`` at the
    server.  Every hierarchy is faster, with and without partitions."""
    flat = seconds(doc(2, 8, size, None, nics=2))
    assert flat == pytest.approx(2 * 2 * 8 * size / NIC, rel=TOL)
    for chain in (["gpu", "server"], ["gpu", "cpu", "server"]):
        for extra in ({}, {"partition_bytes": f"{size / 16 / 1e6:g}MB"}):
            assert seconds(doc(2, 8, size, chain, nics=2, **extra)) < flat, (chain, extra)


# --------------------------------------------------------------------------- BytePS


def allreduce_doc(gpus: int, size: float) -> dict[str, Any]:
    """The same node running a data-parallel ring all-reduce of ``size`` bytes (MPI/NCCL's
    ring), its data bytes only (``network.protocol: none`` as in :func:`doc`: no NCCL
    wire overhead)."""
    d = doc(1, gpus, size, None, nics=2, placement="cpu")
    d["data_parallel"] = {"sync": "allreduce", "allreduce": {"algorithm": "ring", "bucket": "8GB"}}
    return d


@pytest.mark.parametrize("size", SIZES)
def test_byteps_cpu_assisted_aggregation_crosses_the_root_once(size: float) -> None:
    """BytePS (Jiang et al., "A Unified Architecture for Accelerating Distributed DNN
    Training in Heterogeneous GPU/CPU Clusters", OSDI 2020, section 4.2.1 "PCIe-only
    Topology" and its figures of the 8-GPU machine): the bottleneck is the link between a
    PCIe switch and its CPU (P0-CPU0).  An 8-GPU ring all-reduce (MPI/NCCL) puts
    ``7M/4`` on it; CPU-assisted aggregation -- reduce-scatter among the 4 GPUs of each
    switch, each copies its ``M/4`` to host memory -- puts ``4 x M/4 = M``.  Both, and their
    ratio 1.75, within 15%: measured on the switch-to-root link (``pcie0 -> root``) of
    ``[gpu, cpu, server]`` (the node CPU the server) and of the data-parallel ring
    all-reduce on the same node.  (The paper publishes no intra-node time we could
    source; see the README.)"""
    root = "rack0/node0/pcie0->rack0/node0/root"
    hier = run(doc(1, 8, size, ["gpu", "cpu", "server"], nics=2, placement="cpu"))
    ring = run(allreduce_doc(8, size))
    assert link_bytes(hier, root) == pytest.approx(size, rel=PAPER_TOL)
    assert link_bytes(ring, root) == pytest.approx(7 * size / 4, rel=PAPER_TOL)
    ratio = link_bytes(ring, root) / link_bytes(hier, root)
    assert ratio == pytest.approx(7 / 4, rel=PAPER_TOL)
    # the copies go down the same way: M on root -> pcie0 too
    assert link_bytes(hier, "rack0/node0/root->rack0/node0/pcie0") == pytest.approx(size)


def test_two_switch_node_reduce_scatters_per_switch() -> None:
    """On the two-switch node each switch's 4 GPUs reduce-scatter on their own (8
    ``ps_reducescatter`` rows of 4-GPU rings, ``3/4 x S / P`` each), the CPU sums the two
    partial sums (one ``ps_local_aggregate`` of ``2 S``), and all-gathers follow the pull.
    Without a CPU level (``[gpu, server]``) all 8 GPUs reduce-scatter together and every
    GPU pushes its ``S / 8`` shard through its own switch's NIC: each NIC carries ``S / 2``."""
    size = 160e6
    result = run(doc(1, 8, size, ["gpu", "cpu", "server"], nics=2))
    rows = [r for r in result.records if r.op == "ps_reducescatter"]
    assert len(rows) == 8
    assert all(r.end_s - r.start_s == pytest.approx(0.75 * size / PCIE) for r in rows)
    sums = [r for r in result.records if r.op == "ps_local_aggregate"]
    assert [r.bytes for r in sums] == [pytest.approx(2 * size)]
    assert sum(r.op == "ps_allgather" for r in result.records) == 8
    flat_nics = run(doc(1, 8, size, ["gpu", "server"], nics=2))
    for j in (0, 1):
        nic = f"rack0/node0/nic{j}->rack0/tor"
        assert link_bytes(flat_nics, nic) == pytest.approx(size / 2)
