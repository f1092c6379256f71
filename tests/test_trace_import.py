"""The ``trace`` workload: Kineto and Chakra traces replayed on the simulated cluster.

tests/data/kineto_step.json is one rank's step: 8 kernels and a memcpy on stream 7, two
NCCL all-reduces on stream 20 (80 MB fp32 and 20 MB bf16, sized by their
record_param_comms ops, group of 4).  tests/data/chakra_step.json is the same step as a
Chakra graph.  On a ring of 4 GPUs (100 GB/s, 1 us per hop) the ring all-reduce of S
bytes takes 2 (n - 1) (alpha + S / (n B)): 1206 us and 306 us.  In recorded order the
first all-reduce waits for bwd_layer2 (ends at 450 us), the second for it and for
bwd_bias, the optimizer's 100 us for the second: makespan 450 + 1206 + 306 + 100 us.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

import clustersim
from clustersim.cli import main
from clustersim.collectives import CollectiveCall, analytical_time
from clustersim.scenario import parse_scenario

DATA = Path(__file__).parent / "data"
KINETO = DATA / "kineto_step.json"
CHAKRA = DATA / "chakra_step.json"
US = 1e-6
ALPHA, BANDWIDTH, N = 1 * US, 100e9, 4


def ring_allreduce_s(size_bytes: float, n: int = N) -> float:
    """The ring all-reduce's alpha-beta time on the test ring."""
    return 2 * (n - 1) * (ALPHA + size_bytes / n / BANDWIDTH)


T1, T2 = ring_allreduce_s(80e6), ring_allreduce_s(20e6)


def scenario(trace: Path | str = KINETO, devices: int = N, kind: str = "ring", **workload: Any):
    return {
        "name": "replay",
        "cluster": {
            "kind": kind,
            "devices": devices,
            "link": {"bandwidth": "100GB/s", "latency": "1us"},
        },
        "workload": {"trace": str(trace), "algorithm": "ring", **workload},
        "network": {"protocol": "none", "channels": 1},  # the textbook's ring
    }


def run(doc: dict[str, Any]) -> clustersim.Result:
    return clustersim.simulate(parse_scenario(doc))


def test_kineto_makespan_is_compute_path_plus_ring_alpha_beta() -> None:
    """Recorded order: 450 us of compute, both all-reduces back to back, 100 us after."""
    result = run(scenario())
    expected = 450 * US + T1 + T2 + 100 * US
    assert result.typed_summary.header.makespan_s == pytest.approx(expected, rel=1e-6)
    call = CollectiveCall("allreduce", tuple(f"gpu{i}" for i in range(N)), 80e6)
    assert T1 == pytest.approx(analytical_time(call, result.topology), rel=1e-9)


def test_chakra_and_kineto_of_one_step_replay_the_same() -> None:
    """The Chakra graph of the same step gives the same makespan and collective times."""
    kineto, chakra = run(scenario(KINETO)), run(scenario(CHAKRA))
    assert chakra.typed_summary.header.makespan_s == pytest.approx(
        kineto.typed_summary.header.makespan_s, rel=1e-9
    )
    times = [c.time_s for c in chakra.typed_summary.strategy.collectives.values()]
    assert times == pytest.approx([T1, T2], rel=1e-6)


def test_summary_sets_the_recorded_beside_the_replayed() -> None:
    """Recorded span 1.96 ms, compute 950 us (x compute_scale when replayed), collectives."""
    part = run(scenario(compute_scale=2.0)).typed_summary.strategy
    assert (part.format, part.ranks, part.ops) == ("kineto", N, 10)
    assert part.trace_span_s == pytest.approx(1960 * US)
    assert part.trace_compute_s == pytest.approx(950 * US)
    assert part.compute_s == pytest.approx(1900 * US)
    assert part.trace_communication_s == pytest.approx(1390 * US)
    assert part.communication_s == pytest.approx(T1 + T2, rel=1e-6)
    first = part.collectives["k3"]
    assert (first.op, first.bytes, first.group_size, first.groups) == ("allreduce", 80e6, 4, 1)


