"""NCCL's protocols (LL, LL128, Simple) and the tuner's choice (``algorithm: auto``,
``protocol: auto``): hand formulas, NCCL's own latency model, both network models."""

from __future__ import annotations

import pytest

from clustersim.collectives import CollectiveCall, analytical_time, run_collective
from clustersim.collectives.auto import choose
from clustersim.collectives.protocol import PROTOCOLS, link_kind
from clustersim.engine import Simulation
from clustersim.errors import ScenarioError
from clustersim.scenario import parse_scenario
from clustersim.topology import Topology, build_topology

from .conftest import flat_topology

BANDWIDTH = 25e9  # bytes/s per link of the flat clusters
LINK_LATENCY = 1e-6  # seconds per link; a switch route crosses two
US = 1e-6


def flow(call: CollectiveCall, topo: Topology) -> float:
    """Seconds of the flow-level run of ``call`` alone on ``topo``."""
    sim = Simulation(topo)
    run_collective(sim, call)
    sim.run()
    return sim.now


def switch_call(n: int, size: float, algo: str = "ring", protocol: str | None = None):
    topo = flat_topology("switch", n)
    call = CollectiveCall("allreduce", tuple(topo.devices), size, algo, protocol=protocol)
    return call, topo


def dgx(nodes: int) -> Topology:
    """DGX A100-like nodes (8 GPUs on NVSwitch, 8 NICs of 200 Gb/s), zero link latency."""
    doc = {
        "name": "dgx",
        "cluster": {
            "kind": "two_tier",
            "racks": 1,
            "nodes_per_rack": nodes,
            "node": {
                "gpus": 8,
                "nics": 8,
                "nvlink": {"bandwidth": "300GB/s"},
                "pcie": {"bandwidth": "32GB/s"},
                "nic": {"bandwidth": "200Gb/s"},
            },
        },
        "workload": {"program": []},
    }
    return build_topology(parse_scenario(doc).cluster)


def gpus(topo: Topology) -> tuple[str, ...]:
    return tuple(d for d in topo.devices if topo.device(d).kind == "gpu")


def test_wire_efficiency_from_the_line_formats() -> None:
    """LL: 8 data bytes per 16-byte line; LL128: 120 per 128; Simple: all data."""
    assert PROTOCOLS["LL"].efficiency == 0.5
    assert PROTOCOLS["LL128"].efficiency == 120 / 128
    assert PROTOCOLS["Simple"].efficiency == 1.0


NCCL_RING_BASE_US = {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}
"""NCCL's ring base latencies (tuning.cc ``baseLatencies``, v2.29.7-1)."""
NCCL_TREE_NET_US = {"LL": 5.0, "LL128": 8.5, "Simple": 14.0}
"""NCCL's tree network hop latencies (tuning.cc ``hwLatencies[NET][TREE]``, v2.29.7-1): a
ring with one rank per node takes them ("with ppn=1 latencies are fully exposed")."""


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
@pytest.mark.parametrize("n", [2, 4, 8, 16])
@pytest.mark.parametrize("size", [8.0, 1e6, 6.4e7])
def test_ring_with_protocol_is_the_alpha_beta_formula(protocol: str, n: int, size: float) -> None:
    """Ring all-reduce on a switch with a protocol = NCCL's ring latency + 2 (n-1) S/n /
    efficiency beta, in both models: a flat switch is a network of one rank per node, so
    NCCL's latency is base + 2 (n-1) tree network hops (tuning.cc), and the links' own
    latency is not added on top of NCCL's hop figure."""
    p = PROTOCOLS[protocol]
    call, topo = switch_call(n, size, protocol=protocol)
    latency = (NCCL_RING_BASE_US[protocol] + 2 * (n - 1) * NCCL_TREE_NET_US[protocol]) * US
    expected = latency + 2 * (n - 1) * size / n / p.efficiency / BANDWIDTH
    assert flow(call, topo) == pytest.approx(expected, rel=1e-9)
    assert analytical_time(call, topo) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize(("nodes", "nccl_us"), [(2, 25.2), (4, 35.2), (8, 45.2)])
def test_tree_ll_latency_is_nccls_model(nodes: int, nccl_us: float) -> None:
    """8 B double-tree all-reduce with LL on DGX-like nodes = NCCL 2.21's Tree/LL latency
    6.8 + 2 (7 x 0.6 + log2(N) x 5.0) us: a chain of 7 NVLink hops in each node, log2 N
    network hops across (NVIDIA/nccl#1453 logs 25.2 us for this case)."""
    topo = dgx(nodes)
    call = CollectiveCall("allreduce", gpus(topo), 8.0, "double_tree", protocol="LL")
    assert flow(call, topo) == pytest.approx(nccl_us * US, rel=1e-3)
    assert analytical_time(call, topo) == pytest.approx(nccl_us * US, rel=1e-3)


def test_link_kinds() -> None:
    """Routes through a NIC are NET, inside a node over NVSwitch NVLink, flat switch NET."""
    topo = dgx(2)
    a, b, c = "rack0/node0/gpu0", "rack0/node0/gpu1", "rack0/node1/gpu0"
    assert link_kind(topo.routes(a, c)[0]) == "NET"
    assert link_kind(topo.routes(a, b)[0]) == "NVLink"
    flat = flat_topology("switch", 2)
    assert link_kind(flat.routes(*flat.devices)[0]) == "NET"


