"""Invariants (issue 6): each one catches a deliberately broken run, and every shipped
scenario satisfies them all."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from clustersim import invariants
from clustersim.api import prepare, simulate
from clustersim.cli import main
from clustersim.engine import Simulation
from clustersim.errors import SimulationError
from clustersim.network import Network
from clustersim.network.solver import _Solver
from clustersim.records import Record
from clustersim.scenario import parse_scenario

from . import shared_runs
from .conftest import SCENARIOS, compute, flat_topology, one_node, shipped_scenarios, transfer

GPU0, GPU1, GPU2 = (f"rack0/node0/gpu{i}" for i in range(3))


def _shipped() -> list[Path]:
    """The shipped scenarios whose shared run checks the invariants
    (:func:`tests.shared_runs.checked`: all but a few runs of many seconds, which run in
    test_golden and `clustersim reproduce` unchecked and have smaller siblings here)."""
    return [path for path in shipped_scenarios() if shared_runs.checked(path)]


def _contended() -> object:
    """Two transfers sharing the PCIe uplink of gpu0, then a compute."""
    return parse_scenario(
        one_node(
            3,
            "16GB/s",
            [
                transfer("a", GPU0, GPU1, "160MB"),
                transfer("b", GPU0, GPU2, "320MB"),
                compute("c", GPU1, after=["a", "b"], seconds="1ms"),
            ],
        )
    )


def test_the_suite_checks_every_simulate() -> None:
    assert invariants.checking_requested()


@pytest.mark.parametrize("path", _shipped(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_shipped_scenarios_satisfy_every_invariant(path: Path) -> None:
    """The run test_golden compares with its golden file, checked (a violation raises)."""
    assert shared_runs.summary(path, check=True)["makespan_s"] > 0


def test_checker_sees_rates_and_bytes_of_a_contended_run() -> None:
    scenario = _contended()
    sim = Simulation.from_scenario(scenario)
    checker = invariants.Checker(sim)
    strategy = prepare(scenario).strategy
    strategy.start(sim)
    sim.run()
    assert checker.check(strategy) == []
    assert sum(checker.monitor.expected_bytes) > 0


def _inflate_rates(monkeypatch: pytest.MonkeyPatch, factor: float) -> None:
    """A broken solver: every rate it assigns is ``factor`` times the max-min fair one."""
    fill = _Solver.fill

    def greedy(self, comp_links, comp_flows, *args, **kwargs):  # type: ignore[no-untyped-def]
        fill(self, comp_links, comp_flows, *args, **kwargs)
        for flow in comp_flows:
            flow._new *= factor

    monkeypatch.setattr(_Solver, "fill", greedy)


def test_over_assigned_rates_break_link_capacity(monkeypatch: pytest.MonkeyPatch) -> None:
    _inflate_rates(monkeypatch, 1.5)
    with pytest.raises(SimulationError, match=r"link capacity: rack0/node0/gpu0->rack0/node0/pcie"):
        simulate(_contended(), check=True)


def test_over_assigned_weighted_rates_break_link_capacity(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The check holds flows that load their links unevenly (a collective's phase as one
    weighted flow, at ``network.model: analytical``) to the same capacities: a weighted
    solver that gives 1.5x its rates is caught at a link (the shipped run passes)."""
    from clustersim.network import weighted

    path = SCENARIOS / "production" / "flagperf_llama3_8b_16_bf16.yaml"
    fill = weighted.fill_weighted_lists
    monkeypatch.setattr(
        weighted, "fill_weighted_lists", lambda *args: [1.5 * r for r in fill(*args)]
    )
    with pytest.raises(SimulationError, match=r"link capacity: .* > its bandwidth"):
        simulate(path, check=True)


def test_environment_variable_turns_checking_on_and_off(monkeypatch: pytest.MonkeyPatch) -> None:
    _inflate_rates(monkeypatch, 2.0)
    monkeypatch.setenv(invariants.CHECK_ENV, "1")
    with pytest.raises(SimulationError, match="invariant violation"):
        simulate(_contended())
    monkeypatch.setenv(invariants.CHECK_ENV, "0")
    simulate(_contended())  # unchecked: the broken rates go unnoticed


