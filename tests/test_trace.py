"""trace.json: Chrome trace events, one complete event per record, stable bytes."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from clustersim import simulate
from clustersim.cli import main
from clustersim.outputs.timeline import read_timeline
from clustersim.outputs.trace import node_of, nodes_of, trace_document, trace_events, trace_json
from clustersim.records import Record, sorted_records

from .conftest import SCENARIOS

DP = SCENARIOS / "data_parallel" / "overlap.yaml"
N0, N1 = "rack0/node0", "rack0/node1"


def synthetic() -> list[Record]:
    """Two nodes: forward/backward compute, a transfer across nodes, a collective with its steps."""
    g0, g1, g2 = f"{N0}/gpu0", f"{N0}/gpu1", f"{N1}/gpu0"
    return [
        Record(g0, "compute", "fwd", 0.0, 1e-3, flops=1e9, iteration=0, microbatch=0, stage=0),
        Record(g2, "compute", "fwd", 1.5e-3, 2.5e-3, iteration=0, microbatch=0, stage=1),
        Record(g0, "transfer", "act", 1e-3, 1.5e-3, bytes=4e6, src=g0, dst=g2, microbatch=0),
        Record(g2, "compute", "bwd", 2.5e-3, 4.5e-3, iteration=0, microbatch=0, stage=1),
        Record(g0, "collective", "allreduce s0", 5e-3, 7e-3, src=g0, dst=g0, stage=0),
        Record(g0, "transfer", "allreduce s0", 5e-3, 6e-3, bytes=1e6, src=g0, dst=g1, op="step0"),
        Record(g0, "transfer", "allreduce s0", 5.5e-3, 6.5e-3, bytes=1e6, src=g0, dst=g1, op="x"),
        Record(g1, "compute", "optimizer", 7e-3, 8e-3, bytes=1e6),
    ]


def events(doc: dict) -> tuple[list[dict], list[dict]]:
    """Metadata events, and the slices of records (receive slices left out)."""
    evs = doc["traceEvents"]
    meta = [e for e in evs if e["ph"] == "M"]
    return meta, [e for e in evs if e["ph"] == "X" and e["cat"] != "recv"]


def test_document_shape_and_one_event_per_record() -> None:
    records = synthetic()
    doc = json.loads(trace_json(records))
    assert doc["displayTimeUnit"] == "ms"
    meta, complete = events(doc)
    assert len(complete) == len(records)
    for event, record in zip(complete, sorted_records(records)):
        assert event["name"] == record.label
        assert event["ts"] == pytest.approx(record.start_s * 1e6)
        assert event["dur"] == pytest.approx((record.end_s - record.start_s) * 1e6)
        assert event["args"]["bytes"] == record.bytes
        assert event["args"]["kind"] == record.kind
        for tag in ("iteration", "microbatch", "stage"):
            value = getattr(record, tag)
            assert event["args"].get(tag, -1) == value
        for key in ("src", "dst", "op"):
            assert event["args"].get(key, "") == getattr(record, key)


def test_process_per_node_thread_per_device_and_stream() -> None:
    meta, complete = events(trace_document(synthetic()))
    processes = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    assert sorted(processes.values()) == [N0, N1]
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    names = set(threads.values())
    assert {f"{N0}/gpu0 compute", f"{N0}/gpu0 communication", f"{N1}/gpu0 compute"} <= names
    assert f"{N0}/gpu1 compute" in names
    for event in complete:
        thread = threads[(event["pid"], event["tid"])]
        device = thread.split(" ")[0]
        assert processes[event["pid"]] == node_of(device)
        stream = "communication" if event["cat"] in ("transfer", "collective") else "compute"
        assert stream in thread


def test_partly_overlapping_slices_get_their_own_thread() -> None:
    """Slices of one thread nest or stay apart, as Perfetto's JSON importer requires."""
    meta, complete = events(trace_document(synthetic()))
    by_thread: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for e in complete:
        by_thread.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_thread.values():
        for a0, a1 in spans:
            for b0, b1 in spans:
                overlap = a0 < b1 and b0 < a1
                nested = (a0 <= b0 and b1 <= a1) or (b0 <= a0 and a1 <= b1)
                assert not overlap or nested
    names = [e["args"]["name"] for e in meta if e["name"] == "thread_name"]
    assert f"{N0}/gpu0 communication #2" in names


