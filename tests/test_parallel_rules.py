"""The one home of parallel validity rules: placement, the schedules, the hybrid strategy and
plan agree with it."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from clustersim.api import prepare
from clustersim.errors import Problem, ScenarioError
from clustersim.parallel.rules import (
    SHARDED_STAGE,
    SpreadGroup,
    grid_size_problem,
    grid_split_problem,
    micro_batch_per_stage_problem,
    micro_batch_problem,
    micro_batch_size_problem,
    micro_batches_multiple_problem,
    schedule_problems,
    sharded_zero_problem,
    stage_layers_problem,
    stage_split_problem,
    tensor_group_node_problem,
    tensor_parallel_problem,
)
from clustersim.parallel.schedules import make_schedule, registered_schedules
from clustersim.parallel.stages import check_stage_layers
from clustersim.scenario import parse_scenario
from clustersim.studies import plan


@pytest.mark.parametrize("heads", [12, 16, 25, 96])
def test_tp_must_divide_the_heads(heads: int) -> None:
    for tp in range(1, 17):
        problem = tensor_parallel_problem(tp, heads)
        assert (problem is None) == (heads % tp == 0), (tp, heads)
        if problem is not None:
            assert problem.path == "parallelism.tp" and str(heads) in problem.message


def test_tp_needs_a_transformer() -> None:
    assert tensor_parallel_problem(1, None) is None
    problem = tensor_parallel_problem(2, None)
    assert problem is not None and "transformer" in problem.message


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_sharded_zero_runs_without_pipeline_parallelism(stage: int) -> None:
    """ZeRO-2/3 combine with tp (Megatron-DeepSpeed), not with pp > 1: DeepSpeed's pipeline
    engine asserts a ZeRO stage below 2."""
    for tp, pp, section in [
        (1, 1, False),
        (2, 1, False),
        (1, 2, False),
        (1, 1, True),
        (2, 4, True),
    ]:
        problem = sharded_zero_problem(stage, tp, pp, section)
        allowed = stage < SHARDED_STAGE or pp == 1
        assert (problem is None) == allowed, (stage, tp, pp, section)
        if problem is not None:
            assert problem.path == "zero.stage"
            assert "DeepSpeed's pipeline engine" in problem.message


def test_plan_enumerates_only_what_the_rules_allow() -> None:
    space = plan.SearchSpace(
        devices=32,
        gpus_per_node=8,
        heads=24,
        blocks=24,
        global_batch=64,
        allow_cross_node_tp=False,
    )
    points = plan.enumerate_points(space, plan.PlanOptions(zero=(0, 1, 2, 3)))
    assert points
    for p in points:
        assert tensor_parallel_problem(p.tp, space.heads) is None
        assert sharded_zero_problem(p.zero, p.tp, p.pp, False) is None
    assert {p.tp for p in points} == {1, 2, 4, 8}  # 24 heads: 16 does not divide, 8 per node
    assert any(p.zero == 3 for p in points) and all(
        p.tp == p.pp == 1 for p in points if p.zero >= 2
    )


# --------------------------------------------------------------------------- sweeps of the moved rules
#
# Each rule is swept directly (its verdict, key path and message), then held against
# the code that enforces it: placement, the schedules, and the hybrid strategy's
# checks (``api.prepare`` builds the strategy without simulating).

SCHEDULES = ("naive", "gpipe", "1f1b", "interleaved")


def cluster(nodes: int, gpus: int) -> dict[str, Any]:
    """One rack of ``nodes`` nodes of ``gpus`` GPUs (NVSwitch inside a node)."""
    return {
        "kind": "two_tier",
        "racks": 1,
        "nodes_per_rack": nodes,
        "node": {
            "gpus": gpus,
            "pcie": {"bandwidth": "32GB/s"},
            "nvlink": {"bandwidth": "300GB/s"},
            "nic": {"bandwidth": "100Gb/s"},
        },
    }


def training_doc(
    *,
    nodes: int = 1,
    gpus: int = 8,
    blocks: int = 12,
    transformer: bool = True,
    batch: int = 96,
    micro_batch: int | None = None,
    pipeline: dict[str, Any] | None = None,
    **parallelism: Any,
) -> dict[str, Any]:
    """A training scenario for the hybrid strategy: a transformer of ``blocks`` blocks and
    8 heads (or a list of ``blocks`` layers), 12 micro-batches of gpipe unless told."""
    model: dict[str, Any] = (
        {"transformer": {"layers": blocks, "hidden": 256, "heads": 8, "seq": 64, "vocab": 512}}
        if transformer
        else {"layers": [{"name": "block", "params": 1e6, "flops": 1e9, "repeat": blocks}]}
    )
    training: dict[str, Any] = {"global_batch": batch, "iterations": 1}
    if micro_batch is not None:
        training["micro_batch"] = micro_batch
    return {
        "name": "rules-test",
        "cluster": cluster(nodes, gpus),
        "model": model,
        "training": training,
        "parallelism": parallelism,
        "pipeline": {"schedule": "gpipe", "micro_batches": 12, **(pipeline or {})},
    }


def problems_of(document: dict[str, Any]) -> list[Problem]:
    """What the hybrid strategy refuses in ``document`` (nothing: [])."""
    try:
        prepare(parse_scenario(document))
    except ScenarioError as exc:
        return exc.problems
    return []


def listed(problem: Problem | None) -> list[Problem]:
    return [] if problem is None else [problem]


@pytest.mark.parametrize("workers", [1, 4, 6, 8, 12])
def test_tp_x_pp_must_divide_the_workers(workers: int) -> None:
    for tp, pp in itertools.product([1, 2, 3, 4, 8], repeat=2):
        problem = grid_split_problem(workers, tp, pp)
        assert (problem is None) == (workers % (tp * pp) == 0), (workers, tp, pp)
        if problem is not None:
            key = "pp" if tp == 1 else "tp" if pp == 1 else ""
            assert problem.path == f"parallelism.{key}".rstrip(".")
            assert problem.message == (
                f"tp {tp} x pp {pp} = {tp * pp} does not divide the {workers} workers"
            )
            assert problem.allowed == f"tp x pp dividing {workers}"


@pytest.mark.parametrize("workers", [4, 8, 12])
def test_dp_x_tp_x_pp_must_be_the_workers(workers: int) -> None:
    for dp, tp, pp in itertools.product([1, 2, 3, 4], repeat=3):
        problem = grid_size_problem(workers, dp, tp, pp)
        assert (problem is None) == (dp * tp * pp == workers)
        if problem is not None:
            assert problem.path == "parallelism.dp"
            assert problem.message == (
                f"dp {dp} x tp {tp} x pp {pp} = {dp * tp * pp}, but there are {workers} workers"
            )
            assert problem.allowed.startswith(f"dp x tp x pp = {workers}")


@pytest.mark.parametrize("gpus", [4, 8])
def test_placement_refuses_what_the_grid_rules_refuse(gpus: int) -> None:
    """The hybrid strategy's placement raises exactly the grid rule's problem (or none)."""
    for tp, pp, dp in itertools.product([1, 2, 4], [1, 2, 3, 4], [None, 1, 2, 3]):
        expected = (
            grid_split_problem(gpus, tp, pp) if dp is None else grid_size_problem(gpus, dp, tp, pp)
        )
        given = {"tp": tp, "pp": pp} | ({} if dp is None else {"dp": dp})
        assert problems_of(training_doc(gpus=gpus, **given)) == listed(expected), given


def test_a_tensor_group_stays_inside_a_node() -> None:
    for tp, node, cross in itertools.product([1, 2, 4, 8, 16], [None, 4, 8], [False, True]):
        problem = tensor_group_node_problem(tp, node, cross)
        allowed = tp == 1 or cross or node is None or tp <= node
        assert (problem is None) == allowed, (tp, node, cross)
        if problem is not None:
            assert problem.path == "parallelism.tp"
            assert problem.message == (
                f"tp {tp} is larger than a node's {node} GPUs; "
                "tensor parallelism needs NVLink inside a node"
            )
            assert problem.allowed == (
                f"tp <= {node} with tp innermost in order, or parallelism.allow_cross_node_tp: true"
            )


@pytest.mark.parametrize("order", [["tp", "pp", "dp"], ["pp", "tp", "dp"], ["pp", "dp", "tp"]])
def test_placement_refuses_tensor_groups_across_nodes(order: list[str]) -> None:
    """Two nodes of 4 GPUs: tp 8 never fits a node; tp 2 and 4 fit unless the order
    spreads their group (the first such group is named); allow_cross_node_tp lifts it."""
    nodes = ["rack0/node0", "rack0/node1"]
    for tp in (1, 2, 4, 8):
        pp = 8 // tp if tp < 8 else 1
        shape = {"nodes": 2, "gpus": 4, "blocks": 8, "tp": tp, "pp": pp, "order": order}
        got = problems_of(training_doc(**shape))
        crossing = problems_of(training_doc(**shape, allow_cross_node_tp=True))
        assert crossing == []
        spread = order[0] != "tp" and 1 < tp <= 4
        expected = tensor_group_node_problem(
            tp, 4, spread=SpreadGroup(order, 0, 0, nodes) if spread else None
        )
        assert got == listed(expected), (order, tp)
    problem = tensor_group_node_problem(2, 4, spread=SpreadGroup(["pp", "tp", "dp"], 1, 0, nodes))
    assert problem is not None and problem.message == (
        "with order ['pp', 'tp', 'dp'] the tensor-parallel group of replica 1 stage 0 spans "
        "nodes rack0/node0, rack0/node1; tensor parallelism needs NVLink inside a node"
    )


def test_every_schedule_needs_a_stage_a_micro_batch_and_one_chunk() -> None:
    for name, p, m, v in itertools.product(SCHEDULES, range(3), range(3), (1, 2)):
        multi = name == "interleaved"
        problems = schedule_problems(name, p, m, v, multi)
        paths = [x.path for x in problems]
        assert paths == [
            path
            for path, wrong in [
                ("parallelism.pp", p < 1),
                ("pipeline.micro_batches", m < 1),
                ("pipeline.chunks", v != 1 and not multi),
            ]
            if wrong
        ]
        if "pipeline.chunks" in paths:
            assert problems[-1].message == (
                f"schedule {name} runs one model chunk per device, not {v}"
            )
            assert problems[-1].allowed == "1, or schedule: interleaved"


def test_interleaved_needs_whole_groups_of_p_micro_batches() -> None:
    for p, m in itertools.product(range(1, 9), range(1, 17)):
        problem = micro_batches_multiple_problem("interleaved", p, m)
        assert (problem is None) == (m % p == 0)
        if problem is not None:
            assert problem.path == "pipeline.micro_batches"
            assert problem.message == (
                f"the interleaved schedule needs micro_batches ({m}) to be a multiple of the "
                f"pipeline stages ({p})"
            )
            assert problem.allowed == f"a multiple of {p}"


@pytest.mark.parametrize("name", SCHEDULES)
def test_schedules_refuse_exactly_what_the_rules_refuse(name: str) -> None:
    """``make_schedule`` over (p, m, v): the shared rules, then interleaved's own."""
    kind = registered_schedules()[name]
    for p, m, v in itertools.product(range(6), range(10), (1, 2, 3)):
        expected = schedule_problems(name, p, m, v, kind.multi_chunk)
        if not expected and name == "interleaved":
            expected = listed(micro_batches_multiple_problem(name, p, m))
        assert kind.problems(p, m, v) == expected
        if expected:
            with pytest.raises(ScenarioError) as info:
                make_schedule(name, p, m, v)
            assert info.value.problems == expected
        else:
            assert make_schedule(name, p, m, v).virtual_stages == p * v


