"""Link failures: flows move to another spine, stall and resume, and the checker watches.

The cluster: two racks of ``nodes`` nodes with one GPU each, two spines, PCIe far faster
than the NIC, so a flow between racks is held by its rack's link to a spine:
``B = nodes x NIC / 2`` (oversubscription 1, split over 2 spines).  Times are
hand-derived; tolerances are relative 1e-12 (float rounding of a few operations).
"""

from __future__ import annotations

from typing import Any

import pytest

from clustersim import parse_scenario, simulate
from clustersim.api import prepare
from clustersim.engine import Simulation
from clustersim.errors import ScenarioError
from clustersim.invariants import Checker
from clustersim.metrics import Summary
from clustersim.network.failures import LINK_DOWN, STALL, LinkFailures
from clustersim.topology import build_topology

from .conftest import transfer

NIC_Bps = 100e9
SRC, DST = "rack0/node0/gpu0", "rack1/node0/gpu0"
REL = 1e-12


def cluster(nodes: int = 1, latency: str = "0s", routing: str = "ecmp") -> dict[str, Any]:
    return {
        "kind": "two_tier",
        "racks": 2,
        "nodes_per_rack": nodes,
        "spines": 2,
        "spine_routing": routing,
        "node": {
            "gpus": 1,
            "pcie": {"bandwidth": "10TB/s", "latency": "0s"},
            "nic": {"bandwidth": "100GB/s", "latency": latency},
        },
        "rack_uplink": {"oversubscription": 1, "latency": "0s"},
    }


def uplink_Bps(nodes: int = 1) -> float:
    return nodes * NIC_Bps / 2


def checked_sim(nodes: int = 1, latency: str = "0s") -> tuple[Simulation, Checker]:
    doc = {"name": "f", "cluster": cluster(nodes, latency), "workload": {"program": []}}
    sim = Simulation(build_topology(parse_scenario(doc).cluster))
    return sim, Checker(sim)


def spine_of(flow: Any) -> str:
    return next(link.dst for link in flow.route.links if link.dst.startswith("spine"))


def uplinks(sim: Simulation, rack: int) -> list[int]:
    """Both directions of every cable between rack ``rack``'s ToR and the spines."""
    return [
        link.index
        for link in sim.topology.links
        if f"rack{rack}/tor" in (link.src, link.dst) and "spine" in link.name
    ]


def finish_times(sim: Simulation, flows: list[Any]) -> list[float]:
    sim.run()
    return [flow.end_s for flow in flows]


@pytest.mark.parametrize("size", [1e9, 3.7e10])
@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.5, 0.99])
def test_flow_moves_to_the_idle_spine_and_finishes_on_time(size: float, fraction: float) -> None:
    """One spine fails while the flow crosses it: the flow moves to the other, idle spine
    with the bytes it has left, at the same rate, so it ends at size / B as if nothing
    had happened; its route now crosses the other spine."""
    sim, checker = checked_sim()
    flow = sim.transfer(SRC, DST, size)
    first = spine_of(flow)
    sim.fail_links(sim.links_of(first), fraction * size / uplink_Bps())
    (end,) = finish_times(sim, [flow])
    assert end == pytest.approx(size / uplink_Bps(), rel=REL)
    assert spine_of(flow) != first
    assert sim.link_failures().reroutes == 1 and sim.link_failures().stalls == 0
    assert checker.check() == []


