"""The goodput model (clustersim.goodput): checked against closed forms from outside
the code (the time without failures, Daly 2006's expected time under Poisson
failures, Young's optimum interval, the Weibull mean) and against the Llama 3 report.

Statistical checks use a fixed seed, so they are deterministic; each tolerance is
stated (standard errors of the Monte Carlo mean, or a relative bound).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from clustersim.errors import ScenarioError, SimulationError
from clustersim.goodput import (
    FailureProcess,
    ScheduledFailure,
    TrainingJob,
    best_checkpoint_interval,
    job_mtbf_s,
    monte_carlo,
    replay,
    sample_failure_times,
    young_daly_interval_s,
)
from clustersim.goodput.schedule import STOP, FailureStream

DAY_S = 86400.0


def daly_segment_s(work_s: float, mtbf_s: float, restart_s: float) -> float:
    """Daly (2006), eq. for the expected wall time to complete ``work_s`` seconds of work
    that a Poisson failure (mean ``mtbf_s`` apart) sends back to its start, each failure
    followed by a restart of ``restart_s`` that a failure also sends back to its start:
    ``M exp(R / M) (exp(T / M) - 1)``."""
    return mtbf_s * math.exp(restart_s / mtbf_s) * math.expm1(work_s / mtbf_s)


def job(**changes) -> TrainingJob:
    base = TrainingJob(
        iteration_s=0.5, iterations=1001, checkpoint_every=10, checkpoint_blocking_s=2.0
    )
    return dataclasses.replace(base, **changes)


def no_failure_time(j: TrainingJob) -> float:
    return replay(j, [], [], np.random.default_rng(0)).wall_time_s


# --- (1) no failures -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("iterations", "every"), [(1001, 10), (1000, 10), (7, 3), (5, 5), (5, 100), (1, 1)]
)
def test_without_failures_time_is_iterations_plus_checkpoints_exactly(iterations, every) -> None:
    """No failure: wall = iterations x iteration_s + checkpoints x blocking, to the bit
    (values exact in binary), with (iterations - 1) // checkpoint_every checkpoints."""
    j = job(iterations=iterations, checkpoint_every=every)
    r = replay(j, [], [], np.random.default_rng(0))
    checkpoints = (iterations - 1) // every
    assert r.checkpoints == checkpoints
    assert r.wall_time_s == iterations * 0.5 + checkpoints * 2.0
    assert r.goodput == iterations * 0.5 / r.wall_time_s


def test_a_drain_longer_than_the_interval_makes_the_next_checkpoint_wait() -> None:
    """Async checkpoints: a drain shorter than the work between checkpoints costs nothing;
    a longer one delays every later checkpoint by (drain - work) seconds."""
    assert no_failure_time(job(checkpoint_drain_s=4.0)) == 1001 * 0.5 + 100 * 2.0
    waited = no_failure_time(job(checkpoint_drain_s=8.0))  # 10 iterations = 5 s of work
    assert waited == 1001 * 0.5 + 100 * 2.0 + 99 * (8.0 - 5.0)


# --- (2) Daly's closed form under Poisson failures -----------------------------------


@pytest.mark.parametrize("failures_per_segment", [0.1, 0.5, 1.0, 2.0])
@pytest.mark.parametrize("restart_over_mtbf", [0.0, 0.3])
def test_one_segment_under_poisson_failures_takes_dalys_expected_time(
    failures_per_segment, restart_over_mtbf
) -> None:
    """No checkpoint: the expected time of T seconds of work under failures of rate
    lambda with restart R is exp(lambda R) (exp(lambda T) - 1) / lambda (Daly 2006),
    within 3 standard errors, over a sweep of lambda T and lambda R."""
    mtbf = 1000.0
    work = failures_per_segment * mtbf
    j = TrainingJob(
        iteration_s=work / 100,
        iterations=100,
        checkpoint_every=100,
        checkpoint_blocking_s=0.0,
        restart_s=restart_over_mtbf * mtbf,
    )
    r = monte_carlo(j, [FailureProcess("gpu", 4, 4 * mtbf)], samples=4000, seed=7)
    expected = daly_segment_s(work, mtbf, j.restart_s)
    assert abs(r.expected_time_to_train_s - expected) < 3 * r.expected_time_to_train_stderr_s


