"""Large components solved again without a search
(:meth:`clustersim.network.rates.RateRecomputation._kept_component`).

Held to the search itself: shipped parameter-server runs give the same summary, byte for
byte, with the last large component kept and with every component searched; the kept one
is actually used there; and random networks of a few hundred flows -- departures one by
one, a second wave of arrivals, a capacity change and cancelled flows between them -- give
every flow the same completion time, to the bit, both ways."""

from __future__ import annotations

import os
import random

import pytest
import simpy

from clustersim.network import Network, rates
from clustersim.network.cancel import cancel_flow

from .conftest import SCENARIOS
from .test_network import make_links, route
from .test_rate_memo import played

KEPT = [
    "parameter_server/hot_keys.yaml",  # 760 components solved, 32 of them kept ones
    "jobs/training_beside_ps.yaml",  # 2,042, 177
    "ps_vs_ring/bert_large_ps_dedicated.yaml",  # 295, 128
]
"""Cheap shipped runs with components of more than 256 flows that lose flows between
recomputations (counts measured at the commit that kept them)."""


@pytest.mark.parametrize("name", KEPT)
def test_a_kept_component_gives_the_searchs_summary_to_the_byte(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same summary with the kept component as with every component searched, and the kept
    one solved again in these runs."""
    monkeypatch.setitem(os.environ, "CLUSTERSIM_CHECK", "0")
    path = SCENARIOS / name
    kept, solved, reused = played(path, monkeypatch, "kept_reuses")
    monkeypatch.setattr(rates, "KEEP_COMPONENTS", False)
    searched, solved_again, none = played(path, monkeypatch, "kept_reuses")
    assert kept == searched
    assert solved == solved_again and none == 0
    assert reused >= 0.04 * solved > 0


def _random_run(seed: int, keep: bool) -> tuple[list[float], int]:
    """Completion times of a random mix of flows over 8 shared links (4-40 GB/s) and a
    private link each: 300 flows at t = 0, 60 more at 0.05 s, link 0 down to a third at
    0.02 s and back at 0.08 s, the private links of 20 flows down to 0.5 GB/s at 0.025 s, 20
    flows cancelled at 0.03 s; then the order in which the flows' waiters resumed; and the
    kept components used."""
    rng = random.Random(seed)
    shared = [(rng.uniform(4e9, 40e9), 0.0) for _ in range(8)]
    links = make_links(shared + [(rng.uniform(20e9, 60e9), 0.0) for _ in range(360)])
    hops = [sorted(rng.sample(range(8), rng.randint(1, 3))) for _ in range(360)]
    sizes = [rng.uniform(1e6, 4e8) for _ in range(360)]
    cancelled = rng.sample(range(300), 20)
    slowed = rng.sample(range(300), 20)
    rates.KEEP_COMPONENTS = keep
    try:
        env = simpy.Environment()
        net = Network(env, links)
        done = [float("nan")] * 360
        order: list[int] = []
        flows: list = [None] * 360

        def job(i: int, start: float) -> object:
            if start > 0.0:
                yield env.timeout(start)
            flows[i] = net.transfer(route(*(links[h] for h in hops[i]), links[8 + i]), sizes[i])
            yield flows[i]
            done[i] = env.now
            order.append(i)

        def changes() -> object:
            yield env.timeout(0.02)
            net.set_bandwidth(0, links[0].bandwidth_Bps / 3)
            yield env.timeout(0.005)
            for i in slowed:  # a flow's own link becomes its bottleneck
                net.set_bandwidth(8 + i, 0.5e9)
            yield env.timeout(0.005)
            for i in cancelled:
                cancel_flow(net, flows[i])
            yield env.timeout(0.05)
            net.set_bandwidth(0, links[0].bandwidth_Bps)

        for i in range(360):
            env.process(job(i, 0.0 if i < 300 else 0.05))
        env.process(changes())
        env.run()
        return [*done, *order], net.kept_reuses
    finally:
        rates.KEEP_COMPONENTS = True


@pytest.mark.parametrize("seed", range(6))
def test_random_networks_give_the_same_times_kept_or_searched(seed: int) -> None:
    """Every completion time (cancelled flows: never) equal to the bit, the waiters resumed
    in the same order, and kept components used between the changes."""
    kept, reused = _random_run(seed, True)
    searched, none = _random_run(seed, False)
    assert kept == pytest.approx(searched, rel=0.0, abs=0.0, nan_ok=True)
    assert [repr(t) for t in kept] == [repr(t) for t in searched]
    assert none == 0 and reused > 10


def test_a_large_component_is_retimed_in_flow_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flows that finish at one instant queue in the order they were re-timed, and their
    waiters resume in it (geo.yaml's parameter servers showed it: same rates, another
    summary).  So a large component, searched or kept, is re-timed in flow-id order: the
    search's own order depends on the link it started from."""
    seen: list[bool] = []
    apply = Network._apply_rates

    def checked(net: Network, comp_flows: list, now: float) -> int:
        if len(comp_flows) > rates.KEEP_MIN_FLOWS:
            ids = [flow.id for flow in comp_flows]
            seen.append(ids == sorted(ids))
        return apply(net, comp_flows, now)

    monkeypatch.setattr(Network, "_apply_rates", checked)
    for keep in (True, False):
        _random_run(0, keep)
    assert len(seen) > 20 and all(seen)
