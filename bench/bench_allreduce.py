"""Ring all-reduce of 1 GB over 1,024 GPUs (128 nodes of 8 in 16 racks, 4:1 uplinks), flow-level.

Prints wall-clock seconds and transfers simulated per wall-clock second, beside
bare SimPy's timeouts per second measured in the same run, twice: as clustersim plays it
(alone in the simulation, the ring is played whole: clustersim.collectives.ring_replay)
and send by send through the network's timer queue (ring_replay.REPLAY off), with the
ratio of the two. Nothing is asserted.
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
    # imported here: bench_per_send.py imports this file's helpers on engines without it
    from clustersim.collectives import ring_replay

    topology = build_topology(parse_scenario(doc).cluster)
    devices = tuple(d.name for d in topology.select("*/gpu*"))
    call = CollectiveCall("allreduce", devices, args.bytes, "ring")
    print(
        f"ring all-reduce of {args.bytes:.3g} B over {call.n} GPUs ({args.racks} racks, {args.oversubscription:g}:1 uplinks)"
    )
    bare = bare_simpy_rate()
    rates = {}
    for whole in (True, False):  # alone, the ring is played whole; then send by send
        ring_replay.REPLAY = whole
        sim = Simulation(topology)
        t0 = time.perf_counter()
        run_collective(sim, call)
        built = time.perf_counter()
        sim.run()
        done = time.perf_counter()
        transfers = sim.network.flows_completed
        rates[whole] = rate = transfers / (done - t0)
        print(
            f"  {'played whole' if whole else 'send by send'} (rings whole: {sim.network.rings_whole})"
        )
        print(f"    simulated time            : {sim.now * 1e3:.6f} ms")
        print(
            f"    wall: schedule {built - t0:.2f} s + run {done - built:.2f} s = {done - t0:.2f} s"
        )
        print(
            f"    transfers                 : {transfers:,} ({rate:,.0f} per wall second, rate recomputations {sim.network.recomputations})"
        )
        print(f"    transfers/s over SimPy events/s: {rate / bare:.2f}")
    print(f"  bare SimPy timeouts       : {bare:,.0f} per second (same run)")
    print(f"  played whole over send by send: {rates[True] / rates[False]:.1f}x")


if __name__ == "__main__":
    main()