def test_one_micro_batch_per_stage() -> None:
    for p, m in itertools.product(range(1, 9), range(1, 9)):
        for key in ("pipeline.micro_batches", "training.micro_batch"):
            problem = micro_batch_per_stage_problem("1f1b", p, m, key)
            assert (problem is None) == (m >= p)
            if problem is not None:
                assert problem.path == key
                assert problem.message == (
                    f"{m} micro-batches are fewer than the {p} pipeline stages; "
                    "1f1b needs at least one micro-batch per stage"
                )
                assert problem.allowed == f">= {p} micro-batches (or schedule gpipe / naive)"


@pytest.mark.parametrize("name", SCHEDULES)
def test_the_hybrid_strategy_applies_the_schedule_rules(name: str) -> None:
    """From a scenario: one micro-batch per stage first (for the schedules that need it,
    at the key that set m), then the schedule's own rules."""
    kind = registered_schedules()[name]
    assert kind.micro_batch_per_stage == (name in ("1f1b", "interleaved"))
    for p, m, v in itertools.product((2, 4), (1, 2, 3, 4, 6, 8), (1, 2)):
        pipeline = {"schedule": name, "micro_batches": m, "chunks": v}
        got = problems_of(training_doc(gpus=p, pp=p, blocks=8, batch=48, pipeline=pipeline))
        expected = listed(
            micro_batch_per_stage_problem(name, p, m) if kind.micro_batch_per_stage else None
        ) or kind.problems(p, m, v)
        assert got == expected, (p, m, v)
    # m set by training.micro_batch: the rule names that key
    document = training_doc(gpus=4, pp=4, batch=12, micro_batch=4, pipeline={"schedule": name})
    del document["pipeline"]["micro_batches"]
    got = problems_of(document)
    expected = listed(
        micro_batch_per_stage_problem(name, 4, 3, "training.micro_batch")
        if kind.micro_batch_per_stage
        else None
    ) or kind.problems(4, 3, 1)
    assert got == expected


