"""Rings played whole (clustersim.collectives.ring_replay), held to the send-by-send play.

Every case is played twice, with ``ring_replay.REPLAY`` on and off, and must leave the very
same state: the simulated end, every link's bytes, busy seconds and peak, the network's
counters and every record (as a sorted list: a ring played whole books its transfers in the
order they ended, which ties may order otherwise; summaries read records in any order).
Swept over ring sizes, node shapes, oversubscription, bytes and operations, and over the
three ways the rest of a simulation can meet a reserved ring: another collective started
at the same instant (the ring is put into the network as it would have been), a transfer
due before the ring would end (it plays send by send from its first arrival), and
``run(until=...)`` before its end."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from clustersim.collectives import CollectiveCall, ring_replay, run_collective
from clustersim.engine import Simulation
from clustersim.scenario import parse_scenario
from clustersim.topology import build_topology


def _topology(racks: int, nodes: int, gpus: int, oversubscription: float, nic: str = "100Gb/s"):
    doc = {
        "name": "replay",
        "cluster": {
            "racks": racks,
            "nodes_per_rack": nodes,
            "node": {
                "gpus": gpus,
                "pcie": {"bandwidth": "32GB/s", "latency": "1us"},
                "nvlink": {"bandwidth": "300GB/s", "latency": "1us"},
                "nic": {"bandwidth": nic, "latency": "2us"},
            },
            "rack_uplink": {"oversubscription": oversubscription},
            "spines": 2,
        },
        "workload": {"program": []},
    }
    return build_topology(parse_scenario(doc).cluster)


def _state(sim: Simulation) -> dict[str, Any]:
    """Everything a run leaves that a summary or a later transfer could read."""
    net = sim.network
    return {
        "now": repr(sim.now),
        "links": [(s.bytes, s.busy_s, s.peak_flows) for s in net.link_stats()],
        "since": list(net._since),
        "counters": (net.flows_started, net.flows_completed, net.recomputations, net._n_active),
        "records": sorted(sim.records),
    }


def _played(
    topology: Any, setup: Callable[[Simulation], Any], replay: bool, monkeypatch
) -> tuple[dict[str, Any], int]:
    """The state a run leaves, and the rings it played whole."""
    monkeypatch.setattr(ring_replay, "REPLAY", replay)
    sim = Simulation(topology)
    until = setup(sim)
    sim.run(until)
    return _state(sim), sim.network.rings_whole


def _same_both_ways(topology: Any, setup: Callable[[Simulation], Any], monkeypatch) -> int:
    """Assert the state is the same both ways; return the rings played whole."""
    whole, rings = _played(topology, setup, True, monkeypatch)
    by_send, none = _played(topology, setup, False, monkeypatch)
    assert none == 0
    assert whole == by_send
    return rings


def _ring(op: str, devices: tuple[str, ...], nbytes: float) -> CollectiveCall:
    return CollectiveCall(op, devices, nbytes, "ring")


@pytest.mark.parametrize(
    "racks,nodes,gpus,oversubscription",
    [
        (1, 1, 8, 1.0),
        (1, 2, 4, 1.0),
        (2, 2, 8, 4.0),
        (4, 2, 2, 2.0),
        (3, 1, 8, 1.0),
        (4, 2, 8, 4.0),
    ],
)
@pytest.mark.parametrize("nbytes", [1.0, 3e5, 1e9])
@pytest.mark.parametrize("op", ["allreduce", "reducescatter", "allgather"])
@pytest.mark.parametrize("small", [0, 1 << 30], ids=["numpy", "lists"])
def test_a_ring_alone_ends_as_it_does_send_by_send(
    racks: int,
    nodes: int,
    gpus: int,
    oversubscription: float,
    nbytes: float,
    op: str,
    small: int,
    monkeypatch,
) -> None:
    """Both ways of timing a ring played whole (numpy, and plain Python for small rings)."""
    monkeypatch.setattr(ring_replay, "SMALL_SENDS", small)
    topology = _topology(racks, nodes, gpus, oversubscription)
    devices = tuple(d.name for d in topology.select("*/gpu*"))

    def setup(sim: Simulation) -> None:
        run_collective(sim, _ring(op, devices, nbytes))

    assert _same_both_ways(topology, setup, monkeypatch) == 1


def test_the_ring_is_played_whole_where_it_is_alone(monkeypatch) -> None:
    """The bench's ring: 2,095,104 sends without one transfer through the network's queue,
    and the simulated time the send-by-send play gives (176.212 ms, bench_allreduce)."""
    topology = _topology(16, 8, 8, 4.0)
    devices = tuple(d.name for d in topology.select("*/gpu*"))
    monkeypatch.setattr(ring_replay, "REPLAY", True)
    sim = Simulation(topology)
    run_collective(sim, _ring("allreduce", devices, 1e9))
    sim.run()
    assert sim.network.flows_completed == 2 * 1023 * 1024 and sim.network.rings_whole == 1
    assert sim.network._buckets == {} and sim.network._next_id == 2 * 1023 * 1024
    assert sim.now == pytest.approx(176.212e-3, rel=1e-5)


def test_rings_one_after_another_in_a_process(monkeypatch) -> None:
    """A program of collectives, each alone while it runs: every one played whole."""
    topology = _topology(2, 2, 4, 2.0)
    devices = tuple(d.name for d in topology.select("*/gpu*"))

    def setup(sim: Simulation) -> None:
        def program():
            for nbytes in (1e3, 1e6, 1e8):
                yield run_collective(sim, _ring("allreduce", devices, nbytes))
                yield sim.env.timeout(1e-6)

        sim.env.process(program())

    assert _same_both_ways(topology, setup, monkeypatch) == 3


def test_two_rings_started_at_once_share_their_links(monkeypatch) -> None:
    """The second ring's first transfer puts the reserved first one into the network as it
    was at the call: they share links, so both play send by send and meet as before."""
    topology = _topology(2, 2, 4, 4.0)
    devices = tuple(d.name for d in topology.select("*/gpu*"))

    def setup(sim: Simulation) -> None:
        run_collective(sim, _ring("allreduce", devices, 1e7))
        run_collective(sim, _ring("allgather", devices[::-1], 3e6), group="other")

    assert _same_both_ways(topology, setup, monkeypatch) == 0


@pytest.mark.parametrize("delay_s", [0.0, 1.5e-6, 2e-5, 5e-4])
def test_a_transfer_due_before_the_ring_ends_makes_it_play_send_by_send(
    delay_s: float, monkeypatch
) -> None:
    """A process that sends across the ring's links ``delay_s`` after it started: at the
    ring's first arrival its end is not before that event, so the ring plays send by send
    from there (or is put in at once when the transfer comes first)."""
    topology = _topology(2, 2, 4, 4.0)
    devices = tuple(d.name for d in topology.select("*/gpu*"))

    def setup(sim: Simulation) -> None:
        run_collective(sim, _ring("allreduce", devices, 5e7))

        def intruder():
            yield sim.env.timeout(delay_s)
            yield sim.transfer(devices[0], devices[-1], 2e7)

        sim.env.process(intruder())

    assert _same_both_ways(topology, setup, monkeypatch) == 0


def test_a_bandwidth_change_meets_the_ring_as_before(monkeypatch) -> None:
    topology = _topology(2, 2, 4, 1.0)
    devices = tuple(d.name for d in topology.select("*/gpu*"))
    nic = next(link.index for link in topology.links if "nic" in link.name)

    def setup(sim: Simulation) -> None:
        run_collective(sim, _ring("allreduce", devices, 5e7))

        def slow():
            yield sim.env.timeout(1e-4)
            sim.network.set_bandwidth(nic, 1e9)

        sim.env.process(slow())

    assert _same_both_ways(topology, setup, monkeypatch) == 0


@pytest.mark.parametrize("until", [0.5e-6, 1e-3])
def test_run_until_before_the_first_arrival_or_the_end(until: float, monkeypatch) -> None:
    """``run(until)`` before the ring's first arrival leaves its sends in the timer queue,
    as the send-by-send play does (the network settles at the end of a run); a second run
    then plays the ring to its end the same way."""
    topology = _topology(1, 2, 4, 1.0)
    devices = tuple(d.name for d in topology.select("*/gpu*"))
    states = []
    for replay in (True, False):
        monkeypatch.setattr(ring_replay, "REPLAY", replay)
        sim = Simulation(topology)
        run_collective(sim, _ring("allreduce", devices, 1e8))
        sim.run(until)
        first = _state(sim), sim.network.in_flight
        sim.run()
        states.append((first, _state(sim)))
    assert states[0] == states[1]
    assert states[0][0][1] > 0 or until > 1e-6


def test_small_rings_record_every_transfer_the_same(monkeypatch) -> None:
    """A ring of a few sends records each transfer (and each rank's collective): the same
    records, from the same times."""
    topology = _topology(1, 1, 8, 1.0)
    devices = tuple(d.name for d in topology.select("*/gpu*"))

    def setup(sim: Simulation) -> None:
        run_collective(sim, _ring("allreduce", devices, 4e6), record_transfers=True)

    assert _same_both_ways(topology, setup, monkeypatch) == 1
    monkeypatch.setattr(ring_replay, "REPLAY", True)
    sim = Simulation(topology)
    run_collective(sim, _ring("allreduce", devices, 4e6), record_transfers=True)
    sim.run()
    kinds = [r.kind for r in sim.records]
    assert kinds.count("transfer") == 2 * 7 * 8 and kinds.count("collective") == 8
    assert sim.network._buckets == {}


@pytest.mark.parametrize("case", ["alone", "intruder", "two at once"])
def test_under_the_invariant_checker(case: str, monkeypatch) -> None:
    """The checker sees every send of a ring played send by send; a ring played whole
    tells it the bytes its sends put on each link, so its final byte check holds both ways,
    with no violation and the same state."""
    from clustersim.invariants import Checker

    topology = _topology(2, 2, 4, 4.0)
    devices = tuple(d.name for d in topology.select("*/gpu*"))
    states = []
    for replay in (True, False):
        monkeypatch.setattr(ring_replay, "REPLAY", replay)
        sim = Simulation(topology)
        checker = Checker(sim)
        run_collective(sim, _ring("allreduce", devices, 5e7))
        if case == "two at once":
            run_collective(sim, _ring("reducescatter", devices[::-1], 1e6), group="other")
        if case == "intruder":

            def intruder(sim: Simulation = sim):
                yield sim.env.timeout(2e-5)
                yield sim.transfer(devices[0], devices[-1], 2e7)

            sim.env.process(intruder())
        sim.run()
        assert checker.check() == []
        states.append((_state(sim), sim.network.rings_whole))
        checker.release()
    assert states[0][0] == states[1][0]
    assert states[0][1] == (1 if case == "alone" else 0) and states[1][1] == 0


def test_the_checker_catches_bytes_a_ring_played_whole_did_not_carry(monkeypatch) -> None:
    """The checker's final byte check reads the links a whole ring booked: a ring whose
    links lost their bytes is a violation (so the check is real for rings played whole)."""
    from clustersim.invariants import Checker

    topology = _topology(1, 2, 4, 1.0)
    devices = tuple(d.name for d in topology.select("*/gpu*"))
    monkeypatch.setattr(ring_replay, "REPLAY", True)
    sim = Simulation(topology)
    checker = Checker(sim)
    run_collective(sim, _ring("allreduce", devices, 1e6))
    sim.run()
    assert sim.network.rings_whole == 1 and checker.check() == []
    link = next(i for i, b in enumerate(sim.network._bytes) if b > 0)
    sim.network._bytes[link] = 0.0
    assert any("carried 0.0 bytes" in v for v in checker.check())
    checker.release()


@pytest.mark.parametrize(
    "order,changes,whole",
    [
        ("rack-major", {}, True),
        ("rack-major", {"protocol": "LL"}, True),
        ("interleaved", {}, False),  # hops share the racks' uplinks
        ("rack-major", {"chunk_bytes": 1e6}, False),  # pieces: not the bulk-built ring
        ("rack-major", {"bidirectional": True}, False),
        ("rack-major", {"op": "barrier", "size_bytes": 0.0}, False),
    ],
)
def test_the_work_estimate_knows_which_rings_are_played_whole(
    order: str, changes: dict, whole: bool
) -> None:
    """A call run alone (a sweep's point, a collective workload) counts its sends as played
    whole exactly when its run plays it whole, and its wall-time estimate follows: the bench's
    ring is then under the notice's 10 s instead of about 35 s."""
    from dataclasses import replace

    from clustersim.budget import NOTICE_AFTER_S, wall_time_s
    from clustersim.collectives import slices
    from clustersim.collectives.work import call_work

    topology = _topology(4, 2, 8, 4.0)
    devices = [d.name for d in topology.select("*/gpu*")]
    if order == "interleaved":
        devices = [devices[(i % 4) * 16 + i // 4] for i in range(len(devices))]
    call = replace(_ring("allreduce", tuple(devices), 1e8), **changes)
    if call.protocol is not None:
        call = slices(call, topology, 1, "flow")[0]
    alone = call_work(call, topology, alone=True)
    assert alone.whole_sends == (alone.transfers if whole else 0.0)
    assert call_work(call, topology).whole_sends == 0.0  # beside other work: per send
    sim = Simulation(topology)
    run_collective(sim, call)
    sim.run()
    assert sim.network.rings_whole == int(whole)
    assert (wall_time_s(alone) < wall_time_s(replace(alone, whole_sends=0.0))) == whole
    big = _topology(16, 8, 8, 4.0)
    ring = _ring("allreduce", tuple(d.name for d in big.select("*/gpu*")), 1e9)
    assert wall_time_s(call_work(ring, big)) > NOTICE_AFTER_S  # 2.1 M sends: about 35 s
    assert wall_time_s(call_work(ring, big, alone=True)) < NOTICE_AFTER_S / 2