def test_checkpointed_job_under_poisson_failures_adds_dalys_segments() -> None:
    """With checkpoints (blocking C, a failure during one loses its segment) the segments
    are independent: E = n_ckpt f(W + C) + f(W_last), f Daly's segment time, within 3
    standard errors."""
    mtbf, restart = 600.0, 60.0
    j = TrainingJob(
        iteration_s=2.0, iterations=1050, checkpoint_every=100, checkpoint_blocking_s=20.0
    )
    j = dataclasses.replace(j, restart_s=restart)
    r = monte_carlo(j, [FailureProcess("node", 1, mtbf)], samples=2000, seed=3)
    expected = 10 * daly_segment_s(200.0 + 20.0, mtbf, restart) + daly_segment_s(
        100.0, mtbf, restart
    )
    assert abs(r.expected_time_to_train_s - expected) < 3 * r.expected_time_to_train_stderr_s


# --- (3) Young / Daly -----------------------------------------------------------------


@pytest.mark.parametrize(("checkpoint_s", "mtbf_s"), [(5.0, 2000.0), (20.0, 1e4), (100.0, 4e4)])
def test_best_interval_is_youngs_within_ten_percent(checkpoint_s, mtbf_s) -> None:
    """With C << M the Monte-Carlo optimum interval is within 10% of sqrt(2 C M) (Young
    1974); Daly's higher-order optimum lies a few percent below it."""
    j = TrainingJob(
        iteration_s=1.0,
        iterations=int(150 * mtbf_s),
        checkpoint_every=1,
        checkpoint_blocking_s=checkpoint_s,
        restart_s=checkpoint_s / 10,
    )
    found = best_checkpoint_interval(j, [FailureProcess("gpu", 8, 8 * mtbf_s)], samples=200, seed=1)
    young = young_daly_interval_s(checkpoint_s, mtbf_s)
    assert found.young_daly_interval_s == pytest.approx(young)
    assert abs(found.best_checkpoint_interval_s / young - 1) < 0.10
    assert found.result.best_checkpoint_interval_s == found.best_checkpoint_interval_s


def test_nothing_stops_the_job_so_the_best_is_never_to_checkpoint() -> None:
    """Without job-stopping failures every checkpoint is a loss."""
    found = best_checkpoint_interval(job(), [], samples=2, seed=0)
    assert found.best_checkpoint_every == 1001
    assert found.result.time_lost_s["checkpoints"] == 0.0


# --- (4) Weibull ----------------------------------------------------------------------


def test_weibull_of_shape_one_is_exponential() -> None:
    """A Weibull process of shape 1 gives the exponential's results, float for float."""
    exponential = FailureProcess("gpu", 64, 64 * 2000.0)
    weibull = dataclasses.replace(exponential, distribution="weibull", shape=1.0)
    j = job(restart_s=30.0, iterations=4000)
    a = monte_carlo(j, [exponential], samples=300, seed=5)
    b = monte_carlo(j, [weibull], samples=300, seed=5)
    assert a.as_dict() == b.as_dict()


@pytest.mark.parametrize("shape", [0.5, 0.7, 1.0, 2.0, 3.5])
def test_weibull_lifetimes_have_mean_mtbf(shape) -> None:
    """One component renewed at each failure: the mean time between its failures is
    mtbf_s (the scale is mtbf / Gamma(1 + 1/k)), within 3 standard errors."""
    process = FailureProcess("gpu", 1, 100.0, distribution="weibull", shape=shape)
    times = sample_failure_times(process, 2e6, np.random.default_rng(11))
    gaps = np.diff(np.concatenate([[0.0], times]))
    assert abs(gaps.mean() - 100.0) < 3 * gaps.std(ddof=1) / math.sqrt(gaps.size)