def test_compute_scale_scales_the_compute_path() -> None:
    """x2: the second all-reduce waits for bwd_bias at 1700 us, not the first one's end."""
    makespan = run(scenario(compute_scale=2.0)).typed_summary.header.makespan_s
    assert makespan == pytest.approx(max(900 * US + T1, 1700 * US) + T2 + 200 * US, rel=1e-6)


def test_streams_order_drops_the_recorded_cross_stream_waits() -> None:
    """order: streams -- the NCCL stream runs from 0, the compute stream on its own."""
    makespan = run(scenario(order="streams")).typed_summary.header.makespan_s
    assert makespan == pytest.approx(max(T1 + T2, 950 * US), rel=1e-6)


def test_ranks_glob_respected() -> None:
    """ranks: gpu[0-3] on 8 GPUs -- only those replay; the others hold no record."""
    result = run(scenario(devices=8, kind="switch", ranks="gpu[0-3]"))
    assert result.typed_summary.strategy.ranks == 4
    assert {r.resource for r in result.records if r.kind == "compute"} == {
        f"gpu{i}" for i in range(4)
    }


def test_group_of_4_on_8_ranks_runs_as_two_blocks() -> None:
    """Group size 4 on 8 ranks: ranks 0-3 and 4-7 each run the all-reduce."""
    part = run(scenario(devices=8, kind="switch")).typed_summary.strategy
    assert [c.groups for c in part.collectives.values()] == [2, 2]


def test_group_all_runs_every_collective_over_all_ranks() -> None:
    """group: all -- the recorded group of 4 is ignored: one all-reduce over the 8 ranks."""
    part = run(scenario(devices=8, kind="switch", group="all")).typed_summary.strategy
    assert [(c.groups, c.group_size) for c in part.collectives.values()] == [(1, 8), (1, 8)]


def _jsonizer_text(nodes: list[dict[str, Any]]) -> str:
    """``chakra_jsonizer``'s output: the metadata, then each node, protobuf's JSON names."""
    objects: list[dict[str, Any]] = [{"version": "0.0.4"}]
    for node in nodes:
        objects.append(
            {
                "id": str(node["id"]),
                "name": node["name"],
                "type": node["type"],
                "durationMicros": str(node["duration_micros"]),
                **({"dataDeps": [str(d) for d in node["data_deps"]]} if node["data_deps"] else {}),
                **({"ctrlDeps": [str(d) for d in node["ctrl_deps"]]} if node["ctrl_deps"] else {}),
                "attr": [
                    {"name": a["name"], **{_camel(k): str(v) for k, v in a.items() if k != "name"}}
                    for a in node["attr"]
                ],
            }
        )
    return "\n".join(json.dumps(o, indent=2) for o in objects)


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(p.title() for p in rest)


def test_jsonizer_output_reads_as_the_chakra_document(tmp_path: Path) -> None:
    """Concatenated objects with camelCase keys and int64 values as text read the same."""
    nodes = json.loads(CHAKRA.read_text())["nodes"]
    path = tmp_path / "rank0.json"
    path.write_text(_jsonizer_text(nodes))
    assert run(scenario(path)).typed_summary.header.makespan_s == pytest.approx(
        run(scenario(CHAKRA)).typed_summary.header.makespan_s, rel=1e-12
    )


def _kineto_with(change: Any) -> dict[str, Any]:
    doc = json.loads(KINETO.read_text())
    change(doc)
    return doc


def _rename_collective(doc: dict[str, Any]) -> None:
    for e in doc["traceEvents"]:
        if e["name"] == "record_param_comms":
            e["args"]["Collective name"] = "frobnicate"


