"""trace.json as Perfetto reads it: slices, flow arrows, counters and process names.

The structural tests read the JSON the way Perfetto's JSON importer does (flow
events of version 2: ``bind_id`` with ``flow_in`` / ``flow_out`` on ``X``
events; ``C`` events are one counter track per name and argument).  The last
test loads the file in Perfetto's trace processor when its binary is there
(``CLUSTERSIM_TRACE_PROCESSOR``, or ``trace_processor_shell`` on the PATH): the
``perfetto`` package downloads the binary on first use, and no package registry
ships it.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter, defaultdict

import pytest

from clustersim import simulate
from clustersim.outputs.trace import nodes_of, trace_events, trace_json
from clustersim.outputs.trace_tracks import NETWORK_COUNTER_CAP
from clustersim.records import Record

from .conftest import SCENARIOS

RING = SCENARIOS / "data_parallel" / "overlap.yaml"
PIPELINE = SCENARIOS / "pipeline" / "interleaved_m8.yaml"


def document(scenario) -> tuple[dict, object]:
    result = simulate(scenario)
    text = trace_json(result.records, nodes_of(result.topology), result.summary)
    return json.loads(text), result


def flows(doc: dict) -> list[tuple[dict, dict]]:
    """Each arrow as (from slice, to slice), following Perfetto's version-2 binding."""
    slices = sorted(
        (e for e in doc["traceEvents"] if e["ph"] == "X" and "bind_id" in e),
        key=lambda e: e["ts"],
    )
    open_from: dict[int, dict] = {}
    arrows = []
    for event in slices:
        if event.get("flow_in"):
            arrows.append((open_from.pop(event["bind_id"]), event))
        if event.get("flow_out"):
            open_from[event["bind_id"]] = event
    assert not [e for e in open_from.values() if e["cat"] == "transfer"]
    return arrows


def counters(doc: dict) -> dict[str, list[tuple[float, float]]]:
    """Counter track name (``name arg``) -> its (ts, value) points."""
    tracks: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for event in doc["traceEvents"]:
        if event["ph"] == "C":
            for key, value in event["args"].items():
                tracks[f"{event['name']} {key}"].append((event["ts"], value))
    return tracks


def integral_bytes(points: list[tuple[float, float]]) -> float:
    """Integral of a bytes/s step function over trace microseconds."""
    return sum(v * (t1 - t0) / 1e6 for (t0, v), (t1, _) in zip(points, points[1:]))


def test_one_slice_per_record_and_one_receive_slice_per_transfer() -> None:
    doc, result = document(RING)
    kinds = Counter(e["cat"] for e in doc["traceEvents"] if e["ph"] == "X")
    records = Counter(r.kind for r in result.records)
    assert kinds == records + Counter(recv=records["transfer"])


def test_every_transfer_has_an_arrow_to_its_receive() -> None:
    doc, result = document(RING)
    sends = [(a, b) for a, b in flows(doc) if a["cat"] == "transfer"]
    assert len(sends) == Counter(r.kind for r in result.records)["transfer"] == 288
    for send, receive in sends:
        assert receive["cat"] == "recv"
        assert receive["args"]["src"] == send["args"]["src"]
        assert receive["args"]["dst"] == send["args"]["dst"]
        assert receive["ts"] + receive["dur"] == pytest.approx(send["ts"] + send["dur"])


def test_ring_steps_of_one_call_are_chained_on_each_device() -> None:
    """4 GPUs, ring all-reduce: 6 steps per call, 12 calls; each device forwards at step k+1
    what it received at step k, so 5 chained arrows per device per call."""
    doc, _ = document(RING)
    chain = [(a, b) for a, b in flows(doc) if a["cat"] == "recv"]
    assert len(chain) == 12 * 4 * 5
    for receive, send in chain:
        assert send["cat"] == "transfer"
        assert receive["args"]["dst"] == send["args"]["src"]
        assert receive["name"] == send["name"]
        assert int(send["args"]["op"][4:]) == int(receive["args"]["op"][4:]) + 1
        assert send["ts"] >= receive["ts"] + receive["dur"]


def test_flow_ids_are_unique_per_chain_and_arrows_go_forward_in_time() -> None:
    doc, _ = document(RING)
    arrows = flows(doc)
    assert all(b["ts"] > a["ts"] for a, b in arrows)
    starts = [
        e["bind_id"] for e in doc["traceEvents"] if e.get("flow_out") and not e.get("flow_in")
    ]
    assert len(starts) == len(set(starts))


