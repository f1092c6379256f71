"""A ring's latency is NCCL's latency model (clustersim/collectives/ring_latency.py).

The reference is NCCL's tuner, ``ncclTopoTuneModel`` in NVIDIA/nccl ``src/graph/tuning.cc``
(tag v2.29.7-1, commit b91894bd; the ring formula the same since v2.23.4-1): a ring
all-reduce, reduce-scatter or all-gather costs ``baseLat + (nsteps - nInterSteps) intraLat +
nInterSteps interLat``.  Its constants are written out here from that file, apart from
clustersim's tables, so that a change to either shows.  The clusters are the catalog's DGX
A100 nodes (NVLink 1 us, PCIe 1 us, NIC 2 us of link latency: none of which NCCL's figures
leave room for) with 1, 2, 4 or 8 GPUs, on NVSwitch or on PCIe alone.
"""

from __future__ import annotations

import pytest

from clustersim.collectives import CollectiveCall, run_collective
from clustersim.collectives.ops import bandwidths
from clustersim.engine import Simulation
from clustersim.scenario import parse_scenario
from clustersim.topology import Topology, build_topology

from .conftest import a100_cluster

US = 1e-6

BASE_US = {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}
"""Ring ``baseLatencies`` (us)."""
RING_HOP_US = {
    "NVLink": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4},
    "PCI": {"LL": 1.0, "LL128": 2.5, "Simple": 5.7},
    "NET": {"LL": 2.7, "LL128": 4.0, "Simple": 14.0},
}
"""Ring ``hwLatencies`` per hardware (us)."""
TREE_NET_US = {"LL": 5.0, "LL128": 8.5, "Simple": 14.0}
"""Tree ``hwLatencies[NET]`` (us): the inter-node step of a ring with one rank per node."""
NET_OVERHEAD_US = {"LL": 1.0, "LL128": 1.0, "Simple": 3.0}
"""``getNetOverhead`` (1 us, Intel x86) per step on several nodes, x 3 with Simple."""
STEPS = {"allreduce": (2, 2), "reducescatter": (1, 1), "allgather": (1, 1)}
"""(nsteps per rank - 1, nInterSteps per node - 1) by operation."""


def nccl_ring_us(op: str, protocol: str, ranks: int, nodes: int, intra: str) -> float:
    """NCCL's ring latency (us) of ``op`` with ``protocol``, from tuning.cc's formula."""
    per_rank, per_node = STEPS[op]
    nsteps = per_rank * (ranks - 1)
    inter_steps = 0 if nodes == 1 else per_node * (nodes - 1)
    intra_us = RING_HOP_US[intra][protocol]
    if nodes > 1:
        intra_us = max(intra_us, NET_OVERHEAD_US[protocol])
    inter_us = TREE_NET_US[protocol] if ranks == nodes else RING_HOP_US["NET"][protocol]
    return BASE_US[protocol] + (nsteps - inter_steps) * intra_us + inter_steps * inter_us


def run_time(
    topo: Topology, op: str, size: float, protocol: str, model: str, channels: int | str = 1
) -> float:
    """Seconds of a ring ``op`` of ``size`` bytes over every GPU of ``topo``."""
    devices = tuple(d for d in topo.devices if topo.device(d).kind == "gpu")
    call = CollectiveCall(op, devices, size, "ring", protocol=protocol)
    sim = Simulation(topo)
    run_collective(sim, call, model=model, channels=channels)
    sim.run()
    return sim.now


@pytest.mark.parametrize("model", ["flow", "analytical"])
@pytest.mark.parametrize("op", list(STEPS))
@pytest.mark.parametrize("protocol", list(BASE_US))
@pytest.mark.parametrize(
    ("nodes", "gpus", "nvlink"),
    [(1, 8, True), (1, 4, False), (2, 8, True), (3, 8, True), (4, 2, True), (8, 1, True),
     (3, 4, False), (8, 8, True)],
)  # fmt: skip
def test_zero_byte_ring_is_nccls_latency(
    model: str, op: str, protocol: str, nodes: int, gpus: int, nvlink: bool
) -> None:
    """A ring of 0 bytes takes NCCL's latency to 1e-9: intra-node steps at the NVLink or
    PCIe figure (at least the net overhead on several nodes), the network steps at the
    ring's network figure (the tree's with one GPU per node), no link latency on top."""
    topo = a100_cluster(nodes, gpus, nvlink)
    expected = nccl_ring_us(op, protocol, nodes * gpus, nodes, "NVLink" if nvlink else "PCI")
    assert run_time(topo, op, 0.0, protocol, model) == pytest.approx(expected * US, rel=1e-9)


@pytest.mark.parametrize(
    ("protocol", "nccl_us"), [("LL", 59.4), ("LL128", 109.8), ("Simple", 207.2)]
)
@pytest.mark.parametrize("nics", [8, 4])
def test_three_a100_nodes_cost_nccls_fifth_of_a_millisecond(
    protocol: str, nccl_us: float, nics: int
) -> None:
    """The case of issue 41: a 0-byte ring all-reduce on 3 DGX A100 nodes (24 ranks, 46
    steps, 4 of them across the network), with NCCL's 8 or 16 channels: NCCL's model gives
    8.4 + 42 x 3.4 + 4 x 14 = 207.2 us with Simple (clustersim gave 1.02 ms: every step
    paid the network hop and the catalog's link latencies)."""
    topo = a100_cluster(3, 8, nics=nics)
    assert run_time(topo, "allreduce", 0.0, protocol, "flow", "auto") == pytest.approx(
        nccl_us * US, rel=1e-9
    )


