"""The weighted recomputation's shortcut for flows alone on their links, on and off.

A reducing switch's copies down (in-network all-reduce, SHARP) and the congestion-aware
analytical model's phases are weighted flows; most of a collective's pieces are alone on
their links.  :mod:`clustersim.network.weighted` rates such a flow by checking its links
one by one (``LONE_CHECK_LINKS``) instead of its component search's arrays.  For each case
this runs the same simulation with the shortcut and without it (``LONE_CHECK_LINKS = 0``)
in this process (after one run that warms the caches of the topology, then each way twice,
alternately, the faster kept) and prints both CPU times, their ratio and whether the end
times are the same float (they must be).  Nothing is asserted.

Cases: an in-network all-reduce of 1 GB over 256 GPUs in 16 racks (520,000 sends, half
of them weighted), and the shipped GPT-3 175B run on 16,384 GPUs with one replica standing
for all (``scenarios/scale/gpt3_175b_16k.yaml``: its data-parallel collectives are
weighted flows of the congestion-aware analytical model, whole phases of thousands of links
each, which the shortcut leaves to the search: it must not be slower).  Measured when it
landed (2 cores): 1.74x and 1.02x.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from clustersim.api import simulate
from clustersim.collectives import CollectiveCall, run_collective
from clustersim.engine import Simulation
from clustersim.network import weighted
from clustersim.scenario import parse_scenario
from clustersim.topology import build_topology

sys.path.insert(0, str(Path(__file__).resolve().parent))
from on_off import off_and_on  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def in_network(racks: int = 16, nodes: int = 16, size: float = 1e9) -> Callable[[], float]:
    """A run of an in-network all-reduce of ``size`` bytes over one GPU per node."""
    doc = {
        "name": "bench-lone-flows",
        "cluster": {
            "kind": "two_tier",
            "racks": racks,
            "nodes_per_rack": nodes,
            "node": {
                "gpus": 1,
                "pcie": {"bandwidth": "32GB/s", "latency": "0.5us"},
                "nic": {"bandwidth": "25GB/s", "latency": "1us"},
            },
            "rack_uplink": {"oversubscription": 1, "latency": "1us"},
            "sharp": True,
        },
        "workload": {"program": []},
    }
    topology = build_topology(parse_scenario(doc).cluster)
    ranks = tuple(d.name for d in topology.devices.values() if d.kind == "gpu")

    def run() -> float:
        sim = Simulation(topology)
        run_collective(sim, CollectiveCall("allreduce", ranks, size, algorithm="in_network"))
        sim.run()
        return sim.now

    return run


def shipped(name: str) -> Callable[[], float]:
    """A run of the shipped scenario ``name`` (its iteration time)."""
    path = ROOT / "scenarios" / name
    return lambda: simulate(path).typed_summary.header.makespan_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="the in-network case only")
    args = parser.parse_args()
    cases = {"in-network all-reduce, 1 GB, 256 GPUs": in_network()}
    if not args.quick:
        cases["GPT-3 175B, 16,384 GPUs, one replica"] = shipped("scale/gpt3_175b_16k.yaml")
    print(f"{'case':<44} {'search s':>9} {'shortcut s':>11} {'speed-up':>9}  same result")
    for name, run in cases.items():
        searched, short, want, got = off_and_on(run, weighted, "LONE_CHECK_LINKS", 0)
        print(f"{name:<44} {searched:9.2f} {short:11.2f} {searched / short:8.2f}x  {got == want}")


if __name__ == "__main__":
    main()
