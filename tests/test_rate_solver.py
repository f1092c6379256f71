"""Tests of the max-min fair rate solver and of the incremental Network against it."""

from __future__ import annotations

import math

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from clustersim.network import Network, max_min_rates
from clustersim.topology import Link, Route

REL = 1e-9


# ------------------------------------------------------------ hand examples


def test_parking_lot_equal_capacities() -> None:
    # Long flow over links 0,1,2; one short flow per link: two flows everywhere.
    rates = max_min_rates([[0, 1, 2], [0], [1], [2]], [1.0, 1.0, 1.0])
    assert rates == [0.5, 0.5, 0.5, 0.5]


def test_parking_lot_unequal_capacities() -> None:
    # Link 0 (cap 1) is the long flow's bottleneck; the short flows take the rest.
    rates = max_min_rates([[0, 1, 2], [0], [1], [2]], [1.0, 2.0, 3.0])
    assert rates == pytest.approx([0.5, 0.5, 1.5, 2.5], rel=1e-12)


def test_parking_lot_with_two_short_flows_on_the_middle_link() -> None:
    # Fair shares: link 0 1/2, link 1 2/3, link 2 3/2.  Link 0 freezes the
    # long flow and s0 at 0.5; link 1 then has 2 - 0.5 = 1.5 for two flows
    # -> 0.75 each; link 2: 3 - 0.5 = 2.5.
    rates = max_min_rates([[0, 1, 2], [0], [1], [1], [2]], [1.0, 2.0, 3.0])
    assert rates == pytest.approx([0.5, 0.5, 0.75, 0.75, 2.5], rel=1e-12)


def test_two_level_example() -> None:
    # A on link 0, B on links 0 and 1, C on link 1 (cap 10): A = B = 0.5, C = 9.5.
    assert max_min_rates([[0], [0, 1], [1]], [1.0, 10.0]) == pytest.approx([0.5, 0.5, 9.5])


def test_edge_cases() -> None:
    assert max_min_rates([], []) == []
    assert max_min_rates([[]], [1.0]) == [math.inf]
    assert max_min_rates([[0], []], [3.0]) == [3.0, math.inf]
    assert max_min_rates([[0, 1]], [math.inf, 4.0]) == [4.0]
    assert max_min_rates([[0], [0]], [math.inf]) == [math.inf, math.inf]
    assert max_min_rates([[0], [0, 1]], [0.0, 5.0]) == [0.0, 0.0]
    assert max_min_rates([[0, 0, 1]], [2.0, 5.0]) == [2.0]  # a repeated link counts once
    assert max_min_rates([[0, 0, 1], [1]], [2.0, 5.0]) == [2.0, 3.0]
    with pytest.raises(IndexError):
        max_min_rates([[0, 0, -1]], [2.0])
    with pytest.raises(IndexError):
        max_min_rates([[-1]], [2.0])
    with pytest.raises(IndexError):
        max_min_rates([[2]], [1.0])
    with pytest.raises(ValueError):
        max_min_rates([[0]], [-1.0])


def test_total_throughput_is_not_monotone_in_capacity() -> None:
    # Why the monotonicity property below is lexicographic and not about the
    # total: flow B crosses links 0, 1, 2; D1 only link 1, D2 only link 2.
    # Raising link 0 lets B grow, which takes the same amount from D1 *and* D2.
    flows = [[0, 1, 2], [1], [2]]
    low = max_min_rates(flows, [0.1, 1.0, 1.0])
    high = max_min_rates(flows, [0.3, 1.0, 1.0])
    assert low == pytest.approx([0.1, 0.9, 0.9])
    assert high == pytest.approx([0.3, 0.7, 0.7])
    assert sum(high) < sum(low)
    assert sorted(high) > sorted(low)  # but max-min improves lexicographically


# ------------------------------------------------------- property tests


