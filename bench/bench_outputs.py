"""Writing a run's outputs against simulating it, for a large hybrid run.

GPT-3 175B on 256 GPUs (tp 8 x pp 8 x dp 4, 1F1B, 96 micro-batches per
replica: ~150,000 records). Prints the wall seconds of simulating and of
writing each output (summary.json, timeline.csv, links.csv, trace.json,
gantt.png/svg), measured in this one run, and their ratio to the simulation.
Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from clustersim import simulate
from clustersim.outputs.gantt import write_gantt
from clustersim.outputs.timeline import timeline_csv
from clustersim.outputs.trace import nodes_of, trace_json
from clustersim.scenario import load_scenario

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "megatron" / "gpt3_175b_1024.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dp", type=int, default=4, help="data-parallel replicas (64 GPUs each)")
    args = parser.parse_args()
    scenario = load_scenario(SCENARIO)
    cluster = scenario.cluster.model_copy(update={"racks": 2 * args.dp})
    parallelism = scenario.parallelism.model_copy(
        update={"dp": args.dp, "simulate_replicas": "all"}
    )
    training = scenario.training.model_copy(update={"global_batch": 96 * args.dp})
    scenario = scenario.model_copy(
        update={"cluster": cluster, "parallelism": parallelism, "training": training}
    )
    started = time.perf_counter()
    result = simulate(scenario)
    simulate_s = time.perf_counter() - started
    print(
        f"{len(result.records):,} records on {8 * 8 * args.dp} GPUs: simulated in {simulate_s:.2f} s"
    )
    timings = {}
    for name, make in (
        ("summary.json", result.summary_json),
        ("timeline.csv", lambda: timeline_csv(result.records)),
        ("trace.json", lambda: trace_json(result.records, nodes_of(result.topology))),
    ):
        started = time.perf_counter()
        make()
        timings[name] = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        write_gantt(Path(folder), result.records, result.summary)
        timings["gantt.png/svg"] = time.perf_counter() - started
    total = sum(timings.values())
    for name, seconds in timings.items():
        print(f"  {name:<14} {seconds:7.2f} s  {seconds / simulate_s:6.2f} x simulate")
    print(f"  {'all outputs':<14} {total:7.2f} s  {total / simulate_s:6.2f} x simulate")


if __name__ == "__main__":
    main()
