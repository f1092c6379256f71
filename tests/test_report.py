"""Gantt charts and `clustersim report`: checked on the figure's data and artists, not pixels."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from matplotlib.collections import PolyCollection

from clustersim import simulate
from clustersim.cli import main
from clustersim.outputs.gantt import (
    MAX_BOXES,
    MAX_ROWS,
    box_kind,
    gantt_counts,
    gantt_data,
    gantt_figure,
)
from clustersim.outputs.html import report_html, write_report
from clustersim.outputs.plots import links_figure, memory_figure
from clustersim.outputs.timeline import read_timeline
from clustersim.records import Record

from .conftest import SCENARIOS

DP = SCENARIOS / "data_parallel" / "overlap.yaml"
COMM = ("transfer", "collective")


def pipeline_records(
    stages: int = 2,
    dp: int = 2,
    micro: int = 4,
    iterations: int = 2,
    t: float = 1e-3,
    skew: float = 1e-6,
) -> tuple[list[Record], dict[str, Any]]:
    """A GPipe-like timeline: device ``d{r}s{s}`` runs stage s for replica r, replica r
    ``r * skew`` seconds late (``skew=0``: identical replicas, folded in the Gantt chart)."""
    records: list[Record] = []
    it_len = (2 * micro + 2 * (stages - 1)) * t + t
    for it in range(iterations):
        for r in range(dp):
            base = it * it_len + r * skew
            for s in range(stages):
                dev = f"d{r}s{s}"
                for m in range(micro):
                    f0 = base + (s + m) * t
                    b0 = base + (micro + stages - 1 + (stages - 1 - s) + m) * t
                    tags = dict(iteration=it, microbatch=m, stage=s)
                    records.append(Record(dev, "compute", "fwd", f0, f0 + t, **tags))
                    records.append(Record(dev, "compute", "bwd", b0, b0 + t, **tags))
                    if s + 1 < stages:
                        nxt = f"d{r}s{s + 1}"
                        records.append(
                            Record(dev, "transfer", "act", f0 + t, f0 + t, 1e6, 0, dev, nxt, **tags)
                        )
                end = base + it_len - t
                records.append(
                    Record(
                        dev,
                        "collective",
                        "allreduce",
                        end,
                        end + t / 2,
                        src=dev,
                        dst=dev,
                        iteration=it,
                        stage=s,
                    )
                )
                records.append(
                    Record(dev, "compute", "optimizer", end + t / 2, end + t, iteration=it)
                )
    devices = sorted({r.resource for r in records})
    summary = {
        "scenario": "pp-test",
        "workload": "pipeline",
        "schedule": "gpipe",
        "stages": stages,
        "micro_batches": micro,
        "iteration_times_s": [it_len] * iterations,
        "per_device_bubble": {d: 0.25 for d in devices},
        "makespan_s": it_len * iterations,
    }
    return records, summary


def test_one_row_per_device_grouped_by_stage() -> None:
    records, summary = pipeline_records(stages=3, dp=2)
    data = gantt_data(records, summary)
    assert sorted(data.rows) == sorted({r.resource for r in records})
    assert data.rows == ["d0s0", "d1s0", "d0s1", "d1s1", "d0s2", "d1s2"]
    assert data.groups == ["stage 0"] * 2 + ["stage 1"] * 2 + ["stage 2"] * 2
    assert data.bubble == [0.25] * 6
    assert data.iteration_ends_s == pytest.approx(
        [summary["iteration_times_s"][0] * (i + 1) for i in range(2)]
    )
    assert "pp-test" in data.title and "gpipe" in data.title and not data.notes


def test_one_box_per_record_with_its_kind_and_microbatch() -> None:
    records, summary = pipeline_records()
    data = gantt_data(records, summary)
    assert len(data.boxes) == len(records)
    compute = [r for r in records if r.kind == "compute"]
    assert sum(b.kind != "communication" for b in data.boxes) == len(compute)
    assert sum(b.kind == "communication" for b in data.boxes) == len(records) - len(compute)
    want = Counter((r.resource, box_kind(r), r.start_s, r.end_s, r.microbatch) for r in records)
    got = Counter((data.rows[b.row], b.kind, b.start_s, b.end_s, b.microbatch) for b in data.boxes)
    assert got == want
    assert {b.kind for b in data.boxes} == {"forward", "backward", "compute", "communication"}


def test_figure_artists_match_the_data() -> None:
    records, summary = pipeline_records()
    fig = gantt_figure(records, summary)
    data = fig.gantt_data
    ax = fig.axes[0]
    counts = gantt_counts(fig)
    assert counts == dict(Counter(b.kind for b in data.boxes))
    assert sum(counts.values()) == len(records)
    assert all(isinstance(c, PolyCollection) for c in ax.collections if c.get_gid())
    ticks = [t.get_text() for t in ax.get_yticklabels()]
    assert len(ticks) == len(data.rows)
    assert all(device in tick for device, tick in zip(data.rows, ticks))
    assert ticks[0].startswith("stage 0")
    texts = [t.get_text() for t in ax.texts]
    assert texts.count("25.0%") == len(data.rows)
    assert {"0", "1", "2", "3"} <= set(texts)  # micro-batch numbers inside boxes
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == ["forward", "backward", "other compute", "communication", "iteration end"]
    dashed = [line for line in ax.lines if line.get_linestyle() == "--"]
    assert len(dashed) == len(summary["iteration_times_s"])
    assert "gpipe" in ax.get_title()


def test_bubble_from_records_without_per_device_bubble() -> None:
    """Idle / run time, the summary's bubble_fraction: a transfer from gpu0 to gpu1 during
    [1, 2] keeps both busy, so gpu0 is idle in [2, 3] only (1/4) and gpu1 in [0, 1] and
    [3, 4] (2/4); 1 - compute / run time would give both 0.5."""
    records = [
        Record("gpu0", "compute", "fwd a", 0.0, 1.0),
        Record("gpu0", "transfer", "act", 1.0, 2.0, src="gpu0", dst="gpu1"),
        Record("gpu1", "compute", "fwd a", 1.0, 2.0),
        Record("gpu1", "compute", "bwd a", 2.0, 3.0),
        Record("gpu0", "compute", "bwd a", 3.0, 4.0),
    ]
    data = gantt_data(records, {"scenario": "s", "iteration_times_s": [4.0]})
    assert data.rows == ["gpu0", "gpu1"]
    assert data.bubble == pytest.approx([0.25, 0.5], rel=1e-12)


def test_big_runs_aggregate_rows_and_say_so() -> None:
    records, summary = pipeline_records(stages=4, dp=20, micro=2, iterations=1)
    del summary["per_device_bubble"]
    data = gantt_data(records, summary)
    assert 4 * 20 > MAX_ROWS
    assert data.rows == ["d0s0", "d0s1", "d0s2", "d0s3"]
    assert {b.row for b in data.boxes} == {0, 1, 2, 3}
    assert "one row per stage" in data.title
    assert all(b is not None for b in data.bubble)


def test_many_boxes_zoom_to_one_iteration_and_say_so() -> None:
    records, summary = pipeline_records(stages=4, dp=4, micro=160, iterations=3)
    assert len(records) > MAX_BOXES
    data = gantt_data(records, summary)
    assert "zoomed to iteration 3 of 3" in data.title
    start, end = data.window_s
    assert start == pytest.approx(sum(summary["iteration_times_s"][:2]))
    assert all(b.end_s > start and b.start_s < end for b in data.boxes)
    assert len(data.boxes) <= MAX_BOXES


def test_data_parallel_run_gantt() -> None:
    result = simulate(DP)
    data = gantt_data(result.records, result.summary)
    assert data.rows == ["gpu0"] and data.counts == [4]  # four identical replicas, x 4
    compute = [r for r in result.records if r.kind == "compute"]
    assert sum(b.kind != "communication" for b in data.boxes) == len(compute) / 4
    assert {b.kind for b in data.boxes} == {"forward", "backward", "compute", "communication"}
    assert len(data.iteration_ends_s) == 3


def test_memory_and_link_plots() -> None:
    memory = {
        "stage0": {"times_s": [0.0, 1.0, 2.0], "bytes": [0.0, 2e9, 0.0], "peak_bytes": 2e9},
        "stage1": {"times_s": [0.0, 1.5], "bytes": [0.0, 1e9], "peak_bytes": 1e9},
    }
    fig = memory_figure({"activation_memory": memory})
    assert fig is not None and len(fig.axes[0].lines) == 2
    assert memory_figure({}) is None
    links = [
        {"link": f"l{i}", "utilisation": i / 30, "busy_fraction": 0.5, "bytes": i}
        for i in range(30)
    ]
    fig = links_figure(links)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert len(labels) == 20 and labels[0] == "l29"
    assert links_figure([]) is None


def test_run_writes_gantt_for_training(tmp_path) -> None:
    """gantt.png, gantt.svg and trace.json, no temporary names left, the same bytes twice."""
    for d in ("a", "b"):
        assert main(["run", str(DP), "-o", str(tmp_path / d), "-q"]) == 0
    for name in ("gantt.png", "gantt.svg", "trace.json"):
        assert (tmp_path / "a" / name).stat().st_size > 0
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert not [p for p in (tmp_path / "a").iterdir() if p.name.startswith(".")]


def test_report_command_writes_html(tmp_path, capsys) -> None:
    main(["run", str(DP), "-o", str(tmp_path), "-q"])
    (tmp_path / "gantt.png").unlink()
    capsys.readouterr()
    assert main(["report", str(tmp_path)]) == 0
    assert "report.html" in capsys.readouterr().out
    page = (tmp_path / "report.html").read_text()
    assert (tmp_path / "gantt.png").exists() and (tmp_path / "gantt.svg").exists()
    assert "dp-overlap" in page and "Per device" in page and "gpu3" in page
    assert page.count("data:image/png;base64,") == 3  # Gantt, heatmap, links (no memory)
    assert 'id="gantt-image"' in page and 'id="heatmap-image"' in page
    assert "iteration_time_s" in page  # in the raw summary only
    devices = (tmp_path / "devices.csv").read_text().splitlines()
    assert len(devices) == 5 and all(row.split(",")[-1] for row in devices)  # every bubble


def test_report_is_the_same_from_a_finished_folder(tmp_path) -> None:
    """The records read back from timeline.csv draw the same Gantt data as the run's."""
    result = simulate(DP)
    result.write(tmp_path)
    back = read_timeline(tmp_path / "timeline.csv")
    assert len(back) == len(result.records)
    a = gantt_data(result.records, result.summary)
    b = gantt_data(back, json.loads((tmp_path / "summary.json").read_text()))
    assert a.rows == b.rows and len(a.boxes) == len(b.boxes)
    assert [x.kind for x in a.boxes] == [x.kind for x in b.boxes]


