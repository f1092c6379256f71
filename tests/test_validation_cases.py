"""Validation cases D1-D3 and N1-N4 of shared/validation/cases.md.

Each case runs from its scenario file in scenarios/validation/ through the
CLI (as a user would) and the API, and is swept over sizes, device counts and
bandwidths against the textbook formula.
"""

from __future__ import annotations

import json

import pytest

from clustersim import parse_scenario, simulate
from clustersim.cli import main

from .conftest import SCENARIOS, compute, one_node, transfer

VALIDATION = SCENARIOS / "validation"
GB = 1e9
MB = 1e6


def run_cli(tmp_path, name: str) -> dict:
    """Run scenarios/validation/NAME through `clustersim run` and read summary.json."""
    out = tmp_path / name
    assert main(["run", str(VALIDATION / name), "-o", str(out), "--quiet"]) == 0
    return json.loads((out / "summary.json").read_text())


@pytest.mark.parametrize(
    ("name", "expected_s", "rel"),
    [
        ("d1_one_gpu_aggregates.yaml", 0.060, 1e-3),
        ("d2_cpu_aggregates.yaml", 0.080, 1e-3),
        ("d3_sharded_aggregation.yaml", 0.015, 1e-3),
        ("n1_oversubscribed_uplink.yaml", 1.6, 5e-3),
        ("n1_full_bisection.yaml", 0.8, 5e-3),
        ("n2_one_link.yaml", 40.0, 1e-3),
        ("n3_gpt3_gradients.yaml", 56.0, 1e-9),
        ("n4_alpha_beta.yaml", 45e-6, 1e-12),
    ],
)
def test_shipped_validation_scenario(tmp_path, name: str, expected_s: float, rel: float) -> None:
    """Each shipped validation scenario reproduces its case's time through the CLI."""
    summary = run_cli(tmp_path, name)
    assert summary["makespan_s"] == pytest.approx(expected_s, rel=rel)


def test_d1_phases_are_30ms_each(tmp_path) -> None:
    """D1: gathering into GPU 0 takes 30 ms and sending back another 30 ms."""
    ops = run_cli(tmp_path, "d1_one_gpu_aggregates.yaml")["operations"]
    assert max(ops[f"in{i}"]["end_s"] for i in (1, 2, 3)) == pytest.approx(0.030, rel=1e-3)
    assert ops["out1"]["start_s"] == pytest.approx(0.030, rel=1e-3)


def test_d3_each_phase_is_7_5ms(tmp_path) -> None:
    """D3: the reduce-scatter-like phase ends at 7.5 ms, the all-gather-like at 15 ms."""
    ops = run_cli(tmp_path, "d3_sharded_aggregation.yaml")["operations"]
    assert ops["sum0"]["end_s"] == pytest.approx(0.0075, rel=1e-3)


# -- sweeps of the same formulas ------------------------------------------------


def gpu(i: int) -> str:
    return f"rack0/node0/gpu{i}"


def gather_to_one(n: int, size: str, pcie: str, root: str) -> dict:
    """Every GPU other than ``root`` sends to root, root sums and sends back (D1/D2 shape)."""
    senders = [gpu(i) for i in range(n) if gpu(i) != root]
    program = [transfer(f"in{i}", s, root, size) for i, s in enumerate(senders)]
    program.append(compute("sum", root, after=[f"in{i}" for i in range(len(senders))], flops=0))
    program += [transfer(f"out{i}", root, s, size, after=["sum"]) for i, s in enumerate(senders)]
    return one_node(n, pcie, program)


@pytest.mark.parametrize("n", [2, 3, 4, 8])
@pytest.mark.parametrize(("size", "size_b"), [("1MB", 1e6), ("160MB", 160e6), ("1GiB", 2**30)])
@pytest.mark.parametrize(("pcie", "bw"), [("16GB/s", 16e9), ("100Gb/s", 12.5e9)])
def test_d1_sweep_gpu_root(n: int, size: str, size_b: float, pcie: str, bw: float) -> None:
    """D1 generalised: 2 (n - 1) S / B when GPU 0 aggregates for n GPUs."""
    result = simulate(parse_scenario(gather_to_one(n, size, pcie, gpu(0))))
    assert result.makespan_s == pytest.approx(2 * (n - 1) * size_b / bw, rel=1e-9)


