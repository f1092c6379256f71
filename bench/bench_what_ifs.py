"""Asymmetric what-ifs on 16,384 GPUs (issue 43): one replica of each class of alike replicas.

``scenarios/scale/gpt3_175b_16k.yaml`` as shipped (``simulate_replicas: one``), then with,
one at a time: one node whose GPUs are 1.3x slower; random stragglers (1% of the GPUs,
lognormal slowdowns, sigma 0.3); one ToR uplink at half its bandwidth; one pod of DGX H100
nodes among the A100 pods (node groups).  Each runs in a fresh process: the seconds of
``api.simulate``, the peak resident memory, the iteration time and the classes played
(clustersim/strategies/hybrid/replica_classes.py), and its time as a ratio to the shipped
run's in this same run.

``--cuts`` adds the comparison against every replica at flow level on a 1,024-GPU and a
2,048-GPU cut of the same fabric (one pod of 16 racks, dp 16; two pods, dp 32, across the
4:1 pod uplinks): how far one replica per class is from the per-send reference, for each
what-if (minutes).  Nothing is asserted.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scale import mb, measure, variant  # noqa: E402

WHAT_IFS: dict[str, dict[str, Any]] = {
    "one node 1.3x slower": {"stragglers": [{"devices": "pod0/rack2/node1/gpu*", "slowdown": 1.3}]},
    "1% random stragglers": {
        "stragglers": [
            {"random": {"fraction": 0.01, "slowdown": {"dist": "lognormal", "sigma": 0.3}}}
        ]
    },
    "one ToR uplink at half": {
        "stragglers": [{"links": "pod0/rack1/tor->pod0/spine0", "bandwidth_factor": 0.5}]
    },
    "one pod of H100 nodes": {
        "cluster__node": None,
        "cluster__node_groups": [
            {"preset": "dgx-a100", "count": 1920},
            {"preset": "dgx-h100", "count": 128},
        ],
    },
}
"""The what-ifs, as changes to the shipped scenario (``a__b``: key ``a.b``; None drops it)."""

CUTS: dict[str, dict[str, Any]] = {
    "1,024": {"cluster__pods": 1, "parallelism__dp": 16, "training__global_batch": 256},
    "2,048": {"cluster__pods": 2, "parallelism__dp": 32, "training__global_batch": 512},
}
"""The cuts: one pod of 16 racks (16 replicas of tp 8 x pp 8), and two pods (32)."""
NODES_PER_POD = 128
"""DGX nodes in one pod of the shipped fabric (16 racks of 8)."""


def what_if(folder: Path, changes: dict[str, Any], **more: Any) -> Path:
    """The shipped 16k scenario with ``changes`` (and ``more``) applied."""
    return variant("gpt3_175b_16k.yaml", folder, **more, **changes)


def cut_changes(changes: dict[str, Any], pods: int) -> dict[str, Any]:
    """A what-if moved onto a cut of ``pods`` pods: the H100 pod becomes 16 of its nodes."""
    if "cluster__node_groups" in changes:
        return {
            "cluster__node": None,
            "cluster__node_groups": [
                {"preset": "dgx-a100", "count": pods * NODES_PER_POD - 16},
                {"preset": "dgx-h100", "count": 16},
            ],
        }
    return changes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cuts", action="store_true", help="also the 1,024-GPU cut at flow level")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        base = measure(what_if(folder, {}))
        print("GPT-3 175B on 16,384 A100s, one replica of each class (fresh process each)")
        print(
            f"  {'as shipped':<24} {base['simulate_s']:6.1f} s  1.00x  peak {mb(base['peak']):>9}"
            f"  iteration {base['iteration_s']:.4f} s  classes {base['classes']}"
        )
        for name, changes in WHAT_IFS.items():
            got = measure(what_if(folder, changes))
            print(
                f"  {name:<24} {got['simulate_s']:6.1f} s {got['simulate_s'] / base['simulate_s']:5.2f}x"
                f"  peak {mb(got['peak']):>9}  iteration {got['iteration_s']:.4f} s"
                f"  classes {got['classes']}"
            )
        if not args.cuts:
            return
        for gpus, cut in CUTS.items():
            print(f"the {gpus}-GPU cut: one replica per class against every replica at flow level")
            for name, changes in {"as shipped": {}, **WHAT_IFS}.items():
                compare_on_cut(folder, name, cut_changes(changes, cut["cluster__pods"]), cut)


def compare_on_cut(folder: Path, name: str, changes: dict[str, Any], cut: dict[str, Any]) -> None:
    """Print one what-if on a cut: one replica per class against every replica per send."""
    one = measure(what_if(folder, changes, **cut))
    every = measure(
        what_if(
            folder, changes, **cut, parallelism__simulate_replicas="all", network={"model": "flow"}
        )
    )
    gap = one["iteration_s"] / every["iteration_s"] - 1
    print(
        f"  {name:<24} iteration {one['iteration_s']:.4f} s against {every['iteration_s']:.4f} s"
        f" ({gap:+.3%}); simulate {one['simulate_s']:.1f} s against {every['simulate_s']:.1f} s"
    )


if __name__ == "__main__":
    main()