@pytest.mark.parametrize("t_fail", [0.0, 0.05, 0.2, 0.35])
@pytest.mark.parametrize("ratio", [1.0, 2.0])
def test_moved_flow_shares_the_other_spine_max_min(t_fail: float, ratio: float) -> None:
    """Flows A (size S) and B (ratio x S) cross different spines at B each.  A's spine
    fails at t: both share the other uplink, B/2 each.  Equal sizes: both end at
    2S/B - t.  B twice as large: A ends at 2S/B - t, then B has S left at rate B and ends
    at 3S/B - t."""
    sim, checker = checked_sim()
    size, bw = 40e9, uplink_Bps()  # 0.8 s alone
    routes = sim.topology.routes(SRC, DST)
    a = sim.network.transfer(routes[0], size)
    b = sim.network.transfer(routes[1], ratio * size)
    sim.fail_links(sim.links_of(spine_of(a)), t_fail)
    end_a, end_b = finish_times(sim, [a, b])
    assert spine_of(a) == spine_of(b)
    assert end_a == pytest.approx(2 * size / bw - t_fail, rel=REL)
    want_b = 2 * size / bw - t_fail if ratio == 1.0 else 3 * size / bw - t_fail
    assert end_b == pytest.approx(want_b, rel=REL)
    assert checker.check() == []


@pytest.mark.parametrize("t_fail", [0.0, 0.1, 0.3])
@pytest.mark.parametrize("downtime", [0.05, 1.0, 2.5])
def test_all_uplinks_down_stall_the_flow_until_the_repair(t_fail: float, downtime: float) -> None:
    """Every uplink of the source rack down: no route is left, the flow stalls (no
    progress) and resumes at the repair: finish = size / B + downtime.  The timeline has a
    stall record on the source GPU and one link_down record per failed link."""
    sim, checker = checked_sim()
    size = 20e9  # 0.4 s alone
    flow = sim.transfer(SRC, DST, size)
    down = uplinks(sim, 0)
    sim.fail_links(down, t_fail, t_fail + downtime)
    (end,) = finish_times(sim, [flow])
    assert end == pytest.approx(size / uplink_Bps() + downtime, rel=REL)
    (stall,) = [r for r in sim.records if r.kind == STALL]
    assert (stall.resource, stall.start_s, stall.end_s) == (SRC, t_fail, t_fail + downtime)
    assert stall.bytes == pytest.approx(size - t_fail * uplink_Bps(), rel=REL)
    windows = sorted(r.resource for r in sim.records if r.kind == LINK_DOWN)
    assert windows == sorted(sim.topology.links[i].name for i in down)
    assert checker.check() == []


@pytest.mark.parametrize("repair_s, want_s", [(0.5, 0.5 + 0.4), (0.001, 0.002 + 0.4)])
def test_new_flow_over_down_links_starts_stalled_and_pays_its_latency_once(
    repair_s: float, want_s: float
) -> None:
    """A flow started while every route is down waits for the repair.  Its latency (2 x
    1 ms of NIC) runs from its start: repaired after it (0.5 s), the flow moves its bytes
    from the repair; repaired before it (1 ms), it arrives when its latency ends (2 ms)."""
    sim, checker = checked_sim(latency="1ms")
    sim.fail_links(uplinks(sim, 1), 0.0, repair_s)
    flow = sim.transfer(SRC, DST, 20e9)  # 0.4 s of bandwidth
    (end,) = finish_times(sim, [flow])
    assert end == pytest.approx(want_s, rel=REL)
    assert checker.check() == []


def test_new_flows_avoid_a_down_spine() -> None:
    """With spine0 down from t = 0 every new flow between the racks takes spine1; each,
    alone in turn, takes size / B."""
    sim, checker = checked_sim()
    sim.fail_links(sim.links_of("spine0"), 0.0)
    sim.run(until=1e-9)
    flows = []

    def sender():
        for _ in range(8):
            flow = sim.transfer(SRC, DST, 1e9)
            flows.append(flow)
            yield flow

    sim.process(sender())
    sim.run()
    assert {spine_of(f) for f in flows} == {"spine1"}
    for flow in flows:
        assert flow.end_s - flow.start_s == pytest.approx(1e9 / uplink_Bps(), rel=1e-9)
    assert sim.link_failures().reroutes >= 1
    assert checker.check() == []


