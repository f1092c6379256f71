"""``clustersim choose``: candidate clusters for one workload, compared on cost and time to
train.  The frontier against brute force, the bill against hand formulas, the best layout
against plan's, bad input at its key path, the folder written as a unit and the same bytes
twice."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from clustersim.cli import main
from clustersim.errors import ScenarioError
from clustersim.studies import choose, plan

from .conftest import SCENARIOS

SMALL = {"layers": 4, "hidden": 256, "heads": 4, "seq": 128, "vocab": 512}
"""4 blocks of 4 heads, 128 tokens a sample: a few milliseconds per simulation."""
BATCH = 16
"""Samples per iteration: 16 x 128 = 2,048 tokens."""
TOKENS_PER_ITERATION = BATCH * SMALL["seq"]


def node_cluster(nodes: int, gpus: int = 4, memory: str = "80GB", **gpu: Any) -> dict[str, Any]:
    """``nodes`` nodes of ``gpus`` GPUs in one rack."""
    return {
        "racks": 1,
        "nodes_per_rack": nodes,
        "node": {
            "gpus": gpus,
            "gpu": {"flops": "312TFLOPS", "efficiency": 0.5, "memory": memory, **gpu},
            "pcie": {"bandwidth": "32GB/s"},
            "nvlink": {"bandwidth": "300GB/s"},
            "nic": {"bandwidth": "100Gb/s"},
        },
    }


WORKLOAD = {
    "name": "small-lm",
    "cluster": node_cluster(1),
    "model": {"transformer": dict(SMALL)},
    "training": {"global_batch": BATCH, "precision": "bf16", "optimizer": "adam"},
}

CLUSTERS = [
    {"name": "one-node", "gpu_hour_price": 2.5, "gpu_power": "700W", "cluster": node_cluster(1)},
    {"name": "two-nodes", "gpu_hour_price": 1.75, "gpu_power": "400W", "cluster": node_cluster(2)},
    {
        "name": "switch",
        "gpu_hour_price": 3.0,
        "gpu_power": "1kW",
        "cluster": {
            "kind": "switch",
            "devices": 2,
            "device": {"flops": "312TFLOPS", "efficiency": 0.5, "memory": "80GB"},
            "link": {"bandwidth": "50GB/s"},
        },
    },
]
SEARCH = {"micro_batch": [1, 2], "zero": [1], "chunks": [1]}


def write(folder: Path, candidates: dict[str, Any], workload: dict[str, Any] = WORKLOAD) -> str:
    """The candidates file (and its workload, ``w.yaml`` beside it) in ``folder``; its path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "w.yaml").write_text(yaml.safe_dump(workload, sort_keys=False))
    path = folder / "c.yaml"
    path.write_text(yaml.safe_dump({"workload": "w.yaml", **candidates}, sort_keys=False))
    return str(path)


def candidates(**changes: Any) -> dict[str, Any]:
    return {"tokens": "1G", "energy_price": 0.2, "search": SEARCH, "clusters": CLUSTERS, **changes}


def study(path: str, **flags: Any) -> tuple[choose.Choices, list[choose.ClusterResult]]:
    """``choose`` on the file at ``path`` in this process: the choices and the results."""
    choices = choose.load_choices(path)
    found = choose.enumerate_clusters(choices, choose.plan_options(choices.spec.search, **flags))
    return choices, choose.results(choices, found, choose.run_clusters(found, workers=1))


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def run(argv: list[object], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="session")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[choose.Choices, list[Any]]:
    """The three small clusters, simulated once for the session (session scope: the slow tests,
    run first, would otherwise interleave modules and build a module fixture again)."""
    return study(write(tmp_path_factory.mktemp("choose"), candidates()))


# --------------------------------------------------------------------------- the frontier


