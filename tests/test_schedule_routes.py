"""Sends on their own routes (:meth:`Schedule.send_on`): routes that start or end at a
switch, as in-network reduction needs.  Flat switch cluster: 25 GB/s and 1 us per link."""

from __future__ import annotations

import pytest

from clustersim.collectives import CollectiveCall, check_call
from clustersim.collectives.execution import execute
from clustersim.collectives.fluid import schedule_flows
from clustersim.collectives.schedule import Schedule, Via
from clustersim.engine import Simulation
from clustersim.topology import Route

from .conftest import flat_topology

B = 25e9  # bytes/s per link
LINK_LATENCY = 1e-6  # s per link


def run(schedule: Schedule, devices: tuple[str, ...]) -> Simulation:
    sim = Simulation(flat_topology("switch", len(devices)))
    execute(sim, devices, schedule, record_transfers=True)
    sim.run()
    return sim


def test_send_on_takes_its_own_route_to_and_from_a_switch() -> None:
    """Two sends through the switch of a 2-GPU cluster, on routes ending and starting at
    the switch: each takes its one link (1 us + S / B), counts for the rank at its device
    end only, and is recorded between the names of its route's ends."""
    topo = flat_topology("switch", 2)
    up, down = topo.routes("gpu0", "gpu1")[0].links
    schedule = Schedule(2)
    first = schedule.send_on(Route.of([up]), 0, -1, 1e6)
    schedule.send_on(Route.of([down]), -1, 1, 1e6, [first])
    assert schedule.routes == {0: Via(Route.of([up]), 0, -1), 1: Via(Route.of([down]), -1, 1)}
    assert schedule.bytes_sent() == [1e6, 0.0] and schedule.bytes_received() == [0.0, 1e6]
    sim = run(schedule, ("gpu0", "gpu1"))
    assert sim.now == pytest.approx(2 * (LINK_LATENCY + 1e6 / B), rel=1e-12)
    loads = {s.name: s.bytes for s in sim.network.link_stats() if s.bytes > 0}
    assert loads == {"gpu0->switch": 1e6, "switch->gpu1": 1e6}
    ends = [(r.src, r.dst) for r in sim.records if r.kind == "transfer"]
    assert ends == [("gpu0", "switch"), ("switch", "gpu1")]


def test_meeting_send_on_the_empty_route_waits_and_takes_no_time() -> None:
    """A zero-byte send on ``Route()`` completes when its parents have, moves nothing and
    leaves no transfer record; what waits on it starts then."""
    topo = flat_topology("switch", 3)
    schedule = Schedule(3)
    a = schedule.send_on(Route.of(topo.routes("gpu0", "gpu2")[0].links[:1]), 0, -1, 1e6)
    b = schedule.send_on(Route.of(topo.routes("gpu1", "gpu2")[0].links[:1]), 1, -1, 2e6)
    meet = schedule.send_on(Route(), -1, -1, 0.0, [a, b], owner=0)
    schedule.send_on(Route.of(topo.routes("gpu0", "gpu2")[0].links[1:]), -1, 2, 1e6, [meet])
    sim = run(schedule, ("gpu0", "gpu1", "gpu2"))
    assert sim.now == pytest.approx(2 * LINK_LATENCY + 3e6 / B, rel=1e-12)
    assert sum(r.kind == "transfer" for r in sim.records) == 3
    assert schedule.bytes_sent() == [1e6, 2e6, 0.0]


def test_send_on_needs_a_rank() -> None:
    """A send between two switches must name the rank it counts for."""
    with pytest.raises(ValueError, match="owner"):
        Schedule(2).send_on(Route(), -1, -1, 0.0)


def test_embed_keeps_own_routes_with_ranks_renamed() -> None:
    """Embedding a schedule with sends on own routes keeps each route at the new send id,
    its rank ends played by the embedding's ranks."""
    topo = flat_topology("switch", 4)
    link = topo.routes("gpu2", "gpu0")[0].links[0]
    sub = Schedule(2)
    sub.send(0, 1, 5.0)
    sub.send_on(Route.of([link]), 1, -1, 7.0)
    outer = Schedule(4)
    outer.send(0, 1, 1.0)
    ids = outer.embed(sub, [3, 2])
    assert ids == [1, 2]
    assert outer.routes == {2: Via(Route.of([link]), 2, -1)}
    assert outer.bytes_sent() == [1.0, 0.0, 7.0, 5.0]


def test_schedule_flows_counts_own_routes_on_their_links() -> None:
    """fluid.schedule_flows puts a send on its own route on that route's links, not on its
    ranks' pair route: two ranks' sends up to the switch and one down."""
    topo = flat_topology("switch", 3)
    schedule = Schedule(3)
    ups = [
        schedule.send_on(Route.of(topo.routes(f"gpu{r}", "gpu2")[0].links[:1]), r, -1, 1e6)
        for r in (0, 1)
    ]
    schedule.send_on(Route.of(topo.routes("gpu0", "gpu2")[0].links[1:]), -1, 2, 1e6, ups)
    flows = schedule_flows(schedule, ("gpu0", "gpu1", "gpu2"), topo)
    names = {topo.links[i].name: k for i, k in flows.items()}
    assert names == {"gpu0->switch": 1.0, "gpu1->switch": 1.0, "switch->gpu2": 1.0}


def test_ordinary_schedules_have_no_route_table() -> None:
    """Sends between ranks keep their pair's route: no table (the plain executor runs)."""
    topo = flat_topology("switch", 8)
    call = CollectiveCall("allreduce", tuple(topo.devices), 1e6)
    assert check_call(call, topo).schedule(call, topo).routes is None
    assert Schedule(3).routes is None
