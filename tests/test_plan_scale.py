"""`clustersim plan` at scale (issue 43 item 5): the candidates of one plan share their
cluster's topology, and ``--verify`` checks every replica with the analytical network where
the flow-level model would be tens of millions of sends."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from clustersim.api import simulate
from clustersim.cli import main
from clustersim.scenario import parse_scenario
from clustersim.strategies.hybrid.replica_classes import FOLD_ALL_AT
from clustersim.studies import plan
from clustersim.studies.plan import cluster as plan_cluster

from .test_plan import training_doc, write_doc


@pytest.mark.parametrize(
    ("asked", "devices", "network"),
    [
        ("auto", 16, "flow"),
        ("auto", FOLD_ALL_AT - 8, "flow"),
        ("auto", FOLD_ALL_AT, "analytical"),
        ("auto", 16_384, "analytical"),
        ("flow", 16_384, "flow"),
        ("analytical", 16, "analytical"),
    ],
)
def test_verify_network_is_flow_below_the_fold_and_analytical_from_it(
    asked: str, devices: int, network: str
) -> None:
    """``auto`` verifies flow-level below 4,096 GPUs (where every replica with the
    analytical network folds to one replica per class) and with the analytical network from
    there; an explicit choice is kept at any size."""
    assert plan.VERIFY_ANALYTICAL_AT == FOLD_ALL_AT == 4096
    assert plan.verify_network(asked, devices) == network


def test_candidates_of_one_plan_share_one_topology_and_run_as_on_their_own() -> None:
    """The enumeration keeps the topology it built; every candidate run in this process takes
    it (one object), and gives the summary values a run of its document on a topology of
    its own gives, bit for bit."""
    doc = training_doc(nodes=2)
    options = plan.PlanOptions(tp=(1, 2), pp=(1, 2), micro_batch=(2,), zero=(0,))
    found = plan.enumerate_candidates(doc, "shared", options)
    assert len(found.candidates) >= 3
    kept = list(plan_cluster._TOPOLOGY.values())
    assert len(kept) == 1
    topologies = {
        id(plan_cluster.candidate_topology(parse_scenario(c.doc, "shared")))
        for c in found.candidates
    }
    assert topologies == {id(kept[0])}
    outcomes = plan.run_candidates(found.candidates, 1)
    for candidate, outcome in zip(found.candidates, outcomes, strict=True):
        alone = simulate(parse_scenario(candidate.doc, "alone")).typed_summary.strategy
        assert outcome.iteration_time_s == alone.times.iteration_time_s
        assert outcome.tflops_per_gpu == alone.flops.tflops_per_gpu


def test_another_cluster_or_checkpoint_storage_is_another_topology() -> None:
    """The kept topology answers only for the cluster (and checkpoint storage) it was built
    from: another node count, or a storage service attached, builds anew."""
    two = parse_scenario(training_doc(nodes=2), "a")
    three = parse_scenario(training_doc(nodes=3), "b")
    stored = parse_scenario(
        training_doc(nodes=2, checkpoint={"every": "1h", "storage": {"bandwidth": "10GB/s"}}),
        "c",
    )
    first = plan_cluster.candidate_topology(two)
    assert plan_cluster.candidate_topology(two) is first
    other = plan_cluster.candidate_topology(three)
    assert other is not first and len(other.devices) == len(first.devices) * 3 // 2
    with_storage = plan_cluster.candidate_topology(stored)
    assert with_storage is not first and len(with_storage.devices) > len(first.devices)


def test_cli_verify_every_replica_with_the_analytical_network(tmp_path: Path, capsys) -> None:
    """``--verify-network analytical``: the best three run again every replica with the
    analytical network; the table names what verified, plan.csv fills the verified columns
    and leaves the flow-level ones empty.  The small cluster's replicas are alike, so every
    replica gives the one-replica time (within 2%: its all-reduce may be a tree, whose ranks
    load their links unevenly)."""
    path = write_doc(tmp_path, training_doc())
    out_dir = tmp_path / "out"
    args = ["--pp", "1,2", "--micro-batch", "2", "--verify", "3", "-j", "1", "-o", str(out_dir)]
    assert main(["plan", path, *args, "--verify-network", "analytical"]) == 0
    out = capsys.readouterr().out
    assert "verifying the best 3 every replica with the analytical network\n" in out
    assert "all-replica iteration" in out and "all-replica rank" in out
    assert "flow iteration" not in out
    assert "every replica (analytical network) ranks" in out
    with open(out_dir / "plan.csv", newline="") as fh:
        table = list(csv.DictReader(fh))
    filled = [r for r in table if r["verified_rank"]]
    assert [int(r["rank"]) for r in filled] == [1, 2, 3]
    for row in filled:
        assert row["verify_network"] == "analytical"
        assert not row["flow_iteration_time_s"] and not row["flow_rank"]
        fast, every = float(row["iteration_time_s"]), float(row["verified_iteration_time_s"])
        assert every == pytest.approx(fast, rel=0.02)
    assert all(not r["verify_network"] for r in table[3:])


def test_verified_documents_run_every_replica_on_the_asked_network() -> None:
    """What ``verify`` simulates: the candidate with ``network.model`` set and every replica;
    the candidate's own document is left as it was."""
    doc = training_doc(parallelism={"simulate_replicas": "one"})
    for network in ("flow", "analytical"):
        changed = plan.every_replica_document(doc, network)
        assert changed["network"]["model"] == network
        assert changed["parallelism"]["simulate_replicas"] == "all"
    assert doc["parallelism"] == {"simulate_replicas": "one"} and "network" not in doc
    assert plan.flow_document(doc) == plan.every_replica_document(doc, "flow")