def test_failures_drawn_in_chunks_match_one_draw() -> None:
    """The histories drawn chunk by chunk (survivors' first failures conditioned on
    surviving so far) have the law of one draw: the mean count of failures of 50 new
    components with infant mortality (k = 0.5) over [0, 3 mtbf) agrees within 3
    standard errors whether drawn in 1 chunk or 12."""

    def counts(chunks: int) -> np.ndarray:
        process = FailureProcess("gpu", 50, 100.0, distribution="weibull", shape=0.5)
        stream = FailureStream([process], [], 3000, np.random.default_rng(chunks), 300.0 / chunks)
        total = np.zeros(3000)
        for _ in range(chunks):
            chunk = stream.next_chunk()
            assert set(chunk.kinds) <= {STOP}
            total += np.diff(chunk.offsets)
        return total

    one, many = counts(1), counts(12)
    stderr = math.hypot(one.std(ddof=1), many.std(ddof=1)) / math.sqrt(3000)
    assert abs(one.mean() - many.mean()) < 3 * stderr


# --- (5) Llama 3 ----------------------------------------------------------------------

LLAMA3_GPUS = 16_384
LLAMA3_NODES = 2_048
"""16,384 H100 in 8-GPU Grand Teton servers (Llama 3 report, section 3.3)."""
LLAMA3_SNAPSHOT_S = 54 * DAY_S
LLAMA3_UNEXPECTED = 419
LLAMA3_PLANNED = 47
LLAMA3_GPU_SHARE = 0.587
"""Share of the unexpected interruptions due to GPUs and their memory (report's Table 5:
faulty GPU 30.1%, HBM3 17.2%, SRAM 4.5%, system processor 4.1%, silent data corruption
1.4%, thermal 1.4%)."""


def llama3_failures() -> tuple[list[FailureProcess], list[ScheduledFailure]]:
    """The Llama 3 report's 466 interruptions in 54 days (2.78 h between them): the GPU
    share of the 419 unexpected ones as a per-GPU exponential process, the rest (hosts,
    network, software) as a per-node one, and the 47 planned ones at regular times."""
    gpu_events = LLAMA3_GPU_SHARE * LLAMA3_UNEXPECTED
    node_events = LLAMA3_UNEXPECTED - gpu_events
    failures = [
        FailureProcess("gpu", LLAMA3_GPUS, LLAMA3_GPUS * LLAMA3_SNAPSHOT_S / gpu_events),
        FailureProcess("node", LLAMA3_NODES, LLAMA3_NODES * LLAMA3_SNAPSHOT_S / node_events),
    ]
    every = LLAMA3_SNAPSHOT_S / LLAMA3_PLANNED
    planned = [ScheduledFailure("planned", (i + 0.5) * every) for i in range(LLAMA3_PLANNED)]
    return failures, planned


def llama3_job() -> TrainingJob:
    """About 49 days of useful training at 6 s per iteration (405B parameters, 16M-token
    batches at about 40% MFU on 16K H100); checkpoint costs and restart as
    docs/goodput.md argues: a 10 s blocking snapshot, 60 s to drain 5.7 TB to storage,
    10 minutes from failure to training; an interval near Young's (7.6 min)."""
    return TrainingJob(
        iteration_s=6.0,
        iterations=int(0.9 * LLAMA3_SNAPSHOT_S / 6.0),
        checkpoint_every=75,
        checkpoint_blocking_s=10.0,
        checkpoint_drain_s=60.0,
        restart_s=600.0,
    )


def test_llama3_interruption_rate_is_the_reports() -> None:
    """The processes reproduce 419 / 54 days of unexpected interruptions."""
    failures, planned = llama3_failures()
    assert job_mtbf_s(failures) == pytest.approx(LLAMA3_SNAPSHOT_S / LLAMA3_UNEXPECTED)
    assert len(planned) == LLAMA3_PLANNED


def test_llama3_like_goodput_is_near_the_reported_90_percent() -> None:
    """16K GPUs at the report's interruption rate: the predicted goodput is above 0.85
    (the report: 'higher than 90% effective training time'; docs/goodput.md gives the
    number, about 0.90, and its sensitivity to the costs chosen)."""
    failures, planned = llama3_failures()
    r = monte_carlo(llama3_job(), failures, planned, samples=100, seed=0)
    print(f"Llama-3-like goodput {r.goodput:.3f} (published: > 0.90 effective training time)")
    assert r.goodput > 0.85
    interruptions_per_day = sum(r.interruptions.values()) / (r.expected_time_to_train_s / DAY_S)
    assert interruptions_per_day == pytest.approx(466 / 54, rel=0.05)


# --- (6) determinism and bookkeeping --------------------------------------------------