@pytest.mark.parametrize("dp", [1, 2, 4])
def test_micro_batches_split_a_replica_into_whole_micro_batches(dp: int) -> None:
    for batch, micro_batch in itertools.product([4, 8, 12, 30, 64], [1, 2, 3, 4, 5, 8]):
        problem = micro_batch_problem(batch, dp, micro_batch)
        assert (problem is None) == (batch % (dp * micro_batch) == 0), (batch, micro_batch)
        if problem is not None:
            assert problem.path == "training.micro_batch"
            assert problem.message == (
                f"micro-batches of {micro_batch} do not divide the {batch / dp:g} samples of "
                f"a replica (global batch {batch} / dp {dp})"
            )
        document = training_doc(gpus=2 * dp, pp=2, batch=batch, micro_batch=micro_batch)
        del document["pipeline"]["micro_batches"]
        m = batch // (dp * micro_batch)
        expected = listed(problem) or listed(micro_batch_size_problem(batch, dp, m))
        assert problems_of(document) == expected


@pytest.mark.parametrize("dp", [1, 2, 4])
def test_a_micro_batch_holds_a_sample_at_least(dp: int) -> None:
    for batch, m in itertools.product([1, 2, 4, 8, 16], [1, 2, 4, 8]):
        problem = micro_batch_size_problem(batch, dp, m)
        assert (problem is None) == (batch >= dp * m)
        if problem is not None:
            assert problem.path == "training.global_batch"
            assert problem.allowed == f">= {dp * m} (one sample per micro-batch at least)"
        document = training_doc(gpus=2 * dp, pp=2, batch=batch, pipeline={"micro_batches": m})
        assert problems_of(document) == listed(problem), (batch, m)


