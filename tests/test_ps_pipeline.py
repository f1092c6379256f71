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
from clustersim.errors import ScenarioError
from clustersim.model.layers import OPTIMIZER_BYTES_PER_PARAM
from clustersim.scenario import parse_scenario
from clustersim.strategies.parameter_server.pipeline import partition_blocks

from .test_parameter_server import MEM, NIC, layer, ps_doc, run, run_strategy

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
    ring_doc["data_parallel"] = {
        "sync": "allreduce",
        "allreduce": {"algorithm": "ring", "bucket": "1GB"},
    }
    ring_doc["network"] = {"protocol": "none", "channels": 1}  # the textbook's ring
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


def _first_pull_and_end(doc: dict) -> tuple[float, float]:
    _, sim = run_strategy(doc)
    first_pull = min(r.start_s for r in sim.records if r.op == "pull")
    return first_pull, max(r.end_s for r in sim.records)


@pytest.mark.parametrize("k", [2, 4, 8])
@pytest.mark.parametrize("partition", [0.5 * MB, 2 * MB])
def test_credit_one_fills_the_pipeline_after_one_partition(k: int, partition: float) -> None:
    """One worker, k servers, compute free: without a credit the worker's first k
    partitions share its NIC, so the first arrives after k p / B; with ``credit: 1`` they
    go one at a time at the whole NIC, the first after p / B.  The first pull then waits
    for the server to sum the push (p bytes) and update (12 bytes a parameter, SGD) at its
    200 GB/s of memory bandwidth."""
    params = 4 * k * partition / 4  # 4 partitions per server, fp32
    doc = ps_doc(
        1 + k,
        [layer("w", params)],
        placement="dedicated",
        servers=k,
        iterations=1,
        partition_bytes=f"{partition:g}B",
    )
    plain_first, _ = _first_pull_and_end(doc)
    doc["data_parallel"]["ps"]["credit"] = 1
    credit_first, _ = _first_pull_and_end(doc)
    server = (partition + OPTIMIZER_BYTES_PER_PARAM["sgd"] * partition / 4) / MEM
    assert plain_first == pytest.approx(k * partition / NIC + server, rel=1e-6)
    assert credit_first == pytest.approx(partition / NIC + server, rel=1e-6)


def test_credit_above_the_partitions_changes_nothing() -> None:
    """A credit no worker can exhaust gives exactly the run without one."""
    doc = ps_doc(
        6,
        [layer("w", 8e6), layer("v", 2e6)],
        placement="dedicated",
        servers=2,
        partition_bytes="1MB",
    )
    plain = run(doc)
    doc["data_parallel"]["ps"]["credit"] = 1000
    with_credit = run(doc)
    assert with_credit == plain


def test_credit_without_partitions_is_refused() -> None:
    doc = ps_doc(3, [layer("w", 1e6)], placement="dedicated", credit=2)
    with pytest.raises(ScenarioError, match="partition_bytes"):
        parse_scenario(doc)
