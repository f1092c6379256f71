"""Weighted flows in clustersim.network: weighted max-min sharing, rate caps, statistics."""

from __future__ import annotations

import random

import pytest
import simpy

from clustersim.errors import SimulationError
from clustersim.network import Network
from clustersim.topology import Link, Route


class WeightedRoute:
    """A route with per-link weights (and an optional rate cap, bytes/s)."""

    def __init__(self, links: list[Link], weights: list[float], cap: float = float("inf")) -> None:
        self.links = tuple(links)
        self.weights = tuple(weights)
        self.latency_s = sum(link.latency_s for link in links)
        self.rate_cap = cap


def links_of(capacities: list[float]) -> list[Link]:
    return [Link(i, f"l{i}", f"a{i}", f"b{i}", c, 0.0) for i, c in enumerate(capacities)]


def plain(*links: Link) -> Route:
    return Route(tuple(links), 0.0, min(link.bandwidth_Bps for link in links))


def finish_times(net: Network, jobs: list[tuple[float, object, float]]) -> list[float]:
    """Completion time of each ``(start_s, route, size)`` transfer."""
    env = net.env
    out = [float("nan")] * len(jobs)

    def job(i: int, start: float, route: object, size: float):
        yield env.timeout(start)
        yield net.transfer(route, size)
        out[i] = env.now

    for i, (start, route, size) in enumerate(jobs):
        env.process(job(i, start, route, size))
    env.run()
    return out


@pytest.mark.parametrize("weight", [1.0, 2.0, 3.5, 64.0])
@pytest.mark.parametrize("capacity", [1e6, 1.25e10])
@pytest.mark.parametrize("size", [1.0, 4e6, 3e9])
def test_weighted_flow_alone_moves_at_capacity_over_weight(
    weight: float, capacity: float, size: float
) -> None:
    """Alone, a flow of weight w on a link of capacity C takes size x w / C."""
    links = links_of([capacity, 10 * capacity])
    net = Network(simpy.Environment(), links)
    (t,) = finish_times(net, [(0.0, WeightedRoute(links, [weight, weight]), size)])
    assert t == pytest.approx(size * weight / capacity, rel=1e-12)


@pytest.mark.parametrize("seed", range(12))
def test_integer_weight_equals_that_many_unit_flows(seed: int) -> None:
    """A flow of uniform weight k on its links finishes when k unit flows on the same
    links (same start, same size) would: weighted max-min is max-min with k copies."""
    rng = random.Random(seed)
    caps = [rng.choice([1e9, 2e9, 5e9, 1.25e10]) for _ in range(6)]
    links = links_of(caps)
    k = rng.randint(2, 5)
    heavy = sorted(rng.sample(range(6), rng.randint(1, 3)))
    others = [
        (
            rng.uniform(0.0, 1e-3),
            sorted(rng.sample(range(6), rng.randint(1, 3))),
            rng.uniform(1e5, 1e7),
        )
        for _ in range(rng.randint(2, 6))
    ]
    start, size = rng.uniform(0.0, 1e-3), rng.uniform(1e5, 1e7)

    weighted = Network(simpy.Environment(), links)
    jobs: list[tuple[float, object, float]] = [
        (start, WeightedRoute([links[i] for i in heavy], [float(k)] * len(heavy)), size)
    ]
    jobs += [(t, plain(*(links[i] for i in ls)), s) for t, ls, s in others]
    got = finish_times(weighted, jobs)

    copies = Network(simpy.Environment(), links)
    jobs = [(start, plain(*(links[i] for i in heavy)), size) for _ in range(k)]
    jobs += [(t, plain(*(links[i] for i in ls)), s) for t, ls, s in others]
    want = finish_times(copies, jobs)

    assert got[0] == pytest.approx(want[0], rel=1e-9)
    assert got[1:] == pytest.approx(want[k:], rel=1e-9)