def test_the_model_splits_into_the_virtual_stages() -> None:
    for blocks, pp, chunks in itertools.product([5, 6, 8, 12], [1, 2, 3, 4], [1, 2]):
        parts = pp * chunks
        for transformer in (True, False):
            problem = stage_split_problem(blocks, pp, chunks, transformer)
            fits = blocks % parts == 0 if transformer else blocks >= parts
            assert (problem is None) == fits, (blocks, pp, chunks, transformer)
            if problem is not None and transformer:
                what = f"pp {pp} x chunks {chunks}" if chunks > 1 else f"pp {pp}"
                assert problem.message == (
                    f"the model's {blocks} transformer layers do not divide into {what} = "
                    f"{parts} stages (pipeline.stages: even)"
                )
            elif problem is not None:
                assert problem.message == (
                    f"the model has {blocks} layers, fewer than the {parts} (virtual) stages"
                )
            if problem is not None:
                assert problem.path == "parallelism.pp"
            pipeline = {"schedule": "interleaved", "chunks": chunks, "stages": "even"}
            document = training_doc(
                gpus=pp, pp=pp, blocks=blocks, transformer=transformer, pipeline=pipeline
            )
            assert problems_of(document) == listed(problem), (blocks, pp, chunks, transformer)
            # stages: auto (the default) splits what does not divide, Megatron-Core's way:
            # only fewer blocks than stages is refused
            uneven = stage_split_problem(blocks, pp, chunks, transformer, True)
            assert (uneven is None) == (blocks >= parts), (blocks, pp, chunks, transformer)
            pipeline = {"schedule": "interleaved", "chunks": chunks}
            document = training_doc(
                gpus=pp, pp=pp, blocks=blocks, transformer=transformer, pipeline=pipeline
            )
            assert problems_of(document) == listed(uneven), (blocks, pp, chunks, transformer)


