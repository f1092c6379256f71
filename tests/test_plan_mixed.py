"""``clustersim plan`` on a mixed cluster (clustersim/studies/plan/mixed.py): where each GPU
type goes, and the measured gain over the obvious choices.

Held to: the arrangements' definitions (placement order and balancing keys, checked on the
candidates' documents and on where the types land); brute force (the reported best is the
best of every simulated candidate, the naive best the best of the even ones, the fast-only
best the best of a plan of the fast nodes' cluster run separately); the gain arithmetic.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from clustersim.cli import main
from clustersim.errors import ScenarioError
from clustersim.scenario import parse_scenario
from clustersim.studies import plan
from clustersim.studies.plan import mixed
from clustersim.topology import build_topology

SMALL = {"layers": 8, "hidden": 1024, "heads": 16, "seq": 512, "vocab": 1000}


def mixed_doc(a100: int = 1, h100: int = 1, per_rack: int = 1, **training: Any) -> dict[str, Any]:
    """``a100`` DGX A100 then ``h100`` DGX H100 nodes, ``per_rack`` per rack, a small model."""
    return {
        "name": "mixed-plan",
        "cluster": {
            "kind": "two_tier",
            "racks": (a100 + h100) // per_rack,
            "nodes_per_rack": per_rack,
            "gpu_hour_price": 2.0,
            "node_groups": [
                {"preset": "dgx-a100", "count": a100, "gpu_hour_price": 1.5},
                {"preset": "dgx-h100", "count": h100, "gpu_hour_price": 3.0},
            ],
        },
        "model": {"transformer": dict(SMALL)},
        "training": {"global_batch": 64, "precision": "bf16", "optimizer": "adam", **training},
    }


OPTIONS = plan.PlanOptions(tp=(8,), pp=(1, 2), micro_batch=(2,), zero=(1,), chunks=(1,))


def test_fast_only_keeps_the_fastest_groups_whole_racks() -> None:
    doc = mixed_doc(a100=2, h100=2, per_rack=2)
    scenario = parse_scenario(doc)
    fast = mixed.fast_only_document(doc, scenario, build_topology(scenario.cluster))
    assert fast.gpu_type == "h100-sxm5-80gb"
    assert fast.doc is not None
    cluster = fast.doc["cluster"]
    assert cluster["racks"] == 1 and [g["preset"] for g in cluster["node_groups"]] == ["dgx-h100"]
    topology = build_topology(parse_scenario(fast.doc).cluster)
    assert topology.gpu_types() == {"h100-sxm5-80gb": 16}


def test_fast_only_says_why_when_racks_are_not_whole() -> None:
    doc = mixed_doc(a100=3, h100=1, per_rack=2)
    scenario = parse_scenario(doc)
    fast = mixed.fast_only_document(doc, scenario, build_topology(scenario.cluster))
    assert fast.doc is None and "do not fill whole racks of 2 nodes" in fast.why


def test_every_point_is_tried_in_each_arrangement_that_applies() -> None:
    found = plan.enumerate_candidates(mixed_doc(), "mixed.yaml", OPTIONS)
    assert found.gpu_types == {"a100-sxm4-80gb": 8, "h100-sxm5-80gb": 8}
    got = {(c.point.pp, c.point.arrangement) for c in found.candidates}
    # pp 1 (dp 2): even and by replica; pp 2 (dp 1): even and by stage
    assert got == {(1, "even"), (1, "replicas"), (2, "even"), (2, "stages")}, found.skipped
    for c in found.candidates:
        # replicas of different types (dp 2 on one A100 and one H100 node) are two classes,
        # one replica played for each; one replica (dp 1) stands for itself
        assert c.doc["parallelism"]["simulate_replicas"] == "one"
        order = c.doc["parallelism"].get("order")
        if c.point.arrangement == "replicas":
            assert order == mixed.REPLICA_ORDER and c.doc["data_parallel"]["balance"] == "speed"
        elif c.point.arrangement == "stages":
            assert order == mixed.STAGE_ORDER and c.doc["pipeline"]["stages"] == "balanced"
        else:
            assert order is None


def test_devices_flag_is_refused_on_a_mixed_cluster() -> None:
    with pytest.raises(ScenarioError) as raised:
        plan.enumerate_candidates(mixed_doc(), "mixed.yaml", plan.PlanOptions(devices=32))
    assert raised.value.problems[0].path == "--devices"


def test_gains_are_measured_against_the_even_and_fast_only_bests(
    tmp_path: Path, capsys: Any
) -> None:
    """The printed gains equal the ratios of the rows of the two plans (brute force over the
    candidates: the best of all, the best of the even ones, the best of the fast nodes')."""
    path = tmp_path / "mixed.yaml"
    path.write_text(yaml.safe_dump(mixed_doc(tokens=1e9)))
    flags = ["--tp", "8", "--pp", "1,2", "--micro-batch", "2", "--zero", "1", "--chunks", "1"]
    out_dir = tmp_path / "out"
    assert main(["plan", str(path), *flags, "-j", "1", "-q", "-o", str(out_dir)]) == 0
    printed = capsys.readouterr().out
    import csv

    rows = list(csv.DictReader((out_dir / "plan.csv").open()))
    rates = {(r["pp"], r["placement"]): float(r["throughput_samples_per_s"]) for r in rows}
    best = max(rates.values())
    even = max(v for (pp, arrangement), v in rates.items() if arrangement == "even")
    fast_doc = copy.deepcopy(mixed_doc(tokens=1e9))
    fast_doc["cluster"]["racks"] = 1
    fast_doc["cluster"]["node_groups"] = fast_doc["cluster"]["node_groups"][1:]
    alone = plan.rank(
        plan.run_candidates(plan.enumerate_candidates(fast_doc, "f", OPTIONS).candidates, 1)
    )
    fast = max(o.throughput_samples_per_s for o in alone if o.ok and o.fits)
    assert f"{(best / even - 1) * 100:+.1f}% over the best naive even split" in printed
    assert f"{(best / fast - 1) * 100:+.1f}% over the h100-sxm5-80gb nodes alone" in printed
    assert "placement" in printed and "cost" in printed
    # cost = GPU-hours x the mean price of the cluster's GPUs ((8 x 1.5 + 8 x 3) / 16)
    for r in rows:
        hours = float(r["time_to_train_s"]) / 3600
        assert float(r["cost"]) == pytest.approx(16 * hours * 2.25, rel=1e-9)
    assert (out_dir / "plan.md").read_text().count("over the best naive even split") == 1


def test_the_naive_split_is_even_whatever_the_scenario_asks() -> None:
    """A scenario that balances already still gets a truly even row to be compared with."""
    doc = mixed_doc()
    doc["data_parallel"] = {"sync": "allreduce", "balance": "speed"}
    doc["pipeline"] = {"schedule": "1f1b", "stages": "balanced"}
    found = plan.enumerate_candidates(doc, "mixed.yaml", OPTIONS)
    even = [c for c in found.candidates if c.point.arrangement == "even"]
    assert even
    for c in even:
        assert c.doc["data_parallel"]["balance"] == "even"
        if "pipeline" in c.doc:
            assert c.doc["pipeline"]["stages"] == "even"
