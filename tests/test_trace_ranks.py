"""A trace per rank: ``workload.trace`` as a pattern or a folder, rank r replaying its own.

Traces are Chakra JSON written by the tests.  The cluster is the textbook ring of
test_trace_import (100 GB/s, 1 us per link, no NCCL protocol), where a ring all-reduce of
S bytes over n ranks takes 2(n-1)(alpha + S/(n B)) exactly.  Units: seconds, bytes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

import clustersim
from clustersim.cli import main
from clustersim.errors import ScenarioError
from clustersim.scenario import parse_scenario
from clustersim.workload_trace import TraceFormatError
from clustersim.workload_trace.ranks import rank_files

from .test_trace_import import ring_allreduce_s, scenario

MS = 1e-3


def compute(node_id: int, ms: float, after: tuple[int, ...] = ()) -> dict[str, Any]:
    return {
        "id": node_id,
        "name": f"gemm{node_id}",
        "type": "COMP_NODE",
        "duration_micros": ms * 1000,
        "data_deps": list(after),
    }


def allreduce(node_id: int, size: float, after: tuple[int, ...], group: str = "0", **more) -> dict:
    attrs = [
        {"name": "comm_type", "int64_val": 0},
        {"name": "comm_size", "int64_val": int(size)},
        {"name": "pg_name", "string_val": group},
    ]
    attrs += [{"name": k, "int64_val": v} for k, v in more.items()]
    return {
        "id": node_id,
        "name": f"allreduce{node_id}",
        "type": "COMM_COLL_NODE",
        "duration_micros": 100,
        "data_deps": list(after),
        "attr": attrs,
    }


def write_ranks(folder: Path, per_rank: list[list[dict]], name: str = "trace.{}.json") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for rank, nodes in enumerate(per_rank):
        (folder / name.format(rank)).write_text(json.dumps({"nodes": nodes}))


def run(doc: dict[str, Any]) -> clustersim.Result:
    return clustersim.simulate(parse_scenario(doc))


@pytest.mark.parametrize("spec", ["trace.%d.json", "trace.{rank}.json", "."])
def test_pattern_and_folder_name_the_same_rank_files(tmp_path: Path, spec: str) -> None:
    write_ranks(tmp_path, [[compute(1, 1.0)]] * 3)
    files = rank_files(spec, tmp_path)
    assert [p.name for p in files] == ["trace.0.json", "trace.1.json", "trace.2.json"]


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (["trace.0.json", "trace.2.json"], "none for rank 1"),
        (["trace.0.json", "other.0.json"], "rank 0 has several traces"),
        (["notes.txt"], "holds no rank traces"),
    ],
)
def test_a_folder_must_hold_ranks_0_to_n_minus_1_once(
    tmp_path: Path, names: list[str], message: str
) -> None:
    for name in names:
        (tmp_path / name).write_text("{}")
    with pytest.raises(TraceFormatError, match=message):
        rank_files(".", tmp_path)


def test_a_pattern_needs_rank_0(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="no trace for rank 0"):
        rank_files("missing.%d.json", tmp_path)


@pytest.mark.parametrize("slow_rank", [0, 2, 3])
@pytest.mark.parametrize("size", [4e6, 64e6])
def test_the_slowest_rank_holds_back_the_all_reduce(
    tmp_path: Path, slow_rank: int, size: float
) -> None:
    """Each rank computes (1 ms, the slow one 3 ms), then all-reduces S over the 4 ranks:
    makespan = 3 ms + the ring's 2(n-1)(alpha + S/(nB)), wherever the slow rank is -- rank
    r replays its own trace (one file replayed everywhere could not say this)."""
    ranks = [
        [compute(1, 3.0 if r == slow_rank else 1.0), allreduce(2, size, (1,))] for r in range(4)
    ]
    write_ranks(tmp_path / "traces", ranks)
    result = run(scenario(tmp_path / "traces" / "trace.%d.json"))
    assert result.summary["makespan_s"] == pytest.approx(3 * MS + ring_allreduce_s(size), rel=1e-9)
    part = result.typed_summary.strategy
    assert part.traces == 4 and part.ranks == 4
    assert part.trace_compute_s == pytest.approx(3 * MS)
    assert list(part.collectives) == ["0#0"]
    assert part.collectives["0#0"].group_size == 4


def test_two_groups_meet_apart(tmp_path: Path) -> None:
    """Ranks 0-1 all-reduce 40 MB in group "a", ranks 2-3 8 MB in group "b" (as two
    pipeline stages' data-parallel groups): two calls of 2 ranks, each its own ring time;
    the makespan is the larger one's."""
    ranks = [
        [compute(1, 1.0), allreduce(2, 40e6 if r < 2 else 8e6, (1,), "a" if r < 2 else "b")]
        for r in range(4)
    ]
    write_ranks(tmp_path, ranks)
    doc = scenario(tmp_path, kind="switch")
    part = run(doc).typed_summary.strategy
    assert set(part.collectives) == {"a#0", "b#0"}
    assert all(c.group_size == 2 for c in part.collectives.values())
    slow, fast = part.collectives["a#0"], part.collectives["b#0"]
    assert slow.bytes == 40e6 and fast.bytes == 8e6
    assert slow.time_s > 4 * fast.time_s


def test_ranks_that_disagree_are_refused_naming_both(tmp_path: Path) -> None:
    ranks = [[compute(1, 1.0), allreduce(7, 8e6 if r != 2 else 9e6, (1,))] for r in range(4)]
    write_ranks(tmp_path, ranks)
    with pytest.raises(ScenarioError, match=r"rank 0 .*node 7.* rank 2 .*node 7"):
        run(scenario(tmp_path))


def test_a_recorded_group_size_must_match_the_ranks_that_meet() -> None:
    """Kineto records a group's size: 3 ranks' traces holding a collective of a recorded
    4-rank group is a trace set missing a rank -- refused, naming the ranks."""
    from clustersim.collectives import CollectiveCall
    from clustersim.strategies.trace_groups import match_collectives
    from clustersim.workload_trace import TraceOp, WorkloadTrace

    op = TraceOp("k1", "nccl:all_reduce", "collective", 1e-4, op="allreduce", size_bytes=8e6,
                 group_size=4, group_name="0")  # fmt: skip
    traces = [WorkloadTrace(f"r{r}.json", "kineto", (op,), 1e-4) for r in range(3)]

    def call(op: TraceOp, devices: tuple[str, ...]) -> CollectiveCall:
        return CollectiveCall(op.op, devices, op.size_bytes)

    with pytest.raises(ScenarioError, match=r"group of 4 ranks, but 3 ranks' traces .*0, 1, 2"):
        match_collectives(traces, ("gpu0", "gpu1", "gpu2"), call)
    plan = match_collectives(traces[:1] * 4, ("gpu0", "gpu1", "gpu2", "gpu3"), call)
    assert len(plan) == 1 and plan["0#0"].call.n == 4


def test_more_gpus_than_traces_take_the_first_ones(tmp_path: Path) -> None:
    write_ranks(tmp_path, [[compute(1, 1.0)]] * 2)
    result = run(scenario(tmp_path, devices=8, kind="switch"))
    assert {r.resource for r in result.records if r.kind == "compute"} == {"gpu0", "gpu1"}


def test_ranks_glob_must_match_the_traces(tmp_path: Path) -> None:
    write_ranks(tmp_path, [[compute(1, 1.0)]] * 2)
    with pytest.raises(ScenarioError, match=r"workload.ranks.*2 rank traces, but 3 devices"):
        run(scenario(tmp_path, devices=8, kind="switch", ranks="gpu[0-2]"))


def test_a_bad_rank_file_exits_2_naming_it(tmp_path: Path, capsys) -> None:
    write_ranks(tmp_path / "t", [[compute(1, 1.0)], [compute(1, 1.0)]])
    (tmp_path / "t" / "trace.1.json").write_text('{"nodes": [{"id": 1, "type": "BOGUS"}]}')
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario("t/trace.%d.json")))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert (
        "trace.1.json: rank 1, node 0 (id 1): unknown node type" in err and "workload.trace" in err
    )


