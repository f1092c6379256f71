"""Benchmark of the max-min rate solver and of the flow-level network.

Run: ``.venv/bin/python bench/bench_rate_solver.py [--quick]``.  Prints
throughputs; asserts nothing.

* ``solver``: :func:`max_min_rates` on one large random connected component
  (``F`` flows, each over 2..5 random links out of ``L``), and its core
  (progressive filling on prepared tables, what a Network recomputation runs).
* ``ring``: a ring all-reduce pattern, ``2 (n - 1)`` steps of ``n``
  simultaneous, uncontended neighbour transfers (no solver needed).
* ``contended``: flows from every node of several racks crossing a shared
  uplink, started at staggered times, so every arrival and departure
  re-solves one large component.
"""

from __future__ import annotations

import argparse
import random
import time

import simpy

from clustersim.network import Network, max_min_rates
from clustersim.network.solver import _Solver, _SolverFlow
from clustersim.topology import Link, Route


def make_route(*links: Link) -> Route:
    return Route(tuple(links), sum(x.latency_s for x in links), min(x.bandwidth_Bps for x in links))


def bench_solver(n_links: int, n_flows: int, seed: int = 1) -> None:
    """max_min_rates on one random component; also its core (the part the Network runs)."""
    rng = random.Random(seed)
    caps = [
        rng.choice([1.25e9, 2.5e9, 1.25e10, 2.5e10]) * rng.uniform(0.5, 1.5) for _ in range(n_links)
    ]
    flows = [rng.sample(range(n_links), rng.randint(2, 5)) for _ in range(n_flows)]
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        max_min_rates(flows, caps)
        best = min(best, time.perf_counter() - t0)
    # The core alone, on prepared per-link flow tables (as the Network keeps them).
    objs = [_SolverFlow(tuple(f)) for f in flows]
    users: list[dict[int, _SolverFlow]] = [{} for _ in range(n_links)]
    for i, f in enumerate(objs):
        for link in f.links:
            users[link][i] = f
    comp_links = [link for link in range(n_links) if users[link]]
    solver = _Solver(n_links)
    core = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        solver.fill(comp_links, objs, users, caps)
        core = min(core, time.perf_counter() - t0)
    nnz = sum(len(f) for f in flows)
    print(
        f"solver     L={n_links:>6} F={n_flows:>7} flow-links={nnz:>8}: max_min_rates {best * 1e3:7.1f} ms"
        f" ({n_flows / best:>9,.0f} flows/s), core {core * 1e3:7.1f} ms ({n_flows / core:>9,.0f} flows/s)"
    )


def bench_ring(n: int) -> None:
    env = simpy.Environment()
    links = [
        Link(i, f"gpu{i}->gpu{(i + 1) % n}", f"gpu{i}", f"gpu{(i + 1) % n}", 2.5e10, 1e-6)
        for i in range(n)
    ]
    net = Network(env, links)
    routes = [make_route(link) for link in links]
    chunk = 1e8 / n

    def gpu(i: int):
        for _ in range(2 * (n - 1)):
            yield net.transfer(routes[i], chunk)

    for i in range(n):
        env.process(gpu(i))
    t0 = time.perf_counter()
    env.run()
    wall = time.perf_counter() - t0
    count = net.flows_completed
    print(
        f"ring       n={n:>5} transfers={count:>8}: {wall:8.2f} s  {count / wall:>10,.0f} transfers/s"
        f"  (recomputations {net.recomputations}, solver calls {net.solver_calls})"
    )


def bench_contended(racks: int, nodes: int, flows_per_node: int, seed: int = 2) -> None:
    rng = random.Random(seed)
    env = simpy.Environment()
    links: list[Link] = []

    def add(src: str, dst: str, bw: float) -> Link:
        link = Link(len(links), f"{src}->{dst}", src, dst, bw, 1e-6)
        links.append(link)
        return link

    spine_up = [add(f"tor{r}", "spine", 4 * 1.25e10) for r in range(racks)]
    spine_down = [add("spine", f"tor{r}", 4 * 1.25e10) for r in range(racks)]
    nic_up = [[add(f"n{r}.{k}", f"tor{r}", 1.25e10) for k in range(nodes)] for r in range(racks)]
    nic_down = [[add(f"tor{r}", f"n{r}.{k}", 1.25e10) for k in range(nodes)] for r in range(racks)]
    net = Network(env, links)

    def node(r: int, k: int):
        for _ in range(flows_per_node):
            yield env.timeout(rng.uniform(0.0, 1e-3))
            r2 = rng.randrange(racks - 1)
            r2 += r2 >= r
            k2 = rng.randrange(nodes)
            route = make_route(nic_up[r][k], spine_up[r], spine_down[r2], nic_down[r2][k2])
            yield net.transfer(route, rng.choice([1e6, 1e7, 5e7]))

    for r in range(racks):
        for k in range(nodes):
            env.process(node(r, k))
    t0 = time.perf_counter()
    env.run()
    wall = time.perf_counter() - t0
    count = net.flows_completed
    print(
        f"contended  {racks}x{nodes} nodes transfers={count:>7}: {wall:8.2f} s  {count / wall:>10,.0f} transfers/s"
        f"  (recomputations {net.recomputations}, flows re-rated/recomputation"
        f" {net.flows_rerated / max(1, net.recomputations):.0f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    args = parser.parse_args()
    if args.quick:
        bench_solver(1_000, 10_000)
        bench_ring(128)
        bench_contended(4, 8, 50)
        return
    bench_solver(1_000, 10_000)
    bench_solver(10_000, 100_000)
    bench_solver(2_000, 200_000)
    bench_ring(256)
    bench_ring(1024)
    bench_contended(8, 16, 200)


if __name__ == "__main__":
    main()