def test_moved_flows_stay_on_their_new_route_after_the_repair() -> None:
    """Repair brings a link back for new flows only: a flow moved away stays where it is."""
    sim, checker = checked_sim()
    flow = sim.transfer(SRC, DST, 50e9)  # 1 s
    first = spine_of(flow)
    sim.fail_links(sim.links_of(first), 0.2, 0.4)
    later = []

    def late():
        yield sim.timeout(0.5)
        later.append(sim.network.transfer(sim.topology.routes(SRC, DST)[int(first[-1])], 1e9))

    sim.process(late())
    sim.run()
    assert spine_of(flow) != first and spine_of(later[0]) == first
    assert flow.end_s == pytest.approx(1.0, rel=REL)
    assert checker.check() == []


def test_a_failed_switch_takes_down_every_link_touching_it() -> None:
    """links_of(spine) is both directions of each rack's cable to it; links_of(NIC) its
    cables to the PCIe switch and the ToR; links_of(node) everything under the node."""
    sim, _ = checked_sim()
    names = [sim.topology.links[i].name for i in sim.links_of("spine1")]
    assert sorted(names) == sorted(
        [f"rack{r}/tor->spine1" for r in range(2)] + [f"spine1->rack{r}/tor" for r in range(2)]
    )
    nic = {sim.topology.links[i].name for i in sim.links_of("rack0/node0/nic")}
    assert nic == {
        "rack0/node0/nic->rack0/node0/pcie",
        "rack0/node0/pcie->rack0/node0/nic",
        "rack0/node0/nic->rack0/tor",
        "rack0/tor->rack0/node0/nic",
    }
    node = {sim.topology.links[i].name for i in sim.links_of("rack0/node0")}
    assert nic < node and "rack0/node0/gpu0->rack0/node0/pcie" in node
    with pytest.raises(ScenarioError, match="no link touches 'spine7'"):
        sim.links_of("spine7")


def test_a_failed_nic_stalls_the_flow_and_a_failed_switch_moves_it() -> None:
    """Failing the source NIC (0.1 .. 0.3 s) stalls a 0.4 s flow: it ends at 0.6 s; failing
    its spine instead moves it: it ends at 0.4 s."""
    for name, want in (("rack0/node0/nic", 0.6), (None, 0.4)):
        sim, checker = checked_sim()
        flow = sim.transfer(SRC, DST, 20e9)
        sim.fail_links(sim.links_of(name or spine_of(flow)), 0.1, 0.3)
        (end,) = finish_times(sim, [flow])
        assert end == pytest.approx(want, rel=REL)
        assert checker.check() == []


def test_split_routing_moves_the_part_on_the_failed_spine() -> None:
    """spine_routing split: S/2 on each spine at B.  Spine0 fails at t: both halves share
    spine1's uplink at B/2 each and end at t + 2 (S/2 - B t) / B = S/B - t."""
    doc = {"name": "f", "cluster": cluster(routing="split"), "workload": {"program": []}}
    sim = Simulation(build_topology(parse_scenario(doc).cluster))
    checker = Checker(sim)
    size, t = 40e9, 0.1
    done = sim.transfer(SRC, DST, size)
    sim.fail_links(sim.links_of("spine0"), t)
    sim.run()
    assert done.processed and sim.now == pytest.approx(size / uplink_Bps() - t, rel=REL)
    assert checker.check() == []


def scenario(windows: list[dict[str, Any]], size: str = "20GB") -> Any:
    """A program of one transfer between the racks, with link stragglers ``windows`` (times
    in seconds)."""
    windows = [
        {k: f"{v!r}s" if k in ("start", "end") else v for k, v in w.items()} for w in windows
    ]
    doc = {
        "name": "factor-zero",
        "cluster": cluster(),
        "workload": {"program": [transfer("t", SRC, DST, size)]},
        "stragglers": windows,
    }
    return parse_scenario(doc)


