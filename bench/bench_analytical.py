"""The congestion-aware analytical model against the flow-level model: accuracy and speed.

For each case, one run of each model in this process; prints the iteration time of
both, their difference, both wall times and the speed ratio (nothing is asserted):

* the four cases the network issue measured: BERT-large DDP over 128 GPUs
  (25 buckets in flight at once), ResNet-50 hierarchical at 8:1 uplinks, GPT-3 1.3B
  ZeRO-2, and the plan candidate dp 4 x tp 2 x pp 4 of GPT-3 1.3B on 32 GPUs with
  every replica simulated;
* GPT-3 175B on 1,024 GPUs with one replica standing for all (what ``clustersim
  plan`` runs per candidate): analytical wall time (target under 2 s).

``--quick`` leaves out BERT-large (its flow-level run takes 10-30 s).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from clustersim.api import simulate
from clustersim.scenario import parse_scenario
from clustersim.studies.plan import PlanOptions, Point, candidate_document
from clustersim.studies.sweep import load_document

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"


def timed(doc: dict[str, Any], model: str) -> tuple[float, float]:
    """``(iteration time s, wall s)`` of one run of ``doc`` with ``network.model``."""
    doc = {**doc, "network": {**(doc.get("network") or {}), "model": model}}
    scenario = parse_scenario(doc, "bench")
    t0 = time.perf_counter()
    summary = simulate(scenario).summary
    return summary["iteration_time_s"], time.perf_counter() - t0


def cases(quick: bool) -> list[tuple[str, dict[str, Any]]]:
    out = []
    if not quick:
        out.append(
            (
                "BERT-large DDP, 128 GPUs",
                load_document(SCENARIOS / "ps_vs_ring/bert_large_ring.yaml"),
            )
        )
    hierarchical = load_document(SCENARIOS / "ps_vs_ring/resnet50_hierarchical.yaml")
    hierarchical["cluster"]["rack_uplink"] = {"oversubscription": 8}
    out.append(("ResNet-50 hierarchical, 8:1", hierarchical))
    out.append(("GPT-3 1.3B ZeRO-2", load_document(SCENARIOS / "zero/gpt3_1.3b_stage2.yaml")))
    doc = load_document(SCENARIOS / "zero/gpt3_1.3b_stage1.yaml")
    doc["cluster"] = {**doc["cluster"], "racks": 2}
    point = Point(dp=4, tp=2, pp=4, micro_batch=1, zero=0, micro_batches=8)
    out.append(
        (
            "plan case dp4 tp2 pp4, all replicas",
            candidate_document(doc, point, PlanOptions(all_replicas=True)),
        )
    )
    return [(name, textbook(doc)) for name, doc in out]


def textbook(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with the textbook's collectives (rings, line rates, one channel), as the
    benchmark has always timed them: ratios stay comparable across versions."""
    doc = {**doc, "network": {**(doc.get("network") or {}), "protocol": "none", "channels": 1}}
    if "parallelism" in doc:
        doc["parallelism"] = {**doc["parallelism"], "tp_algorithm": "ring"}
    sync = (doc.get("data_parallel") or {}).get("allreduce") or {}
    if "algorithm" not in sync:
        doc["data_parallel"] = {
            **(doc.get("data_parallel") or {}),
            "allreduce": {**sync, "algorithm": "ring"},
        }
    return doc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="leave out BERT-large")
    args = parser.parse_args()
    print(
        f"{'case':38s} {'analytical':>11s} {'flow':>11s} {'diff':>7s} {'wall a':>8s} {'wall f':>8s} {'speed':>7s}"
    )
    for name, doc in cases(args.quick):
        fast, wall_fast = timed(doc, "analytical")
        flow, wall_flow = timed(doc, "flow")
        print(
            f"{name:38s} {fast * 1e3:8.2f} ms {flow * 1e3:8.2f} ms {fast / flow - 1:+7.2%} "
            f"{wall_fast:7.2f}s {wall_flow:7.2f}s {wall_flow / wall_fast:6.1f}x"
        )
    gpt3 = load_document(SCENARIOS / "megatron/gpt3_175b_1024.yaml")
    iteration, wall = timed(gpt3, "analytical")
    print(
        f"GPT-3 175B, 1,024 GPUs, one replica for all: analytical iteration {iteration:.3f} s, "
        f"wall {wall:.2f} s (target < 2 s)"
    )


if __name__ == "__main__":
    main()