def test_one_file_still_replays_on_every_rank(tmp_path: Path) -> None:
    """Without a pattern or a folder the one trace is every rank's (summary: 1 trace)."""
    (tmp_path / "one.json").write_text(
        json.dumps({"nodes": [compute(1, 2.0), allreduce(2, 8e6, (1,))]})
    )
    result = run(scenario(tmp_path / "one.json"))
    assert result.typed_summary.strategy.traces == 1
    assert result.summary["makespan_s"] == pytest.approx(2 * MS + ring_allreduce_s(8e6), rel=1e-9)


# ------------------------------------------------------------------ sends and receives


def p2p(node_id: int, kind: str, peer: int | None, size: float, after=(), tag=None) -> dict:
    attrs = [{"name": "comm_size", "int64_val": int(size)}]
    if peer is not None:
        attrs.append({"name": "comm_dst" if kind == "send" else "comm_src", "int64_val": peer})
    if tag is not None:
        attrs.append({"name": "comm_tag", "int64_val": tag})
    return {
        "id": node_id,
        "name": f"{kind}{node_id}",
        "type": "COMM_SEND_NODE" if kind == "send" else "COMM_RECV_NODE",
        "data_deps": list(after),
        "attr": attrs,
    }


@pytest.mark.parametrize("size", [1e6, 1e8])
@pytest.mark.parametrize("hops", [1, 2])
def test_a_pipeline_of_sends_and_receives(tmp_path: Path, size: float, hops: int) -> None:
    """Two stages on a ring of 4: rank 0 computes 1 ms then sends S to rank ``hops``, which
    receives then computes 2 ms. The send waits for the recv to be posted (it is, at 0) and
    takes the route's latency plus S/B: makespan = 1 ms + hops x 1 us + S/B + 2 ms; both
    nodes end together."""
    ranks = [[compute(1, 0.0)] for _ in range(4)]
    ranks[0] = [compute(1, 1.0), p2p(2, "send", hops, size, (1,), tag=7)]
    ranks[hops] = [p2p(1, "recv", 0, size, tag=7), compute(2, 2.0, (1,))]
    write_ranks(tmp_path, ranks)
    result = run(scenario(tmp_path))
    expected = 1 * MS + hops * 1e-6 + size / 100e9 + 2 * MS
    assert result.summary["makespan_s"] == pytest.approx(expected, rel=1e-9)
    moved = [r for r in result.records if r.kind == "transfer" and r.label.startswith("send/")]
    assert len(moved) == 1 and moved[0].src == "gpu0" and moved[0].dst == f"gpu{hops}"


