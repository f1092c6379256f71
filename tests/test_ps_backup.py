"""Backup workers as published (clustersim.strategies.parameter_server.backup): the workers
left out of a round are cancelled, so a round lasts the k-th order statistic of the workers' times.

Clusters as in tests/test_parameter_server.py: one GPU per node, zero latency, a NIC of
NIC bytes/s the bottleneck of every transfer, a dedicated CPU server.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import pytest

from clustersim import simulate
from clustersim.scenario import parse_scenario
from tests.test_parameter_server import GPU, MEM, NIC, layer, ps_doc, run

SLOW = "rack0/node9/gpu0"


def straggler_doc(cancel: bool = True, **extra: Any) -> dict[str, Any]:
    """10 workers (one 3x slower) and a dedicated server, k = 9, 12 rounds."""
    return ps_doc(
        11,
        [layer("w", 1e5, 1e12)],
        batch=10,
        placement="dedicated",
        mode="backup",
        iterations=12,
        backup_cancel=cancel,
        stragglers=[{"devices": SLOW, "slowdown": 3}],
        **extra,
    )


def test_a_fixed_straggler_is_cancelled_when_the_round_closes() -> None:
    """Each round the 9 fast workers compute t, push together (9 x S / NIC into the
    server): the 9th push closes the round and cancels the straggler then, after
    t + 9 S / NIC of its 3t; it pulls with the others (10 pulls: 10 S / NIC)."""
    m, k, params, rounds = 10, 9, 1e5, 12
    size, t = 4 * params, 3 * 1e12 / GPU
    s = run(straggler_doc())
    close = t + k * size / NIC
    assert s["iteration_time_s"] == pytest.approx(
        close + (k * size + 12 * params) / MEM + m * size / NIC, rel=1e-9
    )
    assert s["cancelled_compute_s"] == pytest.approx(rounds * close, rel=1e-9)
    assert s["cancelled_push_bytes"] == 0.0
    assert s["key_pushes_dropped"] == 0
    assert s["iterations_per_worker"][SLOW] == rounds


def test_the_cancelled_compute_ends_at_the_cancel_and_is_marked() -> None:
    """The straggler's compute records of each round are op ``cancelled``; the cut one
    ends when the round closes, not when its work would have ended."""
    result = simulate(parse_scenario(straggler_doc()))
    slow = [r for r in result.records if r.resource == SLOW and r.kind == "compute"]
    assert slow and all(r.op == "cancelled" for r in slow)
    busy = sum(r.end_s - r.start_s for r in slow)
    assert busy == pytest.approx(result.summary["cancelled_compute_s"], rel=1e-12)
    fast = [r for r in result.records if r.resource == "rack0/node0/gpu0" and r.kind == "compute"]
    assert all(r.op != "cancelled" for r in fast)


def test_without_cancel_the_straggler_finishes_its_stale_rounds() -> None:
    """``backup_cancel: false`` is the old model: late pushes dropped, fewer iterations."""
    s = run(straggler_doc(cancel=False))
    assert s["key_pushes_dropped"] > 0
    assert s["iterations_per_worker"][SLOW] < 12
    assert "cancelled_compute_s" not in s and "cancelled_push_bytes" not in s


def test_a_push_on_the_wire_is_cancelled_with_the_bytes_it_moved() -> None:
    """A straggler only 1% slower has started its push when the round closes: the push
    leaves the network having moved part of its bytes (the invariant checker holds the
    links' bytes to it)."""
    params = 1e8
    doc = straggler_doc()
    doc["model"] = {"layers": [layer("w", params, 1e12)]}
    doc["stragglers"] = [{"devices": SLOW, "slowdown": 1.01}]
    result = simulate(parse_scenario(doc))
    moved = result.summary["cancelled_push_bytes"]
    assert 0 < moved < 12 * 4 * params
    cut = [r for r in result.records if r.kind == "transfer" and r.op == "cancelled"]
    assert len(cut) == 12 and sum(r.bytes for r in cut) == pytest.approx(moved)


def test_other_modes_report_no_cancelled_work() -> None:
    s = run(ps_doc(3, [layer("w", 1e5, 1e12)], placement="dedicated"))
    assert "cancelled_compute_s" not in s


# --------------------------------------------------------------- the k-th order statistic

T0 = 3 * 1e12 / GPU
"""A worker's nominal compute per round (forward + backward of one sample), seconds."""
SCALE = 1.0
"""Exponential slowdown: a worker's time in a round is T0 (1 + Exp(SCALE)), i.i.d."""
ROUNDS = 400


def expected_kth_of(k: int, p: int) -> float:
    """E[X_{k:p}] of X = T0 (1 + E), E ~ Exp(SCALE): the k-th smallest of p exponentials
    has mean SCALE x sum_{j=p-k+1}^{p} 1/j (Renyi's representation)."""
    return T0 * (1 + SCALE * sum(1 / j for j in range(p - k + 1, p + 1)))


def round_times(k: int, p: int, cancel: bool = True) -> list[float]:
    """Round lengths of ``p`` workers with i.i.d. exponential slowdowns and (almost) no
    communication: a one-parameter model (4 B moves in 0.4 ns)."""
    doc = ps_doc(
        p + 1,
        [layer("w", 1, 1e12)],
        batch=p,
        placement="dedicated",
        mode="backup",
        backup_k=k,
        backup_cancel=cancel,
        iterations=ROUNDS,
        stragglers=[{"random": {"devices": "*/gpu*", "slowdown": {"dist": "exponential"}}}],
    )
    doc["stragglers"][0]["random"]["slowdown"]["scale"] = SCALE
    doc["seed"] = 1000 * p + k
    return run(doc)["iteration_times_s"]


@pytest.mark.parametrize("k,p", [(1, 2), (2, 4), (3, 4), (4, 8), (7, 8)])
def test_a_round_lasts_the_kth_order_statistic(k: int, p: int) -> None:
    """With cancellation the mean round equals E[X_{k:p}] within 3 standard errors."""
    times = round_times(k, p)
    assert len(times) == ROUNDS
    mean = statistics.fmean(times)
    se = statistics.stdev(times) / math.sqrt(len(times))
    assert abs(mean - expected_kth_of(k, p)) < 3 * se


def test_without_cancel_a_round_lasts_longer_than_the_order_statistic() -> None:
    """The issue's claim: a straggler that finishes its stale round starts the next late,
    so the rounds last longer than E[X_{k:p}]."""
    k, p = 3, 4
    times = round_times(k, p, cancel=False)
    se = statistics.stdev(times) / math.sqrt(len(times))
    assert statistics.fmean(times) > expected_kth_of(k, p) + 3 * se
    assert statistics.fmean(times) > statistics.fmean(round_times(k, p))


def test_communication_is_negligible_in_the_order_statistic_runs() -> None:
    """The tiny model's pushes, pulls (8 at once into one server) and server work cost
    under 1e-6 of a round: far below a standard error of the mean round."""
    assert 8 * (4 + 4) / MEM + 12 / MEM + 2 * 8 * 4 / NIC < 1e-6 * T0


@pytest.mark.parametrize(
    "partition_bytes,split,credit",
    [("1MB", False, None), (None, True, None), ("1MB", True, None), ("1MB", False, 1)],
)
def test_cancels_keep_the_network_invariants(
    partition_bytes: str | None, split: bool, credit: int | None
) -> None:
    """Ordered connections (queued partitions dropped, the one on the wire cancelled),
    pushes split over two spines, and a scheduling credit (pushes waiting for a credit
    dropped): runs pass the invariant checker (bytes of every link, compute streams)
    with pushes cancelled on the wire."""
    extra: dict[str, Any] = {"partition_bytes": partition_bytes} if partition_bytes else {}
    if credit is not None:
        extra["credit"] = credit
    doc = straggler_doc(**extra)
    doc["model"] = {"layers": [layer("a", 1e7, 1e12), layer("b", 1e7, 1e12)]}
    slow = SLOW
    if split:
        doc["cluster"].update(racks=2, nodes_per_rack=6, spines=2, spine_routing="split")
        doc["training"]["global_batch"] = 11
        slow = "rack0/node5/gpu0"
    uniform = {"dist": "uniform", "low": 1, "high": 1.5}
    doc["stragglers"] = [
        {"devices": slow, "slowdown": 1.01},
        {"random": {"devices": "*/gpu*", "slowdown": uniform}},
    ]
    s = simulate(parse_scenario(doc), check=True).summary
    assert s["cancelled_push_bytes"] > 0 and s["cancelled_compute_s"] > 0
    assert s["key_pushes_dropped"] == 0
    assert set(s["iterations_per_worker"].values()) == {12}