@pytest.mark.parametrize("n", [16, 64, 256])
def test_auto_picks_tree_small_and_ring_large(n: int) -> None:
    """Latency-bound sizes go to the double tree (2 log2 n hops against 2 (n-1)), the
    bandwidth-bound to the ring (2 (n-1)/n S beta against the double tree's 2 S beta
    plus its fill)."""
    small, topo = switch_call(n, 8.0, "auto")
    large, _ = switch_call(n, 1e9, "auto")
    assert choose(small, topo) == ("double_tree", None)
    assert choose(large, topo) == ("ring", None)


@pytest.mark.parametrize("n", [8, 64])
def test_auto_is_the_fastest_candidate(n: int) -> None:
    """At every size auto's time is the smaller of ring's and double tree's, in both models."""
    for size in [8.0, 6.4e4, 1e6, 1.6e7, 2.56e8]:
        auto, topo = switch_call(n, size, "auto")
        ring, _ = switch_call(n, size, "ring")
        tree, _ = switch_call(n, size, "double_tree")
        best = min(analytical_time(ring, topo), analytical_time(tree, topo))
        assert analytical_time(auto, topo) == pytest.approx(best, rel=1e-12)
        name, _protocol = choose(auto, topo)
        chosen, _ = switch_call(n, size, name)
        assert flow(auto, topo) == pytest.approx(flow(chosen, topo), rel=1e-12)


def test_protocol_auto_trades_latency_for_bandwidth() -> None:
    """Ring on 16 ranks: LL (least latency) for small messages, Simple (full bandwidth)
    for large ones, LL128 between (its latency is high but its wire nearly full)."""
    picks = []
    for size in [8.0, 4e6, 1e9]:
        call, topo = switch_call(16, size, "ring", "auto")
        picks.append(choose(call, topo)[1])
    assert picks[0] == "LL"
    assert picks[-1] == "Simple"


def test_unknown_protocol_is_refused_with_the_choices() -> None:
    call, topo = switch_call(4, 8.0, "ring", "LL256")
    with pytest.raises(ScenarioError, match="LL128"):
        analytical_time(call, topo)


def test_network_protocol_key_prices_the_collective_workload() -> None:
    """``network.protocol: LL`` makes a scenario's ring all-reduce pay LL's costs."""
    from clustersim.api import simulate

    doc = {
        "name": "p",
        "cluster": {"kind": "switch", "devices": 4, "link": {"bandwidth": "25GB/s"}},
        "network": {"protocol": "LL"},
        "workload": {"collective": "allreduce", "bytes": "4MB"},
    }
    summary = simulate(parse_scenario(doc)).summary
    p = PROTOCOLS["LL"]
    latency = (NCCL_RING_BASE_US["LL"] + 6 * NCCL_TREE_NET_US["LL"]) * US
    expected = latency + 6 * 1e6 / p.efficiency / 25e9
    assert summary["time_s"] == pytest.approx(expected, rel=1e-9)


def test_bad_network_protocol_names_the_key() -> None:
    doc = {
        "name": "p",
        "cluster": {"kind": "switch", "devices": 4},
        "network": {"protocol": "fast"},
        "workload": {"collective": "allreduce", "bytes": "4MB"},
    }
    with pytest.raises(ScenarioError, match="network.protocol"):
        parse_scenario(doc)


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        ("broadcast", "ring"),
        ("reduce", "ring"),
        ("allgather", "ring"),
        ("reducescatter", "ring"),
        ("alltoall", "direct"),
        ("gather", "direct"),
        ("scatter", "direct"),
    ],
)
def test_auto_uses_nccls_algorithm_per_operation(op: str, expected: str) -> None:
    """NCCL runs broadcast, reduce, all-gather and reduce-scatter on rings and builds
    all-to-all, gather and scatter from point-to-point sends: auto does the same."""
    topo = flat_topology("switch", 8)
    for size in (8.0, 1e6, 1e9):
        call = CollectiveCall(op, tuple(topo.devices), size, "auto")
        assert choose(call, topo) == (expected, None)


@pytest.mark.parametrize(("size", "chosen"), [("8B", "double_tree/LL"), ("1GB", "ring/Simple")])
def test_collective_summary_says_what_ran(size: str, chosen: str) -> None:
    """A collective workload with ``algorithm: auto`` and ``network.protocol: auto``: the
    summary's ``chosen`` names the algorithm and protocol that ran, and its time is theirs."""
    from clustersim.api import simulate

    doc = {
        "name": "auto",
        "cluster": {
            "kind": "switch",
            "devices": 64,
            "link": {"bandwidth": "25GB/s", "latency": "1us"},
        },
        "network": {"protocol": "auto"},
        "workload": {"collective": "allreduce", "algorithm": "auto", "bytes": size},
    }
    summary = simulate(parse_scenario(doc)).summary
    assert summary["algorithm"] == "auto" and summary["chosen"] == chosen
    algorithm, protocol = chosen.split("/")
    doc["workload"]["algorithm"] = algorithm
    doc["network"]["protocol"] = protocol
    assert simulate(parse_scenario(doc)).summary["time_s"] == pytest.approx(
        summary["time_s"], rel=1e-12
    )
