"""Chakra protobuf ``.et`` traces read directly (clustersim.workload_trace.chakra_et).

The tests write ``.et`` files with the schema's message classes (et_schema) as Chakra's
``encodeMessage`` does: each message preceded by its varint length, the GlobalMetadata
first.  The JSON form of the same trace is what ``chakra_jsonizer`` writes (protobuf's
``MessageToJson`` of each message, one after another), so an ``.et`` file and its JSON
form must load, and run, to the same result.  The schema itself is held to the field
numbers of Chakra's et_def.proto (1.0.0, commit 21585d8) by a node encoded by hand.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from google.protobuf.json_format import MessageToJson
from hypothesis import given, settings
from hypothesis import strategies as st

from clustersim.cli import main
from clustersim.errors import ScenarioError
from clustersim.workload_trace import load_trace
from clustersim.workload_trace.chakra import COMM_TYPES
from clustersim.workload_trace.chakra_et import encode_stream
from clustersim.workload_trace.et_schema import messages

ET = messages()
TEMPLATE = Path(__file__).parent.parent / "scenarios" / "traces" / "resnet50_ddp_step.yaml"
MB = 1 << 20


def attr(name: str, **value: Any) -> Any:
    return ET.AttributeProto(name=name, **value)


def node(id: int, type: str, us: int = 0, data=(), ctrl=(), attrs=(), name=None) -> Any:
    """A Node; ``name`` None gives ``op<id>``, "" leaves it out."""
    return ET.Node(
        id=id,
        name=f"op{id}" if name is None else name,
        type=type,
        duration_micros=us,
        data_deps=data,
        ctrl_deps=ctrl,
        attr=[attr("is_cpu_op", bool_val=False), *attrs],
    )


def coll(comm_type: int, size: int, pg: str = "") -> list[Any]:
    pg_attr = [attr("pg_name", string_val=pg)] if pg else []
    return [attr("comm_type", int64_val=comm_type), attr("comm_size", int64_val=size), *pg_attr]


def p2p(size: int, peer: str, rank: int, tag: int) -> list[Any]:
    return [
        attr("comm_size", int64_val=size),
        attr(peer, int32_val=rank),
        attr("comm_tag", int32_val=tag),
    ]


# Node 0 has id 0 (Chakra's converters count from 0): its JSON form has no "id" key.
REPLAYED = [
    node(0, "COMP_NODE", 100),
    node(1, "MEM_LOAD_NODE", 20, data=[0], attrs=[attr("tensor_size", uint64_val=MB)]),
    node(2, "COMM_COLL_NODE", 900, data=[0], attrs=coll(0, 8 * MB, "0")),
    node(3, "COMM_COLL_NODE", 400, data=[1], attrs=coll(2, 4 * MB)),
    node(4, "COMM_COLL_NODE", 300, ctrl=[2, 3], attrs=coll(7, 2 * MB)),
    node(
        5,
        "METADATA_NODE",
        name="",
        attrs=[attr("shape", int64_list=ET.lists["int64"](values=[2, 3]))],
    ),
    node(6, "MEM_STORE_NODE", 30, data=[4], ctrl=[5]),
    node(7, "COMP_NODE", 50, data=[6]),
]
"""Compute, memory, metadata, collectives (all-reduce, all-gather, reduce-scatter) and
dependencies of both kinds.  Longest path at the recorded times: 0 (100) -> 2 (900) -> 4
(300) -> 6 (30) -> 7 (50) = 1380 us (0 -> 1 -> 3 -> 4 is 100 + 20 + 400 = 520 < 1000)."""
SPAN_US = 100 + 900 + 300 + 30 + 50

POINT_TO_POINT = [
    node(8, "COMM_SEND_NODE", 40, data=[7], attrs=p2p(MB, "comm_dst", 1, 7)),
    node(9, "COMM_RECV_NODE", 45, data=[7], attrs=p2p(MB, "comm_src", 3, 7)),
]


def write_et(path: Path, nodes: list[Any], version: str = "0.0.4") -> Path:
    path.write_bytes(encode_stream([ET.GlobalMetadata(version=version), *nodes]))
    return path


def write_json(path: Path, nodes: list[Any], version: str = "0.0.4") -> Path:
    """chakra_jsonizer's output: MessageToJson of the metadata, then of each node."""
    objects = [ET.GlobalMetadata(version=version), *nodes]
    path.write_text("".join(MessageToJson(m) for m in objects))
    return path