@pytest.mark.parametrize("n", [1, 2, 4, 8])
@pytest.mark.parametrize(("pcie", "bw"), [("16GB/s", 16e9), ("32GB/s", 32e9)])
def test_d2_sweep_cpu_root(n: int, pcie: str, bw: float) -> None:
    """D2 generalised: 2 n S / B when the CPU aggregates for n GPUs."""
    doc = gather_to_one(n, "160MB", pcie, "rack0/node0/cpu")
    assert simulate(parse_scenario(doc)).makespan_s == pytest.approx(2 * n * 160e6 / bw, rel=1e-9)


def sharded_aggregation(n: int, size_b: float, pcie: str) -> dict:
    """D3 shape: GPU i aggregates part i of n, then sends it to every other GPU."""
    part = f"{size_b / n}B"
    program = [
        transfer(f"p{j}to{i}", gpu(j), gpu(i), part) for i in range(n) for j in range(n) if i != j
    ]
    program += [
        compute(f"sum{i}", gpu(i), after=[f"p{j}to{i}" for j in range(n) if j != i], flops=0)
        for i in range(n)
    ]
    program += [
        transfer(f"b{i}to{j}", gpu(i), gpu(j), part, after=[f"sum{i}"])
        for i in range(n)
        for j in range(n)
        if i != j
    ]
    return one_node(n, pcie, program)


@pytest.mark.parametrize("n", [2, 3, 4, 6, 8])
@pytest.mark.parametrize("size_b", [40e6, 160e6, 1e9])
def test_d3_sweep(n: int, size_b: float) -> None:
    """D3 generalised: each phase moves (n - 1) S / n over each GPU's link: 2 (n-1)/n S / B."""
    result = simulate(parse_scenario(sharded_aggregation(n, size_b, "16GB/s")))
    assert result.makespan_s == pytest.approx(2 * (n - 1) / n * size_b / 16e9, rel=1e-9)


def two_racks(nodes_per_rack: int, nic: str, uplink: dict, size: str, pairs: int) -> dict:
    """N1 shape: ``pairs`` nodes of rack 0 each send ``size`` to a node of rack 1."""
    program = [
        transfer(f"f{i}", f"rack0/node{i}/cpu", f"rack1/node{i}/cpu", size) for i in range(pairs)
    ]
    return {
        "name": "two-racks",
        "cluster": {
            "racks": 2,
            "nodes_per_rack": nodes_per_rack,
            "node": {"gpus": 0, "pcie": {"bandwidth": "64GB/s"}, "nic": {"bandwidth": nic}},
            "rack_uplink": uplink,
        },
        "workload": {"program": program},
    }


@pytest.mark.parametrize("ratio", [1, 2, 4, 8])
@pytest.mark.parametrize("nodes", [2, 4, 8])
def test_n1_oversubscription_sweep(ratio: int, nodes: int) -> None:
    """N1 generalised: k flows through an uplink of k x NIC / R each get min(NIC, NIC / R)."""
    nic_bps = 10e9 / 8
    doc = two_racks(nodes, "10Gb/s", {"oversubscription": ratio}, "1GB", pairs=nodes)
    uplink_bps = nodes * nic_bps / ratio
    per_flow = min(nic_bps, uplink_bps / nodes)
    assert simulate(parse_scenario(doc)).makespan_s == pytest.approx(1e9 / per_flow, rel=1e-9)