@pytest.mark.parametrize("start, end", [(0.0, 0.25), (0.1, 0.3), (0.39, 1.39)])
def test_factor_zero_takes_the_links_down_through_a_scenario(start: float, end: float) -> None:
    """``bandwidth_factor: 0`` on every uplink of rack 0 for [start, end): the 0.4 s
    transfer stalls for the window and ends at 0.4 + (end - start); the records show it."""
    window = {"links": "rack0/tor->spine*", "bandwidth_factor": 0, "start": start, "end": end}
    result = simulate(scenario([window]), check=True)
    assert result.makespan_s == pytest.approx(0.4 + end - start, rel=REL)
    kinds = [r.kind for r in result.records]
    assert kinds.count(STALL) == 1 and kinds.count(LINK_DOWN) == 2
    counters = result.summary["engine"]["link_failures"]
    assert counters == {"windows": 2, "reroutes": 0, "stalls": 1}
    assert Summary.from_dict(result.summary).engine.link_failures.stalls == 1


def test_a_run_without_failures_has_no_failure_counters() -> None:
    """summary.json of a run where no link went down has no ``engine.link_failures`` key."""
    assert "link_failures" not in simulate(scenario([]), check=True).summary["engine"]


def test_factor_zero_on_one_spine_moves_the_flow_and_keeps_the_time() -> None:
    """One spine down for the whole run: the transfer takes the other, 0.4 s as ever."""
    window = {"links": "*spine0*", "bandwidth_factor": 0}
    result = simulate(scenario([window]), check=True)
    assert result.makespan_s == pytest.approx(0.4, rel=REL)


def test_a_degradation_ending_during_a_down_window_applies_at_the_repair() -> None:
    """Uplinks at 0.5x over [0, 0.1) and down over [0.05, 0.2): 0.05 s at B/2 = 25 GB/s
    (1.25 GB), the stall (the degradation ends inside it), then full speed B from 0.2 s for
    the 18.75 GB left: 0.2 + 0.375 = 0.575 s."""
    windows = [
        {"links": "rack0/tor->spine*", "bandwidth_factor": 0.5, "start": 0, "end": 0.1},
        {"links": "rack0/tor->spine*", "bandwidth_factor": 0, "start": 0.05, "end": 0.2},
    ]
    result = simulate(scenario(windows), check=True)
    assert result.makespan_s == pytest.approx(0.575, rel=REL)


def test_a_failure_after_the_work_does_not_lengthen_the_run() -> None:
    """A window that opens after the last transfer ended books nothing and the makespan
    stays the transfer's."""
    window = {"links": "rack0/tor->spine*", "bandwidth_factor": 0, "start": 5, "end": 9}
    result = simulate(scenario([window]), check=True)
    assert result.makespan_s == pytest.approx(0.4, rel=REL)
    assert all(r.kind not in (STALL, LINK_DOWN) for r in result.records)


def test_factor_zero_is_deterministic() -> None:
    """The same scenario gives the same records, bit for bit."""
    windows = [{"links": "*spine1*", "bandwidth_factor": 0, "start": 0.1, "end": 0.2}]
    doc = scenario(windows, "7GB")
    runs = [simulate(doc, check=True).records for _ in range(2)]
    assert runs[0] == runs[1]


