"""The estimates made before a run against what the run takes: memory, events, time.

For shipped scenarios of different kinds and sizes (a collective whose schedule is built
whole, parameter servers, ZeRO, pipelines of 9 to 3,456 GPUs with one replica or every
replica simulated), each run in a fresh process: the simulator's peak memory (``VmHWM``
of ``/proc/self/status``, Linux) against :func:`clustersim.budget.estimate_memory` (to
simulate, or with ``clustersim run``'s run folder), the events the run counted against
the estimate, and the wall time of the run (simulating, and writing its run folder where
it is written) against the estimate's (:func:`clustersim.budget.wall_time_s`: the events
at :data:`~clustersim.budget.EVENTS_PER_S`).  Then GPT-3 175B on 16,384 GPUs with global
batch 8,192 (tp 8 x pp 8 x dp 256, interleaved, every replica simulated): its estimates
against the default limits (not run here: about 10 GB and well over an hour; the
4,096-batch half peaked at 7.72 GB against 8.04 GB estimated, measured apart).  Nothing
is asserted.  ``--quick`` leaves out the largest.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from clustersim.api import prepare
from clustersim.budget import (
    DEFAULT_MAX_EVENTS,
    EVENTS_PER_S,
    default_max_memory,
    format_bytes,
    format_count,
    wall_time_s,
)
from clustersim.scenario import parse_scenario
from clustersim.scenario.overrides import load_with_settings, parse_set

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"

CASES = [
    (
        "collective: ring of 437,000 sends built whole",
        "collectives/ring_allreduce_r1.yaml",
        ["workload.bytes=8MB", "workload.chunk=256B"],
        False,
    ),
    ("1F1B, 9 GPUs, run folder", "pipeline/1f1b_m8.yaml", [], True),
    ("parameter servers, sync", "parameter_server/sync_straggler.yaml", [], False),
    ("parameter servers, BERT 1x", "ps_vs_ring/bert_large_ps_servers_1x.yaml", [], False),
    ("ZeRO-1, GPT-3 1.3B", "zero/gpt3_1.3b_stage1.yaml", [], False),
    ("DDP ring, BERT-large", "ps_vs_ring/bert_large_ring.yaml", [], False),
    ("GPT-3 175B, 1,024 GPUs, one replica", "megatron/gpt3_175b_1024.yaml", [], False),
    ("GPT-3 175B, 1,024 GPUs, one replica, run folder", "megatron/gpt3_175b_1024.yaml", [], True),
    (
        "GPT-3 175B, 1,024 GPUs, every replica",
        "megatron/gpt3_175b_1024.yaml",
        ["parallelism.simulate_replicas=all"],
        False,
    ),
    ("Megatron 1T, 3,456 GPUs", "megatron/table1_1t.yaml", [], False),
]
"""(what, scenario, --set texts, whether the run folder is written)."""
LARGE = {"Megatron 1T, 3,456 GPUs", "GPT-3 175B, 1,024 GPUs, every replica"}
"""Left out by ``--quick``."""

_MEASURE = """
import json, sys, tempfile, time
import clustersim.api as api, clustersim.outputs.run_folder, matplotlib, pandas
from clustersim.scenario.overrides import load_with_settings, parse_set

def status(key):
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith(key + ":"))

path, write, sets = sys.argv[1], sys.argv[2] == "1", sys.argv[3:]
with open("/proc/self/clear_refs", "w") as fh:
    fh.write("5")  # the peak restarts from what the imports hold
base = status("VmRSS")
_, scenario = load_with_settings(path, [parse_set(s) for s in sets])
started = time.perf_counter()
result = api.simulate(scenario, max_events=10**12, max_memory=1e15)
if write:
    with tempfile.TemporaryDirectory() as folder:
        result.write(folder + "/run")
