"""`clustersim plan` and clustersim.studies.plan: enumeration, resizing, ranking, tables, files, CLI."""

from __future__ import annotations

import copy
import csv
import itertools
from pathlib import Path
from typing import Any

import pytest
import yaml

from clustersim.api import memory_block, prepare, simulate
from clustersim.cli import main
from clustersim.errors import ScenarioError, SimulationError
from clustersim.scenario import parse_scenario
from clustersim.studies import plan

from .conftest import SCENARIOS

SMALL_TRANSFORMER = {"layers": 4, "hidden": 512, "heads": 8, "seq": 256, "vocab": 1000}
"""4 blocks, 8 heads: tp in {1, 2, 4, 8} and pp in {1, 2, 4} on 16 GPUs."""


def training_doc(
    *, nodes: int = 2, gpus: int = 8, memory: str = "80GB", batch: int = 64, **extra: Any
) -> dict[str, Any]:
    """A training scenario: ``nodes`` DGX-like nodes in one rack, the small transformer."""
    doc: dict[str, Any] = {
        "name": "plan-test",
        "cluster": {
            "kind": "two_tier",
            "racks": 1,
            "nodes_per_rack": nodes,
            "node": {
                "gpus": gpus,
                "gpu": {"flops": "312TFLOPS", "efficiency": 0.5, "memory": memory},
                "pcie": {"bandwidth": "32GB/s"},
                "nvlink": {"bandwidth": "300GB/s", "latency": "1us"},
                "nic": {"bandwidth": "200Gb/s", "latency": "2us"},
            },
        },
        "model": {"transformer": dict(SMALL_TRANSFORMER)},
        "training": {"global_batch": batch, "precision": "bf16", "optimizer": "adam"},
    }
    doc.update(extra)
    return doc


