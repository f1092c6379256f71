"""`clustersim collective`: nccl-tests style sweeps, their outputs and their errors."""

from __future__ import annotations

import csv
import importlib
import json
import re
import sys

import pytest

from clustersim.cli import main, progress
from clustersim.collectives import OPERATIONS, applicable_algorithms, registered_algorithms
from clustersim.errors import ScenarioError
from clustersim.scenario.shorthand import flat_cluster, load_cluster, scenario_of
from clustersim.studies import collective_sweep
from clustersim.studies.collective_sweep import ROW_KEYS, parse_sizes, plot_figure, sweep
from clustersim.topology import build_topology

from .conftest import SCENARIOS

DGX = SCENARIOS / "clusters" / "dgx-a100-4nodes.yaml"
R1 = [
    "--op", "allreduce", "--algorithm", "ring", "--bytes", "160MB",
    "--devices", "8", "--topology", "ring", "--bandwidth", "54GB/s",
    "--protocol", "none", "--channels", "1",
]  # fmt: skip
"""R1 as the textbook runs it: a ring at line rates, no NCCL protocol, one channel."""


def run_json(capsys, *argv: str) -> list[dict]:
    """Rows printed by ``clustersim collective ARGV --json``."""
    assert main(["collective", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def fail(capsys, *argv: str) -> str:
    """stderr of a run that must exit 2 without a traceback."""
    assert main(["collective", *argv]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def applicable(op: str, cluster: dict) -> list[str]:
    """What ``--algorithm all`` runs: the applicable algorithms but ``auto`` (a chooser)."""
    topology = build_topology(scenario_of(cluster).cluster)
    return [a for a in applicable_algorithms(op, tuple(topology.devices), topology) if a != "auto"]


# --------------------------------------------------------------------------- rows


def test_json_rows_have_exactly_the_documented_keys(capsys) -> None:
    """--json prints a list of rows with keys exactly op, algorithm, bytes, devices, time_s,
    algbw_GBps, busbw_GBps, chosen (what ran: the algorithm, with its protocol if any),
    protocol (``none``: line rates) and channels."""
    rows = run_json(capsys, *R1)
    assert len(rows) == 1
    assert list(rows[0]) == list(ROW_KEYS)
    assert set(rows[0]) == {
        "op", "algorithm", "bytes", "devices", "time_s", "algbw_GBps", "busbw_GBps", "chosen",
        "protocol", "channels",
    }  # fmt: skip
    assert rows[0]["chosen"] == "ring"
    assert (rows[0]["protocol"], rows[0]["channels"]) == ("none", 1)
    assert rows[0]["op"] == "allreduce" and rows[0]["algorithm"] == "ring"
    assert rows[0]["bytes"] == 160_000_000 and rows[0]["devices"] == 8


def test_r1_ring_allreduce_through_the_cli(capsys) -> None:
    """R1: 8 GPUs in a ring at 54 GB/s, 160 MB ring all-reduce = 2 x 7/8 x 160 MB / 54 GB/s = 5.185 ms."""
    (row,) = run_json(capsys, *R1)
    assert row["time_s"] == pytest.approx(5.185e-3, rel=5e-3)
    assert row["time_s"] == pytest.approx(2 * 7 / 8 * 160e6 / 54e9, rel=1e-9)
    assert row["algbw_GBps"] == pytest.approx(160e6 / row["time_s"] / 1e9, rel=1e-12)
    assert row["busbw_GBps"] == pytest.approx(2 * 7 / 8 * row["algbw_GBps"], rel=1e-12)
    assert row["busbw_GBps"] == pytest.approx(54.0, rel=1e-9)  # busbw equals the link bandwidth


def test_op_aliases_and_latency(capsys) -> None:
    """`all-reduce` is allreduce; --latency adds 2(n-1) hop latencies to the ring (R2)."""
    argv = [*R1[2:], "--op", "all-reduce", "--latency", "1us"]
    (row,) = run_json(capsys, *argv)
    assert row["op"] == "allreduce"
    assert row["time_s"] == pytest.approx(2 * 7 / 8 * 160e6 / 54e9 + 2 * 7 * 1e-6, rel=1e-9)


def test_analytical_model_and_iterations_agree_with_flow(capsys) -> None:
    """Uncontended ring: --model analytical gives the flow time; --iterations 3 the same time per run."""
    (flow,) = run_json(capsys, *R1)
    (analytical,) = run_json(capsys, *R1, "--model", "analytical")
    (repeated,) = run_json(capsys, *R1, "--iterations", "3")
    assert analytical["time_s"] == pytest.approx(flow["time_s"], rel=1e-9)
    assert repeated["time_s"] == pytest.approx(flow["time_s"], rel=1e-9)


# --------------------------------------------------------------------------- sizes


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("64MB", [64e6]),
        ("1MB:1GB:x4", [1e6, 4e6, 16e6, 64e6, 256e6]),
        ("1MB:64MB:x4", [1e6, 4e6, 16e6, 64e6]),
        ("1KiB:1MiB:x2", [2.0**k for k in range(10, 21)]),
        ("1MB:4MB:+1MB", [1e6, 2e6, 3e6, 4e6]),
        ("1MB:4.5MB:+1MB", [1e6, 2e6, 3e6, 4e6]),
        ("8MB:8MB:x2", [8e6]),
        ("0:2kB:+1kB", [0.0, 1e3, 2e3]),
    ],
)
def test_parse_sizes(text: str, expected: list[float]) -> None:
    """SIZE, MIN:MAX:xF and MIN:MAX:+STEP expand to the sizes up to MAX included."""
    assert parse_sizes(text) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(("text", "count"), [("1MB:1GB:x4", 5), ("1MB:8MB:+1MB", 8)])
def test_size_ranges_through_the_cli(capsys, text: str, count: int) -> None:
    """One row per size of the range, in increasing order."""
    rows = run_json(capsys, *R1, "--bytes", text)
    assert len(rows) == count
    sizes = [r["bytes"] for r in rows]
    assert sizes == sorted(sizes) and sizes[0] == 1_000_000


# --------------------------------------------------------------------------- algorithms


@pytest.mark.parametrize("op", ["allreduce", "allgather"])
def test_algorithm_all_runs_every_applicable_algorithm(capsys, op: str) -> None:
    """--algorithm all: one row per applicable algorithm and size, busbw = algbw x nccl-tests factor."""
    cluster = flat_cluster("switch", 8, "25GB/s", "1us")
    names = applicable(op, cluster)
    assert {"ring", "direct"} <= set(names)
    argv = ["--op", op, "--algorithm", "all", "--bytes", "1MB:16MB:x4", "--devices", "8"]
    rows = run_json(capsys, *argv, "--bandwidth", "25GB/s", "--latency", "1us")
    assert [r["algorithm"] for r in rows[: len(names)]] == names
    assert len(rows) == 3 * len(names)
    factor = OPERATIONS[op].bus_factor(8)
    for row in rows:
        assert row["time_s"] > 0
        assert row["algbw_GBps"] == pytest.approx(row["bytes"] / row["time_s"] / 1e9, rel=1e-12)
        assert row["busbw_GBps"] == pytest.approx(factor * row["algbw_GBps"], rel=1e-12)
        # nothing beats the link: each device has one 25 GB/s uplink (a little slack for rounding)
        # to send its 2(n-1)/n S through -- S when the switch reduces (algbw <= 25 GB/s)
        bound = 25.0 * (factor if row["algorithm"] == "in_network" else 1.0)
        assert row["busbw_GBps"] <= bound * (1 + 1e-9)


def test_algorithm_all_lists_several_algorithms(capsys) -> None:
    """With several algorithms registered, the all-reduce table has a column group for each."""
    names = applicable("allreduce", flat_cluster("switch", 8, "25GB/s"))
    assert {"ring", "direct", "tree", "halving_doubling"} <= set(names)
    argv = ["collective", "--op", "allreduce", "--bytes", "1MB:4MB:x4", "--devices", "8"]
    assert main([*argv, "--algorithm", "all", "--protocol", "none"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("# allreduce on 8 devices, topology switch")
    assert all(name in out[1] for name in names)
    assert "time(us)" in out[2] and "busbw(GB/s)" in out[2]
    assert len(out) == 3 + 2 + 1  # header lines, one line per size, how it was priced
    assert out[-1] == "# protocol none, channels auto (1); links at their line rate"


def test_sweep_function_returns_rows() -> None:
    """collective_sweep.sweep is callable from Python and returns the same rows as the CLI."""
    scenario = scenario_of(flat_cluster("ring", 8, "54GB/s"))
    seen = []
    rows = sweep(
        scenario, "all_reduce", [160e6, 320e6], "ring", progress=lambda i, n: seen.append((i, n))
    )
    assert [r["bytes"] for r in rows] == [160_000_000, 320_000_000]
    assert rows[1]["time_s"] == pytest.approx(2 * rows[0]["time_s"], rel=1e-9)
    assert seen == [(1, 2), (2, 2)]


def test_group_selects_devices(capsys) -> None:
    """--group restricts the collective to the matching devices."""
    rows = run_json(capsys, *R1, "--group", "gpu[0-3]")
    assert rows[0]["devices"] == 4


# --------------------------------------------------------------------------- files


def test_csv_and_plot_files(tmp_path, capsys) -> None:
    """--csv writes the JSON rows as CSV, --plot a PNG and an SVG beside it; no temporary file is left behind."""
    out_csv, out_png = tmp_path / "rows.csv", tmp_path / "busbw.png"
    argv = [*R1, "--bytes", "1MB:16MB:x4", "--csv", str(out_csv), "--plot", str(out_png)]
    rows = run_json(capsys, *argv)
    with out_csv.open() as fh:
        read = list(csv.DictReader(fh))
    assert list(read[0]) == list(ROW_KEYS)
    assert len(read) == len(rows) == 3
    for got, want in zip(read, rows, strict=True):
        assert got["algorithm"] == want["algorithm"]
        assert float(got["bytes"]) == want["bytes"]
        assert float(got["time_s"]) == want["time_s"]
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["busbw.png", "busbw.svg", "rows.csv"]


def test_plot_has_one_line_per_algorithm() -> None:
    """The figure: busbw against size on a log x axis, one labelled line per algorithm."""
    rows = [
        {"algorithm": a, "bytes": s, "busbw_GBps": b}
        for a, scale in (("ring", 1.0), ("tree", 0.5), ("direct", 0.25))
        for s, b in ((1e6, 10.0 * scale), (4e6, 20.0 * scale), (0, 0.0))
    ]
    fig = plot_figure(rows, "allreduce on 8 devices, topology switch")
    (ax,) = fig.axes
    lines = ax.get_lines()
    assert [line.get_label() for line in lines] == ["ring", "tree", "direct"]
    assert list(lines[1].get_xdata()) == [1e6, 4e6]  # the 0-byte point has no place on a log axis
    assert list(lines[1].get_ydata()) == [5.0, 10.0]
    assert ax.get_xscale() == "log"
    assert "bytes" in ax.get_xlabel() and "GB/s" in ax.get_ylabel()
    assert "allreduce" in ax.get_title() and "8 devices" in ax.get_title()
    assert ax.get_legend() is not None


def test_plot_of_a_real_sweep(capsys) -> None:
    """The title names op, devices and topology; one line per algorithm run."""
    names = applicable("allreduce", flat_cluster("switch", 4, "25GB/s"))
    rows = sweep(scenario_of(flat_cluster("switch", 4, "25GB/s")), "allreduce", [1e6, 4e6])
    fig = plot_figure(rows, "allreduce on 4 devices, topology switch")
    assert len(fig.axes[0].get_lines()) == len(names)


# --------------------------------------------------------------------------- clusters


def test_cluster_file(capsys, tmp_path) -> None:
    """--cluster takes a scenario file; the group defaults to every GPU."""
    path = DGX
    if not path.exists():  # pragma: no cover - written by another engineer
        path = tmp_path / "dgx.yaml"
        path.write_text(
            "cluster:\n  nodes_per_rack: 4\n  node:\n    gpus: 8\n"
            "    pcie: {bandwidth: 32GB/s}\n    nvlink: {bandwidth: 300GB/s}\n"
            "    nic: {bandwidth: 200Gb/s}\n"
        )
    rows = run_json(
        capsys, "--op", "allgather", "--algorithm", "all", "--bytes", "64MB", "--cluster", str(path)
    )
    assert rows and {r["devices"] for r in rows} == {32}
    assert all(r["time_s"] > 0 for r in rows)


@pytest.mark.parametrize(
    "text",
    [
        "kind: ring\ndevices: 8\nlink: {bandwidth: 54GB/s}\n",  # a bare cluster section
        "cluster: {kind: ring, devices: 8, link: {bandwidth: 54GB/s}}\n",  # no name, no workload
        "name: x\ncluster: {kind: ring, devices: 8, link: {bandwidth: 54GB/s}}\n"
        "workload: {program: []}\n",  # a full scenario
    ],
)
def test_cluster_file_forms(capsys, tmp_path, text: str) -> None:
    """A cluster section alone, a scenario without workload and a full scenario all give R1."""
    path = tmp_path / "c.yaml"
    path.write_text(text)
    argv = ["--op", "allreduce", "--algorithm", "ring", "--bytes", "160MB", "--cluster", str(path)]
    (row,) = run_json(capsys, *argv, "--protocol", "none")
    assert row["time_s"] == pytest.approx(2 * 7 / 8 * 160e6 / 54e9, rel=1e-9)


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("kind: ring\ndevices: 8\nlink: {bandwith: 54GB/s}\n", "link.bandwith"),
        ("cluster: {kind: ring, devices: 8, link: {bandwidth: 54}}\n", "cluster.link.bandwidth"),
        ("name: x\nworkload: {program: []}\n", "cluster"),
        ("- 1\n- 2\n", "mapping"),
        ("cluster: {kind: ring\n", "invalid YAML"),
    ],
)
def test_bad_cluster_file_names_file_and_key(capsys, tmp_path, text: str, where: str) -> None:
    """A bad --cluster file: exit 2, the message names the file and the key path."""
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    err = fail(capsys, "--op", "allreduce", "--cluster", str(path))
    assert str(path) in err and where in err
    with pytest.raises(ScenarioError):
        load_cluster(path)


def test_two_tier_from_flags(capsys) -> None:
    """--topology two_tier builds racks x nodes x GPUs; --devices must agree with them."""
    argv = ["--op", "allreduce", "--algorithm", "ring", "--bytes", "1MB", "--topology", "two_tier"]
    rows = run_json(capsys, *argv, "--racks", "2", "--gpus-per-node", "2", "--nvlink", "none")
    assert rows[0]["devices"] == 2 * 2 * 2
    err = fail(capsys, *argv, "--devices", "5")
    assert "--devices" in err and "= 16" in err  # defaults: 1 rack x 2 nodes x 8 GPUs


# --------------------------------------------------------------------------- bad input


BAD = [
    (["--op", "allredcue", "--devices", "4"], "did you mean 'allreduce'"),
    (["--op", "allreduce", "--algorithm", "rign", "--devices", "4"], "did you mean 'ring'"),
    (["--op", "allreduce", "--algorithm", "nosuch", "--devices", "4"], "unknown algorithm"),
    (["--op", "allreduce", "--devices", "4", "--bytes", "1GB:1MB:x2"], "larger than its maximum"),
    (["--op", "allreduce", "--devices", "4", "--bytes", "1MB:1GB:x1"], "larger than 1"),
    (["--op", "allreduce", "--devices", "4", "--bytes", "1MB:1GB:+0"], "larger than 0"),
    (["--op", "allreduce", "--devices", "4", "--bytes", "1MB:1GB"], "cannot read size range"),
    (["--op", "allreduce", "--devices", "4", "--bytes", "1MB:1GB:/2"], "cannot read range step"),
    (["--op", "allreduce", "--devices", "4", "--bytes", "12"], "--bytes"),
    (["--op", "allreduce", "--devices", "4", "--bytes", "1B:1GB:+1B"], "at most"),
    (["--op", "allreduce"], "--devices"),
    (["--op", "allreduce", "--devices", "4", "--bandwidth", "5"], "--bandwidth"),
    (["--op", "allreduce", "--devices", "4", "--latency", "1 parsec"], "--latency"),
    (["--op", "allreduce", "--devices", "4", "--racks", "2"], "two_tier"),
    (["--op", "allreduce", "--devices", "4", "--group", "cpu*"], "--group"),
    (["--op", "broadcast", "--devices", "4", "--root", "9"], "--root"),
    (["--op", "allreduce", "--devices", "4", "--iterations", "0"], "--iterations"),
    (["--op", "allreduce", "--devices", "4", "--chunk", "0"], "--chunk"),
    (["--op", "allreduce", "--cluster", "nosuch.yaml"], "file not found"),
    (["--op", "allreduce", "--cluster", "x.yaml", "--devices", "4"], "cannot be combined"),
]


@pytest.mark.parametrize(("argv", "message"), BAD)
def test_bad_input_exits_2_with_one_clear_message(capsys, argv: list[str], message: str) -> None:
    """Bad input: exit 2, the key message on stderr, nothing on stdout, no traceback."""
    err = fail(capsys, *argv)
    assert message in err
    assert err.startswith("clustersim: error")


ONE_RANK = "the group has 1 device (gpu0); a collective needs at least 2"


@pytest.mark.parametrize("op", list(OPERATIONS))
def test_one_rank_group_is_refused_for_every_operation(capsys, op: str) -> None:
    """A group of one rank is refused, for every operation, by the command and by the
    ``collective`` workload alike (``--op alltoall --devices 1`` used to exit 0 with times
    of 0 and undefined bandwidths)."""
    from clustersim.api import prepare
    from clustersim.scenario import parse_scenario

    for argv, flag in (
        (["--op", op, "--devices", "1", "--bytes", "1MB"], "--devices"),
        (["--op", op, "--devices", "4", "--group", "gpu0", "--bytes", "1MB"], "--group"),
    ):
        assert f"{flag}: {ONE_RANK}" in fail(capsys, *argv)
    doc = {
        "name": "one",
        "cluster": flat_cluster("switch", 4, "10GB/s"),
        "workload": {"collective": op, "bytes": "1MB", "group": "gpu0"},
    }
    with pytest.raises(ScenarioError, match=re.escape(f"workload.group: {ONE_RANK}")):
        prepare(parse_scenario(doc))


@pytest.mark.parametrize("op", ["allreduce", "broadcast", "allgather"])
def test_root_must_be_a_rank_for_every_operation(capsys, op: str) -> None:
    """``--root`` is 0 .. ranks - 1 for every operation (the root algorithm centres
    non-rooted ones on it: ``--op allreduce --root 99`` used to end in a traceback)."""
    for root in ("4", "99", "-1"):
        err = fail(capsys, "--op", op, "--devices", "4", "--bytes", "1MB", "--root", root)
        assert f"--root: root {root} is not a rank of the group of 4 (allowed: 0 .. 3)" in err


def test_algorithm_not_applicable(capsys) -> None:
    """An algorithm that does not implement the operation: exit 2 naming the usable ones."""
    assert "alltoall" not in registered_algorithms()["tree"].ops
    err = fail(capsys, "--op", "alltoall", "--algorithm", "tree", "--devices", "4")
    assert "tree" in err and "alltoall" in err


def test_no_progress_without_a_terminal(capsys) -> None:
    """The progress indicator only appears when stderr is a terminal."""
    assert main(["collective", *R1, "--bytes", "1MB:1GB:x2"]) == 0
    assert capsys.readouterr().err == ""


def test_progress_on_a_terminal(capsys, monkeypatch) -> None:
    """On a terminal, a sweep estimated long enough to watch shows a bar of its events
    (1,200 here: 10 points of 7 x 2 x 8 sends + 8 rows; the one-second threshold set to 0),
    then clears it; work estimated under a second shows none; --quiet turns it off."""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    argv = ["collective", *R1, "--bytes", "1MB:1GB:x2", "--json"]
    assert main(argv) == 0  # 1,200 events: 0.02 s at 60,000/s
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(progress, "WATCH_AFTER_S", 0.0)
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "  collective [" in captured.err
    assert "], 0 of 1,200 events, ? left" in captured.err
    assert "[========================], 1,200 of 1,200 events, " in captured.err
    assert captured.err.endswith("\r")
    assert len(json.loads(captured.out)) == 10
    assert main([*argv, "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_a_long_point_reports_progress_while_it_runs(monkeypatch) -> None:
    """Within one point the progress advances with the transfers started, every
    STEPS_PER_CHECK steps (64 here): a ring all-reduce of 1 MB in 1 kB chunks on 4 ranks
    is 6 x 1,000 sends + 4 rows, and the counts reported climb to that, never past it."""
    monkeypatch.setattr("clustersim.engine.STEPS_PER_CHECK", 64)
    scenario = scenario_of(flat_cluster("switch", 4, "25GB/s", "1us"))
    seen: list[tuple[float, float]] = []
    rows = sweep(
        scenario,
        "allreduce",
        [1e6],
        "ring",
        chunk_bytes=1000.0,
        work_progress=lambda d, t: seen.append((d, t)),
    )
    assert len(rows) == 1
    assert {total for _, total in seen} == {6004.0}
    done = [d for d, _ in seen]
    assert done[0] == 0.0 and done[-1] == 6004.0 and done == sorted(done)
    assert len([d for d in done if 0 < d < 6004]) >= 10  # within the point, not after it


@pytest.mark.parametrize("model", ["flow", "analytical"])
@pytest.mark.parametrize("channels", [2, 8])
def test_channels_flag_splits_a_ring_without_changing_its_time_alone(
    capsys, model: str, channels: int
) -> None:
    """--channels N: N rings of S/N share every hop of an idle switch, so the time is one
    ring's, 2 (n-1)/n S / B (latency 0, 1e-9); --channels 0 is refused."""
    argv = ["--op", "allreduce", "--algorithm", "ring", "--bytes", "64MB", "--devices", "8"]
    argv += ["--protocol", "none"]
    rows = run_json(capsys, *argv, "--model", model, "--channels", str(channels))
    assert rows[0]["channels"] == channels
    assert rows[0]["time_s"] == pytest.approx(2 * 7 / 8 * 64e6 / 25e9, rel=1e-9)
    for bad in ("0", "65"):
        err = fail(capsys, *argv, "--channels", bad)
        assert f"--channels: must be from 1 to 64, got {bad}" in err
    assert "expected auto or a whole number" in fail(capsys, *argv, "--channels", "many")


def test_auto_and_protocol_say_what_ran(capsys) -> None:
    """--algorithm auto --protocol auto: the rows' ``chosen`` names the algorithm and
    protocol that ran (double tree with LL for 8 B on 64 ranks, ring with Simple for 1 GB),
    and the table ends with a ``# ran:`` line."""
    args = ["--op", "allreduce", "--devices", "64", "--latency", "1us", "--algorithm", "auto"]
    rows = run_json(capsys, *args, "--protocol", "auto", "--bytes", "8B:1GB:x125000000")
    assert [r["chosen"] for r in rows] == ["double_tree/LL", "ring/Simple"]
    assert main(["collective", *args, "--protocol", "auto", "--bytes", "8B"]) == 0
    assert "# ran: 8 B double_tree/LL" in capsys.readouterr().out


def test_unknown_protocol_is_bad_input(capsys) -> None:
    """--protocol LL256: exit 2, the flag named with the protocols allowed."""
    err = fail(capsys, "--op", "allreduce", "--devices", "4", "--protocol", "LL256")
    assert "--protocol" in err and "LL128" in err


BENCH_NAMES = (
    "FLAT_KINDS GB MAX_POINTS MODELS PLACEHOLDER_WORKLOAD ROW_KEYS SCENARIO_KEYS TOPOLOGIES "
    "TWO_TIER_DEFAULTS flat_cluster group_devices link_figures load_cluster parse_sizes "
    "plot_figure "
    "resolve_algorithms rows_csv run_point save_figure scenario_of sweep two_tier_cluster"
).split()
"""The public names of the collective sweep (those ``clustersim.collectives.bench`` had
before the sweep became a study)."""


def test_the_collective_sweep_keeps_its_public_names() -> None:
    """The study has every public name its old path had (the old path itself is gone: no
    shim modules); the cluster helpers are those of scenario.shorthand."""
    from clustersim.scenario import shorthand

    assert sorted(collective_sweep.__all__) == sorted(BENCH_NAMES)
    assert all(hasattr(collective_sweep, name) for name in BENCH_NAMES)
    assert collective_sweep.two_tier_cluster is shorthand.two_tier_cluster
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("clustersim.collectives.bench")