wall = time.perf_counter() - started
engine = result.typed_summary.engine
peak = status("VmHWM")
events = engine.records + engine.flows_completed
print(json.dumps({"base": base, "peak": peak, "events": events, "wall_s": wall}))
"""
"""One run in a fresh process (Linux): the resident memory after the imports, the peak
(``VmHWM``, reset after the imports) and the events the run counted."""

GPT3_16K = {
    "name": "gpt3-175b-16k-b8192",
    "cluster": {
        "kind": "three_tier",
        "pods": 16,
        "racks_per_pod": 16,
        "nodes_per_rack": 8,
        "node": {"preset": "dgx-a100"},
        "rack_uplink": {"oversubscription": 1},
        "pod_uplink": {"oversubscription": 4},
        "spines": 8,
        "cores": 8,
    },
    "model": {"preset": "gpt3-175b"},
    "training": {
        "global_batch": 8192,
        "micro_batch": 1,
        "iterations": 1,
        "precision": "bf16",
        "optimizer": "adam",
        "recompute": "full",
    },
    "parallelism": {"tp": 8, "pp": 8, "dp": 256, "simulate_replicas": "all"},
    "pipeline": {"schedule": "interleaved", "chunks": 4},
}
"""GPT-3 175B on 16,384 A100s (issue 29): the run the default event limit must accept."""


def measure(path: Path, sets: list[str], write: bool) -> dict[str, float]:
    """Peak memory and counted events of one run in a fresh process (as users run it)."""
    env = {k: v for k, v in os.environ.items() if k != "CLUSTERSIM_CHECK"}
    argv = [sys.executable, "-c", _MEASURE, str(path), "1" if write else "0", *sets]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="leave out the largest runs")
    args = parser.parse_args()
    print("peak memory of the simulator (fresh process) against its estimate, events, and")
    print(f"the wall time of simulating (and writing) against {EVENTS_PER_S:,} events/s")
    print(
        f"{'case':<50} {'estimate':>10} {'measured':>10} {'ratio':>6} {'events est/run':>15}"
        f" {'wall est':>9} {'wall run':>9} {'events/s':>9}"
    )
    for what, name, sets, write in CASES:
        if args.quick and what in LARGE:
            continue
        path = SCENARIOS / name
        _, scenario = load_with_settings(path, [parse_set(s) for s in sets])
        prepared = prepare(scenario, max_events=10**12, max_memory=1e15)
        estimate = prepared.strategy.estimate_memory(outputs=write).total
        work = prepared.work
        run = measure(path, sets, write)
        ratio = estimate / run["peak"]
        events = work.events / run["events"] if work is not None else float("nan")
        wall = run["wall_s"]
        print(
            f"{what:<50} {format_bytes(estimate):>10} {format_bytes(run['peak']):>10} "
            f"{ratio:6.2f} {events:15.2f} {wall_time_s(work):8.2f}s {wall:8.2f}s "
            f"{run['events'] / wall:9,.0f}"
        )
    if args.quick:
        return
    started = time.perf_counter()
    big = prepare(parse_scenario(GPT3_16K, "gpt3-175b-16k"), max_events=10**12, max_memory=1e15)
    work, strategy = big.work, big.strategy
    simulate_bytes = strategy.estimate_memory(outputs=False).total
    run_bytes = strategy.estimate_memory(outputs=True).total
    limit = default_max_memory()
    print(
        f"GPT-3 175B on 16,384 GPUs, global batch 8,192, every replica "
        f"(estimated in {time.perf_counter() - started:.0f} s): "
        f"{format_count(work.events)} events of the default {format_count(DEFAULT_MAX_EVENTS)} "
        f"({'accepted' if work.events <= DEFAULT_MAX_EVENTS else 'REFUSED'}); memory "
        f"{format_bytes(simulate_bytes)} to simulate, {format_bytes(run_bytes)} with its run "
        f"folder, this machine's default limit {format_bytes(limit) if limit else 'unknown'}"
    )


if __name__ == "__main__":
    main()
