"""Pipeline parallelism: schedules, stage split, and cases B1-B5 of validation/cases.md.

The reference setup: p GPUs on one switch (100 TFLOP/s each), one layer per
virtual stage of 1 GFLOP forward and 2 GFLOP backward per sample, no
parameters (so the optimizer step takes no time) and no activation bytes (so
inter-stage transfers take no time), unless a test says otherwise.  Each
replica trains 100 samples per micro-batch, so one chunk's forward takes
t_f = 1 ms and its backward t_b = 2 ms.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clustersim import simulate
from clustersim.errors import ScenarioError
from clustersim.parallel import schedules
from clustersim.parallel.schedules import (
    BACKWARD,
    BUILTIN_SCHEDULES,
    FORWARD,
    Op,
    Schedule,
    ideal_timeline,
    make_schedule,
    registered_schedules,
    schedule_modules,
)
from clustersim.parallel.stages import balanced_split
from clustersim.scenario import load_scenario, parse_scenario, scenario_json_schema

from . import shared_runs
from .conftest import SCENARIOS, TEXTBOOK

T_F = 1e-3
T_B = 2e-3
SAMPLES = 100
STAGES = (2, 4, 8)
MICRO_BATCHES = (1, 4, 8, 32)
GRID = [(p, m) for p in STAGES for m in MICRO_BATCHES]
BUILTIN_NAMES = (
    "naive",
    "gpipe",
    "1f1b",
    "interleaved",
    "zb-h1",
    "zb-v",
    "pipedream",
    "pipedream-2bw",
)
"""The built-in schedules in ``clustersim list schedules`` order (zero-bubble and
PipeDream ones: tests/test_schedule_zero_bubble.py, tests/test_schedule_pipedream.py)."""


def doc(
    p: int,
    m: int,
    schedule: str = "gpipe",
    *,
    chunks: int = 1,
    recompute: bool = False,
    activations: str = "0",
    params: float = 0,
    bandwidth: str = "1000PB/s",
    latency: str = "0",
    iterations: int = 2,
    dp: int | None = None,
    devices: int | None = None,
    stragglers: list[dict[str, Any]] | None = None,
    **pipeline: Any,
) -> dict[str, Any]:
    """A pipeline scenario: ``p`` stages (x ``dp`` replicas) on one switch."""
    replicas = dp or 1
    parallelism: dict[str, Any] = {"pp": p}
    if dp is not None:
        parallelism["dp"] = dp
    return {
        "name": "pp-test",
        "cluster": {
            "kind": "switch",
            "devices": devices or p * replicas,
            "device": {"flops": "100TFLOPS"},
            "link": {"bandwidth": bandwidth, "latency": latency},
        },
        "stragglers": stragglers or [],
        "model": {
            "layers": [
                {
                    "name": "block",
                    "params": params,
                    "flops": 1e9,
                    "activations": activations,
                    "repeat": p * chunks,
                }
            ]
        },
        "training": {"global_batch": SAMPLES * m * replicas, "iterations": iterations},
        "parallelism": parallelism,
        "data_parallel": {"allreduce": {"algorithm": "ring"}},
        "network": dict(TEXTBOOK),  # the textbook's ring: the formulas these tests hold
        "pipeline": {
            "schedule": schedule,
            "micro_batches": m,
            "chunks": chunks,
            "recompute": recompute,
            **pipeline,
        },
    }


def run(document: dict[str, Any]) -> Any:
    return simulate(parse_scenario(document))


def close(a: float, b: float, rel: float) -> bool:
    return a == pytest.approx(b, rel=rel, abs=1e-12)


# --------------------------------------------------------------------------- schedules


def test_registry_has_the_four_schedules() -> None:
    assert {"naive", "gpipe", "1f1b", "interleaved"} <= set(registered_schedules())


@pytest.fixture
def new_schedule() -> Iterator[type[Schedule]]:
    """A schedule defined in the test, as a new file under parallel/schedules/ would define
    it (a subclass with a name, nothing else), and forgotten after the test."""

    class FirstInFirstOut(Schedule):
        """All forwards, then the backwards in the same order (GPipe's reversed)."""

        name = "test-fifo"
        description = "all forwards, then all backwards in forward order"

        def operations(self, stage: int) -> list[Op]:
            m = self.micro_batches
            return [Op(FORWARD, j) for j in range(m)] + [Op(BACKWARD, j) for j in range(m)]

    yield FirstInFirstOut
    Schedule.registry.remove(FirstInFirstOut.name)


def test_a_subclass_with_a_name_registers_itself(new_schedule: type[Schedule]) -> None:
    schedule = make_schedule("test-fifo", 4, 8)
    assert isinstance(schedule, new_schedule)
    times = ideal_timeline(schedule, T_F, T_B)
    assert max(end for _, end in times.values()) == pytest.approx(11 * (T_F + T_B))


def test_a_new_schedule_runs_from_a_scenario(new_schedule: type[Schedule]) -> None:
    """A registered schedule is a valid ``pipeline.schedule`` without touching the scenario
    code: the scenario, the schema and the simulation take it; once it is gone, the name is
    an error again."""
    summary = run(doc(4, 8, "test-fifo")).summary
    assert summary["schedule"] == "test-fifo"
    # the last stage runs its backwards after the last forward (11 t_f), each stage
    # before it one backward behind: stage 0 ends at 11 t_f + 11 t_b
    assert close(summary["iteration_time_s"], 11 * (T_F + T_B), 1e-3)
    schema = scenario_json_schema()["$defs"]["PipelineSpec"]["properties"]["schedule"]
    assert schema["enum"] == [*BUILTIN_NAMES, "test-fifo"]
    Schedule.registry.remove("test-fifo")
    with pytest.raises(ScenarioError) as info:
        parse_scenario(doc(4, 8, "test-fifo"))
    assert info.value.problems[0].path == "pipeline.schedule"


def test_every_module_of_the_schedules_folder_is_loaded() -> None:
    """The registry imports each file of parallel/schedules/ (the built-ins first, in their
    order), so a new schedule needs no list to be added to."""
    folder = Path(schedules.__file__).parent
    files = {path.stem for path in folder.glob("*.py")} - {"__init__", "base"}
    assert set(schedule_modules()) == files
    assert schedule_modules()[: len(BUILTIN_SCHEDULES)] == list(BUILTIN_SCHEDULES)
    assert list(registered_schedules())[: len(BUILTIN_NAMES)] == list(BUILTIN_NAMES)


@pytest.mark.parametrize(
    "value, message",
    [
        ("1f1bb", "unknown schedule '1f1bb'; did you mean '1f1b'?"),
        ("GPipe", "unknown schedule 'GPipe'; did you mean 'gpipe'?"),
        ("zzz", "unknown schedule 'zzz'"),
        (3, "must be text, got 3"),
        (None, "must be text, got nothing (null)"),
    ],
)
def test_an_unknown_schedule_names_the_key_and_the_schedules(value: Any, message: str) -> None:
    """A name the schedule registry does not hold is refused at the key with the registered
    names and a guess; a value that is no name at all, as not being text."""
    document = doc(4, 8)
    document["pipeline"]["schedule"] = value
    with pytest.raises(ScenarioError) as info:
        parse_scenario(document)
    [problem] = info.value.problems
    assert problem.path == "pipeline.schedule"
    assert problem.message == message
    if isinstance(value, str):
        assert problem.allowed == ", ".join(BUILTIN_NAMES)


@pytest.mark.parametrize("name", ["naive", "gpipe", "1f1b", "interleaved"])
@pytest.mark.parametrize("p, m", GRID)
def test_every_op_once_forward_before_backward(name: str, p: int, m: int) -> None:
    for v in (1, 2, 3) if name == "interleaved" else (1,):
        if name == "interleaved" and m % p:
            continue
        schedule = make_schedule(name, p, m, v)
        for s in range(p):
            ops = schedule.operations(s)
            expected = {
                Op(k, j, c) for k in (FORWARD, BACKWARD) for j in range(m) for c in range(v)
            }
            assert len(ops) == len(expected) and set(ops) == expected
            for j in range(m):
                for c in range(v):
                    assert ops.index(Op(FORWARD, j, c)) < ops.index(Op(BACKWARD, j, c))


@pytest.mark.parametrize("name", ["naive", "gpipe", "1f1b", "interleaved"])
@pytest.mark.parametrize("p, m", GRID)
def test_ideal_timeline_matches_the_theoretical_bubble(name: str, p: int, m: int) -> None:
    for v in (1, 2, 4) if name == "interleaved" else (1,):
        if name == "interleaved" and m % p:
            continue
        schedule = make_schedule(name, p, m, v)
        times = ideal_timeline(schedule, T_F / v, T_B / v)
        iteration = max(end for _, end in times.values())
        bubble = (iteration - m * (T_F + T_B)) / iteration
        assert close(bubble, schedule.theoretical_bubble(), 1e-9)


@pytest.mark.parametrize("p, m, v", [(4, 4, 8), (4, 8, 2), (8, 8, 2), (2, 2, 3), (4, 16, 4)])
def test_interleaved_warmup_is_megatron_cores(p: int, m: int, v: int) -> None:
    """Megatron-Core's get_pp_rank_microbatches: stage s runs min(2 (p - s - 1) + (v - 1) p,
    m v) forwards before its first backward, with m = p too (Megatron-LM before November
    2024 ran all m v there); so it holds that many + 1 (micro-batch, chunk) pairs at its
    peak, all m v when the warm-up covers them."""
    from clustersim.strategies.hybrid.stages import peak_stored

    schedule = make_schedule("interleaved", p, m, v)
    for s in range(p):
        ops = schedule.operations(s)
        warmup = min(2 * (p - s - 1) + (v - 1) * p, m * v)
        assert [op.kind for op in ops[:warmup]] == [FORWARD] * warmup
        assert ops[warmup].kind == (BACKWARD if warmup == m * v else FORWARD)
        assert peak_stored(ops)[0] == min(warmup + 1, m * v)


def test_interleaved_needs_m_a_multiple_of_p() -> None:
    with pytest.raises(ScenarioError) as info:
        make_schedule("interleaved", 4, 6, 2)
    problem = info.value.problems[0]
    assert problem.path == "pipeline.micro_batches"
    assert "multiple of the pipeline stages (4)" in problem.message


def test_interleaved_error_from_a_scenario() -> None:
    with pytest.raises(ScenarioError) as info:
        run(doc(4, 6, "interleaved", chunks=2))
    assert info.value.problems[0].path == "pipeline.micro_batches"


def test_chunks_need_the_interleaved_schedule() -> None:
    with pytest.raises(ScenarioError) as info:
        run(doc(4, 8, "1f1b", chunks=2))
    assert info.value.problems[0].path == "pipeline.chunks"


# --------------------------------------------------------------------------- stage split


def test_balanced_split_even_and_lumpy() -> None:
    assert balanced_split([1.0] * 8, 4) == [2, 2, 2, 2]
    assert balanced_split([5, 1, 1, 1, 1, 1], 2) == [1, 5]
    counts = balanced_split([0.0] + [1.0] * 96 + [2.4], 8)
    assert sum(counts) == 98 and len(counts) == 8 and min(counts) >= 1
    assert max(counts) <= 14
    with pytest.raises(ValueError):
        balanced_split([1.0, 1.0], 3)


def test_stage_layers_as_listed_and_its_errors() -> None:
    document = doc(2, 4)
    document["model"]["layers"][0]["repeat"] = 4
    document["pipeline"]["stage_layers"] = [1, 3]
    result = run(document)
    assert result.summary["stage_layers"] == [1, 3]
    fwd = [r for r in result.records if r.label == "fwd" and r.iteration == 0]
    assert {r.stage: r.flops for r in fwd} == {0: 1e9 * SAMPLES, 1: 3e9 * SAMPLES}
    document["pipeline"]["stage_layers"] = [1, 2]
    with pytest.raises(ScenarioError) as info:
        run(document)
    assert info.value.problems[0].path == "pipeline.stage_layers"
    document["pipeline"]["stage_layers"] = [1, 1, 2]
    with pytest.raises(ScenarioError):
        run(document)


@pytest.mark.parametrize("schedule", ["1f1b", "interleaved"])
@pytest.mark.parametrize("p, m", [(p, m) for p, m in GRID if m < p])
def test_1f1b_needs_a_micro_batch_per_stage(schedule: str, p: int, m: int) -> None:
    """1F1B's warm-up runs p - s forwards: fewer micro-batches than stages is refused."""
    with pytest.raises(ScenarioError) as info:
        run(doc(p, m, schedule))
    assert info.value.problems[0].path == "pipeline.micro_batches"
    assert f"{m} micro-batches are fewer than the {p} pipeline stages" in str(info.value)


def test_grid_and_batch_errors() -> None:
    with pytest.raises(ScenarioError) as info:
        run(doc(3, 4, devices=4))
    assert info.value.problems[0].path == "parallelism.pp"
    with pytest.raises(ScenarioError) as info:
        run(doc(2, 4, dp=3, devices=4))
    assert info.value.problems[0].path == "parallelism.dp"
    document = doc(2, 4)
    document["training"]["global_batch"] = 3
    with pytest.raises(ScenarioError) as info:
        run(document)
    assert info.value.problems[0].path == "training.global_batch"


# --------------------------------------------------------------------------- B1-B5


@pytest.mark.parametrize("p", STAGES)
def test_b1_naive_one_micro_batch(p: int) -> None:
    summary = run(doc(p, 1, "naive")).summary
    assert close(summary["iteration_time_s"], p * (T_F + T_B), 1e-3)
    for fraction in summary["per_device_bubble"].values():
        assert close(fraction, (p - 1) / p, 1e-3)
    assert summary["theoretical_bubble_fraction"] == pytest.approx((p - 1) / p)


@pytest.mark.parametrize("p, m", GRID)
def test_b2_gpipe(p: int, m: int) -> None:
    summary = run(doc(p, m, "gpipe")).summary
    assert close(summary["iteration_time_s"], (m + p - 1) * (T_F + T_B), 1e-3)
    assert close(summary["bubble_fraction"], (p - 1) / (m + p - 1), 1e-3)
    assert summary["theoretical_bubble_fraction"] == pytest.approx((p - 1) / (m + p - 1))
    for fraction in summary["per_device_bubble"].values():
        assert close(fraction, (p - 1) / (m + p - 1), 1e-3)


def test_b2_worked_example_3_of_11() -> None:
    summary = run(doc(4, 8, "gpipe")).summary
    assert summary["bubble_fraction"] == pytest.approx(3 / 11, rel=1e-3)
    assert summary["schedule"] == "gpipe" and summary["stages"] == 4
    assert summary["micro_batches"] == 8 and summary["chunks"] == 1


@pytest.mark.parametrize("p, m", [(p, m) for p, m in GRID if m >= p])
def test_b3_1f1b_time_and_stored_activations(p: int, m: int) -> None:
    one = run(doc(p, m, "1f1b")).summary
    gpipe = run(doc(p, m, "gpipe")).summary
    assert close(one["iteration_time_s"], (m + p - 1) * (T_F + T_B), 1e-3)
    assert close(one["bubble_fraction"], (p - 1) / (m + p - 1), 1e-3)
    for s in range(p):
        assert one["activation_memory"][str(s)]["peak_microbatches"] == min(p - s, m)
        assert gpipe["activation_memory"][str(s)]["peak_microbatches"] == m
        stored = [n for _, n, _ in one["activation_memory"][str(s)]["timeline"]]
        assert max(stored) <= min(p - s, m) and stored[-1] == 0


@pytest.mark.parametrize("p, m", [(p, m) for p, m in GRID if m % p == 0])
@pytest.mark.parametrize("v", [2, 4])
def test_b4_interleaved_bubble_time(p: int, m: int, v: int) -> None:
    summary = run(doc(p, m, "interleaved", chunks=v)).summary
    t_f, t_b = v * T_F, v * T_B  # per device: v chunks of one layer each
    bubble_s = summary["iteration_time_s"] - m * (t_f + t_b)
    assert close(bubble_s, (p - 1) * (t_f + t_b) / v, 1e-2)
    assert summary["theoretical_bubble_fraction"] == pytest.approx((p - 1) / (v * m + p - 1))
    assert close(summary["bubble_fraction"], summary["theoretical_bubble_fraction"], 1e-2)


@pytest.mark.parametrize("p, m", GRID)
def test_b5_gpipe_recompute(p: int, m: int) -> None:
    activations = 1e6 * SAMPLES  # bytes per micro-batch per layer ("1MB" per sample)
    result = run(doc(p, m, "gpipe", recompute=True, activations="1MB"))
    summary = result.summary
    assert close(summary["iteration_time_s"], (m + p - 1) * (2 * T_F + T_B), 1e-3)
    for r in result.records:
        if r.label == "bwd":
            assert close(r.duration_s, T_F + T_B, 1e-9)
    plain = run(doc(p, m, "gpipe", activations="1MB")).summary
    for s in range(p):
        with_recompute = summary["activation_memory"][str(s)]
        # one layer per stage: the stage input is the previous stage's output, as large
        assert with_recompute["peak_bytes"] == pytest.approx(m * activations)
        assert plain["activation_memory"][str(s)]["peak_bytes"] == pytest.approx(m * activations)


def test_b5_recompute_stores_only_stage_inputs() -> None:
    """Four layers per stage: without recompute a stage stores 4 layers' activations, with it one."""
    p, m = 4, 8
    documents = [doc(p, m, "gpipe", recompute=r, activations="1MB") for r in (False, True)]
    for document in documents:
        document["model"]["layers"][0]["repeat"] = 4 * p
    plain, recompute = (run(d).summary["activation_memory"] for d in documents)
    for s in range(p):
        assert plain[str(s)]["peak_bytes"] == pytest.approx(m * 4 * 1e6 * SAMPLES)
        assert recompute[str(s)]["peak_bytes"] == pytest.approx(m * 1e6 * SAMPLES)
        assert recompute[str(s)]["recompute_working_bytes"] == pytest.approx(4 * 1e6 * SAMPLES)


# --------------------------------------------------------------------------- network, dp, records


def test_slow_inter_stage_link_shows_in_the_iteration() -> None:
    """Naive m=1, p=4; 100 MB activations over 100 GB/s: each hop 1 ms (src and dst links)."""
    base = doc(4, 1, "naive", activations="1MB", bandwidth="100GB/s")
    summary = run(base).summary
    assert summary["iteration_time_s"] == pytest.approx(4 * (T_F + T_B) + 6 * 1e-3, rel=1e-6)
    slow = {**base, "stragglers": [{"links": "gpu1->switch", "bandwidth_factor": 0.1}]}
    summary = run(slow).summary
    # the activation 1 -> 2 and the gradient 1 -> 0 leave gpu1 at a tenth of the speed
    assert summary["iteration_time_s"] == pytest.approx(4 * (T_F + T_B) + 4e-3 + 20e-3, rel=1e-6)


def test_pp_times_dp_allreduces_each_stage() -> None:
    """pp 4 x dp 2: stage s of replica d is gpu(4d + s); 100 MB of gradients per stage."""
    p, m = 4, 8
    result = run(doc(p, m, "gpipe", dp=2, params=25e6, bandwidth="100GB/s"))
    summary = result.summary
    assert summary["dp"] == 2
    assert summary["stage_devices"] == [
        ["gpu0", "gpu1", "gpu2", "gpu3"],
        ["gpu4", "gpu5", "gpu6", "gpu7"],
    ]
    allreduce_s = 100e6 / 100e9  # ring of 2: 2 (n-1)/n x S / B
    optimizer_s = 12 * 25e6 / 2e12
    expected = (m + p - 1) * (T_F + T_B) + allreduce_s + optimizer_s
    assert summary["iteration_time_s"] == pytest.approx(expected, rel=1e-3)
    labels = {r.label for r in result.records if r.kind != "compute"}
    assert {f"allreduce stage{s}" for s in range(p)} <= labels
    assert summary["communication"]["allreduce_bytes"] == [100e6] * p


def test_records_are_tagged() -> None:
    p, m, v, iterations = 4, 8, 2, 2
    result = run(doc(p, m, "interleaved", chunks=v, activations="1MB", iterations=iterations))
    fwd = [r for r in result.records if r.label == "fwd"]
    bwd = [r for r in result.records if r.label == "bwd"]
    assert len(fwd) == len(bwd) == iterations * p * m * v
    assert {(r.iteration, r.microbatch, r.stage, r.op) for r in fwd} == {
        (i, j, s, f"chunk{c}")
        for i in range(iterations)
        for j in range(m)
        for s in range(p)
        for c in range(v)
    }
    sends = [r for r in result.records if r.kind == "transfer"]
    assert {r.label for r in sends} == {"activation", "gradient"}
    # p v - 1 boundaries, each crossed by every micro-batch forward and backward
    assert len(sends) == iterations * m * 2 * (p * v - 1)
    assert all(r.microbatch >= 0 and r.stage >= 0 and r.iteration >= 0 for r in sends)
    assert all(r.stage == int(r.resource[3:]) for r in fwd + sends)


def test_summary_keys() -> None:
    summary = run(doc(4, 8, "1f1b")).summary
    for key in (
        "iteration_time_s",
        "iteration_times_s",
        "throughput_samples_per_s",
        "per_iteration",
        "schedule",
        "stages",
        "micro_batches",
        "chunks",
        "theoretical_bubble_fraction",
        "bubble_fraction",
        "per_device_bubble",
        "per_device_iteration",
        "stage_layers",
        "activation_memory",
    ):
        assert key in summary
    assert summary["workload"] == "pipeline"
    rows = summary["per_device_iteration"]["gpu0"]
    assert len(rows) == 2
    assert rows[1]["bubble_fraction"] == pytest.approx(3 / 11, rel=1e-3)


def test_stage_straggler_sets_the_pace() -> None:
    p, m = 4, 8
    fast = run(doc(p, m, "1f1b")).summary["iteration_time_s"]
    slow = run(doc(p, m, "1f1b", stragglers=[{"devices": "gpu2", "slowdown": 2}])).summary
    assert slow["iteration_time_s"] > 1.5 * fast
    bubbles = slow["per_device_bubble"]
    assert min(bubbles, key=bubbles.get) == "gpu2"


def test_pipeline_section_selects_the_strategy_even_with_pp_1() -> None:
    document = doc(1, 4, "gpipe")
    summary = run(document).summary
    assert summary["workload"] == "pipeline"
    assert summary["iteration_time_s"] == pytest.approx(4 * (T_F + T_B), rel=1e-6)


PIPELINE_SCENARIOS = sorted((SCENARIOS / "pipeline").glob("*.yaml"))
DEMO = SCENARIOS / "pipeline" / "dgx_a100_llama2_7b.yaml"
"""``make demo``'s scenario: 4 stages of tp 2 (the GPT-2 files of the folder have 8 stages)."""


def test_shipped_scenarios_exist() -> None:
    names = {path.stem for path in PIPELINE_SCENARIOS}
    expected = {f"{s}_m{m}" for s in ("naive", "gpipe", "1f1b", "interleaved") for m in (8, 32)}
    assert expected | {"straggler_stage", "slow_link"} <= names


@pytest.mark.parametrize("path", PIPELINE_SCENARIOS, ids=lambda p: p.stem)
def test_shipped_scenario_runs(path: Any) -> None:
    assert path.read_text().startswith("#")
    summary = shared_runs.summary(path)
    assert summary["stages"] == (4 if path == DEMO else 8)
    assert summary["iteration_time_s"] > 0
    # The optimizer step runs on every stage at once after the flush: a sliver of compute the
    # theoretical bubble leaves out, so the measured bubble may fall short of it by that much.
    assert summary["bubble_fraction"] >= summary["theoretical_bubble_fraction"] - 1e-3


def test_make_demo_runs_the_demo_scenario() -> None:
    """The Makefile's DEMO variable names scenarios/pipeline/dgx_a100_llama2_7b.yaml."""
    makefile = (SCENARIOS.parent / "Makefile").read_text()
    (line,) = [row for row in makefile.splitlines() if row.startswith("DEMO ")]
    assert SCENARIOS.parent / line.split("?=")[1].strip() == DEMO


def test_demo_fits_and_its_bubble_is_near_the_theory() -> None:
    """What the demo's header says: it fits in memory with the default 10% allocator
    allowance (26.9 GB of 80 GB on stage 0, sequence parallelism on), and its measured
    bubble is within 0.03 of 1F1B's (p-1)/(m+p-1) = 3/11, above it (the heavier last stage
    sets the pace)."""
    scenario = load_scenario(DEMO)
    assert scenario.training.memory.fragmentation == pytest.approx(0.1)  # the default
    summary = simulate(scenario).summary
    memory = summary["memory"]
    assert memory["fits"] and memory["devices_over_capacity"] == 0
    assert memory["peak_device"] == "rack0/node0/gpu0"
    assert memory["peak_bytes"] == pytest.approx(26.86e9, rel=0.01)
    assert summary["sequence_parallel"] and summary["recompute_mode"] == "none"
    assert memory["capacity_bytes"] == 80e9
    assert (summary["stages"], summary["micro_batches"], summary["tp"]) == (4, 8, 2)
    theory = summary["theoretical_bubble_fraction"]
    assert theory == pytest.approx(3 / 11)
    assert theory <= summary["bubble_fraction"] <= theory + 0.03
    assert summary["bubble_fraction"] == pytest.approx(0.295, abs=5e-4)


def test_the_readme_quotes_what_make_demo_prints() -> None:
    """The README shows the iteration, bubble and memory lines `make demo` ends with: they
    are the demo's, as `clustersim report` prints them."""
    from clustersim.cli.headline import headline

    readme = (SCENARIOS.parent / "README.md").read_text()
    lines = headline(simulate(load_scenario(DEMO)).typed_summary)
    assert [line.split()[0] for line in lines] == ["iteration", "bubble", "memory"]
    assert all(f"\n{line}\n" in readme for line in lines)


@pytest.mark.parametrize(
    "name",
    ["1f1b_m8", "gpipe_m8", "interleaved_m8", "zb_h1", "zb_v", "pipedream", "pipedream_2bw"],
)
def test_a_run_keeps_no_arrival_it_has_used(name: str) -> None:
    """Every activation's and gradient's arrival event is asked for twice (the op that waits
    for it, the send that triggers it) and the second takes it out: after a run none is left
    (one asked a third time, or never twice, would be)."""
    from clustersim.api import prepare
    from clustersim.engine import Simulation

    prepared = prepare(Path(__file__).parent.parent / "scenarios" / "pipeline" / f"{name}.yaml")
    sim = Simulation.from_scenario(prepared.scenario, prepared.topology)
    prepared.strategy.start(sim)
    sim.run()
    assert prepared.strategy._arrivals == {}
    assert sim.records and max(r.end_s for r in sim.records) > 0