@st.composite
def flow_sets(draw: st.DrawFn) -> tuple[list[list[int]], list[float]]:
    n_links = draw(st.integers(1, 10))
    caps = draw(
        st.lists(
            st.one_of(st.floats(0.1, 1000.0), st.sampled_from([1.0, 2.0, 10.0])),
            min_size=n_links,
            max_size=n_links,
        )
    )
    flows = draw(
        st.lists(
            st.lists(
                st.integers(0, n_links - 1), min_size=1, max_size=min(n_links, 5), unique=True
            ),
            min_size=0,
            max_size=30,
        )
    )
    return flows, caps


def link_loads(flows: list[list[int]], rates: list[float], n_links: int) -> list[float]:
    loads = [0.0] * n_links
    for links, r in zip(flows, rates):
        for link in links:
            loads[link] += r
    return loads


def check_max_min(flows: list[list[int]], caps: list[float], rates: list[float]) -> None:
    """Feasible, and every flow has a saturated bottleneck link where it is largest."""
    assert len(rates) == len(flows)
    loads = link_loads(flows, rates, len(caps))
    for link, cap in enumerate(caps):
        assert loads[link] <= cap * (1 + REL), (link, loads[link], cap)
    for i, links in enumerate(flows):
        assert rates[i] >= 0.0
        ok = False
        for link in links:
            saturated = loads[link] >= caps[link] * (1 - REL)
            biggest = max(rates[j] for j, other in enumerate(flows) if link in other)
            if saturated and rates[i] >= biggest * (1 - REL):
                ok = True
                break
        assert ok, f"flow {i} has no bottleneck"


@settings(max_examples=300, deadline=None)
@given(flow_sets())
def test_rates_are_max_min_fair(case: tuple[list[list[int]], list[float]]) -> None:
    flows, caps = case
    check_max_min(flows, caps, max_min_rates(flows, caps))


@settings(max_examples=200, deadline=None)
@given(flow_sets(), st.data())
def test_more_capacity_never_hurts_lexicographically(
    case: tuple[list[list[int]], list[float]], data: st.DataObject
) -> None:
    flows, caps = case
    j = data.draw(st.integers(0, len(caps) - 1))
    factor = data.draw(st.floats(1.01, 10.0))
    more = list(caps)
    more[j] *= factor
    before = sorted(max_min_rates(flows, caps))
    after = sorted(max_min_rates(flows, more))
    if before:
        assert after[0] >= before[0] * (1 - REL)  # the poorest flow never loses
    for a, b in zip(after, before):
        if not math.isclose(a, b, rel_tol=REL):
            assert a > b  # first difference favours the bigger network
            break


@settings(max_examples=100, deadline=None)
@given(flow_sets(), st.randoms(use_true_random=False))
def test_rates_do_not_depend_on_flow_order(case: tuple[list[list[int]], list[float]], rnd) -> None:
    flows, caps = case
    order = list(range(len(flows)))
    rnd.shuffle(order)
    base = max_min_rates(flows, caps)
    shuffled = max_min_rates([flows[i] for i in order], caps)
    assert [shuffled[order.index(i)] for i in range(len(flows))] == pytest.approx(base, rel=REL)


# ------------------------------------------ incremental network vs solver


@st.composite
def network_cases(draw: st.DrawFn) -> dict:
    n_links = draw(st.integers(1, 6))
    caps = draw(
        st.lists(st.sampled_from([1e9, 2e9, 2.5e9, 4e9, 1e10]), min_size=n_links, max_size=n_links)
    )
    lats = draw(
        st.lists(st.sampled_from([0.0, 0.0, 1e-3, 0.25]), min_size=n_links, max_size=n_links)
    )
    jobs = draw(
        st.lists(
            st.tuples(
                st.one_of(st.sampled_from([0.0, 0.5, 1.0]), st.floats(0.0, 2.0)),
                st.lists(
                    st.integers(0, n_links - 1), min_size=1, max_size=min(4, n_links), unique=True
                ),
                st.one_of(st.sampled_from([0.0, 1e8, 1e9]), st.floats(1e6, 3e9)),
            ),
            min_size=1,
            max_size=25,
        )
    )
    changes = draw(
        st.lists(
            st.tuples(
                st.floats(0.0, 3.0), st.integers(0, n_links - 1), st.sampled_from([5e8, 1e9, 3e9])
            ),
            max_size=3,
        )
    )
    checks = draw(st.lists(st.floats(1e-3, 6.0), min_size=1, max_size=6))
    return {
        "caps": caps,
        "lats": lats,
        "jobs": jobs,
        "changes": changes,
        "checks": sorted(set(checks)),
    }