@pytest.mark.parametrize(
    ("uplink", "expected_s"), [("10Gb/s", 1.6), ("20Gb/s", 0.8), ("5Gb/s", 3.2)]
)
def test_n1_uplink_as_bandwidth(uplink: str, expected_s: float) -> None:
    """N1 with the rack uplink given as a bandwidth instead of a ratio."""
    doc = two_racks(2, "10Gb/s", {"bandwidth": uplink}, "1GB", pairs=2)
    assert simulate(parse_scenario(doc)).makespan_s == pytest.approx(expected_s, rel=1e-9)


@pytest.mark.parametrize(
    ("size", "size_b"), [("1TB", 1e12), ("8Tb", 1e12), ("1TiB", 2**40), ("100GB", 1e11)]
)
@pytest.mark.parametrize(("bw", "bw_Bps"), [("200Gb/s", 25e9), ("400Gb/s", 50e9), ("25GB/s", 25e9)])
def test_n2_bulk_transfer_sweep(size: str, size_b: float, bw: str, bw_Bps: float) -> None:
    """N2 generalised: S bytes over one link of bandwidth B take S / B."""
    doc = {
        "name": "n2",
        "cluster": {
            "kind": "custom",
            "devices": [{"name": "a", "kind": "cpu"}, {"name": "b", "kind": "cpu"}],
            "links": [{"src": "a", "dst": "b", "bandwidth": bw}],
        },
        "workload": {"program": [transfer("bulk", "a", "b", size)]},
    }
    assert simulate(parse_scenario(doc)).makespan_s == pytest.approx(size_b / bw_Bps, rel=1e-12)


def test_n3_bytes_crossing_the_network(tmp_path) -> None:
    """N3: 175e9 fp32 gradients are 700 GB; two replicas reducing to a third move 1.4 TB."""
    gradient_bytes = 175e9 * 4
    assert gradient_bytes == 700e9
    result = simulate(VALIDATION / "n3_gpt3_gradients.yaml")
    into_root = {row["link"]: row["bytes"] for row in result.links}["rack0/tor->rack0/node0/nic"]
    assert into_root == 2 * gradient_bytes
    crossing = sum(row["bytes"] for row in result.links if row["link"].endswith("->rack0/tor"))
    assert crossing >= 1.4e12


@pytest.mark.parametrize("latency_us", [0.0, 0.5, 2.5, 10.0])
@pytest.mark.parametrize("size_b", [0, 1, 4096, 1e6, 1e9])
@pytest.mark.parametrize("bw", [1e9, 25e9, 300e9])
def test_n4_alpha_beta_sweep(latency_us: float, size_b: float, bw: float) -> None:
    """N4: a message of l bytes takes a + l / B exactly (two hops through a switch)."""
    doc = {
        "name": "n4",
        "cluster": {
            "kind": "switch",
            "devices": 2,
            "link": {"bandwidth": f"{bw}B/s", "latency": f"{latency_us}us"},
        },
        "workload": {"program": [transfer("m", "gpu0", "gpu1", f"{size_b}B")]},
    }
    expected = 2 * latency_us * 1e-6 + size_b / bw
    assert simulate(parse_scenario(doc)).makespan_s == pytest.approx(expected, rel=1e-12, abs=1e-18)


@pytest.mark.parametrize(
    ("name", "uplink_Bps"),
    [("n1_oversubscribed_uplink.yaml", 1.25e9), ("n1_full_bisection.yaml", 2.5e9)],
)
def test_n1_uplink_statistics(name: str, uplink_Bps: float) -> None:
    """N1: the rack uplink carries 2 GB with 2 concurrent flows and is full the whole run."""
    result = simulate(VALIDATION / name)
    uplink = {row["link"]: row for row in result.links}["rack0/tor->spine0"]
    assert uplink["bytes"] == 2e9
    assert uplink["peak_flows"] == 2
    assert uplink["busy_s"] == pytest.approx(result.makespan_s, rel=1e-12)
    assert uplink["bandwidth_Bps"] == uplink_Bps
    assert uplink["utilisation"] == pytest.approx(2e9 / (uplink_Bps * result.makespan_s), rel=1e-12)
    assert result.summary["busiest_links"][0]["utilisation"] == pytest.approx(1.0, rel=1e-9)
