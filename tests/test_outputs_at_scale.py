"""Run folders a person can open at scale (issue 29): folded trace, timeline and summary.

A cluster of :data:`clustersim.outputs.modes.FOLD_AT` devices or more is written folded by
default.  Simulating thousands of devices takes minutes, so these tests lower the
threshold (``OutputModes(fold_at=...)``) on a 36-device run: GPT-3 1.3B with tp 2 x pp 2 x
dp 8 on four DGX H100 nodes (32 GPUs, 4 CPUs), about two seconds.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from clustersim import simulate
from clustersim.cli import main
from clustersim.metrics import canonical_json
from clustersim.outputs import atomic
from clustersim.outputs.devices import DEVICES_CSV, SHOWN, device_entries, rank_field
from clustersim.outputs.gantt import gantt_data
from clustersim.outputs.modes import FOLD_AT, OutputModes
from clustersim.outputs.run_folder import read_run_folder
from clustersim.outputs.tables import TEXT_COLUMNS
from clustersim.outputs.timeline import read_timeline, timeline_frame
from clustersim.scenario.overrides import load_with_settings, parse_set

from .conftest import SCENARIOS

LLM = SCENARIOS / "llm" / "dgx_h100_gpt3_1.3b.yaml"
WIDER = ["cluster.nodes_per_rack=4", "parallelism.dp=8", "training.global_batch=64"]
"""Four nodes, eight replicas: every per-device entry has 32 devices, more than 2 x 10."""
DEVICES = 36
"""Devices of that cluster (32 GPUs and 4 CPUs): the fold threshold is compared with it."""
COLLECTIVE = SCENARIOS / "collectives" / "ring_allreduce_r1.yaml"


@pytest.fixture(scope="session")
def result():
    _doc, scenario = load_with_settings(str(LLM), [parse_set(s) for s in WIDER])
    return simulate(scenario)


@pytest.fixture(scope="session")
def folders(result, tmp_path_factory) -> dict[str, Path]:
    """The same run written whole, folded by the lowered threshold, and in other modes."""
    root = tmp_path_factory.mktemp("folders")
    modes = {
        "whole": OutputModes(),
        "below": OutputModes(fold_at=DEVICES + 1),
        "folded": OutputModes(fold_at=DEVICES),
        "trace_all": OutputModes(fold_at=DEVICES, trace="all"),
        "timeline_all": OutputModes(fold_at=DEVICES, timeline_rows="all"),
        "parquet": OutputModes(timeline="parquet"),
        "folded_parquet": OutputModes(fold_at=DEVICES, timeline="parquet"),
    }
    for name, mode in modes.items():
        result.write(root / name, modes=mode)
    return {name: root / name for name in modes}


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _summary(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text())


def _trace(folder: Path) -> dict:
    return json.loads((folder / "trace.json").read_text())


def _thread_devices(doc: dict) -> set[str]:
    names = [e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"]
    return {n.split(" ")[0] for n in names}


def test_below_the_threshold_nothing_changes(folders) -> None:
    """One device short of the threshold, the folder is the default one byte for byte."""
    assert FOLD_AT == 4096
    assert _files(folders["below"]) == _files(folders["whole"])
    assert "folded" not in _summary(folders["whole"])
    assert not (folders["whole"] / DEVICES_CSV).exists()


def test_folded_trace_holds_replica_0_and_says_what_it_left_out(result, folders) -> None:
    doc = _trace(folders["folded"])
    replicas = result.typed_summary.strategy.replicas()
    assert len(replicas) == 8
    assert _thread_devices(doc) == set(replicas[0])
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] != "recv"]
    kept = [r for r in result.records if r.resource in replicas[0]]
    assert len(slices) == len(kept) < len(result.records)
    other = doc["otherData"]
    assert other["folded"].startswith("folded: replica 0 of 8 shown")
    rows = other["rows"]
    assert rows["replicas"] == 8 and rows["shown"] == 4 and rows["devices"] == 32
    assert rows["records"] == len(kept) and rows["records_total"] == len(result.records)
    assert set(rows["stands_for"].values()) == {8}
    marker = [e for e in doc["traceEvents"] if e["ph"] == "i"]
    assert len(marker) == 1 and marker[0]["s"] == "g" and marker[0]["name"] == other["folded"]
    names = [e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"]
    assert names and all(" x 8 " in n for n in names)


def test_trace_all_has_every_device(result, folders) -> None:
    doc = _trace(folders["trace_all"])
    busy = {r.resource for r in result.records}
    assert _thread_devices(doc) == busy
    assert "otherData" not in doc and not [e for e in doc["traceEvents"] if e["ph"] == "i"]
    assert (folders["trace_all"] / "trace.json").read_bytes() == (
        folders["whole"] / "trace.json"
    ).read_bytes()
    files = _summary(folders["trace_all"])["folded"]["rows"]["files"]
    assert files == ["timeline.csv"]  # the timeline is still folded


def test_folded_timeline_is_the_replica_and_the_gantt_chart_says_so(result, folders) -> None:
    back = read_run_folder(folders["folded"])
    replica = set(result.typed_summary.strategy.replicas()[0])
    assert {r.resource for r in back.records} == replica
    data = gantt_data(back.records, back.summary)
    assert "replica 0 of 8" in data.title
    assert sum(data.counts) == 32  # four rows (or fewer) standing for every device


def test_a_whole_timeline_draws_every_device_beside_a_folded_trace(result, folders) -> None:
    back = read_run_folder(folders["timeline_all"])
    assert len(back.records) == len(result.records)
    assert _summary(folders["timeline_all"])["folded"]["rows"]["files"] == ["trace.json"]
    data = gantt_data(back.records, back.summary)
    assert "replica 0" not in data.title and sum(data.counts or [1] * len(data.rows)) == 32


def test_summary_keeps_the_10_highest_and_10_lowest_of_each_entry(result, folders) -> None:
    whole = json.loads(canonical_json(result.summary))
    folded = _summary(folders["folded"])
    entries = folded["folded"]["summary"]["entries"]
    assert set(entries) == {
        "devices",
        "per_iteration",
        "per_device_bubble",
        "per_device_iteration",
        "memory.per_device",
    }
    assert entries["memory.per_device"]["by"] == "peak_bytes"
    assert entries["devices"]["by"] == "idle_s"
    found = {".".join(p): (e, shape) for p, e, shape in device_entries(whole)}
    for key, cut in entries.items():
        full, shape = found[key]
        assert cut["devices"] == len(full) == 32 and cut["shown"] == 2 * SHOWN
        kept = _at(folded, key)
        assert len(kept) == 2 * SHOWN and all(kept[d] == full[d] for d in kept)
        by = rank_field(full, shape)
        value = {d: _rank(full[d], shape, by) for d in full}
        ordered = sorted(value.values(), reverse=True)
        shown = [value[d] for d in kept]
        assert shown == ordered[:SHOWN] + ordered[-SHOWN:]  # highest first, then lowest
    same = {k: v for k, v in folded.items() if k != "folded"}
    assert same.keys() == whole.keys()
    tops = {key.split(".")[0] for key in entries}
    assert all(same[k] == whole[k] for k in whole if k not in tops)
    memory = {k: v for k, v in same["memory"].items() if k != "per_device"}
    assert memory == {k: v for k, v in whole["memory"].items() if k != "per_device"}


def _at(data: dict, key: str):
    for part in key.split("."):
        data = data[part]
    return data


def _rank(value, shape: str, by: str) -> float:
    if shape == "number":
        return value
    if shape == "row":
        return value[by]
    return sum(item[by] for item in value) / len(value)


def test_devices_csv_has_every_device_with_the_whole_summarys_values(result, folders) -> None:
    whole = json.loads(canonical_json(result.summary))
    rows = list(csv.DictReader(io.StringIO((folders["folded"] / DEVICES_CSV).read_text())))
    assert [r["device"] for r in rows] == list(whole["devices"])
    for row in rows:
        device = row["device"]
        times = whole["devices"][device]
        assert {k: float(row[k]) for k in times} == times
        assert float(row["per_device_bubble"]) == whole["per_device_bubble"][device]
        assert float(row["bubble_fraction"]) == whole["per_device_bubble"][device]
        memory = whole["memory"]["per_device"][device]
        assert float(row["memory.per_device.peak_bytes"]) == memory["peak_bytes"]
        assert row["memory.per_device.fits"] == str(memory["fits"])
        first = whole["per_device_iteration"][device][0]
        assert float(row["per_device_iteration.0.idle_s"]) == first["idle_s"]


def test_a_folded_folder_reads_back_as_the_whole_summary(result, folders) -> None:
    whole = json.loads(canonical_json(result.summary))
    back = read_run_folder(folders["folded"]).summary
    assert {k: v for k, v in back.items() if k != "folded"} == whole


def test_folded_links_csv_holds_equal_links_once_with_their_count(folders) -> None:
    whole = list(csv.DictReader(io.StringIO((folders["whole"] / "links.csv").read_text())))
    text = (folders["folded"] / "links.csv").read_text()
    folded = list(csv.DictReader(io.StringIO(text)))
    assert text.splitlines()[0].endswith(",links")
    assert sum(int(r["links"]) for r in folded) == len(whole) > len(folded)
    by_name = {r["link"]: r for r in whole}
    measured = [c for c in folded[0] if c not in ("link", "links")]
    for row in folded:
        first = by_name[row["link"]]
        assert {c: row[c] for c in measured} == {c: first[c] for c in measured}
        equal = [r for r in whole if all(r[c] == row[c] for c in measured)]
        assert len(equal) == int(row["links"]) and equal[0]["link"] == row["link"]
    block = _summary(folders["folded"])["folded"]["links"]
    assert block == {"file": "links.csv", "links": len(whole), "rows": len(folded)}
    assert (folders["trace_all"] / "links.csv").read_text() == text  # still auto: folded


def test_parquet_reads_as_the_csvs_dataframe(result, folders) -> None:
    parquet = pd.read_parquet(folders["parquet"] / "timeline.parquet")
    text = dict.fromkeys(c for c in TEXT_COLUMNS if c in parquet.columns)
    from_csv = pd.read_csv(folders["whole"] / "timeline.csv", dtype=dict.fromkeys(text, str))
    pd.testing.assert_frame_equal(parquet, from_csv)
    pd.testing.assert_frame_equal(parquet, timeline_frame(result.records))
    csv_records = read_timeline(folders["whole"] / "timeline.csv")
    assert read_timeline(folders["parquet"] / "timeline.parquet") == csv_records
    assert not (folders["parquet"] / "timeline.csv").exists()


def test_report_reads_a_folded_parquet_folder(folders, tmp_path, capsys) -> None:
    """``clustersim report`` redraws the run's Gantt chart from the folded timeline, writes
    devices.csv again from the summary made whole, and the page's table has every device."""
    folder = tmp_path / "run"
    shutil.copytree(folders["folded_parquet"], folder)
    before = _files(folder)
    assert main(["report", str(folder)]) == 0
    assert "report.html" in capsys.readouterr().out
    after = _files(folder)
    assert {k: v for k, v in after.items() if k != "report.html"} == before
    page = after["report.html"].decode()
    assert "12 more devices" in page  # the page's table: all 32 workers, folded to 20
    links = page.split('<table id="links">')[1].split("</table>")[0]
    assert " x " in links  # a folded links.csv's rows name the links they stand for