def test_flow_completing_early_breaks_bytes_delivered(monkeypatch: pytest.MonkeyPatch) -> None:
    push = Network._push

    def early(self, t, fid, version, flow):  # type: ignore[no-untyped-def]
        now = self.env.now
        push(self, now + (t - now) * 0.5, fid, version, flow)

    monkeypatch.setattr(Network, "_push", early)
    with pytest.raises(SimulationError, match=r"bytes: flow \d+ .* not delivered"):
        simulate(_contended(), check=True)


def test_flows_in_flight_at_the_end_break_bytes_delivered() -> None:
    sim = Simulation(flat_topology("switch", 2))
    checker = invariants.Checker(sim)
    sim.transfer("gpu0", "gpu1", 1e9)
    sim.run(until=1e-3)
    found = checker.check()
    assert any("1 flows started but 0 completed" in v for v in found), found


def test_link_bytes_must_match_the_flows_over_it() -> None:
    sim = Simulation(flat_topology("switch", 2))
    checker = invariants.Checker(sim)
    sim.transfer("gpu0", "gpu1", 1e6)
    sim.run()
    assert checker.check() == []
    link = next(i for i, b in enumerate(checker.monitor.expected_bytes) if b)
    checker.monitor.expected_bytes[link] += 1.0
    found = checker.check()
    assert (
        len(found) == 1 and "carried 1000000.0 bytes, the flows over it sent 1000001.0" in found[0]
    )


def test_overlapping_compute_records_break_the_compute_stream() -> None:
    records = [
        Record("gpu0", "compute", "fwd", 0.0, 2.0),
        Record("gpu0", "compute", "bwd", 1.5, 3.0),
        Record("gpu1", "compute", "fwd", 1.5, 3.0),
        Record("gpu0", "transfer", "grad", 0.0, 3.0, 1.0, 0.0, "gpu0", "gpu1"),
    ]
    found = invariants.check_records(records)
    assert found == ["compute stream: gpu0 ran 'bwd' from 1.5 s while 'fwd' ran until 2 s"]
    back_to_back = [
        Record("gpu0", "compute", "a", 0.0, 0.1),
        Record("gpu0", "compute", "b", 0.1, 0.2),
    ]
    assert invariants.check_records(back_to_back) == []


def test_bad_record_times_are_reported() -> None:
    found = invariants.check_records(
        [
            Record("gpu0", "transfer", "x", 2.0, 1.0),
            Record("gpu0", "compute", "y", float("nan"), 1.0),
        ]
    )
    assert len(found) == 2 and all(v.startswith("records: ") for v in found)


def test_operation_starting_before_its_dependency_ended_is_reported() -> None:
    ops = [
        SimpleNamespace(id="in", after=[]),
        SimpleNamespace(id="sum", after=["in"]),
        SimpleNamespace(id="out", after=["sum"]),
    ]
    strategy = SimpleNamespace(
        config=SimpleNamespace(program=ops),
        times={"in": (0.0, 1.0), "sum": (0.5, 2.0)},
    )
    assert invariants.check_dependencies(strategy) == [
        "dependencies: operation 'sum' started at 0.5 s, before 'in' ended at 1 s",
        "processes: operation 'out' never finished",
    ]


def test_run_check_flag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    scenario = SCENARIOS / "validation" / "n1_oversubscribed_uplink.yaml"
    monkeypatch.setenv(invariants.CHECK_ENV, "0")
    assert main(["run", str(scenario), "-o", str(tmp_path / "ok"), "-q", "--check"]) == 0
    fill = _Solver.fill

    def greedy(self, comp_links, comp_flows, *args, **kwargs):  # type: ignore[no-untyped-def]
        fill(self, comp_links, comp_flows, *args, **kwargs)
        for flow in comp_flows:
            flow._new *= 1.5

    monkeypatch.setattr(_Solver, "fill", greedy)
    capsys.readouterr()
    assert main(["run", str(scenario), "-o", str(tmp_path / "bad"), "-q"]) == 0  # unchecked
    assert main(["run", str(scenario), "-o", str(tmp_path / "bad"), "-q", "--check"]) == 2
    err = capsys.readouterr().err
    assert "invariant violation" in err and "link capacity:" in err
