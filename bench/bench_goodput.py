"""Benchmark and validation tables of the goodput model (clustersim.goodput).

Run: ``PYTHONPATH=. .venv/bin/python bench/bench_goodput.py [--quick]``.  Prints;
asserts nothing.  The tables are the numbers docs/goodput.md quotes.

* ``speed``: samples per second of :func:`monte_carlo` on a 30-day job of 16,384
  GPUs at the Llama 3 report's interruption rate (about 260 interruptions per sample),
  and on the report's whole 54-day snapshot (about 500).
* ``young-daly``: the Monte-Carlo best checkpoint interval against Young's
  sqrt(2 C M) and Daly's higher-order optimum, over checkpoint cost C and MTBF M.
* ``llama3``: the predicted goodput of a Llama-3-like job beside the published
  "higher than 90% effective training time", and its sensitivity to the checkpoint
  and restart costs chosen.
"""

from __future__ import annotations

import argparse
import math
import time

from clustersim.goodput import (
    FailureProcess,
    ScheduledFailure,
    TrainingJob,
    best_checkpoint_interval,
    job_mtbf_s,
    monte_carlo,
    young_daly_interval_s,
)

DAY_S = 86400.0
SNAPSHOT_S = 54 * DAY_S
GPUS, NODES = 16_384, 2_048
UNEXPECTED, PLANNED, GPU_SHARE = 419, 47, 0.587


def llama3_failures() -> tuple[list[FailureProcess], list[ScheduledFailure]]:
    """As tests/test_goodput.py: GPU share per GPU, the rest per node, planned regular."""
    gpu, node = GPU_SHARE * UNEXPECTED, (1 - GPU_SHARE) * UNEXPECTED
    failures = [
        FailureProcess("gpu", GPUS, GPUS * SNAPSHOT_S / gpu),
        FailureProcess("node", NODES, NODES * SNAPSHOT_S / node),
    ]
    every = SNAPSHOT_S / PLANNED
    return failures, [ScheduledFailure("planned", (i + 0.5) * every) for i in range(PLANNED)]


def llama3_job(useful_days: float, blocking_s=10.0, drain_s=60.0, restart_s=600.0, every=75):
    return TrainingJob(
        iteration_s=6.0,
        iterations=int(useful_days * DAY_S / 6.0),
        checkpoint_every=every,
        checkpoint_blocking_s=blocking_s,
        checkpoint_drain_s=drain_s,
        restart_s=restart_s,
    )


def bench_speed(samples: int) -> None:
    failures, planned = llama3_failures()
    for days in (30.0, 0.9 * 54):
        job = llama3_job(days)
        best = math.inf
        for _ in range(3):
            t0 = time.perf_counter()
            r = monte_carlo(job, failures, planned, samples=samples, seed=0)
            best = min(best, time.perf_counter() - t0)
        stops = sum(r.interruptions.values())
        print(
            f"speed      {days:4.1f} d useful, 16K GPUs, {stops:5.0f} interruptions/sample: "
            f"{samples} samples in {best:.2f} s = {samples / best:7.0f} samples/s"
        )


def daly_optimum_s(c: float, m: float) -> float:
    """Daly (2006) eq. 37: sqrt(2 C M) (1 + sqrt(C / 2M) / 3 + C / 18M) - C, for C < 2M."""
    return math.sqrt(2 * c * m) * (1 + math.sqrt(c / (2 * m)) / 3 + c / (18 * m)) - c


def bench_young_daly(samples: int) -> None:
    print("young-daly C_s      M_s   young_s    daly_s   best_s  best/young  best/daly  evals")
    for c, m in ((5.0, 2000.0), (20.0, 1e4), (50.0, 1e4), (100.0, 4e4), (60.0, 3600.0)):
        job = TrainingJob(1.0, int(150 * m), 1, c, restart_s=c / 10)
        t0 = time.perf_counter()
        found = best_checkpoint_interval(
            job, [FailureProcess("gpu", 8, 8 * m)], samples=samples, seed=1
        )
        young, daly = young_daly_interval_s(c, m), daly_optimum_s(c, m)
        best = found.best_checkpoint_interval_s
        print(
            f"young-daly {c:5.0f} {m:8.0f} {young:9.0f} {daly:9.0f} {best:8.0f} "
            f"{best / young - 1:+10.1%} {best / daly - 1:+10.1%} {len(found.candidates):6d}"
            f"   ({time.perf_counter() - t0:.1f} s)"
        )


def bench_llama3(samples: int) -> None:
    failures, planned = llama3_failures()
    mtbf = job_mtbf_s(failures)
    print(
        f"llama3     job MTBF (unexpected only) {mtbf / 3600:.2f} h; with planned 54 d / 466 = "
        f"{SNAPSHOT_S / 466 / 3600:.2f} h"
    )
    found = best_checkpoint_interval(
        llama3_job(0.9 * 54), failures, planned, samples=samples, seed=0
    )
    r = found.result
    print(
        f"llama3     best interval {found.best_checkpoint_interval_s:.0f} s "
        f"(Young {found.young_daly_interval_s:.0f} s); goodput {r.goodput:.3f} "
        f"(published: > 0.90); time to train {r.expected_time_to_train_s / DAY_S:.1f} d "
        f"for {r.ideal_time_to_train_s / DAY_S:.1f} d of work"
    )
    lost = ", ".join(f"{k} {v / 3600:.0f} h" for k, v in r.time_lost_s.items())
    print(f"llama3     lost: {lost}; interruptions {sum(r.interruptions.values()):.0f}")
    print("llama3     sensitivity (goodput at the best interval): blocking_s x restart_s")
    for blocking in (10.0, 30.0, 60.0):
        row = []
        for restart in (300.0, 600.0, 900.0):
            job = llama3_job(0.9 * 54, blocking_s=blocking, restart_s=restart)
            s = best_checkpoint_interval(
                job, failures, planned, samples=max(samples // 4, 20), seed=0
            )
            row.append(
                f"R={restart:4.0f} s: {s.result.goodput:.3f} ({s.best_checkpoint_interval_s:5.0f} s)"
            )
        print(f"llama3     C={blocking:3.0f} s  " + "   ".join(row))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    args = parser.parse_args()
    bench_speed(1000)
    bench_young_daly(100 if args.quick else 400)
    bench_llama3(100 if args.quick else 400)


if __name__ == "__main__":
    main()
