"""``simulate_replicas: one`` with replicas that differ: one replica of each class of alike
replicas is played (clustersim/strategies/hybrid/replica_classes.py).

The reference is every replica played with the data-parallel collectives in the same
congestion-aware analytical model (``network.model: analytical``): then one replica per
class must give the very same iteration times and bubbles (relative 1e-12: the same
operations in the same order), because alike replicas reach every collective at the same
instant.  Swept over data-parallel sizes, where the slow devices sit, and the kinds of
straggler; what cannot be classed (degraded links, expert parallelism across classes) is
refused naming the key.
"""

from __future__ import annotations

from typing import Any

import pytest

from clustersim import parse_scenario, simulate
from clustersim.api import prepare
from clustersim.errors import ScenarioError

KEYS = ("iteration_times_s", "bubble_fraction", "idle_fraction", "non_compute_fraction")


def job(dp: int, stragglers: list[dict[str, Any]], iterations: int = 1) -> dict[str, Any]:
    """tp 2 x pp 2 x dp of a small transformer on DGX A100 nodes (two replicas a node),
    one replica standing for its class, dp collectives priced analytically."""
    nodes = dp // 2
    return {
        "name": "classes",
        "cluster": {
            "kind": "two_tier",
            "racks": max(nodes // 2, 1),
            "nodes_per_rack": min(nodes, 2),
            "node": {"preset": "dgx-a100"},
        },
        "network": {"model": "analytical"},
        "model": {"preset": "gpt3-1.3b"},
        "training": {
            "global_batch": 8 * dp,
            "micro_batch": 2,
            "iterations": iterations,
            "precision": "bf16",
            "optimizer": "adam",
        },
        "parallelism": {"tp": 2, "pp": 2, "dp": dp, "simulate_replicas": "one"},
        "pipeline": {"schedule": "1f1b"},
        "stragglers": stragglers,
    }


def one_and_every(doc: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """The summaries with one replica per class and with every replica, and the strategy."""
    strategy = prepare(parse_scenario(doc)).strategy
    one = simulate(parse_scenario(doc)).summary
    doc["parallelism"]["simulate_replicas"] = "all"
    every = simulate(parse_scenario(doc)).summary
    return one, every, strategy


def assert_same(one: dict[str, Any], every: dict[str, Any]) -> None:
    for key in KEYS:
        assert one[key] == pytest.approx(every[key], rel=1e-12, abs=1e-15), key


@pytest.mark.parametrize(
    ("dp", "node"), [(4, "rack0/node1"), (8, "rack1/node0"), (16, "rack3/node1")]
)
@pytest.mark.parametrize("slowdown", [1.3, 2.0])
def test_one_slow_node_is_a_class_of_its_own(dp: int, node: str, slowdown: float) -> None:
    """A node 1.3x (2x) slower holds two replicas (tp 2 x pp 2 on its 8 GPUs): they are one
    class, the other replicas another; two replicas are played for dp, and every key is
    every replica's."""
    one, every, strategy = one_and_every(
        job(dp, [{"devices": f"{node}/gpu*", "slowdown": slowdown}])
    )
    assert strategy.simulated == 2
    assert [c["replicas"] for c in one["replica_classes"]] == [dp - 2, 2]
    assert one["workers_simulated"] == 8 and one["workers_total"] == 4 * dp
    assert_same(one, every)
    alike = simulate(parse_scenario(job(dp, []))).summary
    assert one["iteration_time_s"] > alike["iteration_time_s"]  # the slow replicas set the pace


@pytest.mark.parametrize("fraction", [0.05, 0.3])
def test_random_stragglers_play_the_replicas_they_touch(fraction: float) -> None:
    """Random slowdowns (lognormal, drawn per device and iteration) over two iterations: the
    replicas none of whose devices straggled in either iteration are one class; each
    touched replica is its own (its draws differ), and the result is every replica's."""
    random = {"random": {"fraction": fraction, "slowdown": {"dist": "lognormal", "sigma": 0.3}}}
    one, every, strategy = one_and_every(job(16, [random], iterations=2))
    classes = strategy.replica_classes
    assert 1 < len(classes) <= 16
    assert sum(len(members) for members in classes) == 16
    assert_same(one, every)


def test_alike_replicas_stay_one_class_and_the_summary_as_before() -> None:
    """No straggler: replica 0 stands for all, and the summary has no replica_classes."""
    strategy = prepare(parse_scenario(job(8, []))).strategy
    assert strategy.played == [0] and strategy.replica_classes == [list(range(8))]
    assert "replica_classes" not in simulate(parse_scenario(job(8, []))).summary


@pytest.mark.parametrize("factor", [0.5, 0.25])
def test_a_tor_uplink_at_a_fraction_of_its_bandwidth(factor: float) -> None:
    """A rack's uplinks degraded: the data-parallel collectives cross them for every
    replica alike (they run over every replica's links), and no replica's own flows do
    (tp and pp stay in their nodes): one class, and every replica's result."""
    doc = job(16, [{"links": "rack1/tor->*", "bandwidth_factor": factor}])
    one, every, strategy = one_and_every(doc)
    assert strategy.played == [0]
    assert_same(one, every)
    plain = simulate(parse_scenario(job(16, []))).summary
    assert one["iteration_time_s"] > plain["iteration_time_s"]


def test_a_replica_whose_own_flows_cross_a_degraded_link_is_its_own_class() -> None:
    """pp 2 with a stage on each of two racks (one GPU per node): every replica's pipeline
    sends cross the racks' uplinks; degrading rack 0's uplink to spine 0 makes each replica
    whose sends can take it (ECMP over the two spines) a class of its own, and the result is
    every replica's."""
    doc = job(4, [{"links": "rack0/tor->spine0", "bandwidth_factor": 0.5}])
    doc["cluster"] = {
        "kind": "two_tier",
        "racks": 2,
        "nodes_per_rack": 4,
        "spines": 2,
        "node": {"preset": "dgx-a100", "gpus": 2, "nics": 2},
    }
    doc["parallelism"].update(tp=2, pp=2, dp=4, order=["tp", "dp", "pp"])
    one, every, strategy = one_and_every(doc)
    assert strategy.simulated == 4  # every replica's sends may take rack 0's uplink
    assert [c["replicas"] for c in one["replica_classes"]] == [1, 1, 1, 1]
    assert_same(one, every)


def test_expert_parallelism_across_classes_is_refused() -> None:
    """Mixtral with ep 8 across the replicas: alike replicas still stand for all, but a slow
    GPU makes a second class, whose all-to-alls the replicas not played would not join."""
    import yaml

    from .conftest import SCENARIOS

    doc = yaml.safe_load((SCENARIOS / "moe" / "mixtral_8x7b_ep8.yaml").read_text())
    doc["parallelism"]["simulate_replicas"] = "one"
    assert prepare(parse_scenario(doc)).strategy.played == [0]
    doc["stragglers"] = [{"devices": "rack0/node0/gpu0", "slowdown": 1.5}]
    with pytest.raises(ScenarioError) as info:
        prepare(parse_scenario(doc))
    problem = info.value.problems[0]
    assert problem.path == "parallelism.simulate_replicas"
    assert "expert parallelism (ep 8) spans replicas" in problem.message


def test_the_chart_rows_and_the_run_line_say_what_each_played_replica_stands_for(
    capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    """A played worker stands for its class's replicas in the Gantt chart (not dp / played),
    and ``clustersim run`` names the classes."""
    import yaml

    from clustersim.cli import main
    from clustersim.outputs.fold import shown_devices

    doc = job(16, [{"devices": "rack3/node1/gpu*", "slowdown": 1.3}])
    summary = simulate(parse_scenario(doc)).summary
    shown, weights = shown_devices(summary)
    assert shown == set(summary["workers"])
    assert sorted(weights.values()) == [2] * 4 + [14] * 4
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert main(["run", str(path), "-o", str(tmp_path / "out")]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("workers"))
    assert "8 simulated of 64 (one replica of each of 2 classes: replica 0 for 14, replica" in line