def test_et_loads_as_its_jsonizer_json(tmp_path: Path) -> None:
    """Every node type: the .et and its JSON form give the same ops, in the same order."""
    nodes = [*REPLAYED, *POINT_TO_POINT]
    et = load_trace(write_et(tmp_path / "workload.0.et", nodes))
    js = load_trace(write_json(tmp_path / "workload.0.json", nodes))
    assert et.ops == js.ops and et.span_s == js.span_s and et.format == js.format == "chakra"
    assert len(et.ops) == len(nodes)


def _random_node(draw: Any, i: int, ids: list[int]) -> Any:
    """Node ``i`` of a random trace: any replayable type, deps on earlier nodes."""
    kind = draw(
        st.sampled_from(
            [
                "COMP_NODE",
                "MEM_LOAD_NODE",
                "MEM_STORE_NODE",
                "METADATA_NODE",
                "COMM_COLL_NODE",
                "COMM_SEND_NODE",
                "COMM_RECV_NODE",
            ]
        )
    )
    earlier = ids[:i]
    deps = draw(st.lists(st.sampled_from(earlier), max_size=3, unique=True)) if earlier else []
    split = draw(st.integers(0, len(deps)))
    attrs: list[Any] = []
    size = draw(st.integers(0, 1 << 40))
    if kind == "COMM_COLL_NODE":
        attrs = coll(
            draw(st.sampled_from(sorted(COMM_TYPES))), size, draw(st.sampled_from(["", "0", "tp"]))
        )
    elif kind in ("COMM_SEND_NODE", "COMM_RECV_NODE"):
        peer = "comm_dst" if kind == "COMM_SEND_NODE" else "comm_src"
        attrs = p2p(size, peer, draw(st.integers(0, 1023)), draw(st.integers(0, 99)))
    return node(
        ids[i],
        kind,
        draw(st.integers(0, 10**9)),
        deps[:split],
        deps[split:],
        attrs,
        draw(st.sampled_from(["", None, "x y"])),
    )


@st.composite
def _random_traces(draw: Any) -> list[Any]:
    n = draw(st.integers(1, 12))
    ids = draw(st.lists(st.integers(0, (1 << 64) - 1), min_size=n, max_size=n, unique=True))
    return [_random_node(draw, i, ids) for i in range(n)]


@settings(max_examples=40, deadline=None)
@given(nodes=_random_traces())
def test_any_et_loads_as_its_jsonizer_json(nodes: list[Any]) -> None:
    """Random DAGs of every node type and comm_type, ids up to 2^64 - 1 (0 included), names
    absent or not: the .et and its JSON form load to the same ops and span."""
    with tempfile.TemporaryDirectory() as folder:
        et = load_trace(write_et(Path(folder) / "t.et", nodes))
        js = load_trace(write_json(Path(folder) / "t.json", nodes))
    assert et.ops == js.ops and et.span_s == js.span_s and len(et.ops) == len(nodes)


def test_et_nodes_read_as_recorded(tmp_path: Path) -> None:
    """Kinds, collectives' operations and sizes, dependencies, and the span by hand."""
    trace = load_trace(write_et(tmp_path / "t.et", [*REPLAYED, *POINT_TO_POINT]))
    ops = {op.id: op for op in trace.ops}
    assert [ops[str(i)].kind for i in range(10)] == [
        *["compute"] * 2, *["collective"] * 3, *["compute"] * 3, "send", "recv"
    ]  # fmt: skip
    assert [(c.op, c.size_bytes, c.group_name) for c in trace.collectives] == [
        ("allreduce", 8 * MB, "0"), ("allgather", 4 * MB, ""), ("reducescatter", 2 * MB, "")
    ]  # fmt: skip
    assert ops["4"].after == ("2", "3") and ops["6"].after == ("4", "5")
    assert ops["5"].name == "5" and ops["7"].name == "op7"
    send, recv = ops["8"], ops["9"]
    assert (send.peer, send.tag, send.size_bytes) == (1, 7, MB)
    assert (recv.peer, recv.tag, recv.duration_s) == (3, 7, pytest.approx(45e-6))
    assert trace.span_s == pytest.approx((SPAN_US + 45) * 1e-6, rel=1e-12)
    assert trace.compute_s == pytest.approx((100 + 20 + 30 + 50) * 1e-6, rel=1e-12)