def test_unequal_weights_share_by_use() -> None:
    """Flow A uses 2x its rate on link 0 (capacity 3), B 1x: both rise to 1 B/s, when link 0
    is full; once B (1 B) is done, A runs at 3 / 2."""
    links = links_of([3.0, 10.0])
    net = Network(simpy.Environment(), links)
    a = WeightedRoute(links, [2.0, 1.0])
    b = plain(links[0])
    t_a, t_b = finish_times(net, [(0.0, a, 2.5), (0.0, b, 1.0)])
    assert t_b == pytest.approx(1.0, rel=1e-12)
    assert t_a == pytest.approx(1.0 + 1.5 / 1.5, rel=1e-12)


@pytest.mark.parametrize("cap", [0.5, 2.0, 7.0])
def test_rate_cap_limits_a_weighted_flow_and_frees_the_rest(cap: float) -> None:
    """A capped weighted flow never exceeds its cap; a unit flow beside it takes the rest
    (max-min: min(cap, C / 2) for the capped one)."""
    links = links_of([10.0])
    net = Network(simpy.Environment(), links)
    capped = WeightedRoute(links, [1.0], cap=cap)
    t_capped, t_plain = finish_times(net, [(0.0, capped, 100.0), (0.0, plain(links[0]), 10.0)])
    share = min(cap, 5.0)
    plain_done = 10.0 / (10.0 - share)
    assert t_plain == pytest.approx(plain_done, rel=1e-12)
    left = 100.0 - share * plain_done
    assert t_capped == pytest.approx(plain_done + left / min(cap, 10.0), rel=1e-12)


def test_link_stats_count_size_times_weight() -> None:
    """A link carries size x weight bytes of a weighted flow."""
    links = links_of([1e9, 1e9])
    net = Network(simpy.Environment(), links)
    finish_times(net, [(0.0, WeightedRoute(links, [3.0, 0.5]), 1e6)])
    stats = net.link_stats()
    assert stats[0].bytes == pytest.approx(3e6)
    assert stats[1].bytes == pytest.approx(5e5)


def test_bad_weights_are_refused() -> None:
    links = links_of([1e9, 1e9])
    net = Network(simpy.Environment(), links)
    with pytest.raises(SimulationError, match="2 weights for 1 links"):
        net.transfer(WeightedRoute(links[:1], [1.0, 2.0]), 1.0)
    with pytest.raises(SimulationError, match="finite and > 0"):
        net.transfer(WeightedRoute(links, [1.0, 0.0]), 1.0)


def _reference_weighted_rates(
    flows: list[list[tuple[int, float]]], caps: list[float], capacity: list[float]
) -> list[float]:
    """Weighted max-min fair rates by the textbook loop, in exact fractions: raise every
    unfrozen flow's rate together; the first link to fill (or cap to be reached) freezes
    its flows."""
    from fractions import Fraction

    rate = [Fraction(0)] * len(flows)
    frozen = [False] * len(flows)
    left = {link: Fraction(c) for link, c in enumerate(capacity)}
    while not all(frozen):
        step = None
        for link, rem in left.items():
            w = sum(
                Fraction(wt)
                for f, fl in enumerate(flows)
                if not frozen[f]
                for lk, wt in fl
                if lk == link
            )
            if w > 0 and (step is None or rem / w < step):
                step = rem / w
        for f, cap in enumerate(caps):
            if (
                not frozen[f]
                and cap != float("inf")
                and (step is None or Fraction(cap) - rate[f] < step)
            ):
                step = Fraction(cap) - rate[f]
        for f in range(len(flows)):
            if not frozen[f]:
                rate[f] += step
        for f, fl in enumerate(flows):
            for lk, wt in fl:
                if not frozen[f]:
                    left[lk] -= Fraction(wt) * step
        for f, fl in enumerate(flows):
            if frozen[f]:
                continue
            if any(left[lk] <= 0 for lk, _ in fl) or (
                caps[f] != float("inf") and rate[f] >= Fraction(caps[f])
            ):
                frozen[f] = True
    return [float(r) for r in rate]


