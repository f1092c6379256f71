"""Writing a run's outputs: its cost against simulating it, and the run folder's size at scale.

1. GPT-3 175B on 256 GPUs (tp 8 x pp 8 x dp 4, 1F1B, 96 micro-batches per
   replica: ~150,000 records). Prints the wall seconds of simulating and of
   writing each output (summary.json, timeline.csv, links.csv, trace.json,
   gantt.png/svg), measured in this one run, and their ratio to the simulation.
2. The same model on 4,096 GPUs (dp 64, every replica simulated, 24 micro-batches per
   replica: ~1.1 million records; ``--sizes-dp 256`` for 16,384 GPUs). Writes its run
   folder in the default modes (folded at 4,096 devices or more), with ``--trace all``,
   with ``--timeline parquet --timeline-rows all`` and with every mode ``all`` (the
   folder as it was before folding: ``--trace``, ``--timeline-rows``,
   ``--summary-devices`` and ``--links all``), and prints each file's size and each folder's total
   against the 100 MB a default folder must stay under.

Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from clustersim import simulate
from clustersim.outputs.gantt import write_gantt
from clustersim.outputs.modes import OutputModes
from clustersim.outputs.timeline import timeline_csv
from clustersim.outputs.trace import nodes_of, trace_json
from clustersim.scenario import Scenario, load_scenario

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "megatron" / "gpt3_175b_1024.yaml"
BUDGET_BYTES = 100e6
"""What a default run folder of 4,096 devices or more must stay under (issue 29)."""
FOLDERS = {
    "default": OutputModes(),
    "--trace all": OutputModes(trace="all"),
    "--timeline parquet --timeline-rows all": OutputModes(timeline="parquet", timeline_rows="all"),
    "every mode all (before folding)": OutputModes(
        trace="all", timeline_rows="all", summary_devices="all", links="all"
    ),
}
"""The folders written of the large run, by the flags that give them."""


def scaled(dp: int, micro_batches: int, replicas: str) -> Scenario:
    """The 1,024-GPU scenario at ``dp`` replicas of 64 GPUs (two racks each)."""
    scenario = load_scenario(SCENARIO)
    cluster = scenario.cluster.model_copy(update={"racks": 2 * dp})
    parallelism = scenario.parallelism.model_copy(update={"dp": dp, "simulate_replicas": replicas})
    training = scenario.training.model_copy(update={"global_batch": micro_batches * dp})
    return scenario.model_copy(
        update={"cluster": cluster, "parallelism": parallelism, "training": training}
    )


def output_costs(dp: int) -> None:
    """Part 1: wall seconds of each output against the simulation."""
    started = time.perf_counter()
    result = simulate(scaled(dp, 96, "all"))
    simulate_s = time.perf_counter() - started
    print(f"{len(result.records):,} records on {64 * dp} GPUs: simulated in {simulate_s:.2f} s")
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


def folder_sizes(dp: int, micro_batches: int) -> None:
    """Part 2: the run folder's files and total size in each set of modes."""
    started = time.perf_counter()
    result = simulate(scaled(dp, micro_batches, "all"))
    simulate_s = time.perf_counter() - started
    devices = len(result.topology.devices)
    print(
        f"\nrun folder sizes: {64 * dp:,} GPUs ({devices:,} devices), "
        f"{len(result.records):,} records, simulated in {simulate_s:.1f} s"
    )
    for flags, modes in FOLDERS.items():
        with tempfile.TemporaryDirectory() as root:
            started = time.perf_counter()
            paths = result.write(Path(root) / "run", modes=modes)
            write_s = time.perf_counter() - started
            sizes = {p.name: p.stat().st_size for p in paths}
        total = sum(sizes.values())
        verdict = "under" if total < BUDGET_BYTES else "OVER"
        print(
            f"  {flags}: {total / 1e6:,.1f} MB ({verdict} {BUDGET_BYTES / 1e6:.0f} MB), "
            f"written in {write_s:.1f} s"
        )
        for name, size in sorted(sizes.items(), key=lambda item: -item[1]):
            print(f"    {name:<24} {size / 1e6:10.3f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--dp", type=int, default=4, help="part 1: data-parallel replicas (64 GPUs each)"
    )
    parser.add_argument(
        "--sizes-dp", type=int, default=64, help="part 2: replicas (64: 4,096 GPUs; 0: skip)"
    )
    parser.add_argument(
        "--sizes-micro-batches", type=int, default=24, help="part 2: micro-batches per replica"
    )
    args = parser.parse_args()
    output_costs(args.dp)
    if args.sizes_dp:
        folder_sizes(args.sizes_dp, args.sizes_micro_batches)


if __name__ == "__main__":
    main()