def test_hand_encoded_node_reads_by_et_def_field_numbers(tmp_path: Path) -> None:
    """A node written byte by byte from et_def.proto's field numbers (id 1, name 2, type 3,
    data_deps 5 packed, duration_micros 7, attr 10 with name 1, int64_val 9, string_list
    30) reads as the node meant: the schema's numbers are Chakra's."""
    size_attr = b"\x0a\x09comm_size" + b"\x48\x80\x80\x02"  # int64_val 32768
    pg_attr = b"\x0a\x07pg_name" + b"\xea\x01\x01\x31"  # string_val (29) "1"
    list_attr = b"\x0a\x01l" + b"\xf2\x01\x03\x0a\x01x"  # string_list (30) ["x"]
    type_attr = b"\x0a\x09comm_type" + b"\x48\x02"  # int64_val 2: ALL_GATHER
    body = b"\x08\x2a\x12\x02ag\x18\x07\x2a\x01\x00\x38\x64"  # id 42, COMM_COLL, dep 0, 100 us
    for a in (size_attr, pg_attr, list_attr, type_attr):
        body += b"\x52" + bytes([len(a)]) + a
    first = b"\x08\x00\x12\x01f\x18\x04\x38\x0a"  # id 0, "f", COMP_NODE, 10 us
    metadata = b"\x0a\x050.0.4"
    raw = b"".join(bytes([len(m)]) + m for m in (metadata, first, body))
    (tmp_path / "hand.et").write_bytes(raw)
    ag = load_trace(tmp_path / "hand.et").ops[1]
    assert (ag.id, ag.name, ag.op, ag.size_bytes, ag.group_name) == (
        "42",
        "ag",
        "allgather",
        32768,
        "1",
    )
    assert (ag.after, ag.duration_s) == (("0",), pytest.approx(100e-6))


def test_gzipped_and_unnamed_et_read_the_same(tmp_path: Path) -> None:
    """A gzip-compressed .et (Chakra's tools read those too) and an .et under another name
    (recognized by its binary bytes) load as the plain .et."""
    plain = load_trace(write_et(tmp_path / "t.et", REPLAYED))
    raw = (tmp_path / "t.et").read_bytes()
    (tmp_path / "t.et.gz").write_bytes(gzip.compress(raw))
    (tmp_path / "t.trace").write_bytes(raw)
    for name in ("t.et.gz", "t.trace"):
        assert load_trace(tmp_path / name).ops == plain.ops