def test_stage_layers_list_every_virtual_stage_and_every_layer() -> None:
    for counts, stages in itertools.product([[4], [1, 3], [2, 2], [1, 1, 1], [2, 3]], [1, 2, 3]):
        problem = stage_layers_problem(counts, 4, stages)
        assert (problem is None) == (len(counts) == stages and sum(counts) == 4)
        if problem is not None:
            assert problem.path == "pipeline.stage_layers"
            with pytest.raises(ScenarioError) as info:
                check_stage_layers(counts, 4, stages)
            assert info.value.problems == [problem]


# --------------------------------------------------------------------------- plan agrees


def rules_allow(space: plan.SearchSpace, tp: int, pp: int, mb: int | None, zero: int) -> bool:
    """Whether the rules (and plan's own restrictions: tp a power of two, m >= pp for
    every schedule) allow a configuration of ``space``."""
    n = space.devices
    if tp & (tp - 1) or grid_split_problem(n, tp, pp) is not None:
        return False
    dp = n // (tp * pp)
    problems = [
        tensor_parallel_problem(tp, space.heads),
        tensor_group_node_problem(tp, space.gpus_per_node, space.allow_cross_node_tp),
        stage_split_problem(space.blocks, pp, 1, space.is_transformer),
        sharded_zero_problem(zero, tp, pp, False),
    ]
    if zero >= SHARDED_STAGE and not tp == pp == 1:
        return False  # plan searches ZeRO-2/3 on data parallelism alone
    if mb is not None:
        problems.append(micro_batch_problem(space.global_batch, dp, mb))
        if problems[-1] is None:
            m = space.global_batch // (dp * mb)
            problems.append(micro_batch_per_stage_problem("1f1b", pp, m))
    return all(p is None for p in problems)


@pytest.mark.parametrize(
    ("devices", "node", "heads", "blocks", "batch", "cross"),
    [
        (8, 8, 8, 12, 64, False),
        (12, 4, 12, 6, 48, False),
        (16, 4, 16, 24, 96, False),
        (16, 4, 16, 24, 96, True),
        (12, None, None, 5, 36, False),
        (32, 8, 24, 24, 96, False),
    ],
)
def test_plan_enumerates_exactly_what_the_rules_allow(
    devices: int, node: int | None, heads: int | None, blocks: int, batch: int, cross: bool
) -> None:
    space = plan.SearchSpace(devices, node, heads, blocks, batch, allow_cross_node_tp=cross)
    micro_batches = (1, 2, 3, 4, 8)
    options = plan.PlanOptions(zero=(0, 1, 2, 3), micro_batch=micro_batches)
    got = {(p.tp, p.pp, p.micro_batch, p.zero) for p in plan.enumerate_points(space, options)}
    expected = set()
    for tp, pp in itertools.product(range(1, devices + 1), repeat=2):
        for zero in (0, 1, 2, 3):
            for mb in [None] if zero >= SHARDED_STAGE else micro_batches:
                if rules_allow(space, tp, pp, mb, zero):
                    expected.add((tp, pp, mb, zero))
    assert got == expected
