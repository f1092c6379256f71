"""Cancelling a flow (clustersim.network.cancel): it leaves the network with the bytes it
moved, and the flows it shared links with speed up from the cancel on."""

from __future__ import annotations

import pytest
import simpy

from clustersim.network import Network
from clustersim.network.cancel import cancel_flow
from clustersim.network.monitor import NetworkMonitor
from tests.test_network import make_links, route


def test_a_cancelled_flow_frees_its_share_of_the_link() -> None:
    """Two 100 B flows on a 10 B/s link share it (5 B/s each); cancelling one at 4 s
    (20 B moved) lets the other move its last 80 B at 10 B/s: it ends at 12 s."""
    env = simpy.Environment()
    links = make_links([(10.0, 0.0)])
    net = Network(env, links)
    violations: list[str] = []
    monitor = NetworkMonitor(net, violations.append)
    r = route(links[0])
    ended: dict[str, float] = {}
    keep = net.transfer(r, 100.0, lambda f: ended.setdefault("keep", env.now))
    gone = net.transfer(r, 100.0, lambda f: ended.setdefault("gone", env.now))
    moved: list[float] = []
    env.process(_cancel_at(env, 4.0, lambda: moved.append(cancel_flow(net, gone))))
    env.run()
    assert moved == [pytest.approx(20.0)]
    assert ended == {"keep": pytest.approx(12.0)}
    assert keep.end_s == pytest.approx(12.0) and gone.end_s == 4.0
    assert net.flows_completed == net.flows_started == 2
    assert net.link_stats()[0].bytes == pytest.approx(120.0)
    assert violations + monitor.final() == []


def test_a_flow_cancelled_in_its_latency_never_holds_bandwidth() -> None:
    """Cancelled before its 1 s latency ends, a flow moves nothing and the other flow
    has the link alone: 100 B at 10 B/s after 1 s."""
    env = simpy.Environment()
    links = make_links([(10.0, 1.0)])
    net = Network(env, links)
    r = route(links[0])
    keep = net.transfer(r, 100.0)
    gone = net.transfer(r, 100.0)
    moved: list[float] = []
    env.process(_cancel_at(env, 0.5, lambda: moved.append(cancel_flow(net, gone))))
    env.run()
    assert moved == [0.0]
    assert keep.end_s == pytest.approx(11.0)
    assert net.link_stats()[0].bytes == pytest.approx(100.0)


def test_cancelling_a_completed_flow_changes_nothing() -> None:
    env = simpy.Environment()
    links = make_links([(10.0, 0.0)])
    net = Network(env, links)
    flow = net.transfer(route(links[0]), 10.0)
    env.run()
    assert cancel_flow(net, flow) == 10.0
    assert net.flows_completed == 1


def _cancel_at(env: simpy.Environment, at_s: float, cancel):
    yield env.timeout(at_s)
    cancel()
