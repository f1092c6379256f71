"""`clustersim compare` and clustersim.studies.sweep: key paths, grids, tables, plot, parallel runs."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from clustersim.cli import main
from clustersim.errors import ScenarioError
from clustersim.studies import sweep

from .conftest import SCENARIOS

N1 = SCENARIOS / "validation" / "n1_oversubscribed_uplink.yaml"
D1 = SCENARIOS / "validation" / "d1_one_gpu_aggregates.yaml"
RING = SCENARIOS / "collectives" / "oversubscribed_ring.yaml"
HIER = SCENARIOS / "collectives" / "oversubscribed_hierarchical.yaml"

# n1 is 2 racks x 2 nodes, 10 Gb/s NICs: two 1 GB flows across the uplink. With
# uplink = 2 x 10 Gb/s / ratio, they share it: 1 GB / min(1.25 GB/s, 2.5 GB/s / ratio / 2).
N1_TIMES = {1: 0.8, 2: 1.6, 4: 3.2}


def read_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


# --------------------------------------------------------------------------- key paths


def test_parse_key_path() -> None:
    """Dotted keys with [i] indices; malformed paths name --set."""
    assert sweep.parse_key_path("a.b[2].c") == ["a", "b", 2, "c"]
    assert sweep.parse_key_path("seed") == ["seed"]
    assert sweep.parse_key_path("w.program[0][1]") == ["w", "program", 0, 1]
    for bad in ("", "a..b", ".a", "a.", "[0]", "a[x]", "a[0"):
        with pytest.raises(ScenarioError, match="--set: bad key path"):
            sweep.parse_key_path(bad)


def test_set_path_nested_list_and_created() -> None:
    """Nested keys and list indices are set in a copy; a missing last key is created."""
    doc = {"a": {"b": [{"c": 1}, {"c": 2}]}, "x": 0}
    out = sweep.set_path(doc, ["a", "b", 1, "c"], 5)
    assert out["a"]["b"][1]["c"] == 5 and doc["a"]["b"][1]["c"] == 2
    assert sweep.set_path(doc, ["a", "new"], "v")["a"]["new"] == "v"
    assert sweep.set_path(doc, ["a", "b", -1, "c"], 9)["a"]["b"][1]["c"] == 9
    created = sweep.set_path(doc, ["a", "missing", "c"], 3)
    assert created["a"]["missing"] == {"c": 3} and "missing" not in doc["a"]
    assert sweep.set_path({"s": None}, ["s", "k"], 1) == {"s": {"k": 1}}


@pytest.mark.parametrize(
    ("path", "where", "what"),
    [
        (["a", "missing", 0], "a.missing", "no such list in the document"),
        (["a", "b", 5, "c"], "a.b[5]", "out of range"),
        (["x", "y"], "x.y", "cannot set key 'y' inside the value 0"),
        (["a", 0], "a[0]", "indexes a list, but this is a mapping"),
    ],
)
def test_set_path_bad(path: list, where: str, what: str) -> None:
    """A missing list, an index out of range or the wrong kind names the key path."""
    doc = {"a": {"b": [{"c": 1}]}, "x": 0}
    with pytest.raises(ScenarioError) as info:
        sweep.set_path(doc, path, 1)
    assert info.value.problems[0].path == where
    assert what in info.value.problems[0].message


# --------------------------------------------------------------------------- values and grids


def test_parse_value_as_yaml_scalars() -> None:
    assert sweep.parse_value("4") == 4 and isinstance(sweep.parse_value("4"), int)
    assert sweep.parse_value("2.5") == 2.5
    assert sweep.parse_value("1e3") == "1e3"  # YAML 1.1: not a float without a dot
    assert sweep.parse_value("true") is True
    assert sweep.parse_value("100Gb/s") == "100Gb/s"
    assert sweep.parse_value(" ring ") == "ring"
    assert sweep.parse_value("null") is None  # as in Hydra: null is None


def test_parse_set() -> None:
    setting = sweep.parse_set("cluster.rack_uplink.oversubscription=1,2,4")
    assert setting.key == "cluster.rack_uplink.oversubscription"
    assert setting.path == ("cluster", "rack_uplink", "oversubscription")
    assert setting.values == (1, 2, 4)
    for bad in ("nokey", "=1", "a=", "a=1,,2"):
        with pytest.raises(ScenarioError, match="--set"):
            sweep.parse_set(bad)


def test_grid_expansion() -> None:
    """Several settings give their cartesian product, the first key varying slowest."""
    grid = sweep.expand_grid([sweep.parse_set("a=1,2"), sweep.parse_set("b=x,y,z")])
    assert len(grid) == 6
    assert grid[:3] == [{"a": 1, "b": "x"}, {"a": 1, "b": "y"}, {"a": 1, "b": "z"}]
    assert sweep.expand_grid([]) == [{}]
    with pytest.raises(ScenarioError, match="twice"):
        sweep.expand_grid([sweep.parse_set("a=1"), sweep.parse_set("a=2")])


def test_build_jobs_revalidates_each_point() -> None:
    """A value the scenario rejects is an error naming the file and the key path."""
    jobs = sweep.build_jobs([N1], [sweep.parse_set("cluster.rack_uplink.oversubscription=1,2")])
    assert [j.point for j in jobs] == [
        {"cluster.rack_uplink.oversubscription": 1},
        {"cluster.rack_uplink.oversubscription": 2},
    ]
    assert jobs[1].doc["cluster"]["rack_uplink"]["oversubscription"] == 2
    with pytest.raises(ScenarioError) as info:
        sweep.build_jobs([N1], [sweep.parse_set("cluster.rack_uplink.oversubscription=0")])
    assert str(N1) in str(info.value)
    assert "cluster.rack_uplink.oversubscription" in str(info.value)


# --------------------------------------------------------------------------- the command


def test_compare_writes_csv_md_png(tmp_path: Path) -> None:
    """Columns scenario, key, metric, makespan_s; fallback to makespan noted; values as N1."""
    out = tmp_path / "cmp"
    key = "cluster.rack_uplink.oversubscription"
    assert main(["compare", str(N1), "--set", f"{key}=1,2,4", "-j", "2", "-o", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "compare.csv",
        "compare.md",
        "compare.png",
        "compare.svg",
    ]
    rows = read_rows(out / "compare.csv")
    assert list(rows[0]) == ["scenario", key, "iteration_time_s", "makespan_s", "note"]
    assert [float(r["iteration_time_s"]) for r in rows] == pytest.approx(list(N1_TIMES.values()))
    assert all("makespan_s" in r["note"] for r in rows)
    md = (out / "compare.md").read_text()
    assert f"| scenario | {key} | iteration_time_s | makespan_s | note |" in md
    assert "show `makespan_s`" in md
    assert (out / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compare_other_metric_and_no_set(tmp_path: Path) -> None:
    """--metric picks any numeric summary key; without --set each scenario runs once."""
    assert (
        main(["compare", str(RING), "--metric", "busbw_GBps", "-j", "1", "-o", str(tmp_path)]) == 0
    )
    rows = read_rows(tmp_path / "compare.csv")
    assert list(rows[0]) == ["scenario", "busbw_GBps", "makespan_s"]
    assert len(rows) == 1 and float(rows[0]["busbw_GBps"]) > 0


def test_parallel_same_as_serial(tmp_path: Path) -> None:
    """-j 2 gives the same table, in the same order, as -j 1."""
    args = [str(N1), str(D1), "--set", "seed=0,1,2"]
    assert main(["compare", *args, "-j", "1", "-o", str(tmp_path / "one")]) == 0
    assert main(["compare", *args, "-j", "2", "-o", str(tmp_path / "two")]) == 0
    one = (tmp_path / "one" / "compare.csv").read_text()
    assert one == (tmp_path / "two" / "compare.csv").read_text()
    assert [r["scenario"] for r in read_rows(tmp_path / "one" / "compare.csv")] == [
        "n1-oversubscribed-uplink"
    ] * 3 + ["d1-one-gpu-aggregates"] * 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "cluster.rack_uplink.oversubscription=x"], "must be a number"),
        (
            ["--set", "cluster.nodes.x=1"],
            "with --set cluster.nodes.x=1: cluster.nodes: unknown key",
        ),
        (["--set", "cluster.node.gpus[0]=1"], "cluster.node.gpus[0]"),
        (["--set", "bad"], "--set: expected KEY=V1,V2"),
        (["--metric", "nope"], "no numeric key 'nope'"),
        (["-j", "0"], "-j: expected a whole number"),
    ],
)
def test_bad_input_exits_2(tmp_path: Path, capsys, args: list[str], message: str) -> None:
    """Bad values, paths, flags and metrics exit 2 with the file and key path, no traceback."""
    assert main(["compare", str(N1), *args, "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_missing_file_exits_2(tmp_path: Path, capsys) -> None:
    assert main(["compare", str(tmp_path / "none.yaml"), "-o", str(tmp_path)]) == 2
    assert "none.yaml" in capsys.readouterr().err


# --------------------------------------------------------------------------- plot and reading


def fake_rows() -> list[dict]:
    """Two scenarios x two values of b x four ratios, times in seconds."""
    return [
        {"scenario": s, "r": r, "b": b, "t": (1 + i) * r * (2 if b == "y" else 1)}
        for i, s in enumerate(["ring", "ps"])
        for r in (1, 2, 4, 16)
        for b in ("x", "y")
    ]


def test_plot_one_line_per_scenario() -> None:
    """One line per scenario; a log x axis when the values span >= 8x; labels and title."""
    rows = [r for r in fake_rows() if r["b"] == "x"]
    fig = sweep.plot_figure(rows, ["r"], "t", "title")
    ax = fig.axes[0]
    assert [line.get_label() for line in ax.get_lines()] == ["ring", "ps"]
    assert list(ax.get_lines()[1].get_xdata()) == [1, 2, 4, 16]
    assert list(ax.get_lines()[1].get_ydata()) == [2, 4, 8, 32]
    assert ax.get_xscale() == "log"
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) == ("r", "t", "title")
    assert ax.get_legend() is not None
    assert ax.get_yscale() == "linear"
    narrow = sweep.plot_figure([r for r in rows if r["r"] < 16], ["r"], "t")
    assert narrow.axes[0].get_xscale() == "linear"
    wide = [{**r, "t": r["t"] ** 3} for r in rows]  # 1 .. 32768: a log y axis
    assert sweep.plot_figure(wide, ["r"], "t").axes[0].get_yscale() == "log"


def test_plot_grid_lines_per_scenario_and_other_values() -> None:
    """With two keys: x is the first, one line per scenario x value of the second."""
    ax = sweep.plot_figure(fake_rows(), ["r", "b"], "t").axes[0]
    assert [line.get_label() for line in ax.get_lines()] == [
        "ring (b=x)",
        "ring (b=y)",
        "ps (b=x)",
        "ps (b=y)",
    ]


def test_reading_names_the_winner_per_value() -> None:
    rows = [
        {"scenario": "ring", "model": "m", "k": 1, "t": 0.010},
        {"scenario": "ps", "model": "m", "k": 1, "t": 0.020},
        {"scenario": "ring", "model": "m", "k": 4, "t": 0.050},
        {"scenario": "ps", "model": "m", "k": 4, "t": 0.030},
    ]
    text = sweep.reading(rows, "k", "t")
    assert "## m" in text
    assert "k = 1: **ring** is fastest (10.0 ms), 100.0% ahead of ps" in text
    assert "k = 4: **ps** is fastest (30.0 ms)" in text
    assert "changes from ring to ps between k = 1 and 4" in text


def test_write_reading_from_csv(tmp_path: Path) -> None:
    """write_reading reads compare.csv back and writes README.md."""
    key = "cluster.rack_uplink.oversubscription"
    main(["compare", str(N1), "--set", f"{key}=1,2", "-j", "1", "-o", str(tmp_path)])
    path = sweep.write_reading(tmp_path, key)
    assert "n1-oversubscribed-uplink wins at every" in path.read_text()


def test_run_jobs_reports_progress_in_order() -> None:
    """progress(done, total) once per job; results come back in job order either way."""
    jobs = sweep.build_jobs([N1, D1], [])
    for workers in (1, 2):
        calls: list[tuple[int, int]] = []

        def note(done: int, total: int, calls: list = calls) -> None:
            calls.append((done, total))

        results = sweep.run_jobs(jobs, workers, progress=note)
        assert calls == [(1, 2), (2, 2)]
        assert [r["makespan_s"] for r in results] == pytest.approx([1.6, 0.06])


def test_plot_one_panel_per_model() -> None:
    """Rows of two models: two panels titled by model, each with its own scenarios'
    lines, under the figure's title."""
    rows = [
        {"scenario": f"{m}-{s}", "model": m, "r": r, "t": r * (2 if s == "ps" else 1)}
        for m in ("bert", "resnet")
        for s in ("ring", "ps")
        for r in (1, 2, 4)
    ]
    fig = sweep.plot_figure(rows, ["r"], "t", "title")
    assert [ax.get_title() for ax in fig.axes] == ["bert", "resnet"]
    assert [line.get_label() for line in fig.axes[1].get_lines()] == ["resnet-ring", "resnet-ps"]
    assert fig._suptitle.get_text() == "title"