@pytest.mark.parametrize("seed", range(12))
def test_vectorised_weighted_fill_matches_the_textbook_loop(seed: int) -> None:
    """fill_weighted_arrays (numpy) against an exact progressive filling, on random flows
    with random weights, shared links and rate caps."""
    import numpy as np

    from clustersim.network.weighted import fill_weighted_arrays

    rng = random.Random(seed)
    n_links = rng.randint(3, 12)
    capacity = [float(rng.choice([1, 2, 3, 5, 8])) for _ in range(n_links)]
    flows = []
    for _ in range(rng.randint(1, 8)):
        links = rng.sample(range(n_links), rng.randint(1, min(5, n_links)))
        flows.append([(link, float(rng.choice([0.5, 1, 2, 3]))) for link in sorted(links)])
    caps = [rng.choice([float("inf"), float("inf"), 0.3, 0.7]) for _ in flows]
    got = fill_weighted_arrays(
        np.array([link for fl in flows for link, _ in fl], dtype=np.intp),
        np.array([w for fl in flows for _, w in fl]),
        np.array([len(fl) for fl in flows], dtype=np.intp),
        np.array(caps),
        capacity,
    )
    want = _reference_weighted_rates(flows, caps, capacity)
    assert got.tolist() == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("seed", range(40))
def test_small_component_fill_is_the_array_fill_to_the_bit(seed: int) -> None:
    """fill_weighted_lists (plain Python, for small components) gives exactly the floats of
    fill_weighted_arrays, ties and caps included (capacities and weights drawn from a few
    values so that links fill together), and both the textbook loop's rates; plain flows
    (no weights) count weight 1."""
    from types import SimpleNamespace

    import numpy as np

    from clustersim.network.weighted import fill_weighted_arrays, fill_weighted_lists

    rng = random.Random(seed)
    n_links = rng.randint(2, 30)
    capacity = [float(rng.choice([1, 2, 3, 5, 8, 12.5])) for _ in range(n_links)]
    flows = []
    for _ in range(rng.randint(1, 25)):
        links = sorted(rng.sample(range(n_links), rng.randint(1, min(6, n_links))))
        plain = rng.random() < 0.3
        weights = None if plain else tuple(float(rng.choice([0.5, 1, 2, 3, 16])) for _ in links)
        cap = rng.choice([float("inf"), float("inf"), 0.3, 0.7, 1.0])
        flows.append(SimpleNamespace(links=tuple(links), weights=weights, rate_cap=cap))
    entries = [list(zip(f.links, f.weights or (1.0,) * len(f.links))) for f in flows]
    arrays = fill_weighted_arrays(
        np.array([link for fl in entries for link, _ in fl], dtype=np.intp),
        np.array([w for fl in entries for _, w in fl]),
        np.array([len(fl) for fl in entries], dtype=np.intp),
        np.array([f.rate_cap for f in flows]),
        capacity,
    ).tolist()
    lists = fill_weighted_lists(flows, capacity)
    assert lists == arrays  # the same floats, not just close ones
    want = _reference_weighted_rates(entries, [f.rate_cap for f in flows], capacity)
    assert lists == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("seed", range(8))
