"""Contention: 1,024 hosts in 32 racks, each sending 100 MB to a random host in another rack.

Rack uplinks are 4:1 oversubscribed, so every cross-rack flow is contended at
the spine. Prints flows completed per wall-clock second and rate
recomputations per second, measured in this run (nothing is asserted).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from clustersim.api import simulate
from clustersim.scenario import parse_scenario


def scenario(racks: int, nodes_per_rack: int, spines: int, size: str, seed: int = 1) -> dict:
    """A program where every host sends ``size`` to a random host of another rack (seeded)."""
    rng = np.random.default_rng(seed)
    program = []
    for r in range(racks):
        for n in range(nodes_per_rack):
            dst_rack = (r + 1 + int(rng.integers(racks - 1))) % racks
            dst_node = int(rng.integers(nodes_per_rack))
            src, dst = f"rack{r}/node{n}/gpu0", f"rack{dst_rack}/node{dst_node}/gpu0"
            program.append({"id": f"r{r}n{n}", "transfer": {"src": src, "dst": dst, "bytes": size}})
    return {
        "name": "bench-contention",
        "cluster": {
            "racks": racks,
            "nodes_per_rack": nodes_per_rack,
            "node": {
                "gpus": 1,
                "pcie": {"bandwidth": "32GB/s"},
                "nic": {"bandwidth": "100Gb/s", "latency": "2us"},
            },
            "rack_uplink": {"oversubscription": 4},
            "spines": spines,
        },
        "workload": {"program": program},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--racks", type=int, default=32)
    parser.add_argument("--nodes-per-rack", type=int, default=32)
    parser.add_argument("--spines", type=int, default=4)
    parser.add_argument("--bytes", default="100MB")
    args = parser.parse_args()
    doc = scenario(args.racks, args.nodes_per_rack, args.spines, args.bytes)
    t0 = time.perf_counter()
    result = simulate(parse_scenario(doc))
    wall = time.perf_counter() - t0
    engine = result.summary["engine"]
    hosts = args.racks * args.nodes_per_rack
    print(
        f"contention: {hosts} hosts in {args.racks} racks, {args.spines} spines, 4:1 uplinks, {args.bytes} each"
    )
    print(f"  simulated makespan        : {result.makespan_s:.6f} s")
    print(f"  wall time (build + run)   : {wall:.3f} s")
    print(f"  flows completed per second: {engine['flows_completed'] / wall:,.0f}")
    print(
        f"  rate recomputations/second: {engine['rate_recomputations'] / wall:,.1f} ({engine['rate_recomputations']} in all)"
    )


if __name__ == "__main__":
    main()
