"""Ring all-reduce of 1 GB over 1,024 GPUs (128 nodes of 8 in 16 racks, 4:1 uplinks), flow-level.

Prints wall-clock seconds and transfers simulated per wall-clock second, beside
bare SimPy's timeouts per second measured in the same run (target: at least a
quarter of bare SimPy's event rate per transfer). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import time

import simpy

from clustersim.collectives import CollectiveCall, run_collective
from clustersim.engine import Simulation
from clustersim.scenario import parse_scenario
from clustersim.topology import build_topology


def bare_simpy_rate(events: int = 300_000, processes: int = 100) -> float:
    """Plain SimPy timeouts per wall-clock second on this machine, now."""
    env = simpy.Environment()

    def worker(n: int):
        for _ in range(n):
            yield env.timeout(1e-6)

    for _ in range(processes):
        env.process(worker(events // processes))
    t0 = time.perf_counter()
    env.run()
    return events / (time.perf_counter() - t0)


def cluster(racks: int, nodes_per_rack: int, gpus: int, oversubscription: float) -> dict:
    """The benchmark's two-tier cluster section."""
    return {
        "racks": racks,
        "nodes_per_rack": nodes_per_rack,
        "node": {
            "gpus": gpus,
            "pcie": {"bandwidth": "32GB/s", "latency": "1us"},
            "nvlink": {"bandwidth": "300GB/s", "latency": "1us"},
            "nic": {"bandwidth": "100Gb/s", "latency": "2us"},
        },
        "rack_uplink": {"oversubscription": oversubscription},
        "spines": 2,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--racks", type=int, default=16)
    parser.add_argument("--nodes-per-rack", type=int, default=8)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--oversubscription", type=float, default=4.0)
    parser.add_argument("--bytes", type=float, default=1e9)
    args = parser.parse_args()
    doc = {
        "name": "bench-allreduce",
        "cluster": cluster(args.racks, args.nodes_per_rack, args.gpus, args.oversubscription),
        "workload": {"program": []},
    }
    t0 = time.perf_counter()
    topology = build_topology(parse_scenario(doc).cluster)
    sim = Simulation(topology)
    call = CollectiveCall(
        "allreduce", tuple(d.name for d in topology.select("*/gpu*")), args.bytes, "ring"
    )
    run_collective(sim, call)
    built = time.perf_counter()
    sim.run()
    done = time.perf_counter()
    transfers = sim.network.flows_completed
    rate = transfers / (done - t0)
    bare = bare_simpy_rate()
    print(
        f"ring all-reduce of {args.bytes:.3g} B over {call.n} GPUs ({args.racks} racks, {args.oversubscription:g}:1 uplinks)"
    )
    print(f"  simulated time            : {sim.now * 1e3:.3f} ms")
    print(f"  wall: build {built - t0:.2f} s + run {done - built:.2f} s = {done - t0:.2f} s")
    print(
        f"  transfers                 : {transfers:,} ({rate:,.0f} per wall second, rate recomputations {sim.network.recomputations})"
    )
    print(f"  bare SimPy timeouts       : {bare:,.0f} per second (same run)")
    print(f"  transfers/s over SimPy events/s: {rate / bare:.2f} (target >= 0.25)")


if __name__ == "__main__":
    main()
