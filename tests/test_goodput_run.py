"""The whole job in ``clustersim run``: failures, recovery, checkpoints and a job length
wired from the scenario to the simulation (link failures played, checkpoint cost
simulated) and to the goodput model (the Monte Carlo of :mod:`clustersim.goodput`)."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import clustersim
from clustersim.cli import main
from clustersim.metrics import Summary
from clustersim.scenario import parse_scenario

from . import shared_runs
from .conftest import SCENARIOS

SHIPPED = SCENARIOS / "failures" / "resnet50_30d_goodput.yaml"
GOODPUT_KEYS = [
    "goodput",
    "expected_time_to_train_s",
    "expected_time_to_train_stderr_s",
    "ideal_time_to_train_s",
    "iterations_to_train",
    "time_lost_s",
    "time_lost_by_cause_s",
    "interruptions",
    "checkpoints",
    "checkpoint_interval_s",
    "checkpoint_every",
    "checkpoint_blocking_s",
    "checkpoint_drain_s",
    "checkpoint_contention_s",
    "restart_s",
    "best_checkpoint_interval_s",
    "best_checkpoint_every",
    "job_mtbf_s",
    "young_daly_interval_s",
    "goodput_samples",
]
DAY = 86400.0


def small(**sections: Any) -> dict[str, Any]:
    """Data parallel on 2 racks x 2 nodes x 4 GPUs, two spines; ``sections`` added."""
    doc: dict[str, Any] = {
        "name": "small",
        "cluster": {
            "racks": 2,
            "nodes_per_rack": 2,
            "spines": 2,
            "node": {
                "gpus": 4,
                "pcie": {"bandwidth": "32GB/s"},
                "nic": {"bandwidth": "100Gb/s"},
            },
        },
        "model": {"preset": "resnet50"},
        "training": {"global_batch": 256, "iterations": 2, "optimizer": "adam"},
    }
    for key, value in sections.items():
        if key == "training":
            doc["training"] = {**doc["training"], **value}
        else:
            doc[key] = value
    return doc


def run(doc: dict[str, Any]) -> dict[str, Any]:
    return clustersim.simulate(parse_scenario(copy.deepcopy(doc))).summary


@pytest.fixture
def shipped() -> SimpleNamespace:
    """The shipped scenario's summary: the session's shared run of it (the golden walk's)."""
    return SimpleNamespace(summary=shared_runs.summary(SHIPPED, shared_runs.checked(SHIPPED)))


def test_shipped_scenario_gives_every_goodput_key_after_the_strategy(shipped) -> None:
    """The keys come right after the strategy's (non_compute_fraction) and the usage keys
    (mfu, time_to_train_s, gpu_hours: ``training.duration``), before memory, and the
    summary reads back into the same types byte for byte."""
    keys = list(shipped.summary)
    start = keys.index("goodput")
    assert keys[start : start + len(GOODPUT_KEYS)] == GOODPUT_KEYS
    usage = ["mfu", "time_to_train_s", "gpu_hours"]
    assert keys[start - 4 : start] == ["non_compute_fraction", *usage]
    assert keys[start + len(GOODPUT_KEYS)] == "memory"
    assert Summary.from_dict(shipped.summary).as_dict() == shipped.summary


def test_shipped_scenario_numbers_hold_together(shipped) -> None:
    """30 days of work at the simulated iteration time; the expected time is the ideal
    plus every kind of loss; goodput their ratio; the best interval near Young/Daly's
    sqrt(2 C M) (C the simulated pause plus the drain's contention, M the job's MTBF:
    128 GPUs at 50,700 h)."""
    s = shipped.summary
    iteration = s["iteration_time_s"]
    assert s["iterations_to_train"] == math.ceil(30 * DAY / iteration)
    assert s["ideal_time_to_train_s"] == pytest.approx(s["iterations_to_train"] * iteration)
    lost = sum(s["time_lost_s"].values())
    assert s["expected_time_to_train_s"] == pytest.approx(s["ideal_time_to_train_s"] + lost)
    assert s["goodput"] == pytest.approx(s["ideal_time_to_train_s"] / s["expected_time_to_train_s"])
    assert s["job_mtbf_s"] == pytest.approx(50_700 * 3600 / 128, rel=1e-9)
    cost = s["checkpoint_blocking_s"] + s["checkpoint_contention_s"]
    assert s["checkpoint_contention_s"] > 0  # the async drain slows the iterations it overlaps
    young = math.sqrt(2 * cost * s["job_mtbf_s"])
    assert s["young_daly_interval_s"] == pytest.approx(young)
    # The node lost on day 10 falls at a fixed time: how much work it takes depends on the
    # interval's phase, so the optimum moves off Young's (held to 10% without it below).
    assert 0.67 < s["best_checkpoint_interval_s"] / young < 1.5
    assert s["checkpoint_every"] == math.ceil(1800 / iteration)
    assert s["interruptions"]["failures[1]"] == 1.0  # the node on day 10, in every history
    assert 0.98 < s["goodput"] < 1.0


def test_shipped_scenario_plays_the_spine_link_failure(shipped) -> None:
    """The link failure at 5 ms is played in the simulated iterations: flows move to the
    other spine, and timeline.csv shows the down window."""
    failures = shipped.summary["engine"]["link_failures"]
    assert failures["windows"] == 1 and failures["reroutes"] > 0 and failures["stalls"] == 0
    down = [r for r in clustersim.simulate(SHIPPED).records if r.kind == "link_down"]
    assert [(r.resource, r.start_s) for r in down] == [("spine0->rack0/tor", 5e-3)]
    assert down[0].end_s == pytest.approx(15e-3)


@pytest.mark.parametrize("hours", [1_000, 4_000, 16_000])
def test_goodput_falls_as_failures_come_more_often(hours: int) -> None:
    """A sweep of the GPUs' MTBF (16 GPUs: the job's MTBF is MTBF / 16).  The mean number
    of interruptions is Poisson's 10 d / M_job (within 4 standard errors of 2,000
    histories); each costs the 10 min restart and on average half a checkpoint interval
    of work redone, so the time lost to failures and restarts is that count times
    (R + T / 2), the first-order estimate (within 15%)."""
    samples = 2000
    doc = small(
        training={"duration": "10d"},
        failures=[{"devices": "*/*/gpu*", "mtbf": f"{hours}h"}],
        recovery={"restart_time": "10min", "samples": samples},
        checkpoint={"every": "1h"},
    )
    s = run(doc)
    job_mtbf = hours * 3600 / 16
    assert s["job_mtbf_s"] == pytest.approx(job_mtbf)
    mean = 10 * DAY / job_mtbf
    got = s["interruptions"]["failures[0] (*/*/gpu*)"]
    assert abs(got - mean) <= 4 * math.sqrt(mean / samples)
    lost = s["time_lost_s"]["failures"] + s["time_lost_s"]["restarts"]
    assert lost == pytest.approx(got * (600 + s["checkpoint_interval_s"] / 2), rel=0.15)


@pytest.mark.parametrize(
    ("bandwidth", "hours"), [("10GB/s", 384), ("1GB/s", 384), ("10GB/s", 3840)]
)
def test_best_interval_is_young_daly_on_the_simulated_pause(bandwidth: str, hours: int) -> None:
    """Random GPU failures only, sync checkpoints to storage on spine0: the pause C is the
    simulated write (16 ranks' states over one cable), M the job's MTBF (MTBF / 16), and
    the search's best interval is within 10% of Young/Daly's sqrt(2 C M), over a sweep of
    the storage bandwidth (C from 0.5 s to 5 s) and the MTBF (M from 1 to 10 days)."""
    storage = {"bandwidth": bandwidth, "attach": "spine0"}
    s = run(
        small(
            training={"duration": "30d"},
            failures=[{"devices": "*/*/gpu*", "mtbf": f"{hours}h"}],
            recovery={"samples": 1000},
            checkpoint={"every": "10min", "storage": storage},
        )
    )
    young = math.sqrt(2 * s["checkpoint_blocking_s"] * hours * 3600 / 16)
    assert s["young_daly_interval_s"] == pytest.approx(young)
    assert s["best_checkpoint_interval_s"] == pytest.approx(young, rel=0.10)


def test_checkpoint_every_iterations_or_time() -> None:
    """``every: 1000`` is 1000 iterations; ``every: TIME`` the first iteration boundary
    after TIME of work."""
    by_count = run(small(training={"duration": "1d"}, checkpoint={"every": 1000}))
    assert by_count["checkpoint_every"] == 1000
    by_time = run(small(training={"duration": "1d"}, checkpoint={"every": "10min"}))
    assert by_time["checkpoint_every"] == math.ceil(600 / by_time["iteration_time_s"])
    assert by_time["best_checkpoint_interval_s"] is None  # no failure to trade against


def test_checkpoint_pause_is_the_simulated_write() -> None:
    """Sync checkpoints to storage at 10 GB/s cabled to spine0: the 16 ranks' weights and
    Adam states (the memory block's bytes) all cross its one cable, so the pause is
    16 x (weights + optimizer states) / 10 GB/s (each rack's uplink to spine0, 12.5 GB/s,
    carries only 8 of them).  Cabled to both spines at 5 GB/s each, ECMP puts 9 of the
    16 flows on one spine: 9 x state / 5 GB/s."""
    storage = {"bandwidth": "10GB/s", "latency": "0s", "attach": "spine0"}
    s = run(small(training={"duration": "1d"}, checkpoint={"every": 1000, "storage": storage}))
    rank = s["memory"]["per_device"]["rack0/node0/gpu0"]
    state = rank["weights_bytes"] + rank["optimizer_states_bytes"]
    assert s["checkpoint_blocking_s"] == pytest.approx(16 * state / 10e9, rel=1e-6)
    both = {"bandwidth": "10GB/s", "latency": "0s"}
    s = run(small(training={"duration": "1d"}, checkpoint={"every": 1000, "storage": both}))
    assert s["checkpoint_blocking_s"] == pytest.approx(9 * state / 5e9, rel=1e-6)


def test_elastic_data_parallel_goes_on_without_the_failed_gpu() -> None:
    """``recovery.elastic`` with data parallel: GPU failures never stop the job, iterations
    slow by 16/15 while one is out (repair 1 h), so the loss is only ``degraded``."""
    failures = [{"devices": "*/*/gpu*", "mtbf": "2000h", "repair": "1h"}]
    s = run(
        small(
            training={"duration": "10d"},
            failures=failures,
            recovery={"elastic": True, "samples": 100},
        )
    )
    assert s["time_lost_s"]["failures"] == 0 and s["time_lost_s"]["restarts"] == 0
    expected_down = 10 * DAY / (2000 * 3600 / 16) * 3600  # outages x 1 h
    assert s["time_lost_s"]["degraded"] == pytest.approx(expected_down / 15, rel=0.3)


def test_elastic_is_refused_where_the_strategy_cannot(tmp_path: Path, capsys) -> None:
    """A pipeline cannot go on without a stage: exit 2 naming recovery.elastic, before any
    simulation; so is a checkpoint of a parameter server (no memory plan)."""
    pipeline = SCENARIOS / "pipeline" / "1f1b_m8.yaml"
    import yaml

    doc = yaml.safe_load(pipeline.read_text())
    doc["failures"] = [{"devices": "*gpu*", "mtbf": "1000h"}]
    doc["recovery"] = {"elastic": True}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "recovery.elastic" in err and str(path) in err
    ps = yaml.safe_load((SCENARIOS / "parameter_server" / "async.yaml").read_text())
    ps["checkpoint"] = {"every": 10}
    path.write_text(yaml.safe_dump(ps))
    assert main(["validate", str(path)]) == 2
    assert "checkpoint" in capsys.readouterr().err


def test_runs_without_the_sections_have_no_goodput_keys() -> None:
    """Nothing to predict: the summary is what it always was."""
    assert "goodput" not in run(small())


def test_same_seed_same_summary_other_seed_other_histories(tmp_path: Path) -> None:
    doc = small(
        training={"duration": "5d"},
        failures=[{"devices": "*/*/gpu*", "mtbf": "5000h"}],
        recovery={"samples": 100},
    )
    first, again = run(doc), run(doc)
    assert json.dumps(first) == json.dumps(again)
    other = run({**doc, "seed": 1})
    assert other["expected_time_to_train_s"] != first["expected_time_to_train_s"]


def test_jobs_alone_runs_see_the_same_link_failures(tmp_path: Path) -> None:
    """A multi-job run whose every spine link is down for the first 10 ms: every
    cross-rack flow stalls until then, in the shared run and in each job's alone run
    alike, so both times grow by exactly 10 ms (the alone runs play the failure too, and
    the slowdown is the sharing's); checkpoint and recovery are refused for jobs."""
    import yaml

    doc = yaml.safe_load((SCENARIOS / "jobs" / "shared_uplinks.yaml").read_text())
    doc["failures"] = [{"links": "*spine*", "at": "0s", "repair": "10ms"}]
    s = clustersim.simulate(parse_scenario(copy.deepcopy(doc))).summary
    plain = shared_runs.summary(SCENARIOS / "jobs" / "shared_uplinks.yaml")
    for name, job in s["jobs"].items():
        before = plain["jobs"][name]
        assert job["alone_time_s"] == pytest.approx(before["alone_time_s"] + 0.010, rel=1e-9)
        assert job["job_time_s"] == pytest.approx(before["job_time_s"] + 0.010, rel=1e-9)
        assert job["slowdown"] == pytest.approx(job["job_time_s"] / job["alone_time_s"])
    for key, value in (("checkpoint", {"every": 10}), ("recovery", {"restart_time": "1min"})):
        path = tmp_path / "j.yaml"
        path.write_text(yaml.safe_dump({**doc, key: value}))
        with pytest.raises(clustersim.ScenarioError, match=f"{key}: {key} is for a single"):
            clustersim.load_scenario(path)
