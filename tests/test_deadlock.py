"""Deadlocks end with a message naming what waits on what; misuse fails at load time
(issue 6)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ConfigDict

from clustersim.api import prepare
from clustersim.cli import main
from clustersim.engine import Simulation
from clustersim.errors import ScenarioError, SimulationError
from clustersim.invariants import Watch
from clustersim.scenario import parse_scenario
from clustersim.strategies import base

from .conftest import compute, flat_topology, one_node, transfer


def _islands(program: list[dict[str, Any]], bandwidth: str = "10GB/s") -> dict[str, Any]:
    """A custom cluster of two islands, a -> b (``bandwidth``) and c <-> d."""
    return {
        "name": "islands",
        "cluster": {
            "kind": "custom",
            "devices": [{"name": n} for n in "abcd"],
            "links": [
                {"src": "a", "dst": "b", "bandwidth": bandwidth, "duplex": False},
                {"src": "c", "dst": "d", "bandwidth": "10GB/s"},
            ],
        },
        "workload": {"program": program},
    }


def _write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


# -- deadlocks ----------------------------------------------------------------


def _run_with_link_down(doc: dict[str, Any], link: int) -> None:
    """Simulate ``doc`` with link ``link`` down (0 B/s) from the start, as a link failure
    does (a scenario refuses a bandwidth of 0; the network takes one)."""
    prepared = prepare(parse_scenario(doc))
    sim = Simulation.from_scenario(prepared.scenario, prepared.topology)
    watch = Watch(sim)
    sim.network.set_bandwidth(link, 0.0)
    prepared.strategy.start(sim)
    sim.run()
    watch.raise_if_deadlocked(prepared.strategy)


def test_transfer_over_a_dead_link_is_a_deadlock_naming_the_link() -> None:
    doc = _islands([transfer("t", "a", "b", "1MB"), compute("u", "b", after=["t"], seconds="1ms")])
    with pytest.raises(SimulationError) as info:
        _run_with_link_down(doc, 0)
    text = str(info.value)
    assert text.startswith("deadlock: nothing left to simulate at t = 0 s but:")
    assert "op 't' on a, b waits for transfer a -> b (1 MB of 1 MB left" in text
    assert "a->b has bandwidth 0" in text
    assert "op 'u' on b waits for all of: op 't'" in text


def test_deadlock_through_the_cli_exits_2(tmp_path: Path, stuck_strategy: str, capsys) -> None:
    doc = {
        "name": "stuck",
        "cluster": {"kind": "switch", "devices": 2, "link": {"bandwidth": "10GB/s"}},
        "workload": {stuck_strategy: 2},
    }
    path = _write(tmp_path, doc)
    assert main(["run", str(path), "-o", str(tmp_path / "out"), "-q"]) == 2
    err = capsys.readouterr().err
    assert "simulation error: deadlock" in err and "gpu0 (_ranks.<locals>.rank)" in err
    assert not (tmp_path / "out").exists()


def test_a_link_of_0_bytes_per_second_is_refused_at_load(tmp_path: Path, capsys) -> None:
    """A dead link is not written as bandwidth 0 (it would only deadlock): refused, exit 2."""
    path = _write(tmp_path, _islands([transfer("t", "a", "b", "1MB")], bandwidth="0"))
    assert main(["run", str(path), "-o", str(tmp_path / "out"), "-q"]) == 2
    err = capsys.readouterr().err
    assert f"{path}: cluster.links[0].bandwidth: must be greater than 0, got '0'" in err
    assert not (tmp_path / "out").exists()


def _ranks(sim: Simulation, n: int, skip: int) -> None:
    """``n`` ranks compute then meet at barrier 'step'; rank ``skip`` never gets there."""

    def rank(device: str, i: int) -> Iterator[Any]:
        yield sim.compute(device, seconds=0.001 * (i + 1))
        if i != skip:
            yield sim.barrier("step", n).wait()

    for i in range(n):
        sim.process(rank(f"gpu{i}", i))


def test_barrier_one_rank_never_reaches() -> None:
    sim = Simulation(flat_topology("switch", 4))
    watch = Watch(sim)
    _ranks(sim, 4, skip=2)
    sim.run()
    text = watch.deadlock()
    assert text is not None and "t = 0.004 s" in text
    for i in (0, 1, 3):
        assert (
            f"gpu{i} (_ranks.<locals>.rank) waits for barrier 'step' (3 of 4 parties arrived)"
            in text
        )
    assert "gpu2" not in text
    with pytest.raises(SimulationError, match="deadlock"):
        watch.raise_if_deadlocked()


def test_receive_nobody_sends() -> None:
    sim = Simulation(flat_topology("switch", 2))
    watch = Watch(sim)
    mailbox = sim.env.event()  # the matching send is never written

    def receiver(device: str) -> Iterator[Any]:
        yield mailbox

    def sender(src: str, dst: str) -> Iterator[Any]:
        yield sim.transfer(src, dst, 1e6)

    sim.process(receiver("gpu1"))
    sim.process(sender("gpu0", "gpu1"))
    sim.run()
    text = watch.deadlock()
    assert text is not None
    assert (
        "gpu1 (test_receive_nobody_sends.<locals>.receiver) waits for an event nothing triggers"
        in text
    )
    assert "gpu0" not in text  # the sender finished


def test_finished_run_is_no_deadlock() -> None:
    sim = Simulation(flat_topology("switch", 4))
    watch = Watch(sim)
    _ranks(sim, 4, skip=-1)
    sim.run()
    assert watch.deadlock() is None
    assert watch.processes == {}  # finished processes are forgotten


class _StuckConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    stuck_barrier: int


@pytest.fixture
def stuck_strategy() -> Iterator[str]:
    """A workload strategy whose last rank never reaches the barrier (unregistered after)."""

    class StuckBarrier(base.Strategy):
        name = "stuck_barrier"
        config_model = _StuckConfig

        def start(self, sim: Simulation) -> None:
            _ranks(sim, self.config.stuck_barrier, skip=self.config.stuck_barrier - 1)

    try:
        yield StuckBarrier.name
    finally:
        base.Strategy.registry.remove(StuckBarrier.name)


def test_strategy_deadlock_through_the_cli(tmp_path: Path, stuck_strategy: str, capsys) -> None:
    doc = {
        "name": "stuck",
        "cluster": {"kind": "switch", "devices": 3, "link": {"bandwidth": "10GB/s"}},
        "workload": {stuck_strategy: 3},
    }
    path = _write(tmp_path, doc)
    assert main(["run", str(path), "-o", str(tmp_path / "out"), "-q"]) == 2
    err = capsys.readouterr().err
    assert "deadlock: nothing left to simulate at t = 0.003 s" in err
    assert "gpu0 (_ranks.<locals>.rank) waits for barrier 'step' (2 of 3 parties arrived)" in err


# -- misuse found at load time ---------------------------------------------------------


def _load_error(doc: dict[str, Any]) -> str:
    with pytest.raises(ScenarioError) as info:
        prepare(parse_scenario(doc))
    return str(info.value)


def test_cycle_in_after_is_a_load_error() -> None:
    doc = one_node(
        2,
        "16GB/s",
        [
            compute("x", "rack0/node0/gpu0", after=["z"], seconds="1ms"),
            compute("y", "rack0/node0/gpu0", after=["x"], seconds="1ms"),
            compute("z", "rack0/node0/gpu1", after=["y"], seconds="1ms"),
        ],
    )
    text = _load_error(doc)
    assert "workload.program" in text and "dependency cycle: x -> z -> y -> x" in text


def test_unknown_device_is_a_load_error() -> None:
    doc = one_node(2, "16GB/s", [transfer("t", "rack0/node0/gpu0", "rack0/node0/gpu7", "1MB")])
    text = _load_error(doc)
    assert "workload.program[0].transfer.dst" in text and "rack0/node0/gpu7" in text


def test_route_between_unconnected_devices_is_a_load_error(tmp_path: Path, capsys) -> None:
    doc = _islands([transfer("t", "c", "d", "1MB"), transfer("u", "a", "c", "1MB", after=["t"])])
    text = _load_error(doc)
    assert text == (
        "workload.program[1].transfer: no route from a to c: the cluster's links do not "
        "connect them (allowed: devices joined by a path of links)"
    )
    path = _write(tmp_path, doc)
    assert main(["validate", str(path)]) == 2
    assert "workload.program[1].transfer: no route from a to c" in capsys.readouterr().err


def test_one_way_link_has_no_route_back() -> None:
    text = _load_error(_islands([transfer("t", "b", "a", "1MB")]))
    assert "workload.program[0].transfer: no route from b to a" in text


def test_collective_over_one_device_is_a_load_error() -> None:
    doc = {
        "name": "one",
        "cluster": {"kind": "switch", "devices": 4, "link": {"bandwidth": "10GB/s"}},
        "workload": {"collective": "allreduce", "bytes": "1MB", "group": "gpu0"},
    }
    text = _load_error(doc)
    assert "workload.group: the group has 1 device (gpu0); a collective needs at least 2" in text
