"""clustersim.metrics.parts: plain() of a dict of many rows (one per device), and the
top-level numbers read without the rest."""

from __future__ import annotations

import pytest

from clustersim.metrics import Summary
from clustersim.metrics.breakdown import DeviceTimes
from clustersim.metrics.parts import _MANY_ROWS, NESTED, plain
from clustersim.metrics.training import IterationTimes

from . import shared_runs
from .conftest import SCENARIOS


def test_many_rows_sharing_a_part_are_equal_dicts_of_their_own() -> None:
    """Devices holding the same part get equal dicts, in order, none of them shared (one
    changed in place changes no other); rows with lists inside are made one by one."""
    busy, idle = DeviceTimes(1.0, 0.5, 0.25, 0.0), DeviceTimes(0.0, 0.0, 0.0, 2.0, type="h100")
    rows = {f"gpu{i}": busy if i % 3 else idle for i in range(_MANY_ROWS + 5)}
    rows["cpu0"] = 3.5
    out = plain(rows)
    assert list(out) == list(rows)
    assert out == {key: plain([row])[0] for key, row in rows.items()}
    dicts = [row for row in out.values() if isinstance(row, dict)]
    assert len(dicts) == len(out) - 1 == len({id(row) for row in dicts})
    out["gpu1"]["idle_s"] = 9.0
    assert out["gpu2"]["idle_s"] == 0.0

    times = IterationTimes(1.0, [1.0, 1.0], 8.0)
    nested = plain({f"r{i}": times for i in range(_MANY_ROWS + 1)})
    assert nested["r0"] == {
        "iteration_time_s": 1.0,
        "iteration_times_s": [1.0, 1.0],
        "throughput_samples_per_s": 8.0,
    }
    assert nested["r0"]["iteration_times_s"] is not nested["r1"]["iteration_times_s"]


@pytest.mark.parametrize(
    "scenario",
    [
        "pipeline/1f1b_m8.yaml",
        "parameter_server/async.yaml",
        "collectives/ring_allreduce_r1.yaml",
        "jobs/shared_uplinks.yaml",
        "failures/resnet50_30d_goodput.yaml",
    ],
)
def test_top_level_numbers_are_those_of_the_whole_dict(scenario: str) -> None:
    """Summary.numbers() reads the top-level keys without making the nested ones; it must
    give what filtering summary.json's whole mapping gives: the same keys, order and
    values (a training, parameter-server, collective, multi-job and goodput summary)."""
    summary = shared_runs.summary(SCENARIOS / scenario, shared_runs.checked(SCENARIOS / scenario))
    typed = Summary.of(summary)
    numbers = typed.numbers()
    want = {
        k: v
        for k, v in typed.as_dict().items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    assert list(numbers.items()) == list(want.items()) and len(want) >= 3
    assert list(typed.top_level()) == list(typed.as_dict())
    assert [k for k, v in typed.top_level().items() if v is NESTED] == [
        k for k, v in typed.as_dict().items() if isinstance(v, (dict, list))
    ]


def test_top_level_numbers_of_a_part_that_makes_its_own_keys() -> None:
    """A strategy part with no class of its own (a plugin's workload) keeps its keys as
    given: its numbers are top-level numbers too, its nested values marked."""
    data = {
        "scenario": "s",
        "seed": 0,
        "workload": "a-plugin-workload",
        "makespan_s": 2.0,
        "my_rate_per_s": 7.5,
        "my_table": {"a": 1},
        "my_flag": True,
    }
    typed = Summary.of(data)
    numbers = typed.numbers()
    assert numbers["my_rate_per_s"] == 7.5 and numbers["makespan_s"] == 2.0
    assert "my_flag" not in numbers and "my_table" not in numbers
    assert typed.top_level()["my_table"] is NESTED
    assert list(typed.top_level()) == list(typed.as_dict())
