"""The congestion-aware analytical model against the flow-level model on shipped scenarios.

The fast model (``network.model: analytical``) must give the iteration time of the
flow-level model within 10% wherever a job's own traffic overlaps: DDP buckets, ZeRO
reduce-scatters and all-gathers, hierarchical rails sharing a NIC, pipeline sends beside
data-parallel rings -- swept over rack-uplink oversubscription and NIC bandwidth.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clustersim.api import simulate
from clustersim.scenario import parse_scenario
from clustersim.studies.plan import PlanOptions, Point, candidate_document
from clustersim.studies.sweep import load_document, parse_key_path, set_path

from . import shared_runs

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
TOLERANCE = 0.10
"""Largest relative difference of the iteration time allowed between the two models."""

UPLINK = "cluster.rack_uplink.oversubscription"
NIC = "cluster.node.nic.bandwidth"

CASES: list[tuple[str, dict[str, Any]]] = [
    *[("ps_vs_ring/resnet50_ring.yaml", {UPLINK: r}) for r in (1, 4, 16)],
    *[("ps_vs_ring/resnet50_hierarchical.yaml", {UPLINK: r}) for r in (1, 8, 16)],
    ("ps_vs_ring/bert_large_ring.yaml", {}),
    *[
        (f"zero/gpt3_1.3b_{name}.yaml", nic)
        for name in ("stage1", "stage2", "stage3_prefetch", "stage3_no_prefetch")
        for nic in ({}, {NIC: "50Gb/s"})
    ],
    ("data_parallel/no_overlap.yaml", {}),
    ("data_parallel/overlap.yaml", {}),
    ("data_parallel/straggler.yaml", {}),
    ("pipeline/1f1b_m8.yaml", {}),
    ("pipeline/slow_link.yaml", {}),
    ("parameter_server/sync_straggler.yaml", {}),
    ("parameter_server/backup_straggler.yaml", {}),
    ("megatron/table1_18.4b.yaml", {"parallelism.simulate_replicas": "all"}),
]


def iteration_time(doc: dict[str, Any], model: str) -> float:
    doc = {**doc, "network": {**(doc.get("network") or {}), "model": model}}
    return simulate(parse_scenario(doc, "test")).summary["iteration_time_s"]


def case_id(case: tuple[str, dict[str, Any]]) -> str:
    name, settings = case
    return name + "".join(f"[{k.rsplit('.', 1)[-1]}={v}]" for k, v in settings.items())


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_analytical_iteration_time_is_within_10_percent_of_flow(
    case: tuple[str, dict[str, Any]],
) -> None:
    name, settings = case
    doc = load_document(SCENARIOS / name)
    for key, value in settings.items():
        doc = set_path(doc, parse_key_path(key), value)
    fast = iteration_time(doc, "analytical")
    if not settings and (doc.get("network") or {}).get("model", "flow") == "flow":
        path = SCENARIOS / name  # the file as it is: the run test_golden shares
        flow = shared_runs.summary(path, check=shared_runs.checked(path))["iteration_time_s"]
    else:
        flow = iteration_time(doc, "flow")
    assert fast == pytest.approx(flow, rel=TOLERANCE)


@pytest.mark.parametrize("ratio", [1, 4])
def test_plan_candidate_with_pipeline_sends_beside_rings_is_within_10_percent(ratio: int) -> None:
    """The issue's plan case: GPT-3 1.3B on 32 GPUs, dp 4 x tp 2 x pp 4, micro-batch 1,
    every replica simulated (the two tensor ranks' rings share each node's NIC while
    pipeline sends go on), on one rack or four at ``ratio``:1."""
    doc = load_document(SCENARIOS / "zero/gpt3_1.3b_stage1.yaml")
    doc["cluster"] = {**doc["cluster"], "racks": 4, "nodes_per_rack": 1}
    doc["cluster"]["rack_uplink"] = {"oversubscription": ratio}
    point = Point(dp=4, tp=2, pp=4, micro_batch=1, zero=0, micro_batches=8)
    candidate = candidate_document(doc, point, PlanOptions(all_replicas=True))
    fast, flow = iteration_time(candidate, "analytical"), iteration_time(candidate, "flow")
    assert fast == pytest.approx(flow, rel=TOLERANCE)