@pytest.mark.parametrize("model", ["flow", "analytical"])
@pytest.mark.parametrize("nodes", [2, 3, 4])
@pytest.mark.parametrize("size", [2.0**20, 2.0**24, 2.0**28, 2.0**30])
def test_bandwidth_part_is_the_alpha_beta_term(model: str, nodes: int, size: float) -> None:
    """What a size adds to the 0-byte time is the alpha-beta bandwidth term, 2 (n-1)/n S
    over the ring's slowest hop: one channel leaves each node through one HDR NIC at NCCL's
    24 GB/s (0.96 of 200 Gb/s, tests/test_nccl_links.py) with Simple, whose wire is all
    data.  The latency model moves the fixed part only."""
    topo = a100_cluster(nodes, 8)
    n = 8 * nodes
    extra = run_time(topo, "allreduce", size, "Simple", model) - run_time(
        topo, "allreduce", 0.0, "Simple", model
    )
    assert extra == pytest.approx(2 * (n - 1) / n * size / 24e9, rel=1e-6)


def test_one_nic_per_gpu_keeps_nccl_tests_bus_bandwidth() -> None:
    """At 1 GiB on 4 DGX A100 nodes (16 channels) the ring's latency is a small part: its
    bus bandwidth stays within 15% of the 192 GB/s NVIDIA measures (nccl#812), as before."""
    topo = a100_cluster(4, 8)
    size = 2.0**30
    seconds = run_time(topo, "allreduce", size, "Simple", "flow", "auto")
    busbw = bandwidths("allreduce", 32, size, seconds)[1] / 1e9
    assert busbw == pytest.approx(192.0, rel=0.15)


PLUGIN_TIMES = {"LL": 1, "LL128": 1, "Simple": 2}
"""How many times tuning.cc adds ``graphs[a]->latencyInter`` (the network plugin's reported
latency) to ``interLat``: once, and again with Simple ("the flush extra latency")."""


def _plugin_cluster(nodes: int, plugin_us: float) -> Topology:
    node = {"preset": "dgx-a100", "nics": 4, "nic": {"plugin_latency": f"{plugin_us}us"}}
    doc = {
        "name": "plugin",
        "cluster": {"kind": "two_tier", "racks": 1, "nodes_per_rack": nodes, "node": node},
        "workload": {"program": []},
    }
    return build_topology(parse_scenario(doc).cluster)


@pytest.mark.parametrize("model", ["flow", "analytical"])
@pytest.mark.parametrize("op", list(STEPS))
@pytest.mark.parametrize("protocol", list(BASE_US))
@pytest.mark.parametrize(("nodes", "plugin_us"), [(2, 75.0), (3, 35.0), (4, 0.0)])
def test_the_network_plugins_latency_is_added_to_every_network_step(
    model: str, op: str, protocol: str, nodes: int, plugin_us: float
) -> None:
    """``nic.plugin_latency`` (aws-ofi-nccl reports 75 us on p4d, 35 us on p5en) is NCCL's
    ``latencyInter``: every network step of a 0-byte ring pays it on top of the hop figure,
    twice with Simple, and nothing else moves."""
    topo = _plugin_cluster(nodes, plugin_us)
    per_rank, per_node = STEPS[op]
    inter_steps = per_node * (nodes - 1)
    expected = nccl_ring_us(op, protocol, nodes * 8, nodes, "NVLink")
    expected += inter_steps * plugin_us * PLUGIN_TIMES[protocol]
    assert run_time(topo, op, 0.0, protocol, model) == pytest.approx(expected * US, rel=1e-9)


@pytest.mark.parametrize("protocol", list(BASE_US))
def test_a_tree_pays_the_plugins_latency_on_its_network_hops_only(protocol: str) -> None:
    """A 0-byte double-tree all-reduce on two nodes: 75 us of plugin latency adds 75 us
    (x 2 with Simple) for each of the two network hops on its longest path (up, then down)
    and nothing for its NVLink hops."""
    times = []
    for plugin_us in (0.0, 75.0):
        topo = _plugin_cluster(2, plugin_us)
        devices = tuple(d for d in topo.devices if topo.device(d).kind == "gpu")
        sim = Simulation(topo)
        call = CollectiveCall("allreduce", devices, 0.0, "double_tree", protocol=protocol)
        run_collective(sim, call)
        sim.run()
        times.append(sim.now)
    extra = 2 * 75.0 * PLUGIN_TIMES[protocol] * US
    assert times[1] - times[0] == pytest.approx(extra, rel=1e-9)


def test_validate_says_the_network_plugins_latency(tmp_path, capsys) -> None:
    """``clustersim validate`` names a nonzero plugin latency beside the cluster, and says
    nothing of it at the default 0."""
    import yaml

    from clustersim.cli import main

    for plugin, said in (("75us", True), ("0us", False)):
        node = {"preset": "dgx-a100", "nic": {"plugin_latency": plugin}}
        cluster = {"kind": "two_tier", "racks": 1, "nodes_per_rack": 2, "node": node}
        doc = {
            "name": "p",
            "cluster": cluster,
            "workload": {"collective": "allreduce", "bytes": "1MB"},
        }
        file = tmp_path / f"p{plugin}.yaml"
        file.write_text(yaml.safe_dump(doc))
        assert main(["validate", str(file)]) == 0
        out = capsys.readouterr().out
        assert ("network plugin latency 75 us per network step" in out) == said
