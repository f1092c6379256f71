"""The one home of parallel validity rules: the hybrid strategy and plan agree with it."""

from __future__ import annotations

import pytest

from clustersim.parallel.rules import (
    SHARDED_STAGE,
    sharded_zero_problem,
    tensor_parallel_problem,
)


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
def test_sharded_zero_runs_on_data_parallelism_alone(stage: int) -> None:
    for tp, pp, section in [
        (1, 1, False),
        (2, 1, False),
        (1, 2, False),
        (1, 1, True),
        (2, 4, True),
    ]:
        problem = sharded_zero_problem(stage, tp, pp, section)
        allowed = stage < SHARDED_STAGE or (tp == pp == 1 and not section)
        assert (problem is None) == allowed, (stage, tp, pp, section)
        if problem is not None:
            assert problem.path == "zero.stage"
            assert ("pp > 1" in problem.allowed) == (pp > 1)


def test_plan_enumerates_only_what_the_rules_allow() -> None:
    from clustersim import plan

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