def test_local_links_and_shared_links_are_what_unique_and_a_loop_give(seed: int) -> None:
    """The weighted recomputation's index helpers: distinct links in order with each
    entry's position (as numpy.unique with return_inverse, by either of its two ways),
    the capacities gathered, and the links that carry more than one flow."""
    import numpy as np

    from clustersim.network import weighted

    rng = random.Random(seed)
    span = rng.choice([5, 50, 5000])  # 5000: sparse entries, the np.unique way
    entries = np.array([rng.randrange(span) for _ in range(rng.randint(1, 40))], dtype=np.intp)
    links, local = weighted._local_links(entries)
    want_links, want_local = np.unique(entries, return_inverse=True)
    assert links.tolist() == want_links.tolist()
    assert local.tolist() == want_local.reshape(-1).tolist()
    capacity = [float(rng.randint(1, 9)) for _ in range(span)]
    assert weighted._gathered(capacity, links).tolist() == [capacity[i] for i in links]
    link_flows = [{f: None for f in range(rng.randint(0, 3))} for _ in range(span)]
    assert weighted._shared_links(links, link_flows) == [
        i for i in links.tolist() if len(link_flows[i]) > 1
    ]


@pytest.mark.parametrize("seed", range(10))
def test_a_lone_flow_is_rated_as_the_search_rates_it(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The weighted recomputation's shortcut for a flow alone on its links (checked link by
    link, no search) gives every completion time and every engine counter to the bit that
    the search gives (the shortcut off: ``LONE_CHECK_LINKS = 0``): weighted and plain
    flows, capped and not, alone and sharing, arriving at once and apart."""
    from clustersim.network import weighted

    def run() -> tuple[list[float], tuple[int, ...]]:
        rng = random.Random(seed)
        links = links_of([float(rng.choice([1e6, 2e6, 5e6, 1.25e7])) for _ in range(12)])
        net = Network(simpy.Environment(), links)
        jobs = []
        for _ in range(rng.randint(5, 40)):
            on = rng.sample(links, rng.randint(1, 4))
            start = float(rng.choice([0, 0, 1, 2.5, rng.random() * 4]))
            size = float(rng.choice([1e3, 1e6, 3e6, rng.random() * 1e7]))
            if rng.random() < 0.3:
                route: object = plain(*on)
            else:
                weights = [float(rng.choice([0.5, 1, 2, 7])) for _ in on]
                cap = rng.choice([float("inf"), float("inf"), 4e5, 2e6])
                route = WeightedRoute(on, weights, cap)
            jobs.append((start, route, size))
        times = finish_times(net, jobs)
        return times, (net.recomputations, net.solver_calls, net.rate_changes, net.flows_rerated)

    shortcut = run()
    monkeypatch.setattr(weighted, "LONE_CHECK_LINKS", 0)
    searched = run()
    assert shortcut == searched  # the same floats and counts, not just close ones
    assert all(t == t for t in shortcut[0])  # every transfer completed


@pytest.mark.parametrize("extra", [-1, 0, 1])
def test_a_phase_across_many_links_frees_their_dicts_and_a_small_one_keeps_them(
    extra: int,
) -> None:
    """A weighted flow of more than FREE_DICTS_ABOVE_LINKS links leaves its links as it found
    them (no dict: a phase across 131,072 GPUs crosses 1.4 M links once); a smaller one
    leaves their emptied dicts for the next flow, as a plain flow does.  Both take
    size x weight / capacity (every link alike) and book size x weight bytes and that time
    on every link."""
    from clustersim.network.flow import NO_FLOWS
    from clustersim.network.weighted import FREE_DICTS_ABOVE_LINKS

    n = FREE_DICTS_ABOVE_LINKS + extra
    links = links_of([1e9] * n)
    net = Network(simpy.Environment(), links)
    (t,) = finish_times(net, [(0.0, WeightedRoute(links, [2.0] * n), 1e6)])
    assert t == pytest.approx(1e6 * 2.0 / 1e9, rel=1e-12)
    flows_on = net._link_flows
    if extra > 0:
        assert all(flows_on[i] is NO_FLOWS for i in range(n))
    else:
        assert all(flows_on[i] == {} and flows_on[i] is not NO_FLOWS for i in range(n))
    for stats in (net.link_stats()[0], net.link_stats()[-1]):  # booked either way
        assert (stats.bytes, stats.busy_s, stats.peak_flows) == (2e6, t, 1)