def test_network_counter_integral_is_the_bytes_each_device_sent_and_received() -> None:
    doc, result = document(RING)
    tracks = counters(doc)
    sent, received = Counter(), Counter()
    for record in result.records:
        if record.kind == "transfer":
            sent[record.src] += record.bytes
            received[record.dst] += record.bytes
    assert len(tracks) == 2 * 4
    for device in sent:
        for side, expected in (("send_Bps", sent[device]), ("recv_Bps", received[device])):
            points = tracks[f"{device} network {side}"]
            assert [t for t, _ in points] == sorted({t for t, _ in points})
            assert points[-1][1] == 0.0
            assert integral_bytes(points) == pytest.approx(expected, rel=1e-6)


def test_network_counters_are_capped_to_the_busiest_devices() -> None:
    doc, _ = document(SCENARIOS / "zero" / "gpt3_1.3b_stage3_prefetch.yaml")
    devices = {name.rsplit(" network ", 1)[0] for name in counters(doc) if " network " in name}
    assert len(devices) == NETWORK_COUNTER_CAP


def test_activation_counter_peaks_are_the_summary_peaks() -> None:
    doc, result = document(PIPELINE)
    tracks = counters(doc)
    stages = result.summary["activation_memory"]
    activations = {k: v for k, v in tracks.items() if k.endswith(" activations bytes")}
    assert len(activations) == len(stages) == 8
    peaks = sorted(max(v for _, v in points) for points in activations.values())
    assert peaks == sorted(block["peak_bytes"] for block in stages.values())


def test_processes_are_named_and_sorted_by_rack_and_node() -> None:
    """A process per node, sorted rack by rack and node by node (node2 before node10)."""
    devices = ["rack1/node0/gpu0", "rack0/node10/gpu0", "rack0/node2/gpu1", "rack0/node2/gpu0"]
    records = [Record(d, "compute", "fwd", 0.0, 1e-3) for d in devices]
    records.append(
        Record(devices[0], "transfer", "act", 1e-3, 2e-3, 8.0, src=devices[0], dst=devices[3])
    )
    doc = json.loads(trace_json(records))
    meta = [e for e in doc["traceEvents"] if e["ph"] == "M"]
    names = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    order = {e["pid"]: e["args"]["sort_index"] for e in meta if e["name"] == "process_sort_index"}
    assert [names[pid] for pid in sorted(order, key=order.get)] == [
        "rack0/node2",
        "rack0/node10",
        "rack1/node0",
    ]
    threads = [e["args"]["name"] for e in meta if e["name"] == "thread_name"]
    assert threads == [
        "rack0/node2/gpu0 compute",
        "rack0/node2/gpu0 receive",
        "rack0/node2/gpu1 compute",
        "rack0/node10/gpu0 compute",
        "rack1/node0/gpu0 compute",
        "rack1/node0/gpu0 communication",
    ]


def _trace_processor_binary() -> str | None:
    return os.environ.get("CLUSTERSIM_TRACE_PROCESSOR") or shutil.which("trace_processor_shell")


@pytest.mark.skipif(
    _trace_processor_binary() is None,
    reason="Perfetto's trace_processor_shell is not installed: the perfetto package downloads "
    "it on first use and no package registry ships it; set CLUSTERSIM_TRACE_PROCESSOR to one",
)
def test_trace_processor_reads_slices_flows_and_counters(tmp_path) -> None:
    """The same facts as above, queried from Perfetto's trace processor."""
    tp_module = pytest.importorskip("perfetto.trace_processor")
    doc, result = document(RING)
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(doc))
    config = tp_module.TraceProcessorConfig(bin_path=_trace_processor_binary())
    with tp_module.TraceProcessor(trace=str(path), config=config) as tp:

        def scalar(sql: str) -> float:
            return next(iter(tp.query(sql))).n

        transfers = Counter(r.kind for r in result.records)["transfer"]
        assert scalar("select count(*) as n from slice where category != 'recv'") == len(
            result.records
        )
        assert (
            scalar(
                "select count(*) as n from flow join slice s on s.id = flow.slice_out "
                "where s.category = 'transfer'"
            )
            == transfers
        )
        assert (
            scalar(
                "select count(*) as n from flow join slice s on s.id = flow.slice_out "
                "where s.category = 'recv'"
            )
            == 12 * 4 * 5
        )
        assert (
            scalar("select count(*) as n from counter_track where name like '% network send_Bps'")
            == 4
        )
        assert scalar("select count(*) as n from process where name = 'cluster'") == 1


def test_counter_and_flow_text_is_json_dumps_of_the_events() -> None:
    """The text writer and :func:`trace_events` agree on flows and counters too."""
    result = simulate(PIPELINE)
    nodes = nodes_of(result.topology)
    lines = [
        json.dumps(e, separators=(",", ":"), ensure_ascii=False)
        for e in trace_events(result.records, nodes, result.summary)
    ]
    expected = '{"displayTimeUnit":"ms","traceEvents":[\n' + ",\n".join(lines) + "\n]}\n"
    assert trace_json(result.records, nodes, result.summary) == expected
