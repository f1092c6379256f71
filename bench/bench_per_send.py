"""The per-send flow level, before and after in one run (issue 43 item 4).

Issue 43 asks the per-send path to run at three times the rate of commit 9008a53 (the commit
it measured), on two cases: bench_allreduce.py's uncontended ring all-reduce (1 GB over
1,024 GPUs, 2.1 M sends; transfers per wall second, beside bare SimPy's timeouts per second
measured in the same process) and the 2,048-GPU cut of the 16k fabric with every replica at
flow level (GPT-3 175B, two pods, dp 32: the contended reference of ``bench_what_ifs.py
--cuts``; simulate seconds and peak memory).  Each case runs in a fresh process, once on this
checkout and once on 9008a53 checked out in a temporary worktree (the ring twice each,
alternating, the faster kept; bare SimPy the best of three), and the ratios are printed.
``--quick`` takes the 1,024-GPU cut instead of the 2,048-GPU one.  Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scale import ROOT, mb, measure, variant  # noqa: E402

ISSUE_COMMIT = "9008a53"
"""The commit issue 43 measured the per-send path on."""

_RING = """
import json, sys, time
sys.path.insert(0, sys.argv[1])  # this checkout's bench/: its helpers, on either engine
from bench_allreduce import bare_simpy_rate, cluster
from clustersim.collectives import CollectiveCall, run_collective
from clustersim.engine import Simulation
from clustersim.scenario import parse_scenario
from clustersim.topology import build_topology

doc = {"name": "bench-allreduce", "workload": {"program": []}, "cluster": cluster(16, 8, 8, 4.0)}
topology = build_topology(parse_scenario(doc).cluster)
sim = Simulation(topology)
call = CollectiveCall("allreduce", tuple(d.name for d in topology.select("*/gpu*")), 1e9, "ring")
t0 = time.perf_counter()
run_collective(sim, call)
sim.run()
seconds = time.perf_counter() - t0
print(json.dumps({"transfers": sim.network.flows_completed, "seconds": seconds,
                  "simpy": max(bare_simpy_rate() for _ in range(3)), "end": sim.now}))
"""
"""bench_allreduce.py's case in a fresh process: its sends per wall second (schedule built
and played) and bare SimPy's timeouts per second, as JSON."""


def worktree(folder: Path, commit: str) -> Path:
    """``commit`` checked out (detached) under ``folder``."""
    target = folder / commit
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(target), commit],
        capture_output=True,
        check=True,
    )
    return target


def ring(pythonpath: str) -> dict[str, float]:
    """:data:`_RING` with ``pythonpath`` first on the path."""
    done = subprocess.run(
        [sys.executable, "-c", _RING, str(Path(__file__).resolve().parent)],
        env={
            **{k: v for k, v in os.environ.items() if k != "CLUSTERSIM_CHECK"},
            "PYTHONPATH": pythonpath,
        },
        capture_output=True,
        text=True,
        check=True,
        cwd=tempfile.gettempdir(),
    )
    return json.loads(done.stdout.splitlines()[-1])


def cut_scenario(folder: Path, pods: int) -> Path:
    """The ``pods``-pod cut of the 16k fabric, every replica per send."""
    return variant(
        "gpt3_175b_16k.yaml",
        folder,
        cluster__pods=pods,
        parallelism__dp=16 * pods,
        training__global_batch=256 * pods,
        parallelism__simulate_replicas="all",
        network={"model": "flow"},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="the 1,024-GPU cut, not 2,048")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        old = worktree(folder, ISSUE_COMMIT)
        try:
            runs = {"now": str(ROOT), ISSUE_COMMIT: str(old)}
            print(
                f"ring all-reduce of 1 GB over 1,024 GPUs (bench_allreduce.py), against {ISSUE_COMMIT}"
            )
            best: dict[str, dict[str, float]] = {}
            for _ in range(2):  # alternately, the faster of two kept
                for name, path in runs.items():
                    got = ring(path)
                    kept = best.get(name)
                    if kept is None or got["seconds"] < kept["seconds"]:
                        best[name] = got
            rate = {}
            for name, got in best.items():
                rate[name] = got["transfers"] / got["seconds"] / got["simpy"]
                print(
                    f"  {name:>8}: {got['transfers']:,} sends in {got['seconds']:.2f} s, "
                    f"{got['transfers'] / got['seconds']:,.0f} per second; bare SimPy "
                    f"{got['simpy']:,.0f} timeouts per second: ratio {rate[name]:.2f}"
                )
            plain = best[ISSUE_COMMIT]["seconds"] / best["now"]["seconds"]
            print(
                f"  per-send rate over {ISSUE_COMMIT}'s: {rate['now'] / rate[ISSUE_COMMIT]:.2f}x "
                f"against SimPy's rate, {plain:.2f}x in sends per second"
            )
            pods = 1 if args.quick else 2
            (folder / "cut").mkdir()
            scenario = cut_scenario(folder / "cut", pods)
            print(f"the {1024 * pods:,}-GPU cut, every replica per send, against {ISSUE_COMMIT}")
            took = {}
            for name, path in runs.items():
                got = measure(scenario, pythonpath=path)
                took[name] = got["simulate_s"]
                print(
                    f"  {name:>8}: simulate {got['simulate_s']:.1f} s, peak {mb(got['peak'])}, "
                    f"iteration {got['iteration_s']:.4f} s"
                )
            print(f"  speed-up over {ISSUE_COMMIT}: {took[ISSUE_COMMIT] / took['now']:.2f}x")
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)],
                capture_output=True,
            )


if __name__ == "__main__":
    main()
