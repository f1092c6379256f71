"""The PS-vs-ring question in bytes: BytePS's bandwidth-optimality argument.

Jiang et al. (OSDI 2020, section 3): in an all-reduce each of n workers sends and
receives 2 (n - 1) M / n bytes per iteration for a model of M bytes; with parameter
servers a worker sends M (its pushes) and receives M (its pulls), whatever n, and the k
servers together receive and send n M.  So with servers whose NICs add up to the
workers' (k B_s >= n B) a PS moves less per worker NIC than any all-reduce for n > 2
(equal at n = 2), and its communication time max(M / B, n M / (k B_s)) is below the
ring's 2 (n - 1) M / (n B) (the time law is held in ``test_ps_pipeline``).

Here the bytes are read off the links after the run: each worker node's NIC uplink
(what it sends) and downlink (what it receives), for a PS with as many dedicated CPU
servers as workers and for ring all-reduce on the same workers.  Clusters are those of
``test_parameter_server``: one GPU per node, one rack.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import yaml

from clustersim.api import simulate
from clustersim.scenario import parse_scenario

from .conftest import SCENARIOS
from .shared_runs import shared_json
from .test_parameter_server import layer, ps_doc, run_strategy


def nic_bytes(sim, nodes: range) -> list[tuple[float, float]]:
    """(sent, received) bytes on each node's NIC link, for ``rack0/node{i}``."""
    stats = {s.name: s.bytes for s in sim.network.link_stats()}
    return [
        (stats[f"rack0/node{i}/nic->rack0/tor"], stats[f"rack0/tor->rack0/node{i}/nic"])
        for i in nodes
    ]


def ps_traffic(n: int, params: float, partition: str | None) -> tuple[list, list]:
    """Per-worker and per-server NIC bytes of one sync iteration: n workers, n servers."""
    doc = ps_doc(
        2 * n,
        [layer("a", params * 0.75), layer("b", params * 0.25)],
        placement="dedicated",
        servers=n,
        iterations=1,
    )
    if partition is not None:
        doc["data_parallel"]["ps"]["partition_bytes"] = partition
    _, sim = run_strategy(doc)
    return nic_bytes(sim, range(n)), nic_bytes(sim, range(n, 2 * n))


def ring_traffic(n: int, params: float) -> list[tuple[float, float]]:
    doc = ps_doc(n, [layer("a", params * 0.75), layer("b", params * 0.25)], iterations=1)
    doc["data_parallel"] = {
        "sync": "allreduce",
        "allreduce": {"algorithm": "ring", "bucket": "1GB"},
    }
    doc["network"] = {"protocol": "none", "channels": 1}  # the ring's bytes, not NCCL's wire
    _, sim = run_strategy(doc)
    return nic_bytes(sim, range(n))


@pytest.mark.parametrize("n", [2, 3, 4, 8])
@pytest.mark.parametrize("params", [5e6, 25e6])
@pytest.mark.parametrize("partition", [None, "1MB"])
def test_ps_with_as_many_servers_as_workers_moves_m_per_worker(n, params, partition) -> None:
    """Each worker NIC sends M and receives M (fp32, 4 bytes a value: exact up to float
    rounding, 1e-9); the ring's worker NIC sends and receives 2 (n - 1) M / n; so the
    PS's per-worker traffic is the ring's or less, equal at n = 2."""
    model = 4 * params
    workers, servers = ps_traffic(n, params, partition)
    ring = ring_traffic(n, params)
    for sent, received in workers:
        assert sent == pytest.approx(model, rel=1e-9)
        assert received == pytest.approx(model, rel=1e-9)
    for sent, received in ring:
        assert sent == pytest.approx(2 * (n - 1) * model / n, rel=1e-9)
        assert received == pytest.approx(2 * (n - 1) * model / n, rel=1e-9)
    assert max(s for s, _ in workers) <= min(s for s, _ in ring) * (1 + 1e-9)
    if n == 2:
        assert workers[0][0] == pytest.approx(ring[0][0], rel=1e-9)
    # the servers together take in and send out n M: n B of server bandwidth is needed
    assert sum(r for _, r in servers) == pytest.approx(n * model, rel=1e-9)
    assert sum(s for s, _ in servers) == pytest.approx(n * model, rel=1e-9)