def test_the_recv_posted_late_holds_the_send(tmp_path: Path) -> None:
    """A rendezvous: rank 1 posts its recv after 5 ms of compute, so the 1 MB moves from
    5 ms on, though rank 0 sent at 1 ms."""
    ranks = [
        [compute(1, 1.0), p2p(2, "send", 1, 1e6, (1,))],
        [compute(1, 5.0), p2p(2, "recv", 0, 1e6, (1,))],
    ]
    write_ranks(tmp_path, ranks)
    result = run(scenario(tmp_path, devices=2))
    assert result.summary["makespan_s"] == pytest.approx(5 * MS + 1e-6 + 1e6 / 100e9, rel=1e-9)


@pytest.mark.parametrize(
    ("rank1", "message"),
    [
        ([p2p(2, "recv", 0, 2e6)], "sends 1e\\+06 B, rank 1 node id 2 receives 2e\\+06 B"),
        ([compute(1, 1.0)], "has no matching recv on rank 1"),
        ([p2p(2, "recv", 0, 1e6, tag=3)], "no matching"),
    ],
    ids=["sizes", "no_recv", "tag"],
)
def test_unmatched_or_disagreeing_sends_are_refused(
    tmp_path: Path, rank1: list, message: str
) -> None:
    write_ranks(tmp_path, [[p2p(2, "send", 1, 1e6)], rank1])
    with pytest.raises(ScenarioError, match=message):
        run(scenario(tmp_path, devices=2))


@pytest.mark.parametrize(("peer", "message"), [(None, "names no peer rank"), (5, "names rank 5")])
def test_a_send_needs_a_peer_rank_of_the_set(tmp_path: Path, peer, message: str) -> None:
    write_ranks(tmp_path, [[p2p(2, "send", peer, 1e6)], [compute(1, 1.0)]])
    with pytest.raises(ScenarioError, match=message):
        run(scenario(tmp_path, devices=2))