def dominated_by_brute_force(points: list[tuple[float, float]]) -> list[bool]:
    """Pareto-optimal by definition: no other point at most as costly and as slow, one
    strictly less."""
    return [
        not any(
            q[0] <= p[0] and q[1] <= p[1] and (q[0] < p[0] or q[1] < p[1])
            for j, q in enumerate(points)
            if j != i
        )
        for i, p in enumerate(points)
    ]


@given(st.lists(st.tuples(st.integers(0, 5).map(float), st.integers(0, 5).map(float)), max_size=12))
def test_pareto_set_equals_the_brute_force_dominance_check_with_ties(
    points: list[tuple[float, float]],
) -> None:
    """On a small grid (ties and duplicates likely) the sweep marks exactly the points no
    other point dominates; duplicates of an optimal point are all optimal."""
    assert choose.pareto_optimal(points) == dominated_by_brute_force(points)


@given(st.lists(st.tuples(st.floats(0, 1e9), st.floats(0, 1e4)), max_size=30))
def test_pareto_set_equals_brute_force_on_real_numbers(points: list[tuple[float, float]]) -> None:
    assert choose.pareto_optimal(points) == dominated_by_brute_force(points)


@given(st.lists(st.tuples(st.integers(0, 9).map(float), st.integers(0, 9).map(float)), min_size=1))
def test_frontier_steps_fall_in_time_as_cost_rises(points: list[tuple[float, float]]) -> None:
    steps = choose.frontier_steps(points)
    assert steps and all(a[0] < b[0] and a[1] > b[1] for a, b in zip(steps, steps[1:]))


# --------------------------------------------------------------------------- the bill


def test_cost_time_and_energy_follow_the_hand_formulas(small: tuple[Any, list[Any]]) -> None:
    """For every cluster and a sweep of token counts (a whole number of iterations and not):
    iterations = ceil(tokens / (global_batch x seq)), time = iterations x iteration time
    (= tokens / (global_batch x seq / iteration time) when whole), GPU-hours = GPUs x hours,
    cost = price x GPU-hours, energy = GPUs x W x hours / 1000, its cost x 0.2 per kWh."""
    choices, results = small
    watts = {"one-node": 700.0, "two-nodes": 400.0, "switch": 1000.0}
    prices = {"one-node": 2.5, "two-nodes": 1.75, "switch": 3.0}
    gpus = {"one-node": 4, "two-nodes": 8, "switch": 2}
    assert {r.name: r.option.gpus for r in results} == gpus
    for tokens in (TOKENS_PER_ITERATION * 1000, 1e9, 3.3e10 + 1, 2e12):
        again = choose.results(
            replace(choices, tokens=tokens), [r.found for r in results], [r.ranked for r in results]
        )
        for r in again:
            t_iter = r.best.iteration_time_s
            iterations = math.ceil(tokens / TOKENS_PER_ITERATION)
            hours = iterations * t_iter / 3600
            assert r.bill.tokens_per_s == pytest.approx(TOKENS_PER_ITERATION / t_iter, rel=1e-9)
            assert r.bill.time_to_train_s == pytest.approx(iterations * t_iter, rel=1e-12)
            if tokens % TOKENS_PER_ITERATION == 0:
                assert r.bill.time_to_train_s == pytest.approx(tokens / r.bill.tokens_per_s)
            assert r.bill.gpu_hours == pytest.approx(gpus[r.name] * hours, rel=1e-12)
            assert r.bill.cost == pytest.approx(prices[r.name] * gpus[r.name] * hours, rel=1e-12)
            kwh = gpus[r.name] * watts[r.name] * hours / 1000
            assert r.bill.energy_kwh == pytest.approx(kwh, rel=1e-12)
            assert r.bill.energy_cost == pytest.approx(0.2 * kwh, rel=1e-12)
            assert r.bill.total_cost == pytest.approx(r.bill.cost + 0.2 * kwh, rel=1e-12)