def test_cli_verify_says_auto_chose_the_analytical_network_at_scale(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under ``auto`` on a cluster at the threshold the verification line says why it is not
    flow-level and how to force it, and that the run played one replica for its identical
    twin (both thresholds lowered to the test's 16 GPUs: a node per replica, ZeRO-1's
    reduce-scatter and all-gather rings, so the fold applies)."""
    from clustersim.strategies.hybrid import replica_classes
    from clustersim.studies.plan import runs

    monkeypatch.setattr(runs, "VERIFY_ANALYTICAL_AT", 16)
    monkeypatch.setattr(replica_classes, "FOLD_ALL_AT", 16)
    path = write_doc(tmp_path, training_doc())
    args = ["--tp", "8", "--pp", "1", "--micro-batch", "2", "--zero", "1", "--verify", "1"]
    assert main(["plan", path, *args, "-j", "1"]) == 0
    out = capsys.readouterr().out
    assert (
        "verifying the best 1 every replica with the analytical network (auto at 16 GPUs: "
        "flow level every replica would be tens of millions of sends; --verify-network flow "
        "forces it)"
    ) in out
    assert (
        "every replica: 1 of these played one replica of each class of identical ones for "
        "all (1 of 2 replicas; the rest proved identical to them)"
    ) in out
    assert "+0.0%" in out


def test_the_enumeration_reports_its_progress(tmp_path: Path, capsys) -> None:
    """Checking every configuration takes a third of a second each at 16,384 GPUs: the
    enumeration calls ``progress(checked, total)`` from (0, total) to (total, total), one
    step a configuration, and ``clustersim plan --progress`` draws it as a ``checking`` bar
    (``-q`` none)."""
    seen: list[tuple[int, int]] = []
    options = plan.PlanOptions(tp=(1, 2), pp=(1, 2), micro_batch=(2,), zero=(0,))
    found = plan.enumerate_candidates(
        training_doc(), "progress", options, lambda done, total: seen.append((done, total))
    )
    total = seen[0][1]
    assert total >= len(found.candidates) > 0
    assert seen == [(done, total) for done in range(total + 1)]
    path = write_doc(tmp_path, training_doc())
    assert main(["plan", path, "--tp", "1", "--pp", "1", "--progress", "-j", "1"]) == 0
    assert "checking [" in capsys.readouterr().err
    assert main(["plan", path, "--tp", "1", "--pp", "1", "--progress", "-q", "-j", "1"]) == 0
    assert capsys.readouterr().err == ""
