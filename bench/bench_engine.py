"""Engine overhead: compute events through clustersim against bare SimPy timeouts.

Both run the same number of events (processes x events each) in this one run,
on this machine; the printed ratio is what matters (target: clustersim within
3x of bare SimPy per event). Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import time

import simpy

from clustersim.engine import Simulation
from clustersim.scenario import parse_scenario
from clustersim.topology import build_topology


def bare_simpy(processes: int, events: int) -> float:
    """Wall seconds for processes x events plain SimPy timeouts."""
    env = simpy.Environment()

    def worker(env: simpy.Environment, n: int):
        for _ in range(n):
            yield env.timeout(1e-3)

    for _ in range(processes):
        env.process(worker(env, events))
    t0 = time.perf_counter()
    env.run()
    return time.perf_counter() - t0


def clustersim_compute(processes: int, events: int) -> float:
    """Wall seconds for the same count of Simulation.compute events, one device per process."""
    doc = {
        "name": "bench-engine",
        "cluster": {"kind": "switch", "devices": processes, "link": {"bandwidth": "100GB/s"}},
        "workload": {"program": [{"id": "x", "compute": {"device": "gpu0", "seconds": "1ms"}}]},
    }
    sim = Simulation(build_topology(parse_scenario(doc).cluster))

    def worker(sim: Simulation, device: str, n: int):
        for i in range(n):
            yield sim.compute(device, seconds=1e-3, label="step", iteration=i)

    for p in range(processes):
        sim.process(worker(sim, f"gpu{p}", events))
    t0 = time.perf_counter()
    sim.run()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--processes", type=int, default=100)
    parser.add_argument("--events", type=int, default=3000, help="events per process")
    args = parser.parse_args()
    n = args.processes * args.events
    bare = min(bare_simpy(args.processes, args.events) for _ in range(3))
    ours = min(clustersim_compute(args.processes, args.events) for _ in range(3))
    print(f"engine overhead: {n} compute events (best of 3)")
    print(f"  bare SimPy timeouts : {n / bare:12,.0f} events/s")
    print(f"  clustersim compute  : {n / ours:12,.0f} events/s")
    print(f"  ratio clustersim / SimPy time per event: {ours / bare:.2f}x (target <= 3x)")


if __name__ == "__main__":
    main()