def test_rows_go_cheapest_first_and_the_pareto_marks_are_the_frontier(
    small: tuple[Any, list[Any]],
) -> None:
    _, results = small
    costs = [r.bill.total_cost for r in results]
    assert costs == sorted(costs)
    points = [(r.bill.total_cost, r.bill.time_to_train_s) for r in results]
    assert [r.pareto for r in results] == dominated_by_brute_force(points)
    assert results[0].pareto  # the cheapest is always on the frontier


def test_the_best_layout_is_plans_best_on_the_same_document(
    small: tuple[Any, list[Any]],
) -> None:
    """plan run on each candidate's document alone picks the configuration choose priced,
    with the same iteration time: the clusters' runs, pooled, come back to their cluster."""
    choices, results = small
    options = choose.plan_options(choices.spec.search)
    layouts = set()
    for r in results:
        found = plan.enumerate_candidates(r.option.doc, choices.workload_source, options)
        best = plan.best_fitting(plan.rank(plan.run_candidates(found.candidates, workers=1)))
        assert best is not None and best.point == r.best.point, r.name
        assert best.iteration_time_s == r.best.iteration_time_s
        layouts.add(best.point.dp)
    assert len(layouts) == 3  # three clusters, three different best layouts


@dataclass(frozen=True)
class FakeGpu:
    name: str
    type: str | None
    kind: str = "gpu"


def test_a_mapping_prices_each_gpu_type_by_its_count() -> None:
    """Mixed clusters: devices with a ``type`` are counted by it (else their preset), and a
    price mapping sums type by type: 3 x 2.0 + 5 x 4.5 per hour."""
    devices = [FakeGpu(f"a{i}", "a100") for i in range(3)] + [
        FakeGpu(f"h{i}", "h100") for i in range(5)
    ]
    devices.append(FakeGpu("cpu", None, kind="cpu"))
    counts = choose.gpu_types(devices, lambda d: "fallback")
    assert counts == {"a100": 3, "h100": 5}
    assert choose.per_type_total({"a100": 2.0, "h100": 4.5, "b200": 9.0}, counts, "p") == 28.5
    assert choose.per_type_total(2.0, counts, "p") == 16.0
    assert choose.gpu_types([FakeGpu("x", None)], lambda d: "preset") == {"preset": 1}
    with pytest.raises(ScenarioError) as info:
        choose.per_type_total({"a100": 2.0}, counts, "clusters[3].gpu_hour_price")
    assert "clusters[3].gpu_hour_price: no entry for GPU type 'h100'" in str(info.value)


def custom_mixed() -> dict[str, Any]:
    """A custom cluster of two A100s and two H100s (catalog presets) on one switch."""
    names = ["a0", "a1", "h0", "h1"]
    presets = ["a100-sxm4-80gb", "a100-sxm4-80gb", "h100-sxm5-80gb", "h100-sxm5-80gb"]
    return {
        "kind": "custom",
        "devices": [{"name": n, "preset": p} for n, p in zip(names, presets)],
        "switches": ["sw"],
        "links": [{"src": n, "dst": "sw", "bandwidth": "50GB/s"} for n in names],
    }


def test_a_custom_cluster_is_priced_by_its_devices_presets(tmp_path: Path) -> None:
    """A cluster of listed devices names each GPU's type by its preset; the mapping's prices
    and powers are summed per type, and a type missing from it is exit 2 naming it."""
    mixed = {
        "name": "mixed",
        "gpu_hour_price": {"a100-sxm4-80gb": 2.0, "h100-sxm5-80gb": 5.0},
        "gpu_power": {"a100-sxm4-80gb": "400W", "h100-sxm5-80gb": "700W"},
        "cluster": custom_mixed(),
    }
    choices = choose.load_choices(write(tmp_path, candidates(clusters=[mixed])))
    option = choices.options[0]
    assert option.gpu_types == {"a100-sxm4-80gb": 2, "h100-sxm5-80gb": 2}
    assert option.hourly_price == 2 * 2.0 + 2 * 5.0
    assert option.watts == 2 * 400 + 2 * 700
    mixed["gpu_hour_price"] = {"a100-sxm4-80gb": 2.0}
    with pytest.raises(ScenarioError) as info:
        choose.load_choices(write(tmp_path, candidates(clusters=[mixed])))
    assert "clusters[0].gpu_hour_price: no entry for GPU type 'h100-sxm5-80gb'" in str(info.value)


