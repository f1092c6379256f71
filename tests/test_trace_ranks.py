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