def _chakra_comm_type(value: int) -> dict[str, Any]:
    doc = json.loads(CHAKRA.read_text())
    doc["nodes"][3]["attr"][1]["int64_val"] = value
    return doc


BAD_TRACES = {
    "missing file": (None, "no such file"),
    "unreadable JSON": ("{not json", "not valid JSON"),
    "binary ET": (
        b"\x08\x01\x12\x00\x00garbage",
        "the global metadata (at byte 0): does not parse",
    ),
    "neither format": ({"events": []}, "neither a Kineto trace"),
    "no ops": (
        {"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm"}]},
        "no operations",
    ),
    "unknown collective": (_kineto_with(_rename_collective), "unknown collective 'frobnicate'"),
    "unknown comm_type": (_chakra_comm_type(42), "unknown collective comm_type 42"),
    "size count mismatch": (
        _kineto_with(lambda d: d["traceEvents"].pop(2)),
        "2 NCCL kernels but 1 record_param_comms",
    ),
    "cycle": (
        {
            "nodes": [
                {"id": 1, "type": "COMP_NODE", "data_deps": [2]},
                {"id": 2, "type": 4, "ctrl_deps": [1]},
            ]
        },
        "dependency cycle",
    ),
    "send node": (
        {
            "nodes": [
                {"id": 1, "type": "COMM_SEND_NODE", "attr": [{"name": "comm_size", "int64_val": 8}]}
            ]
        },
        "a send names a peer rank, which one trace replayed on every rank does not have",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_TRACES))
def test_bad_trace_exits_2_naming_the_file_and_workload_trace(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each bad trace: exit 2, one line naming the scenario, workload.trace, the trace file
    and what is wrong; no traceback."""
    content, message = BAD_TRACES[case]
    trace = tmp_path / ("step.et" if isinstance(content, bytes) else "step.json")
    if isinstance(content, bytes):
        trace.write_bytes(content)
    elif content is not None:
        trace.write_text(content if isinstance(content, str) else json.dumps(content))
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario(trace.name)))
    code = main(["validate", str(path)])
    err = capsys.readouterr().err
    assert code == 2
    assert f"{path}: workload.trace: {trace}: " in err and message in err, err
    assert "Traceback" not in err


def test_unknown_format_exits_2_at_workload_format(tmp_path: Path, capsys) -> None:
    """format: protobuf is refused with the formats allowed."""
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario(KINETO, format="protobuf")))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "workload.format" in err and "auto, kineto, chakra" in err


def test_group_that_does_not_divide_the_ranks_is_refused(tmp_path: Path, capsys) -> None:
    """A group of 4 replayed on 6 ranks: exit 2 at workload.trace saying so."""
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario(KINETO, devices=6, kind="switch")))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "workload.trace" in err and "does not divide the 6 ranks" in err


def test_trace_path_is_relative_to_the_scenario_file(tmp_path: Path) -> None:
    """A relative trace path is looked up beside the scenario, not in the working folder."""
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "step.json").write_text(KINETO.read_text())
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario("traces/step.json")))
    makespan = clustersim.simulate(path).typed_summary.header.makespan_s
    assert makespan == pytest.approx(450 * US + T1 + T2 + 100 * US, rel=1e-6)


def test_resolved_scenario_of_a_run_replays_from_its_own_folder(tmp_path: Path, capsys) -> None:
    """scenario.resolved.yaml holds the trace's absolute path: it runs again from the run
    folder, to the same makespan."""
    (tmp_path / "step.json").write_text(KINETO.read_text())
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario("step.json")))
    out = tmp_path / "run"
    assert main(["run", str(path), "-o", str(out), "--quiet"]) == 0
    assert main(["run", str(out / "scenario.resolved.yaml"), "-o", str(tmp_path / "again")]) == 0
    first, again = (json.loads((d / "summary.json").read_text()) for d in (out, tmp_path / "again"))
    assert again["makespan_s"] == first["makespan_s"]
    assert (out / "gantt.png").is_file()
