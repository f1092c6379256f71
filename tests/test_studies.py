"""The one process pool of the studies: order, progress, workers."""

from __future__ import annotations

import pytest

from clustersim.studies import run_all, worker_count


def _power(base: int, exponent: int) -> int:
    return base**exponent


@pytest.mark.parametrize("workers", [1, 2])
def test_results_come_back_in_call_order(workers: int) -> None:
    calls = [(b, 3) for b in range(7)]
    seen: list[tuple[int, int]] = []
    out = run_all(_power, calls, workers, lambda d, t: seen.append((d, t)), announce=True)
    assert out == [b**3 for b in range(7)]
    assert seen == [(i, 7) for i in range(8)]


def test_worker_count_bounds() -> None:
    assert worker_count(8, 3) == 3
    assert worker_count(2, 0) == 1
    assert worker_count(1, 50) == 1
    assert worker_count(None, 1) == 1


def test_a_failing_run_raises_in_the_caller() -> None:
    with pytest.raises(ZeroDivisionError):
        run_all(divmod, [(1, 1), (1, 0)], 2)