def write_doc(tmp_path: Path, doc: dict[str, Any], name: str = "s.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


# --------------------------------------------------------------------------- enumeration


def brute_force(
    n: int,
    heads: int | None,
    blocks: int,
    batch: int,
    node: int | None,
    micro_batches: tuple[int, ...] = (1, 2, 4, 8),
    zero: tuple[int, ...] = (0, 1),
) -> set[tuple[int, int, int, int | None, int, int]]:
    """Every (dp, tp, pp, micro_batch, zero, chunks) by trying all numbers up to N against the
    rules as the brief states them (independent of clustersim.studies.plan); chunks 2 (interleaved,
    Narayanan et al. 2021) where pp > 1, the blocks split into pp x 2 virtual stages (layers:
    at least one each) and the micro-batches come in whole groups of pp."""
    found = set()
    for tp, pp in itertools.product(range(1, n + 1), repeat=2):
        if n % (tp * pp):
            continue
        power_of_two = bin(tp).count("1") == 1
        if tp > 1 and not (power_of_two and heads and heads % tp == 0 and tp <= (node or n)):
            continue
        if (heads is not None and blocks % pp) or (heads is None and pp > blocks):
            continue
        dp = n // (tp * pp)
        for z in zero:
            if z >= 2:
                if tp == pp == 1:
                    found.add((dp, tp, pp, None, z, 1))
                continue
            for mb in micro_batches:
                if batch % (dp * mb) == 0 and batch // (dp * mb) >= pp:
                    found.add((dp, tp, pp, mb, z, 1))
                    m = batch // (dp * mb)
                    split = blocks % (2 * pp) == 0 if heads is not None else 2 * pp <= blocks
                    if pp > 1 and split and m % pp == 0:
                        found.add((dp, tp, pp, mb, z, 2))
    return found


def as_tuples(points: list[plan.Point]) -> list[tuple[int, int, int, int | None, int, int]]:
    return [(p.dp, p.tp, p.pp, p.micro_batch, p.zero, p.chunks) for p in points]


@pytest.mark.parametrize(
    ("n", "heads", "blocks", "batch", "node"),
    [
        (16, 8, 4, 64, 8),
        (16, 16, 24, 512, 8),  # bert-large's shape
        (32, 12, 12, 96, 4),
        (64, 96, 96, 1536, 8),  # gpt3-175b's shape
        (12, 6, 6, 36, 4),  # not a power-of-two cluster
        (16, None, 5, 64, 8),  # not a transformer: tp = 1, pp <= 5 layers
        (8, 4, 3, 24, None),  # a flat cluster (no nodes)
    ],
)
def test_enumeration_matches_brute_force(
    n: int, heads: int | None, blocks: int, batch: int, node: int | None
) -> None:
    """The configurations equal a brute-force search over all numbers, each once, in order."""
    space = plan.SearchSpace(n, node, heads, blocks, batch)
    for zero in ((0, 1), (0, 1, 2, 3)):
        points = plan.enumerate_points(space, plan.PlanOptions(zero=zero))
        got = as_tuples(points)
        assert len(got) == len(set(got))
        assert set(got) == brute_force(n, heads, blocks, batch, node, zero=zero)
        assert got == as_tuples(plan.enumerate_points(space, plan.PlanOptions(zero=zero)))
        order = [(p.tp, p.pp, p.zero, p.micro_batch or 0, p.chunks) for p in points]
        assert order == sorted(order)
        for p in points:
            assert p.dp * p.tp * p.pp == n
            if p.micro_batch is not None:
                assert p.micro_batches * p.dp * p.micro_batch == batch


def test_enumeration_hand_count() -> None:
    """N = 4, 2 heads, 2 blocks, batch 8, micro-batches 1,2,4,8 -- counted by hand:
    tp1 pp1 dp4: mb 1,2; tp1 pp2 dp2: mb 1,2; tp2 pp1 dp2: mb 1,2,4; tp2 pp2 dp1: mb 1,2,4
    = 10 per ZeRO stage, 20 for stages 0 and 1, plus stages 2 and 3 once each = 22."""
    space = plan.SearchSpace(4, 4, 2, 2, 8)
    assert len(plan.enumerate_points(space, plan.PlanOptions())) == 20
    assert len(plan.enumerate_points(space, plan.PlanOptions(zero=(0, 1, 2, 3)))) == 22


def test_enumeration_hand_count_with_interleaving() -> None:
    """N = 4, 2 heads, 4 blocks, batch 8: tp1 pp1: mb 1,2; tp1 pp2: mb 1,2 and each
    interleaved (m = 4, 2 multiples of pp, 4 blocks = 2 x 2); tp1 pp4: mb 1,2, none
    interleaved (4 blocks < 4 x 2); tp2 pp1: mb 1,2,4; tp2 pp2: mb 1,2,4 and each
    interleaved = 17 per ZeRO stage; --chunks 1: 12."""
    space = plan.SearchSpace(4, 4, 2, 4, 8)
    points = plan.enumerate_points(space, plan.PlanOptions())
    assert len(points) == 34
    assert {p.pp for p in points if p.chunks == 2} == {2}
    assert len(plan.enumerate_points(space, plan.PlanOptions(chunks=(1,)))) == 24
    doc = {"training": {"global_batch": 8}, "pipeline": {"schedule": "1f1b"}}
    interleaved = next(p for p in points if p.chunks == 2)
    assert plan.candidate_document(doc, interleaved, plan.PlanOptions())["pipeline"] == {
        "schedule": "interleaved",
        "chunks": 2,
    }
    doc["pipeline"] = {"schedule": "interleaved", "chunks": 2}
    plain = next(p for p in points if p.chunks == 1 and p.zero < 2)
    assert plan.candidate_document(doc, plain, plan.PlanOptions())["pipeline"] == {
        "schedule": "1f1b"
    }


def test_tp_limits() -> None:
    """tp stays within a node unless allow_cross_node_tp; tp divides the heads; no tp for MLPs."""
    space = plan.SearchSpace(64, 8, 32, 32, 64)
    assert plan.tp_values(space) == [1, 2, 4, 8]
    cross = plan.SearchSpace(64, 8, 32, 32, 64, allow_cross_node_tp=True)
    assert plan.tp_values(cross) == [1, 2, 4, 8, 16, 32]
    assert plan.tp_values(plan.SearchSpace(64, 8, 12, 32, 64)) == [1, 2, 4]
    assert plan.tp_values(plan.SearchSpace(64, 8, 25, 48, 64)) == [1]  # gpt2-1.5b: 25 heads
    assert plan.tp_values(plan.SearchSpace(64, 8, None, 32, 64)) == [1]
    assert plan.tp_values(space, [2, 3, 16]) == [2]


def test_unused_flag_values_are_noted() -> None:
    """Values given by flag that no configuration uses are named with the rule they break."""
    space = plan.SearchSpace(16, 8, 8, 4, 64)
    options = plan.PlanOptions(tp=(2, 16), pp=(3, 4), micro_batch=(1, 64))
    points = plan.enumerate_points(space, options)
    notes = plan.unused_values(space, options, points)
    assert [n.split(":")[0] for n in notes] == ["--tp 16", "--pp 3", "--micro-batch 64"]
    assert "at most the 8 GPUs of a node" in notes[0]
    assert "4 transformer blocks" in notes[1]


def test_search_space_of_presets_and_workers() -> None:
    """Heads and blocks come from the model's transformer shape; N from the workers."""
    space = plan.search_space(parse_scenario(training_doc(model={"preset": "bert-large"})))
    assert (space.devices, space.gpus_per_node, space.heads, space.blocks) == (16, 8, 16, 24)
    space = plan.search_space(parse_scenario(training_doc(model={"preset": "gpt2-1.5b"})))
    assert (space.heads, space.blocks) == (25, 48)
    layers = {"layers": [{"name": "fc", "params": 1e6, "flops": 2e6, "repeat": 3}]}
    workers = {"workers": "rack0/node0/gpu*"}
    space = plan.search_space(parse_scenario(training_doc(model=layers, data_parallel=workers)))
    assert (space.devices, space.heads, space.blocks) == (8, None, 3)


# --------------------------------------------------------------------------- resizing


@pytest.mark.parametrize(
    ("devices", "racks", "nodes_per_rack"),
    [(16, 1, 2), (32, 2, 2), (1024, 64, 2), (8, 1, 1)],
)
def test_resize_two_tier(devices: int, racks: int, nodes_per_rack: int) -> None:
    """Two-tier clusters keep node and nodes_per_rack; below one rack, one rack of N/g nodes."""
    doc = plan.resize_cluster(training_doc(), devices)
    cluster = parse_scenario(doc).cluster
    assert (cluster.racks, cluster.nodes_per_rack, cluster.node.gpus) == (racks, nodes_per_rack, 8)
    assert plan.search_space(parse_scenario(doc)).devices == devices


@pytest.mark.parametrize("devices", [4, 12, 24, 40, 0])
def test_resize_errors_name_devices(devices: int) -> None:
    """Sizes that are not whole racks (or whole nodes below a rack) are errors naming --devices."""
    with pytest.raises(ScenarioError, match="--devices"):
        plan.resize_cluster(training_doc(), devices)


def test_resize_flat_and_custom() -> None:
    """Flat clusters set their device count; custom clusters cannot be resized."""
    flat = training_doc(cluster={"kind": "switch", "devices": 4, "link": {"bandwidth": "25GB/s"}})
    for n in (2, 6, 64):
        resized = plan.resize_cluster(flat, n)
        assert plan.search_space(parse_scenario(resized)).devices == n
    custom = training_doc(
        cluster={
            "kind": "custom",
            "devices": [{"name": "a"}, {"name": "b"}],
            "switches": ["s"],
            "links": [
                {"src": "a", "dst": "s", "bandwidth": "10GB/s"},
                {"src": "b", "dst": "s", "bandwidth": "10GB/s"},
            ],
        }
    )
    with pytest.raises(ScenarioError, match="--devices: a custom cluster"):
        plan.resize_cluster(custom, 4)


# --------------------------------------------------------------------------- candidates


def test_candidate_document_sets_the_configuration() -> None:
    """parallelism/training/zero/network set; pipeline kept without micro_batches; ZeRO 2+ bare."""
    doc = training_doc(
        parallelism={"dp": 3, "sequence_parallel": True, "order": ["tp", "dp", "pp"]},
        pipeline={"schedule": "gpipe", "micro_batches": 16, "stage_layers": [1, 2]},
        zero={"stage": 3, "prefetch": False},
    )
    doc["training"]["micro_batch"] = 32
    options = plan.PlanOptions(network="flow", iterations=2)
    out = plan.candidate_document(doc, plan.Point(4, 2, 2, 2, 8, 1), options)
    assert out["parallelism"] == {
        "dp": 4,
        "sequence_parallel": True,
        "order": ["tp", "dp", "pp"],
        "tp": 2,
        "pp": 2,
        "simulate_replicas": "one",
    }
    every = plan.candidate_document(
        doc, plan.Point(4, 2, 2, 2, 8, 1), plan.PlanOptions(all_replicas=True)
    )
    assert "simulate_replicas" not in every["parallelism"]
    assert out["training"]["micro_batch"] == 2 and out["training"]["iterations"] == 2
    assert out["pipeline"] == {"schedule": "gpipe"}
    assert out["zero"] == {"stage": 1}  # prefetch is the zero strategy's, not the hybrid's
    assert out["network"] == {"model": "flow"}
    sharded = plan.candidate_document(doc, plan.Point(16, 1, 1, None, None, 3), options)
    assert "pipeline" not in sharded and "micro_batch" not in sharded["training"]
    assert "simulate_replicas" not in sharded["parallelism"]
    assert doc["training"]["micro_batch"] == 32  # the input is not changed
    default = plan.candidate_document(training_doc(), plan.Point(16, 1, 1, 1, 4, 0), options)
    assert default["pipeline"] == {"schedule": "1f1b"}


def test_rejected_candidates_are_counted_by_reason() -> None:
    """Configurations api.prepare rejects are skipped and counted; the rest are candidates
    (here every tensor-parallel one: the tp algorithm implements no all-reduce)."""
    parallelism = {"tp_algorithm": "scatter_allgather", "sequence_parallel": False}
    doc = training_doc(parallelism=parallelism)
    found = plan.enumerate_candidates(doc, "s.yaml", plan.PlanOptions())
    points = plan.enumerate_points(found.space, plan.PlanOptions())
    with_tp = sum(1 for p in points if p.tp > 1)
    assert with_tp > 0
    assert found.skipped_count == with_tp
    assert len(found.candidates) == len(points) - with_tp
    assert {c.point.tp for c in found.candidates} == {1}
    [(reason, count)] = found.skipped.items()
    assert count == with_tp and "scatter_allgather does not implement allreduce" in reason
    assert len(reason) <= plan.REASON_CHARS
    assert [c.index for c in found.candidates] == list(range(len(found.candidates)))


def test_candidates_leave_out_what_their_strategy_would_not_read() -> None:
    """A scenario written for the hybrid (tensor keys, no ZeRO prefetch) still gives ZeRO-2/3
    candidates: their documents leave the tensor keys out (the zero strategy would refuse
    them), the hybrid candidates keep them and leave ``zero.prefetch`` out."""
    doc = training_doc(
        parallelism={"tp_algorithm": "ring", "sequence_parallel": True},
        zero={"prefetch": False},
    )
    options = plan.PlanOptions(zero=(1, 3))
    found = plan.enumerate_candidates(doc, "s.yaml", options)
    stages = {c.point.zero for c in found.candidates}
    assert stages == {1, 3}, found.skipped
    sharded = plan.candidate_document(doc, plan.Point(16, 1, 1, None, None, 3), options)
    assert "tp_algorithm" not in sharded["parallelism"] and sharded["zero"]["prefetch"] is False
    hybrid = plan.candidate_document(doc, plan.Point(8, 2, 1, 1, 4, 1), options)
    assert hybrid["parallelism"]["sequence_parallel"] is True and "prefetch" not in hybrid["zero"]


def test_shorten() -> None:
    assert plan.shorten("a\n  b") == "a b"
    text = plan.shorten("x" * 200, 20)
    assert len(text) == 20 and text.endswith("...")


# --------------------------------------------------------------------------- ranking


def outcome(index: int, throughput: float | None, fits: bool | None = True, error: str = ""):
    point = plan.Point(16, 1, 1, 1, 4, index)
    result = plan.Outcome(plan.Candidate(index, point, {}), error=error)
    if throughput is not None:
        result.throughput_samples_per_s = throughput
        result.iteration_time_s = 64 / throughput
        result.peak_bytes, result.capacity_bytes, result.fits = (
            2e9,
            1e9 if fits is False else 8e10,
            fits,
        )
    return result


def test_rank_by_throughput_ties_by_order_failures_last() -> None:
    """Best throughput first, equal ones in enumeration order, failed runs last without rank."""
    outcomes = [
        outcome(0, 10.0),
        outcome(1, None, error="boom"),
        outcome(2, 30.0),
        outcome(3, 10.0),
        outcome(4, 20.0, fits=False),
    ]
    ranked = plan.rank(outcomes)
    assert [o.candidate.index for o in ranked] == [2, 4, 0, 3, 1]
    assert [o.rank for o in ranked] == [1, 2, 3, 4, None]
    assert plan.best_fitting(ranked).candidate.index == 2
    assert [o.candidate.index for o in plan.shown(ranked, fit_only=True)] == [2, 0, 3, 1]
    assert [o.candidate.index for o in plan.shown(ranked, top=2)] == [2, 4]
    lines = plan.format_table(ranked)
    assert lines[0].split()[:3] == ["rank", "dp", "tp"]
    assert lines[2].split()[-1] == "NO" and lines[5].rstrip().endswith("failed  boom")


def test_verdict_lines() -> None:
    """Best that fits; or none fits with what would help; or memory unknown."""
    options = plan.PlanOptions()
    ranked = plan.rank([outcome(0, 10.0), outcome(1, 30.0, fits=False)])
    assert plan.verdict(ranked, options, None).startswith("best that fits: dp=16 tp=1")
    none = plan.verdict(plan.rank([outcome(0, 10.0, fits=False)]), options, None)
    assert none.startswith("none fits in device memory")
    assert "--zero 0,1,2,3" in none and "training.recompute: full" in none
    assert "--zero" not in plan.verdict(
        plan.rank([outcome(0, 10.0, fits=False)]), plan.PlanOptions(zero=(0, 3)), "full"
    )
    assert plan.recompute_of(training_doc(pipeline={"recompute": True})) == "full"
    assert plan.recompute_of(training_doc()) is None
    unknown = plan.verdict(plan.rank([outcome(0, 10.0, fits=None)]), options, None)
    assert "unknown" in unknown
    assert plan.verdict(plan.rank([outcome(0, None, error="x")]), options, None).startswith(
        "no configuration ran"
    )


@pytest.mark.parametrize(
    ("flag_text", "expected"),
    [("1,2,4", (1, 2, 4)), ("8, 2,2", (2, 8)), ("4", (4,))],
)
def test_parse_counts(flag_text: str, expected: tuple[int, ...]) -> None:
    assert plan.parse_counts(flag_text, "--tp") == expected


def test_parse_errors_name_the_flag() -> None:
    for text in ("", "a", "0", "1,,2", "-1"):
        with pytest.raises(ScenarioError, match="--pp"):
            plan.parse_counts(text, "--pp")
    assert plan.parse_zero_stages("0,fsdp,1") == (0, 1, 3)
    with pytest.raises(ScenarioError, match="--zero"):
        plan.parse_zero_stages("4")


# --------------------------------------------------------------------------- simulation


def test_top_row_equals_a_direct_simulation() -> None:
    """The best row's throughput is simulate() of its document, the same number; pool and
    in-process runs agree; every candidate with tp > 1 ran on the hybrid strategy."""
    options = plan.PlanOptions(micro_batch=(4,))
    found = plan.enumerate_candidates(training_doc(), "s.yaml", options)
    assert {c.point.tp for c in found.candidates} == {1, 2, 4, 8}
    assert {c.point.pp for c in found.candidates} == {1, 2, 4}
    pooled = plan.rank(plan.run_candidates(found.candidates, workers=2))
    alone = plan.rank(plan.run_candidates(found.candidates, workers=1))
    assert [o.throughput_samples_per_s for o in pooled] == [
        o.throughput_samples_per_s for o in alone
    ]
    assert all(o.ok for o in pooled)
    top = pooled[0]
    direct = simulate(parse_scenario(top.candidate.doc)).summary
    assert top.throughput_samples_per_s == direct["throughput_samples_per_s"]
    assert top.iteration_time_s == direct["iteration_time_s"]
    for o in pooled[:: max(1, len(pooled) // 4)]:  # a sample across the ranking
        summary = simulate(parse_scenario(o.candidate.doc)).summary
        assert o.throughput_samples_per_s == summary["throughput_samples_per_s"]
        assert summary["throughput_samples_per_s"] == pytest.approx(
            64 / summary["iteration_time_s"], rel=1e-12
        )


def tiny_memory_doc(options: plan.PlanOptions, devices: int = 16) -> tuple[dict[str, Any], float]:
    """The small-transformer scenario with GPUs of tiny memory: the median of the candidates'
    peaks (bytes, from the memory model without simulating), so some fit and some do not."""
    doc = training_doc(nodes=devices // 8)
    found = plan.enumerate_candidates(doc, "s.yaml", options)
    peaks = sorted(
        memory_block(prepare(parse_scenario(c.doc))).peak_bytes for c in found.candidates
    )
    capacity = float(int(peaks[len(peaks) // 2]))
    assert peaks[0] <= capacity < peaks[-1]
    return training_doc(nodes=devices // 8, memory=f"{int(capacity)}B"), capacity


def test_non_fitting_candidates_are_marked() -> None:
    """With tiny GPU memory some configurations fit and some do not; fits = peak <= capacity."""
    options = plan.PlanOptions(pp=(4,), micro_batch=(1, 4))
    doc, capacity = tiny_memory_doc(options)
    found = plan.enumerate_candidates(doc, "s.yaml", options)
    ranked = plan.rank(plan.run_candidates(found.candidates, workers=1))
    assert {o.fits for o in ranked} == {True, False}
    for o in ranked:
        assert o.capacity_bytes == capacity
        assert o.fits == (o.peak_bytes <= o.capacity_bytes)
        memory = memory_block(prepare(parse_scenario(o.candidate.doc)))
        assert memory is not None and memory.peak_bytes == o.peak_bytes
    assert plan.best_fitting(ranked).fits is True
    assert all(o.fits is not False for o in plan.shown(ranked, fit_only=True))


def test_a_failed_simulation_is_reported_in_its_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """A simulation that raises becomes a failed row with its message; the others still run."""
    import clustersim.api

    real = clustersim.api.simulate

    def flaky(scenario: Any, **kwargs: Any) -> Any:
        if scenario.parallelism.pp == 2:
            raise SimulationError("deadlock: stage 1 waits forever")
        return real(scenario, **kwargs)

    monkeypatch.setattr(clustersim.api, "simulate", flaky)
    found = plan.enumerate_candidates(training_doc(), "s.yaml", plan.PlanOptions(tp=(1,)))
    ranked = plan.rank(plan.run_candidates(found.candidates, workers=1))
    failed = [o for o in ranked if not o.ok]
    assert failed and all(o.point.pp == 2 for o in failed)
    assert all("deadlock: stage 1" in o.error and o.rank is None for o in failed)
    assert ranked[: len(ranked) - len(failed)] == [o for o in ranked if o.ok]


# --------------------------------------------------------------------------- CLI


def test_cli_prints_ranked_table_and_writes_files(tmp_path: Path, capsys) -> None:
    """Table ranked by throughput, --top rows, best line, plan.csv/md/png with every candidate."""
    path = write_doc(tmp_path, training_doc())
    out_dir = tmp_path / "out"
    args = ["--top", "5", "--pp", "1,2", "--micro-batch", "2,4", "-j", "2", "-o", str(out_dir)]
    code = main(["plan", path, *args])
    captured = capsys.readouterr()
    assert code == 0
    lines = captured.out.splitlines()
    assert "16 GPUs, 8 per node" in lines[0]
    assert "alpha-beta" in captured.out
    header = next(i for i, line in enumerate(lines) if line.startswith("rank"))
    rows = lines[header + 1 : header + 6]
    assert [r.split()[0] for r in rows] == ["1", "2", "3", "4", "5"]
    assert lines[header + 6].startswith("best that fits: ")
    assert "planning [" not in captured.err
    with open(out_dir / "plan.csv", newline="") as fh:
        table = list(csv.DictReader(fh))
    options = plan.PlanOptions(pp=(1, 2), micro_batch=(2, 4))
    found = plan.enumerate_candidates(training_doc(), path, options)
    assert len(table) == len(found.candidates)
    speeds = [float(r["throughput_samples_per_s"]) for r in table]
    assert speeds == sorted(speeds, reverse=True)
    assert [int(r["rank"]) for r in table] == list(range(1, len(table) + 1))
    assert f"{speeds[0]:,.1f}" in rows[0].split()
    assert (out_dir / "plan.md").read_text().startswith("# plan: plan-test on 16 GPUs")
    assert (out_dir / "plan.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(out_dir.glob(".*.tmp"))


def test_cli_progress_on_request(tmp_path: Path, capsys) -> None:
    path = write_doc(tmp_path, training_doc())
    assert main(["plan", path, "--tp", "1", "--pp", "1", "--progress", "-j", "1"]) == 0
    err = capsys.readouterr().err
    assert "planning [" in err and "configurations" in err and err.endswith("\r")
    assert main(["plan", path, "--tp", "1", "--pp", "1", "--progress", "-q", "-j", "1"]) == 0
    assert capsys.readouterr().err == ""


def test_cli_resize_fit_only_and_zero(tmp_path: Path, capsys) -> None:
    """--devices 8 plans one node; ZeRO 3 appears once; --fit-only hides rows that do not fit."""
    _, capacity = tiny_memory_doc(plan.PlanOptions(zero=(0, 3)), devices=8)
    path = write_doc(tmp_path, training_doc(memory=f"{int(capacity)}B"))  # 16 GPUs
    code = main(["plan", path, "--devices", "8", "--zero", "0,3", "--fit-only", "-j", "1"])
    out = capsys.readouterr().out
    assert code == 0
    assert "plan plan-test: 8 GPUs, 8 per node" in out
    table = out.split("rank", 1)[1].splitlines()[1:]
    rows = [line.split() for line in table if line[:4].strip().isdigit()]
    assert rows and all(r[-1] == "yes" for r in rows)
    assert sum(1 for r in rows if r[4] == "-") <= 1  # ZeRO 3: no micro-batches, one row
    ranks = [int(r[0]) for r in rows]  # ranks among all configurations: gaps where rows hide
    assert ranks == sorted(ranks) and ranks[-1] > len(ranks)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--devices", "24"], "--devices: 24 GPUs do not fill whole racks"),
        (["--devices", "0"], "--devices: expected a whole number >= 1"),
        (["--tp", "two"], "--tp: expected whole numbers"),
        (["--zero", "5"], "--zero: expected whole numbers 0..3"),
        (["--top", "0"], "--top: expected a whole number >= 1"),
        (["--verify", "0"], "--verify: expected a whole number >= 1"),
        (["--iterations", "0"], "--iterations: expected a whole number >= 1"),
        (["--tp", "16"], "no valid configuration"),
        (["--micro-batch", "128"], "no valid configuration"),
        (["--micro-batch", "128", "--tp", "1"], "no valid configuration"),
    ],
)
def test_cli_bad_input_exits_2(tmp_path: Path, capsys, args: list[str], message: str) -> None:
    path = write_doc(tmp_path, training_doc())
    assert main(["plan", path, *args]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and "Traceback" not in captured.err


def test_cli_batch_too_small_is_explained(tmp_path: Path, capsys) -> None:
    """A global batch smaller than every dp x micro_batch: a note says why, exit 2."""
    path = write_doc(tmp_path, training_doc(batch=1))
    assert main(["plan", path, "--micro-batch", "2"]) == 2
    captured = capsys.readouterr()
    assert "note: no configuration: global_batch 1 cannot be split" in captured.out
    assert "no valid configuration" in captured.err


def test_cli_workload_and_missing_file_exit_2(capsys) -> None:
    workload = SCENARIOS / "clusters" / "dgx-a100-4nodes.yaml"
    assert main(["plan", str(workload)]) == 2
    assert "workload: clustersim plan searches training" in capsys.readouterr().err
    assert main(["plan", "no/such/file.yaml"]) == 2
    assert "file not found" in capsys.readouterr().err


def test_cli_every_simulation_failed_exits_1(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    import clustersim.api

    def broken(scenario: Any, **kwargs: Any) -> Any:
        raise SimulationError("nothing runs")

    monkeypatch.setattr(clustersim.api, "simulate", broken)
    path = write_doc(tmp_path, training_doc())
    assert main(["plan", path, "--tp", "1", "--pp", "1", "-j", "1"]) == 1
    out = capsys.readouterr().out
    assert "failed  nothing runs" in out and "no configuration ran" in out


def test_skipped_reasons_are_printed(tmp_path: Path, capsys) -> None:
    doc = copy.deepcopy(training_doc(parallelism={"tp_algorithm": "scatter_allgather"}))
    path = write_doc(tmp_path, doc)
    assert main(["plan", path, "--pp", "1", "-j", "1"]) == 0
    out = capsys.readouterr().out
    # tp 2, 4, 8 with pp 1: dp 8, 4, 2, each with micro-batches 1, 2, 4, 8 and ZeRO 0, 1
    assert "skipped 24:" in out and "24 x parallelism.tp_algorithm" in out


# --------------------------------------------------------------------------- --verify


def test_fast_models_top_five_keep_their_order_in_flow_mode() -> None:
    """GPT-3 1.3B on 32 GPUs (tp 1-2, micro-batch 1-2, ZeRO 0): the congestion-aware
    analytical model's best five come in the same order when simulated flow-level with every
    replica, each iteration time within 1.5% (the congestion-unaware alpha-beta pricing ranked
    dp 4 x tp 2 x pp 4 first here, 25% faster than the flow-level model finds it).  With tp 2
    the two tensor ranks' rings cross each node's NIC together; flow-level, step by step,
    each of the 25 overlapped bucket all-reduces takes 0.12 ms more (1.06% in all)."""
    doc = plan.load_training_document(SCENARIOS / "zero/gpt3_1.3b_stage1.yaml")
    options = plan.PlanOptions(devices=32, tp=(1, 2), micro_batch=(1, 2), zero=(0,))
    found = plan.enumerate_candidates(doc, "gpt3", options)
    ranked = plan.rank(plan.run_candidates(found.candidates, 2))
    verified = plan.verify(ranked, 5, 2)
    assert [v.fast.rank for v in verified] == [1, 2, 3, 4, 5]
    assert [v.flow_rank for v in verified] == [1, 2, 3, 4, 5]
    assert plan.same_order(verified)
    for v in verified:
        assert v.difference is not None and abs(v.difference) < 0.015
        assert v.flow.candidate.doc["network"]["model"] == "flow"
    lines = plan.verification_lines(verified, "analytical")
    assert lines[-1] == "the flow-level model ranks these 5 as analytical does"


def test_verification_lines_say_when_the_order_differs() -> None:
    """Two verified rows whose flow-level ranks are swapped: the last line lists plan ranks
    in flow-level order."""
    point = plan.Point(dp=1, tp=1, pp=1, micro_batch=1, micro_batches=1, zero=0)
    rows = []
    for rank, (fast, flow) in enumerate(((1.0, 2.0), (1.1, 1.5)), start=1):
        candidate = plan.Candidate(rank, point, {})
        a = plan.Outcome(candidate, fast, 1 / fast, rank=rank)
        b = plan.Outcome(candidate, flow, 1 / flow)
        rows.append(plan.Verification(a, b, flow_rank=3 - rank))
    lines = plan.verification_lines(rows, "analytical")
    assert "+100.0%" not in lines[1] and "-50.0%" in lines[1]
    assert lines[-1] == "the flow-level model ranks them differently: 2, 1 (plan ranks)"


def test_cli_verify_prints_both_times_and_fills_csv(tmp_path: Path, capsys) -> None:
    path = write_doc(tmp_path, training_doc())
    out_dir = tmp_path / "out"
    args = ["--pp", "1,2", "--micro-batch", "2", "--verify", "3", "-j", "1", "-o", str(out_dir)]
    assert main(["plan", path, *args]) == 0
    out = capsys.readouterr().out
    assert "verifying the best 3 with the flow-level model, every replica" in out
    assert "flow iteration" in out and "flow rank" in out
    with open(out_dir / "plan.csv", newline="") as fh:
        table = list(csv.DictReader(fh))
    filled = [r for r in table if r["flow_rank"]]
    assert [int(r["rank"]) for r in filled] == [1, 2, 3]
    for row in filled:
        fast, flow = float(row["iteration_time_s"]), float(row["flow_iteration_time_s"])
        assert flow == pytest.approx(fast, rel=0.10)
    assert all(not r["flow_iteration_time_s"] for r in table[3:])
    assert "flow iteration" in (out_dir / "plan.md").read_text()
