"""Per-key pipelining of parameter servers (``data_parallel.ps.partition_bytes``).

The law checked is BytePS's (Jiang et al., OSDI 2020, §3): with n workers of NIC
bandwidth B, a model of M bytes and k servers of bandwidth B_s, pushes and pulls
overlapping on full-duplex links take ``max(M / B, n M / (k B_s))`` per
iteration, against ``2 (n - 1) M / (n B)`` for ring all-reduce.  Clusters are
those of ``test_parameter_server``: one GPU per node, zero latency, the NIC the
bottleneck of every transfer (B_s = B), compute free.
"""

from __future__ import annotations

import pytest

from clustersim.api import prepare
from clustersim.budget import WorkLimitError
from clustersim.scenario import parse_scenario
from clustersim.strategies.ps_pipeline import partition_blocks

from .test_parameter_server import NIC, layer, ps_doc, run, run_strategy

MB = 1e6


def comm_time(n: int, k: int, model_bytes: float) -> float:
    """BytePS's per-iteration communication time of a PS (B_s = B = NIC)."""
    return max(model_bytes / NIC, n * model_bytes / (k * NIC))


def ring_time(n: int, model_bytes: float) -> float:
    return 2 * (n - 1) * model_bytes / (n * NIC)


def pipelined(n: int, k: int, params: float, partition: float, layers: int = 1) -> dict:
    per_layer = [layer(f"l{i}", params / layers) for i in range(layers)]
    doc = ps_doc(
        n + k,
        per_layer,
        placement="dedicated",
        servers=k,
        iterations=2,
        partition_bytes=f"{partition:g}B",
    )
    return run(doc)


def test_partition_blocks_cut_keys_above_the_size() -> None:
    """A block above the size becomes ceil(bytes / size) equal partitions; others stay."""
    blocks = [("a", 0, 10.0), ("b[0]", 1, 3.0)]
    assert partition_blocks(blocks, 4, 16) == [
        ("a:0", 0, 10 / 3),
        ("a:1", 0, 10 / 3),
        ("a:2", 0, 10 / 3),
        ("b[0]", 1, 3.0),
    ]
    assert partition_blocks(blocks, 4, 40) == blocks
    assert partition_blocks(blocks, 4, None) == blocks


@pytest.mark.parametrize(
    ("n", "k", "params", "partition", "layers"),
    [
        (4, 4, 25e6, 1 * MB, 1),
        (4, 4, 25e6, 4 * MB, 20),
        (8, 8, 25e6, 1 * MB, 1),
        (4, 2, 25e6, 1 * MB, 20),
        (4, 1, 10e6, 0.5 * MB, 1),
        (8, 2, 50e6, 4 * MB, 5),
    ],
)
def test_pipelined_ps_is_byteps_max_of_worker_and_server_bandwidth(
    n: int, k: int, params: float, partition: float, layers: int
) -> None:
    """Small partitions: the iteration is max(M/B, nM/(kB_s)) within 5% plus the fill
    and drain of the pipeline (one partition pushed and pulled at its connection's share
    min(B/k, B_s/n) of the NIC)."""
    model_bytes = 4 * params
    s = pipelined(n, k, params, partition, layers)
    expected = comm_time(n, k, model_bytes)
    one_partition = partition / min(NIC / k, NIC / n)
    assert expected <= s["iteration_time_s"] <= 1.05 * expected + 2 * one_partition


@pytest.mark.parametrize("n", [4, 8])
def test_ps_with_servers_as_wide_as_the_workers_beats_ring(n: int) -> None:
    """k B_s >= n B: the pipelined PS takes about M/B, ring all-reduce 2(n-1)M/(nB);
    unpipelined (today's default) it takes 2 M/B and loses."""
    params = 25e6
    ring_doc = ps_doc(n, [layer("w", params)], iterations=2)
    ring_doc["data_parallel"] = {"sync": "allreduce", "allreduce": {"bucket": "1GB"}}
    ring = run(ring_doc)["iteration_time_s"]
    assert ring == pytest.approx(ring_time(n, 4 * params), rel=0.02)
    assert pipelined(n, n, params, 1 * MB)["iteration_time_s"] < ring
    plain = ps_doc(2 * n, [layer("w", params)], placement="dedicated", servers=n, iterations=2)
    assert run(plain)["iteration_time_s"] > ring


def test_a_pull_starts_before_the_last_push_ends() -> None:
    """With partitions, the first partitions are pulled while later ones are pushed;
    without, every pull waits for the last push."""
    base = ps_doc(8, [layer("w", 25e6)], placement="dedicated", servers=4, iterations=1)
    for partition, overlaps in ((None, False), ("1MB", True)):
        base["data_parallel"]["ps"]["partition_bytes"] = partition
        _, sim = run_strategy(base)
        last_push = max(r.end_s for r in sim.records if r.op == "push")
        first_pull = min(r.start_s for r in sim.records if r.op == "pull")
        assert (first_pull < 0.1 * last_push) is overlaps


def test_partition_larger_than_every_key_keeps_todays_keys() -> None:
    """Partitions above every key's size: the same keys on the same servers, and where
    each connection carries one key per iteration, the same times as without."""
    layers = [layer("a", 3e6), layer("b", 1e6), layer("c", 2e6)]
    plain = run(ps_doc(5, layers, placement="dedicated", servers=2))
    big = run(ps_doc(5, layers, placement="dedicated", servers=2, partition_bytes="1GB"))
    assert big["keys"] == plain["keys"] and big["servers"] == plain["servers"]
    one = [layer("w", 8e6)]
    plain = run(ps_doc(6, one, placement="dedicated", servers=2))
    big = run(ps_doc(6, one, placement="dedicated", servers=2, partition_bytes="1GB"))
    assert big == plain


def test_tiny_partitions_are_refused_before_they_are_made() -> None:
    """A 1-byte partition of a 100 MB model would be 1e8 keys: the work limit refuses it
    in the check, at engine.max_events, without making the keys."""
    doc = ps_doc(3, [layer("w", 25e6)], placement="dedicated", partition_bytes="1B")
    with pytest.raises(WorkLimitError, match="max_events"):
        prepare(parse_scenario(doc))