def build(case: dict) -> tuple[simpy.Environment, Network, list[float]]:
    env = simpy.Environment()
    links = [
        Link(i, f"l{i}", f"n{i}", f"n{i + 1}", bw, lat)
        for i, (bw, lat) in enumerate(zip(case["caps"], case["lats"]))
    ]
    net = Network(env, links)
    ends = [math.nan] * len(case["jobs"])

    def job(i: int, start: float, idx: list[int], size: float):
        yield env.timeout(start)
        chosen = tuple(links[k] for k in idx)
        r = Route(
            chosen,
            sum(link.latency_s for link in chosen),
            min(link.bandwidth_Bps for link in chosen),
        )
        yield net.transfer(r, size)
        ends[i] = env.now

    def change(at: float, k: int, bw: float):
        yield env.timeout(at)
        net.set_bandwidth(k, bw)

    for i, (start, idx, size) in enumerate(case["jobs"]):
        env.process(job(i, start, idx, size))
    for at, k, bw in case["changes"]:
        env.process(change(at, k, bw))
    return env, net, ends


def reference_times(case: dict) -> list[float]:
    """Completion times by a naive simulator: full max-min solve between events."""
    caps = list(case["caps"])
    lats = case["lats"]
    pending = sorted(
        (start + sum(lats[k] for k in idx), i, idx, size)
        for i, (start, idx, size) in enumerate(case["jobs"])
    )
    changes = sorted((at, n, k, bw) for n, (at, k, bw) in enumerate(case["changes"]))
    ends = [math.nan] * len(case["jobs"])
    active: dict[int, tuple[list[int], float]] = {}
    t = 0.0
    while pending or active:
        ids = list(active)
        rates = max_min_rates([active[i][0] for i in ids], caps)
        finish = {i: t + active[i][1] / r for i, r in zip(ids, rates) if r > 0}
        nxt = min(
            [
                *finish.values(),
                pending[0][0] if pending else math.inf,
                changes[0][0] if changes else math.inf,
            ]
        )
        assert nxt < math.inf
        for i, r in zip(ids, rates):
            links, rem = active[i]
            if finish.get(i, math.inf) <= nxt:
                ends[i] = nxt
                del active[i]
            else:
                active[i] = (links, rem - r * (nxt - t))
        t = nxt
        while changes and changes[0][0] <= t:
            _, _, k, bw = changes.pop(0)
            caps[k] = bw
        while pending and pending[0][0] <= t:
            _, i, idx, size = pending.pop(0)
            if size == 0:
                ends[i] = t
            else:
                active[i] = (idx, size)
    return ends


@settings(max_examples=120, deadline=None)
@given(network_cases())
def test_incremental_network_matches_full_solver(case: dict) -> None:
    env, net, ends = build(case)
    for t in case["checks"]:
        env.run(until=t)
        flows = net.active()
        caps = [net.bandwidth_Bps(k) for k in range(len(case["caps"]))]
        expected = max_min_rates([f.links for f in flows], caps)
        assert [f.rate_Bps for f in flows] == pytest.approx(expected, rel=REL)
        for f in flows:
            assert 0.0 <= f.remaining_bytes(env.now) <= f.size_bytes
    env.run()
    assert net.in_flight == 0
    assert ends == pytest.approx(reference_times(case), rel=REL)
    # Every byte is accounted for on every link it crossed.
    carried = [0.0] * len(case["caps"])
    for _, idx, size in case["jobs"]:
        for k in idx:
            carried[k] += size
    assert [s.bytes for s in net.link_stats()] == pytest.approx(carried, rel=1e-12)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_incremental_network_matches_reference_on_a_larger_case(seed: int) -> None:
    import random

    rng = random.Random(seed)
    n_links = 16
    case = {
        "caps": [rng.choice([1e9, 2.5e9, 1e10]) for _ in range(n_links)],
        "lats": [rng.choice([0.0, 1e-6, 1e-3]) for _ in range(n_links)],
        "jobs": [
            (
                rng.choice([0.0, 0.01, rng.uniform(0.0, 0.5)]),
                rng.sample(range(n_links), rng.randint(1, 5)),
                rng.choice([1e6, 5e7, rng.uniform(1e6, 4e8)]),
            )
            for _ in range(160)
        ],
        "changes": [
            (rng.uniform(0.0, 1.0), rng.randrange(n_links), rng.choice([5e8, 2e9]))
            for _ in range(4)
        ],
        "checks": sorted(rng.uniform(0.0, 2.0) for _ in range(8)),
    }
    env, net, ends = build(case)
    for t in case["checks"]:
        env.run(until=t)
        flows = net.active()
        caps = [net.bandwidth_Bps(k) for k in range(n_links)]
        assert [f.rate_Bps for f in flows] == pytest.approx(
            max_min_rates([f.links for f in flows], caps), rel=REL
        )
    env.run()
    assert ends == pytest.approx(reference_times(case), rel=REL)
    assert net.solver_calls > 0