@pytest.mark.parametrize(("n", "k"), [(4, 1), (4, 2), (8, 2), (6, 3)])
def test_fewer_servers_carry_n_over_k_models_each(n: int, k: int) -> None:
    """With k < n servers (one key per server: equal layers), each server NIC carries
    n M / k each way -- the server side of BytePS's bound, n M / (k B_s)."""
    params = 8e6
    layers = [layer(f"l{j}", params / k) for j in range(k)]
    doc = ps_doc(n + k, layers, placement="dedicated", servers=k, iterations=1)
    _, sim = run_strategy(doc)
    for sent, received in nic_bytes(sim, range(n, n + k)):
        assert received == pytest.approx(n * 4 * params / k, rel=1e-9)
        assert sent == pytest.approx(n * 4 * params / k, rel=1e-9)


# ------------------------------------------------------------------ the shipped study

STUDY = SCENARIOS / "ps_vs_ring"
UPLINK = ("cluster", "rack_uplink", "oversubscription")


def study_run(name: str, ratio: float) -> SimpleNamespace:
    """The summary and link table of the study's scenario ``name`` at uplinks ``ratio``:1,
    simulated once per session (two tests read ps-servers-1x at 1:1; 2 s a run)."""
    doc = yaml.safe_load((STUDY / name).read_text())
    doc["cluster"]["rack_uplink"]["oversubscription"] = ratio

    def run() -> dict:
        result = simulate(parse_scenario(doc, str(STUDY / name)))
        return {"summary": result.summary, "links": list(result.links)}

    return SimpleNamespace(**shared_json(f"ps-vs-ring study {name} {json.dumps(doc)}", run))


def test_study_worker_nics_move_one_model_each_way() -> None:
    """ResNet-50, ``ps-servers-1x`` at 1:1: every worker node's NIC sends and receives
    M (25,557,032 fp16 values) and the 16 server NICs n M each way together, each
    within 5% of n M / k = M (partitions are balanced, not cut to equal shares), as
    the README's reading says; the ring's node NIC carries 2 (n - 1) M / n (n = 128 GPUs in
    one flat ring, one flow in and out of each node)."""
    model = 2 * 25_557_032
    links = {row["link"]: row["bytes"] for row in study_run("resnet50_ps_servers_1x.yaml", 1).links}

    def nic(rack: int, node: int) -> tuple[float, float]:
        name = f"rack{rack}/node{node}/nic"
        return links[f"{name}->rack{rack}/tor"], links[f"rack{rack}/tor->{name}"]

    for sent, received in (nic(rack, node) for rack in range(4) for node in range(4)):
        assert sent == pytest.approx(model, rel=1e-9)
        assert received == pytest.approx(model, rel=1e-9)
    servers = [nic(rack, node) for rack in range(4, 8) for node in range(4)]
    assert sum(s for s, _ in servers) == pytest.approx(16 * model, rel=1e-9)
    assert sum(r for _, r in servers) == pytest.approx(16 * model, rel=1e-9)
    # balanced sharding of 1 MB partitions: each server within 5% of its n M / k
    assert all(abs(s / model - 1) < 0.05 for s, _ in servers)
    ring = {row["link"]: row["bytes"] for row in study_run("resnet50_ring.yaml", 1).links}
    assert ring["rack0/node0/nic->rack0/tor"] == pytest.approx(2 * 127 / 128 * model, rel=1e-9)


def test_study_ps_wins_at_one_to_one_and_loses_from_two_to_one() -> None:
    """The README's crossover: at 1:1 ``ps-servers-1x`` beats hierarchical all-reduce
    (T_PS = M / B against 2 (n - 1) M / (n B) across 16 nodes, so by at least 20%); at
    2:1 every push and pull crosses an uplink of half the rack's NICs, the PS's time
    grows by at least M / B (4.1 ms) and hierarchical all-reduce, crossing each rack
    boundary with one flow each way, does not move."""
    ps = {
        r: study_run("resnet50_ps_servers_1x.yaml", r).summary["iteration_time_s"] for r in (1, 2)
    }
    ar = {r: study_run("resnet50_hierarchical.yaml", r).summary["iteration_time_s"] for r in (1, 2)}
    assert ps[1] < 0.8 * ar[1]
    assert ar[2] == pytest.approx(ar[1], rel=1e-9)
    assert ps[2] - ps[1] >= 2 * 25_557_032 / 12.5e9
    assert ps[2] > ar[2]
