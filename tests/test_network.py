"""Tests of clustersim.network.Network: timing, sharing, batching, statistics."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import simpy

from clustersim.errors import SimulationError
from clustersim.network import Flow, LinkStats, Network
from clustersim.topology import Link, Route


def make_links(specs: list[tuple[float, float]]) -> list[Link]:
    """Links ``n{i} -> n{i+1}`` from (bandwidth_Bps, latency_s) pairs."""
    return [
        Link(i, f"n{i}->n{i + 1}", f"n{i}", f"n{i + 1}", bw, lat)
        for i, (bw, lat) in enumerate(specs)
    ]


def route(*links: Link) -> Route:
    return Route(
        tuple(links),
        sum(link.latency_s for link in links),
        min((link.bandwidth_Bps for link in links), default=float("inf")),
    )


def run_transfers(
    net: Network, jobs: list[tuple[float, Route, float]], until: float | None = None
) -> list[float]:
    """Start transfer ``(start_s, route, size)`` for each job; return completion times."""
    env = net.env
    done = [float("nan")] * len(jobs)

    def job(i: int, start: float, r: Route, size: float):
        if start > env.now:
            yield env.timeout(start - env.now)
        yield net.transfer(r, size)
        done[i] = env.now

    for i, (start, r, size) in enumerate(jobs):
        env.process(job(i, start, r, size))
    env.run(until=until)
    return done


# --------------------------------------------------------------- uncontended


@pytest.mark.parametrize("size", [1.0, 1e3, 1.5e6, 1e9, 3.3e12])
@pytest.mark.parametrize("bw", [1e6, 1.25e9, 2.5e10, 3e11])
@pytest.mark.parametrize("lat", [0.0, 1e-9, 1.5e-6, 1e-3])
def test_uncontended_single_link_is_alpha_beta(size: float, bw: float, lat: float) -> None:
    env = simpy.Environment()
    links = make_links([(bw, lat)])
    net = Network(env, links)
    (t,) = run_transfers(net, [(0.0, route(links[0]), size)])
    assert t == pytest.approx(lat + size / bw, rel=1e-12, abs=0)
    assert net.flows_completed == 1
    assert net.active_flows == 0


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (0.0009888660386707026, 0.00937076180931465),
        (0.0012349548013580766, 0.005186339465557607),
        (0.0002215383579316424, 0.0016802926944690904),
    ],
)
def test_a_completion_lands_on_its_computed_instant(first: float, second: float) -> None:
    """Two transfers on their own 1 B/s links from t = 0 end at ``size / 1 B/s`` exactly:
    the second one's wake-up is armed when the first ends, at ``first``, and these pairs are
    ones where ``first + (second - first)`` rounds to another float than ``second`` (a wake-up
    scheduled by its delay would land an ulp off); the network puts its wake-ups at their
    instants."""
    assert first + (second - first) != second
    env = simpy.Environment()
    links = make_links([(1.0, 0.0), (1.0, 0.0)])
    net = Network(env, links)
    ends = run_transfers(net, [(0.0, route(links[0]), first), (0.0, route(links[1]), second)])
    assert ends == [first, second]


@pytest.mark.parametrize("hops", [2, 3, 4, 6])
@pytest.mark.parametrize("size", [7.0, 2.5e8, 1e12])
@pytest.mark.parametrize("start", [0.0, 0.37, 1234.5])
def test_uncontended_multi_hop_bottleneck_is_min(hops: int, size: float, start: float) -> None:
    specs = [(1e9 * (1 + (3 * h) % 5), 1e-6 * (h + 1)) for h in range(hops)]
    links = make_links(specs)
    env = simpy.Environment()
    net = Network(env, links)
    r = route(*links)
    (t,) = run_transfers(net, [(start, r, size)])
    expected = sum(lat for _, lat in specs) + size / min(bw for bw, _ in specs)
    # Relative to the absolute clock: time is a float of simulated seconds.
    assert t == pytest.approx(start + expected, rel=1e-12, abs=0)
    assert r.bottleneck_Bps == min(bw for bw, _ in specs)


def test_sequential_transfers_do_not_interact() -> None:
    env = simpy.Environment()
    links = make_links([(1e9, 1e-6), (4e9, 2e-6)])
    net = Network(env, links)
    r = route(*links)
    ends = []

    def proc():
        for size in (1e6, 3e6, 0.0, 5e9):
            t0 = env.now
            yield net.transfer(r, size)
            ends.append(env.now - t0)

    env.process(proc())
    env.run()
    assert ends == [pytest.approx(3e-6 + s / 1e9, rel=1e-12, abs=0) for s in (1e6, 3e6, 0.0, 5e9)]


# ------------------------------------------------------------------- sharing


def test_two_flows_share_a_link_equally() -> None:
    S, B = 1e9, 2e9
    env = simpy.Environment()
    links = make_links([(B, 0.0)])
    net = Network(env, links)
    r = route(links[0])
    t = run_transfers(net, [(0.0, r, S), (0.0, r, S)])
    assert t == [pytest.approx(2 * S / B, rel=1e-12)] * 2


def test_finished_flow_frees_bandwidth() -> None:
    S, B = 1e9, 1e9
    env = simpy.Environment()
    links = make_links([(B, 0.0)])
    net = Network(env, links)
    r = route(links[0])
    t = run_transfers(net, [(0.0, r, S), (0.0, r, 2 * S)])
    assert t[0] == pytest.approx(2 * S / B, rel=1e-12)
    assert t[1] == pytest.approx(3 * S / B, rel=1e-12)


def test_late_arrival_slows_the_first_flow() -> None:
    # A (2S) alone for S/B, then shares with B (S): both at B/2.
    S, B = 1e9, 1e9
    env = simpy.Environment()
    links = make_links([(B, 0.0)])
    net = Network(env, links)
    r = route(links[0])
    t = run_transfers(net, [(0.0, r, 2 * S), (1.0, r, S)])
    # From t=1: A has S left, B has S; both at B/2 -> both end at 3.
    assert t == [pytest.approx(3.0, rel=1e-12)] * 2


def two_rack(uplink_Bps: float, nic_Bps: float) -> tuple[Network, Route, Route]:
    """h0, h1 -> tor0 -> tor1 -> h2, h3 (the openmlsys example)."""
    names = [("h0", "tor0"), ("h1", "tor0"), ("tor0", "tor1"), ("tor1", "h2"), ("tor1", "h3")]
    bws = [nic_Bps, nic_Bps, uplink_Bps, nic_Bps, nic_Bps]
    links = [Link(i, f"{s}->{d}", s, d, bw, 0.0) for i, ((s, d), bw) in enumerate(zip(names, bws))]
    net = Network(simpy.Environment(), links)
    return net, route(links[0], links[2], links[3]), route(links[1], links[2], links[4])


def test_openmlsys_oversubscribed_uplink() -> None:
    net, r02, r13 = two_rack(uplink_Bps=1.25e9, nic_Bps=1.25e9)  # 10 Gb/s everywhere
    assert (
        run_transfers(net, [(0.0, r02, 1e9), (0.0, r13, 1e9)])
        == [pytest.approx(1.6, rel=1e-12)] * 2
    )
    stats = {s.name: s for s in net.link_stats()}
    assert stats["tor0->tor1"].peak_flows == 2
    assert stats["tor0->tor1"].bytes == 2e9


def test_openmlsys_full_bisection_uplink() -> None:
    net, r02, r13 = two_rack(uplink_Bps=2.5e9, nic_Bps=1.25e9)  # 20 Gb/s uplink
    assert (
        run_transfers(net, [(0.0, r02, 1e9), (0.0, r13, 1e9)])
        == [pytest.approx(0.8, rel=1e-12)] * 2
    )


def test_one_terabyte_over_200_gbps() -> None:
    env = simpy.Environment()
    links = make_links([(200e9 / 8, 0.0)])
    net = Network(env, links)
    assert run_transfers(net, [(0.0, route(links[0]), 1e12)]) == [pytest.approx(40.0, rel=1e-12)]


def test_parking_lot_in_time() -> None:
    # Links 0,1,2 of 1 GB/s; long flow over all three (2 GB); short flows of
    # 1 GB on link 0 and 2 GB on link 1.  All at B/2 until the short flow on
    # link 0 ends at 2 s; the long flow (1 GB left) keeps B/2 because link 1
    # still has two flows -> long and short1 both have 1 GB left at 2 s and
    # end at 4 s.
    env = simpy.Environment()
    links = make_links([(1e9, 0.0)] * 3)
    net = Network(env, links)
    t = run_transfers(
        net,
        [(0.0, route(*links), 2e9), (0.0, route(links[0]), 1e9), (0.0, route(links[1]), 2e9)],
    )
    assert t == [
        pytest.approx(4.0, rel=1e-12),
        pytest.approx(2.0, rel=1e-12),
        pytest.approx(4.0, rel=1e-12),
    ]


def test_transfer_returns_the_flow_as_event_with_times() -> None:
    env = simpy.Environment()
    links = make_links([(1e9, 1e-3)])
    net = Network(env, links)
    got: list[tuple[Flow, object]] = []

    def proc():
        yield env.timeout(2.0)
        flow = net.transfer(route(links[0]), 1e9)
        assert isinstance(flow, simpy.Event) and not flow.done
        value = yield flow
        got.append((flow, value))

    env.process(proc())
    env.run(until=2.5)
    assert net.in_flight == 1 and net.active_flows == 1
    (flow,) = net.active()
    assert flow.rate_Bps == 1e9
    assert flow.remaining_bytes(2.5) == pytest.approx(1e9 - 0.499e9, rel=1e-12)
    env.run()
    ((flow, value),) = got
    assert value is None
    assert isinstance(flow, Flow) and flow.done and flow.processed
    assert flow.start_s == 2.0
    assert flow.arrival_s == pytest.approx(2.001, rel=1e-12)
    assert flow.end_s == pytest.approx(3.001, rel=1e-12)
    assert flow.links == (0,)
    assert flow.remaining_bytes(env.now) == 0.0
    assert net.in_flight == 0 and net.active_flows == 0


# ---------------------------------------------------------- batching / scope


def test_simultaneous_arrivals_cause_one_recomputation() -> None:
    env = simpy.Environment()
    links = make_links([(1e9, 2e-6), (2e9, 0.0), (1e9, 0.0)])
    net = Network(env, links)
    routes = [route(links[0], links[1]), route(links[0]), route(links[0], links[1], links[2])]
    jobs = [(0.0, routes[i % 3], 1e6 * (1 + i % 7)) for i in range(100)]
    # All routes have 2 us of latency: all 100 arrive at one instant.
    run_transfers(net, jobs, until=1e-5)
    assert net.active_flows == 100
    assert net.recomputations == 1
    env.run()
    assert net.flows_completed == 100


def test_zero_latency_arrivals_at_one_instant_cause_one_recomputation() -> None:
    env = simpy.Environment()
    links = make_links([(1e9, 0.0)])
    net = Network(env, links)
    r = route(links[0])
    t = run_transfers(net, [(0.5, r, 1e9)] * 100)
    assert net.recomputations == 1  # all 100 end together: no flow left to re-rate
    assert t == [pytest.approx(0.5 + 100.0, rel=1e-12)] * 100


def test_departure_and_arrival_at_one_instant_batched() -> None:
    # A (S) and B (3S) share the link; when A ends (2S/B) its process starts
    # C (S) at once.  Departure of A and arrival of C: one recomputation.
    S, B = 1e9, 1e9
    env = simpy.Environment()
    links = make_links([(B, 0.0)])
    net = Network(env, links)
    r = route(links[0])
    ends: dict[str, float] = {}

    def a():
        yield net.transfer(r, S)
        ends["A"] = env.now
        yield net.transfer(r, S)
        ends["C"] = env.now

    def b():
        yield net.transfer(r, 3 * S)
        ends["B"] = env.now

    env.process(a())
    env.process(b())
    env.run()
    assert ends["A"] == pytest.approx(2.0, rel=1e-12)
    assert ends["C"] == pytest.approx(4.0, rel=1e-12)
    assert ends["B"] == pytest.approx(5.0, rel=1e-12)
    assert net.recomputations == 3  # t=0, t=2 (A out, C in), t=4 (C out)


def test_recomputation_leaves_other_components_alone() -> None:
    env = simpy.Environment()
    links = make_links([(1e9, 0.0), (1e9, 0.0), (1e9, 0.0)])
    net = Network(env, links)
    flows: dict[str, Flow] = {}
    ends: dict[str, float] = {}

    def start(name: str, at: float, r: Route, size: float):
        yield env.timeout(at)
        flow = net.transfer(r, size)
        flows[name] = flow
        yield flow
        ends[name] = env.now

    env.process(start("X", 0.0, route(links[0]), 100e9))
    for k in range(5):
        # Y and Z share link 2 at 0.5 GB/s: Y ends after 2 s, Z alone 1 s later.
        env.process(start(f"Y{k}", 1.0 + 5 * k, route(links[1], links[2]), 1e9))
        env.process(start(f"Z{k}", 1.0 + 5 * k, route(links[2]), 2e9))
    env.run(until=0.5)
    x = flows["X"]
    version = x._version
    rerated = net.flows_rerated
    assert rerated == 0  # X found its link idle: rated on arrival, no recomputation
    assert x.rate_Bps == 1e9
    env.run(until=50.0)  # all bursts are over, X is still moving
    assert x._version == version  # never re-rated after its first rate
    assert x.rate_Bps == 1e9
    env.run()
    # Per burst: Y and Z re-rated when Z joins Y, Z alone when Y leaves.
    assert net.flows_rerated - rerated == 5 * 3
    assert net.solver_calls == 5
    assert net.recomputations == 5 * 2
    assert ends["X"] == 100.0
    for k in range(5):
        assert ends[f"Y{k}"] == pytest.approx(3.0 + 5 * k, rel=1e-12)
        assert ends[f"Z{k}"] == pytest.approx(4.0 + 5 * k, rel=1e-12)


def test_flow_alone_on_its_links_skips_the_solver() -> None:
    env = simpy.Environment()
    links = make_links([(1e9, 0.0), (2e9, 0.0), (3e9, 0.0), (4e9, 0.0)])
    net = Network(env, links)
    jobs = [(0.0, route(links[0], links[1]), 1e9), (0.0, route(links[2], links[3]), 1e9)]
    t = run_transfers(net, jobs)
    assert t == [1.0, pytest.approx(1 / 3, rel=1e-12)]
    assert net.solver_calls == 0
    assert net.recomputations == 0  # both were rated on arrival


# ------------------------------------------------------------- set_bandwidth


def test_set_bandwidth_halves_mid_transfer() -> None:
    env = simpy.Environment()
    links = make_links([(1e9, 1e-3)])
    net = Network(env, links)

    def degrade():
        yield env.timeout(0.251)
        net.set_bandwidth(0, 5e8)

    env.process(degrade())
    (t,) = run_transfers(net, [(0.0, route(links[0]), 1e9)])
    # 0.25 s at 1 GB/s moves 0.25e9; 0.75e9 left at 0.5 GB/s -> 1.5 s more.
    assert t == pytest.approx(0.251 + 1.5, rel=1e-12)
    assert net.bandwidth_Bps(0) == 5e8


def test_set_bandwidth_on_shared_link_and_back() -> None:
    env = simpy.Environment()
    links = make_links([(2e9, 0.0)])
    net = Network(env, links)

    def degrade():
        yield env.timeout(0.5)
        net.set_bandwidth(0, 1e9)
        yield env.timeout(1.0)
        net.set_bandwidth(0, 2e9)

    env.process(degrade())
    t = run_transfers(net, [(0.0, route(links[0]), 2e9), (0.0, route(links[0]), 2e9)])
    # 0..0.5: 1e9 each -> 1.5e9 left each; 0.5..1.5: 0.5e9 each -> 1e9 left; then 1e9 each -> 2.5.
    assert t == [pytest.approx(2.5, rel=1e-12)] * 2
    assert net.recomputations == 3


def test_zero_bandwidth_stalls_until_restored() -> None:
    env = simpy.Environment()
    links = make_links([(1e9, 0.0)])
    net = Network(env, links)

    def outage():
        yield env.timeout(0.5)
        net.set_bandwidth(0, 0.0)
        yield env.timeout(10.0)
        net.set_bandwidth(0, 1e9)

    env.process(outage())
    (t,) = run_transfers(net, [(0.0, route(links[0]), 1e9)])
    assert t == pytest.approx(11.0, rel=1e-12)


def test_set_bandwidth_and_arrival_at_one_instant_batched() -> None:
    env = simpy.Environment()
    links = make_links([(1e9, 0.0)])
    net = Network(env, links)

    def degrade():
        yield env.timeout(1.0)
        net.set_bandwidth(0, 2e9)

    env.process(degrade())
    t = run_transfers(net, [(0.0, route(links[0]), 3e9), (1.0, route(links[0]), 1e9)])
    # at 1: A has 2e9 left; both at 1e9/s -> B ends at 2, A alone at 2e9/s -> 2.5.
    assert t == [pytest.approx(2.5, rel=1e-12), pytest.approx(2.0, rel=1e-12)]
    assert net.recomputations == 2  # t=1 (new bandwidth + B), t=2 (B leaves); A was alone at 0


def test_many_rate_changes_keep_exact_times_and_bounded_queue() -> None:
    # A long flow shares its link with 3000 short flows separated by gaps:
    # it is re-rated twice per short flow, leaving stale timer entries that
    # must be compacted away without disturbing its completion time.
    S, B, s, gap, n = 1e12, 1e9, 1e6, 1e-3, 3000
    env = simpy.Environment()
    links = make_links([(B, 0.0)])
    net = Network(env, links)
    r = route(links[0])
    ends: dict[str, float] = {}
    sizes = []

    def long():
        yield net.transfer(r, S)
        ends["long"] = env.now

    def shorts():
        for _ in range(n):
            yield net.transfer(r, s)
            yield env.timeout(gap)
        sizes.append(len(net._buckets))

    env.process(long())
    env.process(shorts())
    env.run()
    # Per cycle: short at B/2 for 2s/B (long moves s), then long alone for gap.
    moved = n * (s + B * gap)
    expected = n * (2 * s / B + gap) + (S - moved) / B
    assert ends["long"] == pytest.approx(expected, rel=1e-9)
    assert sizes[0] <= 4096 + 8  # stale entries were dropped
    assert net.rate_changes >= 2 * n


# ------------------------------------------------------------- edge cases


def test_zero_bytes_takes_latency_only() -> None:
    env = simpy.Environment()
    links = make_links([(1e9, 2e-6), (1e9, 3e-6)])
    net = Network(env, links)
    (t,) = run_transfers(net, [(1.0, route(*links), 0.0)])
    assert t == pytest.approx(1.0 + 5e-6, rel=1e-12)
    assert net.flows_completed == 1
    assert net.recomputations == 0
    assert all(s.peak_flows == 0 and s.bytes == 0 for s in net.link_stats())


def test_zero_bytes_zero_latency_and_empty_route_complete_at_once() -> None:
    env = simpy.Environment()
    links = make_links([(1e9, 0.0)])
    net = Network(env, links)
    order: list[tuple[str, float]] = []

    def proc(name: str, r: Route, size: float):
        yield env.timeout(3.0)
        ev = net.transfer(r, size)
        assert not ev.processed
        yield ev
        order.append((name, env.now))

    env.process(proc("empty", route(), 5e9))
    env.process(proc("zero", route(links[0]), 0.0))
    env.run()
    assert order == [("empty", 3.0), ("zero", 3.0)]
    assert net.flows_completed == 2
    assert net.in_flight == 0


def test_bad_input_is_rejected() -> None:
    env = simpy.Environment()
    links = make_links([(1e9, 0.0)])
    net = Network(env, links)
    with pytest.raises(SimulationError):
        net.transfer(route(links[0]), -1.0)
    with pytest.raises(SimulationError):
        net.transfer(route(links[0]), float("nan"))
    with pytest.raises(SimulationError):
        net.set_bandwidth(0, -5.0)
    with pytest.raises(SimulationError):
        net.set_bandwidth(0, float("nan"))
    with pytest.raises(SimulationError):
        Network(env, [Link(3, "x", "a", "b", 1e9, 0.0)])
    other = Link(7, "y", "a", "b", 1e9, 0.0)
    with pytest.raises(SimulationError):
        net.transfer(route(other), 1.0)


# -------------------------------------------------------------- link stats


def test_link_stats_exact() -> None:
    env = simpy.Environment()
    links = make_links([(1e9, 0.0), (2e9, 0.0), (1e9, 0.0)])
    net = Network(env, links)
    jobs = [
        (0.0, route(links[0]), 1e9),  # link0 busy 0..2 (shared)
        (0.0, route(links[0], links[1]), 1e9),  # link1 busy 0..2
        (5.0, route(links[1]), 4e9),  # link1 busy 5..7
    ]
    t = run_transfers(net, jobs)
    assert t == [pytest.approx(2.0), pytest.approx(2.0), pytest.approx(7.0)]
    stats = net.link_stats()
    assert all(isinstance(s, LinkStats) for s in stats)
    assert [(s.index, s.name) for s in stats] == [(i, links[i].name) for i in range(3)]
    assert [s.bytes for s in stats] == [2e9, 5e9, 0.0]
    assert [s.busy_s for s in stats] == [pytest.approx(2.0), pytest.approx(4.0), 0.0]
    assert [s.peak_flows for s in stats] == [2, 1, 0]


def test_link_stats_count_busy_time_to_now() -> None:
    env = simpy.Environment()
    links = make_links([(1e9, 0.5)])
    net = Network(env, links)
    run_transfers(net, [(0.0, route(links[0]), 4e9), (1.0, route(links[0]), 1e9)], until=2.0)
    (s,) = net.link_stats()
    assert s.busy_s == pytest.approx(1.5)  # active since 0.5 (after the latency)
    assert s.bytes == 0.0  # nothing finished yet
    assert s.peak_flows == 2
    env.run()
    (s,) = net.link_stats()
    assert s.busy_s == pytest.approx(5.0)
    assert s.bytes == 5e9


# ------------------------------------------------------------- determinism


def _scenario_times() -> list[float]:
    import random

    rng = random.Random(7)
    env = simpy.Environment()
    links = make_links(
        [(rng.choice([1e9, 2.5e9, 1.25e10]), rng.choice([0.0, 1e-6])) for _ in range(12)]
    )
    net = Network(env, links)
    jobs = []
    for _ in range(300):
        k = rng.randint(1, 4)
        chosen = rng.sample(links, k)
        jobs.append(
            (rng.choice([0.0, 0.1, 0.2, rng.random()]), route(*chosen), rng.choice([1e6, 3e7, 1e8]))
        )
    return run_transfers(net, jobs)


def test_identical_runs_give_identical_times() -> None:
    a = _scenario_times()
    b = _scenario_times()
    assert a == b  # bit-identical
    assert all(t == t for t in a)


def test_times_do_not_depend_on_hash_seed() -> None:
    root = Path(__file__).resolve().parents[1]
    code = textwrap.dedent(
        """
        import sys
        sys.path[:0] = [{root!r}, {tests!r}]
        import test_network
        print(repr(test_network._scenario_times()))
        """
    ).format(root=str(root), tests=str(root / "tests"))
    outs = set()
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        assert res.returncode == 0, res.stderr
        outs.add(res.stdout)
    outs.add(repr(_scenario_times()) + "\n")
    assert len(outs) == 1