def test_files_a_cluster_names_are_relative_to_the_file_it_is_written_in(tmp_path: Path) -> None:
    """A GPU preset file named by a cluster written inline is read beside the candidates
    file, one named in a cluster file beside that file, though the workload sits elsewhere;
    the GPUs' type is the preset's name."""
    gpu = {
        "kind": "gpu",
        "name": "my-gpu",
        "spec": {"peaks": {"bf16": "500TFLOPS"}, "memory": "48GB", "memory_bandwidth": "1TB/s"},
    }
    for folder in ("cands/hw", "clusters/hw", "work"):
        (tmp_path / folder).mkdir(parents=True)
    for folder in ("cands/hw", "clusters/hw"):
        (tmp_path / folder / "my_gpu.yaml").write_text(yaml.safe_dump(gpu))
    (tmp_path / "work" / "w.yaml").write_text(yaml.safe_dump(WORKLOAD))
    section = node_cluster(1)
    section["node"]["gpu"] = {"preset": "./hw/my_gpu.yaml"}
    (tmp_path / "clusters" / "c.yaml").write_text(yaml.safe_dump({"cluster": section}))
    doc = {
        "workload": "../work/w.yaml",
        "tokens": "1G",
        "clusters": [
            {"name": "inline", "gpu_hour_price": {"my-gpu": 1.0}, "cluster": section},
            {"name": "file", "gpu_hour_price": {"my-gpu": 2.0}, "cluster": "../clusters/c.yaml"},
        ],
    }
    (tmp_path / "cands" / "c.yaml").write_text(yaml.safe_dump(doc))
    choices = choose.load_choices(tmp_path / "cands" / "c.yaml")
    assert [o.gpu_types for o in choices.options] == [{"my-gpu": 4}, {"my-gpu": 4}]
    assert [o.hourly_price for o in choices.options] == [4.0, 8.0]
    (tmp_path / "cands" / "hw" / "my_gpu.yaml").unlink()
    with pytest.raises(ScenarioError, match=r"c\.yaml: clusters\[0\]\.cluster\.node\.gpu\.preset"):
        choose.load_choices(tmp_path / "cands" / "c.yaml")


# --------------------------------------------------------------------------- bad input


def node(preset: str) -> dict[str, Any]:
    return {"racks": 1, "nodes_per_rack": 1, "node": {"preset": preset}}


