"""Several jobs on one cluster (``jobs:``): placement, start times, per-job summaries
and the slowdown of each job against a run of it alone."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

import clustersim
from clustersim.metrics import Summary, canonical_json
from clustersim.scenario import parse_scenario
from clustersim.strategies.jobs.summary import JobsSummary

from .conftest import SCENARIOS
from .test_number_checks import _cli

JOBS = SCENARIOS / "jobs"
SHARED = JOBS / "shared_uplinks.yaml"
PLACEMENT = JOBS / "placement_spread.yaml"


def _doc(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def _run(doc: dict[str, Any]) -> clustersim.Result:
    return clustersim.simulate(parse_scenario(copy.deepcopy(doc)))


def test_shared_uplink_slowdowns_match_the_hand_derivation() -> None:
    """The header of shared_uplinks.yaml: a 120 ms / 80 ms = 1.5, b 80 ms / 40 ms = 2."""
    jobs = clustersim.simulate(SHARED).summary["jobs"]
    expected = {"a": (0.12, 0.08, 1.5), "b": (0.08, 0.04, 2.0)}
    for name, (shared, alone, slowdown) in expected.items():
        assert jobs[name]["job_time_s"] == pytest.approx(shared, rel=1e-9)
        assert jobs[name]["alone_time_s"] == pytest.approx(alone, rel=1e-9)
        assert jobs[name]["slowdown"] == pytest.approx(slowdown, rel=1e-9)


def test_a_job_alone_summarizes_as_the_same_single_job_scenario() -> None:
    """A one-job scenario's job part is byte for byte the part of the single-job scenario
    whose workload is the job's (its group the job's devices), and its slowdown is 1."""
    doc = _doc(SHARED)
    doc["jobs"] = doc["jobs"][:1]
    job = _run(doc).typed_summary.strategy
    assert isinstance(job, JobsSummary)
    single = copy.deepcopy(doc)
    del single["jobs"]
    single["workload"] = dict(doc["jobs"][0]["workload"], group="rack*/node0/gpu0")
    alone = _run(single).typed_summary.strategy
    assert canonical_json(job.jobs["a"].part) == canonical_json(alone)
    assert job.jobs["a"].slowdown == 1.0


def test_a_later_start_shifts_the_job_without_changing_its_own_times() -> None:
    """Job b started after job a ends runs as if alone: its part's times are measured from
    its start, its records in the timeline start at its start."""
    doc = _doc(SHARED)
    doc["jobs"][1]["start"] = "200ms"
    result = _run(doc)
    jobs = result.summary["jobs"]
    assert jobs["b"]["start_s"] == 0.2
    assert jobs["b"]["job_time_s"] == pytest.approx(0.04, rel=1e-9)
    assert jobs["b"]["slowdown"] == pytest.approx(1.0, rel=1e-9)
    assert jobs["a"]["slowdown"] == 1.0
    assert result.makespan_s == pytest.approx(0.24, rel=1e-9)
    b_starts = [r.start_s for r in result.records if r.resource.endswith("node1/gpu0")]
    assert min(b_starts) == pytest.approx(0.2, rel=1e-12)


def test_a_start_during_the_other_job_overlaps_part_of_it() -> None:
    """b starting at 60 ms: a has sent 0.5 + 0.25 GB alone, its last 0.25 GB at 6.25 GB/s
    ends at 100 ms (100 / 80 = 1.25); b's first step at 6.25 GB/s ends at 100 ms, its
    second alone at 120 ms (60 / 40 = 1.5)."""
    doc = _doc(SHARED)
    doc["jobs"][1]["start"] = "60ms"
    jobs = _run(doc).summary["jobs"]
    assert jobs["a"]["slowdown"] == pytest.approx(1.25, rel=1e-9)
    assert jobs["b"]["slowdown"] == pytest.approx(1.5, rel=1e-9)


@pytest.mark.parametrize(
    "policy, devices",
    [
        ("packed", ["rack0/node0/gpu0", "rack0/node0/gpu1", "rack0/node0/gpu2"]),
        ("spread", ["rack0/node0/gpu0", "rack0/node0/gpu1", "rack1/node0/gpu0"]),
    ],
)
def test_placement_policies_choose_their_devices(policy: str, devices: list[str]) -> None:
    """packed fills build order; spread takes one GPU per rack in turn."""
    doc = _doc(PLACEMENT)
    doc["jobs"] = [dict(doc["jobs"][0], placement=policy, gpus=3)]
    assert _run(doc).summary["jobs"]["a"]["job_devices"] == devices


def test_random_placement_follows_the_seed() -> None:
    """random draws the same devices for the same seed, others for another seed."""
    doc = _doc(PLACEMENT)
    doc["jobs"] = [dict(doc["jobs"][0], placement="random", gpus=4)]
    drawn = []
    for seed in (0, 0, 1):
        doc["seed"] = seed
        drawn.append(_run(doc).summary["jobs"]["a"]["job_devices"])
    assert drawn[0] == drawn[1] != drawn[2]
    assert len(set(drawn[2])) == 4


def test_placement_changes_the_slowdown() -> None:
    """placement_spread.yaml: spread puts both rings across the 4:1 uplinks, each slowed
    about 2x; packed gives each job a rack of its own and no slowdown."""
    doc = _doc(PLACEMENT)
    spread = _run(doc).typed_summary.strategy
    doc["jobs"][0]["placement"] = "packed"
    packed = _run(doc).typed_summary.strategy
    assert isinstance(spread, JobsSummary) and isinstance(packed, JobsSummary)
    assert spread.max_slowdown > 1.9
    assert packed.max_slowdown == 1.0
    assert spread.jobs["a"].job_devices != packed.jobs["a"].job_devices


def test_training_beside_ps_reports_each_family() -> None:
    """Each job keeps its own family's summary part (data_parallel, parameter_server)."""
    summary = clustersim.simulate(JOBS / "training_beside_ps.yaml").typed_summary
    jobs = summary.strategy.jobs
    assert jobs["allreduce"].workload == "data_parallel"
    assert jobs["ps"].workload == "parameter_server"
    assert jobs["allreduce"].part.iteration_time_s > 0
    assert all(job.slowdown >= 1.0 for job in jobs.values())


