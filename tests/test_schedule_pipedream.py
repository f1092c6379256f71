"""Flush-free pipeline schedules: PipeDream and PipeDream-2BW.

Sources: Narayanan et al., "PipeDream: Generalized Pipeline Parallelism for DNN Training",
SOSP 2019, Sec. 3.3 (1F1B without flushes; weight stashing: a stage keeps one weight
version per in-flight micro-batch, the input stage of a p-stage pipeline p of them);
Narayanan et al., "Memory-Efficient Pipeline-Parallel DNN Training", ICML 2021, Sec. 3
(PipeDream-2BW: 2 weight versions per stage, gradients accumulated over m micro-batches,
one-step-delayed update, no flush).  In steady state neither drains the pipeline, so an
iteration takes m (T_F + T_B) against 1F1B's (m + p - 1)(T_F + T_B).  The reference
setup is tests/test_pipeline.py's (T_F = 1 ms, T_B = 2 ms per stage).
"""

from __future__ import annotations

import pytest

from clustersim.parallel.schedules import make_schedule

from .test_pipeline import T_B, T_F, doc, run

FLUSH_FREE = ["pipedream", "pipedream-2bw"]
GRID = [(p, m) for p in (2, 4) for m in (p, 2 * p, 3 * p + 1)]


@pytest.mark.parametrize("name", FLUSH_FREE)
@pytest.mark.parametrize("p, m", GRID)
def test_steady_iteration_has_no_flush_bubble(name: str, p: int, m: int) -> None:
    """The first iteration is 1F1B's, (m + p - 1)(T_F + T_B); the ones after it take
    m (T_F + T_B): the pipeline stays full across iteration boundaries.  (2BW's update
    runs beside the pipeline on the same GPU, so it waits for the op in progress: its
    iterations end up to one backward later, the steady period is unchanged.)"""
    iterations = 4
    summary = run(doc(p, m, name, iterations=iterations)).summary
    times = summary["iteration_times_s"]
    late = T_B if name == "pipedream-2bw" else 0.0
    first = (m + p - 1) * (T_F + T_B)
    assert first - 1e-9 <= times[0] <= first + late + 1e-9
    for t in times[1:-1]:
        assert t == pytest.approx(m * (T_F + T_B), rel=1e-6)
    assert sum(times) == pytest.approx((p - 1 + iterations * m) * (T_F + T_B), abs=late + 1e-9)
    one = run(doc(p, m, "1f1b", iterations=2)).summary["iteration_times_s"][-1]
    assert one == pytest.approx(first, rel=1e-6)
    # the run's only bubble is its one warm-up and cool-down: (p-1) / (p-1 + iterations m)
    expected = (p - 1) / (p - 1 + iterations * m)
    assert summary["bubble_fraction"] == pytest.approx(expected, abs=late / sum(times) + 1e-6)
    assert summary["theoretical_bubble_fraction"] == 0.0


@pytest.mark.parametrize("p", [2, 4, 8])
def test_weight_versions_and_their_memory(p: int) -> None:
    """PipeDream: stage s (0-indexed) stashes p - s versions (the paper's 1-indexed stage i
    keeps p - i + 1); PipeDream-2BW: 2 on every stage.  The versions beyond the first add
    to the device's weights in ``memory.per_device``."""
    params, per_value = 1e6, 4.0  # fp32 weights of one layer
    m = 2 * p
    base = run(doc(p, m, "1f1b", params=params, iterations=2)).summary
    for name in FLUSH_FREE:
        summary = run(doc(p, m, name, params=params, iterations=2)).summary
        versions = summary["weight_versions"]
        for s in range(p):
            expected = p - s if name == "pipedream" else 2
            assert versions[str(s)]["versions"] == expected
            assert make_schedule(name, p, m).weight_versions(s) == expected
            one = params * per_value
            assert versions[str(s)]["bytes_per_version"] == pytest.approx(one)
            assert versions[str(s)]["extra_bytes"] == pytest.approx((expected - 1) * one)
            device = summary["stage_devices"][0][s]
            weights = summary["memory"]["per_device"][device]["weights_bytes"]
            plain = base["memory"]["per_device"][device]["weights_bytes"]
            assert weights == pytest.approx(plain + (expected - 1) * one)
    assert "weight_versions" not in base


def test_pipedream_updates_after_every_micro_batch() -> None:
    """PipeDream with dp = 2: each stage all-reduces its gradients and steps its optimizer
    once per micro-batch (m x iterations times); 2BW once per iteration."""
    p, m, iterations = 2, 4, 2
    counts = {}
    for name in FLUSH_FREE:
        records = run(doc(p, m, name, params=1e6, iterations=iterations, dp=2)).records
        steps = [r for r in records if r.label == "optimizer" and r.stage == 0]
        reduces = [r for r in records if r.kind == "collective" and "stage0" in r.label]
        counts[name] = (len(steps), len({(r.start_s, r.label) for r in reduces}))
    assert counts["pipedream"][0] == 2 * m * iterations  # 2 replicas
    assert counts["pipedream-2bw"][0] == 2 * iterations
    assert counts["pipedream"][1] > counts["pipedream-2bw"][1] >= 1


def test_2bw_update_overlaps_the_next_iteration() -> None:
    """2BW: iteration i's update runs beside the forwards of iteration i + 1 (which use the
    older weights): with a slow data-parallel all-reduce the steady iteration stays below
    PipeDream's, which waits for an all-reduce after every micro-batch."""
    p, m = 2, 4
    slow = {"params": 1e8, "bandwidth": "100GB/s", "iterations": 4, "dp": 2}
    two = run(doc(p, m, "pipedream-2bw", **slow)).summary["iteration_times_s"][-2]
    dream = run(doc(p, m, "pipedream", **slow)).summary["iteration_times_s"][-2]
    assert two < dream