ODD_NAMES = ("a,b", 'say "hi"', "line\nbreak")
"""Device names holding a comma, quotes and a line break (a custom cluster allows them)."""


def test_csv_files_quote_names_with_commas_quotes_and_line_breaks(tmp_path, capsys) -> None:
    """links.csv and timeline.csv go through the csv module: odd link and device names are
    quoted and read back whole, by Python's csv, by read_links / read_timeline (pandas) and by
    `clustersim report`."""
    import csv

    from clustersim.outputs.links import read_links
    from clustersim.scenario import parse_scenario

    a, b, c = ODD_NAMES
    doc = {
        "name": "odd-names",
        "cluster": {
            "kind": "custom",
            "devices": [{"name": a}, {"name": b}, {"name": c}],
            "switches": ["sw"],
            "links": [{"src": n, "dst": "sw", "bandwidth": "10GB/s"} for n in ODD_NAMES],
        },
        "workload": {
            "program": [
                {"id": "t1", "transfer": {"src": a, "dst": b, "bytes": "1MB"}},
                {"id": "t2", "transfer": {"src": c, "dst": a, "bytes": "2MB"}},
            ]
        },
    }
    result = simulate(parse_scenario(doc))
    result.write(tmp_path)
    with open(tmp_path / "links.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    names = {f"{a}->sw", f"sw->{b}", f"{c}->sw", f"sw->{a}"}
    assert {row["link"] for row in rows} == names
    assert {row["link"] for row in read_links(tmp_path / "links.csv")} == names
    back = read_timeline(tmp_path / "timeline.csv")
    assert {(r.src, r.dst) for r in back} == {(a, b), (c, a)}
    assert main(["report", str(tmp_path)]) == 0, capsys.readouterr().err


def test_csv_of_ordinary_names_is_unquoted() -> None:
    """Names without a comma, quote or line break are written as they are (the files of every
    shipped scenario are byte-for-byte what they were)."""
    from clustersim.outputs.links import links_csv

    row = {
        "link": "rack0/node0/gpu0->rack0/node0/pcie",
        "bandwidth_Bps": 3.2e10,
        "bytes": 1.5e6,
        "busy_s": 0.001,
        "busy_fraction": 0.5,
        "utilisation": 0.25,
        "peak_flows": 2,
    }
    assert links_csv([row]) == (
        "link,bandwidth_Bps,bytes,busy_s,busy_fraction,utilisation,peak_flows\n"
        "rack0/node0/gpu0->rack0/node0/pcie,32000000000.0,1500000.0,0.001,0.5,0.25,2\n"
    )
    assert links_csv([{**row, "link": 'x,"y"->z'}]).splitlines()[1].startswith('"x,""y""->z",')


@pytest.mark.parametrize(
    "breakage, named",
    [
        ("no-dir", "nothere"),
        ("summary.json", "summary.json"),
        ("timeline.csv", "timeline.csv"),
        ("links.csv", "links.csv"),
        ("garbled-summary", "summary.json"),
        ("garbled-timeline", "timeline.csv"),
    ],
)
def test_report_fails_cleanly(tmp_path, capsys, breakage: str, named: str) -> None:
    run = tmp_path / "run"
    main(["run", str(DP), "-o", str(run), "-q"])
    target = run
    if breakage == "no-dir":
        target = tmp_path / "nothere"
    elif breakage.startswith("garbled-summary"):
        (run / "summary.json").write_text("{not json")
    elif breakage.startswith("garbled-timeline"):
        (run / "timeline.csv").write_text("a,b\n1,2\n")
    else:
        (run / breakage).unlink()
    capsys.readouterr()
    assert main(["report", str(target)]) == 2
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err
    assert not (run / "report.html").exists()


def test_write_report_returns_paths(tmp_path) -> None:
    simulate(DP).write(tmp_path)
    names = [p.name for p in write_report(tmp_path)]
    assert names == ["gantt.png", "gantt.svg", "devices.csv", "report.html"]


PIPELINE = SCENARIOS / "pipeline"


def test_pipeline_gantt_rows_boxes_and_bubbles(tmp_path) -> None:
    """A shipped 1F1B scenario: a row per stage device, a box per compute record, its bubbles."""
    result = simulate(PIPELINE / "1f1b_m8.yaml")
    summary = result.summary
    fig = gantt_figure(result.records, summary)
    data = fig.gantt_data
    devices = {r.resource for r in result.records}
    assert sorted(data.rows) == sorted(devices) and len(data.rows) == summary["stages"]
    assert data.groups == [f"stage {s}" for s in range(summary["stages"])]
    compute = [r for r in result.records if r.kind == "compute"]
    counts = gantt_counts(fig)
    assert counts["forward"] + counts["backward"] + counts.get("compute", 0) == len(compute)
    assert sum(counts.values()) == len(result.records)
    assert data.bubble == pytest.approx([summary["per_device_bubble"][d] for d in data.rows])
    assert "1f1b" in fig.axes[0].get_title()
    if summary.get("activation_memory"):
        assert memory_figure(summary) is not None
    result.write(tmp_path)
    assert main(["report", str(tmp_path)]) == 0
    assert (tmp_path / "report.html").read_text().count("data:image/png;base64,") >= 2


def test_report_ends_with_the_lines_to_read_first(tmp_path, capsys) -> None:
    """After writing report.html, report prints the run's iteration, bubble and memory lines
    as run printed them, then where the page and the chart are."""
    scenario = SCENARIOS / "pipeline" / "dgx_a100_llama2_7b.yaml"
    assert main(["run", str(scenario), "-o", str(tmp_path)]) == 0
    run = capsys.readouterr().out.splitlines()
    assert main(["report", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("wrote ") and len(lines) == 5
    assert lines[1:4] == [
        line for line in run if line.split()[0] in ("iteration", "bubble", "memory")
    ]
    assert lines[4] == f"report    {tmp_path / 'report.html'}; Gantt chart {tmp_path / 'gantt.png'}"


def test_report_of_a_partial_summary_prints_no_guess(tmp_path, capsys) -> None:
    """A summary.json clustersim did not write whole (here without its iteration times) still
    gets its page; the lines to read first are left out rather than guessed."""
    main(["run", str(DP), "-o", str(tmp_path), "-q"])
    summary = json.loads((tmp_path / "summary.json").read_text())
    del summary["iteration_times_s"]
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    capsys.readouterr()
    assert main(["report", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["wrote", "report"]


def test_report_html_escapes_every_value() -> None:
    """report.html comes from a template with autoescaping: summary values are text, not markup."""
    page = report_html({"scenario": "<script>x</script>", "note": "a & b"}, [], [])
    assert "<script>" not in page
    assert "&lt;script&gt;x&lt;/script&gt;" in page and "a &amp; b" in page


def test_the_api_keeps_the_output_names_the_cli_imports() -> None:
    """clustersim.api keeps the output names the CLI and users import from it, as the very
    objects of clustersim.outputs (the old clustersim.report and clustersim.trace paths:
    tests/test_compat.py)."""
    import clustersim.api
    from clustersim.outputs import atomic, links

    assert clustersim.api.write_atomic is atomic.write_atomic
    assert clustersim.api.LINK_COLUMNS is links.LINK_COLUMNS