def test_summary_reads_back_and_outputs_are_deterministic(tmp_path: Path) -> None:
    """Two runs write the same files; summary.json reads back into the same typed parts;
    the trace has one process per job."""
    texts = []
    for i in range(2):
        out = tmp_path / f"run{i}"
        clustersim.simulate(SHARED).write(out)
        texts.append({p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.suffix != ".png"})
    assert texts[0] == texts[1]
    assert "gantt.svg" in texts[0]
    data = yaml.safe_load(texts[0]["summary.json"])
    typed = Summary.from_dict(data)
    assert canonical_json(typed) == texts[0]["summary.json"].decode()
    trace = texts[0]["trace.json"].decode()
    assert '"args":{"name":"job a"}' in trace and '"args":{"name":"job b"}' in trace


def _bad(tmp_path: Path, change: Any) -> Path:
    doc = _doc(SHARED)
    change(doc)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda d: d["jobs"][1].update(devices="rack0/*"),
            "jobs[1].devices: device rack0/node0/gpu0 is also matched by jobs[0] (a)",
        ),
        (lambda d: d["jobs"][1].update(devices="rack9/*"), "jobs[1].devices: no device matches"),
        (
            lambda d: d.update(workload={"collective": "allreduce", "bytes": "1MB"}),
            "workload: a scenario with jobs holds its workloads in its jobs",
        ),
        (
            lambda d: d["jobs"][0].update(placement="compact", gpus=2, devices=None),
            "jobs[0].placement: ",
        ),
        (
            lambda d: d["jobs"][0].update(placement="packed"),
            "jobs[0].devices: give devices or placement, not both",
        ),
        (lambda d: d["jobs"][1].update(name="a"), "jobs[1].name: job name 'a' is already"),
        (
            lambda d: d["jobs"][1].update(devices=None, placement="packed", gpus=9),
            "jobs[1].gpus: 9 GPUs asked, 2 free",
        ),
        (
            lambda d: d["jobs"][0]["workload"].update(algorithm="nope"),
            "jobs[0].workload.algorithm",
        ),
        (lambda d: d["jobs"][0].update(start="-1s"), "jobs[0].start"),
    ],
)
def test_bad_jobs_exit_2_with_the_key_path(
    change: Any, message: str, tmp_path: Path, capsys
) -> None:
    """Overlapping devices, a glob matching nothing, jobs beside a workload, an unknown
    placement, a duplicate name, too many GPUs, a bad job section: exit 2, key path."""
    path = _bad(tmp_path, lambda d: (change(d), _drop_none(d)))
    code, err = _cli(["validate", str(path)], capsys)
    assert code == 2, err
    assert message in err
    assert "Traceback" not in err


def _drop_none(doc: dict[str, Any]) -> None:
    for job in doc["jobs"]:
        for key in [k for k, v in job.items() if v is None]:
            del job[key]