def mixed() -> tuple[TrainingJob, list[FailureProcess], list[ScheduledFailure]]:
    """A job with every feature: drains, restarts, elastic slowdown, Weibull, planned."""
    j = job(iterations=20_000, checkpoint_drain_s=3.0, restart_s=40.0, elastic_slowdown=1.25)
    failures = [
        FailureProcess("gpu", 32, 32 * 3000.0, distribution="weibull", shape=0.8),
        FailureProcess("replica", 4, 4 * 900.0, stops_job=False, repair_s=200.0),
    ]
    planned = [ScheduledFailure("maintenance", 5000.0, repair_s=300.0)]
    return j, failures, planned


def test_same_seed_same_floats_other_seed_other_floats() -> None:
    j, failures, planned = mixed()
    a = monte_carlo(j, failures, planned, samples=200, seed=42).as_dict()
    assert monte_carlo(j, failures, planned, samples=200, seed=42).as_dict() == a
    assert monte_carlo(j, failures, planned, samples=200, seed=43).as_dict() != a


def test_time_lost_parts_add_up_to_the_wall_time() -> None:
    """ideal + failures + restarts + checkpoints + degraded == expected time to train."""
    j, failures, planned = mixed()
    r = monte_carlo(j, failures, planned, samples=200, seed=1)
    assert r.time_lost_s["degraded"] > 0 and r.time_lost_s["failures"] > 0
    total = r.ideal_time_to_train_s + sum(r.time_lost_s.values())
    assert total == pytest.approx(r.expected_time_to_train_s, rel=1e-9)
    assert set(r.interruptions) == {"gpu", "replica", "maintenance"}
    assert r.interruptions["replica"] == 0.0  # it never stops the job
    assert r.interruptions["maintenance"] == 1.0
    keys = {"goodput", "expected_time_to_train_s", "time_lost_s", "checkpoint_interval_s"}
    assert keys | {"best_checkpoint_interval_s"} <= set(r.as_dict())


def test_progress_reports_every_sample_done() -> None:
    calls: list[tuple[int, int]] = []
    j, failures, planned = mixed()
    monte_carlo(
        j, failures, planned, samples=50, seed=0, progress=lambda d, t: calls.append((d, t))
    )
    assert calls[-1] == (50, 50)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


# --- semantics, on fixed schedules ---------------------------------------------------


def fixed(at_s: float, **changes) -> float:
    """Work lost by one scheduled failure at ``at_s`` of a 1 s-iteration job
    checkpointing every 10 iterations (1 s pause, 5 s drain)."""
    j = TrainingJob(1.0, 100, 10, 1.0, checkpoint_drain_s=5.0, **changes)
    r = replay(j, [], [ScheduledFailure("x", at_s)], np.random.default_rng(0))
    return r.time_lost_s["failures"]


def test_a_failure_during_the_drain_loses_that_checkpoint() -> None:
    """Checkpoint 1 pauses over [10, 11) and is durable at 16: a failure at 13 goes back
    to the start (10 + 2 s of work lost), one at 17 only to it (6 s)."""
    assert fixed(13.0) == 12.0
    assert fixed(17.0) == 6.0
    assert fixed(10.5) == 10.0  # during the pause: its checkpoint is not written


def test_a_failure_during_a_restart_starts_it_again() -> None:
    j = TrainingJob(1.0, 100, 100, 0.0, restart_s=100.0)
    r = replay(
        j, [], [ScheduledFailure("a", 50.0), ScheduledFailure("b", 80.0)], np.random.default_rng(0)
    )
    assert r.interruptions == {"a": 1, "b": 1}
    assert r.time_lost_s == {
        "failures": 50.0,
        "restarts": 130.0,
        "checkpoints": 0.0,
        "degraded": 0.0,
    }
    assert r.wall_time_s == 100.0 + 50.0 + 130.0


def test_running_without_a_component_is_slower_while_it_is_repaired() -> None:
    """A replica down for 100 s with elastic_slowdown 2 does 50 s of work in 100 s."""
    j = TrainingJob(1.0, 1000, 1000, 0.0, elastic_slowdown=2.0)
    down = [ScheduledFailure("replica", 200.0, repair_s=100.0, stops_job=False)]
    r = replay(j, [], down, np.random.default_rng(0))
    assert r.wall_time_s == 1050.0
    assert r.time_lost_s["degraded"] == 50.0