def test_the_same_run_writes_the_same_folded_bytes(result, tmp_path) -> None:
    modes = OutputModes(fold_at=DEVICES, timeline="parquet")
    result.write(tmp_path / "a", modes=modes)
    result.write(tmp_path / "b", modes=modes)
    assert _files(tmp_path / "a") == _files(tmp_path / "b")


def test_a_failed_parquet_write_keeps_the_old_folder(result, folders, tmp_path, monkeypatch):
    """Disk full while timeline.parquet is written: WriteError naming it, the old folder whole."""
    out = tmp_path / "out"
    result.write(out)
    before = _files(out)
    real = atomic.os.fdopen

    def fdopen(fd, mode="r", *args, **kwargs):
        fh = real(fd, mode, *args, **kwargs)
        if "b" in mode:

            def full(data):
                raise OSError(28, "No space left on device")

            fh.write = full
        return fh

    monkeypatch.setattr(atomic.os, "fdopen", fdopen)
    with pytest.raises(OSError) as caught:
        result.write(out, modes=OutputModes(timeline="parquet"))
    assert "timeline.parquet" in str(caught.value)
    assert _files(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_cli_flags_write_what_they_say(tmp_path, capsys) -> None:
    """On a workload without replicas (a collective) ``replica`` keeps one device of each set
    of identical ones, as the Gantt chart folds rows; ``--timeline parquet`` writes no CSV."""
    out = tmp_path / "ring"
    argv = ["run", str(COLLECTIVE), "-o", str(out), "-q", "--trace", "replica", "--links", "all"]
    assert main([*argv, "--timeline", "parquet", "--summary-devices", "extremes"]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert "timeline.parquet" in names and "timeline.csv" not in names
    doc = _trace(out)
    rows = _summary(out)["folded"]["rows"]
    assert rows["fold"] == "identical" and rows["files"] == ["trace.json"]
    assert sum(rows["stands_for"].values()) == rows["devices"]
    assert _thread_devices(doc) == set(rows["stands_for"])


def test_bad_modes_are_refused_naming_the_flag() -> None:
    from clustersim.errors import ScenarioError

    with pytest.raises(ScenarioError, match="--timeline"):
        OutputModes(timeline="xlsx")
    with pytest.raises(SystemExit) as caught:
        main(["run", str(LLM), "--trace", "most"])
    assert caught.value.code == 2