TRACE = str((SCENARIOS / "traces" / "resnet50_ddp_step.yaml").resolve())
ONE = CLUSTERS[0]
BAD_INPUT = {
    "missing price": (
        {"clusters": [{"name": "a", "cluster": node_cluster(1)}], "energy_price": None},
        "c.yaml: clusters[0].gpu_hour_price: missing: no price of a GPU-hour for 'a'",
    ),
    "unknown key": ({"colour": "red"}, "c.yaml: colour: unknown key"),
    "unknown key of a cluster": (
        {"clusters": [{**ONE, "colour": "red"}]},
        "c.yaml: clusters[0].colour: unknown key",
    ),
    "duplicate names": (
        {"clusters": [ONE, CLUSTERS[1], {**CLUSTERS[2], "name": "one-node"}]},
        "c.yaml: clusters[2].name: 'one-node' names clusters[0] too",
    ),
    "missing tokens": ({"tokens": None}, "c.yaml: tokens: no tokens to train"),
    "a workload-trace scenario": (
        {"workload": TRACE},
        "is not a training scenario: it runs a workload (workload: trace)",
    ),
    "no workload file": ({"workload": "nope.yaml"}, "c.yaml: workload: no file"),
    "a bad cluster": (
        {
            "clusters": [
                {**ONE, "cluster": {"kind": "switch", "devices": 0, "link": {"bandwidth": "1GB/s"}}}
            ]
        },
        "c.yaml: clusters[0].cluster.devices: must be at least 1",
    ),
    "an unknown preset": (
        {"clusters": [{**ONE, "cluster": node("dgx-z100")}]},
        "c.yaml: clusters[0].cluster.node.preset: unknown node preset 'dgx-z100'",
    ),
    "a price of 0": (
        {"clusters": [{**ONE, "gpu_hour_price": 0}]},
        "c.yaml: clusters[0].gpu_hour_price: must be greater than 0",
    ),
    "a negative energy price": (
        {"energy_price": -0.1},
        "c.yaml: energy_price: must be greater than 0",
    ),
    "energy without power": (
        {"clusters": [{k: v for k, v in ONE.items() if k != "gpu_power"}]},
        "c.yaml: clusters[0].gpu_power: missing: energy_price is given",
    ),
    "a power without a unit": (
        {"clusters": [{**ONE, "gpu_power": 700}]},
        "c.yaml: clusters[0].gpu_power: 700 has no unit; expected a power such as 700W",
    ),
    "a name that is no file name": (
        {"clusters": [{**ONE, "name": "../x"}]},
        "c.yaml: clusters[0].name: '../x' is not a plain name",
    ),
    "no cluster": ({"clusters": []}, "c.yaml: clusters: must not be empty"),
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_is_exit_2_at_its_key_path(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each bad candidates file: exit 2, one message naming the file and the key path,
    no traceback, nothing simulated."""
    changes, message = BAD_INPUT[case]
    doc = {k: v for k, v in candidates(**changes).items() if v is not None}
    code, out, err = run(["choose", write(tmp_path, doc)], capsys)
    assert code == 2, err
    assert message in err
    assert "Traceback" not in err and "simulating" not in out


def test_a_cluster_file_reports_its_problems_at_its_own_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A cluster read from a file (a bare cluster section) is checked at the file's keys,
    naming the candidate it serves; one from a scenario's cluster: section too."""
    (tmp_path / "bare.yaml").write_text("kind: switch\ndevices: 0\nlink: {bandwidth: 1GB/s}\n")
    (tmp_path / "scen.yaml").write_text(yaml.safe_dump({"cluster": node("dgx-z100")}))
    for file, message in (
        ("bare.yaml", "bare.yaml (clusters[0].cluster of "),
        ("scen.yaml", "scen.yaml (clusters[0].cluster of "),
    ):
        path = write(tmp_path, candidates(clusters=[{**ONE, "cluster": file}]))
        code, _, err = run(["choose", path], capsys)
        assert code == 2 and message in err
    assert (
        "c.yaml): devices: must be at least 1"
        in run(
            ["choose", write(tmp_path, candidates(clusters=[{**ONE, "cluster": "bare.yaml"}]))],
            capsys,
        )[2]
    )


def test_workload_problems_name_the_workload_and_the_candidate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A workload whose own keys are wrong, or whose model has no sequence length: exit 2
    naming the workload file (and the candidate it was checked with) or the key."""
    bad = {**WORKLOAD, "training": {**WORKLOAD["training"], "global_batch": 0}}
    code, _, err = run(["choose", write(tmp_path, candidates(), bad)], capsys)
    assert code == 2 and "w.yaml (with the cluster of" in err and "training.global_batch" in err
    layers = {**WORKLOAD, "model": {"layers": [{"name": "l", "params": "1e6", "flops": "1e9"}]}}
    code, _, err = run(["choose", write(tmp_path, candidates(), layers)], capsys)
    assert code == 2 and "workload: the workload's model is not a transformer" in err


def test_a_scenario_is_not_a_candidates_file_and_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """choose on a scenario and run on a candidates file: one line each, saying which
    command the file is for; validate checks a candidates file as choose reads it."""
    path = write(tmp_path, candidates())
    code, _, err = run(["choose", str(tmp_path / "w.yaml")], capsys)
    assert code == 2 and "clusters: this is a scenario, not a candidates file" in err
    code, _, err = run(["run", path], capsys)
    assert code == 2 and "this is a candidates file of clustersim choose" in err
    code, out, _ = run(["validate", path, str(tmp_path / "w.yaml")], capsys)
    assert code == 0 and out.count("ok ") == 2 and "candidates file of clustersim choose" in out
    code, _, err = run(["choose", path, "--set", "cluster.racks=2"], capsys)
    assert code == 2 and "--set: cluster.racks: each candidate's cluster replaces" in err
    code, _, err = run(["choose", path, "--tokens", "many"], capsys)
    assert code == 2 and "--tokens: 'many' is not a count" in err


# --------------------------------------------------------------------------- the command


def test_the_command_prints_the_table_and_writes_the_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """stdout: a row per cluster cheapest first, the Pareto marks, the verdict; -o: the
    CSV's stable columns, the Markdown, the plot and a plan table per cluster."""
    path = write(tmp_path, candidates())
    out_dir = tmp_path / "out"
    code, out, _ = run(["choose", path, "-o", out_dir, "-q", "-j", "1"], capsys)
    assert code == 0
    assert "simulating" in out and "cheapest: " in out and "pareto" in out
    assert (out_dir / "choose.csv").read_text().splitlines()[0].split(",") == list(
        choose.CSV_COLUMNS
    )
    rows = read_csv(out_dir / "choose.csv")
    assert len(rows) == 3 and all(r["fits"] == "yes" for r in rows)
    names = {p.name for p in out_dir.iterdir()}
    assert names == {"choose.csv", "choose.md", "frontier.png", "frontier.svg", "plans"}
    plans = sorted(p.name for p in (out_dir / "plans").iterdir())
    assert plans == ["one-node.csv", "switch.csv", "two-nodes.csv"]
    assert (out_dir / "plans" / "switch.csv").read_text().startswith("rank,dp,tp,pp")
    md = (out_dir / "choose.md").read_text()
    assert md.startswith("# choose: c: small-lm, 1G tokens") and "## The clusters" in md


def test_two_runs_write_the_same_bytes_and_replace_only_their_own_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Deterministic: the same file twice gives byte-identical choose.csv, choose.md and
    frontier.svg; the second run replaces the first's folder, a folder holding other files
    (or a plans/ holding one) is refused before anything is simulated."""
    path = write(tmp_path, candidates(clusters=CLUSTERS[:2]))
    first, second = tmp_path / "a", tmp_path / "b"
    assert run(["choose", path, "-o", first, "-q", "-j", "1"], capsys)[0] == 0
    assert run(["choose", path, "-o", second, "-q", "-j", "1"], capsys)[0] == 0
    for name in ("choose.csv", "choose.md", "frontier.svg", "plans/one-node.csv"):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    assert run(["choose", path, "-o", first, "-q", "-j", "1"], capsys)[0] == 0  # its own
    (first / "plans" / "notes.txt").write_text("mine")
    code, out, err = run(["choose", path, "-o", first, "-q"], capsys)
    assert code == 2 and "plans/notes.txt" in err and "simulating" not in out
    (second / "mine.txt").write_text("mine")
    code, _, err = run(["choose", path, "-o", second, "-q"], capsys)
    assert code == 2 and "holds entries clustersim does not write (mine.txt)" in err
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_flags_override_the_files_search_and_tokens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--micro-batch 2 replaces the file's search: micro_batch [1, 2]; --tokens the file's
    tokens (the CSV's time to train doubles from 1G to 2G tokens, iterations being whole)."""
    path = write(tmp_path, candidates(tokens="1048576000", clusters=CLUSTERS[2:]))
    run(["choose", path, "-o", tmp_path / "one", "-q"], capsys)
    code, _, _ = run(
        [
            "choose",
            path,
            "--micro-batch",
            "2",
            "--tokens",
            "2097152000",
            "-o",
            tmp_path / "two",
            "-q",
        ],
        capsys,
    )
    assert code == 0
    one, two = (read_csv(tmp_path / name / "choose.csv")[0] for name in ("one", "two"))
    assert two["micro_batch"] == "2"
    hours = float(two["time_to_train_h"]) / float(one["time_to_train_h"])
    per_iteration = float(two["iteration_time_s"]) / float(one["iteration_time_s"])
    assert hours == pytest.approx(2 * per_iteration, rel=1e-12)


def test_a_cluster_where_nothing_fits_gets_a_row_and_no_place_on_the_frontier(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """GPUs of 1 MB: every configuration simulated, none fits; the row says so, the CSV
    has fits=no and no cost, the other clusters keep their frontier; exit 0."""
    tiny = {**CLUSTERS[1], "name": "tiny", "cluster": node_cluster(2, memory="1MB")}
    path = write(tmp_path, candidates(clusters=[CLUSTERS[0], tiny]))
    code, out, _ = run(["choose", path, "-o", tmp_path / "out", "-q"], capsys)
    assert code == 0
    line = next(x for x in out.splitlines() if x.startswith("tiny"))
    assert "nothing fits in device memory (closest:" in line
    assert "only one-node has a configuration that fits" in out
    rows = read_csv(tmp_path / "out" / "choose.csv")
    assert [r["cluster"] for r in rows] == ["one-node", "tiny"]
    assert rows[1]["fits"] == rows[1]["pareto"] == "no" and rows[1]["cost"] == ""
    assert rows[1]["note"].startswith("nothing fits in device memory")
    assert rows[0]["pareto"] == "yes"  # one-node alone on the frontier


def test_a_cluster_without_a_valid_configuration_gets_a_row_and_none_at_all_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--tp 4 leaves the two-GPU switch nothing to simulate: its row says why, the others
    are priced; --tp 8 leaves every cluster nothing (tensor parallelism within a node of 4):
    exit 2 before anything is simulated."""
    path = write(tmp_path, candidates())
    code, out, _ = run(["choose", path, "--tp", "4", "-q", "-j", "1"], capsys)
    assert code == 0
    line = next(x for x in out.splitlines() if x.startswith("switch"))
    assert "no valid configuration" in line and line.split()[-1] != "yes"
    code, out, err = run(["choose", path, "--tp", "8", "-q"], capsys)
    assert code == 2 and "no cluster has a valid configuration" in err
    assert "simulating" not in out


@pytest.mark.parametrize(
    ("text", "candidates"),
    [
        ("clusters: {a: {}}\nworkload: w.yaml\n", True),
        ('"\\x63lusters": {a: {}}\nworkload: w.yaml\n', True),  # the key spelled by an escape
        ("'clusters': {a: {}}\nworkload: w.yaml\n", True),
        ("{clusters: {a: {}}, workload: w.yaml}\n", True),
        ("name: x\nworkload: {program: []}\n", False),
        ("name: x  # run it with clustersim\nworkload: w.yaml\n", False),
        ("name: x\n# the clusters of a comment\nworkload: w.yaml\n", False),
        ("name: '\\x'\nworkload: w.yaml\n", False),  # a backslash alone: parsed, not a candidates
    ],
)
def test_a_candidates_file_is_told_by_its_key_however_spelled(tmp_path, text, candidates) -> None:
    """``is_candidates_file`` skips the YAML parse only where no key ``clusters`` can be
    written (neither its letters nor an escape in the text): the same answer as the parse."""
    from clustersim.scenario import is_candidates_file

    path = tmp_path / "f.yaml"
    path.write_text(text, encoding="utf-8")
    assert is_candidates_file(path) is candidates
