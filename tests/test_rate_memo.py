"""Small components' rates remembered by their routes
(:meth:`clustersim.network.rates.RateRecomputation._fill_remembered`).

Held to the solver itself: shipped scenarios whose components repeat (rings and
hierarchical all-reduces on shared uplinks, jobs side by side, parameter servers) give the
same summary, byte for byte, with the memo and with every component solved; the memo is
actually used there; and a capacity change between two equal components is not answered
from the memo (max-min fair sharing's rates, written out, on a two-link network)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import simpy

from clustersim import api
from clustersim.network import Network, rates

from .conftest import SCENARIOS
from .test_network import make_links, route, run_transfers

REPEATING = [
    "ps_vs_ring/resnet50_hierarchical.yaml",  # 960 components, 944 seen before
    "jobs/placement_spread.yaml",  # 34, 28
    "jobs/training_beside_ps.yaml",  # 859, 120
]
"""Cheap shipped runs whose small components repeat (counts measured at the memo's commit)."""


def played(
    path: Path, monkeypatch: pytest.MonkeyPatch, counter: str = "fill_memo_hits"
) -> tuple[str, int, int]:
    """The run's summary.json text, its components solved and its networks' ``counter``
    (memo hits)."""
    made: list[Network] = []
    init = Network.__init__
    monkeypatch.setattr(Network, "__init__", lambda net, *a: (init(net, *a), made.append(net))[0])
    text = api.simulate(path).summary_json()
    monkeypatch.setattr(Network, "__init__", init)
    return text, sum(n.solver_calls for n in made), sum(getattr(n, counter) for n in made)


@pytest.mark.parametrize("name", REPEATING)
def test_remembered_rates_give_the_solvers_summary_to_the_byte(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same summary with the memo as with every component solved, and most components of
    these runs answered from the memo."""
    monkeypatch.setitem(os.environ, "CLUSTERSIM_CHECK", "0")
    path = SCENARIOS / name
    remembered, solved, hits = played(path, monkeypatch)
    monkeypatch.setattr(rates, "FILL_MEMO_MAX_FLOWS", 0)
    every, solved_again, no_hits = played(path, monkeypatch)
    assert remembered == every
    assert solved == solved_again and no_hits == 0
    assert hits >= 0.1 * solved > 0


def test_a_capacity_change_forgets_the_remembered_rates() -> None:
    """Two flows over a shared 10 GB/s link (each with a private 40 GB/s link) get 5 GB/s
    each; after the shared link drops to 4 GB/s, the same two routes meeting again get
    2 GB/s each, not the remembered 5: 1 GB takes 0.2 s, then 0.5 s."""
    env = simpy.Environment()
    links = make_links([(10e9, 0.0), (40e9, 0.0), (40e9, 0.0)])
    net = Network(env, links)
    a, b = route(links[0], links[1]), route(links[0], links[2])
    first = run_transfers(net, [(0.0, a, 1e9), (0.0, b, 1e9)])
    assert first == pytest.approx([0.2, 0.2], rel=1e-12)
    net.set_bandwidth(0, 4e9)
    second = run_transfers(net, [(1.0, a, 1e9), (1.0, b, 1e9)])
    assert second == pytest.approx([1.5, 1.5], rel=1e-12)
    net.set_bandwidth(0, 10e9)
    third = run_transfers(net, [(2.0, a, 1e9), (2.0, b, 1e9)])
    assert third == pytest.approx([2.2, 2.2], rel=1e-12)
    assert net.fill_memo_hits == 0  # each meeting came after a change


def test_the_same_routes_meeting_again_are_answered_from_the_memo() -> None:
    """Three meetings of the same two routes with no change between: solved once, then
    remembered twice, each at 5 GB/s."""
    env = simpy.Environment()
    links = make_links([(10e9, 0.0), (40e9, 0.0), (40e9, 0.0)])
    net = Network(env, links)
    a, b = route(links[0], links[1]), route(links[0], links[2])
    jobs = [(float(k), r, 1e9) for k in range(3) for r in (a, b)]
    done = run_transfers(net, jobs)
    assert done == pytest.approx([0.2, 0.2, 1.2, 1.2, 2.2, 2.2], rel=1e-12)
    assert (net.solver_calls, net.fill_memo_hits) == (3, 2)