def test_flat_devices_belong_to_cluster() -> None:
    assert node_of("gpu3") == "cluster"
    assert node_of("rack1/node2/cpu") == "rack1/node2"
    assert node_of("gpu3", {"gpu3": "host7"}) == "host7"


def test_run_trace_matches_timeline_one_to_one(tmp_path) -> None:
    """The trace.json of a run has one event per timeline row, same label, time and bytes."""
    assert main(["run", str(DP), "-o", str(tmp_path), "-q"]) == 0
    doc = json.loads((tmp_path / "trace.json").read_text())
    _, complete = events(doc)
    records = read_timeline(tmp_path / "timeline.csv")
    assert len(complete) == len(records) > 0

    def key(name: str, ts: float, dur: float, nbytes: float) -> tuple:
        return (name, round(ts, 3), round(dur, 3), nbytes)

    from_trace = Counter(key(e["name"], e["ts"], e["dur"], e["args"]["bytes"]) for e in complete)
    from_rows = Counter(
        key(r.label, r.start_s * 1e6, (r.end_s - r.start_s) * 1e6, r.bytes) for r in records
    )
    assert from_trace == from_rows


def test_trace_rebuilt_from_timeline_csv_is_the_same(tmp_path) -> None:
    """Only the records are needed: the trace of timeline.csv equals the run's trace.json."""
    main(["run", str(DP), "-o", str(tmp_path), "-q"])
    rebuilt = trace_json(read_timeline(tmp_path / "timeline.csv"))
    assert json.loads(rebuilt) == json.loads((tmp_path / "trace.json").read_text())


def test_topology_nodes_name_processes() -> None:
    result = simulate(DP)
    nodes = nodes_of(result.topology)
    meta, _ = events(trace_document(result.records, nodes))
    assert [e["args"]["name"] for e in meta if e["name"] == "process_name"] == ["cluster"]


def test_same_run_same_trace_bytes(tmp_path) -> None:
    for d in ("a", "b"):
        main(["run", str(DP), "-o", str(tmp_path / d), "-q"])
    assert (tmp_path / "a" / "trace.json").read_bytes() == (
        tmp_path / "b" / "trace.json"
    ).read_bytes()
    assert trace_json(synthetic()) == trace_json(list(reversed(synthetic())))


def test_every_run_writes_a_trace(tmp_path) -> None:
    """Non-training runs get trace.json too, but no Gantt chart."""
    scenario = SCENARIOS / "network" / "oversubscribed_shuffle.yaml"
    main(["run", str(scenario), "-o", str(tmp_path), "-q"])
    assert (tmp_path / "trace.json").exists()
    assert not (tmp_path / "gantt.png").exists()
    doc = json.loads((tmp_path / "trace.json").read_text())
    rows = (tmp_path / "timeline.csv").read_text().splitlines()[1:]
    assert len(events(doc)[1]) == len(rows)


def test_pipeline_trace_one_event_per_record() -> None:
    result = simulate(SCENARIOS / "pipeline" / "interleaved_m8.yaml")
    doc = json.loads(trace_json(result.records, nodes_of(result.topology)))
    meta, complete = events(doc)
    assert len(complete) == len(result.records)
    assert Counter(
        (e["args"].get("microbatch", -1), e["args"].get("stage", -1)) for e in complete
    ) == Counter((r.microbatch, r.stage) for r in result.records)
    assert [e["args"]["name"] for e in meta if e["name"] == "process_name"] == ["rack0/node0"]


@pytest.mark.parametrize(
    "scenario",
    [
        "scenarios/pipeline/interleaved_m8.yaml",
        "scenarios/zero/gpt3_1.3b_stage3_prefetch.yaml",
        "scenarios/parameter_server/async.yaml",
        "scenarios/validation/n4_alpha_beta.yaml",
    ],
)
def test_trace_text_is_json_dumps_of_the_events(scenario: str) -> None:
    """trace.json writes its events as text directly; it must equal json.dumps of each (one
    encoder for them all: json.dumps makes this encoder and calls its encode, per event)."""
    result = simulate(SCENARIOS.parent / scenario)
    nodes = nodes_of(result.topology)
    dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
    lines = [dumps(e) for e in trace_events(result.records, nodes)]
    expected = '{"displayTimeUnit":"ms","traceEvents":[\n' + ",\n".join(lines) + "\n]}\n"
    assert trace_json(result.records, nodes) == expected