def test_a_scheduled_repair_window_delays_the_restart() -> None:
    j = TrainingJob(1.0, 100, 100, 0.0, restart_s=10.0)
    r = replay(
        j, [], [ScheduledFailure("maintenance", 30.0, repair_s=60.0)], np.random.default_rng(0)
    )
    assert r.wall_time_s == 100.0 + 30.0 + 60.0 + 10.0


# --- (7) bad input --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "path"),
    [
        (lambda: FailureProcess("gpu", 0, 10.0), "components"),
        (lambda: FailureProcess("gpu", 1, 0.0), "mtbf_s"),
        (lambda: FailureProcess("gpu", 1, float("nan")), "mtbf_s"),
        (lambda: FailureProcess("gpu", 1, 10.0, distribution="gamma"), "distribution"),
        (lambda: FailureProcess("gpu", 1, 10.0, "weibull", shape=0.0), "shape"),
        (lambda: FailureProcess("", 1, 10.0), "cause"),
        (lambda: FailureProcess("gpu", 1, 10.0, repair_s=-1.0), "repair_s"),
        (lambda: FailureProcess("gpu", True, 10.0), "components"),
        (lambda: ScheduledFailure("x", -1.0), "at_s"),
        (lambda: TrainingJob(0.0, 10, 1, 0.0), "iteration_s"),
        (lambda: TrainingJob(1.0, 0, 1, 0.0), "iterations"),
        (lambda: TrainingJob(1.0, 10, 2.5, 0.0), "checkpoint_every"),
        (lambda: TrainingJob(1.0, 10, 1, float("inf")), "checkpoint_blocking_s"),
        (lambda: TrainingJob(1.0, 10, 1, 0.0, checkpoint_drain_s=-1), "checkpoint_drain_s"),
        (lambda: TrainingJob(1.0, 10, 1, 0.0, elastic_slowdown=0.5), "elastic_slowdown"),
        (lambda: monte_carlo(job(), [], samples=0), "samples"),
        (lambda: monte_carlo(job(), [], seed=-1), "seed"),
        (lambda: young_daly_interval_s(-1.0, 10.0), "checkpoint_s"),
        (lambda: young_daly_interval_s(1.0, 0.0), "mtbf_s"),
    ],
)
def test_bad_values_are_scenario_errors_naming_the_field(build, path) -> None:
    with pytest.raises(ScenarioError) as info:
        build()
    assert [p.path for p in info.value.problems] == [path]


# --- (8) no progress ------------------------------------------------------------------


def test_a_job_that_cannot_progress_is_refused_at_once() -> None:
    """Failures every 10 s against a 1000 s checkpoint interval: refused before any
    sample runs, naming the MTBF and the interval."""
    j = TrainingJob(1.0, 10_000, 1000, 5.0)
    with pytest.raises(SimulationError, match=r"cannot make progress.* 10 s .* 1000 s"):
        monte_carlo(j, [FailureProcess("gpu", 10, 100.0)], samples=10)


def test_a_sample_with_too_many_failures_stops_the_run() -> None:
    """The cap on failures per sample holds where the estimate let the job through."""
    j = TrainingJob(1.0, 1000, 1000, 0.0)
    failures = [FailureProcess("gpu", 1, 300.0)]  # e^(1000/300) - 1 = 27 failures expected
    with pytest.raises(SimulationError, match="more than 40 failures in one sample"):
        monte_carlo(j, failures, samples=1000, seed=0, max_failures=40)


def test_a_job_slowed_without_end_is_refused_after_many_chunks() -> None:
    """Nothing stops the job, but with 50 replicas down most of the time and each one
    halving the speed it never finishes: refused once 1000 times its useful time has
    passed (a float overflow of the slowdown is infinitely slow, not an error)."""
    j = TrainingJob(1.0, 1000, 1000, 0.0, elastic_slowdown=2.0)
    down = [FailureProcess("replica", 5000, 5000 * 10.0, stops_job=False, repair_s=5e4)]
    with pytest.raises(SimulationError, match="samples unfinished after"):
        monte_carlo(j, down, samples=2, seed=0)