def test_checker_catches_a_flow_left_on_a_dead_link(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the evacuation broken (flows stay on the link that went down), the checker
    names the down link; with the bytes of a stall lost, it names the flow."""
    monkeypatch.setattr(LinkFailures, "_evacuate", lambda self, newly, now: None)
    sim, checker = checked_sim()
    flow = sim.transfer(SRC, DST, 20e9)
    sim.fail_links(sim.links_of(spine_of(flow)), 0.1, 0.2)
    sim.run()
    assert any(v.startswith("link down: ") for v in checker.check())


def test_checker_catches_bytes_lost_across_a_stall(monkeypatch: pytest.MonkeyPatch) -> None:
    """A resume that restarts the flow from scratch (its bytes moved lost) is a violation."""
    enter = LinkFailures._enter

    def restart(self: LinkFailures, flow: Any, now: float) -> None:
        flow._remaining = flow.size_bytes
        enter(self, flow, now)

    monkeypatch.setattr(LinkFailures, "_enter", restart)
    sim, checker = checked_sim()
    sim.transfer(SRC, DST, 20e9)
    sim.fail_links(uplinks(sim, 0), 0.1, 0.2)
    sim.run()
    assert any("went on at t = 0.2 s" in v for v in checker.check())


def test_a_flow_never_repaired_is_named() -> None:
    """No repair: the flow stays stalled; the checker names it."""
    sim, checker = checked_sim()
    sim.transfer(SRC, DST, 20e9)
    sim.fail_links(uplinks(sim, 0), 0.1)
    sim.run()
    assert any("never resumed" in v for v in checker.check())


def test_bad_failure_times_are_refused() -> None:
    from clustersim.errors import SimulationError

    sim, _ = checked_sim()
    with pytest.raises(SimulationError, match="not a finite time after the failure"):
        sim.fail_links([0], 1.0, 0.5)
    with pytest.raises(SimulationError, match="not a finite time >= now"):
        sim.fail_links([0], float("inf"))


def _one_replica_doc(replicas: str, failures: list[dict[str, Any]]) -> dict[str, Any]:
    """GPT-3 1.3B, tp 8 x dp 4 on two racks of two DGX A100 nodes."""
    return {
        "name": "replicas-and-failures",
        "cluster": {
            "kind": "two_tier",
            "racks": 2,
            "nodes_per_rack": 2,
            "node": {"preset": "dgx-a100"},
        },
        "model": {"preset": "gpt3-1.3b"},
        "training": {"global_batch": 32, "iterations": 1, "precision": "bf16", "optimizer": "adam"},
        "parallelism": {"tp": 8, "dp": 4, "simulate_replicas": replicas},
        "failures": failures,
    }


@pytest.mark.parametrize(
    "failure",
    [
        {"links": "rack1/tor->spine0", "at": "0.1s"},
        {"links": "rack1/tor->spine*", "at": "1ms", "repair": "1ms"},
        {"devices": "rack1/tor", "at": "10ms", "repair": "5ms"},
    ],
)
def test_one_replica_for_all_refuses_links_that_go_down(failure: dict[str, Any]) -> None:
    """Replica 0 does not cross the links the others do, and the collectives it plays for
    all run analytically, without another route: with links, NICs or switches failing in the
    run, simulate_replicas: one is refused, naming the key and the failure (issue 43: never a
    wrong answer, nor a deadlock, in silence); every replica played runs."""
    with pytest.raises(ScenarioError) as info:
        prepare(parse_scenario(_one_replica_doc("one", [failure]), "f.yaml"))
    text = str(info.value)
    assert "f.yaml: parallelism.simulate_replicas" in text and "failures[0]" in text
    assert simulate(parse_scenario(_one_replica_doc("all", [failure]))).summary["makespan_s"] > 0


def test_one_replica_for_all_keeps_failures_the_simulation_does_not_play() -> None:
    """A worker's GPU that fails stops the job (the goodput model's, not the run's): one
    replica may still stand for all."""
    failure = {"devices": "rack0/node0/gpu0", "at": "1h", "repair": "1h"}
    assert prepare(parse_scenario(_one_replica_doc("one", [failure]))).strategy.simulated == 1


def test_a_job_of_one_replica_for_all_refuses_links_that_go_down() -> None:
    """The same check in a jobs scenario, its key path under the job's."""
    doc = _one_replica_doc("one", [{"links": "rack1/tor->spine0", "at": "1ms", "repair": "1ms"}])
    job = {
        "name": "gpt",
        "devices": "*/*/gpu*",
        "model": doc.pop("model"),
        "training": doc.pop("training"),
        "parallelism": doc.pop("parallelism"),
    }
    doc["jobs"] = [job]
    with pytest.raises(ScenarioError) as info:
        prepare(parse_scenario(doc, "jobs.yaml"))
    assert "jobs[0].parallelism.simulate_replicas" in str(info.value)