def _scenario(tmp_path: Path, trace: str) -> Path:
    """The ResNet-50 trace scenario's cluster (2 nodes x 4 GPUs), replaying ``trace``."""
    doc = yaml.safe_load(TEMPLATE.read_text())
    doc["workload"] = {"trace": trace, "algorithm": "ring"}
    path = tmp_path / f"{Path(trace).stem}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _run_summary(tmp_path: Path, trace: str) -> dict[str, Any]:
    """summary.json of `clustersim run` of the scenario replaying ``trace``, without the
    ``trace`` key (the file's name, checked)."""
    out = tmp_path / f"out-{trace}"
    assert main(["run", str(_scenario(tmp_path, trace)), "-o", str(out), "--quiet"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary.pop("trace") == trace
    return summary


def test_run_of_et_gives_the_summary_of_its_json(tmp_path: Path) -> None:
    """`clustersim run` of an .et and of its JSON form: the same summary.json but for the
    trace's file name."""
    write_et(tmp_path / "step.et", REPLAYED)
    write_json(tmp_path / "step.json", REPLAYED)
    summaries = [_run_summary(tmp_path, trace) for trace in ("step.et", "step.json")]
    assert summaries[0] == summaries[1]
    assert summaries[0]["trace_span_s"] == pytest.approx(SPAN_US * 1e-6, rel=1e-12)
    assert len(summaries[0]["collectives"]) == 3


def _rank_nodes(rank: int) -> list[Any]:
    """Rank ``rank``'s step: compute for 100 (rank + 1) us, then an 8 MB all-reduce."""
    return [
        node(0, "COMP_NODE", 100 * (rank + 1)),
        node(1, "COMM_COLL_NODE", 900, data=[0], attrs=coll(0, 8 * MB, "dp")),
    ]


def test_rank_et_files_run_as_their_json_forms(tmp_path: Path) -> None:
    """workload.%d.et, one file per rank (8 ranks, each its own compute): the run's summary
    is that of the same traces as JSON files, but for the trace's name."""
    for rank in range(8):
        write_et(tmp_path / f"workload.{rank}.et", _rank_nodes(rank))
        write_json(tmp_path / f"workload.{rank}.json", _rank_nodes(rank))
    summaries = [_run_summary(tmp_path, p) for p in ("workload.%d.et", "workload.%d.json")]
    assert summaries[0] == summaries[1] and summaries[0]["traces"] == 8
    assert summaries[0]["trace_span_s"] == pytest.approx((800 + 900) * 1e-6, rel=1e-12)


def test_a_bad_rank_et_names_its_rank(tmp_path: Path, capsys) -> None:
    """Rank 1's .et cut short: exit 2 naming its file, rank 1 and the node."""
    for rank in range(2):
        write_et(tmp_path / f"workload.{rank}.et", _rank_nodes(rank))
    bad = tmp_path / "workload.1.et"
    bad.write_bytes(bad.read_bytes()[:-3])
    assert main(["validate", str(_scenario(tmp_path, "workload.{rank}.et"))]) == 2
    err = capsys.readouterr().err
    assert f"workload.trace: {bad}: rank 1, node 1 (at byte " in err and "truncated" in err, err


def _truncated(raw: bytes) -> bytes:
    return raw[:-5]


def _length_cut(raw: bytes) -> bytes:
    return raw + b"\x80"


def _garbage_node(raw: bytes) -> bytes:
    return raw + b"\x04\x08\xff\xff\xff"  # a varint that never ends inside its 4 bytes


NODES_OK = [*REPLAYED[:2]]
BAD_ET = {
    "truncated": (_truncated, NODES_OK, "node 1 (at byte {node1}): truncated file"),
    "length prefix cut": (_length_cut, NODES_OK, "node 2 (at byte {end}): truncated file"),
    "garbage node": (_garbage_node, NODES_OK, "node 2 (at byte {end}): does not parse as a Chakra Node"),
    "unknown node type": (None, [*NODES_OK, ET.Node(id=42, type=12)], "node 2 (id 42): unknown node type 12"),
    "no type": (None, [*NODES_OK, ET.Node(id=42)], "node 2 (id 42): an INVALID_NODE"),
    "unknown comm_type": (None, [node(42, "COMM_COLL_NODE", attrs=coll(42, 8))], "node 0 (id 42): unknown collective comm_type 42"),
    "barrier": (None, [node(42, "COMM_COLL_NODE", attrs=coll(9, 0))], "node 0 (id 42): a BARRIER (comm_type 9) is not replayed"),
    "no comm_size": (None, [node(42, "COMM_SEND_NODE")], "node 0 (id 42).comm_size"),
    "duplicate id": (None, [*NODES_OK, node(1, "COMP_NODE")], "node 2 (id 1): duplicate id"),
    "unknown dependency": (None, [node(5, "COMP_NODE", data=[9])], "node 0 (id 5): depends on unknown node id 9"),
    "empty": (lambda raw: b"", NODES_OK, "an empty file"),
}  # fmt: skip


def _bad_et(tmp_path: Path, case: str) -> tuple[Path, str]:
    """The file of ``case`` and the message expected (byte offsets filled in: ``end`` of
    the file before the change, ``node1`` where node 1 starts)."""
    change, nodes, message = BAD_ET[case]
    path = write_et(tmp_path / "workload.3.et", nodes)
    end, node1 = (
        len(path.read_bytes()),
        len(encode_stream([ET.GlobalMetadata(version="0.0.4"), nodes[0]])),
    )
    if change:
        path.write_bytes(change(path.read_bytes()))
    return path, message.format(end=end, node1=node1)


@pytest.mark.parametrize("case", sorted(BAD_ET))
def test_bad_et_names_the_file_the_rank_and_the_node(case: str, tmp_path: Path) -> None:
    """Each malformed .et: a ScenarioError naming the file, the rank given and the node."""
    path, message = _bad_et(tmp_path, case)
    with pytest.raises(ScenarioError) as caught:
        load_trace(path, rank=3)
    assert f"workload.trace: {path}: rank 3, {message}" in str(caught.value)


@pytest.mark.parametrize("command", ["validate", "run"])
def test_truncated_et_exits_2(command: str, tmp_path: Path, capsys) -> None:
    """The CLI: exit 2, one line naming workload.trace, the file and the node; no traceback."""
    path, message = _bad_et(tmp_path, "truncated")
    scenario = str(_scenario(tmp_path, path.name))
    args = [scenario] if command == "validate" else [scenario, "-o", str(tmp_path / "o")]
    code = main([command, *args])
    err = capsys.readouterr().err
    assert code == 2 and f"workload.trace: {path}: {message}" in err, err
    assert "Traceback" not in err and not (tmp_path / "o").exists()


def test_point_to_point_nodes_need_a_trace_per_rank(tmp_path: Path, capsys) -> None:
    """One trace with a send, replayed on every rank: exit 2 at workload.trace naming the
    node (a send's peer is a rank of a trace set; tests/test_trace_ranks.py replays them)."""
    write_et(tmp_path / "p2p.et", [*REPLAYED, *POINT_TO_POINT])
    assert main(["validate", str(_scenario(tmp_path, "p2p.et"))]) == 2
    err = capsys.readouterr().err
    assert "node id 8 (op8): a send names a peer rank" in err, err


def test_importing_clustersim_does_not_import_protobuf() -> None:
    """protobuf is imported when an .et is read, not when clustersim is."""
    code = "import sys, clustersim.workload_trace, clustersim.api; print('google.protobuf' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