# ------------------------------------------- vectorised fill against the loop


def random_instance(seed: int, n_flows: int, n_links: int) -> tuple[list[list[int]], list[float]]:
    """Random flows over 0..5 links; capacities include 0, inf and ties."""
    import random

    rng = random.Random(seed)
    caps = [
        rng.choice([0.0, 1.0, 2.0, 2.0, 3.0, 0.7, 12.5e9, 1.25e10, math.inf])
        * rng.choice([1.0, 1.0, 1.1, 1.0 / 3.0])
        for _ in range(n_links)
    ]
    flows = [rng.sample(range(n_links), rng.randint(0, min(5, n_links))) for _ in range(n_flows)]
    return flows, caps


@pytest.mark.parametrize("n_links", [1, 3, 12, 60, 400])
@pytest.mark.parametrize("n_flows", [1, 2, 7, 40, 300, 2000])
def test_vectorised_fill_is_bit_identical_to_the_heap_loop(
    monkeypatch: pytest.MonkeyPatch, n_flows: int, n_links: int
) -> None:
    """fill_arrays takes the same steps as _Solver.fill, so the rates are equal to the bit."""
    import clustersim.network.solver as network

    for seed in range(4):
        flows, caps = random_instance(seed * 1000 + n_flows + n_links, n_flows, n_links)
        monkeypatch.setattr(network, "NUMPY_FILL_MIN_FLOWS", 1 << 60)
        loop = max_min_rates(flows, caps)
        monkeypatch.setattr(network, "NUMPY_FILL_MIN_FLOWS", 0)
        vectorised = max_min_rates(flows, caps)
        assert [r.hex() for r in vectorised] == [r.hex() for r in loop]


@pytest.mark.parametrize("seed", [1, 2])
def test_network_with_vectorised_fill_gives_bit_identical_times(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """A Network whose every component goes through fill_arrays ends every flow at the same instant."""
    import random

    import clustersim.network.solver as network

    rng = random.Random(seed)
    n_links = 12
    case = {
        "caps": [rng.choice([1e9, 2.5e9, 1e10]) for _ in range(n_links)],
        "lats": [rng.choice([0.0, 1e-6, 1e-3]) for _ in range(n_links)],
        "jobs": [
            (rng.uniform(0.0, 0.5), rng.sample(range(n_links), rng.randint(1, 4)), 5e7)
            for _ in range(120)
        ],
        "changes": [(rng.uniform(0.0, 1.0), rng.randrange(n_links), 5e8) for _ in range(3)],
        "checks": [],
    }
    monkeypatch.setattr(network, "NUMPY_FILL_MIN_FLOWS", 1 << 60)
    _, loop_net, loop_ends = build(case)
    loop_net.env.run()
    monkeypatch.setattr(network, "NUMPY_FILL_MIN_FLOWS", 2)
    _, vec_net, vec_ends = build(case)
    vec_net.env.run()
    assert vec_ends == loop_ends
    assert vec_net.solver_calls == loop_net.solver_calls > 0
